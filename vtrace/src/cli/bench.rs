//! `vtrace bench`.

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    opts: vtrace::bench::BenchOptions,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let outcome = vtrace::bench::run(&args.opts)?;
    eprintln!(
        "vtrace bench: {} runs recorded, {} done before, {} failed; `vtrace report {}` draws the figures",
        outcome.recorded,
        outcome.done_before,
        outcome.failed.len(),
        args.opts.output.display()
    );
    if outcome.interrupted {
        eprintln!("vtrace bench: interrupted; the same command resumes with the runs not done");
        return Ok(130);
    }
    Ok(0)
}
