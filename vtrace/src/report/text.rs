//! Text tables for a terminal.

use std::fmt::Write as _;

use super::{ns_per_event, whole_run_time_ns};
use crate::{
    layers::{
        cpu::analysis::{CpuBreakdown, StateTimes},
        kvm::analysis::{KvmSummary, ReasonStats},
    },
    recording::Recording,
};

fn secs(ns: u64) -> String {
    format!("{:.3}", ns as f64 / 1e9)
}

fn pct(ns: u64, of: u64) -> String {
    if of == 0 {
        "-".into()
    } else {
        format!("{:.1}%", ns as f64 * 100.0 / of as f64)
    }
}

const STATE_HEADER: &str = "    user(s)  system(s) softirq(s) hardirq(s)   guest(s)   total(s)  %capacity";

fn state_cols(t: &StateTimes, capacity: u64) -> String {
    format!(
        "{:>11}{:>11}{:>11}{:>11}{:>11}{:>11}{:>11}",
        secs(t.user_ns),
        secs(t.system_ns),
        secs(t.softirq_ns),
        secs(t.hardirq_ns),
        secs(t.guest_ns),
        secs(t.busy_ns()),
        pct(t.busy_ns(), capacity)
    )
}

pub fn render(rec: &Recording, cpu: &CpuBreakdown, top: usize) -> String {
    let m = &rec.meta;
    let cap = cpu.capacity_ns();
    let mut o = String::new();
    let _ = writeln!(
        o,
        "vtrace {} | kernel {} | {} CPUs | platform {}",
        m.vtrace_version, m.host.kernel, cpu.cpus, m.selectors.platform
    );
    let _ = write!(
        o,
        "wall {} s (capacity {} CPU-s) | stopped by: {}",
        secs(cpu.wall_ns),
        secs(cap),
        m.stopped_by
    );
    if let Some(w) = &m.workload {
        let status = match (w.exit_code, w.signal) {
            (Some(c), _) => format!("exit {c}"),
            (None, Some(s)) => format!("killed by signal {s}"),
            _ => "status unknown".into(),
        };
        let _ = write!(o, " | workload `{}` (pid {}, {status})", w.command.join(" "), w.pid);
    }
    o.push_str("\n\n");

    let t = &cpu.total;
    let _ = writeln!(o, "CPU time, all CPUs (percent of wall x CPUs)");
    for (name, ns) in [
        ("user", t.user_ns),
        ("system", t.system_ns),
        ("softirq", t.softirq_ns),
        ("hardirq", t.hardirq_ns),
        ("guest", t.guest_ns),
        ("idle", t.idle_ns),
    ] {
        let _ = writeln!(o, "  {name:<8}{:>10} s {:>7}", secs(ns), pct(ns, cap));
    }
    let untracked = cap.saturating_sub(t.busy_ns() + t.idle_ns);
    let _ = writeln!(
        o,
        "  {:<8}{:>10} s {:>7}  (before each CPU's first event)\n",
        "unseen",
        secs(untracked),
        pct(untracked, cap)
    );

    let _ = writeln!(
        o,
        "By platform and role\n  {:<10}{:<10}{:>8}{STATE_HEADER}",
        "platform", "role", "threads"
    );
    for g in &cpu.by_role {
        let _ = writeln!(
            o,
            "  {:<10}{:<10}{:>8}{}",
            g.platform,
            g.role,
            g.threads,
            state_cols(&g.times, cap)
        );
    }

    let _ = writeln!(
        o,
        "\nTop processes\n  {:>8} {:<16}{:<8}{:>8}{STATE_HEADER}",
        "pid", "comm", "role", "threads"
    );
    for g in cpu.by_process.iter().filter(|g| g.total_ns > 0).take(top) {
        let _ = writeln!(
            o,
            "  {:>8} {:<16}{:<8}{:>8}{}",
            g.pid.unwrap_or(0),
            g.comm,
            g.role,
            g.threads,
            state_cols(&g.times, cap)
        );
    }

    let _ = writeln!(
        o,
        "\nTop threads\n  {:>8} {:>8} {:<16}{:<8}{STATE_HEADER}",
        "pid", "tid", "comm", "role"
    );
    for th in cpu
        .threads
        .iter()
        .filter(|t| StateTimes::of_thread(t).busy_ns() > 0)
        .take(top)
    {
        let _ = writeln!(
            o,
            "  {:>8} {:>8} {:<16}{:<8}{}",
            th.pid,
            th.tid,
            th.comm,
            th.role,
            state_cols(&StateTimes::of_thread(th), cap)
        );
    }

    let _ = writeln!(
        o,
        "\nSoftirq vectors (all CPUs)\n  {:<10}{:>12}{:>12}{:>12}",
        "vector", "time(s)", "count", "mean(us)"
    );
    for v in &cpu.softirq_vectors {
        let mean = if v.count > 0 {
            v.ns as f64 / v.count as f64 / 1e3
        } else {
            0.0
        };
        let _ = writeln!(o, "  {:<10}{:>12}{:>12}{:>12.2}", v.vector, secs(v.ns), v.count, mean);
    }
    let _ = writeln!(
        o,
        "\nHard interrupts (all CPUs)\n  {:>5} {:<32}{:>12}{:>12}",
        "irq", "name", "time(s)", "count"
    );
    for i in cpu.hardirqs.iter().take(top) {
        let _ = writeln!(o, "  {:>5} {:<32}{:>12}{:>12}", i.irq, i.name, secs(i.ns), i.count);
    }

    let _ = writeln!(o, "\nPer CPU\n  {:>4}{STATE_HEADER}    idle(s)", "cpu");
    for c in rec.rows::<crate::layers::cpu::CpuRow>() {
        let st = StateTimes::of_cpu(c);
        let _ = writeln!(
            o,
            "  {:>4}{}{:>11}",
            c.cpu,
            state_cols(&st, cpu.wall_ns),
            secs(c.idle_ns)
        );
    }

    network(&mut o, rec);
    user_space(&mut o, rec);
    kvm(&mut o, rec, top);
    samples(&mut o, rec, top);

    let _ = writeln!(
        o,
        "\nProbes\n  {:<28}{:<9}{:<12}{:>12}  note",
        "probe", "layer", "method", "events"
    );
    for p in &m.probes {
        let events = rec
            .rows::<crate::recording::ProgramRow>()
            .iter()
            .find(|r| r.probe == p.id)
            .map(|r| r.run_count.to_string())
            .unwrap_or_else(|| "-".into());
        let method = p.method.clone().unwrap_or_else(|| "unavailable".into());
        let _ = writeln!(
            o,
            "  {:<28}{:<9}{:<12}{:>12}  {}",
            p.id,
            p.layer,
            method,
            events,
            p.note()
        );
    }

    let ov = &m.overhead;
    let coverage = if ov.bpf_stats_coverage >= 1.0 {
        String::new()
    } else {
        format!(
            " (BPF statistics on for {:.1}% of the run: run time = runs x ns per run measured then)",
            ov.bpf_stats_coverage * 100.0
        )
    };
    let _ = writeln!(
        o,
        "\nvtrace's own cost{coverage}\n  eBPF programs: {} s over {} events ({:.4}% of capacity); vtrace process: user {} s, system {} s, peak RSS {} MiB; per-thread map overflows: {}; interrupt state repairs: {}; untraced context switches: {}",
        secs(ov.bpf_run_time_ns),
        ov.bpf_run_count,
        ov.bpf_cpu_fraction * 100.0,
        secs(ov.vtrace_user_ns),
        secs(ov.vtrace_system_ns),
        ov.vtrace_peak_rss_kib / 1024,
        ov.thread_map_overflows,
        ov.state_repairs,
        ov.untraced_switches
    );
    let _ = writeln!(
        o,
        "  {:<28}{:>12}{:>14}{:>12}",
        "program", "events", "run time(s)", "ns/event"
    );
    let mut progs = rec.rows::<crate::recording::ProgramRow>().to_vec();
    progs.sort_by_key(|p| std::cmp::Reverse(whole_run_time_ns(p)));
    for p in &progs {
        let _ = writeln!(
            o,
            "  {:<28}{:>12}{:>14}{:>12.0}",
            p.program,
            p.events,
            secs(whole_run_time_ns(p)),
            ns_per_event(p.run_time_ns, p.run_count)
        );
    }
    for n in m.notes.iter().chain(&rec.read_notes) {
        let _ = writeln!(o, "\nnote: {n}");
    }
    o
}

