//! The guest layer's report section: for each guest, how its agent was
//! reached and how its clock maps onto the host's (offset, drift, bound,
//! exchanges in causal order), then its CPU by state beside the host's
//! vCPU thread that ran it (the guest's busy time against the thread's
//! guest-mode time and its exits), and the guest's own threads.

use serde::Serialize;

use super::{GuestLinkRow, clock::ClockMap};
use crate::{
    layers::cpu::{CpuRow, IntervalRow, ThreadCpuRow, ThreadRow},
    recording::Recording,
    report_model::{Figure, FigureKind, Section, Series, Table, col, left, pct, secs},
};

#[derive(Serialize)]
struct GuestCpu {
    cpu: u32,
    user_ns: u64,
    system_ns: u64,
    softirq_ns: u64,
    hardirq_ns: u64,
    idle_ns: u64,
    /// The host's thread that ran this vCPU, and its time in guest mode
    /// and out of it (the exits' handling, kernel and VMM), over the
    /// guest's window (the host's intervals shared out by overlap).
    host_tid: Option<u32>,
    host_guest_ns: u64,
    host_exits_ns: u64,
    /// The rest of the window: the vCPU thread was not running (halted
    /// in the guest's idle, or waiting for a host CPU: steal, to the guest).
    host_off_ns: u64,
}

