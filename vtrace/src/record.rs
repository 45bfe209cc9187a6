//! `vtrace record`: attach, run (a command, a duration, or until Ctrl-C),
//! snapshot every interval, and write the recording atomically, also when
//! the workload fails or the user interrupts.

use std::{
    collections::{HashMap, HashSet},
    path::{Path, PathBuf},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use vtrace_common::{
    IRQ_DEVICE_SLOTS, OVERFLOW_TID, SOFTIRQ_NAMES, ThreadTimes, irq_vector, net_loss, state, thread_flag,
};

use crate::{
    Error, Result,
    collectors::{
        bpf_stats::{self, SelfStats, StatsWindow},
        cpu::{CpuCollector, CpuSnapshot, CpuSplit, monotonic_ns},
        kvm::{KvmCollector, KvmStatsSampler, ReasonNames},
        net::{self as netc, DeviceCounters, NetCollector, NetSnapshot},
        procfs::{self, TaskStat},
        sample::Sampler,
        uprobes::UprobeCollector,
    },
    platforms::{self, Instance, Profile, SystemSnapshot, attribute::Attribution},
    probes::{
        self, CATALOG, Capabilities, ProbeStatus,
        capabilities::ensure_tracefs,
        catalog::{Layer, LayerGroup},
        offsets::KernelOffsets,
    },
    recording::{
        self, CpuRow, FORMAT_NAME, Host, IntervalRow, IrqRow, Metadata, NetDeviceRow, NetDropRow, NetHopRow,
        NetSizeRow, OutputSlot, Overhead, Recording, SCHEMA_VERSION, Selectors, SoftirqRow, ThreadRow, UprobeHistRow,
        UprobeRow, Workload,
    },
};

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
    /// Stop after this long (ignored when a command is given: it stops when the command exits).
    pub duration: Option<Duration>,
    /// Snapshot (time series) interval.
    pub interval: Duration,
    pub output: PathBuf,
    pub command: Vec<String>,
    /// `--uprobe BINARY:SYMBOL[:ret]` specs.
    pub uprobes: Vec<String>,
    /// Stream every packet at every hop (`--events`).
    pub events: bool,
    /// Probe layers to attach (`--layers`); the CPU engine always.
    pub layers: Vec<probes::catalog::LayerGroup>,
    /// Stack sampling frequency (`--sample HZ`), 0 for none.
    pub sample_hz: u64,
    /// When the kernel's BPF run-time statistics are on (`--self-stats`).
    pub self_stats: SelfStats,
    /// How user and system time are told apart (`--cpu-split`).
    pub cpu_split: CpuSplit,
}

#[derive(Clone, Debug)]
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
    let profiles = platforms::profiles(opts.platform_file.as_deref())?;
    if opts.platform != platforms::HOST {
        // An unknown name fails here, before privileges are looked at.
        if let Err(e @ Error::UnknownPlatform { .. }) = platforms::select(&profiles, Vec::new(), &opts.platform, None) {
            return Err(e);
        }
    }
    crate::privileges::check()?;
    ensure_tracefs()?;
    // One look at the system serves platform detection, the tun fds to follow
    // and the kinds of the devices whose counters are read.
    let system = SystemSnapshot::live();
    let instances = platform_instances(opts, &profiles, &system)?;
    let slot = OutputSlot::claim(&opts.output)?;
    Ok(Prepared {
        slot,
        profiles,
        system,
        instances,
    })
}

pub fn record(opts: &RecordOptions) -> Result<RecordOutcome> {
    let prepared = preflight(opts)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(crate::error::io("start the async runtime"))?;
    rt.block_on(run(opts, prepared))
}

