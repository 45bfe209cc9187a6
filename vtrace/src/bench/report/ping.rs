//! ping against the instance: round-trip times over every reply of every
//! run (its rate is the interval it was given, so it gets no figure).

use super::{
    CellSummary, Rtt, Runs, WorkloadSection,
    sections::{by_platform, label},
};
use crate::{
    bench::Matrix,
    report::model::{Figure, Section, Table, col, left},
};

pub struct Ping;

impl WorkloadSection for Ping {
    fn heading(&self) -> (&'static str, &'static str) {
        ("bench_ping", "ping round trips")
    }

    fn throughput_figure(&self) -> bool {
        false
    }

    fn summarize(&self, runs: &Runs, summary: &mut CellSummary) {
        let mut all: Vec<f64> = runs
            .outputs
            .iter()
            .flat_map(|o| crate::workload::ops::ping_rtts_ms(o))
            .collect();
        all.sort_by(f64::total_cmp);
        let q = |p: f64| all[((all.len() - 1) as f64 * p).round() as usize] * 1e3;
        summary.rtt_us = (!all.is_empty()).then(|| Rtt {
            replies: all.len(),
            p50: q(0.5),
            p99: q(0.99),
            mean: all.iter().sum::<f64>() / all.len() as f64 * 1e3,
            max: q(1.0),
        });
    }

    fn section(&self, s: &mut Section, m: &Matrix, cells: &[&CellSummary], labels: &[String]) {
        let mut t = Table::new(
            "Round-trip time (µs) over every reply of every run",
            vec![
                left("platform", 17),
                left("parameter", 24),
                col("replies", 8),
                col("p50", 10),
                col("p99", 10),
                col("mean", 10),
                col("max", 10),
            ],
        );
        for c in cells {
            if let Some(r) = c.rtt_us {
                t.row(vec![
                    c.platform.clone(),
                    label(c),
                    r.replies.to_string(),
                    format!("{:.1}", r.p50),
                    format!("{:.1}", r.p99),
                    format!("{:.1}", r.mean),
                    format!("{:.1}", r.max),
                ]);
            }
        }
        s.table(t);
        // Where each reply's time went: the path's stages (virtio:
        // vhost-net's queue and signal; SR-IOV: the VF interrupt's
        // delivery and the vCPU's wake-up) and who waited for a CPU.
        let stages: Vec<String> = vtrace_common::path_stage::NAMES
            .iter()
            .filter(|st| cells.iter().any(|c| c.path_stage_mean_us.iter().any(|(n, _)| n == *st)))
            .map(|st| st.to_string())
            .collect();
        if !stages.is_empty() {
            let mut cols = vec![left("platform", 17), left("parameter", 24), col("rtt mean", 10)];
            cols.extend(stages.iter().map(|st| col(st.clone(), 11)));
            cols.push(left("run-queue wait per reply (µs), by role", 40).gap(2));
            let mut t = Table::new(
                "Where the replies' time went: each data path stage's mean (µs; the path layer) and the \
                 run-queue wait per reply by role (the runq layer)",
                cols,
            );
            for c in cells.iter().filter(|c| c.rtt_us.is_some()) {
                let mut row = vec![
                    c.platform.clone(),
                    label(c),
                    format!("{:.1}", c.rtt_us.map_or(0.0, |r| r.mean)),
                ];
                row.extend(stages.iter().map(|st| {
                    c.path_stage_mean_us
                        .iter()
                        .find(|(n, _)| n == st)
                        .map_or("-".to_string(), |(_, us)| format!("{us:.1}"))
                }));
                row.push(
                    c.runq_ns_per_op
                        .iter()
                        .take(3)
                        .map(|(role, ns)| format!("{role} {:.1}", ns / 1e3))
                        .collect::<Vec<_>>()
                        .join(", "),
                );
                t.row(row);
            }
            s.table(t);
        }
        s.figure(Figure {
            title: "Round-trip time by platform (bars: p50; whiskers: p50..p99)".into(),
            value_label: "round-trip time (µs)".into(),
            kind: by_platform(m, labels, cells, |c| c.rtt_us.map(|r| (r.p50, r.p50, r.p99))),
        });
    }
}
