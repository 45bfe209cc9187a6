//! `vtrace probes`.

use anyhow::Context as _;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let plan = vtrace::record::probe_plan();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&plan).context("serialize probes")?);
    } else {
        println!("{:<28}{:<9}{:<12}note", "probe", "layer", "method");
        for p in &plan {
            let method = p.method.clone().unwrap_or_else(|| "unavailable".into());
            println!("{:<28}{:<9}{:<12}{}", p.id, p.layer, method, p.note());
        }
    }
    Ok(0)
}
