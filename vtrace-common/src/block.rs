//! Block requests.

/// Block requests counted per device, operation and submitting cgroup (the
/// block layer).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockKey {
    /// dev_t as the kernel keeps it: major << 20 | minor.
    pub dev: u32,
    /// [`block_op`].
    pub op: u32,
    pub cgroup_id: u64,
    /// The submitting process (tgid; a kworker's for writeback).
    pub pid: u32,
    pub _pad: u32,
}

/// Log2 buckets of the block histograms: bucket `i` holds `[2^i, 2^(i+1))`.
pub const BLOCK_BUCKETS: usize = 32;

/// Completed requests of one [`BlockKey`]: bytes, time queued (insert ->
/// issue, for requests that were inserted) and on the device (issue ->
/// complete), with log2 histograms of both and of the request size.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockStats {
    pub requests: u64,
    pub bytes: u64,
    /// Requests that went through the I/O scheduler's queue (insert seen).
    pub queued: u64,
    pub queue_ns: u64,
    pub device_ns: u64,
    pub queue_hist: [u64; BLOCK_BUCKETS],
    pub device_hist: [u64; BLOCK_BUCKETS],
    pub size_hist: [u64; BLOCK_BUCKETS],
}

impl Default for BlockStats {
    fn default() -> Self {
        BlockStats {
            requests: 0,
            bytes: 0,
            queued: 0,
            queue_ns: 0,
            device_ns: 0,
            queue_hist: [0; BLOCK_BUCKETS],
            device_hist: [0; BLOCK_BUCKETS],
            size_hist: [0; BLOCK_BUCKETS],
        }
    }
}

/// A request between its insert or issue and its completion.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockPending {
    pub insert_ns: u64,
    pub issue_ns: u64,
    /// request.start_time_ns when it came into view: set once per request
    /// (at its allocation or its first bio), so it tells a request met again
    /// (requeued) from a new one at a reused address. 0 where the kernel
    /// keeps no time stamps (no I/O statistics, no scheduler).
    pub start_ns: u64,
    /// The cgroup of the task that inserted (or, without an insert, issued) it.
    pub cgroup_id: u64,
    /// Its device (dev_t), whose in-flight count it is part of.
    pub dev: u32,
    /// The process that inserted (or issued) it.
    pub pid: u32,
    /// 1 once the driver gave it back (block_rq_requeue): its next insert
    /// or issue is the same request again, still its submitter's.
    pub requeued: u32,
    /// Its operation (cmd_flags & REQ_OP_MASK) and bytes at its last
    /// issue: what userspace counts for a completion the programs did not
    /// see (vtrace/src/layers/block/collector.rs, `recover_unseen`).
    pub op: u32,
    pub bytes: u32,
    pub _pad: u32,
}

/// Requests of one device between insert (or issue) and completion, now
/// and at most since the layer started ([`BlockPending`]s counted).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockInflight {
    pub now: u64,
    pub peak: u64,
}

/// Block operations (`REQ_OP_*`, the low byte of a request's cmd_flags).
pub mod block_op {
    pub const READ: u32 = 0;
    pub const WRITE: u32 = 1;
    pub const FLUSH: u32 = 2;
    pub const DISCARD: u32 = 3;
    /// Names by `REQ_OP_*` value; others read as "op<N>".
    pub const NAMES: [&str; 4] = ["read", "write", "flush", "discard"];
}

/// The block layer's offsets.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockConfig {
    /// struct request: `cmd_flags`, `part` (its block_device), `__data_len`
    /// (its bytes), `start_time_ns`; struct block_device: `bd_dev` (the
    /// block layer).
    pub request_cmd_flags: u32,
    pub request_part: u32,
    pub request_data_len: u32,
    pub request_start_time_ns: u32,
    pub bdev_dev: u32,
}
