//! The uprobe layer: calls, sizes and latency of user-space functions per
//! process: lwIP's stack functions, QEMU's virtio backend, and any
//! `--uprobe BINARY:SYMBOL[:ret]` (vtrace-ebpf/src/uprobe.rs).

pub mod collector;
pub mod probes;
pub mod summary;
pub mod tables;

use aya::Ebpf;
use vtrace_common::Config;

pub use tables::{UprobeHistRow, UprobeIntervalRow, UprobeRow};

use std::collections::BTreeMap;

use vtrace_common::{UprobeKey, UprobeStats};

use self::collector::UprobeCollector;
use super::{Collector, Emit, End, Layer, LayerOutput, Request, Setup, SwitchGroup, cpu::ThreadRow};
use crate::{
    Error, Result,
    collectors::maps::delta,
    platforms,
    probes::{ProbeSpec, ProbeStatus, catalog::user_uprobe},
    recording::{Overhead, TableKind},
};

pub struct UprobeLayer;

impl Layer for UprobeLayer {
    fn name(&self) -> &'static str {
        "uprobe"
    }
    /// Named in `--layers`, or asked for with `--uprobe`.
    fn wanted(&self, asked: &Request) -> bool {
        asked.names(self.name()) || !asked.switches.get::<UprobeOptions>().uprobes.is_empty()
    }
    fn switches(&self) -> Option<SwitchGroup> {
        Some(SwitchGroup::of::<UprobeOptions>())
    }
    fn catalog(&self) -> &'static [ProbeSpec] {
        probes::UPROBE
    }
    /// The catalog's that can fire ([`catalog_in_use`]), and every `--uprobe`.
    fn probes(&self, setup: &Setup, _config: &Config) -> Result<Vec<ProbeSpec>> {
        let mut specs = catalog_in_use(setup).0;
        for u in &setup.asked.switches.get::<UprobeOptions>().uprobes {
            specs.extend(user_uprobe(u).map_err(Error::BadArgument)?);
        }
        Ok(specs)
    }
    fn tables(&self) -> Vec<TableKind> {
        vec![
            TableKind::of::<UprobeRow>(),
            TableKind::of::<UprobeHistRow>(),
            TableKind::of::<UprobeIntervalRow>(),
        ]
    }
    fn summarize(&self, rec: &crate::recording::Recording, _top: usize) -> crate::report_model::Section {
        summary::section(rec)
    }
    fn start(&self, ebpf: &mut Ebpf, setup: &Setup, _config: &Config) -> Result<Box<dyn Collector>> {
        Ok(Box::new(UprobeRecorder {
            maps: UprobeCollector::new(ebpf)?,
            left_out: catalog_in_use(setup).1,
            last: Default::default(),
            last_at: setup.start_mono,
            start_mono: setup.start_mono,
            intervals: Vec::new(),
        }))
    }
}

/// The catalog's uprobes this recording attaches, and those it leaves out
/// with why (none unless `--layers` names the layer). A uprobe's detach
/// waits for a grace period under a lock every detach takes (about 0.1 s
/// each here): the catalog's ten cost each recording a second at its end,
/// also where nothing runs lwIP or QEMU. So the host's recording (no
/// platform chosen) attaches one only where a process runs its binary at
/// the start: an executable by /proc/PID/exe, a library by /proc/PID/maps.
/// A platform's recording attaches them all:
/// its command may start the platform.
pub fn catalog_in_use(setup: &Setup) -> (Vec<ProbeSpec>, Vec<ProbeStatus>) {
    let mut used = Vec::new();
    let mut left_out = Vec::new();
    if !setup.asked.names(UprobeLayer.name()) {
        return (used, left_out);
    }
    let on_host = setup.asked.platform == platforms::HOST;
    // Each binary looked for once (lwIP's six uprobes share one library).
    let mut looked: Vec<(&str, bool)> = Vec::new();
    for spec in probes::UPROBE {
        let binary = spec.strategies.iter().find_map(|s| match s {
            crate::probes::Strategy::UProbe { binary, .. } => Some(*binary),
            _ => None,
        });
        let mut runs_now = |binary: &'static str| match looked.iter().find(|(b, _)| *b == binary) {
            Some(&(_, r)) => r,
            None => {
                let r = runs(setup.system, binary);
                looked.push((binary, r));
                r
            }
        };
        match binary {
            Some(binary) if on_host && !runs_now(binary) => left_out.push(ProbeStatus::new(
                spec,
                None,
                vec![format!(
                    "not attached: no process ran {binary} at the start of this host recording \
                     (a recording of the platform that runs it, --platform NAME, attaches it)"
                )],
            )),
            _ => used.push(*spec),
        }
    }
    (used, left_out)
}

/// Whether a process of `system` runs `binary` (resolved as a uprobe's is):
/// an executable as its /proc/PID/exe, a library mapped.
fn runs(system: &platforms::SystemSnapshot, binary: &str) -> bool {
    let Some(path) = crate::probes::catalog::resolve_binary(binary).and_then(|p| p.canonicalize().ok()) else {
        return false;
    };
    let name = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    if !name.contains(".so") {
        return system.processes.iter().any(|p| p.exe == name);
    }
    let path = path.to_string_lossy();
    system
        .processes
        .iter()
        .any(|p| std::fs::read_to_string(format!("/proc/{}/maps", p.pid)).is_ok_and(|maps| maps.contains(&*path)))
}

