//! What to record and how: `vtrace record`'s command line, also what a
//! program that embeds vtrace fills in. The layers see what they need of it
//! as a [`layers::Request`]; each layer's own switches are its own
//! (`layers::switches`), gathered here as one flattened group.

use std::{path::PathBuf, time::Duration};

use crate::{
    Error, Result,
    collectors::bpf_stats::SelfStats,
    layers::{
        self, CommonSwitches, Request, Switches, cpu::CpuOptions, cpu::CpuSplit, kvm::KvmOptions, net::NetOptions,
        sample::SampleOptions, uprobe::UprobeOptions,
    },
    platforms,
};

/// What to record and how: the `vtrace record` command line, and what a
/// program that embeds vtrace fills in. `RecordOptions::default()` is a
/// plain `vtrace record`: the default layers, the host platform, 10 s, into
/// `run.vtrace`.
#[derive(Clone, Debug, clap::Args)]
pub struct RecordOptions {
    /// Platform whose instances to select (see `vtrace platforms`).
    #[arg(long, default_value = "host")]
    pub platform: String,
    /// One instance of the platform: its id (e.g. linuxvm:1234) or root pid; all of them when not given.
    #[arg(long)]
    pub instance: Option<String>,
    /// Extra platform profiles (TOML, the format of vtrace/src/platforms/profiles.toml).
    #[arg(long)]
    pub platform_file: Option<PathBuf>,
    /// Layers to record, comma-separated (the CPU layer is always on): every registered layer
    /// ([`layers::layers_help`]).
    #[arg(long, value_delimiter = ',', default_values_t = layers::default_names(), help = layers::layers_help())]
    pub layers: Vec<String>,
    /// Each layer's own switches (declared in its folder).
    #[command(flatten)]
    pub switches: Switches,
    /// When the kernel's BPF statistics (vtrace's own cost per program) are on: sampled windows
    /// (cheap; totals extrapolated), always (exact totals, costs every event two clock reads,
    /// about 100 ns on this repository's machine), or off.
    #[arg(long, value_enum, default_value_t = SelfStats::Sampled)]
    pub self_stats: SelfStats,
    /// The work the command did, for per-operation figures, when its own output does not say
    /// (redis-benchmark, iperf3, fio and ping are read from their output, kept in workload.out).
    #[arg(long)]
    pub ops: Option<f64>,
    /// Select this process and its descendants (repeatable).
    #[arg(long = "pid")]
    pub pids: Vec<u32>,
    /// Select threads with this name (repeatable).
    #[arg(long = "comm")]
    pub comms: Vec<String>,
    /// Select processes in this cgroup v2 path or below (repeatable).
    #[arg(long = "cgroup")]
    pub cgroups: Vec<PathBuf>,
    /// Stop after this long when no command is given (e.g. 10s, 1m); None (embedded): until
    /// Ctrl-C or [`crate::record::Recorder::stop`].
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    pub duration: Option<Duration>,
    /// Time-series snapshot interval.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    pub interval: Duration,
    /// How often every layer's tables are checkpointed into the recording's journal, so that a
    /// vtrace killed mid-run (SIGKILL, the OOM killer) leaves them as of the last checkpoint; the
    /// CPU layer's time series is journaled every interval regardless. Never sooner than 100 times
    /// the last checkpoint took. 0 = never.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    pub checkpoint: Duration,
    /// Where to write the recording (a directory).
    #[arg(short, long, default_value = "run.vtrace")]
    pub output: PathBuf,
    /// Replace a recording already at the output path (else it is kept as NAME.old, perf's convention).
    #[arg(long)]
    pub force: bool,
    /// Pass the command's output on to this process's (it is kept in the
    /// recording either way); `vtrace bench` keeps it only.
    #[arg(skip = true)]
    pub pass_output: bool,
    /// `vtrace serve`: a session read at every scrape that writes nothing
    /// (no journal, no recording) and keeps no history: after each read its
    /// collectors forget what it emitted ([`crate::layers::Collector::forget`]).
    #[arg(skip)]
    pub live: bool,
    /// Command to run and record; recording stops when it exits, and vtrace exits with its status.
    #[arg(last = true)]
    pub command: Vec<String>,
}

impl Default for RecordOptions {
    fn default() -> Self {
        RecordOptions {
            platform: platforms::HOST.into(),
            instance: None,
            platform_file: None,
            layers: layers::default_names(),
            switches: layers::registry::default_switches(),
            self_stats: SelfStats::Sampled,
            ops: None,
            pids: Vec::new(),
            comms: Vec::new(),
            cgroups: Vec::new(),
            duration: Some(Duration::from_secs(10)),
            interval: Duration::from_secs(1),
            checkpoint: Duration::from_secs(10),
            output: PathBuf::from("run.vtrace"),
            force: false,
            pass_output: true,
            live: false,
            command: Vec::new(),
        }
    }
}

impl RecordOptions {
    /// The cost mode in words: "default", or the default plus each costlier
    /// option turned on (README "What it costs" measures each).
    pub fn mode(&self) -> String {
        let asked = self.request();
        let mut mode = vec!["default".to_string()];
        for layer in layers::REGISTRY {
            mode.extend(layer.cost_mode(&asked));
        }
        if self.self_stats == SelfStats::Always {
            mode.push("stats always".into());
        }
        mode.join(" + ")
    }

    /// What the layers see of it.
    pub fn request(&self) -> Request {
        Request {
            layers: self.layers.clone(),
            platform: self.platform.clone(),
            pids: self.pids.clone(),
            comms: self.comms.clone(),
            cgroups: self.cgroups.clone(),
            live: self.live,
            switches: self.switches.clone(),
        }
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
        self.switches.edit(|o: &mut CpuOptions| o.cpu_split = split);
        self
    }
    pub fn self_stats(mut self, mode: SelfStats) -> Self {
        self.self_stats = mode;
        self
    }
    pub fn sample_hz(mut self, hz: u64) -> Self {
        self.switches.edit(|o: &mut SampleOptions| o.sample_hz = hz);
        self
    }
    pub fn events(mut self, on: bool) -> Self {
        self.switches.edit(|o: &mut CommonSwitches| o.events = on);
        self
    }
    pub fn hops(mut self, on: bool) -> Self {
        self.switches.edit(|o: &mut NetOptions| o.hops = on);
        self
    }
    pub fn kvm_run(mut self, on: bool) -> Self {
        self.switches.edit(|o: &mut KvmOptions| o.kvm_run = on);
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
        self.switches.edit(|o: &mut UprobeOptions| o.uprobes.push(spec.into()));
        self
    }

    /// Selectors that name nothing fail here: a --pid of no process, a
    /// --cgroup that does not exist, a --uprobe binary that is not there.
    pub(crate) fn check_selectors(&self) -> Result<()> {
        for pid in &self.pids {
            if !crate::collectors::procfs::exists(*pid) {
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
        for u in &self.switches.get::<UprobeOptions>().uprobes {
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
