//! `vtrace record`: one generic loop over the layers. Choose the layers this
//! recording wants and this machine can run, let each configure the eBPF
//! object, load it, start their collectors, attach their probes, take
//! baselines, tick every interval until the stop, take the last readings,
//! emit every layer's tables, and write the recording atomically, also when
//! the workload fails or the user interrupts. Nothing here knows a layer.

mod programs;
mod session;

use std::{
    path::PathBuf,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

pub use crate::layers::options::RecordOptions;
pub use session::{OUTPUT_FILE, Stop};
use session::{Signals, WorkloadChild};

use crate::{
    Error, Result,
    collectors::bpf_stats::{self, SelfStats, StatsWindow},
    layers::{self, Attached, Collector, Emit, End, Facts, Layer, LayerOutput, Setup, cpu::monotonic_ns},
    platforms::{self, Instance, Profile, SystemSnapshot, attribute::Attribution},
    probes::{self, Capabilities, ProbeStatus, capabilities::ensure_tracefs, offsets},
    recording::{
        self, FORMAT_NAME, Host, Metadata, OutputSlot, Overhead, Recording, SCHEMA_VERSION, Selectors, TableSet,
    },
    workload::ops::Operations,
};

#[derive(Debug)]
pub struct RecordOutcome {
    pub path: PathBuf,
    /// The command's exit status as a shell reports it (128+signal when killed), 0 without a command.
    pub exit_code: i32,
    pub recording: Recording,
}

/// What preflight found: where to write, the system as it was, and the
/// platform's instances in it.
pub struct Prepared {
    slot: OutputSlot,
    profiles: Vec<Profile>,
    system: SystemSnapshot,
    instances: Vec<Instance>,
}

/// The selected platform's instances in `system` (none for `host`).
fn platform_instances(opts: &RecordOptions, profiles: &[Profile], system: &SystemSnapshot) -> Result<Vec<Instance>> {
    if opts.platform == platforms::HOST {
        return Ok(Vec::new());
    }
    let all = platforms::detect(profiles, system);
    platforms::select(profiles, all, &opts.platform, opts.instance.as_deref())
}

/// Checks everything that can be checked before the workload starts.
pub fn preflight(opts: &RecordOptions) -> Result<Prepared> {
    opts.check_layers()?;
    opts.check_selectors()?;
    let profiles = platforms::profiles(opts.platform_file.as_deref())?;
    if opts.platform != platforms::HOST {
        // An unknown name fails here, before privileges are looked at,
        // naming the instances that do run.
        if let Err(Error::UnknownPlatform { name, known, .. }) =
            platforms::select(&profiles, Vec::new(), &opts.platform, None)
        {
            let running = platforms::detect(&profiles, &SystemSnapshot::live());
            return Err(Error::UnknownPlatform {
                name,
                known,
                running: Some(platforms::ids(&running)),
            });
        }
    }
    crate::privileges::check()?;
    ensure_tracefs()?;
    // One look at the system serves platform detection, the tun fds to follow
    // and the kinds of the devices whose counters are read.
    let system = SystemSnapshot::live();
    let instances = platform_instances(opts, &profiles, &system)?;
    let slot = OutputSlot::claim(&opts.output, opts.force)?;
    Ok(Prepared {
        slot,
        profiles,
        system,
        instances,
    })
}

/// Records until the command exits, the duration passes, or SIGINT/SIGTERM.
pub fn record(opts: &RecordOptions) -> Result<RecordOutcome> {
    let prepared = preflight(opts)?;
    // Signal handlers need the runtime's reactor: installed inside it.
    runtime()?.block_on(async { run(opts, prepared, Control::command_line()?).await })
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(crate::error::io("start the async runtime"))
}

/// How a recording is told to stop, besides its command and duration, and
/// whom it tells that its probes are attached.
struct Control {
    signals: Option<Signals>,
    stop: Option<tokio::sync::oneshot::Receiver<()>>,
    attached: Option<std::sync::mpsc::Sender<()>>,
    /// Embedded: the name of the recorder's threads (see [`Emit::own_threads`]).
    own_threads: Option<&'static str>,
}

impl Control {
    fn command_line() -> Result<Control> {
        Ok(Control {
            signals: Some(Signals::install()?),
            stop: None,
            attached: None,
            own_threads: None,
        })
    }
}

/// The recorder thread's name (15 characters: a thread's comm holds no more).
const RECORDER_THREAD: &str = "vtrace-recorder";

/// A recording started and stopped by another program (no signal handlers
/// installed, no command needed): `Recorder::start(opts)?`, run the code to
/// measure, then `recorder.stop()?` returns the recording.
pub struct Recorder {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<RecordOutcome>>>,
}

impl Recorder {
    /// Returns once every probe is attached: what runs after it is recorded.
    /// An error before that (privileges, a probe the CPU layer cannot do
    /// without) is returned as the command line would report it.
    pub fn start(opts: RecordOptions) -> Result<Recorder> {
        let prepared = preflight(&opts)?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        let (attached_tx, attached_rx) = std::sync::mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(RECORDER_THREAD.into())
            .spawn(move || {
                let control = Control {
                    signals: None,
                    stop: Some(stop_rx),
                    attached: Some(attached_tx),
                    // Threads this one starts (the event reader) inherit its name.
                    own_threads: Some(RECORDER_THREAD),
                };
                runtime()?.block_on(run(&opts, prepared, control))
            })
            .map_err(crate::error::io("start the recorder thread"))?;
        let mut recorder = Recorder {
            stop: Some(stop_tx),
            thread: Some(thread),
        };
        match attached_rx.recv() {
            Ok(()) => Ok(recorder),
            // The recorder failed before attaching: its own error says why.
            Err(_) => Err(recorder
                .join()
                .err()
                .unwrap_or_else(|| Error::Ebpf("the recorder stopped before attaching".into()))),
        }
    }

    /// Whether the recording ended by itself (its command exited, its
    /// duration passed): [`Recorder::wait`] then returns at once.
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Waits for the recording to end by itself, and returns it.
    pub fn wait(mut self) -> Result<RecordOutcome> {
        // Held, not dropped: a dropped sender reads as a stop request.
        let _stop = self.stop.take();
        self.join()
    }

    /// Stops recording and writes the recording.
    pub fn stop(mut self) -> Result<RecordOutcome> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        self.join()
    }

    fn join(&mut self) -> Result<RecordOutcome> {
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(result)) => result,
            _ => Err(Error::Ebpf("the recorder thread panicked".into())),
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
            let _ = self.join();
        }
    }
}