/// Packet size at each hop of each device, with its owner and softirq time.
fn network(o: &mut String, rec: &Recording) {
    if rec.rows::<crate::layers::net::NetHopRow>().is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "\nNetwork devices: packet size at each hop (bytes with link-layer header; p50/p99 are bucket bounds)\n  {:<16}{:<8}{:<16}{:<11}{:>9}{:>12}{:>7}{:>7}{:>7}{:>7}{:>12}",
        "device", "kind", "owner", "hop", "packets", "bytes", "mean", "p50", "p99", "gso", "softirq(ms)"
    );
    for h in rec.rows::<crate::layers::net::NetHopRow>() {
        let d = rec
            .rows::<crate::layers::net::NetDeviceRow>()
            .iter()
            .find(|d| d.netns == h.netns && d.ifindex == h.ifindex);
        let hist: Vec<(u64, u64)> = rec
            .rows::<crate::layers::net::NetSizeRow>()
            .iter()
            .filter(|s| s.netns == h.netns && s.ifindex == h.ifindex && s.hop == h.hop && s.kind == "mtu")
            .map(|s| (s.le, s.count))
            .collect();
        let quantile = |q: f64| {
            let target = ((h.packets as f64 * q).ceil() as u64).max(1);
            let mut seen = 0;
            hist.iter()
                .find(|(_, c)| {
                    seen += c;
                    seen >= target
                })
                .map(|(le, _)| {
                    if *le >= u32::MAX as u64 {
                        ">64K".to_string()
                    } else {
                        le.to_string()
                    }
                })
                .unwrap_or_default()
        };
        let owner = d
            .map(|d| {
                if d.instance.is_empty() {
                    d.platform.clone()
                } else {
                    format!("{}/{}", d.platform, d.role)
                }
            })
            .unwrap_or_default();
        let softirq = match (h.hop.as_str(), d) {
            ("receive", Some(d)) => format!("{:.1}", d.softirq_ns as f64 / 1e6),
            _ => String::new(),
        };
        let _ = writeln!(
            o,
            "  {:<16}{:<8}{:<16}{:<11}{:>9}{:>12}{:>7}{:>7}{:>7}{:>7}{:>12}",
            d.map(|d| d.name.as_str()).unwrap_or("?"),
            d.map(|d| d.kind.as_str()).unwrap_or(""),
            owner,
            h.hop,
            h.packets,
            h.bytes,
            h.bytes / h.packets.max(1),
            quantile(0.5),
            quantile(0.99),
            h.gso_packets,
            softirq
        );
    }
    mtu_table(o, rec);
    if !rec.rows::<crate::layers::net::NetLatencyRow>().is_empty() {
        let name = |netns: u32, ifindex: u32| {
            rec.rows::<crate::layers::net::NetDeviceRow>()
                .iter()
                .find(|d| d.netns == netns && d.ifindex == ifindex)
                .map(|d| d.name.clone())
                .unwrap_or_else(|| format!("if{ifindex}"))
        };
        let _ = writeln!(
            o,
            "\n  Hop latency (same skb, consecutive hops)\n  {:<32}{:<32}{:>10}{:>10}{:>10}{:>10}",
            "from", "to", "packets", "mean(us)", "p50(us)", "p99(us)"
        );
        for l in rec.rows::<crate::layers::net::NetLatencyRow>() {
            let _ = writeln!(
                o,
                "  {:<32}{:<32}{:>10}{:>10.2}{:>10.2}{:>10.2}",
                format!("{}:{}", name(l.from_netns, l.from_ifindex), l.from_hop),
                format!("{}:{}", name(l.to_netns, l.to_ifindex), l.to_hop),
                l.count,
                l.sum_ns as f64 / l.count.max(1) as f64 / 1e3,
                l.p50_ns as f64 / 1e3,
                l.p99_ns as f64 / 1e3
            );
        }
        let displaced = rec.meta.overhead.skb_marks_displaced;
        if displaced > 0 {
            let _ = writeln!(
                o,
                "  {displaced} hops not timed: their skb's mark was displaced by another in flight (table slot collision)"
            );
        }
    }
    if !rec.rows::<crate::layers::net::NetDropRow>().is_empty() {
        let drops: Vec<String> = rec
            .rows::<crate::layers::net::NetDropRow>()
            .iter()
            .map(|d| format!("{} {}", d.reason, d.count))
            .collect();
        let _ = writeln!(o, "  drops: {}", drops.join(", "));
    }
}

