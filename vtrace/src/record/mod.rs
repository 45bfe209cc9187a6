//! `vtrace record`: one generic loop over the layers. Choose the layers this
//! recording wants and this machine can run, let each configure the eBPF
//! object, load it, start their collectors, attach their probes, take
//! baselines, tick every interval until the stop, take the last readings,
//! emit every layer's tables, and write the recording atomically, also when
//! the workload fails or the user interrupts. Nothing here knows a layer.

mod checkpoint;
mod edge;
mod preflight;
mod programs;
mod recorder;
mod session;
mod watch;

use std::{
    path::PathBuf,
    time::{SystemTime, UNIX_EPOCH},
};

pub use crate::layers::options::RecordOptions;
use checkpoint::{Checkpoints, checkpoint};
use preflight::platform_instances;
pub use preflight::{Prepared, preflight};
pub use recorder::Recorder;
use recorder::{Control, runtime};
pub use session::{OUTPUT_FILE, Stop};
use session::{Signals, WorkloadChild};
use watch::InstanceWatch;

use crate::{
    Error, Result,
    collectors::bpf_stats::{self, SelfStats, StatsWindow},
    layers::{self, Attached, Collector, Emit, End, Facts, Layer, LayerOutput, Setup, cpu::monotonic_ns},
    platforms::{self, SystemSnapshot, attribute::Attribution},
    probes::{self, Capabilities, ProbeStatus, offsets},
    recording::{self, FORMAT_NAME, Host, Metadata, Overhead, Recording, SCHEMA_VERSION, Selectors, TableSet},
    workload::ops::Operations,
};

/// `vtrace serve` asks a live session ([`RecordOptions::live`]) for its
/// readings: every layer read now, its tables emitted as for a recording.
pub struct Scrape {
    pub reply: tokio::sync::oneshot::Sender<Result<Scraped>>,
}

/// What one read of a live session gave.
pub struct Scraped {
    /// Every layer's tables, cumulative since the probes attached; threads
    /// that exited since the last read are in them once more, then forgotten.
    pub tables: TableSet,
    /// The platform instances running now, each with its threads and devices.
    pub instances: Vec<platforms::Instance>,
    /// vtrace's own CPU since the probes attached, and the BPF programs' cost.
    pub overhead: Overhead,
    pub notes: Vec<String>,
}

#[derive(Debug)]
pub struct RecordOutcome {
    pub path: PathBuf,
    /// The command's exit status as a shell reports it (128+signal when killed), 0 without a command.
    pub exit_code: i32,
    pub recording: Recording,
}

/// A live session for `vtrace serve`: probes attached until SIGINT/SIGTERM,
/// read at each [`Scrape`] that `scrapes` brings; `attached` is told once
/// they are. Writes nothing.
pub fn live(
    opts: &RecordOptions,
    scrapes: tokio::sync::mpsc::Receiver<Scrape>,
    attached: std::sync::mpsc::Sender<()>,
) -> Result<()> {
    let prepared = preflight(opts)?;
    runtime()?.block_on(async {
        let mut control = Control::command_line()?;
        control.scrapes = Some(scrapes);
        control.attached = Some(attached);
        run(opts, prepared, control).await.map(|_| ())
    })
}

