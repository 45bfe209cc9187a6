//! The KVM layer's report section: exits the way `perf kvm stat` shows them,
//! the user-space leg, port/MMIO/interrupt events, KVM's own statistics.

use serde_json::{Value, json};

use super::{
    KvmEventRow, KvmLatencyHistRow, KvmLatencyRow,
    analysis::{KvmSummary, ReasonStats},
};
use crate::{
    recording::Recording,
    report_model::{Column, Section, Table, col, left, us},
};

fn reason_columns() -> Vec<Column> {
    vec![
        left("vcpu thread / scope", 28),
        left("reason", 20),
        col("count", 9),
        col("%count", 8),
        col("%time", 8),
        col("min(us)", 10),
        col("mean(us)", 10),
        col("max(us)", 10),
        col("stddev", 9),
        col("p50(us)", 10),
        col("p95(us)", 10),
        col("p99(us)", 10),
    ]
}

fn reason_row(who: String, s: &ReasonStats) -> Vec<String> {
    vec![
        who,
        s.reason.clone(),
        s.count.to_string(),
        format!("{:.1}", s.pct_count),
        format!("{:.1}", s.pct_time),
        us(s.min_ns),
        us(s.mean_ns),
        us(s.max_ns),
        us(s.stddev_ns),
        us(s.p50_ns),
        us(s.p95_ns),
        us(s.p99_ns),
    ]
}

pub fn section(rec: &Recording, top: usize) -> Section {
    let mut s = Section::new("kvm", "KVM exits");
    let k = KvmSummary::of(rec);
    if !rec.rows::<KvmLatencyRow>().is_empty() || !rec.rows::<KvmEventRow>().is_empty() {
        text(&mut s, rec, &k, top);
    }
    if let Some(f) = reasons_figure(&k, top) {
        s.figure(f);
    }
    for f in latency_figures(rec) {
        s.figure(f);
    }
    for r in &k.total {
        s.metric(
            "kvm_exits",
            r.count as f64,
            "exits",
            &[("kind", &r.kind), ("reason", &r.reason)],
        );
        s.metric(
            "kvm_exit_ns",
            r.sum_ns as f64,
            "ns",
            &[("kind", &r.kind), ("reason", &r.reason)],
        );
    }
    s.json("kvm", json_value(rec, &k));
    s
}

fn text(s: &mut Section, rec: &Recording, k: &KvmSummary, top: usize) {
    let kinds = [
        ("exit", "KVM exits (kvm_exit -> kvm_entry)"),
        (
            "userspace_exit",
            "User-space exits: VMM handling time (kvm_userspace_exit -> next ioctl(KVM_RUN))",
        ),
        ("halt", "Halts (kvm_vcpu_wakeup: time halted)"),
    ];
    for (kind, title) in kinds {
        let threads: Vec<&ReasonStats> = k.by_thread.iter().filter(|s| s.kind == kind).collect();
        if threads.is_empty() {
            continue;
        }
        let mut t = Table::new(title, reason_columns());
        for r in threads.iter().take(top) {
            t.row(reason_row(format!("{} {} ({})", r.tid, r.comm, r.role), r));
        }
        let instances: Vec<&ReasonStats> = k.by_instance.iter().filter(|s| s.kind == kind).collect();
        if instances.len() > threads.len() || threads.iter().any(|t| t.instance.is_empty()) {
            for r in k.total.iter().filter(|s| s.kind == kind) {
                t.row(reason_row("all vCPUs".into(), r));
            }
        }
        for r in instances.iter().filter(|s| !s.instance.is_empty()) {
            t.row(reason_row(r.instance.clone(), r));
        }
        s.table(t);
    }
    if !rec.rows::<KvmEventRow>().is_empty() {
        let mut t = Table::new(
            "KVM port, MMIO and interrupt events",
            vec![
                left("tid", 10),
                left("comm", 18),
                left("kind", 16),
                col("addr", 14),
                left("op", 18).gap(1),
                col("size", 6),
                col("count", 10),
                col("bytes", 12),
                left("device", 0).gap(2),
            ],
        );
        let mut events: Vec<_> = rec.rows::<KvmEventRow>().iter().collect();
        events.sort_by_key(|e| std::cmp::Reverse(e.count));
        for e in events.iter().take(top.max(20)) {
            t.row(vec![
                e.tid.to_string(),
                e.owner.comm.clone(),
                e.kind.clone(),
                format!("{:#x}", e.addr),
                e.op.clone(),
                e.size.to_string(),
                e.count.to_string(),
                e.bytes.to_string(),
                e.device.clone(),
            ]);
        }
        s.table(t);
    }
    if !k.stats_check.is_empty() {
        let mut t = Table::new(
            "KVM's own statistics (debugfs) beside vtrace's events",
            vec![
                left("pid", 10),
                col("vms", 6),
                left("stat", 18).gap(2),
                col("kvm", 12),
                col("vtrace", 12),
                col("kvm read at", 12),
                left("vtrace source", 0).gap(2),
            ],
        );
        let wall_s = rec.meta.wall_ns as f64 / 1e9;
        for c in &k.stats_check {
            t.row(vec![
                c.pid.to_string(),
                c.vms.to_string(),
                c.stat.clone(),
                c.kvm.to_string(),
                c.vtrace.map_or("-".to_string(), |v| v.to_string()),
                format!("{:.1} s", c.kvm_read_ns as f64 / 1e9),
                c.vtrace_source.to_string(),
            ]);
        }
        s.table(t);
        // A VM that exited took its debugfs directory with it: KVM's count
        // ends at its last reading (one interval or less before it exited).
        if let Some(c) = k
            .stats_check
            .iter()
            .filter(|c| (c.kvm_read_ns as f64 / 1e9) < wall_s - 0.05)
            .min_by_key(|c| c.kvm_read_ns)
        {
            s.lines([format!(
                "KVM's counts of pid {} end at {:.1} s of {wall_s:.1} s: the VM exited and its statistics went \
                 with it; vtrace's count beside them was read at the same moments (its other tables cover the whole run)",
                c.pid,
                c.kvm_read_ns as f64 / 1e9
            )]);
        }
    }
}