enum Stop {
    WorkloadExited(std::process::ExitStatus),
    WorkloadFailedToStart(String),
    Duration,
    Signal(&'static str),
}

async fn run(opts: &RecordOptions, prepared: Prepared) -> Result<RecordOutcome> {
    let Prepared {
        slot,
        profiles,
        system,
        instances: instances_at_start,
    } = prepared;
    use tokio::signal::unix::{SignalKind, signal};

    let caps = Capabilities::detect();
    // Tun fds open at the start (a VMM's taps): their read/write syscalls are followed.
    let tun_fds = netc::tun_fds(&system);
    let layer_on = |g: LayerGroup| g == LayerGroup::Cpu || opts.layers.contains(&g);
    let resolved = KernelOffsets::resolve(&caps);
    let offsets = KernelOffsets {
        net_events_on: (opts.events && layer_on(LayerGroup::Net)) as u32,
        net_layer_on: layer_on(LayerGroup::Net) as u32,
        tun_fds_on: (!tun_fds.is_empty() && layer_on(LayerGroup::Net)) as u32,
        kvm_run_on: resolved.kvm_run_on * layer_on(LayerGroup::Kvm) as u32,
        tick_split_on: (opts.cpu_split == CpuSplit::Ticks) as u32,
        ..resolved
    };
    // With the tick split the syscall hooks only serve tun fds and KVM_RUN.
    let syscall_hooks = opts.cpu_split == CpuSplit::Syscalls || offsets.tun_fds_on != 0 || offsets.kvm_run_on != 0;
    let mut ebpf = crate::ebpf::load(&offsets)?;
    netc::load_tun_fds(&mut ebpf, &tun_fds)?;
    let mut collector = CpuCollector::new(&mut ebpf, opts.cpu_split)?;
    let net = NetCollector::new(&mut ebpf)?;
    let uprobe_stats = UprobeCollector::new(&mut ebpf)?;
    let kvm = KvmCollector::new(&mut ebpf)?;
    let mut stats = StatsWindow::start(opts.self_stats, opts.interval);
    let mut notes = Vec::new();
    if let Some(e) = &stats.error {
        notes.push(format!("self-overhead unknown: {e}"));
    }
    if opts.cpu_split == CpuSplit::Ticks {
        notes.push(format!(
            "user/system split by tick sampling (--cpu-split ticks): each thread's exact process-context time is \
             divided in the ratio of the kernel's utime/stime timer ticks over its slices, each CPU's by \
             /proc/stat; threads too short-lived to be sampled take their process's ratio{}",
            if syscall_hooks {
                "; the syscall hooks stay attached for tun fds or KVM_RUN"
            } else {
                "; no syscall hooks"
            }
        ));
    }
    if opts.self_stats == SelfStats::Off {
        notes.push("BPF statistics off (--self-stats off): vtrace's own cost per program was not measured".into());
    }

    let start_unix = unix_ns();
    let start_mono = monotonic_ns();
    let events_stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let events_reader = if opts.events {
        let writer = recording::NetEventWriter::create(slot.staging(), start_mono)?;
        Some(netc::spawn_event_reader(&mut ebpf, writer, events_stop.clone())?)
    } else {
        None
    };
    let tasks_at_start = procfs::scan_tasks();
    let mut specs: Vec<probes::ProbeSpec> = CATALOG
        .iter()
        .filter(|p| layer_on(LayerGroup::of(p.layer)) && (p.layer != Layer::Syscall || syscall_hooks))
        .copied()
        .collect();
    for u in &opts.uprobes {
        specs.extend(probes::catalog::user_uprobe(u).map_err(Error::BadArgument)?);
    }
    let mut probes = probes::attach_all(&mut ebpf, &caps, &specs);
    let mut sampler = match opts.sample_hz {
        0 => None,
        hz => {
            let s = Sampler::start(&mut ebpf, hz)?;
            probes.push(ProbeStatus {
                id: "sample:cpu-clock".into(),
                layer: "sample".into(),
                method: Some("perf_event".into()),
                program: Some(crate::collectors::sample::PROGRAM.into()),
                available: true,
                reason: None,
                caveat: None,
                slot: None,
            });
            Some(s)
        }
    };
    if let Some(p) = probes.iter().find(|p| p.id == "sched_switch" && !p.available) {
        return Err(Error::NoProbes(format!(
            "sched_switch: {}",
            p.reason.clone().unwrap_or_default()
        )));
    }

    // Baselines for the network counters: the devices' own and the probes'.
    let net_probes = probes.iter().any(|p| p.layer == "net" && p.available);
    let counters_start = if net_probes {
        netc::DeviceCounterReader::new(&system.netdevs).read()
    } else {
        HashMap::new()
    };
    let net_start = net.snapshot()?;
    let mut sigint = signal(SignalKind::interrupt()).map_err(crate::error::io("install SIGINT handler"))?;
    let mut sigterm = signal(SignalKind::terminate()).map_err(crate::error::io("install SIGTERM handler"))?;
    let mut child = None;
    let mut workload = None;
    let mut stop = None;
    if let Some((program, args)) = opts.command.split_first() {
        match tokio::process::Command::new(program).args(args).spawn() {
            Ok(c) => {
                workload = Some(Workload {
                    command: opts.command.clone(),
                    pid: c.id().unwrap_or(0),
                    ..Default::default()
                });
                child = Some(c);
            }
            Err(e) => stop = Some(Stop::WorkloadFailedToStart(format!("cannot start {program}: {e}"))),
        }
    }

    let deadline = match (&child, opts.duration) {
        (None, Some(d)) => Some(tokio::time::Instant::now() + d),
        _ => None,
    };
    let mut ticker = tokio::time::interval(opts.interval);
    ticker.tick().await; // the first tick fires at once
    let mut series = Series::default();
    let mut guest = GuestSampler::new(&tasks_at_start);
    let mut kvm_stats = KvmStatsSampler::start();
    while stop.is_none() {
        let stats_close = stats.closes_at();
        tokio::select! {
            status = async { child.as_mut().unwrap().wait().await }, if child.is_some() => {
                stop = Some(match status {
                    Ok(s) => Stop::WorkloadExited(s),
                    Err(e) => Stop::WorkloadFailedToStart(e.to_string()),
                });
            }
            _ = async { tokio::time::sleep_until(deadline.unwrap()).await }, if deadline.is_some() => stop = Some(Stop::Duration),
            _ = sigint.recv() => stop = Some(Stop::Signal("SIGINT")),
            _ = sigterm.recv() => stop = Some(Stop::Signal("SIGTERM")),
            _ = async { tokio::time::sleep_until(stats_close.unwrap()).await }, if stats_close.is_some() => {
                stats.close();
            }
            _ = ticker.tick() => {
                let snap = collector.snapshot(monotonic_ns(), true)?;
                series.push(&snap, start_mono);
                guest.sample();
                kvm_stats.sample();
                stats.tick();
                if let Some(s) = sampler.as_mut() {
                    s.learn_processes();
                }
            }
        }
    }
    let stop = stop.unwrap();
    let bpf_stats_coverage = stats.finish();

    // Interrupted while a command runs: pass the signal on and let it finish
    // (bounded), so its exit status and its last CPU time are recorded.
    let mut exit_status = match &stop {
        Stop::WorkloadExited(s) => Some(*s),
        _ => None,
    };
    if let (Some(c), Stop::Signal(name)) = (child.as_mut(), &stop) {
        if let Some(pid) = c.id() {
            let sig = if *name == "SIGTERM" {
                libc::SIGTERM
            } else {
                libc::SIGINT
            };
            unsafe { libc::kill(pid as i32, sig) };
        }
        exit_status = match tokio::time::timeout(Duration::from_secs(5), c.wait()).await {
            Ok(Ok(s)) => Some(s),
            _ => {
                let _ = c.kill().await;
                c.wait().await.ok()
            }
        };
    }

    if net_probes && child.is_some() {
        // Let the workload's last packets (TCP close) land before the counters are read.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // One look at the system after the run: the devices' kinds for their
    // counters, and the platform's processes and threads started meanwhile.
    let system_at_end = SystemSnapshot::live();
    // The devices' counters and the probes' are read back to back, in the
    // same order as at the start, so that a packet can only fall between the
    // two windows in the microseconds that separate the reads.
    let counters_end = if net_probes {
        netc::DeviceCounterReader::new(&system_at_end.netdevs).read()
    } else {
        HashMap::new()
    };
    let net_end = net.snapshot()?;
    let uprobes_end = uprobe_stats.snapshot()?;
    let kvm_end = kvm.snapshot()?;
    let (folded, sample_drops) = match sampler.as_mut() {
        Some(s) => s.finish()?,
        None => (Vec::new(), 0),
    };
    kvm_stats.sample();
    let net_losses = net.losses();
    events_stop.store(true, std::sync::atomic::Ordering::Release);
    if let Some(reader) = events_reader {
        match reader.join() {
            Ok(Ok(_rows)) => {}
            Ok(Err(e)) => notes.push(format!("per-packet events incomplete: {e}")),
            Err(_) => notes.push("per-packet events incomplete: their writer panicked".into()),
        }
    }
    let end_mono = monotonic_ns();
    let end_unix = unix_ns();
    let programs = bpf_stats::read(&ebpf, &probes);
    let tun_stats = netc::tun_io(&ebpf)?;
    let final_snap = collector.snapshot(end_mono, false)?;
    series.push(&final_snap, start_mono);
    guest.sample();
    drop(ebpf); // detaches every program

    let exit_code = match (&stop, exit_status) {
        (Stop::WorkloadFailedToStart(msg), _) => {
            eprintln!("vtrace: {msg}");
            127
        }
        (_, Some(s)) => exit_code_of(s),
        (_, None) => 0,
    };
    if let (Some(w), Some(s)) = (workload.as_mut(), exit_status) {
        use std::os::unix::process::ExitStatusExt;
        w.exit_code = s.code();
        w.signal = s.signal();
    }
    let stopped_by = match &stop {
        Stop::WorkloadExited(_) => "workload exited".to_string(),
        Stop::WorkloadFailedToStart(m) => format!("workload failed to start: {m}"),
        Stop::Duration => "duration elapsed".to_string(),
        Stop::Signal(s) => s.to_string(),
    };

    let cpus = final_snap.cpus.len() as u32;
    let wall_ns = end_mono.saturating_sub(start_mono);
    let selection = Selection::new(opts, workload.as_ref(), &tasks_at_start, &final_snap);
    // Instances again at the end: processes and threads started during the run.
    let instances_at_end = if opts.platform == platforms::HOST {
        Vec::new()
    } else {
        platform_instances(opts, &profiles, &system_at_end).unwrap_or_default()
    };
    let attribution = Attribution::new(profiles, vec![instances_at_start, instances_at_end]);
    for i in attribution.instances() {
        let devices: Vec<String> = i.devices.iter().map(|d| format!("{} ({})", d.name, d.role)).collect();
        notes.push(format!(
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
        ));
    }
    let guest_ticks = guest.deltas();
    let clock_ticks = procfs::clock_ticks();
    let threads = thread_rows(
        &final_snap,
        &selection,
        &attribution,
        &guest_ticks,
        clock_ticks,
        &kvm_end.vcpu_tids(),
        opts.cpu_split,
    );
    if threads.iter().any(|t| t.guest_source == "tick_sampled") {
        notes.push(
            "kvm_entry/kvm_exit did not fire on this kernel: guest time of vCPU threads is tick-sampled from \
             /proc/<tid>/stat guest_time (resolution 1/USER_HZ) and moved out of their system time"
                .into(),
        );
    }
    let bpf_run_time_ns = programs.iter().map(crate::report::whole_run_time_ns).sum();
    let overhead = Overhead {
        bpf_run_time_ns,
        bpf_run_count: programs.iter().map(|p| p.events).sum(),
        bpf_stats_coverage,
        bpf_cpu_fraction: bpf_run_time_ns as f64 / (wall_ns.max(1) as f64 * cpus.max(1) as f64),
        thread_map_overflows: final_snap.cpus.iter().map(|c| c.thread_map_overflows).sum(),
        state_repairs: final_snap.cpus.iter().map(|c| c.state_repairs).sum(),
        untraced_switches: final_snap.cpus.iter().map(|c| c.untraced_switches).sum(),
        net_event_drops: net_losses[net_loss::EVENT_DROPS as usize],
        skb_marks_displaced: net_losses[net_loss::MARKS_DISPLACED as usize],
        sample_hz: opts.sample_hz,
        sample_drops,
        ..self_usage()
    };
    let drop_names = netc::drop_reason_names(caps.btf.as_ref().ok().map(|b| b.as_ref()));
    let net_delta = net_end.since(&net_start);
    let net_tables = net_rows(&net_delta, &counters_start, &counters_end, &attribution, &drop_names);
    let net_latency = latency_rows(&net_delta);
    let (tun_io, tun_sizes) = tun_rows(&tun_stats, &system, &threads);
    let (uprobe_rows, uprobe_hists) = uprobe_rows(&uprobes_end, &probes, &threads);
    let kvm_names = caps
        .tracefs
        .as_ref()
        .map(|t| ReasonNames::from_tracefs(t))
        .unwrap_or_default();
    let (kvm_latency, kvm_latency_hists, kvm_events) = crate::collectors::kvm::rows(&kvm_end, &kvm_names, &threads);
    if let Some(e) = &kvm_stats.error {
        notes.push(format!("KVM's own statistics unreadable, no cross-check: {e}"));
    }
    let kvm_exits_seen = kvm_latency.iter().any(|r| r.kind == "exit");
    if !kvm_exits_seen && kvm_latency.iter().any(|r| r.kind == "userspace_exit") {
        notes.push(
            "kvm_exit/kvm_entry never fired although vCPUs ran (e.g. a PVM host): exit reasons and exit->entry \
             latency are unavailable; user-space exits, VMM handling time and pio/mmio counts are exact"
                .into(),
        );
    }
    let samples = crate::collectors::sample::rows(folded, &threads);
    let rec = Recording {
        meta: Metadata {
            format: FORMAT_NAME.into(),
            schema_version: SCHEMA_VERSION,
            vtrace_version: env!("CARGO_PKG_VERSION").into(),
            host: Host {
                hostname: hostname(),
                kernel: caps.kernel_release.clone(),
                cpus,
                clock_ticks,
            },
            command_line: std::env::args().collect(),
            selectors: Selectors {
                platform: opts.platform.clone(),
                pids: opts.pids.clone(),
                comms: opts.comms.clone(),
                cgroups: opts.cgroups.iter().map(|p| p.display().to_string()).collect(),
            },
            workload,
            stopped_by,
            start_unix_ns: start_unix,
            end_unix_ns: end_unix,
            wall_ns,
            cpu_split: opts.cpu_split.name().into(),
            probes,
            overhead,
            notes,
        },
        threads,
        cpus: cpu_rows(&final_snap),
        softirqs: softirq_rows(&final_snap),
        hardirqs: irq_rows(&final_snap),
        intervals: series.rows,
        programs,
        net_devices: net_tables.0,
        net_hops: net_tables.1,
        net_sizes: net_tables.2.into_iter().chain(tun_sizes).collect(),
        net_drops: net_tables.3,
        net_latency,
        net_events: recording::NetEvents::default(),
        tun_io,
        uprobes: uprobe_rows,
        uprobe_hists,
        kvm_latency,
        kvm_latency_hists,
        kvm_events,
        kvm_stats: kvm_stats.rows(),
        samples,
    };
    let path = recording::write(&slot, &rec)?;
    Ok(RecordOutcome {
        path,
        exit_code,
        recording: rec,
    })
}

fn exit_code_of(s: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))
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

/// Per-interval deltas of each thread's totals.
#[derive(Default)]
struct Series {
    last_at: Option<u64>,
    last: HashMap<u32, [u64; state::REPORTED]>,
    rows: Vec<IntervalRow>,
}

impl Series {
    fn push(&mut self, snap: &CpuSnapshot, start_mono: u64) {
        let mut now: HashMap<u32, ([u64; state::REPORTED], u32)> = HashMap::new();
        for (tid, t) in &snap.threads {
            let e = now.entry(*tid).or_insert(([0; state::REPORTED], t.tgid));
            for s in 0..state::REPORTED {
                e.0[s] += t.ns[s];
            }
        }
        let start_ns = self.last_at.unwrap_or(start_mono).saturating_sub(start_mono);
        let end_ns = snap.at_ns.saturating_sub(start_mono);
        let mut tids: Vec<_> = now.keys().copied().collect();
        tids.sort_unstable();
        for tid in tids {
            let (cur, pid) = now[&tid];
            let prev = self.last.get(&tid).copied().unwrap_or_default();
            let d: Vec<u64> = (0..state::REPORTED).map(|s| cur[s].saturating_sub(prev[s])).collect();
            if d.iter().any(|&v| v > 0) {
                self.rows.push(IntervalRow {
                    start_ns,
                    end_ns,
                    tid,
                    pid,
                    user_ns: d[state::USER],
                    system_ns: d[state::SYSTEM],
                    softirq_ns: d[state::SOFTIRQ],
                    hardirq_ns: d[state::HARDIRQ],
                    guest_ns: d[state::GUEST],
                    idle_ns: d[state::IDLE],
                });
            }
            self.last.insert(tid, cur);
        }
        self.last_at = Some(snap.at_ns);
    }
}

/// guest_time of every thread at the start and at its last sighting.
struct GuestSampler {
    first: HashMap<u32, u64>,
    last: HashMap<u32, u64>,
}

impl GuestSampler {
    fn new(at_start: &HashMap<(u32, u32), TaskStat>) -> Self {
        let first: HashMap<u32, u64> = at_start.iter().map(|((_, tid), s)| (*tid, s.guest_ticks)).collect();
        GuestSampler {
            last: first.clone(),
            first,
        }
    }

