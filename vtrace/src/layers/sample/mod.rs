//! The sample layer (`--sample HZ`): stacks sampled on every CPU by a
//! cpu-clock perf event, counted in the kernel per thread and stack, folded
//! and symbolized at the end (vtrace-ebpf/src/sample.rs).

pub mod collector;
pub mod flamegraph;
pub mod summary;
pub mod tables;

use aya::Ebpf;
use vtrace_common::Config;

pub use collector::PROGRAM;
pub use tables::{GUEST_MODE_FRAME, SampleRow};

use self::collector::{FoldedStack, Sampler};
use super::{Collector, Emit, End, Layer, LayerOutput, Request, Setup, SwitchGroup, cpu::ThreadRow};
use crate::{
    Result,
    probes::{ProbeSpec, ProbeStatus},
    recording::{Overhead, TableKind},
};

/// Rate when the layer is named in `--layers` without `--sample HZ`.
pub const DEFAULT_HZ: u64 = 99;

pub struct SampleLayer;

impl SampleLayer {
    fn hz(asked: &Request) -> u64 {
        let hz = asked.switches.get::<SampleOptions>().sample_hz;
        if hz > 0 { hz } else { DEFAULT_HZ }
    }
}

impl Layer for SampleLayer {
    fn name(&self) -> &'static str {
        "sample"
    }
    fn on_by_default(&self) -> bool {
        false
    }
    fn wanted(&self, asked: &Request) -> bool {
        asked.switches.get::<SampleOptions>().sample_hz > 0 || asked.names(self.name())
    }
    fn switches(&self) -> Option<SwitchGroup> {
        Some(SwitchGroup::of::<SampleOptions>())
    }
    fn cost_mode(&self, asked: &Request) -> Vec<String> {
        match asked.switches.get::<SampleOptions>().sample_hz {
            0 => Vec::new(),
            hz => vec![format!("stacks {hz} Hz")],
        }
    }
    /// Not a probe point: it attaches to perf events itself.
    fn catalog(&self) -> &'static [ProbeSpec] {
        &[]
    }
    fn tables(&self) -> Vec<TableKind> {
        vec![TableKind::of::<SampleRow>()]
    }
    fn losses(&self) -> &'static [super::Loss] {
        &[super::Loss {
            key: "sample.drops",
            meaning: "stack samples not counted: the sample map was full",
        }]
    }
    fn summarize(&self, rec: &crate::recording::Recording, top: usize) -> crate::report_model::Section {
        summary::section(rec, top)
    }
    fn start(&self, _ebpf: &mut Ebpf, setup: &Setup, _config: &Config) -> Result<Box<dyn Collector>> {
        Ok(Box::new(SampleRecorder {
            hz: Self::hz(setup.asked),
            sampler: None,
            folded: Vec::new(),
            drops: 0,
        }))
    }
}

struct SampleRecorder {
    hz: u64,
    /// Attached after the catalog's probes, the CPU engine's first.
    sampler: Option<Sampler>,
    folded: Vec<FoldedStack>,
    drops: u64,
}

impl Collector for SampleRecorder {
    fn attach(&mut self, ebpf: &mut Ebpf) -> Result<Vec<ProbeStatus>> {
        self.sampler = Some(Sampler::start(ebpf, self.hz)?);
        Ok(vec![ProbeStatus {
            id: "sample:cpu-clock".into(),
            layer: "sample".into(),
            method: Some("perf_event".into()),
            program: Some(PROGRAM.into()),
            available: true,
            reason: None,
            caveat: None,
            slot: None,
        }])
    }

    /// Learns the mappings of newly sampled processes while they still exist.
    fn tick(&mut self, _now_mono: u64) -> Result<()> {
        if let Some(s) = self.sampler.as_mut() {
            s.learn_processes();
        }
        Ok(())
    }

    fn end(&mut self, _ebpf: &Ebpf, _end: &End) -> Result<()> {
        if let Some(s) = self.sampler.as_mut() {
            (self.folded, self.drops) = s.finish()?;
        }
        Ok(())
    }

    fn emit(&self, ctx: &Emit, out: &mut LayerOutput, overhead: &mut Overhead) -> Result<()> {
        overhead.sample_hz = self.hz;
        out.losses.push(("sample.drops", self.drops));
        out.tables
            .put(collector::rows(self.folded.clone(), ctx.tables.rows::<ThreadRow>()));
        Ok(())
    }
}

/// The sample layer's switches (`record`, `bench`).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct SampleOptions {
    /// Sample stacks at this frequency (Hz) on every CPU, for flamegraphs (`report --folded`); 0 = off.
    /// Cost at 99 Hz: redis over loopback 0.96 of untraced throughput (default 0.98), tracing cost
    /// 7.0 % of capacity (default 3.7 %).
    #[arg(long = "sample", default_value_t = 0)]
    pub sample_hz: u64,
}
