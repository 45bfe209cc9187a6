//! The path layer's probes (vtrace-ebpf/src/path/): tun/tap and
//! vhost-net functions (kprobes: they live in modules, whose split BTF aya
//! does not load for fentry) and the kvm/* tracepoints, each with programs
//! of this layer's own beside the tun and kvm layers'.

use crate::probes::catalog::{ProbeSpec, Strategy, kfunc_probe};

/// A kvm/* event read through its classic record, by this layer's program.
macro_rules! path_kvm_tracepoint {
    ($id:literal, $name:literal, $program:literal, $what:literal) => {
        ProbeSpec {
            id: $id,
            layer: "path",
            what: $what,
            strategies: &[Strategy::Tracepoint {
                program: $program,
                category: "kvm",
                name: $name,
            }],
        }
    };
}

/// A guest's virtio-net receive side, attached where virtio-net's poll
/// function is known (elsewhere they and their fallbacks would run for
/// nothing).
pub const VIRTIO_NET_RX: &[&str] = &["path:vring_interrupt", "path:vring_interrupt.ret", "path:virtnet_poll"];
/// The tracepoint that counts virtio-net's or a VF's received frames.
pub const NAPI_POLL: &str = "path:napi_poll";
/// A VF's poll starting (where one is in the guest).
pub const VF_RX_SOFTIRQ: &str = "path:vf_rx_softirq";
/// The tracepoint that counts its transmitted frames, where its device
/// operations are known (a data symbol: kallsyms has it with
/// CONFIG_KALLSYMS_ALL), and the one that also starts a tap's frames
/// (where tun or virtio-net is).
pub const VIRTIO_NET_TX: &[&str] = &["path:net_dev_xmit"];
pub const START_XMIT: &str = "path:net_dev_start_xmit";

