//! KVM collector: exit and user-space-exit latency, port/MMIO accesses and
//! interrupt injection per vCPU thread (`vtrace-ebpf/src/kvm.rs`), named by
//! `names.rs`; KVM's own per-VM statistics for a cross-check in `stats.rs`.

use std::collections::BTreeMap;

use aya::{
    Ebpf,
    maps::{HashMap, MapData, PerCpuHashMap},
};
use vtrace_common::{
    KvmEventKey, KvmEventStats, KvmLatencyKey, LatencyHist, VcpuPending, fine_bucket_range, kvm_event, kvm_latency,
};

use super::names::{ReasonNames, device_at};
use crate::{
    Result,
    collectors::maps::{sum_per_cpu, take},
    layers::cpu::ThreadIndex,
    layers::{
        cpu::ThreadRow,
        kvm::tables::{KvmEventRow, KvmLatencyHistRow, KvmLatencyRow},
    },
};

pub struct KvmCollector {
    latency: PerCpuHashMap<MapData, KvmLatencyKey, LatencyHist>,
    events: PerCpuHashMap<MapData, KvmEventKey, KvmEventStats>,
    pending: HashMap<MapData, u32, VcpuPending>,
}

/// What the KVM maps hold at one moment, summed over CPUs.
#[derive(Default)]
pub struct KvmSnapshot {
    pub latency: BTreeMap<KvmLatencyKey, LatencyHist>,
    pub events: BTreeMap<KvmEventKey, KvmEventStats>,
}

impl KvmSnapshot {
    /// Threads that ran a vCPU: they exited to KVM or to the VMM.
    pub fn vcpu_tids(&self) -> std::collections::HashSet<u32> {
        self.latency
            .keys()
            .filter(|k| k.kind != kvm_latency::HALT)
            .map(|k| k.tid)
            .chain(
                self.events
                    .keys()
                    .filter(|k| [kvm_event::PIO, kvm_event::MMIO, kvm_event::FAST_MMIO].contains(&k.kind))
                    .map(|k| k.tid),
            )
            .collect()
    }
}

impl KvmCollector {
    pub fn new(ebpf: &mut Ebpf) -> Result<Self> {
        Ok(KvmCollector {
            latency: take(ebpf, "KVM_LATENCY")?,
            events: take(ebpf, "KVM_EVENTS")?,
            pending: take(ebpf, "VCPU_PENDING")?,
        })
    }

    /// Exits counted so far for the threads `tids` (one lookup each).
    /// vtrace's count so far, over `tids`, of what KVM's statistic `stat`
    /// counts ([`super::stats::PAIRED_STATS`]).
    pub fn count_of(&self, tids: &[u32], stat: &str) -> u64 {
        tids.iter()
            .filter_map(|tid| self.pending.get(tid, 0).ok())
            .map(|p| if stat == "exits" { p.exits } else { p.injections })
            .sum()
    }

    pub fn snapshot(&self) -> Result<KvmSnapshot> {
        Ok(KvmSnapshot {
            latency: sum_per_cpu(&self.latency)?,
            events: sum_per_cpu(&self.events)?,
        })
    }
}

/// Rows of the kvm_* tables, each thread named by `threads`.
pub fn rows(
    snap: &KvmSnapshot,
    names: &ReasonNames,
    threads: &[ThreadRow],
) -> (Vec<KvmLatencyRow>, Vec<KvmLatencyHistRow>, Vec<KvmEventRow>) {
    let index = ThreadIndex::new(threads);
    // A thread the threads table lacks is left unnamed.
    let who = |tid: u32| index.thread(tid).map(|t| t.owner.clone()).unwrap_or_default();
    let mut latency = Vec::new();
    let mut hists = Vec::new();
    for (k, h) in &snap.latency {
        if h.count == 0 {
            continue;
        }
        let (isa, reason_name) = names.name(k);
        let kind = kvm_latency::NAMES.get(k.kind as usize).copied().unwrap_or("?");
        latency.push(KvmLatencyRow {
            tid: k.tid,
            owner: who(k.tid),
            kind: kind.into(),
            isa: isa.into(),
            reason: k.reason,
            reason_name: reason_name.clone(),
            count: h.count,
            sum_ns: h.sum_ns,
            min_ns: h.min_ns,
            max_ns: h.max_ns,
        });
        for (i, &count) in h.buckets.iter().enumerate().filter(|(_, c)| **c > 0) {
            let (lo_ns, hi_ns) = fine_bucket_range(i);
            hists.push(KvmLatencyHistRow {
                tid: k.tid,
                kind: kind.into(),
                reason_name: reason_name.clone(),
                lo_ns,
                hi_ns,
                count,
            });
        }
    }
    let events = snap
        .events
        .iter()
        .map(|(k, s)| {
            let op = match k.kind {
                kvm_event::PIO => if k.op & 1 == 1 { "write" } else { "read" }.to_string(),
                kvm_event::MMIO => names.mmio_type.get(&k.op).cloned().unwrap_or_else(|| k.op.to_string()),
                kvm_event::FAST_MMIO => "write".into(),
                kvm_event::SET_IRQ => format!("level {}", k.op as i32),
                kvm_event::MSI => format!("vector {}", k.op),
                kvm_event::INJ_VIRQ => if k.op == 1 { "soft" } else { "irq" }.to_string(),
                kvm_event::USERSPACE_EXIT => names.userspace_name(k.addr as u32),
                kvm_event::EXIT => {
                    let key = KvmLatencyKey {
                        tid: k.tid,
                        kind: kvm_latency::EXIT,
                        reason: k.addr as u32,
                        isa: k.op,
                    };
                    names.name(&key).1
                }
                _ => k.op.to_string(),
            };
            KvmEventRow {
                tid: k.tid,
                owner: who(k.tid),
                kind: kvm_event::NAMES.get(k.kind as usize).copied().unwrap_or("?").into(),
                addr: k.addr,
                op,
                size: k.size,
                count: s.count,
                bytes: s.bytes,
                device: device_at(k.kind, k.addr, k.op),
            }
        })
        .collect();
    (latency, hists, events)
}
