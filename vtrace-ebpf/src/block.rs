//! Block I/O: each request from its insert into the I/O scheduler (or its
//! issue, where it goes straight to the driver) to its completion, counted
//! per device, operation and the cgroup that submitted it, with time queued
//! (insert -> issue) and on the device (issue -> complete) as log2
//! histograms in the kernel.
//!
//! The programs are typed (tp_btf) or raw tracepoints: both hand over the
//! `struct request *`, the key that pairs a request's three events; the
//! classic records carry only device and sector.

use crate::hist::log2_bucket;
use crate::runs::hook_programs;
use aya_ebpf::{
    helpers::{bpf_get_current_cgroup_id, bpf_get_current_pid_tgid},
    macros::map,
    maps::{Array, HashMap, PerCpuArray, PerCpuHashMap},
};
use vtrace_common::{BLOCK_BUCKETS, BlockInflight, BlockKey, BlockPending, BlockStats};

use crate::{
    account,
    config::conf,
    kmem::{BtfLoad, KernelMem, ProbeRead},
};

/// Requests between insert or issue and completion, by address.
#[map]
pub static BLOCK_PENDING: HashMap<u64, BlockPending> = HashMap::with_max_entries(16384, 0);

#[map]
pub static BLOCK_STATS: PerCpuHashMap<BlockKey, BlockStats> = PerCpuHashMap::with_max_entries(1024, 0);

/// Requests in flight per device, and their peak: shared by every CPU,
/// counted with atomic adds.
#[map]
pub static BLOCK_INFLIGHT: HashMap<u32, BlockInflight> = HashMap::with_max_entries(256, 0);

/// The template of new BLOCK_STATS entries (too large for the eBPF stack).
#[map]
pub static ZERO_BLOCK: Array<BlockStats> = Array::with_max_entries(1, 0);

/// [0]: completions not counted (no pending entry: inserted before the
/// layer started, or BLOCK_PENDING was full; or BLOCK_STATS full). [1]:
/// requests counted when a later request took their address, their own
/// completion unseen (see [`track`]).
#[map]
pub static BLOCK_DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(2, 0);

#[inline(always)]
fn dropped() {
    if let Some(d) = BLOCK_DROPS.get_ptr_mut(0) {
        unsafe { *d += 1 };
    }
}

/// One more (`delta` 1) or one fewer (`u64::MAX`, wrapping) request of
/// `dev` in flight; the peak follows the count (a racing CPU may keep one
/// less than the true peak; a request whose completion went unseen counts
/// one more until a later request takes its address, see [`track`]).
#[inline(always)]
fn inflight(dev: u32, delta: u64) {
    if BLOCK_INFLIGHT.get_ptr_mut(&dev).is_none() {
        let _ = BLOCK_INFLIGHT.insert(&dev, &BlockInflight::default(), aya_ebpf::bindings::BPF_NOEXIST as u64);
    }
    if let Some(e) = BLOCK_INFLIGHT.get_ptr_mut(&dev) {
        // The add's result is not used: the object is built for the eBPF
        // CPU v1, whose atomic add returns nothing. The count read back
        // right after may include another CPU's change since: a count the
        // device really had, so racing CPUs never raise the peak.
        unsafe {
            core::intrinsics::atomic_xadd::<u64, u64, { core::intrinsics::AtomicOrdering::Relaxed }>(
                &raw mut (*e).now,
                delta,
            );
            let now = core::ptr::read_volatile(&raw const (*e).now);
            if delta == 1 && now > (*e).peak && now < 1 << 32 {
                (*e).peak = now;
            }
        }
    }
}

