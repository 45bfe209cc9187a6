//! The CPU layer's report section: time per state, role, process, thread,
//! softirq vector, IRQ and CPU.

use serde_json::json;
use vtrace_common::state;

use super::{
    CpuRow,
    analysis::{CpuBreakdown, StateTimes},
};
use crate::{
    recording::Recording,
    report_model::{Column, Figure, FigureKind, LineSeries, Section, Series, Table, col, left, pct, secs},
};

/// The seven state columns every CPU table ends with.
fn state_columns() -> Vec<Column> {
    [
        "user(s)",
        "system(s)",
        "softirq(s)",
        "hardirq(s)",
        "guest(s)",
        "total(s)",
        "%capacity",
    ]
    .into_iter()
    .map(|n| col(n, 11))
    .collect()
}

fn state_cells(t: &StateTimes, capacity: u64) -> Vec<String> {
    vec![
        secs(t.user_ns),
        secs(t.system_ns),
        secs(t.softirq_ns),
        secs(t.hardirq_ns),
        secs(t.guest_ns),
        secs(t.busy_ns()),
        pct(t.busy_ns(), capacity),
    ]
}

pub fn section(rec: &Recording, top: usize) -> Section {
    let cpu = CpuBreakdown::of(rec);
    let cap = cpu.capacity_ns();
    let mut s = Section::new("cpu", "CPU time");

    let t = &cpu.total;
    let mut lines = vec!["CPU time, all CPUs (percent of wall x CPUs)".to_string()];
    for (name, ns) in t.named() {
        lines.push(format!("  {name:<8}{:>10} s {:>7}", secs(ns), pct(ns, cap)));
    }
    let untracked = cap.saturating_sub(t.busy_ns() + t.idle_ns);
    lines.push(format!(
        "  {:<8}{:>10} s {:>7}  (before each CPU's first event)",
        "unseen",
        secs(untracked),
        pct(untracked, cap)
    ));
    s.lines(lines);

    let mut roles = Table::new(
        "By platform and role",
        [left("platform", 10), left("role", 10), col("threads", 8)]
            .into_iter()
            .chain(state_columns())
            .collect(),
    );
    for g in &cpu.by_role {
        let mut cells = vec![g.platform.clone(), g.role.clone(), g.threads.to_string()];
        cells.extend(state_cells(&g.times, cap));
        roles.row(cells);
        for (i, name) in state::NAMES.iter().enumerate().take(state::IDLE) {
            let ns = [
                g.times.user_ns,
                g.times.system_ns,
                g.times.softirq_ns,
                g.times.hardirq_ns,
                g.times.guest_ns,
            ][i];
            s.metric(
                "cpu_ns",
                ns as f64,
                "ns",
                &[("platform", &g.platform), ("role", &g.role), ("state", name)],
            );
        }
    }
    s.table(roles);
    s.figure(roles_figure(&cpu));
    if let Some(f) = over_time_figure(rec) {
        s.figure(f);
    }

    let mut procs = Table::new(
        "Top processes",
        [
            col("pid", 8),
            left("comm", 16).gap(1),
            left("role", 8),
            col("threads", 8),
        ]
        .into_iter()
        .chain(state_columns())
        .collect(),
    );
    for g in cpu.by_process.iter().filter(|g| g.total_ns > 0).take(top) {
        let mut cells = vec![
            g.pid.unwrap_or(0).to_string(),
            g.comm.clone(),
            g.role.clone(),
            g.threads.to_string(),
        ];
        cells.extend(state_cells(&g.times, cap));
        procs.row(cells);
    }
    s.table(procs);

    let mut threads = Table::new(
        "Top threads",
        [
            col("pid", 8),
            col("tid", 8).gap(1),
            left("comm", 16).gap(1),
            left("role", 8),
        ]
        .into_iter()
        .chain(state_columns())
        .collect(),
    );
    for th in cpu
        .threads
        .iter()
        .filter(|t| StateTimes::of_thread(t).busy_ns() > 0)
        .take(top)
    {
        // The vCPU's index where KVM told it.
        let role = match th.vcpu.get() {
            Some(i) => format!("{} {i}", th.owner.role),
            None => th.owner.role.clone(),
        };
        let mut cells = vec![
            th.owner.pid.to_string(),
            th.tid.to_string(),
            th.owner.comm.clone(),
            role,
        ];
        cells.extend(state_cells(&StateTimes::of_thread(th), cap));
        threads.row(cells);
    }
    s.table(threads);
    // Totals follow each thread's scheduler clock slice by slice; where no
    // clock bounded a slice, say by how much a total may be off.
    let mut unbounded: Vec<_> = cpu.threads.iter().filter(|t| t.unbounded_ns > 0).collect();
    if !unbounded.is_empty() {
        unbounded.sort_by_key(|t| std::cmp::Reverse(t.unbounded_ns));
        let named: Vec<String> = unbounded
            .iter()
            .take(5)
            .map(|t| format!("{} ({}) up to {} s", t.owner.comm, t.tid, secs(t.unbounded_ns)))
            .collect();
        s.lines([format!(
            "{} thread(s) ran slices no scheduler clock bounded (their switch-in was not reported): totals may be off \
             by at most: {}{}",
            unbounded.len(),
            named.join(", "),
            if unbounded.len() > 5 { ", ..." } else { "" }
        )]);
    }

    let mut vectors = Table::new(
        "Softirq vectors (all CPUs)",
        vec![
            left("vector", 10),
            col("time(s)", 12),
            col("count", 12),
            col("mean(us)", 12),
        ],
    );
    for v in &cpu.softirq_vectors {
        let mean = if v.count > 0 {
            v.ns as f64 / v.count as f64 / 1e3
        } else {
            0.0
        };
        vectors.row(vec![
            v.vector.clone(),
            secs(v.ns),
            v.count.to_string(),
            format!("{mean:.2}"),
        ]);
        s.metric("softirq_ns", v.ns as f64, "ns", &[("vector", &v.vector)]);
    }
    s.table(vectors);

    // The instance column only where a passed-through device raised some.
    let owned = cpu.hardirqs.iter().any(|i| !i.instance.is_empty());
    let mut columns = vec![
        col("irq", 5),
        left("name", 32).gap(1),
        col("time(s)", 12),
        col("count", 12),
    ];
    if owned {
        columns.push(left("instance", 16).gap(2));
    }
    let mut irqs = Table::new("Hard interrupts (all CPUs)", columns);
    for i in cpu.hardirqs.iter().take(top) {
        let mut row = vec![i.irq.to_string(), i.name.clone(), secs(i.ns), i.count.to_string()];
        if owned {
            row.push(i.instance.clone());
        }
        irqs.row(row);
    }
    s.table(irqs);

    let mut per_cpu = Table::new(
        "Per CPU",
        [col("cpu", 4)]
            .into_iter()
            .chain(state_columns())
            .chain([col("idle(s)", 11)])
            .collect(),
    );
    for c in rec.rows::<CpuRow>() {
        let mut cells = vec![c.cpu.to_string()];
        cells.extend(state_cells(&StateTimes::of_cpu(c), cpu.wall_ns));
        cells.push(secs(c.idle_ns));
        per_cpu.row(cells);
    }
    s.table(per_cpu);

    // Other layers' per-thread columns join these rows in the report
    // (`Layer::thread_columns`), not here.
    let threads_json: Vec<_> = cpu
        .threads
        .iter()
        .map(|t| {
            json!({
                "pid": t.owner.pid, "tid": t.tid, "comm": t.owner.comm, "role": t.owner.role, "platform": t.owner.platform, "instance": t.owner.instance,
                "selected": t.selected, "kthread": t.kthread, "exited": t.exited,
                "user_ns": t.user_ns, "system_ns": t.system_ns, "softirq_ns": t.softirq_ns,
                "hardirq_ns": t.hardirq_ns, "guest_ns": t.guest_ns, "idle_ns": t.idle_ns,
                "total_ns": StateTimes::of_thread(t).busy_ns(),
                "guest_source": t.guest_source, "switches": t.switches, "unbounded_ns": t.unbounded_ns,
                "vcpu": t.vcpu.get(),
            })
        })
        .collect();
    s.json("states", cpu.total);
    s.json("roles", &cpu.by_role);
    s.json("processes", &cpu.by_process);
    s.json("threads", threads_json);
    s.json("per_cpu", rec.rows::<CpuRow>());
    s.json("softirq_vectors", &cpu.softirq_vectors);
    s.json("hardirqs", &cpu.hardirqs);
    s
}

