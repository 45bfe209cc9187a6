//! Types shared by the eBPF programs (`vtrace-ebpf`) and userspace (`vtrace`).
//!
//! One file per probe family (kunai-common's layout), re-exported here so
//! that every type is `vtrace_common::Name`. Every struct is a BPF map value: `#[repr(C)]`, plain old data, no padding
//! surprises (all fields are 8-byte aligned groups), identical on both sides.
#![no_std]

mod block;
mod config;
mod cpu;
mod faults;
mod fs;
mod kvm;
mod net;
mod path;
mod runq;
mod sample;
mod tun;
mod uprobe;
mod vsock;

pub use block::*;
pub use config::*;
pub use cpu::*;
pub use faults::*;
pub use fs::*;
pub use kvm::*;
pub use net::*;
pub use path::*;
pub use runq::*;
pub use sample::*;
pub use tun::*;
pub use uprobe::*;
pub use vsock::*;

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all three are repr(C), Copy, and made only of integers.
    unsafe impl aya::Pod for super::Config {}
    unsafe impl aya::Pod for super::FaultCounts {}
    unsafe impl aya::Pod for super::VsockKey {}
    unsafe impl aya::Pod for super::VsockStats {}
    unsafe impl aya::Pod for super::ThreadTimes {}
    unsafe impl aya::Pod for super::ThreadSlot {}
    unsafe impl aya::Pod for super::CpuState {}
    unsafe impl aya::Pod for super::IrqStat {}
    unsafe impl aya::Pod for super::DevKey {}
    unsafe impl aya::Pod for super::DropKey {}
    unsafe impl aya::Pod for super::DevStats {}
    unsafe impl aya::Pod for super::DevSlot {}
    unsafe impl aya::Pod for super::UprobeSpec {}
    unsafe impl aya::Pod for super::HopEdge {}
    unsafe impl aya::Pod for super::TunIoKey {}
    unsafe impl aya::Pod for super::TunPending {}
    unsafe impl aya::Pod for super::HopLatency {}
    unsafe impl aya::Pod for super::SkbMark {}
    unsafe impl aya::Pod for super::NetEvent {}
    unsafe impl aya::Pod for super::UprobeKey {}
    unsafe impl aya::Pod for super::UprobeStats {}
    unsafe impl aya::Pod for super::KvmLatencyKey {}
    unsafe impl aya::Pod for super::LatencyHist {}
    unsafe impl aya::Pod for super::KvmEventKey {}
    unsafe impl aya::Pod for super::KvmEventStats {}
    unsafe impl aya::Pod for super::VcpuPending {}
    unsafe impl aya::Pod for super::SampleKey {}
    unsafe impl aya::Pod for super::RunqStats {}
    unsafe impl aya::Pod for super::BlockKey {}
    unsafe impl aya::Pod for super::BlockStats {}
    unsafe impl aya::Pod for super::BlockPending {}
    unsafe impl aya::Pod for super::BlockInflight {}
    unsafe impl aya::Pod for super::FsKey {}
    unsafe impl aya::Pod for super::FsStats {}
    unsafe impl aya::Pod for super::FsPending {}
    unsafe impl aya::Pod for super::TunKey {}
    unsafe impl aya::Pod for super::TunStats {}
    unsafe impl aya::Pod for super::PathKey {}
    unsafe impl aya::Pod for super::PathStats {}
    unsafe impl aya::Pod for super::PathRxPending {}
    unsafe impl aya::Pod for super::PathGuestTx {}
    unsafe impl aya::Pod for super::PathVectorKey {}
    unsafe impl aya::Pod for super::PathKick {}
    unsafe impl aya::Pod for super::PathRxBatch {}
    unsafe impl aya::Pod for super::PathTxFrame {}
    unsafe impl aya::Pod for super::PathPacket {}
    unsafe impl aya::Pod for super::PathPtIrq {}
}

