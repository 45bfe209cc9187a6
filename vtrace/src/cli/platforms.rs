//! `vtrace platforms`.

use std::path::PathBuf;

use anyhow::Context as _;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long)]
    json: bool,
    /// Extra platform profiles (TOML).
    #[arg(long)]
    platform_file: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let profiles = vtrace::platforms::profiles(args.platform_file.as_deref())?;
    let instances = vtrace::platforms::detect(&profiles, &vtrace::platforms::SystemSnapshot::live());
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&instances).context("serialize instances")?
        );
    } else if instances.is_empty() {
        println!("no platform instance detected (everything runs on the host platform)");
    } else {
        for i in &instances {
            println!("{} [{}] root pid {}", i.id, i.variant, i.root_pid);
            for t in &i.threads {
                println!("  {:>8} {:>8} {:<16} {}", t.pid, t.tid, t.comm, t.role);
            }
            for d in &i.devices {
                println!("  dev {:<16} ifindex {:<5} {:<8} {}", d.name, d.ifindex, d.kind, d.role);
            }
        }
    }
    Ok(0)
}
