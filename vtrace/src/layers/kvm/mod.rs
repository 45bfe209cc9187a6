//! The KVM layer, in the style of `perf kvm stat`: exits by reason with
//! exit -> entry latency, user-space exits with the VMM's handling time,
//! port and MMIO accesses, interrupt injection, halts, and KVM's own
//! statistics beside vtrace's counts (vtrace-ebpf/src/kvm.rs).

pub mod analysis;
pub mod collector;
pub mod probes;
pub mod summary;
pub mod tables;

use aya::Ebpf;
use vtrace_common::Config;
use vtrace_common::kvm_latency;

pub use tables::{KvmEventRow, KvmIntervalRow, KvmLatencyHistRow, KvmLatencyRow, KvmStatRow};

use self::collector::{KvmCollector, KvmSnapshot, KvmStatsSampler, ReasonNames};
use super::{
    Collector, Emit, End, Facts, Layer, LayerOutput, Setup,
    cpu::{ThreadRow, monotonic_ns},
};
use crate::{
    Result,
    probes::{ProbeSpec, offsets::tracepoint_field},
    recording::{Overhead, TableKind},
};

pub struct KvmLayer;

impl Layer for KvmLayer {
    fn name(&self) -> &'static str {
        "kvm"
    }
    fn catalog(&self) -> &'static [ProbeSpec] {
        probes::KVM
    }
    /// User-space exits are timed until the thread's next ioctl(KVM_RUN),
    /// watched through syscalls/sys_enter_ioctl where kvm_userspace_exit
    /// exists. Attaching any syscalls/* tracepoint moves every syscall of
    /// every process to the kernel's slow entry path (36 ns a syscall on
    /// this project's machine: docs/overhead.md), so it is attached only
    /// when a process runs a vCPU when recording starts, or with `--kvm-run`.
    fn probes(&self, setup: &Setup, _config: &Config) -> Result<Vec<ProbeSpec>> {
        let uexit = setup
            .caps
            .tracefs
            .as_ref()
            .is_ok_and(|t| tracepoint_field(t, "kvm", "kvm_userspace_exit", "reason").is_some());
        let vcpus = setup.opts.kvm_run || setup.system.processes.iter().any(|p| p.kvm_vcpus);
        Ok(probes::KVM
            .iter()
            .filter(|p| p.id != "kvm_run" || (uexit && vcpus))
            .copied()
            .collect())
    }
    fn tables(&self) -> Vec<TableKind> {
        vec![
            TableKind::of::<KvmLatencyRow>(),
            TableKind::of::<KvmLatencyHistRow>(),
            TableKind::of::<KvmEventRow>(),
            TableKind::of::<KvmStatRow>(),
            TableKind::of::<KvmIntervalRow>(),
        ]
    }
    fn summarize(&self, rec: &crate::recording::Recording, top: usize) -> crate::report_model::Section {
        summary::section(rec, top)
    }
    fn start(&self, ebpf: &mut Ebpf, setup: &Setup, _config: &Config) -> Result<Box<dyn Collector>> {
        Ok(Box::new(KvmRecorder {
            maps: KvmCollector::new(ebpf)?,
            names: setup
                .caps
                .tracefs
                .as_ref()
                .map(|t| ReasonNames::from_tracefs(t))
                .unwrap_or_default(),
            stats: KvmStatsSampler::start(),
            last: KvmSnapshot::default(),
            last_at: setup.start_mono,
            start_mono: setup.start_mono,
            intervals: Vec::new(),
        }))
    }
}

struct KvmRecorder {
    maps: KvmCollector,
    names: ReasonNames,
    stats: KvmStatsSampler,
    /// The latest snapshot (the end one after `end`).
    last: KvmSnapshot,
    last_at: u64,
    start_mono: u64,
    intervals: Vec<KvmIntervalRow>,
}

impl KvmRecorder {
    fn push_interval(&mut self, snap: KvmSnapshot, now_mono: u64) {
        for (k, h) in &snap.latency {
            let before = self.last.latency.get(k);
            let count = h.count - before.map_or(0, |b| b.count.min(h.count));
            if count == 0 {
                continue;
            }
            self.intervals.push(KvmIntervalRow {
                start_ns: self.last_at.saturating_sub(self.start_mono),
                end_ns: now_mono.saturating_sub(self.start_mono),
                tid: k.tid,
                kind: kvm_latency::NAMES.get(k.kind as usize).copied().unwrap_or("?").into(),
                reason_name: self.names.name(k).1,
                count,
                sum_ns: h.sum_ns.saturating_sub(before.map_or(0, |b| b.sum_ns)),
            });
        }
        self.last = snap;
        self.last_at = now_mono;
    }
}

impl Collector for KvmRecorder {
    fn tick(&mut self, now_mono: u64) -> Result<()> {
        self.stats.sample();
        let snap = self.maps.snapshot()?;
        self.push_interval(snap, now_mono);
        Ok(())
    }

    fn end(&mut self, _ebpf: &Ebpf, _end: &End) -> Result<()> {
        let snap = self.maps.snapshot()?;
        self.push_interval(snap, monotonic_ns());
        self.stats.sample();
        Ok(())
    }

    /// Its readings at the last tick stand for now.
    fn checkpoint(&mut self, _now: &End) -> Result<bool> {
        Ok(true)
    }

    fn facts(&self, facts: &mut Facts) {
        facts.vcpu_tids.extend(self.last.vcpu_tids());
    }

    fn emit(&self, ctx: &Emit, out: &mut LayerOutput, _overhead: &mut Overhead) -> Result<()> {
        let threads = ctx.tables.rows::<ThreadRow>();
        let (latency, hists, events) = collector::rows(&self.last, &self.names, threads);
        if let Some(e) = &self.stats.error {
            out.notes
                .push(format!("KVM's own statistics unreadable, no cross-check: {e}"));
        }
        if ctx.probes.iter().any(|p| p.id == "kvm_run" && p.available) {
            out.notes.push(
                "KVM_RUN watched through syscalls/sys_enter_ioctl: while it is attached every syscall of every \
                 process takes the kernel's slow entry path (36 ns a syscall on this project's machine, in no \
                 figure of the overhead section)"
                    .into(),
            );
        }
        let exits_seen = latency.iter().any(|r| r.kind == "exit");
        if !exits_seen && latency.iter().any(|r| r.kind == "userspace_exit") {
            out.notes.push(
                "kvm_exit/kvm_entry never fired although vCPUs ran (e.g. a PVM host): exit reasons and exit->entry \
                 latency are unavailable; user-space exits, VMM handling time and pio/mmio counts are exact"
                    .into(),
            );
        }
        out.tables.put(latency);
        out.tables.put(hists);
        out.tables.put(events);
        out.tables.put(self.stats.rows());
        out.tables.put(self.intervals.clone());
        Ok(())
    }
}
