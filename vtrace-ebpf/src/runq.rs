//! Run-queue delay: how long each thread waits runnable before it runs,
//! timed as the kernel's schedstat `run_delay` is: from a wakeup
//! (sched_wakeup, sched_wakeup_new), or from a switch-out that leaves the
//! thread runnable (preempted), to its next switch-in. Per thread: count,
//! sum, extremes and a histogram of the waits, and the longest one with the
//! thread that ran on that CPU just before it got in.
//!
//! Its own sched_switch program (the CPU engine's stays as it is): one more
//! program on every context switch, paid only when the layer runs.

use crate::runs::hook_programs;
use aya_ebpf::{
    helpers::bpf_get_smp_processor_id,
    macros::map,
    maps::{Array, HashMap, PerCpuArray},
};
use vtrace_common::{RunqStats, RunqWorst};

use crate::{
    account,
    config::conf,
    hist,
    kmem::{BtfLoad, KernelMem, ProbeRead},
};

/// Each thread's waits and the start of the one under way. A thread is
/// switched in on one CPU at a time, and woken or preempted while it is not
/// running, so its entry has one writer at a time: a shared map, no per-CPU
/// copies. Entries stay for the recording (one per thread that waited).
#[map]
pub static RUNQ_STATS: HashMap<u32, RunqStats> = HashMap::with_max_entries(8192, 0);

/// The template of new RUNQ_STATS entries (too large for the eBPF stack).
#[map]
pub static ZERO_RUNQ: Array<RunqStats> = Array::with_max_entries(1, 0);

/// Waits not timed: RUNQ_STATS was full.
#[map]
pub static RUNQ_DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
fn tid_of<M: KernelMem>(task: u64) -> u32 {
    M::read::<u32>(task, conf!(cpu.task_pid)).unwrap_or(0)
}

/// The entry of `tid`, created if it has none.
#[inline(always)]
fn stats_of(tid: u32) -> Option<&'static mut RunqStats> {
    if let Some(s) = RUNQ_STATS.get_ptr_mut(&tid) {
        return Some(unsafe { &mut *s });
    }
    let zero = ZERO_RUNQ.get(0)?;
    if RUNQ_STATS.insert(&tid, zero, 0).is_err() {
        if let Some(d) = RUNQ_DROPS.get_ptr_mut(0) {
            unsafe { *d += 1 };
        }
        return None;
    }
    RUNQ_STATS.get_ptr_mut(&tid).map(|s| unsafe { &mut *s })
}

/// `tid` is runnable from `now`. A wakeup of a thread still running (it had
/// not slept yet) leaves a start that its next wakeup or preemption
/// overwrites before any switch-in reads it.
#[inline(always)]
fn runnable(tid: u32, now: u64) {
    if tid != 0
        && let Some(s) = stats_of(tid)
    {
        s.since = now;
    }
}

/// `prev_runnable`: the outgoing thread stays on the run queue (preempted).
#[inline(always)]
fn on_switch(prev_tid: u32, prev_runnable: bool, next_tid: u32) {
    let now = account::now();
    if prev_runnable {
        runnable(prev_tid, now);
    }
    if next_tid == 0 {
        return;
    }
    // No entry: it has not waited since the layer started.
    let Some(s) = RUNQ_STATS.get_ptr_mut(&next_tid) else {
        return;
    };
    let s = unsafe { &mut *s };
    if s.since == 0 {
        return;
    }
    let ns = now.saturating_sub(s.since);
    s.since = 0;
    hist::add(&mut s.hist, ns);
    if ns > s.worst.ns {
        s.worst = RunqWorst {
            ns,
            at_ns: now,
            prev_tid,
            cpu: unsafe { bpf_get_smp_processor_id() },
        };
    }
}

// TP_PROTO(bool preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state)
hook_programs! {
    "sched_switch", "sched", counted "runq_switch";
    btf btf_runq_switch(ctx) => {
        let prev_state: u64 = ctx.arg(3);
        on_switch(
            tid_of::<BtfLoad>(ctx.arg(1)),
            prev_state as u32 == 0,
            tid_of::<BtfLoad>(ctx.arg(2)),
        );
    }
    raw raw_runq_switch(ctx) => {
        let prev_state: u64 = ctx.arg(3);
        on_switch(
            tid_of::<ProbeRead>(ctx.arg(1)),
            prev_state as u32 == 0,
            tid_of::<ProbeRead>(ctx.arg(2)),
        );
    }
    tp tp_runq_switch(ctx) => {
        let prev_state: i64 = unsafe { ctx.read_at(conf!(cpu.tp_switch_prev_state) as usize) }.unwrap_or(1);
        let prev_tid: u32 = unsafe { ctx.read_at(conf!(runq.tp_switch_prev_pid) as usize) }.unwrap_or(0);
        let next_tid: u32 = unsafe { ctx.read_at(conf!(cpu.tp_switch_next_pid) as usize) }.unwrap_or(0);
        on_switch(prev_tid, prev_state == 0, next_tid);
    }
}

#[inline(always)]
fn runnable_now(tid: u32) {
    runnable(tid, account::now());
}

// TP_PROTO(struct task_struct *p)
hook_programs! {
    "sched_wakeup", "sched", counted "runq_wakeup";
    btf btf_runq_wakeup(ctx) => {
        runnable_now(tid_of::<BtfLoad>(ctx.arg(0)));
    }
    raw raw_runq_wakeup(ctx) => {
        runnable_now(tid_of::<ProbeRead>(ctx.arg(0)));
    }
    tp tp_runq_wakeup(ctx) => {
        runnable_now(unsafe { ctx.read_at(conf!(runq.tp_wakeup_pid) as usize) }.unwrap_or(0));
    }
}

hook_programs! {
    "sched_wakeup_new", "sched", counted "runq_wakeup_new";
    btf btf_runq_wakeup_new(ctx) => {
        runnable_now(tid_of::<BtfLoad>(ctx.arg(0)));
    }
    raw raw_runq_wakeup_new(ctx) => {
        runnable_now(tid_of::<ProbeRead>(ctx.arg(0)));
    }
    tp tp_runq_wakeup_new(ctx) => {
        runnable_now(unsafe { ctx.read_at(conf!(runq.tp_wakeup_pid) as usize) }.unwrap_or(0));
    }
}

// sched_wakeup_new's record is sched_wakeup's (same template).
