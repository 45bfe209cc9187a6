//! `vtrace explain A B`: why B costs more (or less) than A per operation.
//! The difference in CPU time per operation is split into terms by role and
//! CPU state, ranked by size; the terms add up to the whole difference by
//! construction (every CPU ns of the recordings is in exactly one role and
//! state). Finer figures that overlap those terms (softirq vectors, KVM exit
//! reasons, packets per hop) follow as the "where", ranked likewise.

use serde_json::json;

use super::{MetricId, Subject, dims_text};
use crate::{
    platforms::ROLES_LEFT_OUT,
    report::model::{Section, Table, amount, col, left},
};

/// vtrace's own CPU and a bench's stressors are not the workload's cost: they are left out of the terms.
/// Finer differences shown per metric key.
const DETAILS_PER_KEY: usize = 3;

/// One term: the difference in one role and state.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Term {
    pub role: String,
    pub state: String,
    pub a_ns: f64,
    pub b_ns: f64,
    pub diff_ns: f64,
}

/// The terms of B - A, largest first, and the two totals.
pub fn terms(a: &Subject, b: &Subject, per_op: bool) -> (Vec<Term>, f64, f64) {
    let mut ids: Vec<&MetricId> = a
        .metrics
        .keys()
        .chain(b.metrics.keys())
        .filter(|(k, _)| k == "cpu_ns")
        .collect();
    ids.sort();
    ids.dedup();
    let dim = |id: &MetricId, name: &str| {
        id.1.iter()
            .find(|(k, _)| k == name)
            .map_or(String::new(), |(_, v)| v.clone())
    };
    let mut terms: Vec<Term> = ids
        .into_iter()
        .filter(|id| !ROLES_LEFT_OUT.contains(&dim(id, "role").as_str()))
        .map(|id| {
            let (a_ns, b_ns) = (a.get(id, per_op), b.get(id, per_op));
            Term {
                role: dim(id, "role"),
                state: dim(id, "state"),
                a_ns,
                b_ns,
                diff_ns: b_ns - a_ns,
            }
        })
        .filter(|t| t.a_ns != 0.0 || t.b_ns != 0.0)
        .collect();
    terms.sort_by(|x, y| y.diff_ns.abs().total_cmp(&x.diff_ns.abs()));
    let total_a = terms.iter().map(|t| t.a_ns).sum();
    let total_b = terms.iter().map(|t| t.b_ns).sum();
    (terms, total_a, total_b)
}

/// Whether a subject's recordings hold their guests' own path stages
/// (`record --guest`).
fn times_its_guests(s: &Subject) -> bool {
    s.metrics
        .keys()
        .any(|(k, dims)| k == "path_sum_ns" && dims.iter().any(|(d, v)| d == "dir" && v.starts_with("guest")))
}