/// A request comes into view (`insert_ns` or `issue_ns` set), in the
/// submitter's context: its device read through `M`, its owner now.
///
/// An entry already at its address (not this request's: see [`is_own`])
/// was left by a request whose end went unseen: merged into another before
/// its issue (its bytes went there), or issued and completed where no
/// program ran (see `recover_unseen` in the collector). The latter is
/// counted now, with its bytes and without its time on the device. This
/// request replaces the entry and takes over its in-flight count (until
/// then, the device's in-flight level reads one too high).
#[inline(always)]
fn track<M: KernelMem>(rq: u64, insert_ns: u64, issue_ns: u64) {
    let dev = dev_of::<M>(rq);
    let (op, bytes) = op_and_bytes::<M>(rq);
    let left = unsafe { BLOCK_PENDING.get(&rq) }.copied();
    let pending = BlockPending {
        insert_ns,
        issue_ns,
        start_ns: start_of::<M>(rq),
        cgroup_id: unsafe { bpf_get_current_cgroup_id() },
        dev,
        pid: (bpf_get_current_pid_tgid() >> 32) as u32,
        requeued: 0,
        op,
        bytes,
        _pad: 0,
    };
    if BLOCK_PENDING.insert(&rq, &pending, 0).is_err() {
        return dropped();
    }
    let Some(left) = left else {
        return inflight(dev, 1);
    };
    if left.issue_ns != 0 && left.requeued == 0 {
        count_unseen(&left);
    }
    if left.dev != dev {
        inflight(left.dev, u64::MAX);
        inflight(dev, 1);
    }
}

/// Counts request `p`, whose completion no program saw.
#[inline(always)]
fn count_unseen(p: &BlockPending) {
    let Some(s) = account::entry_from(&BLOCK_STATS, &ZERO_BLOCK, &key_of(p, p.op)) else {
        return dropped();
    };
    s.requests += 1;
    s.bytes += p.bytes as u64;
    s.size_hist[log2_bucket(p.bytes as u64, BLOCK_BUCKETS)] += 1;
    if let Some(d) = BLOCK_DROPS.get_ptr_mut(1) {
        unsafe { *d += 1 };
    }
}

#[inline(always)]
fn key_of(p: &BlockPending, op: u32) -> BlockKey {
    BlockKey {
        dev: p.dev,
        op,
        cgroup_id: p.cgroup_id,
        pid: p.pid,
        _pad: 0,
    }
}

/// Whether entry `p` is request `rq`'s own: the same start time (a request
/// met again); where the kernel keeps none, a requeue mark, or, at issue,
/// an entry not issued yet (inserted by this request).
#[inline(always)]
fn is_own<M: KernelMem>(p: &BlockPending, rq: u64, at_issue: bool) -> bool {
    let start = start_of::<M>(rq);
    if start != 0 && p.start_ns != 0 {
        return start == p.start_ns;
    }
    p.requeued != 0 || (at_issue && p.issue_ns == 0)
}

/// Into the I/O scheduler. A request met again (requeued: the block layer's
/// requeue work inserts it anew, in a kworker) keeps its owner, and its
/// queue time runs on from its first insert. (Taken as new, a container's
/// requests the driver gave back under load went to the host.)
#[inline(always)]
fn on_insert<M: KernelMem>(rq: u64) {
    let now = account::now();
    if let Some(p) = BLOCK_PENDING.get_ptr_mut(&rq) {
        unsafe {
            if is_own::<M>(&*p, rq, false) {
                (*p).requeued = 0;
                (*p).issue_ns = 0;
                if (*p).insert_ns == 0 {
                    (*p).insert_ns = now;
                }
                return;
            }
        }
    }
    track::<M>(rq, now, 0);
}

/// To the driver. An entry not the request's own was left by another (see
/// [`track`]): this request is issued without an insert.
#[inline(always)]
fn on_issue<M: KernelMem>(rq: u64) {
    let now = account::now();
    if let Some(p) = BLOCK_PENDING.get_ptr_mut(&rq) {
        unsafe {
            if is_own::<M>(&*p, rq, true) {
                (*p).issue_ns = now;
                (*p).requeued = 0;
                ((*p).op, (*p).bytes) = op_and_bytes::<M>(rq);
                return;
            }
        }
    }
    track::<M>(rq, 0, now);
}

/// Back from the driver, to be issued again (straight from the dispatch
/// list, or inserted anew by the requeue work).
#[inline(always)]
fn on_requeue(rq: u64) {
    if let Some(p) = BLOCK_PENDING.get_ptr_mut(&rq) {
        unsafe { (*p).requeued = 1 };
    }
}