    fn sample(&mut self) {
        for ((_, tid), s) in procfs::scan_tasks() {
            if s.guest_ticks > 0 || self.last.contains_key(&tid) {
                self.last.insert(tid, s.guest_ticks);
            }
        }
    }

    fn deltas(&self) -> HashMap<u32, u64> {
        self.last
            .iter()
            .filter_map(|(tid, &last)| {
                let d = last.saturating_sub(self.first.get(tid).copied().unwrap_or(0));
                (d > 0).then_some((*tid, d))
            })
            .collect()
    }
}

/// Which processes the selectors (and the command's process tree) cover.
struct Selection {
    /// Parent of each process (from /proc at start, from fork events after).
    parent: HashMap<u32, u32>,
    tgids: HashSet<u32>,
    comms: Vec<String>,
    cgroup_ids: HashSet<u64>,
    own_tgid: u32,
}

impl Selection {
    fn new(
        opts: &RecordOptions,
        workload: Option<&Workload>,
        at_start: &HashMap<(u32, u32), TaskStat>,
        snap: &CpuSnapshot,
    ) -> Self {
        // Parent of each process: from /proc for processes that predate the
        // run, from the fork tracepoint for the ones born during it.
        let mut parent: HashMap<u32, u32> = at_start.iter().map(|((tgid, _), s)| (*tgid, s.ppid)).collect();
        for (_, t) in &snap.threads {
            if t.flags & thread_flag::BORN_DURING_RUN != 0 && t.parent_tgid != t.tgid && t.tgid != 0 {
                parent.insert(t.tgid, t.parent_tgid);
            }
        }
        let roots: HashSet<u32> = opts.pids.iter().copied().chain(workload.map(|w| w.pid)).collect();
        let mut tgids = HashSet::new();
        for &tgid in parent.keys().chain(roots.iter()) {
            let mut cur = tgid;
            for _ in 0..64 {
                if roots.contains(&cur) {
                    tgids.insert(tgid);
                    break;
                }
                match parent.get(&cur) {
                    Some(&p) if p != 0 && p != cur => cur = p,
                    _ => break,
                }
            }
        }
        let cgroup_ids = match procfs::cgroup2_root() {
            Some(root) => opts
                .cgroups
                .iter()
                .flat_map(|c| {
                    let p = if c.is_absolute() && c.exists() {
                        c.clone()
                    } else {
                        Path::new(&root).join(c.strip_prefix("/").unwrap_or(c))
                    };
                    procfs::cgroup_ids_under(&p)
                })
                .collect(),
            None => HashSet::new(),
        };
        Selection {
            parent,
            tgids,
            comms: opts.comms.clone(),
            cgroup_ids,
            own_tgid: std::process::id(),
        }
    }