/// The path layer's stages of A and B, pooled over each side's VMs, the
/// guests' own beside the host's: (dir, stage, mean in A, mean in B; None
/// where that side timed none), the largest difference first (a host stage
/// one side lacks counts as 0 there: that side's path has none). The
/// guests' stages only where both sides recorded their guests: one side's
/// alone would rank as the whole of it.
pub fn path_stages(a: &Subject, b: &Subject) -> Vec<(String, String, Option<f64>, Option<f64>)> {
    let both_guests = times_its_guests(a) && times_its_guests(b);
    let mean = |s: &Subject, dims: &Vec<(String, String)>| {
        let get = |key: &str| s.metrics.get(&(key.to_string(), dims.clone())).map_or(0.0, |v| v.value);
        let events = get("path_events");
        (events > 0.0).then(|| get("path_sum_ns") / events)
    };
    let mut dims: Vec<&Vec<(String, String)>> = a
        .metrics
        .keys()
        .chain(b.metrics.keys())
        .filter(|(k, dims)| {
            k == "path_sum_ns" && (both_guests || !dims.iter().any(|(d, v)| d == "dir" && v.starts_with("guest")))
        })
        .map(|(_, d)| d)
        .collect();
    dims.sort();
    dims.dedup();
    let field = |d: &Vec<(String, String)>, name: &str| {
        d.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    let mut out: Vec<(String, String, Option<f64>, Option<f64>)> = dims
        .into_iter()
        .map(|d| (field(d, "dir"), field(d, "stage"), mean(a, d), mean(b, d)))
        .collect();
    let diff = |x: &(String, String, Option<f64>, Option<f64>)| (x.3.unwrap_or(0.0) - x.2.unwrap_or(0.0)).abs();
    out.sort_by(|x, y| diff(y).total_cmp(&diff(x)));
    out
}

/// The report of `explain`: the headline, the ranked terms, the where.
pub fn explain(a: &Subject, b: &Subject, top: usize) -> Vec<Section> {
    let unit = Subject::common_unit([a, b]);
    let per_op = unit.is_some();
    let per = unit
        .as_deref()
        .map_or("per recording".to_string(), |u| format!("per {u}"));
    let (terms, total_a, total_b) = terms(a, b, per_op);
    let total = total_b - total_a;
    let mut s = Section::new("explain", "Explain");
    let mut lines = vec![
        format!("A: {} ({})", a.name, a.platform),
        format!("B: {} ({})", b.name, b.platform),
        String::new(),
        format!(
            "B spends {} CPU {per} {} A ({} against {}; vtrace's own and stressors' CPU left out)",
            time(total.abs()),
            if total >= 0.0 { "more than" } else { "less than" },
            time(total_b),
            time(total_a),
        ),
    ];
    if !per_op {
        lines.push(
            "note: not per operation: a recording does not know its work (record or report with --ops N), \
             so a faster run that did more work looks costlier"
                .into(),
        );
    }
    s.lines(lines);
    let mut t = Table::new(
        format!(
            "The difference by role and CPU state, largest first (the terms sum to {})",
            signed_time(total)
        ),
        vec![
            col("B - A", 12),
            col("share", 8),
            left("role", 10).gap(2),
            left("state", 8),
            col("A", 12),
            col("B", 12),
        ],
    );
    for term in terms.iter().filter(|t| t.diff_ns != 0.0).take(top) {
        t.row(vec![
            signed_time(term.diff_ns),
            share(term.diff_ns, total),
            term.role.clone(),
            term.state.clone(),
            time(term.a_ns),
            time(term.b_ns),
        ]);
    }
    let rest: f64 = terms
        .iter()
        .filter(|t| t.diff_ns != 0.0)
        .skip(top)
        .map(|t| t.diff_ns)
        .sum();
    if rest != 0.0 {
        t.row(vec![
            signed_time(rest),
            share(rest, total),
            "the rest".into(),
            String::new(),
            String::new(),
            String::new(),
        ]);
    }
    s.table(t);

    // The where: finer metrics that overlap the terms, largest differences first.
    let mut details = Vec::new();
    let mut keys: Vec<&String> = Vec::new();
    for key in a.keys.iter().chain(&b.keys) {
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    let mut w = Table::new(
        format!("Where, in finer detail ({per}; these overlap the terms above)"),
        vec![col("B - A", 14), left("what", 60).gap(2), col("A", 16), col("B", 16)],
    );
    for key in keys.into_iter().filter(|k| *k != "cpu_ns" && *k != "bpf_run_ns") {
        let mut ids: Vec<&MetricId> = a
            .metrics
            .keys()
            .chain(b.metrics.keys())
            .filter(|(k, _)| k == key)
            .collect();
        ids.sort();
        ids.dedup();
        ids.retain(|id| {
            a.metrics
                .get(*id)
                .or(b.metrics.get(*id))
                .is_some_and(|v| v.unit != "fraction")
        });
        ids.sort_by(|x, y| {
            let d = |id: &MetricId| (b.get(id, per_op) - a.get(id, per_op)).abs();
            d(y).total_cmp(&d(x))
        });
        for id in ids.into_iter().take(DETAILS_PER_KEY) {
            let unit = a.metrics.get(id).or(b.metrics.get(id)).map_or("", |v| v.unit);
            let (va, vb) = (a.get(id, per_op), b.get(id, per_op));
            if va == vb {
                continue;
            }
            let show = |v: f64| {
                if unit == "ns" {
                    time(v)
                } else {
                    format!("{} {unit}", amount(v))
                }
            };
            let diff = if unit == "ns" {
                signed_time(vb - va)
            } else {
                format!("{}{} {unit}", if vb >= va { "+" } else { "-" }, amount((vb - va).abs()))
            };
            w.row(vec![diff, format!("{key} {}", dims_text(id)), show(va), show(vb)]);
            details.push(
                json!({"key": key, "dims": id.1.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
                                "unit": unit, "a": va, "b": vb, "diff": vb - va}),
            );
        }
    }
    if !w.rows.is_empty() {
        s.table(w);
    }
    let path = path_stages(a, b);
    if !path.is_empty() {
        let mut t = Table::new(
            "The virtio path's latency by stage, the guests' own (guest_*) beside the host's (mean per \
             event; largest difference first; -: a stage that side did not time, 0 in its path; a host \
             direction's stages sum to its path)",
            vec![
                col("B - A", 14),
                left("dir", 4).gap(2),
                left("stage", 14),
                col("A", 14),
                col("B", 14),
            ],
        );
        let shown = |m: &Option<f64>| m.map_or("-".to_string(), time);
        for (dir, stage, ma, mb) in &path {
            let d = mb.unwrap_or(0.0) - ma.unwrap_or(0.0);
            t.row(vec![signed_time(d), dir.clone(), stage.clone(), shown(ma), shown(mb)]);
        }
        for dir in ["rx", "tx"] {
            let (ta, tb) = path
                .iter()
                .filter(|p| p.0 == dir)
                .fold((0.0, 0.0), |(x, y), p| (x + p.2.unwrap_or(0.0), y + p.3.unwrap_or(0.0)));
            if ta + tb > 0.0 {
                t.row(vec![
                    signed_time(tb - ta),
                    dir.into(),
                    "(path)".into(),
                    time(ta),
                    time(tb),
                ]);
            }
        }
        s.table(t);
    }
    if times_its_guests(a) != times_its_guests(b) {
        s.lines(vec![format!(
            "guest stages: only {} recorded its guests' (record --guest): not ranked",
            if times_its_guests(a) { "A" } else { "B" }
        )]);
    }
    s.json(
        "explain",
        json!({
            "a": a, "b": b, "per_op_unit": unit,
            "total_a_ns": total_a, "total_b_ns": total_b, "total_diff_ns": total,
            "left_out_roles": ROLES_LEFT_OUT,
            "terms": terms, "details": details,
            "path": path.iter().map(|(dir, stage, a, b)| json!({
                "dir": dir, "stage": stage, "a_ns": a, "b_ns": b,
                "diff_ns": b.unwrap_or(0.0) - a.unwrap_or(0.0),
            })).collect::<Vec<_>>(),
        }),
    );
    vec![s]
}

fn share(part: f64, total: f64) -> String {
    if total == 0.0 {
        "-".into()
    } else {
        format!("{:.1}%", part * 100.0 / total)
    }
}

/// ns, µs, ms or s, three significant figures or so.
pub fn time(ns: f64) -> String {
    let a = ns.abs();
    if a < 1e3 {
        format!("{ns:.0} ns")
    } else if a < 1e6 {
        format!("{:.2} µs", ns / 1e3)
    } else if a < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

fn signed_time(ns: f64) -> String {
    if ns.abs() < 0.5 {
        "0 ns".into()
    } else if ns < 0.0 {
        format!("-{}", time(-ns))
    } else {
        format!("+{}", time(ns))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::{compare::Value, workload::ops::Operations};

    fn id(key: &str, role: &str, state: &str) -> MetricId {
        (
            key.into(),
            vec![("role".into(), role.into()), ("state".into(), state.into())],
        )
    }

    /// A subject of `ops` requests per recording whose metrics are `(key,
    /// role, state, ns per recording)`; per request when `ops` > 0.
    fn subject(name: &str, ops: f64, metrics: &[(&str, &str, &str, f64)]) -> Subject {
        Subject {
            name: name.into(),
            platform: "host".into(),
            recordings: 1,
            ops: (ops > 0.0).then(|| Operations {
                count: ops,
                unit: "request".into(),
                source: "--ops".into(),
                per_second: None,
                failed: None,
            }),
            metrics: metrics
                .iter()
                .map(|&(key, role, state, ns)| {
                    (
                        id(key, role, state),
                        Value {
                            unit: "ns",
                            value: ns,
                            per_op: (ops > 0.0).then_some(ns / ops),
                        },
                    )
                })
                .collect::<BTreeMap<_, _>>(),
            keys: vec!["cpu_ns".into()],
        }
    }

    fn a() -> Subject {
        subject(
            "a",
            100.0,
            &[
                ("cpu_ns", "app", "user", 4000.0),
                ("cpu_ns", "app", "system", 2000.0),
                ("cpu_ns", "vmm", "system", 800.0),
                ("cpu_ns", "kernel", "softirq", 0.0),
                ("cpu_ns", "vtrace", "system", 9000.0),
                ("cpu_ns", "stress", "user", 9000.0),
                ("softirq_ns", "app", "NET_RX", 500.0),
            ],
        )
    }

    fn b() -> Subject {
        subject(
            "b",
            200.0,
            &[
                ("cpu_ns", "app", "user", 8400.0),
                ("cpu_ns", "app", "system", 2000.0),
                ("cpu_ns", "vcpu", "guest", 1200.0),
                ("cpu_ns", "kernel", "softirq", 0.0),
                ("cpu_ns", "vtrace", "system", 100.0),
                ("softirq_ns", "app", "NET_RX", 9000.0),
            ],
        )
    }

    fn names(terms: &[Term]) -> Vec<(String, String, f64)> {
        terms
            .iter()
            .map(|t| (t.role.clone(), t.state.clone(), t.diff_ns))
            .collect()
    }

    #[test]
    fn terms_sum_to_the_difference_per_operation() {
        let (terms, total_a, total_b) = terms(&a(), &b(), true);
        // Per request: A 40 + 20 + 8; B 42 + 10 + 6 (vtrace and stressors left out).
        assert_eq!((total_a, total_b), (68.0, 58.0));
        assert_eq!(terms.iter().map(|t| t.diff_ns).sum::<f64>(), total_b - total_a);
        for t in &terms {
            assert_eq!(t.diff_ns, t.b_ns - t.a_ns);
        }
        // A role and state on one side only is a term, zero on the other.
        let vmm = terms.iter().find(|t| t.role == "vmm").unwrap();
        assert_eq!((vmm.a_ns, vmm.b_ns), (8.0, 0.0));
    }

    #[test]
    fn terms_leave_out_vtrace_stressors_other_keys_and_zeros() {
        let (terms, ..) = terms(&a(), &b(), true);
        for t in &terms {
            assert!(!ROLES_LEFT_OUT.contains(&t.role.as_str()), "{t:?}");
            assert!(t.a_ns != 0.0 || t.b_ns != 0.0, "{t:?}");
            assert_ne!(t.state, "NET_RX");
        }
        assert_eq!(terms.len(), 4);
    }

    #[test]
    fn terms_rank_by_size_either_way() {
        let (terms, ..) = terms(&a(), &b(), true);
        assert_eq!(
            names(&terms),
            [
                ("app".into(), "system".into(), -10.0),
                ("vmm".into(), "system".into(), -8.0),
                ("vcpu".into(), "guest".into(), 6.0),
                ("app".into(), "user".into(), 2.0),
            ]
        );
    }

    #[test]
    fn terms_per_recording_without_operations() {
        let (terms, total_a, total_b) = terms(&a(), &b(), false);
        assert_eq!((total_a, total_b), (6800.0, 11600.0));
        assert_eq!(terms.iter().map(|t| t.diff_ns).sum::<f64>(), 4800.0);
        assert_eq!(names(&terms)[0], ("app".into(), "user".into(), 4400.0), "largest first");
    }

    #[test]
    fn explain_reports_the_terms_and_their_sum() {
        let sections = explain(&a(), &b(), 2);
        let (name, json) = &sections[0].json[0];
        assert_eq!(*name, "explain");
        assert_eq!(json["per_op_unit"], "request");
        assert_eq!(json["total_diff_ns"], -10.0);
        let diffs: Vec<f64> = json["terms"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["diff_ns"].as_f64().unwrap())
            .collect();
        assert_eq!(diffs, [-10.0, -8.0, 6.0, 2.0]);
        // Without a common unit: per recording.
        let c = subject("c", 0.0, &[("cpu_ns", "app", "user", 1.0)]);
        let json = &explain(&a(), &c, 2)[0].json[0].1;
        assert!(json["per_op_unit"].is_null());
        assert_eq!(json["total_diff_ns"], 1.0 - 6800.0);
    }

    /// A subject whose path metrics are `(dir, stage, mean ns)`, 10 events each.
    fn stages(name: &str, means: &[(&str, &str, f64)]) -> Subject {
        let mut s = subject(name, 0.0, &[]);
        for &(dir, stage, mean) in means {
            let dims = vec![
                ("dir".to_string(), dir.to_string()),
                ("stage".to_string(), stage.to_string()),
            ];
            for (key, value) in [("path_sum_ns", mean * 10.0), ("path_events", 10.0)] {
                s.metrics.insert(
                    (key.into(), dims.clone()),
                    Value {
                        unit: "ns",
                        value,
                        per_op: None,
                    },
                );
            }
        }
        s
    }

    #[test]
    fn the_guests_stages_rank_beside_the_hosts_where_both_sides_recorded_their_guests() {
        let host = [("rx", "rx_entry", 100.0), ("tx", "tx_kick", 500.0)];
        let a = stages("a", &[&host[..], &[("guest_tx", "guest_tx_kick", 40.0)]].concat());
        let b = stages(
            "b",
            &[
                ("rx", "rx_entry", 100.0),
                ("tx", "tx_kick", 600.0),
                ("guest_tx", "guest_tx_kick", 340.0),
            ],
        );
        let ranked: Vec<(String, f64)> = path_stages(&a, &b)
            .into_iter()
            .map(|(_, stage, ma, mb)| (stage, mb.unwrap() - ma.unwrap()))
            .collect();
        assert_eq!(
            ranked,
            [
                ("guest_tx_kick".to_string(), 300.0),
                ("tx_kick".to_string(), 100.0),
                ("rx_entry".to_string(), 0.0)
            ]
        );
        // One side without its guest: the guest's stages are left out (and
        // said to be), not ranked as the whole of them.
        let c = stages("c", &host);
        let stages_of =
            |x: &Subject, y: &Subject| -> Vec<String> { path_stages(x, y).into_iter().map(|p| p.1).collect() };
        assert_eq!(stages_of(&a, &c), ["rx_entry", "tx_kick"]);
        assert_eq!(stages_of(&c, &b), ["tx_kick", "rx_entry"]);
        let text = crate::report::render_sections(&explain(&c, &b, 5), crate::report::Format::Text, "x");
        assert!(text.contains("only B recorded its guests'"), "{text}");
    }
}
