//! The uprobe layer's probes: user-space stacks (lwIP) and VMM backends (QEMU) (vtrace-ebpf/src/uprobe.rs).

use crate::probes::catalog::{ProbeSpec, UprobeSize, uprobe_probe};

/// In attach order.
pub const UPROBE: &[ProbeSpec] = &[
    uprobe_probe!(
        "lwip:lwip_send",
        "uprobe",
        "lwIP socket send (bytes asked)",
        "liblwip.so.0",
        "lwip_send",
        UprobeSize::Arg(2)
    ),
    uprobe_probe!(
        "lwip:tcp_write",
        "uprobe",
        "lwIP TCP enqueue (bytes)",
        "liblwip.so.0",
        "tcp_write",
        UprobeSize::Arg(2)
    ),
    uprobe_probe!(
        "lwip:tcp_output",
        "uprobe",
        "lwIP TCP output",
        "liblwip.so.0",
        "tcp_output",
        UprobeSize::None
    ),
    uprobe_probe!(
        "lwip:ip4_output",
        "uprobe",
        "lwIP IPv4 output (packet bytes)",
        "liblwip.so.0",
        "ip4_output",
        UprobeSize::PbufArg(0)
    ),
    uprobe_probe!(
        "lwip:etharp_output",
        "uprobe",
        "lwIP ARP/Ethernet output (packet bytes)",
        "liblwip.so.0",
        "etharp_output",
        UprobeSize::PbufArg(1)
    ),
    uprobe_probe!(
        "lwip:ethernet_output",
        "uprobe",
        "lwIP Ethernet output (frame bytes)",
        "liblwip.so.0",
        "ethernet_output",
        UprobeSize::PbufArg(1)
    ),
    uprobe_probe!(
        "qemu:virtio_queue_notify",
        "vmm",
        "guest kicked a virtqueue (VMM backend)",
        "qemu-system-x86_64",
        "virtio_queue_notify",
        UprobeSize::None
    ),
    uprobe_probe!(
        "qemu:virtio_notify",
        "vmm",
        "VMM notifies the guest (interrupt)",
        "qemu-system-x86_64",
        "virtio_notify",
        UprobeSize::None
    ),
    uprobe_probe!(
        "qemu:virtio_notify_irqfd",
        "vmm",
        "VMM notifies the guest through an irqfd",
        "qemu-system-x86_64",
        "virtio_notify_irqfd",
        UprobeSize::None
    ),
    uprobe_probe!(
        "qemu:qemu_sendv_packet_async",
        "vmm",
        "VMM hands a guest packet to its backend (tap)",
        "qemu-system-x86_64",
        "qemu_sendv_packet_async",
        UprobeSize::None
    ),
];
