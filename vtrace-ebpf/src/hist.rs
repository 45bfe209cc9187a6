//! Latency histograms kept in the kernel ([`LatencyHist`]: count, sum,
//! extremes, eight buckets per power of two), shared by the layers that time
//! something: KVM exits, run-queue waits.

use aya_ebpf::{macros::map, maps::Array};
use vtrace_common::{FINE_BUCKETS, LatencyHist, fine_bucket};

/// One all-zero histogram: the template for new map entries (too large to
/// build on the 512-byte eBPF stack).
#[map]
pub static ZERO_HIST: Array<LatencyHist> = Array::with_max_entries(1, 0);

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