impl GuestCpu {
    /// The guest's own account of this CPU, by state.
    fn states(&self) -> [(&'static str, u64); 5] {
        [
            ("user", self.user_ns),
            ("system", self.system_ns),
            ("softirq", self.softirq_ns),
            ("hardirq", self.hardirq_ns),
            ("idle", self.idle_ns),
        ]
    }

    fn busy(&self) -> u64 {
        self.user_ns + self.system_ns + self.softirq_ns + self.hardirq_ns
    }
}

#[derive(Serialize)]
struct GuestThread {
    tid: u32,
    pid: u32,
    comm: String,
    user_ns: u64,
    system_ns: u64,
    softirq_ns: u64,
    hardirq_ns: u64,
    total_ns: u64,
}

#[derive(Serialize)]
struct GuestReport {
    guest: String,
    address: String,
    state: String,
    error: String,
    kernel: String,
    /// Host s from the recording's start to the last frame heard from it.
    last_heard_s: f64,
    /// The guest's recording's window on the host's timeline: from its
    /// agent's probes attaching (host s since the start), its length (s).
    window_start_s: f64,
    window_s: f64,
    /// The guest's recording could not be read (why).
    unreadable: Option<String>,
    clock: Option<ClockMap>,
    /// What the agent's recording cost the guest, as a share of its capacity.
    agent_cost: Option<f64>,
    cpus: Vec<GuestCpu>,
    threads: Vec<GuestThread>,
    /// Its VM's vCPU time in guest mode split by the guest's own parts.
    vcpu: Option<VcpuSplit>,
    /// The same per vCPU, each by the guest's parts that ran on its guest
    /// CPU (a guest of several CPUs: from its `thread_cpus` table; of one:
    /// the whole split).
    vcpus: Vec<VcpuSplit>,
    /// Guest threads' busy time on no CPU known (`thread_cpus`' CPU
    /// 4294967295: a slot another thread held), which no vCPU's split holds.
    no_cpu_busy_ns: u64,
}

/// A VM's vCPU threads' time in guest mode, as the host measured it, split
/// by the guest's parts (threads by program, the agent's, the interrupts
/// while idle) window by window: each host interval's guest-mode time goes
/// to the parts in proportion to the busy time the guest counted for them
/// over the same span (its intervals mapped onto the host's clock), to
/// `(idle)` where the guest counted none. The parts sum to the guest-mode
/// time; how finely they follow it is the intervals' length (`--interval`).
#[derive(Serialize, Default, Clone)]
struct VcpuSplit {
    /// The guest CPU and the host thread that ran it, for one vCPU's.
    cpu: Option<u32>,
    host_tid: Option<u32>,
    /// (part, state, ns), largest first.
    parts: Vec<(String, &'static str, u64)>,
    guest_mode_ns: u64,
    exits_ns: u64,
    /// The busy time the guest counted over the same span.
    guest_busy_ns: u64,
    /// At least this much of it the vCPUs were not running: in each
    /// interval, the guest's busy time beyond its vCPUs' guest mode and
    /// exits (its clock ran on while the host ran something else: steal).
    unrun_busy_ns: u64,
    /// The spans it was split over: the host's intervals (cut where a
    /// thread's began or ended mid-interval) with time of those threads.
    intervals: usize,
}

/// The part a guest thread's time goes to: its program (a kernel thread's
/// kind without its CPU), the agent's under one name.
fn part_name(comm: &str) -> String {
    if comm.starts_with("vtrace") {
        AGENT_PART.into()
    } else {
        part_of(comm).to_string()
    }
}

/// The agent's own threads, as one part.
pub const AGENT_PART: &str = "(vtrace agent)";

/// Splits the guest-mode time of `vcpus` (host tids) over `window` (host ns
/// since the start) by the parts of `guest` (threads by program) that it
/// `counted` busy (on every CPU, or on the one those vCPUs ran), whose
/// times map onto the host's by `to_host`; `idle_irq` is the guest's interrupts while idle
/// (spread over the window: the CPU table has no intervals). None without
/// a host interval of those threads in the window.
fn vcpu_split(
    rec: &Recording,
    guest: &Recording,
    counted: &[GuestBusy],
    vcpus: &[u32],
    window: (u64, u64),
    to_host: impl Fn(u64) -> f64,
    idle_irq: [(&'static str, u64); 2],
) -> Option<VcpuSplit> {
    let rows: Vec<&IntervalRow> = rec
        .rows::<IntervalRow>()
        .iter()
        .filter(|i| vcpus.contains(&i.tid) && i.end_ns > i.start_ns)
        .collect();
    // The spans between every interval's ends (threads born or gone
    // mid-interval have their own), inside the window.
    let mut points: Vec<u64> = rows
        .iter()
        .flat_map(|i| [i.start_ns, i.end_ns])
        .map(|t| t.clamp(window.0, window.1))
        .collect();
    points.sort_unstable();
    points.dedup();
    let spans: Vec<(f64, f64)> = points.windows(2).map(|w| (w[0] as f64, w[1] as f64)).collect();
    // Calls `add(span, fraction)` with the fraction of [from, to) (host ns) in each span.
    let over = |(from, to): (f64, f64), add: &mut dyn FnMut(usize, f64)| {
        if to <= from {
            return;
        }
        let first = spans.partition_point(|s| s.1 <= from);
        for (k, s) in spans.iter().enumerate().skip(first) {
            if s.0 >= to {
                break;
            }
            add(k, (s.1.min(to) - s.0.max(from)).max(0.0) / (to - from));
        }
    };
    // Each span's guest mode and exits.
    let mut host = vec![(0.0, 0.0); spans.len()];
    for i in &rows {
        let exits = (i.user_ns + i.system_ns + i.softirq_ns + i.hardirq_ns) as f64;
        over((i.start_ns as f64, i.end_ns as f64), &mut |k, f| {
            host[k].0 += i.guest_ns as f64 * f;
            host[k].1 += exits * f;
        });
    }
    if host.iter().all(|&(g, x)| g == 0.0 && x == 0.0) {
        return None;
    }
    type Busy = std::collections::BTreeMap<(String, &'static str), f64>;
    let mut busy: Vec<Busy> = vec![Busy::new(); spans.len()];
    let mut spread = |part: &str, state: &'static str, ns: u64, at: (f64, f64)| {
        if ns > 0 {
            over(at, &mut |k, f| {
                *busy[k].entry((part.to_string(), state)).or_default() += ns as f64 * f;
            });
        }
    };
    let threads: std::collections::HashMap<(u32, u64), &ThreadRow> = guest
        .rows::<ThreadRow>()
        .iter()
        .map(|t| ((t.tid, t.born_ns), t))
        .collect();
    for b in counted {
        let Some(t) = threads.get(&(b.tid, b.born_ns)) else {
            continue;
        };
        if t.owner.role == "idle" {
            continue;
        }
        let part = part_name(&t.owner.comm);
        let at = (to_host(b.start_ns), to_host(b.end_ns));
        for (state, ns) in b.states {
            spread(&part, state, ns, at);
        }
    }
    for (state, ns) in idle_irq {
        spread("(while idle)", state, ns, (window.0 as f64, window.1 as f64));
    }
    let mut split = VcpuSplit {
        intervals: host.iter().filter(|&&(g, x)| g > 0.0 || x > 0.0).count(),
        ..Default::default()
    };
    let mut parts = Busy::new();
    let (mut guest_mode, mut exits, mut counted, mut unrun) = (0.0, 0.0, 0.0, 0.0);
    for ((g, x), b) in host.iter().zip(&busy) {
        let total: f64 = b.values().sum();
        if total > 0.0 {
            for (k, ns) in b {
                *parts.entry(k.clone()).or_default() += g * ns / total;
            }
        } else if *g > 0.0 {
            *parts.entry(("(idle)".to_string(), "idle")).or_default() += g;
        }
        guest_mode += g;
        exits += x;
        counted += total;
        unrun += (total - g - x).max(0.0);
    }
    split.parts = parts
        .into_iter()
        .map(|((p, st), ns)| (p, st, ns.round() as u64))
        .collect();
    split.parts.sort_by_key(|p| std::cmp::Reverse(p.2));
    split.guest_mode_ns = guest_mode.round() as u64;
    split.exits_ns = exits.round() as u64;
    split.guest_busy_ns = counted.round() as u64;
    split.unrun_busy_ns = unrun.round() as u64;
    Some(split)
}

/// A guest thread's busy time over one of its intervals: on all its CPUs,
/// or on one.
struct GuestBusy {
    tid: u32,
    born_ns: u64,
    start_ns: u64,
    end_ns: u64,
    states: [(&'static str, u64); 4],
}

impl GuestBusy {
    fn new(tid: u32, born_ns: u64, (start_ns, end_ns): (u64, u64), [user, system, softirq, hardirq]: [u64; 4]) -> Self {
        GuestBusy {
            tid,
            born_ns,
            start_ns,
            end_ns,
            states: [
                ("user", user),
                ("system", system),
                ("softirq", softirq),
                ("hardirq", hardirq),
            ],
        }
    }
}

/// The guest's threads' busy time, interval by interval, on every CPU.
fn busy_anywhere(guest: &Recording) -> Vec<GuestBusy> {
    guest
        .rows::<IntervalRow>()
        .iter()
        .map(|i| {
            let busy = [i.user_ns, i.system_ns, i.softirq_ns, i.hardirq_ns];
            GuestBusy::new(i.tid, i.born_ns, (i.start_ns, i.end_ns), busy)
        })
        .collect()
}

/// The same on guest CPU `cpu` alone (its `thread_cpus` rows).
fn busy_on(guest: &Recording, cpu: u32) -> Vec<GuestBusy> {
    guest
        .rows::<ThreadCpuRow>()
        .iter()
        .filter(|r| r.cpu == cpu)
        .map(|r| {
            let busy = [r.user_ns, r.system_ns, r.softirq_ns, r.hardirq_ns];
            GuestBusy::new(r.tid, r.born_ns, (r.start_ns, r.end_ns), busy)
        })
        .collect()
}

/// The index of the vCPU a host thread runs: the CPU layer's (from KVM),
/// else its name (QEMU's `CPU 1/KVM`, Firecracker's `fc_vcpu 1`).
pub fn vcpu_index(t: &ThreadRow) -> Option<u32> {
    t.vcpu.get().or_else(|| {
        let c = t.owner.comm.as_str();
        let digits = c.strip_prefix("CPU ").or_else(|| c.strip_prefix("fc_vcpu "))?;
        digits.split('/').next()?.trim().parse().ok()
    })
}

/// Thread `tid`'s guest-mode and other time (ns) within `window` (host ns
/// since the start), from its intervals, each shared out by its overlap.
pub fn in_window(rec: &Recording, tid: u32, (from, to): (u64, u64)) -> (u64, u64) {
    let (mut guest, mut exits) = (0.0, 0.0);
    for i in rec
        .rows::<IntervalRow>()
        .iter()
        .filter(|i| i.tid == tid && i.end_ns > i.start_ns)
    {
        let overlap = i.end_ns.min(to).saturating_sub(i.start_ns.max(from)) as f64 / (i.end_ns - i.start_ns) as f64;
        guest += i.guest_ns as f64 * overlap;
        exits += (i.user_ns + i.system_ns + i.softirq_ns + i.hardirq_ns) as f64 * overlap;
    }
    (guest as u64, exits as u64)
}

/// The host's vCPU threads: by role, or by the guest time they ran.
pub fn vcpu_threads(rec: &Recording) -> Vec<&ThreadRow> {
    rec.rows::<ThreadRow>()
        .iter()
        .filter(|t| t.owner.role == "vcpu" || t.guest_ns > 0)
        .collect()
}

/// The VMM process of a guest: its link's, else the recording's one VM's
/// (of `vcpus`), if it has one.
pub fn vmm_of(link: &GuestLinkRow, vcpus: &[&ThreadRow]) -> Option<u32> {
    let vmms: std::collections::BTreeSet<u32> = vcpus.iter().map(|t| t.owner.pid).collect();
    match (link.vmm_pid, vmms.len()) {
        (0, 1) => vmms.first().copied(),
        (0, _) => None,
        (pid, _) => Some(pid),
    }
}

pub fn section(rec: &Recording, top: usize) -> Section {
    let mut s = Section::new("guest", "inside the guests");
    let links = rec.rows::<GuestLinkRow>();
    if links.is_empty() {
        return s;
    }
    let host_vcpus = vcpu_threads(rec);
    let mut reports = Vec::new();
    for link in links {
        let clock = ClockMap::of(rec, &link.guest);
        let vmm = vmm_of(link, &host_vcpus);
        let mut report = GuestReport {
            guest: link.guest.clone(),
            address: link.address.clone(),
            state: link.state.clone(),
            error: link.error.clone(),
            kernel: link.kernel.clone(),
            last_heard_s: link.last_heard_ns as f64 / 1e9,
            window_start_s: link.attached_ns as f64 / 1e9,
            window_s: 0.0,
            unreadable: None,
            clock,
            agent_cost: None,
            cpus: Vec::new(),
            threads: Vec::new(),
            vcpu: None,
            vcpus: Vec::new(),
            no_cpu_busy_ns: 0,
        };
        match rec.guests.iter().find(|g| g.name == link.guest).map(|g| &g.recording) {
            Some(Ok(guest)) => {
                report.window_s = guest.meta.wall_ns as f64 / 1e9;
                let window = (link.attached_ns, link.attached_ns + guest.meta.wall_ns);
                for c in guest.rows::<CpuRow>() {
                    let host = host_vcpus
                        .iter()
                        .find(|t| Some(t.owner.pid) == vmm && vcpu_index(t) == Some(c.cpu));
                    let (host_guest_ns, host_exits_ns) = host.map_or((0, 0), |t| in_window(rec, t.tid, window));
                    report.cpus.push(GuestCpu {
                        cpu: c.cpu,
                        user_ns: c.user_ns,
                        system_ns: c.system_ns,
                        softirq_ns: c.softirq_ns,
                        hardirq_ns: c.hardirq_ns,
                        idle_ns: c.idle_ns,
                        host_tid: host.map(|t| t.tid),
                        host_guest_ns,
                        host_exits_ns,
                        host_off_ns: host.map_or(0, |_| {
                            (window.1 - window.0).saturating_sub(host_guest_ns + host_exits_ns)
                        }),
                    });
                }
                let mut threads: Vec<&ThreadRow> = guest
                    .rows::<ThreadRow>()
                    .iter()
                    .filter(|t| t.owner.role != "idle" && t.user_ns + t.system_ns + t.softirq_ns + t.hardirq_ns > 0)
                    .collect();
                threads.sort_by_key(|t| std::cmp::Reverse(t.user_ns + t.system_ns + t.softirq_ns + t.hardirq_ns));
                report.threads = threads
                    .iter()
                    .map(|t| GuestThread {
                        tid: t.tid,
                        pid: t.owner.pid,
                        comm: t.owner.comm.clone(),
                        user_ns: t.user_ns,
                        system_ns: t.system_ns,
                        softirq_ns: t.softirq_ns,
                        hardirq_ns: t.hardirq_ns,
                        total_ns: t.user_ns + t.system_ns + t.softirq_ns + t.hardirq_ns,
                    })
                    .collect();
                report.agent_cost = Some(guest.meta.overhead.self_cost_fraction);
                let vcpus: Vec<u32> = host_vcpus
                    .iter()
                    .filter(|t| Some(t.owner.pid) == vmm)
                    .map(|t| t.tid)
                    .collect();
                // The guest's times on the host's timeline: by the clock, else
                // from when its agent attached.
                let (host_start, guest_start) = (rec.meta.start_mono_ns, guest.meta.start_mono_ns);
                let map = report.clock.clone().filter(|_| host_start != 0 && guest_start != 0);
                let attached = link.attached_ns as f64;
                let to_host = |t: u64| match &map {
                    Some(m) => m.to_host(t + guest_start) - host_start as f64,
                    None => t as f64 + attached,
                };
                report.vcpu = vcpu_split(
                    rec,
                    guest,
                    &busy_anywhere(guest),
                    &vcpus,
                    window,
                    to_host,
                    idle_irq(&report),
                );
                report.vcpus = match (report.cpus.as_slice(), &report.vcpu) {
                    ([one], Some(whole)) => vec![VcpuSplit {
                        cpu: Some(one.cpu),
                        host_tid: one.host_tid,
                        ..whole.clone()
                    }],
                    _ => report
                        .cpus
                        .iter()
                        .filter_map(|c| {
                            let tid = c.host_tid?;
                            let busy = busy_on(guest, c.cpu);
                            let split = vcpu_split(rec, guest, &busy, &[tid], window, to_host, idle_irq_on(c, &busy));
                            split.map(|v| VcpuSplit {
                                cpu: Some(c.cpu),
                                host_tid: Some(tid),
                                ..v
                            })
                        })
                        .collect(),
                };
                report.no_cpu_busy_ns = guest
                    .rows::<ThreadCpuRow>()
                    .iter()
                    .filter(|r| r.cpu == crate::layers::cpu::collector::NO_CPU)
                    .map(|r| r.user_ns + r.system_ns + r.softirq_ns + r.hardirq_ns)
                    .sum();
            }
            Some(Err(e)) => report.unreadable = Some(e.clone()),
            None => report.unreadable = Some("no recording of it is in this one".into()),
        }
        reports.push(report);
    }
    for r in &reports {
        let mut lines = vec![format!(
            "guest {} at {}: {}{}{}",
            r.guest,
            r.address,
            r.state,
            if r.kernel.is_empty() {
                String::new()
            } else {
                format!(", Linux {}", r.kernel)
            },
            if r.error.is_empty() {
                String::new()
            } else {
                format!(" ({})", r.error)
            }
        )];
        if r.state == "silent" {
            lines.push(format!("  last heard {:.3} s into the recording", r.last_heard_s));
        }
        match &r.clock {
            Some(c) => lines.push(format!(
                "  clock: guest = host {:+.3} ms, drift {:+.1} ppm, bound ±{:.1} us ({} exchanges, fastest round trip {:.1} us; {} of {} in causal order after mapping)",
                c.offset_ns / 1e6,
                c.drift_ppm,
                c.bound_ns / 1e3,
                c.exchanges,
                c.min_round_trip_ns as f64 / 1e3,
                c.causal,
                c.exchanges
            )),
            None => lines.push("  clock: no exchange answered: the guest's times are its own".into()),
        }
        if r.window_s > 0.0 {
            lines.push(format!(
                "  its recording: {:.3} s from {:.3} s into the host's (the host's figures below are over the same span, from its intervals)",
                r.window_s, r.window_start_s
            ));
        }
        if let Some(cost) = r.agent_cost {
            lines.push(format!(
                "  the agent's recording cost the guest {:.2}% of its capacity",
                cost * 100.0
            ));
        }
        if let Some(why) = &r.unreadable {
            lines.push(format!("  its recording: {why}"));
        }
        s.lines(lines);
        if !r.cpus.is_empty() {
            let mut t = Table::new(
                format!(
                    "{}: each guest CPU (s, as the guest's clock ran) beside the host thread that ran it over the same span: in guest mode, handling exits (host kernel and VMM), and not running (halted, or waiting for a host CPU: time the guest counts as its own)",
                    r.guest
                ),
                vec![
                    col("cpu", 4),
                    col("user", 8),
                    col("system", 8),
                    col("softirq", 8),
                    col("hardirq", 8),
                    col("busy", 8),
                    col("idle", 8),
                    col("host tid", 9),
                    col("guest mode", 11),
                    col("exits", 8),
                    col("not running", 12),
                ],
            );
            for c in &r.cpus {
                t.row(vec![
                    c.cpu.to_string(),
                    secs(c.user_ns),
                    secs(c.system_ns),
                    secs(c.softirq_ns),
                    secs(c.hardirq_ns),
                    secs(c.busy()),
                    secs(c.idle_ns),
                    c.host_tid.map_or("-".into(), |t| t.to_string()),
                    secs(c.host_guest_ns),
                    secs(c.host_exits_ns),
                    secs(c.host_off_ns),
                ]);
            }
            s.table(t);
        }
        if !r.threads.is_empty() {
            let mut t = Table::new(
                format!(
                    "{}: the guest's own threads (s){}",
                    r.guest,
                    match r.cpus.as_slice() {
                        [one] => one
                            .host_tid
                            .map_or(String::new(), |t| format!(", inside its one vCPU: host thread {t}")),
                        _ => String::new(),
                    }
                ),
                vec![
                    left("comm", 16),
                    col("pid", 7),
                    col("tid", 7),
                    col("user", 8),
                    col("system", 8),
                    col("softirq", 8),
                    col("hardirq", 8),
                ],
            );
            for th in r.threads.iter().take(top) {
                t.row(vec![
                    th.comm.clone(),
                    th.pid.to_string(),
                    th.tid.to_string(),
                    secs(th.user_ns),
                    secs(th.system_ns),
                    secs(th.softirq_ns),
                    secs(th.hardirq_ns),
                ]);
            }
            s.table(t);
        }
        if let Some(v) = &r.vcpu {
            s.lines(vec![format!(
                "  its vCPUs on the host: {} s in guest mode and {} s handling exits, while the guest counted {} s busy: \
                 at least {} s of that they were not running (the guest's clock ran on while the host ran something else)",
                secs(v.guest_mode_ns),
                secs(v.exits_ns),
                secs(v.guest_busy_ns),
                secs(v.unrun_busy_ns)
            )]);
            s.table(parts_table(
                format!(
                    "{}: its vCPUs' guest-mode time (s, the host's) by the guest's parts, shared out over {} host intervals by the busy time the guest counted in each",
                    r.guest, v.intervals
                ),
                v,
                top,
            ));
            for (part, state, ns) in &v.parts {
                s.metric(
                    "guest_vcpu_ns",
                    *ns as f64,
                    "ns",
                    &[("guest", &r.guest), ("part", part), ("state", state)],
                );
            }
        }
        // Several vCPUs: each one's, nested under it.
        for v in r.vcpus.iter().filter(|_| r.vcpus.len() > 1) {
            let (cpu, tid) = (v.cpu.unwrap_or_default(), v.host_tid.unwrap_or_default());
            s.table(parts_table(
                format!(
                    "{}: vCPU {cpu} (host thread {tid}): {} s in guest mode, {} s handling exits, by the guest's parts that ran on its CPU {cpu}",
                    r.guest,
                    secs(v.guest_mode_ns),
                    secs(v.exits_ns)
                ),
                v,
                top,
            ));
        }
        if r.no_cpu_busy_ns > 0 {
            s.lines(vec![format!(
                "  {} s of the guest threads' time ran on no CPU known (a per-CPU slot another thread held): no vCPU's split holds it",
                secs(r.no_cpu_busy_ns)
            )]);
        }
        for c in &r.cpus {
            let cpu = c.cpu.to_string();
            for (state, ns) in c.states() {
                s.metric(
                    "guest_cpu_seconds",
                    ns as f64 / 1e9,
                    "s",
                    &[("guest", &r.guest), ("cpu", &cpu), ("state", state)],
                );
            }
        }
    }
    for r in &reports {
        for ((part, state), ns) in cpu_parts(r) {
            s.metric(
                "guest_cpu_ns",
                ns as f64,
                "ns",
                &[("guest", &r.guest), ("part", &part), ("state", state)],
            );
        }
    }
    if let Some(f) = cpu_figure(&reports) {
        s.figure(f);
    }
    s.json("guests", &reports);
    s
}

/// A split's parts (the `top` largest): guest-mode time and share.
fn parts_table(title: String, v: &VcpuSplit, top: usize) -> Table {
    let mut t = Table::new(
        title,
        vec![
            left("part", 20),
            left("state", 8),
            col("guest mode", 11),
            col("share", 7),
        ],
    );
    for (part, state, ns) in v.parts.iter().take(top) {
        t.row(vec![
            part.clone(),
            state.to_string(),
            secs(*ns),
            pct(*ns, v.guest_mode_ns),
        ]);
    }
    t
}

/// A guest thread's part of the guest's CPU: its program, a kernel
/// thread's kind without its CPU (`kworker/0:2` -> `kworker`).
fn part_of(comm: &str) -> &str {
    comm.split('/').next().unwrap_or(comm)
}

/// Where the guest's busy time went, by part and state: its threads by
/// program (the agent's own left out, as vtrace's own is on the host), and
/// the interrupts that came while it idled (each CPU's softirq and hardirq
/// beyond its threads'). What `bench` sets per operation beside the vCPU.
fn cpu_parts(r: &GuestReport) -> std::collections::BTreeMap<(String, &'static str), u64> {
    let mut parts = std::collections::BTreeMap::new();
    for t in &r.threads {
        let part = part_name(&t.comm);
        if part == AGENT_PART {
            continue;
        }
        for (state, ns) in [
            ("user", t.user_ns),
            ("system", t.system_ns),
            ("softirq", t.softirq_ns),
            ("hardirq", t.hardirq_ns),
        ] {
            if ns > 0 {
                *parts.entry((part.clone(), state)).or_default() += ns;
            }
        }
    }
    for (state, ns) in idle_irq(r) {
        if ns > 0 {
            parts.insert(("(while idle)".to_string(), state), ns);
        }
    }
    parts
}

/// The interrupts that came while the guest idled: each CPU's softirq and
/// hardirq beyond its threads'.
fn idle_irq(r: &GuestReport) -> [(&'static str, u64); 2] {
    let cpus = |f: fn(&GuestCpu) -> u64| r.cpus.iter().map(f).sum::<u64>();
    let threads = |f: fn(&GuestThread) -> u64| r.threads.iter().map(f).sum::<u64>();
    [
        (
            "softirq",
            cpus(|c| c.softirq_ns).saturating_sub(threads(|t| t.softirq_ns)),
        ),
        (
            "hardirq",
            cpus(|c| c.hardirq_ns).saturating_sub(threads(|t| t.hardirq_ns)),
        ),
    ]
}

/// The interrupts that came while guest CPU `c` idled: its softirq and
/// hardirq beyond its threads' there (`busy`, its `thread_cpus` rows).
fn idle_irq_on(c: &GuestCpu, busy: &[GuestBusy]) -> [(&'static str, u64); 2] {
    let threads = |k: usize| busy.iter().map(|b| b.states[k].1).sum::<u64>();
    [
        ("softirq", c.softirq_ns.saturating_sub(threads(2))),
        ("hardirq", c.hardirq_ns.saturating_sub(threads(3))),
    ]
}

/// Each guest CPU as two bars over the guest's window: the host thread that
/// ran it (in guest mode, handling exits, not running), and inside it the
/// guest's own account (its states, idle included).
fn cpu_figure(reports: &[GuestReport]) -> Option<Figure> {
    // The host thread's three, then the guest's states: each bar has one side's.
    const SERIES: [&str; 8] = [
        "guest",
        "exits",
        "not running",
        "user",
        "system",
        "softirq",
        "hardirq",
        "idle",
    ];
    let mut categories = Vec::new();
    let mut bars: Vec<[u64; 8]> = Vec::new();
    for r in reports {
        for c in &r.cpus {
            let host = c
                .host_tid
                .map_or("no host thread found".to_string(), |t| format!("host tid {t}"));
            categories.push(format!("{} cpu {}: {host}", r.guest, c.cpu));
            categories.push(format!("{} cpu {}: inside", r.guest, c.cpu));
            bars.push([c.host_guest_ns, c.host_exits_ns, c.host_off_ns, 0, 0, 0, 0, 0]);
            let [user, system, softirq, hardirq, idle] = c.states().map(|(_, ns)| ns);
            bars.push([0, 0, 0, user, system, softirq, hardirq, idle]);
        }
    }
    if bars.is_empty() {
        return None;
    }
    let series = SERIES
        .iter()
        .enumerate()
        .map(|(i, name)| Series {
            name: name.to_string(),
            values: bars.iter().map(|b| b[i] as f64 / 1e9).collect(),
        })
        .collect();
    Some(Figure {
        title: "Each guest CPU: the host thread that ran it, and inside it the guest's own states".into(),
        value_label: "seconds over the guest's window (guest: the thread in guest mode)".into(),
        kind: FigureKind::StackedBars { categories, series },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread(comm: &str, [user_ns, system_ns, softirq_ns, hardirq_ns]: [u64; 4]) -> GuestThread {
        GuestThread {
            tid: 1,
            pid: 1,
            comm: comm.into(),
            user_ns,
            system_ns,
            softirq_ns,
            hardirq_ns,
            total_ns: user_ns + system_ns + softirq_ns + hardirq_ns,
        }
    }

    /// Threads by program (a kernel thread's CPU dropped from its name), the
    /// agent's own left out, and the interrupts no thread took: while idle.
    #[test]
    fn the_guests_busy_time_is_parted_by_program_and_state() {
        let report = GuestReport {
            guest: "g".into(),
            address: String::new(),
            state: "complete".into(),
            error: String::new(),
            kernel: String::new(),
            last_heard_s: 0.0,
            window_start_s: 0.0,
            window_s: 1.0,
            unreadable: None,
            clock: None,
            agent_cost: None,
            cpus: vec![GuestCpu {
                cpu: 0,
                user_ns: 14,
                system_ns: 7,
                softirq_ns: 6,
                hardirq_ns: 2,
                idle_ns: 100,
                host_tid: None,
                host_guest_ns: 0,
                host_exits_ns: 0,
                host_off_ns: 0,
            }],
            threads: vec![
                thread("redis-server", [5, 3, 1, 0]),
                thread("kworker/0:2", [0, 2, 0, 1]),
                thread("kworker/u2:1", [0, 1, 0, 0]),
                thread("vtrace-recorder", [9, 1, 2, 0]),
            ],
            vcpu: None,
            vcpus: Vec::new(),
            no_cpu_busy_ns: 0,
        };
        let parts: Vec<((String, &str), u64)> = cpu_parts(&report).into_iter().collect();
        let want: Vec<((String, &str), u64)> = [
            (("(while idle)", "hardirq"), 1),
            (("(while idle)", "softirq"), 3),
            (("kworker", "hardirq"), 1),
            (("kworker", "system"), 3),
            (("redis-server", "softirq"), 1),
            (("redis-server", "system"), 3),
            (("redis-server", "user"), 5),
        ]
        .into_iter()
        .map(|((p, s), ns)| ((p.to_string(), s), ns))
        .collect();
        assert_eq!(parts, want);
    }

    fn host_interval(tid: u32, start_s: u64, guest_ns: u64, exits_ns: u64) -> IntervalRow {
        IntervalRow {
            start_ns: start_s * 1_000_000_000,
            end_ns: (start_s + 1) * 1_000_000_000,
            tid,
            guest_ns,
            system_ns: exits_ns,
            ..Default::default()
        }
    }

    fn guest_interval(tid: u32, start_s: u64, user_ns: u64, system_ns: u64) -> IntervalRow {
        IntervalRow {
            user_ns,
            system_ns,
            ..host_interval(tid, start_s, 0, 0)
        }
    }

    fn recording(threads: Vec<ThreadRow>, intervals: Vec<IntervalRow>) -> Recording {
        let mut rec = Recording::default();
        rec.tables.put(threads);
        rec.tables.put(intervals);
        rec
    }

    /// Each host second's guest-mode time goes to the parts the guest
    /// counted busy in it, in their proportion (the agent's as its own
    /// part); a second the guest counted nothing busy is `(idle)`; busy time
    /// beyond guest mode and exits was time the vCPU did not run.
    #[test]
    fn the_vcpus_guest_mode_time_is_shared_out_by_what_the_guest_counted_in_each_interval() {
        let host = recording(
            Vec::new(),
            vec![
                host_interval(10, 0, 600, 100),
                host_interval(10, 1, 400, 0),
                host_interval(10, 2, 50, 0),
                // Another VM's vCPU.
                host_interval(11, 0, 999, 0),
            ],
        );
        let thread = |tid: u32, comm: &str| ThreadRow {
            tid,
            owner: crate::recording::Owner {
                comm: comm.into(),
                role: "app".into(),
                ..Default::default()
            },
            ..Default::default()
        };
        let guest = recording(
            vec![thread(1, "redis-server"), thread(2, "vtrace-recorder")],
            vec![
                guest_interval(1, 0, 300, 0),
                guest_interval(2, 0, 100, 0),
                guest_interval(1, 1, 0, 900),
            ],
        );
        let none = [("softirq", 0), ("hardirq", 0)];
        let busy = busy_anywhere(&guest);
        let v = vcpu_split(&host, &guest, &busy, &[10], (0, 3_000_000_000), |t| t as f64, none).unwrap();
        let parts: Vec<(&str, &str, u64)> = v.parts.iter().map(|(p, s, ns)| (p.as_str(), *s, *ns)).collect();
        assert_eq!(
            parts,
            [
                ("redis-server", "user", 450),
                ("redis-server", "system", 400),
                (AGENT_PART, "user", 150),
                ("(idle)", "idle", 50),
            ]
        );
        assert_eq!((v.guest_mode_ns, v.exits_ns, v.guest_busy_ns), (1050, 100, 1300));
        // Second 1: 900 counted busy, 400 in guest mode.
        assert_eq!(v.unrun_busy_ns, 500);
        assert_eq!(v.intervals, 3);
        // Half the window: half of each interval it cuts.
        let v = vcpu_split(
            &host,
            &guest,
            &busy,
            &[10],
            (500_000_000, 1_500_000_000),
            |t| t as f64,
            none,
        )
        .unwrap();
        assert_eq!(v.guest_mode_ns, 500);
        assert!(vcpu_split(&host, &guest, &busy, &[12], (0, 3_000_000_000), |t| t as f64, none).is_none());
    }
}