/// Per device and hop: packets within a full frame (MTU plus link-layer
/// header), packets above it (GSO/GRO aggregates), and the largest; only for
/// recordings that know the MTU (net_hops version 2 on).
fn mtu_table(o: &mut String, rec: &Recording) {
    use crate::layers::net::{NetDeviceRow, NetHopRow, NetSizeRow};
    let hops: Vec<&NetHopRow> = rec.rows::<NetHopRow>().iter().filter(|h| h.mtu_edge > 0).collect();
    if hops.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "\n  Packets against the MTU (full frame = MTU + link-layer header)\n  {:<16}{:<11}{:>10}{:>12}{:>12}{:>10}",
        "device", "hop", "full frame", "<= frame", "> frame", "largest"
    );
    for h in hops {
        let name = rec
            .rows::<NetDeviceRow>()
            .iter()
            .find(|d| d.netns == h.netns && d.ifindex == h.ifindex)
            .map_or("?", |d| d.name.as_str());
        let within: u64 = rec
            .rows::<NetSizeRow>()
            .iter()
            .filter(|s| s.netns == h.netns && s.ifindex == h.ifindex && s.hop == h.hop && s.kind == "mtu")
            .filter(|s| s.le <= h.mtu_edge)
            .map(|s| s.count)
            .sum();
        let _ = writeln!(
            o,
            "  {:<16}{:<11}{:>10}{:>12}{:>12}{:>10}",
            name,
            h.hop,
            h.mtu_edge,
            within,
            h.packets.saturating_sub(within),
            h.max_bytes
        );
    }
}