    fn selects(&self, t: &ThreadTimes, comm: &str) -> bool {
        self.tgids.contains(&t.tgid) || self.comms.iter().any(|c| c == comm) || self.cgroup_ids.contains(&t.cgroup_id)
    }
}

fn comm_of(t: &ThreadTimes) -> String {
    let end = t.comm.iter().position(|&b| b == 0).unwrap_or(t.comm.len());
    String::from_utf8_lossy(&t.comm[..end]).into_owned()
}

/// Roles on the host platform; platform profiles refine these.
/// The role of a thread no platform instance claims. `vcpu`: it ran a guest
/// (guest time, or KVM exits); `in_vmm`: a thread of its process did.
fn role_of(tid: u32, t: &ThreadTimes, selected: bool, vcpu: bool, in_vmm: bool, own_tgid: u32) -> &'static str {
    if tid == 0 {
        "idle"
    } else if tid == OVERFLOW_TID {
        "overflow"
    } else if t.flags & thread_flag::KTHREAD != 0 {
        "kernel"
    } else if t.tgid == own_tgid {
        "vtrace"
    } else if vcpu {
        "vcpu"
    } else if in_vmm {
        "vmm"
    } else if selected {
        "app"
    } else {
        "other"
    }
}

fn thread_rows(
    snap: &CpuSnapshot,
    sel: &Selection,
    attribution: &Attribution,
    guest_ticks: &HashMap<u32, u64>,
    clock_ticks: u64,
    vcpu_tids: &HashSet<u32>,
    split: CpuSplit,
) -> Vec<ThreadRow> {
    // Processes that run vCPUs: their other threads are the VMM.
    let vmm_tgids: HashSet<u32> = snap
        .threads
        .iter()
        .filter(|(tid, _)| vcpu_tids.contains(tid))
        .map(|(_, t)| t.tgid)
        .collect();
    // A process is named after its main thread.
    let process_comm: HashMap<u32, String> = snap
        .threads
        .iter()
        .filter(|(tid, t)| *tid == t.tgid)
        .map(|(tid, t)| (*tid, comm_of(t)))
        .collect();
    let parent = |pid: u32| sel.parent.get(&pid).copied();
    snap.threads
        .iter()
        .map(|(tid, t)| {
            let comm = if *tid == 0 { "swapper".to_string() } else { comm_of(t) };
            let (mut user_ns, mut system_ns, mut guest_ns) =
                (t.ns[state::USER], t.ns[state::SYSTEM], t.ns[state::GUEST]);
            let guest_source = if t.flags & thread_flag::GUEST_TRACED != 0 {
                "kvm_tracepoints"
            } else if let Some(&ticks) = guest_ticks.get(tid) {
                // The vCPU ran the guest inside ioctl(KVM_RUN), which the engine
                // saw as system time (the kernel's ticks as user time): move
                // the sampled amount over.
                let host = match split {
                    CpuSplit::Syscalls => &mut system_ns,
                    CpuSplit::Ticks => &mut user_ns,
                };
                guest_ns = (ticks * 1_000_000_000 / clock_ticks.max(1)).min(*host);
                *host -= guest_ns;
                "tick_sampled"
            } else {
                "none"
            };
            let pcomm = process_comm.get(&t.tgid).cloned().unwrap_or_else(|| comm.clone());
            // Kernel threads belong to no instance, except vhost workers (kernel threads before Linux 6.4).
            let claimable = *tid != 0 && (t.flags & thread_flag::KTHREAD == 0 || comm.starts_with("vhost-"));
            let claimed = claimable
                .then(|| attribution.classify(*tid, t.tgid, &comm, &pcomm, &parent))
                .flatten();
            let selected = sel.selects(t, &comm) || claimed.is_some();
            let (platform, instance, role) = match claimed {
                Some(a) => (a.platform, a.instance, a.role),
                None => (
                    platforms::HOST.to_string(),
                    String::new(),
                    role_of(
                        *tid,
                        t,
                        selected,
                        guest_ns > 0 || vcpu_tids.contains(tid),
                        vmm_tgids.contains(&t.tgid),
                        sel.own_tgid,
                    )
                    .to_string(),
                ),
            };
            ThreadRow {
                tid: *tid,
                pid: t.tgid,
                ppid: t.parent_tgid,
                role,
                platform,
                instance,
                comm,
                selected,
                kthread: t.flags & thread_flag::KTHREAD != 0,
                exited: t.flags & thread_flag::EXITED != 0,
                born_during_run: t.flags & thread_flag::BORN_DURING_RUN != 0,
                user_ns,
                system_ns,
                softirq_ns: t.ns[state::SOFTIRQ],
                hardirq_ns: t.ns[state::HARDIRQ],
                guest_ns,
                idle_ns: t.ns[state::IDLE],
                guest_source: guest_source.into(),
                switches: t.switches,
                cgroup_id: t.cgroup_id,
            }
        })
        .collect()
}

