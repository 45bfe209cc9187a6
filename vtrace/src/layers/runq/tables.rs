//! The run-queue layer's tables: waits per thread, their histograms, the
//! time series.

use crate::recording::{Owner, table};

table! {
    /// Time each thread waited runnable on a run queue (wakeup or
    /// preemption -> switch-in), as schedstat's run_delay counts it; the
    /// longest wait with the thread that ran on that CPU just before it got in.
    RunqRow = "runq" {
        tid: u32,
        #[serde(flatten)]
        owner: Owner,
        waits: u64,
        delay_ns: u64,
        min_ns: u64,
        max_ns: u64,
        worst_cpu: u32,
        /// Since the recording started.
        worst_at_ns: u64,
        worst_prev_tid: u32,
        worst_prev_comm: String,
    }
}

table! {
    /// Histograms of runq rows: buckets `[lo_ns, hi_ns)`, 8 per power of two.
    RunqHistRow = "runq_hists" {
        tid: u32,
        lo_ns: u64,
        hi_ns: u64,
        count: u64,
    }
}

table! {
    /// Waits per thread per snapshot interval (the time series).
    RunqIntervalRow = "runq_intervals" {
        start_ns: u64,
        end_ns: u64,
        tid: u32,
        waits: u64,
        delay_ns: u64,
    }
}