/// Calls of user-space functions (uprobes), per process.
fn user_space(o: &mut String, rec: &Recording) {
    if rec.rows::<crate::layers::uprobe::UprobeRow>().is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "\nUser-space functions (uprobes)\n  {:<34}{:>8} {:<16}{:<16}{:>10}{:>12}{:>9}{:>14}",
        "probe", "pid", "comm", "owner", "calls", "bytes", "mean", "mean lat(us)"
    );
    for u in rec.rows::<crate::layers::uprobe::UprobeRow>() {
        let owner = if u.instance.is_empty() {
            u.platform.clone()
        } else {
            u.instance.clone()
        };
        let mean = if u.bytes > 0 {
            (u.bytes / u.calls.max(1)).to_string()
        } else {
            "-".into()
        };
        let lat = if u.returns > 0 {
            format!("{:.2}", u.latency_sum_ns as f64 / u.returns as f64 / 1e3)
        } else {
            "-".into()
        };
        let _ = writeln!(
            o,
            "  {:<34}{:>8} {:<16}{:<16}{:>10}{:>12}{:>9}{:>14}",
            u.probe, u.pid, u.comm, owner, u.calls, u.bytes, mean, lat
        );
    }
}

fn us(ns: u64) -> String {
    format!("{:.2}", ns as f64 / 1e3)
}

const KVM_HEADER: [&str; 13] = [
    "reason", "count", "%count", "%time", "min(us)", "mean(us)", "max(us)", "stddev", "p50(us)", "p95(us)", "p99(us)",
    "", "",
];

fn kvm_line(o: &mut String, who: &str, s: &ReasonStats) {
    let _ = writeln!(
        o,
        "  {:<28}{:<20}{:>9}{:>8.1}{:>8.1}{:>10}{:>10}{:>10}{:>9}{:>10}{:>10}{:>10}",
        who,
        s.reason,
        s.count,
        s.pct_count,
        s.pct_time,
        us(s.min_ns),
        us(s.mean_ns),
        us(s.max_ns),
        us(s.stddev_ns),
        us(s.p50_ns),
        us(s.p95_ns),
        us(s.p99_ns)
    );
}