/// One recording. Failing before its probes are attached, it drops
/// `control`, and with it the channel a [`Recorder`] waits on: the recorder
/// then takes the typed error from this function's result.
async fn run(opts: &RecordOptions, prepared: Prepared, mut control: Control) -> Result<RecordOutcome> {
    let Prepared {
        slot,
        profiles,
        system,
        instances: instances_at_start,
    } = prepared;
    let caps = Capabilities::detect();
    let mut setup = Setup {
        opts,
        caps: &caps,
        system: &system,
        staging: slot.staging(),
        // Set once the object is loaded: the window starts when the layers do.
        start_mono: 0,
    };
    let mut notes = Vec::new();
    let mut calibration = bpf_stats::Calibration::default();

    // The layers this recording runs, each configuring the eBPF object.
    let mut running: Vec<&dyn Layer> = Vec::new();
    for layer in layers::REGISTRY.iter().copied().filter(|l| l.wanted(opts)) {
        match layer.can_run(&setup) {
            Ok(()) => running.push(layer),
            Err(why) => notes.push(format!("layer {} skipped: {why}", layer.name())),
        }
    }
    let mut config = offsets::resolve(&caps);
    for layer in &running {
        layer.configure(&setup, &mut config);
    }
    let mut specs = Vec::new();
    for layer in &running {
        specs.extend(layer.probes(&setup, &config)?);
    }

    let mut ebpf = crate::ebpf::load(&config)?;
    if opts.self_stats != SelfStats::Off {
        match bpf_stats::calibrate(&mut ebpf) {
            Ok(c) => calibration = c,
            Err(e) => notes.push(format!(
                "BPF statistics floor not measured ({e}): run times are as measured"
            )),
        }
    }
    let start_unix = unix_ns();
    let start_mono = monotonic_ns();
    setup.start_mono = start_mono;
    let mut collectors: Vec<Box<dyn Collector>> = Vec::new();
    for layer in &running {
        collectors.push(layer.start(&mut ebpf, &setup, &config)?);
    }
    let mut stats = StatsWindow::start(opts.self_stats, opts.interval);
    if let Some(e) = &stats.error {
        notes.push(format!("self-overhead unknown: {e}"));
    }
    if opts.self_stats == SelfStats::Off {
        notes.push("BPF statistics off (--self-stats off): vtrace's own cost per program was not measured".into());
    }
    // The catalog's probes, the CPU engine's first; then what layers attach
    // themselves (perf events).
    let mut probes = probes::attach_all(&mut ebpf, &caps, &specs);
    // A uprobe the user asked for by name must attach (a missing symbol).
    if let Some(p) = probes
        .iter()
        .find(|p| (p.id.starts_with("uprobe:") || p.id.starts_with("uretprobe:")) && !p.available)
    {
        return Err(Error::BadArgument(format!(
            "--uprobe {}: {}",
            p.id.split_once(':').map_or("", |(_, rest)| rest),
            p.reason.clone().unwrap_or_default()
        )));
    }
    for c in &mut collectors {
        probes.extend(c.attach(&mut ebpf)?);
    }
    let attached = Attached { probes: &probes };
    for c in &mut collectors {
        c.baseline(&attached)?;
    }
    if let Some(tx) = control.attached.take() {
        let _ = tx.send(());
    }

    // vtrace's own CPU is counted from here: loading, verifying and
    // attaching happened before the workload started.
    let usage_at_start = self_usage();
    let (mut child, mut stop) = WorkloadChild::spawn(&opts.command, slot.staging(), opts.pass_output);
    // What is known now goes into the journal at once: a vtrace killed from
    // here on leaves a recording `vtrace recover` can write.
    let mut meta = Metadata {
        format: FORMAT_NAME.into(),
        schema_version: SCHEMA_VERSION,
        vtrace_version: env!("CARGO_PKG_VERSION").into(),
        host: Host {
            hostname: hostname(),
            kernel: caps.kernel_release.clone(),
            cpus: aya::util::nr_cpus().map(|n| n as u32).unwrap_or(1),
            clock_ticks: crate::collectors::procfs::clock_ticks(),
        },
        command_line: std::env::args().collect(),
        selectors: Selectors {
            platform: opts.platform.clone(),
            pids: opts.pids.clone(),
            comms: opts.comms.clone(),
            cgroups: opts.cgroups.iter().map(|p| p.display().to_string()).collect(),
        },
        workload: child.workload.clone(),
        stopped_by: String::new(),
        start_unix_ns: start_unix,
        end_unix_ns: start_unix,
        wall_ns: 0,
        cpu_split: opts.cpu_split.name().into(),
        mode: opts.mode(),
        layers: running.iter().map(|l| l.name().to_string()).collect(),
        tables: Default::default(),
        checksums: Default::default(),
        probes: probes.clone(),
        overhead: Overhead::default(),
        notes: notes.clone(),
        incomplete: None,
    };
    recording::journal::start(slot.staging(), &meta)?;
    // Checkpoints see the platform's instances as they were at the start.
    let attribution_at_start = Attribution::new(profiles.clone(), vec![instances_at_start.clone()]);
    let mut checkpoints = Checkpoints::new(opts.checkpoint);
    let deadline = match (&child.child, opts.duration) {
        (None, Some(d)) => Some(tokio::time::Instant::now() + d),
        _ => None,
    };
    let mut ticker = tokio::time::interval(opts.interval);
    ticker.tick().await; // the first tick fires at once
    while stop.is_none() {
        let stats_close = stats.closes_at();
        tokio::select! {
            s = child.wait() => stop = Some(s),
            _ = async { tokio::time::sleep_until(deadline.unwrap()).await }, if deadline.is_some() => stop = Some(Stop::Duration),
            name = Signals::next(&mut control.signals) => stop = Some(Stop::Signal(name)),
            _ = async { control.stop.as_mut().unwrap().await }, if control.stop.is_some() => stop = Some(Stop::Requested),
            _ = async { tokio::time::sleep_until(stats_close.unwrap()).await }, if stats_close.is_some() => {
                stats.close();
            }
            _ = ticker.tick() => {
                let now = monotonic_ns();
                for c in &mut collectors {
                    c.tick(now)?;
                }
                stats.tick();
                if checkpoints.due() {
                    let parts = Emit {
                        opts,
                        caps: &caps,
                        system: &system,
                        attribution: &attribution_at_start,
                        probes: &probes,
                        workload: child.workload.as_ref(),
                        own_threads: control.own_threads,
                        facts: &Facts::default(),
                        tables: &TableSet::default(),
                        checkpoint: true,
                    };
                    let began = std::time::Instant::now();
                    let result = checkpoint(&mut collectors, &ebpf, &parts, &meta, (start_mono, now, &usage_at_start), slot.staging());
                    checkpoints.done(result, began.elapsed());
                }
            }
        }
    }
    let stop = stop.expect("the loop ends with a stop");
    let bpf_stats_coverage = stats.finish();
    let exit_code = child.finish(&stop, &mut control.signals).await;
    let output = child.output(slot.staging()).await;
    if let Some(w) = child.workload.as_mut() {
        w.ops = match opts.ops {
            Some(n) => Some(Operations::given(n)),
            None => crate::workload::ops::parse(&w.command, &output),
        };
        w.fio = crate::workload::fio::jobs(&output);
    }

    // A workload's last packets (TCP close) land before anything is read.
    let workload_ran = child.child.is_some();
    if workload_ran && let Some(settle) = collectors.iter().map(|c| c.settle()).max() {
        tokio::time::sleep(settle).await;
    }
    // One look at the system after the run: the devices' kinds for their
    // counters, and the platform's processes and threads started meanwhile.
    let system_at_end = SystemSnapshot::live();
    let end = End { system: &system_at_end };
    for c in &mut collectors {
        c.end(&ebpf, &end)?;
    }
    // The window closes after every layer's last reading: CPU time (`close`)
    // covers all they counted.
    let end_mono = monotonic_ns();
    let end_unix = unix_ns();
    let programs = programs::read(&ebpf, &probes);
    for c in &mut collectors {
        c.close(end_mono)?;
    }
    let usage_at_end = self_usage();
    drop(ebpf); // detaches every program

    // Instances again at the end: processes and threads started during the run.
    let instances_at_end = if opts.platform == platforms::HOST {
        Vec::new()
    } else {
        platform_instances(opts, &profiles, &system_at_end).unwrap_or_default()
    };
    let attribution = Attribution::new(profiles, vec![instances_at_start, instances_at_end]);
    notes.extend(instance_notes(&attribution));
    notes.extend(checkpoints.notes());
    let usage_total = self_usage();
    let mut overhead = Overhead {
        vtrace_user_ns: usage_at_end
            .vtrace_user_ns
            .saturating_sub(usage_at_start.vtrace_user_ns),
        vtrace_system_ns: usage_at_end
            .vtrace_system_ns
            .saturating_sub(usage_at_start.vtrace_system_ns),
        vtrace_peak_rss_kib: usage_total.vtrace_peak_rss_kib,
        ..Default::default()
    };
    checkpoints.count(&mut overhead);
    overhead.vtrace_setup_ns = usage_total.vtrace_cpu_ns().saturating_sub(overhead.vtrace_cpu_ns());
    let parts = Emit {
        opts,
        caps: &caps,
        system: &system,
        attribution: &attribution,
        probes: &probes,
        workload: child.workload.as_ref(),
        own_threads: control.own_threads,
        facts: &Facts::default(),
        tables: &TableSet::default(),
        checkpoint: false,
    };
    let mut tables = emit_all(collectors.iter(), &parts, &mut overhead, &mut notes)?;

    let cpus = aya::util::nr_cpus().map(|n| n as u32).unwrap_or(1);
    let wall_ns = end_mono.saturating_sub(start_mono);
    overhead.bpf_stats_floor_ns = calibration.floor_ns;
    overhead.bpf_hook_ns = calibration.hook_ns;
    let bpf_run_time_ns = programs
        .iter()
        .map(|p| crate::report::whole_run_time_ns(p, &overhead))
        .sum();
    overhead.bpf_run_time_ns = bpf_run_time_ns;
    overhead.bpf_run_count = programs.iter().map(|p| p.events).sum();
    overhead.bpf_stats_coverage = bpf_stats_coverage;
    overhead.bpf_cpu_fraction = bpf_run_time_ns as f64 / (wall_ns.max(1) as f64 * cpus.max(1) as f64);
    let busy_ns: u64 = tables
        .rows::<layers::cpu::CpuRow>()
        .iter()
        .map(|c| layers::cpu::analysis::StateTimes::of_cpu(c).busy_ns())
        .sum();
    overhead.set_self_cost(wall_ns * cpus.max(1) as u64, busy_ns);
    tables.put(programs);
    meta.workload = child.workload;
    meta.stopped_by = stop.describe();
    meta.end_unix_ns = end_unix;
    meta.wall_ns = wall_ns;
    meta.host.cpus = cpus;
    meta.probes = probes;
    meta.overhead = overhead;
    meta.notes = notes;
    let mut rec = Recording {
        meta,
        tables,
        net_events: recording::NetEvents::default(),
        read_notes: Vec::new(),
    };
    let path = recording::write(&slot, &mut rec)?;
    Ok(RecordOutcome {
        path,
        exit_code,
        recording: rec,
    })
}

