//! What to record and how: the layers to run, what selects the threads of
//! interest, and every layer's switches. Below `record` (which re-exports
//! it), so that layers read it without reaching up.

use std::{path::PathBuf, time::Duration};

use crate::{
    Error, Result,
    collectors::bpf_stats::SelfStats,
    layers::{self, cpu::CpuSplit},
    platforms,
};

/// What to record and how. `RecordOptions::default()` is a plain `vtrace
/// record`: the default layers, the host platform, 10 s, into `run.vtrace`.
#[derive(Clone, Debug)]
pub struct RecordOptions {
    pub platform: String,
    /// One instance of the platform (its id or root pid); all of them when None.
    pub instance: Option<String>,
    /// Extra platform profiles.
    pub platform_file: Option<PathBuf>,
    pub pids: Vec<u32>,
    pub comms: Vec<String>,
    pub cgroups: Vec<PathBuf>,
    /// Stop after this long (ignored when a command is given: it stops when
    /// the command exits); None: until Ctrl-C or [`Recorder::stop`].
    pub duration: Option<Duration>,
    /// Snapshot (time series) interval.
    pub interval: Duration,
    /// Every layer's tables are checkpointed into the journal this often (a
    /// killed vtrace leaves them as of the last one); zero: never.
    pub checkpoint: Duration,
    pub output: PathBuf,
    pub command: Vec<String>,
    /// `--uprobe BINARY:SYMBOL[:ret]` specs.
    pub uprobes: Vec<String>,
    /// Stream every packet at every hop (`--events`).
    pub events: bool,
    /// Follow each skb from hop to hop for per-hop latency (`--hops`).
    pub hops: bool,
    /// Time the VMM's handling of KVM user-space exits even when no vCPU
    /// exists at the start (`--kvm-run`).
    pub kvm_run: bool,
    /// Layers to run (`--layers`, names from [`layers::REGISTRY`]); the CPU layer always runs.
    pub layers: Vec<String>,
    /// Stack sampling frequency (`--sample HZ`), 0 for none.
    pub sample_hz: u64,
    /// When the kernel's BPF run-time statistics are on (`--self-stats`).
    pub self_stats: SelfStats,
    /// How user and system time are told apart (`--cpu-split`).
    pub cpu_split: CpuSplit,
    /// The work done (`--ops N`), when the workload's output does not say
    /// or says something else than what should be counted.
    pub ops: Option<f64>,
    /// Pass the command's output on to this process's (it is kept in the
    /// recording either way); `vtrace bench` keeps it only.
    pub pass_output: bool,
    /// Replace a recording already at `output`; without it the old one is
    /// kept as `NAME.old` (perf's convention).
    pub force: bool,
}

impl Default for RecordOptions {
    fn default() -> Self {
        RecordOptions {
            platform: platforms::HOST.into(),
            instance: None,
            platform_file: None,
            pids: Vec::new(),
            comms: Vec::new(),
            cgroups: Vec::new(),
            duration: Some(Duration::from_secs(10)),
            interval: Duration::from_secs(1),
            checkpoint: Duration::from_secs(10),
            output: PathBuf::from("run.vtrace"),
            command: Vec::new(),
            uprobes: Vec::new(),
            events: false,
            hops: false,
            kvm_run: false,
            layers: layers::default_names(),
            sample_hz: 0,
            self_stats: SelfStats::Sampled,
            cpu_split: CpuSplit::Ticks,
            ops: None,
            pass_output: true,
            force: false,
        }
    }
}

impl RecordOptions {
    /// The cost mode in words: "default", or the default plus each costlier
    /// option turned on (README "What it costs" measures each).
    pub fn mode(&self) -> String {
        let mut mode = vec!["default".to_string()];
        if self.cpu_split == CpuSplit::Syscalls {
            mode.push("exact split".into());
        }
        if self.hops && !self.events {
            mode.push("hops".into());
        }
        if self.events {
            mode.push("events".into());
        }
        if self.kvm_run {
            mode.push("kvm-run".into());
        }
        if self.sample_hz > 0 {
            mode.push(format!("stacks {} Hz", self.sample_hz));
        }
        if self.self_stats == SelfStats::Always {
            mode.push("stats always".into());
        }
        mode.join(" + ")
    }
}