/// KVM exits the way `perf kvm stat` shows them, plus the user-space leg.
fn kvm(o: &mut String, rec: &Recording, top: usize) {
    if rec.rows::<crate::layers::kvm::KvmLatencyRow>().is_empty()
        && rec.rows::<crate::layers::kvm::KvmEventRow>().is_empty()
    {
        return;
    }
    let k = KvmSummary::of(rec);
    let sections = [
        ("exit", "KVM exits (kvm_exit -> kvm_entry)"),
        (
            "userspace_exit",
            "User-space exits: VMM handling time (kvm_userspace_exit -> next ioctl(KVM_RUN))",
        ),
        ("halt", "Halts (kvm_vcpu_wakeup: time halted)"),
    ];
    for (kind, title) in sections {
        let threads: Vec<&ReasonStats> = k.by_thread.iter().filter(|s| s.kind == kind).collect();
        if threads.is_empty() {
            continue;
        }
        let h = KVM_HEADER;
        let _ = writeln!(
            o,
            "\n{title}\n  {:<28}{:<20}{:>9}{:>8}{:>8}{:>10}{:>10}{:>10}{:>9}{:>10}{:>10}{:>10}",
            "vcpu thread / scope", h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7], h[8], h[9], h[10]
        );
        for s in threads.iter().take(top) {
            kvm_line(o, &format!("{} {} ({})", s.tid, s.comm, s.role), s);
        }
        let instances: Vec<&ReasonStats> = k.by_instance.iter().filter(|s| s.kind == kind).collect();
        if instances.len() > threads.len() || threads.iter().any(|t| t.instance.is_empty()) {
            for s in k.total.iter().filter(|s| s.kind == kind) {
                kvm_line(o, "all vCPUs", s);
            }
        }
        for s in instances.iter().filter(|s| !s.instance.is_empty()) {
            kvm_line(o, &s.instance, s);
        }
    }
    if !rec.rows::<crate::layers::kvm::KvmEventRow>().is_empty() {
        let _ = writeln!(
            o,
            "\nKVM port, MMIO and interrupt events\n  {:<10}{:<18}{:<16}{:>14} {:<18}{:>6}{:>10}{:>12}  device",
            "tid", "comm", "kind", "addr", "op", "size", "count", "bytes"
        );
        let mut events: Vec<_> = rec.rows::<crate::layers::kvm::KvmEventRow>().iter().collect();
        events.sort_by_key(|e| std::cmp::Reverse(e.count));
        for e in events.iter().take(top.max(20)) {
            let _ = writeln!(
                o,
                "  {:<10}{:<18}{:<16}{:>14} {:<18}{:>6}{:>10}{:>12}  {}",
                e.tid,
                e.comm,
                e.kind,
                format!("{:#x}", e.addr),
                e.op,
                e.size,
                e.count,
                e.bytes,
                e.device
            );
        }
    }
    if !k.stats_check.is_empty() {
        let _ = writeln!(
            o,
            "\nKVM's own statistics (debugfs) beside vtrace's events\n  {:<10}{:>6}  {:<18}{:>12}{:>12}  vtrace source",
            "pid", "vms", "stat", "kvm", "vtrace"
        );
        for c in &k.stats_check {
            let v = c.vtrace.map_or("-".to_string(), |v| v.to_string());
            let _ = writeln!(
                o,
                "  {:<10}{:>6}  {:<18}{:>12}{:>12}  {}",
                c.pid, c.vms, c.stat, c.kvm, v, c.vtrace_source
            );
        }
    }
}

/// The hottest sampled stacks: their leaf frames and owner.
fn samples(o: &mut String, rec: &Recording, top: usize) {
    if rec.rows::<crate::layers::sample::SampleRow>().is_empty() {
        return;
    }
    let total: u64 = rec
        .rows::<crate::layers::sample::SampleRow>()
        .iter()
        .map(|s| s.count)
        .sum();
    let _ = writeln!(
        o,
        "\nSampled stacks ({} Hz, {total} samples; `report --format folded` for a flamegraph)\n  {:>8}{:>7}  {:<16}{:<10}leaf frames",
        rec.meta.overhead.sample_hz, "samples", "%", "comm", "role"
    );
    let mut rows: Vec<_> = rec.rows::<crate::layers::sample::SampleRow>().iter().collect();
    rows.sort_by_key(|s| std::cmp::Reverse(s.count));
    for s in rows.iter().take(top) {
        let leaf: Vec<&str> = s.stack.rsplit(';').take(3).collect();
        let _ = writeln!(
            o,
            "  {:>8}{:>7}  {:<16}{:<10}{}",
            s.count,
            pct(s.count, total),
            s.comm,
            s.role,
            leaf.join(" <- ")
        );
    }
}
