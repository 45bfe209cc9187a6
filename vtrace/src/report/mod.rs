//! Reports: the same analysis shown as text tables, JSON or CSV.

pub mod csv;
mod json;
mod text;

use crate::{layers::cpu::analysis::CpuBreakdown, recording::Recording};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
    Csv,
    /// Sampled stacks folded per line (`comm;frame;...;frame count`), the
    /// input of flamegraph.pl and inferno-flamegraph.
    Folded,
}

pub struct ReportOptions {
    pub format: Format,
    /// Rows per table in text output.
    pub top: usize,
}

pub fn render(rec: &Recording, opts: &ReportOptions) -> String {
    let cpu = CpuBreakdown::of(rec);
    match opts.format {
        Format::Text => text::render(rec, &cpu, opts.top),
        Format::Json => serde_json::to_string_pretty(&json::document(rec, &cpu)).expect("report serializes"),
        Format::Csv => csv::threads(&cpu),
        Format::Folded => folded(rec),
    }
}

/// ns per event of a program; 0 when it never ran.
pub fn ns_per_event(run_time_ns: u64, run_count: u64) -> f64 {
    if run_count == 0 {
        0.0
    } else {
        run_time_ns as f64 / run_count as f64
    }
}

/// A program's run time over the whole recording: its exact number of runs
/// times the cost per run measured while the kernel's statistics were on.
pub fn whole_run_time_ns(p: &crate::recording::ProgramRow) -> u64 {
    (ns_per_event(p.run_time_ns, p.run_count) * p.events as f64).round() as u64
}

/// The recording's sampled stacks, each prefixed by its process name, merged
/// over the threads of a process.
pub fn folded(rec: &Recording) -> String {
    let mut merged: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    for s in rec.rows::<crate::layers::sample::SampleRow>() {
        let comm = rec
            .rows::<crate::layers::cpu::ThreadRow>()
            .iter()
            .find(|t| t.tid == s.pid)
            .map_or(s.comm.as_str(), |t| t.comm.as_str());
        *merged
            .entry(format!("{};{}", comm.replace(' ', "_"), s.stack))
            .or_default() += s.count;
    }
    merged.into_iter().map(|(stack, n)| format!("{stack} {n}\n")).collect()
}