fn cpu_rows(snap: &CpuSnapshot) -> Vec<CpuRow> {
    snap.cpus
        .iter()
        .enumerate()
        .map(|(cpu, c)| CpuRow {
            cpu: cpu as u32,
            user_ns: c.cpu_ns[state::USER],
            system_ns: c.cpu_ns[state::SYSTEM],
            softirq_ns: c.cpu_ns[state::SOFTIRQ],
            hardirq_ns: c.cpu_ns[state::HARDIRQ],
            guest_ns: c.cpu_ns[state::GUEST],
            idle_ns: c.cpu_ns[state::IDLE],
        })
        .collect()
}

fn softirq_rows(snap: &CpuSnapshot) -> Vec<SoftirqRow> {
    let mut rows = Vec::new();
    for (cpu, c) in snap.cpus.iter().enumerate() {
        for (v, name) in SOFTIRQ_NAMES.iter().enumerate() {
            if c.softirq_ns[v] > 0 || c.softirq_count[v] > 0 {
                rows.push(SoftirqRow {
                    cpu: cpu as u32,
                    vector: name.to_string(),
                    ns: c.softirq_ns[v],
                    count: c.softirq_count[v],
                });
            }
        }
    }
    rows
}

/// Device IRQ names from /proc/interrupts (its last column).
fn irq_names() -> HashMap<u32, String> {
    std::fs::read_to_string("/proc/interrupts")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (num, rest) = l.trim_start().split_once(':')?;
            let irq = num.trim().parse::<u32>().ok()?;
            Some((irq, rest.split_whitespace().last().unwrap_or("").to_string()))
        })
        .collect()
}

