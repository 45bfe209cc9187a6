//! `vtrace report BENCH_DIR`: the studies' figures from a bench matrix.
//! Throughput per platform and parameter (mean, min..max over the
//! repetitions), CPU per operation by role, packets and bytes per hop per
//! operation, round-trip times; each as tables, figures, JSON and CSV with
//! the same numbers, all computed from the cells' recordings.
//!
//! `summary.rs` aggregates each cell's runs, `sections.rs` draws what every
//! workload's section shows; what only one workload has (its title, its
//! parameter's label, its own figures and tables) sits in its own file
//! behind [`WorkloadSection`], as the layers do for a recording.

mod fio;
mod http;
mod iperf3;
mod modules;
mod ping;
mod redis;
mod sections;
pub mod serving;
mod study;
mod summary;

use std::path::Path;

use serde_json::json;

use self::sections::label;
pub use self::summary::{CellSummary, Hop, Rtt, Spread, Victim, summarize};
use crate::{
    bench::{Cell, Matrix, Study, Workload},
    recording::Recording,
    report::model::Section,
};

/// What a cell's runs left: what a workload's own figures are drawn from.
pub struct Runs<'a> {
    pub cell: &'a Cell,
    /// The cell's directory.
    pub dir: &'a Path,
    pub recs: &'a [Recording],
    /// Each recording's workload output.
    pub outputs: &'a [String],
}

/// One workload's part of the bench report.
pub trait WorkloadSection: Sync {
    /// Its section's id and title.
    fn heading(&self) -> (&'static str, &'static str);

    /// A cell's parameter as its figures label it.
    fn param(&self, param: &str) -> String {
        param.to_string()
    }

    /// Whether its operations per second get a figure beside their table.
    fn throughput_figure(&self) -> bool {
        true
    }

    /// Its own figures of a cell, from the cell's runs.
    fn summarize(&self, _runs: &Runs, _summary: &mut CellSummary) {}

    /// Its own tables and figures, after those every workload has.
    fn section(&self, _s: &mut Section, _m: &Matrix, _cells: &[&CellSummary], _labels: &[String]) {}
}

/// The file that draws each workload.
fn part(w: Workload) -> &'static dyn WorkloadSection {
    match w {
        Workload::Redis => &redis::Redis,
        Workload::Iperf3 => &iperf3::Iperf3,
        Workload::Ping => &ping::Ping,
        Workload::Fio => &fio::Fio,
        Workload::Modules => &modules::Modules,
        Workload::Http => &http::Http,
    }
}

/// The part of the workload named `name` (a cell summary's).
fn part_named(name: &str) -> Option<&'static dyn WorkloadSection> {
    <Workload as clap::ValueEnum>::value_variants()
        .iter()
        .find(|w| w.name() == name)
        .map(|w| part(*w))
}

/// The report's sections.
pub fn sections(root: &Path, m: &Matrix, cells: &[CellSummary]) -> Vec<Section> {
    let mut head = Section::new("bench", "Bench");
    let runs: usize = cells.iter().map(|c| c.runs).sum();
    let failed: Vec<String> = cells
        .iter()
        .flat_map(|c| {
            c.errors
                .iter()
                .map(move |e| format!("{} {}: {e}", c.platform, label(c)))
        })
        .collect();
    let mut lines = vec![
        format!(
            "bench {} | platforms {} | workloads {} | {} repetitions | {} runs recorded, {} failed",
            root.display(),
            m.platforms.join(","),
            m.workloads.iter().map(|w| w.name()).collect::<Vec<_>>().join(","),
            m.repeat,
            runs,
            failed.len()
        ),
        "Every figure: the mean over the repetitions, [min, max] where shown; per operation as each workload counts it."
            .into(),
    ];
    lines.extend(failed.iter().map(|f| format!("failed: {f}")));
    lines.extend(cells.iter().flat_map(|c| {
        c.workload_failures
            .iter()
            .map(move |f| format!("recorded with failures: {} {}: {f}", c.platform, label(c)))
    }));
    head.lines(lines);
    head.json(
        "bench",
        json!({"dir": root.display().to_string(), "matrix": m, "cells": cells}),
    );
    let mut sections = vec![head];
    if m.study == Some(Study::RedisSizes) {
        sections.push(study::section(root, m, cells));
    }
    for w in &m.workloads {
        let mine: Vec<&CellSummary> = cells.iter().filter(|c| c.workload == w.name()).collect();
        if !mine.is_empty() {
            sections.push(sections::workload_section(part(*w), m, &mine));
        }
    }
    sections
}

/// One CSV line per cell: the numbers of the tables above.
pub fn csv(cells: &[CellSummary]) -> String {
    use crate::views::quote;
    let mut out = String::from(
        "platform,workload,param,stress,runs,unit,ops_per_s_mean,ops_per_s_min,ops_per_s_max,cpu_ns_per_op,rtt_p50_us,rtt_p99_us,runq_ns_per_op\n",
    );
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v}"));
    for c in cells {
        out.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
            quote(&c.platform),
            quote(&c.workload),
            quote(&c.param),
            c.stress,
            c.runs,
            quote(c.unit.as_deref().unwrap_or_default()),
            opt(c.ops_per_s.map(|r| r.mean)),
            opt(c.ops_per_s.map(|r| r.min)),
            opt(c.ops_per_s.map(|r| r.max)),
            c.cpu_ns_per_op_total,
            opt(c.rtt_us.map(|r| r.p50)),
            opt(c.rtt_us.map(|r| r.p99)),
            opt((!c.runq_ns_per_op.is_empty()).then(|| c.runq_ns_per_op.iter().map(|(_, ns)| ns).sum())),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every workload's part is found by its name, as cell summaries name it.
    #[test]
    fn every_workload_found_by_name() {
        for w in <Workload as clap::ValueEnum>::value_variants() {
            let by_name = part_named(w.name()).expect("found by name");
            assert_eq!(by_name.heading(), part(*w).heading());
        }
    }

    /// A parameter or platform holding a comma or a quote stays one field.
    #[test]
    fn csv_fields_are_quoted_where_they_need_it() {
        let cell = CellSummary {
            platform: "kata".into(),
            workload: "fio".into(),
            param: "bs=4k,rw=\"randread\"".into(),
            stress: 2,
            runs: 3,
            unit: Some("I/O".into()),
            ..Default::default()
        };
        let text = csv(&[cell]);
        let row = text.lines().nth(1).expect("one row");
        assert!(
            row.starts_with("kata,fio,\"bs=4k,rw=\"\"randread\"\"\",2,3,I/O,"),
            "{row}"
        );
    }
}
