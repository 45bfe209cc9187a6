//! The path layer: latency along a VM's virtio data path, stage by stage
//! ([`vtrace_common::path_stage`]), as histograms in the kernel per stage
//! and process that ended it.
//!
//! rx (host -> guest): a frame queued to a tap (net_dev_start_xmit, keyed by its
//! skb) -> taken by vhost-net (tun_recvmsg, the skb in msg_control) or by
//! a VMM's read (consume_skb of that skb once copied out) [rx_tap_queue];
//! the VM's first frame taken and not signalled -> the next interrupt a
//! thread of the VM raises for its guest (irqfd_wakeup in the writer's
//! context, MSI or line; KVM_SIGNAL_MSI; KVM_IRQ_LINE) [rx_signal]; that
//! MSI's vector, or a vector a line delivered (learnt at
//! kvm_apic_accept_irq) -> its injection into a vCPU of the same VM
//! (kvm_inj_virq) [rx_inject]; the injection -> that vCPU thread's next
//! guest entry (kvm_entry) [rx_entry].
//!
//! tx (guest -> host): the VM's first virtqueue kick not served yet (an
//! ioeventfd took the guest's write) -> a thread of the same VM starts
//! serving: vhost-net's handle_tx [tx_kick] -> its first batch into the
//! tap (tun_sendmsg) [tx_serve], or the VMM's write into the tap
//! (tun_get_user) [tx_kick]; each batch or frame into the tap -> handed to
//! the host's stack (the call's return) [tx_tap].
//!
//! A VM is its `mm_struct`: its vCPU threads and its VMM's share it, and a
//! vhost worker runs with its owner's (kthread_use_mm before Linux 6.4, a
//! thread of the owner since). Starts still waiting for their end live in
//! LRU maps: one whose end never comes is evicted instead of filling a map.
//! One or two hash lookups a hit; kvm_entry, the hottest hook, one.

//!
//! Each direction is a file: `rx.rs`, `tx.rs`, `passthrough.rs` (a VF's
//! interrupt, SR-IOV), and `guest.rs` (virtio-net inside a guest, where
//! `vtrace agent` runs); the maps and helpers they share are here.

mod guest;
mod passthrough;
mod rx;
mod tx;

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_get_current_task},
    macros::{kretprobe, map},
    maps::{Array, LruHashMap, PerCpuArray, PerCpuHashMap, RingBuf},
    programs::RetProbeContext,
};
use vtrace_common::{
    IRQ_DEVICE_SLOTS, MAX_PATH_STATS, PATH_READS_KEPT, PathKey, PathKick, PathKickTarget, PathPacket, PathPtIrq,
    PathReads, PathRxBatch, PathRxPending, PathStats, PathTxFrame, PathVectorKey, RX_IRQ_WORDS, TUN_MSG_PTR,
    TUN_XDP_FLAG, path_dir, path_loss, path_stage,
};

use crate::{
    account,
    config::{address, conf},
    devices, hist,
    kmem::{read_or_zero, tp_field},
    runs::{count_run, hook_programs, kfunc_programs},
};

/// Each stage's latencies per process that ended it.
#[map]
pub static PATH_STATS: PerCpuHashMap<PathKey, PathStats> = PerCpuHashMap::with_max_entries(MAX_PATH_STATS, 0);

/// The template of new PATH_STATS entries (too large for the eBPF stack).
#[map]
pub static ZERO_PATH: Array<PathStats> = Array::with_max_entries(1, 0);

/// Followed packets (`--events`): one per rx interrupt and per tx kick.
#[map]
pub static PATH_PACKETS: RingBuf = RingBuf::with_byte_size(4 * 1024 * 1024, 0);

/// [`path_loss`] counters.
#[map]
pub static PATH_LOSSES: PerCpuArray<u64> = PerCpuArray::with_max_entries(path_loss::COUNT, 0);

#[inline(always)]
fn lost(slot: u32) {
    if let Some(c) = PATH_LOSSES.get_ptr_mut(slot) {
        unsafe { *c += 1 };
    }
}

/// One latency of `stage`, covering `frames`, ended by the current process.
#[inline(always)]
fn add(stage: u32, ns: u64, frames: u64) {
    add_irq(stage, ns, frames, 0);
}

/// Frames through `stage` whose latency was not timed.
#[inline(always)]
fn add_frames(stage: u32, frames: u64) {
    if let Some(s) = stats(stage, 0) {
        s.frames += frames;
    }
}

/// [`add`] for a passthrough stage of host IRQ `irq`.
#[inline(always)]
fn add_irq(stage: u32, ns: u64, frames: u64, irq: u32) {
    if let Some(s) = stats(stage, irq) {
        s.frames += frames;
        hist::add(&mut s.hist, ns);
    }
}

/// `stage`'s entry for the current process (and host IRQ `irq`); none
/// when PATH_STATS is full (counted).
#[inline(always)]
fn stats(stage: u32, irq: u32) -> Option<&'static mut PathStats> {
    let key = PathKey {
        tgid: (bpf_get_current_pid_tgid() >> 32) as u32,
        stage,
        irq,
        _pad: 0,
    };
    let s = account::entry_from(&PATH_STATS, &ZERO_PATH, &key);
    if s.is_none() {
        lost(path_loss::STATS_FULL);
    }
    s
}

/// net_dev_start_xmit(skb, dev): a device starts to transmit a frame. A
/// tap's queues it for its user (rx_tap_queue starts); virtio-net's,
/// inside a guest, puts it on a transmit queue (guest_tx_kick starts); a
/// VF's, inside a guest, starts its transmit (guest_tx_xmit starts).
/// Told by the device's `netdev_ops`; a tracepoint, so never missed the
/// way a kprobe inside another kprobe's interrupted program is.
#[inline(always)]
fn on_start_xmit(skb: u64, dev: u64) {
    let ops = devices::netdev_ops(dev);
    if ops == 0 {
        return;
    }
    if devices::is_tun(ops) {
        rx::queued(skb);
    } else if ops == address(conf!(path.virtnet_netdev_lo), conf!(path.virtnet_netdev_hi)) {
        guest::virtio_start_xmit(skb, dev);
    } else if guest::is_vf(dev) {
        guest::vf_start_xmit();
    }
}

hook_programs! {
    "net_dev_start_xmit", "net", counted "path_net_dev_start_xmit";
    btf btf_path_net_dev_start_xmit(ctx) => {
        on_start_xmit(ctx.arg(0), ctx.arg(1));
    }
    raw raw_path_net_dev_start_xmit(ctx) => {
        on_start_xmit(ctx.arg(0), ctx.arg(1));
    }
}

/// The current task's VM: its `mm_struct *` (0 when the offset is unknown,
/// and for kernel threads that borrowed none).
#[inline(always)]
fn current_mm() -> u64 {
    let at = conf!(path.task_mm);
    if at == 0 {
        return 0;
    }
    read_or_zero(unsafe { bpf_get_current_task() }, at)
}

/// A packet followed to its path's end (`--events`), ended by the current thread.
#[inline(always)]
fn followed(mut p: PathPacket) {
    if conf!(path.path_packets_on) == 0 {
        return;
    }
    let id = bpf_get_current_pid_tgid();
    p.tgid = (id >> 32) as u32;
    p.tid = id as u32;
    match PATH_PACKETS.reserve::<PathPacket>(0) {
        Some(mut e) => {
            e.write(p);
            e.submit(0);
        }
        None => lost(path_loss::PACKETS_DROPPED),
    }
}