fn irq_rows(snap: &CpuSnapshot) -> Vec<IrqRow> {
    let names = irq_names();
    let mut rows = Vec::new();
    for (cpu, slots) in snap.irqs.iter().enumerate() {
        for (slot, s) in slots.iter().enumerate() {
            if s.count == 0 && s.ns == 0 {
                continue;
            }
            let slot = slot as u32;
            let name = if slot < IRQ_DEVICE_SLOTS {
                names.get(&slot).cloned().unwrap_or_else(|| format!("irq {slot}"))
            } else {
                irq_vector::NAMES
                    .iter()
                    .find(|(v, _)| *v == slot)
                    .map(|(_, n)| n.to_string())
                    .unwrap_or_default()
            };
            rows.push(IrqRow {
                cpu: cpu as u32,
                irq: slot,
                name,
                ns: s.ns,
                count: s.count,
            });
        }
    }
    rows
}

type NetTables = (Vec<NetDeviceRow>, Vec<NetHopRow>, Vec<NetSizeRow>, Vec<NetDropRow>);

/// Network tables: devices (with owner and counters), hops, size histograms, drops.
fn net_rows(
    net: &NetSnapshot,
    start: &HashMap<(u32, u32), DeviceCounters>,
    end: &HashMap<(u32, u32), DeviceCounters>,
    attribution: &Attribution,
    drop_names: &HashMap<u32, String>,
) -> NetTables {
    use vtrace_common::{LOG2_BUCKETS, SIZE_BUCKETS, hop};
    let owner: HashMap<(u32, u32), (String, String, String)> = attribution
        .instances()
        .iter()
        .flat_map(|i| {
            i.devices.iter().map(move |d| {
                (
                    (d.netns as u32, d.ifindex),
                    (i.platform.clone(), i.id.clone(), d.role.clone()),
                )
            })
        })
        .collect();
    let mut devices: std::collections::BTreeSet<(u32, u32)> =
        net.devices.keys().map(|k| (k.netns, k.ifindex)).collect();
    devices.extend(
        net.softirq
            .keys()
            .chain(net.napi.keys())
            .filter(|&&k| k != 0)
            .map(|&k| ((k >> 32) as u32, k as u32)),
    );
    let mut dev_rows = Vec::new();
    for (netns, ifindex) in devices {
        let c_end = end.get(&(netns, ifindex)).or_else(|| start.get(&(netns, ifindex)));
        let c_start = start.get(&(netns, ifindex));
        let delta = |f: fn(&DeviceCounters) -> u64| match (c_start, c_end) {
            (Some(a), Some(b)) => f(b).saturating_sub(f(a)),
            _ => 0,
        };
        let napi = net
            .napi
            .get(&vtrace_common::dev_key(netns, ifindex))
            .copied()
            .unwrap_or_default();
        let (platform, instance, role) = owner
            .get(&(netns, ifindex))
            .cloned()
            .unwrap_or_else(|| (platforms::HOST.into(), String::new(), String::new()));
        dev_rows.push(NetDeviceRow {
            netns,
            ifindex,
            name: c_end.map(|c| c.name.clone()).unwrap_or_else(|| format!("if{ifindex}")),
            kind: c_end.map(|c| c.kind.clone()).unwrap_or_default(),
            platform,
            instance,
            role,
            softirq_ns: net
                .softirq
                .get(&vtrace_common::dev_key(netns, ifindex))
                .copied()
                .unwrap_or(0),
            napi_polls: napi[0],
            napi_packets: napi[1],
            napi_budget_exhausted: napi[2],
            counter_rx_packets: delta(|c| c.rx_packets),
            counter_rx_bytes: delta(|c| c.rx_bytes),
            counter_tx_packets: delta(|c| c.tx_packets),
            counter_tx_bytes: delta(|c| c.tx_bytes),
        });
    }
    let mut hops = Vec::new();
    let mut sizes = Vec::new();
    for (k, v) in &net.devices {
        let name = hop::name(k.hop).to_string();
        hops.push(NetHopRow {
            netns: k.netns,
            ifindex: k.ifindex,
            hop: name.clone(),
            direction: if hop::is_tx(k.hop) { "tx" } else { "rx" }.into(),
            packets: v.packets,
            bytes: v.bytes,
            gso_packets: v.gso_packets,
            gso_segs: v.gso_segs,
            errors: v.errors,
        });
        for (i, &count) in v.size_hist.iter().enumerate() {
            let le = SIZE_BUCKETS.get(i).copied().unwrap_or(u32::MAX as u64);
            sizes.push(NetSizeRow {
                netns: k.netns,
                ifindex: k.ifindex,
                hop: name.clone(),
                kind: "mtu".into(),
                le,
                count,
            });
        }
        for (i, &count) in v.log2_hist.iter().enumerate().take(LOG2_BUCKETS) {
            if count > 0 {
                let le = (1u64 << (i + 1)) - 1;
                sizes.push(NetSizeRow {
                    netns: k.netns,
                    ifindex: k.ifindex,
                    hop: name.clone(),
                    kind: "log2".into(),
                    le,
                    count,
                });
            }
        }
    }
    let drops = net
        .drops
        .iter()
        .enumerate()
        .filter(|(_, c)| **c > 0)
        .map(|(r, c)| NetDropRow {
            reason: drop_names
                .get(&(r as u32))
                .cloned()
                .unwrap_or_else(|| format!("reason {r}")),
            count: *c,
        })
        .collect();
    (dev_rows, hops, sizes, drops)
}

