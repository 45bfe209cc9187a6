//! The run-queue layer's report section: the threads that waited longest
//! runnable, per role, and the distribution of the waits.

use std::collections::BTreeMap;

use super::{RunqHistRow, RunqRow};
use crate::{
    analysis::histogram::Histogram,
    recording::Recording,
    report_model::{Figure, FigureKind, Section, Table, col, left, log2_bucket, us},
};

pub fn section(rec: &Recording, top: usize) -> Section {
    let mut s = Section::new("runq", "Run-queue delay");
    let rows = rec.rows::<RunqRow>();
    if rows.is_empty() {
        return s;
    }
    let hists = rec.rows::<RunqHistRow>();
    let hist_of = |tid: u32| {
        let mut h = Histogram::default();
        for b in hists.iter().filter(|b| b.tid == tid) {
            h.add(b.lo_ns, b.hi_ns, b.count);
        }
        h
    };

    let mut by_delay: Vec<&RunqRow> = rows.iter().collect();
    by_delay.sort_by_key(|r| std::cmp::Reverse(r.delay_ns));
    let mut t = Table::new(
        "Threads that waited runnable the longest (wakeup or preemption -> switch-in)",
        vec![
            left("comm", 16),
            col("tid", 8),
            left("platform/role", 18).gap(2),
            col("waits", 9),
            col("total(ms)", 10),
            col("mean(us)", 9),
            col("p50(us)", 9),
            col("p99(us)", 9),
            col("max(us)", 9),
            left("longest: who ran before it got in", 0).gap(2),
        ],
    );
    for r in by_delay.iter().take(top) {
        let h = hist_of(r.tid).clamp(r.min_ns, r.max_ns);
        t.row(vec![
            r.owner.comm.clone(),
            r.tid.to_string(),
            format!("{}/{}", r.owner.platform, r.owner.role),
            r.waits.to_string(),
            format!("{:.2}", r.delay_ns as f64 / 1e6),
            us(r.delay_ns / r.waits.max(1)),
            us(h.quantile(0.5)),
            us(h.quantile(0.99)),
            us(r.max_ns),
            format!("{} ({}) on CPU {}", r.worst_prev_comm, r.worst_prev_tid, r.worst_cpu),
        ]);
    }
    s.table(t);

    // Per platform role: the comparison across platforms (`compare`, `explain`).
    let mut roles: BTreeMap<(String, String), (u64, u64)> = BTreeMap::new();
    for r in rows {
        let e = roles
            .entry((r.owner.platform.clone(), r.owner.role.clone()))
            .or_default();
        e.0 += r.waits;
        e.1 += r.delay_ns;
    }
    let mut t = Table::new(
        "Per platform and role",
        vec![
            left("platform", 12),
            left("role", 12),
            col("waits", 10),
            col("total(ms)", 10),
            col("mean(us)", 9),
        ],
    );
    for ((platform, role), (waits, ns)) in &roles {
        t.row(vec![
            platform.clone(),
            role.clone(),
            waits.to_string(),
            format!("{:.2}", *ns as f64 / 1e6),
            us(ns / waits.max(&1)),
        ]);
        let dims = [("platform", platform.as_str()), ("role", role.as_str())];
        s.metric("runq_delay_ns", *ns as f64, "ns", &dims);
        s.metric("runq_waits", *waits as f64, "waits", &dims);
    }
    s.table(t);

    // Every wait of the busiest role, in power-of-two buckets.
    if let Some(((platform, role), _)) = roles.iter().max_by_key(|(_, (_, ns))| *ns) {
        let tids: Vec<u32> = rows
            .iter()
            .filter(|r| &r.owner.platform == platform && &r.owner.role == role)
            .map(|r| r.tid)
            .collect();
        let mut buckets: BTreeMap<u32, u64> = BTreeMap::new();
        for b in hists.iter().filter(|b| tids.contains(&b.tid)) {
            *buckets.entry(log2_bucket(b.lo_ns)).or_default() += b.count;
        }
        if let Some(kind) = FigureKind::latency_log2(&buckets) {
            s.figure(Figure {
                title: format!("Run-queue waits of {platform}/{role}"),
                value_label: "waits".into(),
                kind,
            });
        }
    }
    s.json("runq", rows);
    s
}
