//! Latency histograms kept in the kernel ([`LatencyHist`]: count, sum,
//! extremes, eight buckets per power of two), shared by the layers that time
//! something: KVM exits, run-queue waits.

use aya_ebpf::{macros::map, maps::Array};
use vtrace_common::{FINE_BUCKETS, LatencyHist, fine_bucket, log2_index};

/// One all-zero histogram: the template for new map entries (too large to
/// build on the 512-byte eBPF stack).
#[map]
pub static ZERO_HIST: Array<LatencyHist> = Array::with_max_entries(1, 0);

/// The power-of-two bucket of `v` (0 and 1 share bucket 0), larger values
/// in the last of `buckets`: every log2 histogram's (sizes, latencies).
#[inline(always)]
pub fn log2_bucket(v: u64, buckets: usize) -> usize {
    let b = log2_index(v);
    // Hidden from the optimiser, so the bound check stays one compare the
    // verifier follows (LLVM would drop it where it knows a bound of its own).
    let b = unsafe { core::ptr::read_volatile(&b) };
    if b < buckets { b } else { buckets - 1 }
}

/// Adds one value of `ns`.
#[inline(always)]
pub fn add(h: &mut LatencyHist, ns: u64) {
    if h.count == 0 || ns < h.min_ns {
        h.min_ns = ns;
    }
    if ns > h.max_ns {
        h.max_ns = ns;
    }
    h.count += 1;
    h.sum_ns += ns;
    // Hidden from the optimiser, so the bound check stays as one unsigned
    // compare the verifier can follow.
    let b = fine_bucket(ns);
    let b = unsafe { core::ptr::read_volatile(&b) };
    if b < FINE_BUCKETS {
        h.buckets[b] += 1;
    }
}
