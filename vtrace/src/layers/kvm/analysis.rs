//! KVM exits in the style of `perf kvm stat`: per reason, per vCPU thread
//! and per platform instance, count, share of exits and of time, min / mean /
//! max / stddev and p50 / p95 / p99 (from the in-kernel histograms), and
//! KVM's own statistics beside vtrace's counts.

use std::collections::BTreeMap;

use serde::Serialize;

use super::tables::{KvmLatencyHistRow, KvmLatencyRow};
use crate::{analysis::histogram::Histogram, recording::Recording};

/// One reason's latency over some scope (a thread, an instance, everything).
#[derive(Clone, Debug, Default, Serialize)]
pub struct ReasonStats {
    /// "exit", "userspace_exit" or "halt".
    pub kind: String,
    pub reason: String,
    pub isa: String,
    /// The vCPU thread (0 when summed over threads).
    pub tid: u32,
    pub comm: String,
    pub platform: String,
    pub instance: String,
    pub role: String,
    pub count: u64,
    /// Share of this scope's events of the same kind, and of their time.
    pub pct_count: f64,
    pub pct_time: f64,
    pub sum_ns: u64,
    pub min_ns: u64,
    pub mean_ns: u64,
    pub max_ns: u64,
    pub stddev_ns: u64,
    pub p50_ns: u64,
    pub p95_ns: u64,
    pub p99_ns: u64,
}

/// Summarises `rows` (same kind and reason) with their histogram buckets.
fn stats(rows: &[&KvmLatencyRow], hists: &[KvmLatencyHistRow]) -> ReasonStats {
    let first = rows[0];
    let count: u64 = rows.iter().map(|r| r.count).sum();
    let sum_ns: u64 = rows.iter().map(|r| r.sum_ns).sum();
    let mut b = Histogram::default();
    for h in hists
        .iter()
        .filter(|h| h.kind == first.kind && h.reason_name == first.reason_name && rows.iter().any(|r| r.tid == h.tid))
    {
        b.add(h.lo_ns, h.hi_ns, h.count);
    }
    // Buckets are 12.5 % wide: trimmed to the exact extremes, quantiles and
    // the spread stay within what was seen.
    let (min_ns, max_ns) = (
        rows.iter().map(|r| r.min_ns).min().unwrap_or(0),
        rows.iter().map(|r| r.max_ns).max().unwrap_or(0),
    );
    let b = b.clamp(min_ns, max_ns);
    let mean = sum_ns as f64 / count.max(1) as f64;
    let one = |f: fn(&KvmLatencyRow) -> &String| {
        if rows.iter().all(|r| f(r) == f(first)) {
            f(first).clone()
        } else {
            String::new()
        }
    };
    ReasonStats {
        kind: first.kind.clone(),
        reason: first.reason_name.clone(),
        isa: first.isa.clone(),
        tid: if rows.iter().all(|r| r.tid == first.tid) {
            first.tid
        } else {
            0
        },
        comm: one(|r| &r.owner.comm),
        platform: one(|r| &r.owner.platform),
        instance: one(|r| &r.owner.instance),
        role: one(|r| &r.owner.role),
        count,
        sum_ns,
        min_ns,
        mean_ns: mean as u64,
        max_ns,
        stddev_ns: b.stddev(mean),
        p50_ns: b.quantile(0.50).clamp(min_ns, max_ns),
        p95_ns: b.quantile(0.95).clamp(min_ns, max_ns),
        p99_ns: b.quantile(0.99).clamp(min_ns, max_ns),
        ..Default::default()
    }
}

/// Groups `rows` by `scope` then reason, sorted by count, with shares
/// within each (scope, kind).
fn group_by<K: Ord + Clone>(rec: &Recording, scope: impl Fn(&KvmLatencyRow) -> K) -> Vec<ReasonStats> {
    let mut groups: BTreeMap<(K, String, String), Vec<&KvmLatencyRow>> = BTreeMap::new();
    for r in rec.rows::<crate::layers::kvm::KvmLatencyRow>() {
        groups
            .entry((scope(r), r.kind.clone(), r.reason_name.clone()))
            .or_default()
            .push(r);
    }
    let mut totals: BTreeMap<(K, String), (u64, u64)> = BTreeMap::new();
    for ((s, kind, _), rows) in &groups {
        let t = totals.entry((s.clone(), kind.clone())).or_default();
        t.0 += rows.iter().map(|r| r.count).sum::<u64>();
        t.1 += rows.iter().map(|r| r.sum_ns).sum::<u64>();
    }
    let mut out: Vec<(K, ReasonStats)> = groups
        .iter()
        .map(|((s, kind, _), rows)| {
            let mut st = stats(rows, rec.rows::<crate::layers::kvm::KvmLatencyHistRow>());
            let (c, t) = totals[&(s.clone(), kind.clone())];
            st.pct_count = st.count as f64 * 100.0 / c.max(1) as f64;
            st.pct_time = st.sum_ns as f64 * 100.0 / t.max(1) as f64;
            (s.clone(), st)
        })
        .collect();
    out.sort_by(|a, b| (&a.0, &a.1.kind, b.1.count).cmp(&(&b.0, &b.1.kind, a.1.count)));
    out.into_iter().map(|(_, s)| s).collect()
}

