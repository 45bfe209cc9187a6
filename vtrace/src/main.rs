//! The `vtrace` command line: parses, and hands each subcommand to its file
//! under `cli/` (its arguments and its steps).

mod cli;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "vtrace",
    version,
    about = "Where the CPU and the latency go along the virtualization I/O path"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

// Parsed once per run: the size difference between variants does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Record CPU attribution while a command runs, for a duration, or until Ctrl-C.
    Record(cli::record::Args),
    /// Leave the probes attached and export what they count as Prometheus series at /metrics
    /// (OpenMetrics): CPU seconds by platform, instance, role and state, packets and bytes per
    /// device and hop, vtrace's own cost. Every map is read at each scrape; until SIGINT/SIGTERM.
    Serve(cli::serve::Args),
    /// Write the recording a vtrace that was killed or crashed left unfinished: its journal (every
    /// interval completed, per-thread CPU time) becomes a normal recording, marked incomplete.
    Recover(cli::recover::Args),
    /// Inside a Linux guest: wait for the host's `vtrace record --guest` (over vsock by default) and
    /// record this guest for it: its CPU by thread and state, its network, its run queue, on a
    /// clock the host maps onto its own.
    Agent(cli::agent::Args),
    /// Report a recording as text tables, JSON or CSV.
    Report(cli::report::Args),
    /// Recordings (or bench cells: directories of repetitions) side by side, per operation where
    /// each knows its work, with the differences against the first. `--format flamegraph` with two:
    /// the differential flamegraph of B against A.
    Compare(cli::compare::Args),
    /// Why B costs more or less than A per operation: the difference in CPU time split by role and
    /// state, ranked, the terms summing to the total; then the finer figures behind it.
    Explain(cli::compare::ExplainArgs),
    /// Record a matrix of platforms x workloads x parameters x repetitions against lab instances
    /// (started and stopped here, or already up), every run kept with its workload's output;
    /// `vtrace report DIR` draws the figures. Re-running the same command resumes.
    Bench(cli::bench::Args),
    /// List the platform instances running now: processes, threads, roles and devices.
    Platforms(cli::platforms::Args),
    /// Start, stop and list real platform instances serving redis and iperf3.
    Lab {
        #[command(subcommand)]
        action: cli::lab::Action,
    },
    /// Send N HTTP GET requests to ADDR:PORT, some connections at a time, and print how many
    /// were answered and why the others were not (exits 1 only when none was) (a counted load for HTTP servers, e.g. a Unikraft image's; `record` reads
    /// its summary as the run's operations).
    HttpLoad(cli::http_load::Args),
    /// List every probe and the attach method it would use on this kernel, or why it cannot.
    Probes(cli::probes::Args),
    /// The embedded default: redis-server in a network namespace behind a veth pair,
    /// driven by redis-benchmark (GET/SET, 64 B values), recorded and reported.
    Demo(cli::demo::Args),
}

fn main() -> ExitCode {
    // One malloc arena for all of vtrace's threads. They are few, and most
    // are short-lived helpers (a reader per network namespace read); with an
    // arena each, freed memory stayed spread over the arenas and a session
    // that never ends grew: `vtrace serve` scraped every second gained
    // 1 MiB a minute, and none with one arena.
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
    let run = match Cli::parse().command {
        Command::Record(args) => cli::record::run(args),
        Command::Serve(args) => cli::serve::run(args),
        Command::Recover(args) => cli::recover::run(args),
        Command::Agent(args) => cli::agent::run(args),
        Command::Report(args) => cli::report::run(args),
        Command::Compare(args) => cli::compare::run(args),
        Command::Explain(args) => cli::compare::explain(args),
        Command::Bench(args) => cli::bench::run(args),
        Command::Platforms(args) => cli::platforms::run(args),
        Command::Lab { action } => cli::lab::run(action),
        Command::HttpLoad(args) => cli::http_load::run(args),
        Command::Probes(args) => cli::probes::run(args),
        Command::Demo(args) => cli::demo::run(args),
    };
    match run {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("vtrace: {e:#}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    /// Every flag of every command (the layers' own groups flattened into
    /// `record`, `bench` and `serve` among them) is unique and well formed.
    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