/// Every layer's tables and notes, in registry order: each sees the tables
/// of those before it (the CPU layer's threads first) and the facts of all.
/// `parts`: the context but for those two.
fn emit_all<'c>(
    collectors: impl Iterator<Item = &'c Box<dyn Collector>> + Clone,
    parts: &Emit,
    overhead: &mut Overhead,
    notes: &mut Vec<String>,
) -> Result<TableSet> {
    let mut facts = Facts::default();
    for c in collectors.clone() {
        c.facts(&mut facts);
    }
    let mut tables = TableSet::default();
    for c in collectors {
        let mut out = LayerOutput::default();
        let ctx = Emit {
            facts: &facts,
            tables: &tables,
            ..*parts
        };
        c.emit(&ctx, &mut out, overhead)?;
        notes.extend(out.notes);
        for (key, n) in out.losses {
            overhead.losses.insert(key.to_string(), n);
        }
        tables.extend(out.tables);
    }
    Ok(tables)
}

/// Writes the recording as it stands into the journal (see
/// [`recording::journal::checkpoint`]) right after a tick: the layers'
/// readings brought up to now, their tables, and the metadata known at the start.
fn checkpoint(
    collectors: &mut [Box<dyn Collector>],
    ebpf: &aya::Ebpf,
    parts: &Emit,
    started: &Metadata,
    (start_mono, tick_mono, usage_at_start): (u64, u64, &Overhead),
    staging: &std::path::Path,
) -> Result<()> {
    let now = End { system: parts.system };
    let mut ready = Vec::with_capacity(collectors.len());
    for c in collectors.iter_mut() {
        ready.push(c.checkpoint(&now)?);
    }
    let mut meta = started.clone();
    let usage = self_usage();
    let mut overhead = Overhead {
        vtrace_user_ns: usage.vtrace_user_ns.saturating_sub(usage_at_start.vtrace_user_ns),
        vtrace_system_ns: usage.vtrace_system_ns.saturating_sub(usage_at_start.vtrace_system_ns),
        vtrace_peak_rss_kib: usage.vtrace_peak_rss_kib,
        ..Default::default()
    };
    let mut notes = Vec::new();
    let ready_ones = collectors.iter().zip(&ready).filter(|(_, r)| **r).map(|(c, _)| c);
    let mut tables = emit_all(ready_ones, parts, &mut overhead, &mut notes)?;
    tables.put(programs::read(ebpf, parts.probes));
    let left_out: Vec<&str> = meta
        .layers
        .iter()
        .zip(&ready)
        .filter(|(_, r)| !**r)
        .map(|(l, _)| l.as_str())
        .collect();
    if !left_out.is_empty() {
        notes.push(format!(
            "layer(s) {} read their maps only at the end: nothing of them survives a killed vtrace",
            left_out.join(", ")
        ));
    }
    // As of the tick it follows: the CPU layer's tables are that tick's, and
    // its interval is journaled before (the other layers read a moment later).
    meta.wall_ns = tick_mono.saturating_sub(start_mono);
    meta.end_unix_ns = meta.start_unix_ns + meta.wall_ns;
    meta.notes.extend(notes);
    meta.overhead = overhead;
    let mut rec = Recording {
        meta,
        tables,
        net_events: recording::NetEvents::default(),
        read_notes: Vec::new(),
    };
    recording::journal::checkpoint(staging, &mut rec)
}