/// One KVM statistic of one VMM process (summed over its VMs and vCPUs)
/// beside what vtrace counted for that process's threads.
#[derive(Clone, Debug, Serialize)]
pub struct StatCheck {
    pub pid: u32,
    pub vms: usize,
    pub stat: String,
    /// KVM's own count over the recording (debugfs).
    pub kvm: u64,
    /// vtrace's count of the matching events, when it has one.
    pub vtrace: Option<u64>,
    pub vtrace_source: &'static str,
    /// When KVM's count was last read, ns since the start: the recording's
    /// end, or earlier when the VM exited first (its debugfs directory
    /// went with it; vtrace counted on to the end).
    pub kvm_read_ns: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct KvmSummary {
    /// Per vCPU thread and reason.
    pub by_thread: Vec<ReasonStats>,
    /// Per platform instance (or process on the host) and reason.
    pub by_instance: Vec<ReasonStats>,
    /// All vCPUs together, per reason.
    pub total: Vec<ReasonStats>,
    pub stats_check: Vec<StatCheck>,
}

impl KvmSummary {
    pub fn of(rec: &Recording) -> Self {
        KvmSummary {
            by_thread: group_by(rec, |r| r.tid),
            by_instance: group_by(rec, |r| {
                if r.owner.instance.is_empty() {
                    format!("{} (pid {})", r.owner.platform, r.owner.pid)
                } else {
                    r.owner.instance.clone()
                }
            }),
            total: group_by(rec, |_| ()),
            stats_check: stats_check(rec),
        }
    }
}

fn stats_check(rec: &Recording) -> Vec<StatCheck> {
    let latency = |pid: u32, kind: &str, reason: Option<&str>| -> u64 {
        rec.rows::<crate::layers::kvm::KvmLatencyRow>()
            .iter()
            .filter(|r| r.owner.pid == pid && r.kind == kind && reason.is_none_or(|x| r.reason_name == x))
            .map(|r| r.count)
            .sum()
    };
    let events = |pid: u32, kind: &str, op: Option<&str>| -> u64 {
        rec.rows::<crate::layers::kvm::KvmEventRow>()
            .iter()
            .filter(|e| e.owner.pid == pid && e.kind == kind && op.is_none_or(|x| e.op == x))
            .map(|e| e.count)
            .sum()
    };
    // (VMs, KVM's count, when last read, vtrace's count read beside KVM's)
    let mut per_pid: BTreeMap<(u32, &str), (usize, u64, u64, u64)> = BTreeMap::new();
    for s in rec.rows::<crate::layers::kvm::KvmStatRow>() {
        let e = per_pid.entry((s.pid, s.stat.as_str())).or_default();
        e.0 += 1;
        e.1 += s.end.saturating_sub(s.start);
        e.2 = e.2.max(s.read_ns);
        e.3 += s.vtrace_end.saturating_sub(s.vtrace_start);
    }
    per_pid
        .into_iter()
        .map(|((pid, stat), (vms, kvm, kvm_read_ns, paired))| {
            let (vtrace, source) = match stat {
                // Read beside KVM's own (recordings before schema 2 of the
                // table: the whole run's events).
                "exits" if paired > 0 => (Some(paired), "kvm_exit + fastpath re-entries, read with KVM's"),
                "exits" => (
                    Some(events(pid, "exit", None) + events(pid, "fastpath_reentry", None)),
                    "kvm_exit + fastpath re-entries",
                ),
                "io_exits" => (Some(events(pid, "pio", None)), "kvm_pio"),
                "mmio_exits" => (
                    Some(events(pid, "userspace_exit", Some("MMIO"))),
                    "user-space MMIO exits",
                ),
                "halt_exits" => (Some(events(pid, "userspace_exit", Some("HLT"))), "user-space HLT exits"),
                "halt_wakeup" => (Some(latency(pid, "halt", None)), "kvm_vcpu_wakeup"),
                // Version 2 of the table pairs exits only (its other rows repeat them).
                "irq_injections" if paired > 0 && rec.meta.tables.get("kvm_stats").is_some_and(|&v| v >= 3) => {
                    (Some(paired), "kvm_inj_virq, read with KVM's")
                }
                "irq_injections" => (Some(events(pid, "inj_virq", None)), "kvm_inj_virq"),
                "signal_exits" => (
                    Some(events(pid, "userspace_exit", Some("INTERRUPTED"))),
                    "user-space exits by signal",
                ),
                _ => (None, ""),
            };
            StatCheck {
                pid,
                vms,
                stat: stat.to_string(),
                kvm,
                vtrace,
                vtrace_source: source,
                kvm_read_ns,
            }
        })
        .collect()
}
