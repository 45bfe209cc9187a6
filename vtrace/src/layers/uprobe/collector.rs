//! Uprobe collector: calls, sizes and latency per attach point and process
//! (`vtrace-ebpf/src/uprobe.rs`).

use std::collections::BTreeMap;

use aya::{
    Ebpf,
    maps::{MapData, PerCpuHashMap},
};
use vtrace_common::{UprobeKey, UprobeStats};

use crate::{Error, Result};

pub struct UprobeCollector {
    stats: PerCpuHashMap<MapData, UprobeKey, UprobeStats>,
}

impl UprobeCollector {
    pub fn new(ebpf: &mut Ebpf) -> Result<Self> {
        let map = ebpf
            .take_map("UPROBE_STATS")
            .ok_or_else(|| Error::Ebpf("map UPROBE_STATS missing".into()))?;
        Ok(UprobeCollector {
            stats: PerCpuHashMap::try_from(map).map_err(|e| Error::Ebpf(e.to_string()))?,
        })
    }

    /// Totals per (slot, process).
    pub fn snapshot(&self) -> Result<BTreeMap<UprobeKey, UprobeStats>> {
        let mut out: BTreeMap<UprobeKey, UprobeStats> = BTreeMap::new();
        for entry in self.stats.iter() {
            let (k, per_cpu) = entry.map_err(|e| Error::Ebpf(e.to_string()))?;
            let t = out.entry(k).or_default();
            for v in per_cpu.iter() {
                t.calls += v.calls;
                t.bytes += v.bytes;
                t.returns += v.returns;
                t.latency_sum_ns += v.latency_sum_ns;
                for (a, b) in t.size_hist.iter_mut().zip(v.size_hist) {
                    *a += b;
                }
                for (a, b) in t.latency_log2.iter_mut().zip(v.latency_log2) {
                    *a += b;
                }
            }
        }
        Ok(out)
    }
}