/// Upper bound (ns) of the log2 bucket holding quantile `q`.
fn log2_quantile(hist: &[u64], q: f64) -> u64 {
    let total: u64 = hist.iter().sum();
    let target = ((total as f64 * q).ceil() as u64).max(1);
    let mut seen = 0;
    for (i, c) in hist.iter().enumerate() {
        seen += c;
        if seen >= target {
            return (1u64 << (i + 1)) - 1;
        }
    }
    0
}

fn latency_rows(net: &NetSnapshot) -> Vec<recording::NetLatencyRow> {
    net.latency
        .iter()
        .map(|(e, l)| recording::NetLatencyRow {
            from_netns: (e.from_dev >> 32) as u32,
            from_ifindex: e.from_dev as u32,
            from_hop: vtrace_common::hop::name(e.from_hop).to_string(),
            to_netns: (e.to_dev >> 32) as u32,
            to_ifindex: e.to_dev as u32,
            to_hop: vtrace_common::hop::name(e.to_hop).to_string(),
            count: l.count,
            sum_ns: l.sum_ns,
            p50_ns: log2_quantile(&l.log2, 0.5),
            p99_ns: log2_quantile(&l.log2, 0.99),
        })
        .collect()
}

/// Syscalls on tun fds per (tap, process, direction), with their sizes.
fn tun_rows(
    stats: &std::collections::BTreeMap<vtrace_common::TunIoKey, vtrace_common::DevStats>,
    system: &SystemSnapshot,
    threads: &[ThreadRow],
) -> (Vec<recording::TunIoRow>, Vec<NetSizeRow>) {
    let mut rows = Vec::new();
    let mut sizes = Vec::new();
    for (k, v) in stats {
        let (netns, ifindex) = ((k.dev >> 32) as u32, k.dev as u32);
        let device = system
            .netdevs
            .iter()
            .find(|d| d.netns as u32 == netns && d.ifindex == ifindex)
            .map(|d| d.name.clone())
            .unwrap_or_else(|| format!("if{ifindex}"));
        let comm = threads
            .iter()
            .find(|t| t.tid == k.tgid)
            .map(|t| t.comm.clone())
            .unwrap_or_default();
        let direction = if k.write == 1 { "write" } else { "read" };
        rows.push(recording::TunIoRow {
            pid: k.tgid,
            comm,
            device,
            netns,
            ifindex,
            direction: direction.into(),
            calls: v.packets,
            bytes: v.bytes,
        });
        for (i, &count) in v.size_hist.iter().enumerate() {
            let le = vtrace_common::SIZE_BUCKETS.get(i).copied().unwrap_or(u32::MAX as u64);
            sizes.push(NetSizeRow {
                netns,
                ifindex,
                hop: format!("fd_{direction}"),
                kind: "mtu".into(),
                le,
                count,
            });
        }
    }
    (rows, sizes)
}

