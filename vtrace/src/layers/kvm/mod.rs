//! The KVM layer, in the style of `perf kvm stat`: exits by reason with
//! exit -> entry latency, user-space exits with the VMM's handling time,
//! port and MMIO accesses, interrupt injection, halts, and KVM's own
//! statistics beside vtrace's counts (vtrace-ebpf/src/kvm.rs).

pub mod analysis;
pub mod collector;
pub mod metrics;
pub mod names;
pub mod probes;
pub mod stats;
pub mod summary;
pub mod tables;

use aya::Ebpf;
use vtrace_common::Config;
use vtrace_common::kvm_latency;

pub use tables::{KvmEventRow, KvmIntervalRow, KvmLatencyHistRow, KvmLatencyRow, KvmStatRow};

use self::{
    collector::{KvmCollector, KvmSnapshot},
    names::ReasonNames,
    stats::KvmStatsSampler,
};
use super::{
    Attached, Collector, Emit, End, Facts, Layer, LayerOutput, Request, Setup, SwitchGroup,
    cpu::{ThreadRow, monotonic_ns},
};
use crate::probes::offsets::KernelLayout;
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
    fn switches(&self) -> Option<SwitchGroup> {
        Some(SwitchGroup::of::<KvmOptions>())
    }
    fn cost_mode(&self, asked: &Request) -> Vec<String> {
        if asked.switches.get::<KvmOptions>().kvm_run {
            vec!["kvm-run".into()]
        } else {
            Vec::new()
        }
    }
    fn offsets(&self, k: &KernelLayout, o: &mut Config) {
        let kvm = |ev: &str, field: &str| k.tracepoint("kvm", ev, field);
        o.kvm.tp_kvm_exit_reason = kvm("kvm_exit", "exit_reason");
        o.kvm.tp_kvm_exit_isa = kvm("kvm_exit", "isa");
        o.kvm.tp_kvm_uexit_reason = kvm("kvm_userspace_exit", "reason");
        o.kvm.tp_kvm_uexit_errno = kvm("kvm_userspace_exit", "errno");
        o.kvm.tp_kvm_pio_rw = kvm("kvm_pio", "rw");
        o.kvm.tp_kvm_pio_port = kvm("kvm_pio", "port");
        o.kvm.tp_kvm_pio_size = kvm("kvm_pio", "size");
        o.kvm.tp_kvm_pio_count = kvm("kvm_pio", "count");
        o.kvm.tp_kvm_pio_val = kvm("kvm_pio", "val");
        o.kvm.tp_kvm_mmio_type = kvm("kvm_mmio", "type");
        o.kvm.tp_kvm_mmio_len = kvm("kvm_mmio", "len");
        o.kvm.tp_kvm_mmio_gpa = kvm("kvm_mmio", "gpa");
        o.kvm.tp_kvm_fast_mmio_gpa = kvm("kvm_fast_mmio", "gpa");
        o.kvm.tp_kvm_set_irq_gsi = kvm("kvm_set_irq", "gsi");
        o.kvm.tp_kvm_set_irq_level = kvm("kvm_set_irq", "level");
        o.kvm.tp_kvm_msi_address = kvm("kvm_msi_set_irq", "address");
        o.kvm.tp_kvm_msi_data = kvm("kvm_msi_set_irq", "data");
        // `vector` (with `soft`) since Linux 6.0; `irq` before.
        o.kvm.tp_kvm_inj_virq_vector = k.tracepoint_any("kvm", "kvm_inj_virq", &["vector", "irq"]);
        o.kvm.tp_kvm_inj_virq_soft = kvm("kvm_inj_virq", "soft");
        o.kvm.tp_kvm_wakeup_ns = kvm("kvm_vcpu_wakeup", "ns");
        o.kvm.tp_kvm_wakeup_waited = kvm("kvm_vcpu_wakeup", "waited");
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
        let vcpus =
            setup.asked.switches.get::<KvmOptions>().kvm_run || setup.system.processes.iter().any(|p| p.kvm_vcpus);
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
    fn metrics(&self, tables: &crate::recording::TableSet, out: &mut crate::exposition::Samples) {
        metrics::metrics(tables, out);
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
            // Read first in `baseline`, once every probe is attached.
            stats: KvmStatsSampler::default(),
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
    fn baseline(&mut self, _attached: &Attached) -> Result<()> {
        let maps = &self.maps;
        self.stats = KvmStatsSampler::start(self.start_mono, monotonic_ns(), &|tids, stat| maps.count_of(tids, stat));
        Ok(())
    }

    fn tick(&mut self, now_mono: u64) -> Result<()> {
        let maps = &self.maps;
        self.stats.sample(now_mono, &|tids, stat| maps.count_of(tids, stat));
        let snap = self.maps.snapshot()?;
        self.push_interval(snap, now_mono);
        Ok(())
    }

    fn end(&mut self, _ebpf: &Ebpf, _end: &End) -> Result<()> {
        // KVM's counters and vtrace's maps read back to back, at one time.
        let now = monotonic_ns();
        let maps = &self.maps;
        self.stats.sample(now, &|tids, stat| maps.count_of(tids, stat));
        let snap = self.maps.snapshot()?;
        self.push_interval(snap, now);
        Ok(())
    }

    /// Its readings at the last tick stand for now.
    fn checkpoint(&mut self, _now: &End) -> Result<bool> {
        Ok(true)
    }

    fn facts(&self, facts: &mut Facts) {
        facts.vcpu_tids.extend(self.last.vcpu_tids());
        // A thread KVM names as a vCPU's ran KVM_RUN: a vCPU, exits seen or not.
        for (tid, id) in self.stats.vcpu_index() {
            facts.vcpu_tids.insert(tid);
            facts.vcpu_index.insert(tid, id);
        }
    }

    fn forget(&mut self) -> Result<()> {
        self.intervals.clear();
        Ok(())
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
        let timed = ctx.probes.iter().any(|p| p.id == "kvm_run" && p.available);
        let uexits: u64 = events
            .iter()
            .filter(|e| e.kind == "userspace_exit")
            .map(|e| e.count)
            .sum();
        if !timed && uexits > 0 {
            out.notes.push(format!(
                "{uexits} user-space exits counted, but the VMM's handling of them was not timed: no process ran a \
                 vCPU when recording started (a VM the command starts), so the KVM_RUN probe stayed off (it slows \
                 every syscall while attached); `--kvm-run` attaches it from the start"
            ));
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

/// The KVM layer's switches (`record`, `bench`).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct KvmOptions {
    /// Time the VMM's handling of each KVM user-space exit (until the vCPU's next KVM_RUN) even
    /// when no process runs a vCPU at the start (a VM the command starts). Watching ioctl(2) moves
    /// every syscall of every process to the kernel's slow entry path: 36 ns a syscall here.
    #[arg(long)]
    pub kvm_run: bool,
}