/// Records until the command exits, the duration passes, or SIGINT/SIGTERM.
pub fn record(opts: &RecordOptions) -> Result<RecordOutcome> {
    let prepared = preflight(opts)?;
    // Signal handlers need the runtime's reactor: installed inside it.
    runtime()?.block_on(async { run(opts, prepared, Control::command_line()?).await })
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
    let kernel = offsets::KernelLayout::of(&caps);
    let mut config = vtrace_common::Config::default();
    for layer in &running {
        layer.offsets(&kernel, &mut config);
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
    notes.extend(edge::read_edge(&mut collectors, "start", |c| c.baseline(&attached))?);
    if let Some(tx) = control.attached.take() {
        let _ = tx.send(());
    }

    // vtrace's own CPU is counted from here: loading, verifying and
    // attaching happened before the workload started.
    let usage_at_start = self_usage();
    let mut watch = InstanceWatch::new(
        profiles.clone(),
        &opts.platform,
        opts.instance.as_deref(),
        &instances_at_start,
    );
    let (mut child, mut stop) = WorkloadChild::spawn(&opts.command, slot.staging(), opts.pass_output);
    watch.command(child.child.as_ref().and_then(|c| c.id()));
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
        cpu_split: opts.layer_opts.cpu.cpu_split.name().into(),
        mode: opts.mode(),
        layers: running.iter().map(|l| l.name().to_string()).collect(),
        tables: Default::default(),
        checksums: Default::default(),
        probes: probes.clone(),
        overhead: Overhead::default(),
        notes: notes.clone(),
        incomplete: None,
    };
    if !opts.live {
        recording::journal::start(slot.staging(), &meta)?;
    }
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
            scrape = async { control.scrapes.as_mut().unwrap().recv().await }, if control.scrapes.is_some() => {
                match scrape {
                    Some(s) => {
                        let read = read_live(&mut collectors, &ebpf, &probes, opts, &caps, &profiles, &usage_at_start);
                        let _ = s.reply.send(read);
                    }
                    // The exporter is gone: so is the session.
                    None => stop = Some(Stop::Requested),
                }
            }
            _ = async { tokio::time::sleep_until(stats_close.unwrap()).await }, if stats_close.is_some() => {
                stats.close();
            }
            _ = ticker.tick() => {
                let now = monotonic_ns();
                for c in &mut collectors {
                    c.tick(now)?;
                }
                stats.tick();
                // A live session looks for instances at each read instead.
                if !opts.live {
                    watch.tick();
                }
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
    if opts.live {
        // Nothing to write: the programs detach as `ebpf` drops.
        return Ok(RecordOutcome {
            path: PathBuf::new(),
            exit_code: 0,
            recording: Recording::default(),
        });
    }
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
    notes.extend(edge::read_edge(&mut collectors, "end", |c| {
        c.checkpoint(&end).map(drop)
    })?);
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
    let no_instance = opts.platform != platforms::HOST
        && instances_at_start.is_empty()
        && watch.sightings.is_empty()
        && instances_at_end.is_empty();
    if no_instance {
        notes.push(format!(
            "no {} instance ran during the recording: nothing is attributed to it",
            opts.platform
        ));
    }
    let sightings = std::iter::once(instances_at_start)
        .chain(watch.sightings)
        .chain([instances_at_end]);
    let attribution = Attribution::new(profiles, sightings.collect());
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

/// One read of a live session: every collector brought up to now, the
/// instances running now, every layer's tables; then each collector forgets
/// what it kept only for a recording.
fn read_live(
    collectors: &mut [Box<dyn Collector>],
    ebpf: &aya::Ebpf,
    probes: &[ProbeStatus],
    opts: &RecordOptions,
    caps: &Capabilities,
    profiles: &[platforms::Profile],
    usage_at_start: &Overhead,
) -> Result<Scraped> {
    let now = monotonic_ns();
    for c in collectors.iter_mut() {
        c.tick(now)?;
    }
    let system = SystemSnapshot::live();
    let all = platforms::detect(profiles, &system);
    // `host` (serve's default): every platform's instances.
    let instances = if opts.platform == platforms::HOST {
        all
    } else {
        platforms::select(profiles, all, &opts.platform, opts.instance.as_deref()).unwrap_or_default()
    };
    let attribution = Attribution::new(profiles.to_vec(), vec![instances.clone()]);
    let parts = Emit {
        opts,
        caps,
        system: &system,
        attribution: &attribution,
        probes,
        workload: None,
        own_threads: None,
        facts: &Facts::default(),
        tables: &TableSet::default(),
        checkpoint: true,
    };
    let checkpoint::Emitted {
        tables,
        overhead,
        notes,
        ..
    } = checkpoint::emit_now(collectors, ebpf, &parts, usage_at_start)?;
    for c in collectors.iter_mut() {
        c.forget()?;
    }
    Ok(Scraped {
        tables,
        instances,
        overhead,
        notes,
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

/// One note per platform instance: its processes, threads and devices.
fn instance_notes(attribution: &Attribution) -> Vec<String> {
    attribution
        .instances()
        .iter()
        .map(|i| {
            let devices: Vec<String> = i.devices.iter().map(|d| format!("{} ({})", d.name, d.role)).collect();
            let passthrough: String = i
                .passthrough
                .iter()
                .map(|d| match (&d.pf, d.vf_index) {
                    (Some(pf), Some(vf)) => format!(
                        "; passes through VF {} (vf {vf} of {pf}, MAC {}, IOMMU group {})",
                        d.pci,
                        d.mac.as_deref().unwrap_or("unknown"),
                        d.group
                    ),
                    _ => format!("; passes through PCI {} (IOMMU group {})", d.pci, d.group),
                })
                .collect();
            format!(
                "instance {} ({}): {} processes, {} threads, devices: {}{passthrough}",
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
        && let Ok(mut ebpf) = crate::ebpf::load(&layers::kernel_config(&caps))
    {
        caps.try_fentry(&mut ebpf);
    }
    probes::plan(&caps, &layers::catalog())
}
