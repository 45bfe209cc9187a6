//! The guest layer's report section: for each guest, how its agent was
//! reached and how its clock maps onto the host's (offset, drift, bound,
//! exchanges in causal order), then its CPU by state beside the host's
//! vCPU thread that ran it (the guest's busy time against the thread's
//! guest-mode time and its exits), and the guest's own threads.

use serde::Serialize;

use super::{GuestLinkRow, clock::ClockMap};
use crate::{
    layers::cpu::{CpuRow, IntervalRow, ThreadRow},
    recording::Recording,
    report_model::{Figure, FigureKind, Section, Series, Table, col, left, secs},
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
}

/// The index of the vCPU a host thread runs: the CPU layer's (from KVM),
/// else its name (QEMU's `CPU 1/KVM`, Firecracker's `fc_vcpu 1`).
fn vcpu_index(t: &ThreadRow) -> Option<u32> {
    t.vcpu.get().or_else(|| {
        let c = t.owner.comm.as_str();
        let digits = c.strip_prefix("CPU ").or_else(|| c.strip_prefix("fc_vcpu "))?;
        digits.split('/').next()?.trim().parse().ok()
    })
}

/// Thread `tid`'s guest-mode and other time (ns) within `window` (host ns
/// since the start), from its intervals, each shared out by its overlap.
fn in_window(rec: &Recording, tid: u32, (from, to): (u64, u64)) -> (u64, u64) {
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

pub fn section(rec: &Recording, top: usize) -> Section {
    let mut s = Section::new("guest", "inside the guests");
    let links = rec.rows::<GuestLinkRow>();
    if links.is_empty() {
        return s;
    }
    let host_vcpus: Vec<&ThreadRow> = rec
        .rows::<ThreadRow>()
        .iter()
        .filter(|t| t.owner.role == "vcpu" || t.guest_ns > 0)
        .collect();
    let vmms: std::collections::BTreeSet<u32> = host_vcpus.iter().map(|t| t.owner.pid).collect();
    let mut reports = Vec::new();
    for link in links {
        let clock = ClockMap::of(rec, &link.guest);
        let vmm = if link.vmm_pid != 0 {
            Some(link.vmm_pid)
        } else if vmms.len() == 1 {
            vmms.first().copied()
        } else {
            None
        };
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
    let (mut softirq, mut hardirq) = (0u64, 0u64);
    for t in &r.threads {
        softirq += t.softirq_ns;
        hardirq += t.hardirq_ns;
        if t.comm.starts_with("vtrace") {
            continue;
        }
        for (state, ns) in [
            ("user", t.user_ns),
            ("system", t.system_ns),
            ("softirq", t.softirq_ns),
            ("hardirq", t.hardirq_ns),
        ] {
            if ns > 0 {
                *parts.entry((part_of(&t.comm).to_string(), state)).or_default() += ns;
            }
        }
    }
    let idle_irq = [
        (
            "softirq",
            r.cpus.iter().map(|c| c.softirq_ns).sum::<u64>().saturating_sub(softirq),
        ),
        (
            "hardirq",
            r.cpus.iter().map(|c| c.hardirq_ns).sum::<u64>().saturating_sub(hardirq),
        ),
    ];
    for (state, ns) in idle_irq {
        if ns > 0 {
            parts.insert(("(while idle)".to_string(), state), ns);
        }
    }
    parts
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
}
