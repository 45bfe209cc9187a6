//! Reports: the same analysis shown as text tables, JSON or CSV.

mod csv;
mod json;
mod text;

use crate::{analysis::cpu::CpuBreakdown, recording::Recording};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
    Csv,
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
