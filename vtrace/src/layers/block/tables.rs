//! The block layer's tables: requests per device, operation and owner, their
//! histograms, the devices' own counters, the time series.

use crate::recording::table;

table! {
    /// Completed block requests per device, operation and submitting
    /// cgroup (its owner: platform and instance): bytes, time queued in the
    /// I/O scheduler (insert -> issue; `queued` of them went through it) and
    /// on the device (issue -> complete).
    BlockRow = "block" version 2 {
        device: String,
        dev: u32,
        op: String,
        cgroup_id: u64,
        platform: String,
        instance: String,
        requests: u64,
        bytes: u64,
        queued: u64,
        queue_ns: u64,
        device_ns: u64,
        /// The submitting process and its name, from version 2 on (rows
        /// were per cgroup before).
        pid: u32 [since 2],
        comm: String [since 2],
    }
}

table! {
    /// Histograms of block rows: `kind` "queue" or "device" (ns) or "size"
    /// (bytes), buckets `[lo, hi)` by powers of two.
    BlockHistRow = "block_hists" version 2 {
        dev: u32,
        op: String,
        cgroup_id: u64,
        pid: u32 [since 2],
        kind: String,
        lo: u64,
        hi: u64,
        count: u64,
    }
}

table! {
    /// Each device's own counters (/sys/block/<dev>/stat) over the
    /// recording: requests completed and sectors per direction, the ground
    /// truth beside the block rows.
    BlockDeviceRow = "block_devices" version 2 {
        device: String,
        dev: u32,
        reads: u64,
        read_sectors: u64,
        writes: u64,
        write_sectors: u64,
        flushes: u64,
        discards: u64,
        /// Most requests vtrace saw in flight at once (insert or issue ->
        /// complete), from version 2 on.
        inflight_peak: u64 [since 2],
    }
}
