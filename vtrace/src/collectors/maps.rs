//! One way to take a map out of the loaded object, and one way to sum a
//! per-CPU map over CPUs and to take the difference of two readings.

use std::{
    borrow::Borrow,
    collections::{BTreeMap, HashSet},
};

use aya::{
    Ebpf, Pod,
    maps::{Map, MapData, MapError, PerCpuHashMap},
};
use vtrace_common::{DevStats, HopLatency, KvmEventStats, LatencyHist, UprobeStats};

use crate::{Error, Result};

/// Takes map `name` out of the object as `M` (before any program attaches).
pub fn take<M: TryFrom<Map, Error = MapError>>(ebpf: &mut Ebpf, name: &str) -> Result<M> {
    let map = ebpf
        .take_map(name)
        .ok_or_else(|| Error::Ebpf(format!("map {name} missing from the eBPF object")))?;
    M::try_from(map).map_err(|e| Error::Ebpf(format!("map {name}: {e}")))
}

/// Counters kept per CPU in the kernel: summed over CPUs, subtracted
/// between two readings (never below zero).
pub trait Counters: Copy + Default {
    fn add(&mut self, other: &Self);
    fn sub(&mut self, other: &Self);
}

/// Every field a counter, arrays element by element; `max` fields are
/// levels (merged by maximum, the later reading's kept in a difference).
macro_rules! counters {
    ($ty:ty { $($field:ident),* } [ $($array:ident),* ] $(max [ $($max:ident),* ])?) => {
        impl Counters for $ty {
            fn add(&mut self, o: &Self) {
                $(self.$field += o.$field;)*
                $(for (a, b) in self.$array.iter_mut().zip(o.$array) { *a += b; })*
                $($(self.$max = self.$max.max(o.$max);)*)?
            }
            fn sub(&mut self, o: &Self) {
                $(self.$field -= o.$field.min(self.$field);)*
                $(for (a, b) in self.$array.iter_mut().zip(o.$array) { *a -= b.min(*a); })*
            }
        }
    };
}
// For a layer's own value types, in its own folder.
#[allow(unused_imports)]
pub(crate) use counters;
counters!(DevStats { packets, bytes, gso_packets, gso_segs, errors } [size_hist, log2_hist] max [mtu_edge, max_len]);
counters!(HopLatency { count, sum_ns }[log2]);
counters!(UprobeStats { calls, bytes, returns, latency_sum_ns } [size_hist, latency_log2]);
counters!(KvmEventStats { count, bytes } []);

impl Counters for u64 {
    fn add(&mut self, o: &Self) {
        *self += o;
    }
    fn sub(&mut self, o: &Self) {
        *self -= (*o).min(*self);
    }
}

impl<const N: usize> Counters for [u64; N]
where
    [u64; N]: Default,
{
    fn add(&mut self, o: &Self) {
        for (a, b) in self.iter_mut().zip(o) {
            *a += b;
        }
    }
    fn sub(&mut self, o: &Self) {
        for (a, b) in self.iter_mut().zip(o) {
            *a -= (*b).min(*a);
        }
    }
}

/// Latency histograms also keep their extremes: merged, not added.
impl Counters for LatencyHist {
    fn add(&mut self, o: &Self) {
        if o.count == 0 {
            return;
        }
        self.min_ns = if self.count == 0 {
            o.min_ns
        } else {
            self.min_ns.min(o.min_ns)
        };
        self.max_ns = self.max_ns.max(o.max_ns);
        self.count += o.count;
        self.sum_ns += o.sum_ns;
        for (a, b) in self.buckets.iter_mut().zip(o.buckets) {
            *a += b;
        }
    }
    /// The extremes of a difference are unknown: kept as the later reading's.
    fn sub(&mut self, o: &Self) {
        self.count -= o.count.min(self.count);
        self.sum_ns -= o.sum_ns.min(self.sum_ns);
        for (a, b) in self.buckets.iter_mut().zip(o.buckets) {
            *a -= b.min(*a);
        }
    }
}

/// Every key of a per-CPU hash map with its values summed over CPUs.
pub fn sum_per_cpu<T: Borrow<MapData>, K: Pod + Ord, V: Pod + Counters>(
    map: &PerCpuHashMap<T, K, V>,
) -> Result<BTreeMap<K, V>> {
    let mut out: BTreeMap<K, V> = BTreeMap::new();
    for entry in map.iter() {
        let (k, per_cpu) = entry.map_err(|e| Error::Ebpf(e.to_string()))?;
        let total = out.entry(k).or_default();
        for v in per_cpu.iter() {
            total.add(v);
        }
    }
    Ok(out)
}

