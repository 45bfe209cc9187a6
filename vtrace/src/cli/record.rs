//! `vtrace record`.

use vtrace::{
    layers,
    record::{RecordOptions, record},
};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    opts: RecordOptions,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let outcome = record(&args.opts)?;
    eprintln!(
        "vtrace: recorded {:.1} s into {} ({} threads); `vtrace report {}` shows it",
        outcome.recording.meta.wall_ns as f64 / 1e9,
        outcome.path.display(),
        outcome.recording.rows::<layers::cpu::ThreadRow>().len(),
        outcome.path.display()
    );
    Ok(outcome.exit_code)
}
