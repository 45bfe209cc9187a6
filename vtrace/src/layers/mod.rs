//! Layers: one unit per probe family. A layer names its probes (its part of
//! the catalog), says whether it can run here, contributes to the eBPF
//! object's configuration, and starts a [`Collector`] that reads what its
//! programs accumulate, keeps a time series, and emits its own tables.
//!
//! Each layer lives in `layers/<name>/` beside its eBPF file
//! `vtrace-ebpf/src/<name>.rs`: `mod.rs` (its `Layer` and `Collector`),
//! `probes.rs` (catalog entries), `collector.rs` (reading the kernel, and
//! snapshot -> rows where that is short; `rows.rs` where it is not),
//! `tables.rs` (what it records), `analysis.rs` and `summary.rs` (its report
//! section). [`REGISTRY`] (`registry.rs`) lists them, and collects their
//! switches (`switches.rs`); `record` runs them through one generic
//! loop (docs/adding-a-layer.md).

use std::{
    collections::{HashMap, HashSet},
    path::Path,
};

use aya::Ebpf;
use vtrace_common::Config;

use crate::{
    Result,
    platforms::{SystemSnapshot, attribute::Attribution},
    probes::{Capabilities, ProbeSpec, ProbeStatus, offsets::KernelLayout},
    recording::{Overhead, Recording, TableKind, TableSet, Workload},
    report_model::Section,
};

pub mod block;
pub mod cpu;
pub mod faults;
pub mod fs;
pub mod guest;
pub mod kvm;
pub mod net;
pub mod path;
pub mod registry;
pub mod runq;
pub mod sample;
pub mod switches;
pub mod tun;
pub mod uprobe;
pub mod vsock;

pub use self::{
    registry::{
        REGISTRY, catalog, default_names, find, kernel_config, layers_help, loss_meaning, names, read, recover_into,
        table_kinds,
    },
    switches::{CommonSwitches, Switch, SwitchGroup, Switches},
};

/// What a recording asks of the layers: `record` sets it from its options.
#[derive(Clone, Debug, Default)]
pub struct Request {
    /// The layers named (`--layers`).
    pub layers: Vec<String>,
    /// The platform whose instances are selected (`--platform`).
    pub platform: String,
    /// Selected processes with their descendants, thread names, cgroups.
    pub pids: Vec<u32>,
    pub comms: Vec<String>,
    pub cgroups: Vec<std::path::PathBuf>,
    /// `vtrace serve`'s session: nothing written, no history kept.
    pub live: bool,
    /// Each layer's own switches.
    pub switches: Switches,
}

impl Request {
    /// Whether `--layers` names `layer`.
    pub fn names(&self, layer: &str) -> bool {
        self.layers.iter().any(|l| l == layer)
    }
}

/// What a layer sees while the recording is set up.
pub struct Setup<'a> {
    pub asked: &'a Request,
    pub caps: &'a Capabilities,
    /// The system at the start: processes, network namespaces and devices.
    pub system: &'a SystemSnapshot,
    /// Where the recording is staged (tables streamed while recording go there).
    pub staging: &'a Path,
    /// Monotonic clock at the start of the recording.
    pub start_mono: u64,
}

/// A probe family: its probes, configuration and collector.
pub trait Layer: Sync {
    /// The `--layers` value.
    fn name(&self) -> &'static str;
    /// On in a plain `vtrace record`.
    fn on_by_default(&self) -> bool {
        true
    }
    /// Whether this recording asked for it.
    fn wanted(&self, asked: &Request) -> bool {
        asked.names(self.name())
    }
    /// Its own command-line switches ([`Switches`]), if it has any.
    fn switches(&self) -> Option<SwitchGroup> {
        None
    }
    /// What its switches as set add to the recording's cost mode
    /// ("exact split", "hops"...): none at their defaults.
    fn cost_mode(&self, _asked: &Request) -> Vec<String> {
        Vec::new()
    }
    /// Why it cannot run on this machine, if it cannot.
    fn can_run(&self, _setup: &Setup) -> Result<(), String> {
        Ok(())
    }
    /// Its catalog entries: every probe it may attach, best strategy first.
    fn catalog(&self) -> &'static [ProbeSpec];
    /// The kernel struct member and tracepoint record offsets its programs
    /// read (Rust eBPF has no CO-RE), into the eBPF object's configuration.
    fn offsets(&self, _kernel: &KernelLayout, _config: &mut Config) {}
    /// Its switches in the eBPF object's configuration.
    fn configure(&self, _setup: &Setup, _config: &mut Config) {}
    /// The probes to attach in this recording, once every layer configured.
    fn probes(&self, _setup: &Setup, _config: &Config) -> Result<Vec<ProbeSpec>> {
        Ok(self.catalog().to_vec())
    }
    /// The tables it writes, so that a reader knows how to read them back.
    fn tables(&self) -> Vec<TableKind>;
    /// Takes its maps from the loaded object (before any probe attaches).
    fn start(&self, ebpf: &mut Ebpf, setup: &Setup, config: &Config) -> Result<Box<dyn Collector>>;
    /// Its report section (`top` rows per text table), from any recording,
    /// with or without its tables.
    fn summarize(&self, rec: &Recording, top: usize) -> Section;
    /// What it may fail to count, each as `layer.counter` (its own name
    /// first) with what a non-zero count means; its collector reports the
    /// counts in [`LayerOutput::losses`] and both reports show them.
    fn losses(&self) -> &'static [Loss] {
        &[]
    }
    /// Columns it adds to every thread's row of the JSON report (the CPU
    /// layer's `threads`), where it ran: their names and each thread's
    /// values (0 for a thread it has none for). The report joins them; no
    /// layer edits another's rows.
    fn thread_columns(&self, _rec: &Recording) -> Option<ThreadColumns> {
        None
    }
    /// Its Prometheus series (`vtrace serve`), read from the tables it just
    /// emitted: each a cumulative value per source (its `metrics.rs`).
    fn metrics(&self, _tables: &TableSet, _out: &mut crate::exposition::Samples) {}
}

