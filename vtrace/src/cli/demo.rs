//! `vtrace demo`: the embedded default, recorded and reported (text, then
//! the HTML report beside the recording).

use std::path::PathBuf;

use anyhow::Context as _;
use vtrace::report::{self, Format, ReportOptions};

#[derive(clap::Args)]
pub struct Args {
    #[arg(short, long, default_value = "demo.vtrace")]
    output: PathBuf,
    /// redis-benchmark requests per test.
    #[arg(long, default_value_t = 200_000)]
    requests: u32,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let outcome = vtrace::demo::run(args.output, args.requests)?;
    let with = |format| ReportOptions { format, top: 15 };
    print!("{}", report::render(&outcome.recording, &with(Format::Text)));
    let html_path = outcome.path.with_extension("html");
    let html = report::render(&outcome.recording, &with(Format::Html));
    std::fs::write(&html_path, html).with_context(|| format!("write {}", html_path.display()))?;
    eprintln!("vtrace: recording kept in {}", outcome.path.display());
    eprintln!(
        "vtrace: the report with its figures: {} (open it in a browser; it needs no network)",
        html_path.display()
    );
    Ok(outcome.exit_code)
}
