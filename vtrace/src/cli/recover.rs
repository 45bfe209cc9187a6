//! `vtrace recover`.

use std::path::PathBuf;

use vtrace::layers;

#[derive(clap::Args)]
pub struct Args {
    /// The unfinished recording: its staging directory (`.NAME.tmp.PID`), or NAME.
    recording: PathBuf,
    /// Where to write it (default: NAME beside the staging directory).
    #[arg(short, long)]
    output: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let written = layers::recover_into(&args.recording, args.output.as_deref())?;
    let rec = layers::read(&written)?;
    let covered = rec.meta.incomplete.as_ref().map_or(0, |i| i.covered_ns);
    eprintln!(
        "vtrace: recovered {:.1} s ({} intervals) into {}",
        covered as f64 / 1e9,
        rec.meta.incomplete.as_ref().map_or(0, |i| i.intervals),
        written.display()
    );
    Ok(0)
}
