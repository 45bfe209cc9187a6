//! Run-queue waits.

use crate::*;

/// A thread's longest run-queue wait (the run-queue layer), and the thread
/// that ran on that CPU just before it got in: who ran instead.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunqWorst {
    pub ns: u64,
    /// When the wait ended (bpf_ktime_get_ns).
    pub at_ns: u64,
    pub prev_tid: u32,
    pub cpu: u32,
}

/// A thread's run-queue waits, and the start of the one under way: one map
/// value, so one lookup per wakeup, preemption or switch-in.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunqStats {
    /// When it became runnable (bpf_ktime_get_ns); 0 while it runs or sleeps.
    pub since: u64,
    pub hist: LatencyHist,
    pub worst: RunqWorst,
}

/// The run-queue layer's tracepoint offsets.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunqConfig {
    /// sched/sched_switch record: offset of `prev_pid` (the run-queue layer).
    pub tp_switch_prev_pid: u32,
    /// sched/sched_wakeup and sched_wakeup_new records: offset of `pid`.
    pub tp_wakeup_pid: u32,
}
