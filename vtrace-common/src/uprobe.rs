//! User-space probes: attach slots, sizes, call statistics.

/// Uprobe attachments (each attach point has a slot, passed as its BPF cookie).
pub const MAX_UPROBES: u32 = 64;

/// How a uprobe finds the size of what a call handles.
pub mod uprobe_size {
    /// No size: calls only.
    pub const NONE: u32 = 0;
    /// The integer argument `arg`.
    pub const ARG: u32 = 1;
    /// `tot_len` (u16 at offset 16) of the lwIP `struct pbuf *` in argument `arg`.
    pub const PBUF_ARG: u32 = 2;
}

/// Per-slot configuration written by userspace.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UprobeSpec {
    pub size_kind: u32,
    pub arg: u32,
}

/// Calls of one uprobe slot by one process.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UprobeKey {
    pub slot: u32,
    pub tgid: u32,
}

pub const LATENCY_BUCKETS: usize = 32;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UprobeStats {
    pub calls: u64,
    pub bytes: u64,
    /// Sizes per [`SIZE_BUCKETS`] bucket (calls with a size only).
    pub size_hist: [u64; 11],
    /// Returns seen (uretprobe) and their latency: log2 ns buckets.
    pub returns: u64,
    pub latency_sum_ns: u64,
    pub latency_log2: [u64; LATENCY_BUCKETS],
}

impl Default for UprobeStats {
    fn default() -> Self {
        UprobeStats {
            calls: 0,
            bytes: 0,
            size_hist: [0; 11],
            returns: 0,
            latency_sum_ns: 0,
            latency_log2: [0; LATENCY_BUCKETS],
        }
    }
}