/// "platform/role" (or the role alone on the host platform).
fn role_label(platform: &str, role: &str) -> String {
    if platform == "host" {
        role.to_string()
    } else {
        format!("{platform}/{role}")
    }
}

/// CPU seconds per platform and role, stacked by state.
fn roles_figure(cpu: &CpuBreakdown) -> Figure {
    let groups: Vec<_> = cpu.by_role.iter().filter(|g| g.times.busy_ns() > 0).collect();
    let series = state::NAMES[..state::IDLE]
        .iter()
        .enumerate()
        .map(|(i, name)| Series {
            name: name.to_string(),
            values: groups
                .iter()
                .map(|g| {
                    let t = &g.times;
                    [t.user_ns, t.system_ns, t.softirq_ns, t.hardirq_ns, t.guest_ns][i] as f64 / 1e9
                })
                .collect(),
        })
        .collect();
    Figure {
        title: "CPU time by platform, role and state".into(),
        value_label: "CPU time (s)".into(),
        kind: FigureKind::StackedBars {
            categories: groups.iter().map(|g| role_label(&g.platform, &g.role)).collect(),
            series,
        },
    }
}

/// CPUs kept busy per role in each interval (from the `intervals` table);
/// None with fewer than two intervals.
fn over_time_figure(rec: &Recording) -> Option<Figure> {
    use std::collections::BTreeMap;
    let index = super::ThreadIndex::new(rec.rows::<super::ThreadRow>());
    let mut busy: BTreeMap<String, BTreeMap<(u64, u64), u64>> = BTreeMap::new();
    for i in rec.rows::<super::IntervalRow>() {
        let role = index
            .interval_thread(i.tid, i.born_ns)
            .map_or_else(|| "other".into(), |t| role_label(&t.owner.platform, &t.owner.role));
        let ns = StateTimes::of_interval(i).busy_ns();
        *busy.entry(role).or_default().entry((i.start_ns, i.end_ns)).or_default() += ns;
    }
    let intervals = busy.values().map(|m| m.len()).max().unwrap_or(0);
    if intervals < 2 {
        return None;
    }
    let series = busy
        .into_iter()
        .filter(|(_, by)| by.values().any(|&ns| ns > 0))
        .map(|(name, by)| LineSeries {
            name,
            points: by
                .into_iter()
                .filter(|((start, end), _)| end > start)
                .map(|((start, end), ns)| (end as f64 / 1e9, ns as f64 / (end - start) as f64))
                .collect(),
        })
        .collect();
    Some(Figure {
        title: "CPU over time by role".into(),
        value_label: "CPUs busy".into(),
        kind: FigureKind::Lines {
            x_label: "time since recording started (s)".into(),
            series,
        },
    })
}
