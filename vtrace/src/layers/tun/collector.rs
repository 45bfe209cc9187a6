//! Reads the tun layer's map (vtrace-ebpf/src/tun.rs) and makes its rows,
//! attributed through the CPU layer's threads.

use std::collections::BTreeMap;

use aya::{
    Ebpf,
    maps::{MapData, PerCpuHashMap},
};
use vtrace_common::{TunKey, TunStats, tun_fn};

use super::tables::TunRow;
use crate::{
    Result,
    collectors::maps::{Counters, delta, sum_per_cpu, take},
    layers::cpu::ThreadIndex,
    layers::cpu::ThreadRow,
    probes::ProbeStatus,
};

impl Counters for TunStats {
    fn add(&mut self, o: &Self) {
        self.calls += o.calls;
        self.frames += o.frames;
        self.bytes += o.bytes;
        for (a, b) in self.sizes.iter_mut().zip(o.sizes) {
            *a += b;
        }
        if self.name[0] == 0 {
            self.name = o.name;
        }
    }
    fn sub(&mut self, o: &Self) {
        self.calls -= o.calls.min(self.calls);
        self.frames -= o.frames.min(self.frames);
        self.bytes -= o.bytes.min(self.bytes);
        for (a, b) in self.sizes.iter_mut().zip(o.sizes) {
            *a -= b.min(*a);
        }
    }
}

pub struct TunMaps {
    stats: PerCpuHashMap<MapData, TunKey, TunStats>,
}

impl TunMaps {
    pub fn new(ebpf: &mut Ebpf) -> Result<Self> {
        Ok(TunMaps {
            stats: take(ebpf, "TUN_STATS")?,
        })
    }

    pub fn snapshot(&self) -> Result<BTreeMap<TunKey, TunStats>> {
        sum_per_cpu(&self.stats)
    }
}

/// The tun rows of the window (`end` less `start`).
pub fn rows(
    start: &BTreeMap<TunKey, TunStats>,
    end: &BTreeMap<TunKey, TunStats>,
    threads: &[ThreadRow],
    probes: &[ProbeStatus],
) -> Vec<TunRow> {
    let index = ThreadIndex::new(threads);
    let window = delta(end, start, |s: &TunStats| s.calls > 0);
    window
        .iter()
        .filter(|(_, s)| s.calls > 0)
        .map(|(k, s)| {
            let function = tun_fn::NAMES.get(k.function as usize).copied().unwrap_or("?");
            let name_len = s.name.iter().position(|&b| b == 0).unwrap_or(s.name.len());
            TunRow {
                device: String::from_utf8_lossy(&s.name[..name_len]).into_owned(),
                netns: (k.dev >> 32) as u32,
                ifindex: k.dev as u32,
                function: function.to_string(),
                owner: index.process_owner(k.tgid),
                method: probes
                    .iter()
                    .find(|p| p.id.ends_with(&format!(":{function}")))
                    .and_then(|p| p.method.clone())
                    .unwrap_or_default(),
                calls: s.calls,
                frames: s.frames,
                bytes: s.bytes,
                sizes: s.sizes.iter().map(u64::to_string).collect::<Vec<_>>().join(","),
            }
        })
        .collect()
}