struct UprobeRecorder {
    maps: UprobeCollector,
    /// The catalog's uprobes not attached, with why.
    left_out: Vec<ProbeStatus>,
    /// The latest snapshot (the end one after `end`).
    last: BTreeMap<UprobeKey, UprobeStats>,
    last_at: u64,
    start_mono: u64,
    /// (start, end, key, calls, bytes) per interval; probe names are known at emit.
    intervals: Vec<(u64, u64, UprobeKey, u64, u64)>,
}

impl UprobeRecorder {
    fn push_interval(&mut self, now_mono: u64) -> Result<()> {
        let snap = self.maps.snapshot()?;
        for (k, d) in delta(&snap, &self.last, |v| v.calls > 0) {
            self.intervals.push((
                self.last_at.saturating_sub(self.start_mono),
                now_mono.saturating_sub(self.start_mono),
                k,
                d.calls,
                d.bytes,
            ));
        }
        self.last = snap;
        self.last_at = now_mono;
        Ok(())
    }
}

impl Collector for UprobeRecorder {
    fn attach(&mut self, _ebpf: &mut Ebpf) -> Result<Vec<ProbeStatus>> {
        Ok(std::mem::take(&mut self.left_out))
    }

    fn tick(&mut self, now_mono: u64) -> Result<()> {
        self.push_interval(now_mono)
    }

    fn end(&mut self, _ebpf: &Ebpf, _end: &End) -> Result<()> {
        self.push_interval(super::cpu::monotonic_ns())
    }

    /// Its readings at the last tick stand for now.
    fn checkpoint(&mut self, _now: &End) -> Result<bool> {
        Ok(true)
    }

    fn forget(&mut self) -> Result<()> {
        self.intervals.clear();
        Ok(())
    }

    fn emit(&self, ctx: &Emit, out: &mut LayerOutput, _overhead: &mut Overhead) -> Result<()> {
        let (rows, hists) = uprobe_rows(&self.last, ctx.probes, ctx.tables.rows::<ThreadRow>());
        let probe_of = |slot: u32| ctx.probes.iter().find(|p| p.slot == Some(slot)).map(|p| p.id.clone());
        let intervals = self
            .intervals
            .iter()
            .filter_map(|&(start_ns, end_ns, k, calls, bytes)| {
                Some(UprobeIntervalRow {
                    start_ns,
                    end_ns,
                    probe: probe_of(k.slot)?,
                    pid: k.tgid,
                    calls,
                    bytes,
                })
            })
            .collect();
        out.tables.put(rows);
        out.tables.put(hists);
        out.tables.put::<UprobeIntervalRow>(intervals);
        Ok(())
    }
}

/// Uprobe rows per (probe, process), attributed like the process's threads.
pub fn uprobe_rows(
    stats: &std::collections::BTreeMap<vtrace_common::UprobeKey, vtrace_common::UprobeStats>,
    probes: &[ProbeStatus],
    threads: &[ThreadRow],
) -> (Vec<UprobeRow>, Vec<UprobeHistRow>) {
    use vtrace_common::SIZE_BUCKETS;
    let mut rows = Vec::new();
    let mut hists = Vec::new();
    let index = crate::layers::cpu::ThreadIndex::new(threads);
    for (k, v) in stats {
        let Some(p) = probes.iter().find(|p| p.slot == Some(k.slot)) else {
            continue;
        };
        let main = index.process(k.tgid);
        rows.push(UprobeRow {
            probe: p.id.clone(),
            pid: k.tgid,
            comm: main.map(|t| t.owner.comm.clone()).unwrap_or_default(),
            platform: main
                .map(|t| t.owner.platform.clone())
                .unwrap_or_else(|| platforms::HOST.into()),
            instance: main.map(|t| t.owner.instance.clone()).unwrap_or_default(),
            calls: v.calls,
            bytes: v.bytes,
            returns: v.returns,
            latency_sum_ns: v.latency_sum_ns,
        });
        for (i, &count) in v.size_hist.iter().enumerate().filter(|(_, c)| **c > 0) {
            let le = SIZE_BUCKETS.get(i).copied().unwrap_or(u32::MAX as u64);
            hists.push(UprobeHistRow {
                probe: p.id.clone(),
                pid: k.tgid,
                kind: "size".into(),
                le,
                count,
            });
        }
        for (i, &count) in v.latency_log2.iter().enumerate().filter(|(_, c)| **c > 0) {
            hists.push(UprobeHistRow {
                probe: p.id.clone(),
                pid: k.tgid,
                kind: "latency".into(),
                le: (1u64 << (i + 1)) - 1,
                count,
            });
        }
    }
    (rows, hists)
}

/// The uprobe layer's switches (`record`, `bench`).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct UprobeOptions {
    /// Count calls of a user-space function: BINARY:SYMBOL, or BINARY:SYMBOL:ret for latency too (repeatable).
    #[arg(long = "uprobe")]
    pub uprobes: Vec<String>,
}