/// In attach order.
pub const PATH: &[ProbeSpec] = &[
    ProbeSpec {
        id: "path:net_dev_start_xmit",
        layer: "path",
        what: "rx: a frame queued to a tap (its queue time starts); guest tx: virtio-net puts a frame on a transmit queue, \
               or a VF's driver starts to send one",
        strategies: &[
            Strategy::BtfTracepoint {
                program: "btf_path_net_dev_start_xmit",
                tracepoint: "net_dev_start_xmit",
            },
            Strategy::RawTracepoint {
                program: "raw_path_net_dev_start_xmit",
                tracepoint: "net_dev_start_xmit",
            },
        ],
    },
    kfunc_probe!(
        "path:tun_recvmsg",
        "path",
        "rx: vhost-net takes a frame from a tap (its queue time ends)",
        "tun_recvmsg",
        "fentry_path_tun_recvmsg",
        "kprobe_path_tun_recvmsg"
    ),
    // tun_ring_recv, where a VMM's read takes the frame, is static with one
    // caller and inlined on common kernels: the skb's free once copied out
    // (in tun_do_read, the reader's context) ends its wait instead.
    ProbeSpec {
        id: "path:consume_skb",
        layer: "path",
        what: "rx: a VMM's read took a frame from its tap (its queue time ends)",
        strategies: &[
            Strategy::BtfTracepoint {
                program: "btf_path_consume_skb",
                tracepoint: "consume_skb",
            },
            Strategy::RawTracepoint {
                program: "raw_path_consume_skb",
                tracepoint: "consume_skb",
            },
        ],
    },
    path_kvm_tracepoint!(
        "path:kvm_set_irq",
        "kvm_set_irq",
        "tp_path_kvm_set_irq",
        "rx: a thread that took frames raises a line for its guest"
    ),
    kfunc_probe!(
        "path:irqfd_wakeup",
        "path",
        "rx: a thread that took frames signals its guest through an irqfd (MSI or line)",
        "irqfd_wakeup",
        "fentry_path_irqfd_wakeup",
        "kprobe_path_irqfd_wakeup"
    ),
    path_kvm_tracepoint!(
        "path:kvm_apic_accept_irq",
        "kvm_apic_accept_irq",
        "tp_path_kvm_apic_accept_irq",
        "rx: the vector a raised line delivers (learnt, to pair its injection)"
    ),
    path_kvm_tracepoint!(
        "path:kvm_msi_set_irq",
        "kvm_msi_set_irq",
        "tp_path_kvm_msi_set_irq",
        "rx: a thread that took frames raises an MSI for its guest (irqfd)"
    ),
    path_kvm_tracepoint!(
        "path:kvm_inj_virq",
        "kvm_inj_virq",
        "tp_path_kvm_inj_virq",
        "rx: KVM injects that MSI's vector into a vCPU"
    ),
    ProbeSpec {
        id: "path:kvm_entry",
        layer: "path",
        what: "rx: the vCPU enters its guest with the interrupt",
        strategies: &[
            Strategy::RawTracepoint {
                program: "raw_path_kvm_entry",
                tracepoint: "kvm_entry",
            },
            Strategy::Tracepoint {
                program: "tp_path_kvm_entry",
                category: "kvm",
                name: "kvm_entry",
            },
        ],
    },
    ProbeSpec {
        id: "path:irq_handler_entry",
        layer: "path",
        what: "passthrough: the host takes a VF's interrupt (a vfio-* IRQ's handler starts); inside a guest, a VF's \
               receive interrupt",
        strategies: &[
            Strategy::RawTracepoint {
                program: "raw_path_irq_handler_entry",
                tracepoint: "irq_handler_entry",
            },
            Strategy::Tracepoint {
                program: "tp_path_irq_handler_entry",
                category: "irq",
                name: "irq_handler_entry",
            },
        ],
    },
    ProbeSpec {
        id: "path:irq_handler_exit",
        layer: "path",
        what: "passthrough: that handler returns",
        strategies: &[
            Strategy::RawTracepoint {
                program: "raw_path_irq_handler_exit",
                tracepoint: "irq_handler_exit",
            },
            Strategy::Tracepoint {
                program: "tp_path_irq_handler_exit",
                category: "irq",
                name: "irq_handler_exit",
            },
        ],
    },
    kfunc_probe!(
        "path:ioeventfd_write",
        "path",
        "tx: a guest write an ioeventfd may take (which queue it kicks is learnt inside it)",
        "ioeventfd_write",
        "fentry_path_ioeventfd_write",
        "kprobe_path_ioeventfd_write"
    ),
    kfunc_probe!(
        "path:vhost_poll_wakeup",
        "path",
        "tx: the vhost queue a guest's write woke (kicks of vhost-net's receive queue or vhost-vsock are not tx kicks)",
        "vhost_poll_wakeup",
        "fentry_path_vhost_poll_wakeup",
        "kprobe_path_vhost_poll_wakeup"
    ),
    kfunc_probe!(
        "path:eventfd_read",
        "path",
        "tx: the eventfds a VMM's thread read before writing to its tap: the one read before every write is its transmit queue's (other queues' kicks are not tx kicks)",
        "eventfd_read",
        "fentry_path_eventfd_read",
        "kprobe_path_eventfd_read"
    ),
    ProbeSpec {
        id: "path:ioeventfd_write.ret",
        layer: "path",
        what: "tx: an ioeventfd took a guest's write: a virtqueue kick",
        strategies: &[Strategy::KProbe {
            program: "kretprobe_path_ioeventfd_write",
            function: "ioeventfd_write",
        }],
    },
    kfunc_probe!(
        "path:handle_tx",
        "path",
        "tx: the vhost-net worker starts serving the kicks",
        "handle_tx",
        "fentry_path_handle_tx",
        "kprobe_path_handle_tx"
    ),
    kfunc_probe!(
        "path:tun_sendmsg",
        "path",
        "tx: vhost-net hands the tap a batch of the guest's frames",
        "tun_sendmsg",
        "fentry_path_tun_sendmsg",
        "kprobe_path_tun_sendmsg"
    ),
    ProbeSpec {
        id: "path:tun_sendmsg.ret",
        layer: "path",
        what: "tx: the tap has handed that batch to the host's stack",
        strategies: &[Strategy::KProbe {
            program: "kretprobe_path_tun_sendmsg",
            function: "tun_sendmsg",
        }],
    },
    kfunc_probe!(
        "path:tun_get_user",
        "path",
        "tx: a frame from the guest enters its tap (vhost-net's, or the VMM's write serving the kicks)",
        "tun_get_user",
        "fentry_path_tun_get_user",
        "kprobe_path_tun_get_user"
    ),
    ProbeSpec {
        id: "path:tun_get_user.ret",
        layer: "path",
        what: "tx: the tap has handed that frame to the host's stack",
        strategies: &[Strategy::KProbe {
            program: "kretprobe_path_tun_get_user",
            function: "tun_get_user",
        }],
    },
    // Inside a guest: virtio-net's side (virtio_ring and virtio_net are
    // modules on common kernels). On a host without virtio-net devices
    // these find no function, or never fire for a queue of virtio-net's.
    // Without kprobes, at tracepoints: a receive queue's own MSI-X IRQ
    // (configured from /proc/interrupts), then the NET_RX softirq.
    kfunc_probe!(
        "path:vring_interrupt",
        "path",
        "guest rx: a virtio-net receive queue's interrupt",
        "vring_interrupt",
        "fentry_path_vring_interrupt",
        "kprobe_path_vring_interrupt",
        raw_tp "irq_handler_entry" => "raw_path_virtio_rx_irq"
    ),
    ProbeSpec {
        id: "path:vring_interrupt.ret",
        layer: "path",
        what: "guest rx: that interrupt found used buffers on the receive queue (virtio-mmio's runs every queue's)",
        strategies: &[Strategy::KProbe {
            program: "kretprobe_path_vring_interrupt",
            function: "vring_interrupt",
        }],
    },
    kfunc_probe!(
        "path:virtnet_poll",
        "path",
        "guest rx: virtio-net's NAPI poll starts (without kprobes: the NET_RX softirq after its interrupt)",
        "virtnet_poll",
        "fentry_path_virtnet_poll",
        "kprobe_path_virtnet_poll",
        raw_tp "softirq_entry" => "raw_path_net_rx_softirq"
    ),
    ProbeSpec {
        id: "path:vf_rx_softirq",
        layer: "path",
        what: "guest rx: a VF's NAPI poll starts (the NET_RX softirq after its receive interrupt)",
        strategies: &[Strategy::RawTracepoint {
            program: "raw_path_vf_rx_softirq",
            tracepoint: "softirq_entry",
        }],
    },
    ProbeSpec {
        id: "path:napi_poll",
        layer: "path",
        what: "guest rx: a virtio-net or VF poll returns the frames it received, through the guest's stack",
        strategies: &[
            Strategy::BtfTracepoint {
                program: "btf_path_napi_poll",
                tracepoint: "napi_poll",
            },
            Strategy::RawTracepoint {
                program: "raw_path_napi_poll",
                tracepoint: "napi_poll",
            },
        ],
    },
    ProbeSpec {
        id: "path:net_dev_xmit",
        layer: "path",
        what: "guest tx: that transmit ends (a frame the driver refused leaves its queue; a VF's is timed)",
        strategies: &[
            Strategy::BtfTracepoint {
                program: "btf_path_net_dev_xmit",
                tracepoint: "net_dev_xmit",
            },
            Strategy::RawTracepoint {
                program: "raw_path_net_dev_xmit",
                tracepoint: "net_dev_xmit",
            },
        ],
    },
    kfunc_probe!(
        "path:virtqueue_kick_prepare",
        "path",
        "guest tx: virtio-net asks whether the host wants a kick",
        "virtqueue_kick_prepare",
        "fentry_path_virtqueue_kick_prepare",
        "kprobe_path_virtqueue_kick_prepare"
    ),
    ProbeSpec {
        id: "path:virtqueue_kick_prepare.ret",
        layer: "path",
        what: "guest tx: no kick wanted (the host is still serving the queue)",
        strategies: &[Strategy::KProbe {
            program: "kretprobe_path_virtqueue_kick_prepare",
            function: "virtqueue_kick_prepare",
        }],
    },
    kfunc_probe!(
        "path:virtqueue_notify",
        "path",
        "guest tx: the kick, a write the host traps",
        "virtqueue_notify",
        "fentry_path_virtqueue_notify",
        "kprobe_path_virtqueue_notify"
    ),
    ProbeSpec {
        id: "path:virtqueue_notify.ret",
        layer: "path",
        what: "guest tx: the host let the guest run on after its kick",
        strategies: &[Strategy::KProbe {
            program: "kretprobe_path_virtqueue_notify",
            function: "virtqueue_notify",
        }],
    },
];