/// Hooks whose programs count their own runs in the `HOOK_RUNS` per-CPU
/// array (index: position here), named as the program without its attach
/// prefix (`raw_`, `tp_`, `btf_`, `kprobe_`, `fentry_`). Exact event counts at the
/// cost of one per-CPU array add, where the kernel's BPF statistics would
/// add two clock reads per run.
pub const COUNTED_HOOKS: [&str; 100] = [
    "sched_switch",
    "sched_process_fork",
    "sched_process_exec",
    "sched_process_exit",
    "sys_enter",
    "sys_exit",
    "sys_enter_ioctl",
    "irq_handler_entry",
    "irq_handler_exit",
    "local_timer_entry",
    "local_timer_exit",
    "reschedule_entry",
    "reschedule_exit",
    "call_function_entry",
    "call_function_exit",
    "call_function_single_entry",
    "call_function_single_exit",
    "irq_work_entry",
    "irq_work_exit",
    "softirq_entry",
    "softirq_exit",
    "net_dev_queue",
    "net_dev_start_xmit",
    "net_dev_xmit",
    "netif_rx",
    "netif_receive_skb",
    "napi_gro_receive_entry",
    "napi_poll",
    "kfree_skb",
    "consume_skb",
    "kvm_exit",
    "kvm_entry",
    "kvm_userspace_exit",
    "kvm_pio",
    "kvm_mmio",
    "kvm_fast_mmio",
    "kvm_set_irq",
    "kvm_msi_set_irq",
    "kvm_inj_virq",
    "kvm_vcpu_wakeup",
    "sample_cpu",
    "uprobe_call",
    "uretprobe_call",
    "tun_get_user",
    "tun_sendmsg",
    "tun_recvmsg",
    "tun_chr_read_iter",
    "kretprobe_tun_chr_read_iter",
    "tun_net_dev_start_xmit",
    "handle_tx",
    "handle_rx",
    "handle_tx_kick",
    "handle_rx_kick",
    "runq_switch",
    "runq_wakeup",
    "runq_wakeup_new",
    "block_rq_insert",
    "block_rq_issue",
    "block_rq_requeue",
    "block_rq_complete",
    "fs_sys_enter",
    "fs_sys_exit",
    "ovl_override_creds",
    "ovl_revert_creds",
    "page_fault_user",
    "page_fault_kernel",
    "path_tun_recvmsg",
    "path_handle_tx",
    "path_tun_get_user",
    "kretprobe_path_tun_get_user",
    "path_tun_sendmsg",
    "kretprobe_path_tun_sendmsg",
    "path_consume_skb",
    "kretprobe_path_ioeventfd_write",
    "path_ioeventfd_write",
    "path_vhost_poll_wakeup",
    "path_eventfd_read",
    "path_kvm_set_irq",
    "path_kvm_msi_set_irq",
    "path_kvm_apic_accept_irq",
    "path_irqfd_wakeup",
    "path_kvm_inj_virq",
    "path_kvm_entry",
    "path_irq_handler_entry",
    "path_irq_handler_exit",
    "path_vring_interrupt",
    "kretprobe_path_vring_interrupt",
    "path_virtnet_poll",
    "path_virtio_rx_irq",
    "path_net_rx_softirq",
    "path_vf_rx_softirq",
    "path_napi_poll",
    "path_net_dev_start_xmit",
    "path_net_dev_xmit",
    "path_virtqueue_kick_prepare",
    "kretprobe_path_virtqueue_kick_prepare",
    "path_virtqueue_notify",
    "kretprobe_path_virtqueue_notify",
    "virtio_transport_recv_pkt",
    "virtio_transport_alloc_pkt",
];

const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Index of `hook` in [`COUNTED_HOOKS`]; evaluated at compile time by the
/// eBPF programs, so a name missing from the table fails the build.
pub const fn hook_index(hook: &str) -> u32 {
    let mut i = 0;
    while i < COUNTED_HOOKS.len() {
        if same(COUNTED_HOOKS[i], hook) {
            return i as u32;
        }
        i += 1;
    }
    panic!("hook missing from COUNTED_HOOKS")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A full frame on a 1500-MTU Ethernet device (1514 B with its header)
    /// lands at or below the MTU edge; 1515 .. 65536 B (GSO aggregates)
    /// above it; every size lands in the bucket whose bounds hold it.
    #[test]
    fn size_buckets_make_the_mtu_visible() {
        let edge = 1500 + 14;
        let edges = dev_size_edges(edge);
        let b = dev_size_bucket(1514, edge);
        assert_eq!(edges[b], 1514);
        for len in 1..=70_000u64 {
            let b = dev_size_bucket(len, edge);
            assert!(b < DEV_SIZE_BUCKETS, "{len}");
            assert!(len <= edges[b], "{len} above its bucket's edge {}", edges[b]);
            assert!(
                b == 0 || len > edges[b - 1],
                "{len} not above the previous edge {}",
                edges[b - 1]
            );
            if (1515..=65536).contains(&len) {
                assert!(edges[b] > 1514, "{len} at or below the MTU edge");
            }
        }
        // Edges equal to a fixed one, beyond every fixed one, or none.
        for edge in [0, 1500, 576 + 14, 65536 + 14] {
            let edges = dev_size_edges(edge);
            for len in [1u64, 64, 65, 590, 591, 1500, 1501, 65536, 65550, 65551, 1 << 20] {
                let b = dev_size_bucket(len, edge);
                assert!(
                    len <= edges[b] && (b == 0 || len > edges[b - 1]),
                    "edge {edge}, len {len}: {edges:?}"
                );
            }
        }
    }

    #[test]
    fn fine_buckets_hold_their_values() {
        for v in [
            0u64,
            1,
            7,
            8,
            9,
            15,
            16,
            17,
            100,
            999,
            1_000_000,
            1 << 33,
            (1 << 34) - 1,
        ] {
            let (lo, hi) = fine_bucket_range(fine_bucket(v));
            assert!(lo <= v && v < hi, "{v} not in [{lo}, {hi})");
            assert!((hi - lo) as f64 <= (lo as f64 / 8.0).max(1.0), "{v}: bucket too wide");
        }
        assert_eq!(fine_bucket(u64::MAX), FINE_BUCKETS - 1);
        for i in 1..FINE_BUCKETS {
            assert_eq!(
                fine_bucket_range(i - 1).1,
                fine_bucket_range(i).0,
                "gap before bucket {i}"
            );
        }
    }
}
