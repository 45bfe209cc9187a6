//! `vtrace serve`.

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    opts: vtrace::serve::ServeOptions,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    vtrace::serve::serve(&args.opts)?;
    Ok(0)
}
