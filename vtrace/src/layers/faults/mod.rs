//! The faults layer (`--layers faults`): page faults per thread, by the
//! mode of the code that faulted (vtrace-ebpf/src/faults.rs). Memory a VMM
//! or a container touches for the first time, and a guest's memory backed
//! on demand, show up here.

pub mod probes;
pub mod summary;
pub mod tables;

use std::collections::BTreeMap;

use aya::{
    Ebpf,
    maps::{MapData, PerCpuArray, PerCpuHashMap},
};
use vtrace_common::{Config, FaultCounts};

pub use tables::FaultRow;

use super::{Collector, Emit, End, Layer, LayerOutput, Loss, Setup, ThreadColumns, cpu::ThreadIndex, cpu::ThreadRow};
use crate::{
    Error, Result,
    collectors::maps::take,
    probes::ProbeSpec,
    recording::{Overhead, Recording, TableKind},
    report_model::Section,
};

pub struct FaultsLayer;

impl Layer for FaultsLayer {
    fn name(&self) -> &'static str {
        "faults"
    }
    /// A program on every page fault of every process: asked for.
    fn on_by_default(&self) -> bool {
        false
    }
    fn catalog(&self) -> &'static [ProbeSpec] {
        probes::FAULTS
    }
    fn tables(&self) -> Vec<TableKind> {
        vec![TableKind::of::<FaultRow>()]
    }
    fn losses(&self) -> &'static [Loss] {
        &[Loss {
            key: "faults.drops",
            meaning: "page faults not counted: the per-thread map was full",
        }]
    }
    fn summarize(&self, rec: &Recording, top: usize) -> Section {
        summary::section(rec, top)
    }
    fn thread_columns(&self, rec: &Recording) -> Option<ThreadColumns> {
        let rows = rec.rows::<FaultRow>();
        (!rows.is_empty()).then(|| ThreadColumns {
            names: &["faults_user", "faults_kernel"],
            by_tid: rows.iter().map(|r| (r.tid, vec![r.user, r.kernel])).collect(),
        })
    }
    fn start(&self, ebpf: &mut Ebpf, _setup: &Setup, _config: &Config) -> Result<Box<dyn Collector>> {
        Ok(Box::new(FaultsRecorder {
            faults: take(ebpf, "FAULTS")?,
            drops: take(ebpf, "FAULT_DROPS")?,
            last: BTreeMap::new(),
            dropped: 0,
        }))
    }
}

struct FaultsRecorder {
    faults: PerCpuHashMap<MapData, u32, FaultCounts>,
    drops: PerCpuArray<MapData, u64>,
    /// Each thread's faults, summed over CPUs, at the last reading.
    last: BTreeMap<u32, FaultCounts>,
    dropped: u64,
}

impl FaultsRecorder {
    fn read(&mut self) -> Result<()> {
        let mut last = BTreeMap::new();
        for entry in self.faults.iter() {
            let (tid, per_cpu) = entry.map_err(|e| Error::Ebpf(format!("FAULTS: {e}")))?;
            let sum = per_cpu.iter().fold(FaultCounts::default(), |a, c| FaultCounts {
                user: a.user + c.user,
                kernel: a.kernel + c.kernel,
            });
            last.insert(tid, sum);
        }
        self.last = last;
        self.dropped = self.drops.get(&0, 0).map(|v| v.iter().sum()).unwrap_or(0);
        Ok(())
    }
}

impl Collector for FaultsRecorder {
    fn checkpoint(&mut self, _now: &End) -> Result<bool> {
        self.read()?;
        Ok(true)
    }

    fn emit(&self, ctx: &Emit, out: &mut LayerOutput, _overhead: &mut Overhead) -> Result<()> {
        let index = ThreadIndex::new(ctx.tables.rows::<ThreadRow>());
        let rows: Vec<FaultRow> = self
            .last
            .iter()
            .map(|(&tid, c)| FaultRow {
                tid,
                owner: index.thread_owner(tid),
                user: c.user,
                kernel: c.kernel,
            })
            .collect();
        out.tables.put(rows);
        out.losses.push(("faults.drops", self.dropped));
        Ok(())
    }
}
