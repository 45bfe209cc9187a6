//! The uprobe layer's tables: calls per probe and process, and their histograms.

use crate::recording::table;

table! {
    /// Calls of a user-space function (uprobe) by one process: lwIP's stack
    /// functions, QEMU's virtio backend, or `--uprobe` targets.
    UprobeRow = "uprobes" {
        probe: String,
        pid: u32,
        comm: String,
        platform: String,
        instance: String,
        calls: u64,
        /// Sum of the sizes the calls handled (probes with a size rule).
        bytes: u64,
        /// Returns seen (`:ret` probes) and their summed latency.
        returns: u64,
        latency_sum_ns: u64,
    }
}

table! {
    /// Histograms of uprobe rows: `kind` "size" (mtu buckets, as net_sizes) or
    /// "latency" (log2 ns: `le` = 2^(i+1)-1).
    UprobeHistRow = "uprobe_hists" {
        probe: String,
        pid: u32,
        kind: String,
        le: u64,
        count: u64,
    }
}

table! {
    /// Calls per probe and process per snapshot interval (the time series).
    UprobeIntervalRow = "uprobe_intervals" {
        /// Interval start and end, ns since the recording started.
        start_ns: u64,
        end_ns: u64,
        probe: String,
        pid: u32,
        calls: u64,
        bytes: u64,
    }
}
