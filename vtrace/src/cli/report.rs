//! `vtrace report`: of a recording, or of a bench's directory.

use std::path::PathBuf;

use vtrace::{
    layers,
    report::{self, Format, ReportOptions},
};

use super::output::{emit, render_many};

#[derive(clap::Args)]
pub struct Args {
    recording: PathBuf,
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    /// Rows per table (text).
    #[arg(long, default_value_t = 15)]
    top: usize,
    /// With `--format csv`: the recording table to print (threads' CPU breakdown when not given;
    /// any table of the recording by its name, e.g. net_hops, kvm_events, intervals).
    #[arg(long)]
    table: Option<String>,
    /// Write the report to this file instead of standard output.
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Divide by this many operations for per-operation figures (replaces what the recording says).
    #[arg(long)]
    ops: Option<f64>,
    /// With `--format flamegraph` or `folded`: a frame per source line (where debug info has them), not per function.
    #[arg(long)]
    lines: bool,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    if args.recording.join(vtrace::bench::MATRIX_FILE).is_file() {
        return bench(args);
    }
    let mut rec = layers::read(&args.recording)?;
    if let Some(n) = args.ops {
        rec.set_ops(vtrace::workload::ops::Operations::given(n));
    }
    match args.format {
        Format::Flamegraph => {
            let svg = vtrace::views::flamegraph(&rec, args.lines).map_err(anyhow::Error::msg)?;
            return emit(&svg, args.output.as_deref());
        }
        Format::Folded => return emit(&vtrace::views::folded(&rec, args.lines), args.output.as_deref()),
        _ => {}
    }
    let text = if let Some(name) = &args.table {
        anyhow::ensure!(args.format == Format::Csv, "--table goes with --format csv");
        report::csv::table(&rec, name)?
    } else {
        report::render(
            &rec,
            &ReportOptions {
                format: args.format,
                top: args.top,
            },
        )
    };
    emit(&text, args.output.as_deref())
}

/// A bench's figures, or its cells as CSV.
fn bench(args: Args) -> anyhow::Result<i32> {
    let path = &args.recording;
    anyhow::ensure!(args.table.is_none(), "--table is of a recording, not of a bench");
    let (matrix, cells) = vtrace::bench::report::summarize(path)?;
    let text = match args.format {
        Format::Csv => vtrace::bench::report::csv(&cells),
        format => render_many(
            &vtrace::bench::report::sections(path, &matrix, &cells),
            format,
            &format!("vtrace bench {}", path.display()),
        )?,
    };
    emit(&text, args.output.as_deref())
}
