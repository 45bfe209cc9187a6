//! Reports: every layer's section (`layers/<name>/summary.rs`, through the
//! registry), the views that join several layers (`views/`), the run's own
//! (`run.rs`) and, when the work done is known, every figure per operation
//! (`per_op.rs`), rendered as text, JSON, CSV or HTML by renderers that know
//! no layer (`report_model` is the typed report they share).

mod cost;
pub mod csv;
mod html;
mod json;
/// The typed report model lives below the layers, which build its sections.
pub use self::cost::{calibrated_ns_per_event, ns_per_event, whole_run_time_ns};
pub use crate::report_model as model;
mod per_op;
pub mod plot;
pub mod run;
mod text;

use crate::{layers, recording::Recording, views};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
    Csv,
    /// Sampled stacks folded per line (`comm;frame;...;frame count`), the
    /// input of flamegraph.pl and inferno-flamegraph.
    Folded,
    /// One self-contained HTML file: every section with its figures (inline SVG).
    Html,
    /// An interactive flamegraph (SVG) of the sampled stacks, rooted at
    /// platform/role, instance and thread, coloured by role.
    Flamegraph,
    /// The Chrome trace event format (ui.perfetto.dev, chrome://tracing): CPU
    /// counters per role and state per interval, packet spans hop to hop.
    Trace,
}

pub struct ReportOptions {
    pub format: Format,
    /// Rows per table in text output.
    pub top: usize,
}

/// Every section of a report on `rec`: the run's header, each layer's in
/// registry order, then probes, vtrace's own cost and the notes.
pub fn sections(rec: &Recording, top: usize) -> Vec<model::Section> {
    let mut sections = vec![run::header(rec)];
    sections.extend(layers::REGISTRY.iter().map(|l| l.summarize(rec, top)));
    join_thread_columns(&mut sections, rec);
    views::overlay::join(&mut sections, rec);
    views::guest_stacks::join(&mut sections, rec);
    sections.extend(views::startup::section(rec));
    sections.extend(views::boundary::section(rec));
    sections.extend([run::probes(rec), run::overhead(rec)]);
    if let Some(ops) = rec.ops() {
        per_op::divide(&mut sections, ops.count);
        sections.push(per_op::section(ops, &sections, top));
    }
    sections.push(run::notes(rec));
    sections
}

/// Adds every layer's per-thread columns (`Layer::thread_columns`) to the
/// CPU section's `threads`.
fn join_thread_columns(sections: &mut [model::Section], rec: &Recording) {
    let columns: Vec<_> = layers::REGISTRY.iter().filter_map(|l| l.thread_columns(rec)).collect();
    let Some(threads) = sections
        .iter_mut()
        .find(|s| s.id == "cpu")
        .and_then(|s| s.json.iter_mut().find(|(k, _)| *k == "threads"))
        .and_then(|(_, v)| v.as_array_mut())
    else {
        return;
    };
    for row in threads {
        let tid = row["tid"].as_u64().unwrap_or(u64::MAX) as u32;
        for c in &columns {
            let values = c.by_tid.get(&tid);
            for (i, name) in c.names.iter().enumerate() {
                row[*name] = values.and_then(|v| v.get(i)).copied().unwrap_or(0).into();
            }
        }
    }
}

pub fn render(rec: &Recording, opts: &ReportOptions) -> String {
    match opts.format {
        Format::Csv => views::threads_csv(rec),
        Format::Folded => views::folded(rec, false),
        Format::Trace => views::trace::render(rec),
        Format::Flamegraph => views::flamegraph(rec, false).unwrap_or_default(),
        Format::Json => render_sections(&sections(rec, usize::MAX), Format::Json, &rec.title()),
        format => render_sections(&sections(rec, opts.top), format, &rec.title()),
    }
}

/// Sections as text, JSON or HTML (a page titled `title`); the formats that
/// are of one recording only (CSV, folded) render nothing here.
pub fn render_sections(sections: &[model::Section], format: Format, title: &str) -> String {
    match format {
        Format::Text => text::render(sections),
        Format::Json => serde_json::to_string_pretty(&json::document(sections)).expect("report serializes"),
        Format::Html => html::render(title, sections),
        Format::Csv | Format::Folded | Format::Trace | Format::Flamegraph => String::new(),
    }
}