/// `vtrace serve`'s bound on a per-CPU map keyed by process (block
/// requests, file calls): a process that ended keeps its entries until the
/// map is full, and then no new process is counted (a serve that had seen
/// about a thousand processes do block I/O counted no more). The processes
/// gone before a read ([`EndedProcesses::note`]) have all of their counts
/// in it: their entries go once it is emitted ([`EndedProcesses::forget`]).
#[derive(Debug, Default)]
pub struct EndedProcesses {
    gone_before_read: HashSet<u32>,
}

impl EndedProcesses {
    /// Before a read of `map`: notes the processes of its entries that are
    /// gone. Process 0 (work done in interrupts) never ends; the processes
    /// in `held` (with work the kernel may still count for them) are kept.
    pub fn note<K: Pod + Ord, V: Pod>(
        &mut self,
        map: &PerCpuHashMap<MapData, K, V>,
        pid_of: impl Fn(&K) -> u32,
        held: &HashSet<u32>,
    ) {
        let pids: HashSet<u32> = map.keys().flatten().map(|k| pid_of(&k)).collect();
        self.gone_before_read = pids
            .into_iter()
            .filter(|&pid| pid != 0 && !held.contains(&pid) && !crate::collectors::procfs::exists(pid))
            .collect();
    }

    /// After the read was emitted: removes the noted processes' entries
    /// from `map`, and returns their keys (for the caller's baselines).
    pub fn forget<K: Pod + Ord, V: Pod>(
        &mut self,
        map: &mut PerCpuHashMap<MapData, K, V>,
        pid_of: impl Fn(&K) -> u32,
    ) -> Vec<K> {
        let gone = std::mem::take(&mut self.gone_before_read);
        let keys: Vec<K> = map.keys().flatten().filter(|k| gone.contains(&pid_of(k))).collect();
        keys.into_iter().filter(|k| map.remove(k).is_ok()).collect()
    }
}

/// What each key gained from `base` to `now`, for the keys `keep` accepts.
pub fn delta<K: Ord + Copy, V: Counters>(
    now: &BTreeMap<K, V>,
    base: &BTreeMap<K, V>,
    keep: impl Fn(&V) -> bool,
) -> BTreeMap<K, V> {
    now.iter()
        .map(|(k, v)| {
            let mut d = *v;
            if let Some(b) = base.get(k) {
                d.sub(b);
            }
            (*k, d)
        })
        .filter(|(_, v)| keep(v))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_cpu_counters_add_and_subtract() {
        let mut a = DevStats {
            packets: 3,
            bytes: 300,
            ..Default::default()
        };
        a.size_hist[2] = 3;
        let mut b = DevStats {
            packets: 2,
            bytes: 150,
            ..Default::default()
        };
        b.size_hist[2] = 1;
        b.size_hist[5] = 1;
        let mut sum = a;
        sum.add(&b);
        assert_eq!(
            (sum.packets, sum.bytes, sum.size_hist[2], sum.size_hist[5]),
            (5, 450, 4, 1)
        );
        sum.sub(&a);
        assert_eq!(
            (sum.packets, sum.bytes, sum.size_hist[2], sum.size_hist[5]),
            (2, 150, 1, 1)
        );
        // Never below zero (a counter reset between readings).
        sum.sub(&a);
        assert_eq!((sum.packets, sum.size_hist[2]), (0, 0));
    }

    #[test]
    fn latency_extremes_merge() {
        let mut a = LatencyHist {
            count: 1,
            sum_ns: 50,
            min_ns: 50,
            max_ns: 50,
            ..Default::default()
        };
        let b = LatencyHist {
            count: 2,
            sum_ns: 110,
            min_ns: 10,
            max_ns: 100,
            ..Default::default()
        };
        a.add(&b);
        assert_eq!((a.count, a.sum_ns, a.min_ns, a.max_ns), (3, 160, 10, 100));
        let mut empty = LatencyHist::default();
        empty.add(&b);
        assert_eq!((empty.min_ns, empty.max_ns), (10, 100));
    }

    #[test]
    fn delta_keeps_what_changed() {
        let base: BTreeMap<u32, u64> = [(1, 10), (2, 5)].into();
        let now: BTreeMap<u32, u64> = [(1, 15), (2, 5), (3, 7)].into();
        let d = delta(&now, &base, |v| *v > 0);
        assert_eq!(d, [(1, 5), (3, 7)].into());
    }
}