fn json_value(rec: &Recording, kvm: &KvmSummary) -> Value {
    // Every exit (kvm_exit counted in KVM_EVENTS), with the exit -> entry
    // latency of those that had an entry after them (`timed`): the last
    // exit of a vCPU that stops has none.
    let exit_events: Vec<&KvmEventRow> = rec.rows::<KvmEventRow>().iter().filter(|e| e.kind == "exit").collect();
    let mut exits: Vec<Value> = kvm
        .by_thread
        .iter()
        .filter(|s| s.kind == "exit")
        .map(|s| {
            let mut v = json!(s);
            v["timed"] = json!(s.count);
            if let Some(e) = exit_events.iter().find(|e| e.tid == s.tid && e.op == s.reason) {
                v["count"] = json!(e.count);
            }
            v
        })
        .collect();
    for e in &exit_events {
        let timed = kvm
            .by_thread
            .iter()
            .any(|s| s.kind == "exit" && s.tid == e.tid && s.reason == e.op);
        if !timed {
            exits.push(
                json!({"tid": e.tid, "pid": e.owner.pid, "comm": e.owner.comm, "platform": e.owner.platform,
                              "instance": e.owner.instance, "role": e.owner.role, "kind": "exit", "reason": e.op,
                              "count": e.count, "timed": 0}),
            );
        }
    }
    let userspace_exits: Vec<Value> = rec
        .rows::<KvmEventRow>()
        .iter()
        .filter(|e| e.kind == "userspace_exit")
        .map(|e| {
            let timed = kvm
                .by_thread
                .iter()
                .find(|s| s.kind == "userspace_exit" && s.tid == e.tid && s.reason == e.op);
            json!({"tid": e.tid, "pid": e.owner.pid, "comm": e.owner.comm, "platform": e.owner.platform, "instance": e.owner.instance,
                   "role": e.owner.role, "reason": e.op, "count": e.count,
                   "timed": timed.map_or(0, |t| t.count),
                   "mean_vmm_ns": timed.map(|t| t.mean_ns), "min_vmm_ns": timed.map(|t| t.min_ns),
                   "max_vmm_ns": timed.map(|t| t.max_ns), "stddev_vmm_ns": timed.map(|t| t.stddev_ns),
                   "p50_vmm_ns": timed.map(|t| t.p50_ns), "p95_vmm_ns": timed.map(|t| t.p95_ns),
                   "p99_vmm_ns": timed.map(|t| t.p99_ns), "pct_time": timed.map(|t| t.pct_time)})
        })
        .collect();
    let events = |kind: &str, addr: &str, op: &str| -> Vec<Value> {
        rec.rows::<KvmEventRow>()
            .iter()
            .filter(|e| e.kind == kind)
            .map(|e| {
                let mut v = json!({"tid": e.tid, "pid": e.owner.pid, "comm": e.owner.comm, "role": e.owner.role, "instance": e.owner.instance,
                                   "count": e.count, "bytes": e.bytes, "size": e.size, "device": e.device});
                v[addr] = json!(e.addr);
                v[op] = json!(e.op);
                v
            })
            .collect()
    };
    let interrupts: Vec<Value> = ["set_irq", "msi", "inj_virq"]
        .iter()
        .flat_map(|k| events(k, "addr", "op"))
        .collect();
    json!({
        "exits": exits,
        "userspace_exits": userspace_exits,
        "halts": kvm.by_thread.iter().filter(|s| s.kind == "halt").collect::<Vec<_>>(),
        "by_instance": kvm.by_instance,
        "pio": events("pio", "port", "direction"),
        "mmio": events("mmio", "gpa", "type"),
        "fast_mmio": events("fast_mmio", "gpa", "type"),
        "interrupts": interrupts,
        "kvm_stats": kvm.stats_check,
    })
}

