//! `vtrace bench`.

use std::path::PathBuf;

use vtrace::{layers::Switches, record::RecordOptions};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    matrix: vtrace::bench::Matrix,
    /// Layers recorded in each run (as `record --layers`; the run queue too by default: how long the
    /// workload's threads waited for a CPU, under `--stress` above all).
    #[arg(long, value_delimiter = ',', default_values_t = vtrace::bench::default_layers())]
    layers: Vec<String>,
    /// Each layer's own switches, as `record` takes them.
    #[command(flatten)]
    switches: Switches,
    #[arg(short, long, default_value = "bench")]
    output: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let opts = RecordOptions {
        switches: args.switches,
        ..RecordOptions::default()
    }
    .layers(args.layers);
    let outcome = vtrace::bench::run(&args.matrix, &args.output, &opts)?;
    eprintln!(
        "vtrace bench: {} runs recorded, {} done before, {} failed; `vtrace report {}` draws the figures",
        outcome.recorded,
        outcome.done_before,
        outcome.failed.len(),
        args.output.display()
    );
    if outcome.interrupted {
        eprintln!("vtrace bench: interrupted; the same command resumes with the runs not done");
        return Ok(130);
    }
    Ok(0)
}
