//! Uprobe collector: calls, sizes and latency per attach point and process
//! (`vtrace-ebpf/src/uprobe.rs`).

use std::collections::BTreeMap;

use aya::{
    Ebpf,
    maps::{MapData, PerCpuHashMap},
};
use vtrace_common::{UprobeKey, UprobeStats};

use crate::{
    Result,
    collectors::maps::{sum_per_cpu, take},
};

pub struct UprobeCollector {
    stats: PerCpuHashMap<MapData, UprobeKey, UprobeStats>,
}

impl UprobeCollector {
    pub fn new(ebpf: &mut Ebpf) -> Result<Self> {
        Ok(UprobeCollector {
            stats: take(ebpf, "UPROBE_STATS")?,
        })
    }

    /// Totals per (slot, process).
    pub fn snapshot(&self) -> Result<BTreeMap<UprobeKey, UprobeStats>> {
        sum_per_cpu(&self.stats)
    }
}
