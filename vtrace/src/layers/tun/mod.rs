//! The tun layer (`--layers tun`): tun/tap and vhost-net kernel functions
//! per device and calling process, in frames and bytes
//! (vtrace-ebpf/src/tun.rs). Kernels without kprobes (and whose fentry
//! cannot reach module functions) see taps through the net layer's
//! tracepoints on the tap device instead.

pub mod collector;
pub mod probes;
pub mod summary;
pub mod tables;

use std::collections::BTreeMap;

use aya::Ebpf;
use vtrace_common::{Config, TunKey, TunStats};

pub use tables::TunRow;

use self::collector::TunMaps;
use super::{Attached, Collector, Emit, End, Layer, LayerOutput, Setup, cpu::ThreadRow};
use crate::{
    Result,
    probes::ProbeSpec,
    recording::{Overhead, TableKind},
};

pub struct TunLayer;

impl Layer for TunLayer {
    fn name(&self) -> &'static str {
        "tun"
    }
    fn catalog(&self) -> &'static [ProbeSpec] {
        probes::TUN
    }
    fn tables(&self) -> Vec<TableKind> {
        vec![TableKind::of::<TunRow>()]
    }
    fn summarize(&self, rec: &crate::recording::Recording, top: usize) -> crate::report_model::Section {
        summary::section(rec, top)
    }
    fn start(&self, ebpf: &mut Ebpf, _setup: &Setup, _config: &Config) -> Result<Box<dyn Collector>> {
        Ok(Box::new(TunRecorder {
            maps: TunMaps::new(ebpf)?,
            start: BTreeMap::new(),
            end: BTreeMap::new(),
        }))
    }
}

struct TunRecorder {
    maps: TunMaps,
    start: BTreeMap<TunKey, TunStats>,
    end: BTreeMap<TunKey, TunStats>,
}

impl Collector for TunRecorder {
    fn baseline(&mut self, _attached: &Attached) -> Result<()> {
        self.start = self.maps.snapshot()?;
        Ok(())
    }

    fn end(&mut self, _ebpf: &Ebpf, end: &End) -> Result<()> {
        self.checkpoint(end).map(drop)
    }

    fn checkpoint(&mut self, _now: &End) -> Result<bool> {
        self.end = self.maps.snapshot()?;
        Ok(true)
    }

    fn emit(&self, ctx: &Emit, out: &mut LayerOutput, _overhead: &mut Overhead) -> Result<()> {
        out.tables.put(collector::rows(
            &self.start,
            &self.end,
            ctx.tables.rows::<ThreadRow>(),
            ctx.probes,
        ));
        Ok(())
    }
}