/// Builder-style setters, for programs that embed vtrace.
impl RecordOptions {
    pub fn output(mut self, path: impl Into<PathBuf>) -> Self {
        self.output = path.into();
        self
    }
    pub fn layers<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.layers = names.into_iter().map(Into::into).collect();
        self
    }
    pub fn platform(mut self, name: impl Into<String>) -> Self {
        self.platform = name.into();
        self
    }
    pub fn pid(mut self, pid: u32) -> Self {
        self.pids.push(pid);
        self
    }
    pub fn comm(mut self, comm: impl Into<String>) -> Self {
        self.comms.push(comm.into());
        self
    }
    pub fn duration(mut self, d: Option<Duration>) -> Self {
        self.duration = d;
        self
    }
    pub fn checkpoint(mut self, d: Duration) -> Self {
        self.checkpoint = d;
        self
    }
    pub fn interval(mut self, d: Duration) -> Self {
        self.interval = d;
        self
    }
    pub fn command<S: Into<String>>(mut self, argv: impl IntoIterator<Item = S>) -> Self {
        self.command = argv.into_iter().map(Into::into).collect();
        self
    }
    pub fn cpu_split(mut self, split: CpuSplit) -> Self {
        self.cpu_split = split;
        self
    }
    pub fn self_stats(mut self, mode: SelfStats) -> Self {
        self.self_stats = mode;
        self
    }
    pub fn sample_hz(mut self, hz: u64) -> Self {
        self.sample_hz = hz;
        self
    }
    pub fn events(mut self, on: bool) -> Self {
        self.events = on;
        self
    }
    pub fn hops(mut self, on: bool) -> Self {
        self.hops = on;
        self
    }
    pub fn kvm_run(mut self, on: bool) -> Self {
        self.kvm_run = on;
        self
    }
    pub fn force(mut self, on: bool) -> Self {
        self.force = on;
        self
    }
    pub fn pass_output(mut self, on: bool) -> Self {
        self.pass_output = on;
        self
    }

    pub fn ops(mut self, count: Option<f64>) -> Self {
        self.ops = count;
        self
    }

    pub fn uprobe(mut self, spec: impl Into<String>) -> Self {
        self.uprobes.push(spec.into());
        self
    }

    /// Selectors that name nothing fail here: a --pid of no process, a
    /// --cgroup that does not exist, a --uprobe binary that is not there.
    pub(crate) fn check_selectors(&self) -> Result<()> {
        for pid in &self.pids {
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                return Err(Error::BadArgument(format!("--pid {pid}: no such process")));
            }
        }
        let root = crate::collectors::procfs::cgroup2_root().unwrap_or_default();
        for c in &self.cgroups {
            let under_root = std::path::Path::new(&root).join(c.strip_prefix("/").unwrap_or(c));
            let exists = (c.is_absolute() && c.exists()) || under_root.exists();
            if !exists {
                return Err(Error::BadArgument(format!(
                    "--cgroup {}: no such cgroup (neither that path nor {} exists)",
                    c.display(),
                    under_root.display()
                )));
            }
        }
        for u in &self.uprobes {
            for spec in crate::probes::catalog::user_uprobe(u).map_err(Error::BadArgument)? {
                for s in spec.strategies {
                    if let crate::probes::Strategy::UProbe { binary, .. } = s
                        && crate::probes::catalog::resolve_binary(binary).is_none()
                    {
                        return Err(Error::BadArgument(format!("--uprobe {u}: {binary} not found")));
                    }
                }
            }
        }
        Ok(())
    }

    /// Unknown layer names fail here, with the known ones.
    pub(crate) fn check_layers(&self) -> Result<()> {
        match self.layers.iter().find(|l| layers::find(l).is_none()) {
            Some(bad) => Err(Error::BadArgument(format!(
                "unknown layer '{bad}': known layers are {}",
                layers::names().join(", ")
            ))),
            None => Ok(()),
        }
    }
}