/// A counter of what a layer could not count.
pub struct Loss {
    /// `layer.counter`, e.g. `runq.drops`.
    pub key: &'static str,
    pub meaning: &'static str,
}

/// Per-thread columns a layer adds to the threads of the JSON report.
pub struct ThreadColumns {
    pub names: &'static [&'static str],
    pub by_tid: std::collections::HashMap<u32, Vec<u64>>,
}

/// What a layer's collector sees once its probes are attached.
pub struct Attached<'a> {
    pub probes: &'a [ProbeStatus],
}

/// What a layer's collector sees when the recording ends.
pub struct End<'a> {
    /// The system right after the run: devices and processes started meanwhile.
    pub system: &'a SystemSnapshot,
}

/// Facts one layer learns that another's rows depend on.
#[derive(Default)]
pub struct Facts {
    /// Threads that ran a vCPU (the KVM layer's): the CPU layer gives them the `vcpu` role.
    pub vcpu_tids: HashSet<u32>,
    /// tid -> the index of the vCPU it runs, as KVM tells it (the KVM layer's).
    pub vcpu_index: HashMap<u32, u32>,
    /// (netns, ifindex) -> the name the kernel gave a device when a probe
    /// first saw it (the tun layer's): a device created and removed during
    /// the run keeps its name in every table.
    pub device_names: HashMap<(u32, u32), String>,
}

/// What a layer's collector sees when it emits its tables.
pub struct Emit<'a> {
    pub asked: &'a Request,
    pub caps: &'a Capabilities,
    /// The system at the start (the end's is in [`End`]).
    pub system: &'a SystemSnapshot,
    /// Owner of every thread and device: platform, instance, role.
    pub attribution: &'a Attribution,
    pub probes: &'a [ProbeStatus],
    pub workload: Option<&'a Workload>,
    /// Embedded in another program ([`crate::record::Recorder`]): the name
    /// of vtrace's own threads in that process; None on the command line,
    /// where every thread of the process is vtrace's.
    pub own_threads: Option<&'static str>,
    pub facts: &'a Facts,
    /// Tables emitted by the layers before this one (the CPU layer's first).
    pub tables: &'a TableSet,
    /// A checkpoint mid-run ([`Collector::checkpoint`]), not the end: a
    /// series the journal already holds line by line is left out.
    pub checkpoint: bool,
}

/// What a collector emits.
#[derive(Default)]
pub struct LayerOutput {
    pub tables: TableSet,
    /// Caveats a reader of the numbers must know.
    pub notes: Vec<String>,
    /// Its loss counters (`Layer::losses`' keys), zeros included.
    pub losses: Vec<(&'static str, u64)>,
}

/// A layer's userspace side for one recording.
pub trait Collector {
    /// Right after the catalog's probes attached: what it attaches itself
    /// (perf events), with their statuses.
    fn attach(&mut self, _ebpf: &mut Ebpf) -> Result<Vec<ProbeStatus>> {
        Ok(Vec::new())
    }
    /// Once its probes are attached, before the workload starts: the
    /// window's opening readings. Repeatable: the recorder takes every
    /// layer's between two reads of the network devices' counters, again
    /// while a packet moved or a layer's reading was unsteady
    /// (record::edge).
    fn baseline(&mut self, _attached: &Attached) -> Result<()> {
        Ok(())
    }
    /// Every interval: the layer's time series.
    fn tick(&mut self, _now_mono: u64) -> Result<()> {
        Ok(())
    }
    /// How long a workload's last events may take to land after it exits,
    /// before anything is read at the end.
    fn settle(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
    /// Once the workload stopped, probes still attached, after the last
    /// [`Collector::checkpoint`] (the window's closing readings, taken like
    /// the baselines): what ends the session (a reader stopped, the final
    /// interval closed at its own clock read).
    fn end(&mut self, _ebpf: &Ebpf, _end: &End) -> Result<()> {
        Ok(())
    }
    /// Then, with the recording's end time: readings that define the window
    /// (the CPU layer's final snapshot).
    fn close(&mut self, _end_mono: u64) -> Result<()> {
        Ok(())
    }
    /// Mid-run, every checkpoint, and once at the end before
    /// [`Collector::end`]: bring the readings [`Collector::emit`] uses up to
    /// now without ending anything, so that a killed vtrace leaves this
    /// layer's tables as they stood (recording::journal). Repeatable, like
    /// the baselines. False where its tables cannot be had before the end.
    fn checkpoint(&mut self, _now: &End) -> Result<bool> {
        Ok(false)
    }
    /// After its last reading (a baseline or a checkpoint): what moved in
    /// its probes' state while it read (a frame taken between its reads of
    /// two maps), so that the reading may not agree with itself. The
    /// recorder reads again at the window's edges (record::edge).
    fn unsteady(&self) -> Option<&'static str> {
        None
    }
    /// Facts other layers need (see [`Facts`]).
    fn facts(&self, _facts: &mut Facts) {}
    /// `vtrace serve` (`Request::live`), right after an emit that was
    /// read: drop the history kept for a recording (time series, threads
    /// that exited), so that a session that never ends stays the same size.
    fn forget(&mut self) -> Result<()> {
        Ok(())
    }
    /// Its tables, notes and loss counts ([`LayerOutput`]). Called at the
    /// end and, after [`Collector::checkpoint`], at each checkpoint.
    fn emit(&self, ctx: &Emit, out: &mut LayerOutput, overhead: &mut Overhead) -> Result<()>;
}
