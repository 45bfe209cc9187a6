//! The run-queue layer (`--layers runq`, on whenever `--platform` names a
//! platform): how long every thread waited runnable before it ran, as a
//! total, a histogram and its longest wait with who ran instead
//! (vtrace-ebpf/src/runq.rs). The answer to "is the scheduler why": a vCPU
//! or vhost thread that waits on a run queue under CPU stress.

pub mod collector;
pub mod metrics;
pub mod probes;
pub mod summary;
pub mod tables;

use aya::Ebpf;
use vtrace_common::Config;

pub use tables::{RunqHistRow, RunqIntervalRow, RunqRow};

use self::collector::{RunqMaps, RunqSnapshot};
use super::{Collector, Emit, End, Layer, LayerOutput, Request, Setup, cpu::ThreadRow};
use crate::probes::offsets::KernelLayout;
use crate::{
    Result,
    layers::cpu::monotonic_ns,
    platforms,
    probes::ProbeSpec,
    recording::{Overhead, TableKind},
};

pub struct RunqLayer;

impl Layer for RunqLayer {
    fn name(&self) -> &'static str {
        "runq"
    }
    /// One more program on every context switch and wakeup: asked for, or
    /// implied by naming a platform.
    fn on_by_default(&self) -> bool {
        false
    }
    fn wanted(&self, asked: &Request) -> bool {
        asked.names(self.name()) || asked.platform != platforms::HOST
    }
    fn catalog(&self) -> &'static [ProbeSpec] {
        probes::RUNQ
    }
    /// The task and sched_switch offsets it shares come from the CPU layer, which always runs.
    fn offsets(&self, k: &KernelLayout, o: &mut Config) {
        o.runq.tp_switch_prev_pid = k.tracepoint("sched", "sched_switch", "prev_pid");
        o.runq.tp_wakeup_pid = k.tracepoint("sched", "sched_wakeup", "pid");
    }
    fn tables(&self) -> Vec<TableKind> {
        vec![
            TableKind::of::<RunqRow>(),
            TableKind::of::<RunqHistRow>(),
            TableKind::of::<RunqIntervalRow>(),
        ]
    }
    fn losses(&self) -> &'static [super::Loss] {
        &[super::Loss {
            key: "runq.drops",
            meaning: "run-queue waits not kept: the per-thread map was full",
        }]
    }
    fn summarize(&self, rec: &crate::recording::Recording, top: usize) -> crate::report_model::Section {
        summary::section(rec, top)
    }
    /// Each thread's total wait and number of waits beside its CPU time.
    fn thread_columns(&self, rec: &crate::recording::Recording) -> Option<crate::layers::ThreadColumns> {
        let rows = rec.rows::<RunqRow>();
        (!rows.is_empty()).then(|| crate::layers::ThreadColumns {
            names: &["runq_delay_ns", "runq_waits"],
            by_tid: rows.iter().map(|r| (r.tid, vec![r.delay_ns, r.waits])).collect(),
        })
    }
    fn metrics(&self, tables: &crate::recording::TableSet, out: &mut crate::exposition::Samples) {
        metrics::metrics(tables, out);
    }
    fn start(&self, ebpf: &mut Ebpf, setup: &Setup, _config: &Config) -> Result<Box<dyn Collector>> {
        Ok(Box::new(RunqRecorder {
            maps: RunqMaps::new(ebpf)?,
            last: RunqSnapshot::default(),
            last_at: setup.start_mono,
            start_mono: setup.start_mono,
            intervals: Vec::new(),
        }))
    }
}

struct RunqRecorder {
    maps: RunqMaps,
    /// The latest snapshot (the end one after `end`).
    last: RunqSnapshot,
    last_at: u64,
    start_mono: u64,
    intervals: Vec<RunqIntervalRow>,
}

impl RunqRecorder {
    fn push_interval(&mut self, snap: RunqSnapshot, now_mono: u64) {
        for (&tid, s) in &snap.threads {
            let h = &s.hist;
            let before = self.last.threads.get(&tid).map(|b| &b.hist);
            let waits = h.count - before.map_or(0, |b| b.count.min(h.count));
            if waits == 0 {
                continue;
            }
            self.intervals.push(RunqIntervalRow {
                start_ns: self.last_at.saturating_sub(self.start_mono),
                end_ns: now_mono.saturating_sub(self.start_mono),
                tid,
                waits,
                delay_ns: h.sum_ns.saturating_sub(before.map_or(0, |b| b.sum_ns)),
            });
        }
        self.last = snap;
        self.last_at = now_mono;
    }
}

impl Collector for RunqRecorder {
    fn tick(&mut self, now_mono: u64) -> Result<()> {
        let snap = self.maps.snapshot()?;
        self.push_interval(snap, now_mono);
        Ok(())
    }

    fn end(&mut self, _ebpf: &Ebpf, _end: &End) -> Result<()> {
        let snap = self.maps.snapshot()?;
        self.push_interval(snap, monotonic_ns());
        Ok(())
    }

    /// Its readings at the last tick stand for now.
    fn checkpoint(&mut self, _now: &End) -> Result<bool> {
        Ok(true)
    }

    fn forget(&mut self) -> Result<()> {
        self.intervals.clear();
        self.maps.forget_exited(&mut self.last);
        Ok(())
    }

    fn emit(&self, ctx: &Emit, out: &mut LayerOutput, _overhead: &mut Overhead) -> Result<()> {
        let (rows, hists) = collector::rows(&self.last, ctx.tables.rows::<ThreadRow>(), self.start_mono);
        out.losses.push(("runq.drops", self.last.drops));
        out.tables.put(rows);
        out.tables.put(hists);
        out.tables.put(self.intervals.clone());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_when_asked_for_or_a_platform_is_named() {
        let layer = RunqLayer;
        let mut asked = Request {
            platform: platforms::HOST.into(),
            layers: vec!["cpu".into(), "net".into()],
            ..Request::default()
        };
        assert!(!layer.wanted(&asked), "not in a plain record");
        asked.platform = "kata".into();
        assert!(layer.wanted(&asked), "--platform kata");
        asked.platform = platforms::HOST.into();
        asked.layers.push("runq".into());
        assert!(layer.wanted(&asked), "--layers ...,runq");
    }
}
