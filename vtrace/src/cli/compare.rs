//! `vtrace compare` and `vtrace explain`.

use std::path::PathBuf;

use vtrace::{compare::Subject, layers, recording::Recording, report::Format};

use super::output::{emit, render_many};

#[derive(clap::Args)]
pub struct Args {
    #[arg(required = true, num_args = 2..)]
    recordings: Vec<PathBuf>,
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    /// Rows per table.
    #[arg(long, default_value_t = 15)]
    top: usize,
    #[arg(short, long)]
    output: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    if args.format == Format::Flamegraph {
        return differential_flamegraph(&args);
    }
    let subjects = args
        .recordings
        .iter()
        .map(|p| Subject::load(p))
        .collect::<Result<Vec<_>, _>>()?;
    let sections = vtrace::compare::compare(&subjects, args.top);
    emit(
        &render_many(&sections, args.format, "vtrace compare")?,
        args.output.as_deref(),
    )
}

/// The differential flamegraph of B against A.
fn differential_flamegraph(args: &Args) -> anyhow::Result<i32> {
    let [a, b] = args.recordings.as_slice() else {
        anyhow::bail!("a differential flamegraph compares two: vtrace compare A B --format flamegraph");
    };
    let read = |p: &PathBuf| -> anyhow::Result<Vec<Recording>> {
        vtrace::compare::recordings_in(p)?
            .iter()
            .map(|r| Ok(layers::read(r)?))
            .collect()
    };
    let title = format!("{} (B) against {} (A)", b.display(), a.display());
    let svg = layers::sample::flamegraph::differential_svg(&read(a)?, &read(b)?, &title).map_err(anyhow::Error::msg)?;
    emit(&svg, args.output.as_deref())
}

#[derive(clap::Args)]
pub struct ExplainArgs {
    a: PathBuf,
    b: PathBuf,
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    /// Terms shown before "the rest".
    #[arg(long, default_value_t = 12)]
    top: usize,
    #[arg(short, long)]
    output: Option<PathBuf>,
}

pub fn explain(args: ExplainArgs) -> anyhow::Result<i32> {
    let (a, b) = (Subject::load(&args.a)?, Subject::load(&args.b)?);
    let sections = vtrace::compare::explain::explain(&a, &b, args.top);
    emit(
        &render_many(&sections, args.format, "vtrace explain")?,
        args.output.as_deref(),
    )
}