/// Time spent per exit reason, all vCPUs together, stacked by kind of exit
/// (KVM exit, user-space exit, halt); None without exits.
fn reasons_figure(k: &KvmSummary, top: usize) -> Option<crate::report_model::Figure> {
    use crate::report_model::{Figure, FigureKind, Series};
    let mut reasons: Vec<(&str, u64)> = Vec::new();
    for r in &k.total {
        match reasons.iter_mut().find(|(name, _)| *name == r.reason) {
            Some((_, ns)) => *ns += r.sum_ns,
            None => reasons.push((&r.reason, r.sum_ns)),
        }
    }
    reasons.retain(|(_, ns)| *ns > 0);
    reasons.sort_by_key(|(_, ns)| std::cmp::Reverse(*ns));
    reasons.truncate(top);
    if reasons.is_empty() {
        return None;
    }
    let mut kinds: Vec<&str> = k.total.iter().map(|r| r.kind.as_str()).collect();
    kinds.dedup();
    kinds.sort();
    kinds.dedup();
    let series = kinds
        .iter()
        .map(|kind| Series {
            name: kind.to_string(),
            values: reasons
                .iter()
                .map(|(reason, _)| {
                    k.total
                        .iter()
                        .filter(|r| r.kind == *kind && r.reason == *reason)
                        .map(|r| r.sum_ns as f64 / 1e6)
                        .sum()
                })
                .collect(),
        })
        .collect();
    Some(Figure {
        title: "Time in KVM exits by reason".into(),
        value_label: "time (ms), all vCPUs".into(),
        kind: FigureKind::StackedBars {
            categories: reasons.iter().map(|(r, _)| r.to_string()).collect(),
            series,
        },
    })
}

/// Latency distributions of the most frequent exit reasons (each kind of
/// exit apart), all vCPUs together, in power-of-two buckets.
fn latency_figures(rec: &Recording) -> Vec<crate::report_model::Figure> {
    use std::collections::BTreeMap;

    use crate::report_model::{Figure, FigureKind, log2_bucket};
    const SHOWN: usize = 3;
    let mut by_reason: BTreeMap<(&str, &str), BTreeMap<u32, u64>> = BTreeMap::new();
    for h in rec.rows::<KvmLatencyHistRow>() {
        *by_reason
            .entry((&h.kind, &h.reason_name))
            .or_default()
            .entry(log2_bucket(h.lo_ns))
            .or_default() += h.count;
    }
    let mut reasons: Vec<_> = by_reason.into_iter().collect();
    reasons.sort_by_key(|(_, b)| std::cmp::Reverse(b.values().sum::<u64>()));
    reasons
        .into_iter()
        .take(SHOWN)
        .filter_map(|((kind, reason), buckets)| {
            Some(Figure {
                title: format!("Latency of {kind} {reason}, all vCPUs"),
                value_label: "events".into(),
                kind: FigureKind::latency_log2(&buckets)?,
            })
        })
        .collect()
}