/// Uprobe rows per (probe, process), attributed like the process's threads.
fn uprobe_rows(
    stats: &std::collections::BTreeMap<vtrace_common::UprobeKey, vtrace_common::UprobeStats>,
    probes: &[ProbeStatus],
    threads: &[ThreadRow],
) -> (Vec<UprobeRow>, Vec<UprobeHistRow>) {
    use vtrace_common::SIZE_BUCKETS;
    let mut rows = Vec::new();
    let mut hists = Vec::new();
    let index = platforms::attribute::ThreadIndex::new(threads);
    for (k, v) in stats {
        let Some(p) = probes.iter().find(|p| p.slot == Some(k.slot)) else {
            continue;
        };
        let main = index.process(k.tgid);
        rows.push(UprobeRow {
            probe: p.id.clone(),
            pid: k.tgid,
            comm: main.map(|t| t.comm.clone()).unwrap_or_default(),
            platform: main
                .map(|t| t.platform.clone())
                .unwrap_or_else(|| platforms::HOST.into()),
            instance: main.map(|t| t.instance.clone()).unwrap_or_default(),
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

/// `vtrace probes`: the catalog judged against this kernel (with privilege,
/// also whether fentry programs load).
pub fn probe_plan() -> Vec<ProbeStatus> {
    let mut caps = Capabilities::detect();
    if crate::privileges::check().is_ok()
        && let Ok(mut ebpf) = crate::ebpf::load(&KernelOffsets::resolve(&caps))
    {
        caps.try_fentry(&mut ebpf);
    }
    probes::plan(&caps, CATALOG)
}