/// When the next checkpoint is due: every `every`, and never sooner than a
/// hundred times the last one took (at most 1 % of a CPU). One that fails
/// (a full disk) leaves the last whole one, and the next is tried as usual.
struct Checkpoints {
    every: Duration,
    next: Option<std::time::Instant>,
    written: u64,
    took: Duration,
    failures: u64,
    last_failure: Option<String>,
}

impl Checkpoints {
    fn new(every: Duration) -> Self {
        Checkpoints {
            every,
            next: (!every.is_zero()).then(|| std::time::Instant::now() + every),
            written: 0,
            took: Duration::ZERO,
            failures: 0,
            last_failure: None,
        }
    }

    fn due(&self) -> bool {
        self.next.is_some_and(|t| std::time::Instant::now() >= t)
    }

    /// After a checkpoint, which took `took`.
    fn done(&mut self, result: Result<()>, took: Duration) {
        self.took += took;
        match result {
            Ok(()) => self.written += 1,
            Err(e) => {
                self.failures += 1;
                self.last_failure = Some(e.to_string());
            }
        }
        self.next = Some(std::time::Instant::now() + self.every.max(took * 100));
    }

    /// Their count and cost into `overhead`.
    fn count(&self, overhead: &mut Overhead) {
        overhead.checkpoints = self.written;
        overhead.checkpoint_ns = self.took.as_nanos() as u64;
    }

