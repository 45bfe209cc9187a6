//! Where a report goes, and the formats several recordings are shown in.

use anyhow::Context as _;
use vtrace::report::{self, Format};

/// The report to `output`, or to standard output.
pub fn emit(text: &str, output: Option<&std::path::Path>) -> anyhow::Result<i32> {
    match output {
        Some(file) => {
            std::fs::write(file, text).with_context(|| format!("write the report to {}", file.display()))?;
            eprintln!("vtrace: report written to {}", file.display());
        }
        None => print!("{text}"),
    }
    Ok(0)
}

/// Sections of several recordings: text, JSON or HTML.
pub fn render_many(sections: &[report::model::Section], format: Format, title: &str) -> anyhow::Result<String> {
    anyhow::ensure!(
        matches!(format, Format::Text | Format::Json | Format::Html),
        "this command writes text, json or html (csv and folded are of one recording: `vtrace report`)"
    );
    Ok(report::render_sections(sections, format, title))
}