/// block_rq_complete: the request is done, `bytes` of it. A completion
/// that finds no entry is counted as unpaired. (A completion the program
/// does not see leaves its entry issued: counted when a later request takes
/// its address, [`track`], and until then by userspace once the device has
/// nothing in flight, `recover_unseen` in the collector.)
#[inline(always)]
fn on_complete<M: KernelMem>(rq: u64, bytes: u32) {
    let Some(p) = (unsafe { BLOCK_PENDING.get(&rq) }).copied() else {
        return dropped();
    };
    finish::<M>(rq, &p, bytes);
}

/// Counts pending request `p` as done, with `bytes`; the operation is read
/// through `M`, the device was read when it came into view.
#[inline(always)]
fn finish<M: KernelMem>(rq: u64, p: &BlockPending, bytes: u32) {
    let now = account::now();
    let _ = BLOCK_PENDING.remove(&rq);
    inflight(p.dev, u64::MAX);
    let cmd_flags: u32 = M::read(rq, conf!(block.request_cmd_flags)).unwrap_or(0);
    let Some(s) = account::entry_from(&BLOCK_STATS, &ZERO_BLOCK, &key_of(p, cmd_flags & 0xff)) else {
        return dropped();
    };
    s.requests += 1;
    s.bytes += bytes as u64;
    s.size_hist[log2_bucket(bytes as u64, BLOCK_BUCKETS)] += 1;
    if p.issue_ns != 0 {
        let device = now.saturating_sub(p.issue_ns);
        s.device_ns += device;
        s.device_hist[log2_bucket(device, BLOCK_BUCKETS)] += 1;
        if p.insert_ns != 0 {
            let queue = p.issue_ns.saturating_sub(p.insert_ns);
            s.queued += 1;
            s.queue_ns += queue;
            s.queue_hist[log2_bucket(queue, BLOCK_BUCKETS)] += 1;
        }
    }
}

/// The request's operation and bytes now (at its issue: merges may have
/// grown it since its insert).
#[inline(always)]
fn op_and_bytes<M: KernelMem>(rq: u64) -> (u32, u32) {
    let cmd_flags: u32 = M::read(rq, conf!(block.request_cmd_flags)).unwrap_or(0);
    (
        cmd_flags & 0xff,
        M::read(rq, conf!(block.request_data_len)).unwrap_or(0),
    )
}

/// The request's start time (request.start_time_ns; 0 where not kept).
#[inline(always)]
fn start_of<M: KernelMem>(rq: u64) -> u64 {
    M::read(rq, conf!(block.request_start_time_ns)).unwrap_or(0)
}

/// The request's device: its partition's dev_t (0 without one).
#[inline(always)]
fn dev_of<M: KernelMem>(rq: u64) -> u32 {
    match M::read::<u64>(rq, conf!(block.request_part)).unwrap_or(0) {
        0 => 0,
        part => M::read::<u32>(part, conf!(block.bdev_dev)).unwrap_or(0),
    }
}

// TP_PROTO(struct request *rq)
hook_programs! {
    "block_rq_insert";
    btf btf_block_rq_insert(ctx) => {
        on_insert::<BtfLoad>(ctx.arg(0));
    }
    raw raw_block_rq_insert(ctx) => {
        on_insert::<ProbeRead>(ctx.arg(0));
    }
}

// TP_PROTO(struct request *rq)
hook_programs! {
    "block_rq_issue";
    btf btf_block_rq_issue(ctx) => {
        on_issue::<BtfLoad>(ctx.arg(0));
    }
    raw raw_block_rq_issue(ctx) => {
        on_issue::<ProbeRead>(ctx.arg(0));
    }
}

// TP_PROTO(struct request *rq)
hook_programs! {
    "block_rq_requeue";
    btf btf_block_rq_requeue(ctx) => {
        on_requeue(ctx.arg(0));
    }
    raw raw_block_rq_requeue(ctx) => {
        on_requeue(ctx.arg(0));
    }
}

// TP_PROTO(struct request *rq, blk_status_t error, unsigned int nr_bytes)
hook_programs! {
    "block_rq_complete";
    btf btf_block_rq_complete(ctx) => {
        let bytes: u64 = ctx.arg(2);
        on_complete::<BtfLoad>(ctx.arg(0), bytes as u32);
    }
    raw raw_block_rq_complete(ctx) => {
        let bytes: u64 = ctx.arg(2);
        on_complete::<ProbeRead>(ctx.arg(0), bytes as u32);
    }
}