    fn notes(&self) -> Vec<String> {
        match &self.last_failure {
            Some(why) => vec![format!(
                "{} of {} checkpoints failed (the last: {why}): had vtrace been killed then, every table but the CPU \
                 layer's would have been as of the last one written",
                self.failures,
                self.failures + self.written
            )],
            None if self.every.is_zero() => vec![
                "no checkpoints (--checkpoint 0): had vtrace been killed, only the CPU layer's journal would have \
                 survived"
                    .into(),
            ],
            None => Vec::new(),
        }
    }
}

/// One note per platform instance: its processes, threads and devices.
fn instance_notes(attribution: &Attribution) -> Vec<String> {
    attribution
        .instances()
        .iter()
        .map(|i| {
            let devices: Vec<String> = i.devices.iter().map(|d| format!("{} ({})", d.name, d.role)).collect();
            format!(
                "instance {} ({}): {} processes, {} threads, devices: {}",
                i.id,
                i.variant,
                i.processes.len(),
                i.threads.len(),
                if devices.is_empty() {
                    "none".to_string()
                } else {
                    devices.join(", ")
                }
            )
        })
        .collect()
}

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn self_usage() -> Overhead {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let ns = |tv: libc::timeval| tv.tv_sec as u64 * 1_000_000_000 + tv.tv_usec as u64 * 1_000;
    Overhead {
        vtrace_user_ns: ns(ru.ru_utime),
        vtrace_system_ns: ns(ru.ru_stime),
        vtrace_peak_rss_kib: ru.ru_maxrss as u64,
        ..Default::default()
    }
}

/// `vtrace probes`: every layer's catalog judged against this kernel (with
/// privilege, also whether fentry programs load).
pub fn probe_plan() -> Vec<ProbeStatus> {
    let mut caps = Capabilities::detect();
    if crate::privileges::check().is_ok()
        && let Ok(mut ebpf) = crate::ebpf::load(&offsets::resolve(&caps))
    {
        caps.try_fentry(&mut ebpf);
    }
    probes::plan(&caps, &layers::catalog())
}
