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
        s.figure(Figure {
            title: "Round-trip time by platform (bars: p50; whiskers: p50..p99)".into(),
            value_label: "round-trip time (µs)".into(),
            kind: by_platform(m, labels, cells, |c| c.rtt_us.map(|r| (r.p50, r.p50, r.p99))),
        });
    }
}
