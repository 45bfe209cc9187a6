//! The `vtrace` command line. Library errors become one-line messages here.

use std::{path::PathBuf, process::ExitCode};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use vtrace::{
    layers::{self, options::LayerOptions},
    record::{RecordOptions, record},
    recording,
    report::{self, Format, ReportOptions},
};

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
    Record {
        #[command(flatten)]
        opts: RecordOptions,
    },
    /// Leave the probes attached and export what they count as Prometheus series at /metrics
    /// (OpenMetrics): CPU seconds by platform, instance, role and state, packets and bytes per
    /// device and hop, vtrace's own cost. Every map is read at each scrape; until SIGINT/SIGTERM.
    Serve {
        /// Address to listen on (loopback unless told otherwise).
        #[arg(long, default_value = vtrace::serve::DEFAULT_LISTEN)]
        listen: std::net::SocketAddr,
        /// TLS and basic auth, in the web configuration file format Prometheus exporters share
        /// (tls_server_config, basic_auth_users; docs/prometheus.md).
        #[arg(long = "web.config.file", value_name = "FILE")]
        web_config: Option<PathBuf>,
        /// Instances of this platform only (default: every platform's instances).
        #[arg(long)]
        platform: Option<String>,
        /// Layers, comma-separated (the CPU layer is always on).
        #[arg(long, value_delimiter = ',', default_values_t = layers::default_names())]
        layers: Vec<String>,
        #[command(flatten)]
        layer_opts: vtrace::layers::options::LayerOptions,
        /// When the kernel's BPF statistics (vtrace_bpf_run_seconds_total) are on.
        #[arg(long, value_enum, default_value_t = vtrace::collectors::bpf_stats::SelfStats::Sampled)]
        self_stats: vtrace::collectors::bpf_stats::SelfStats,
        /// Platform profiles to add (TOML).
        #[arg(long)]
        platform_file: Option<PathBuf>,
        /// Label per-process series (CPU seconds, run-queue delay) with the process too (`pid`,
        /// `process`): one series per process and state, so off by default.
        #[arg(long)]
        pid_labels: bool,
    },
    /// Write the recording a vtrace that was killed or crashed left unfinished: its journal (every
    /// interval completed, per-thread CPU time) becomes a normal recording, marked incomplete.
    Recover {
        /// The unfinished recording: its staging directory (`.NAME.tmp.PID`), or NAME.
        recording: PathBuf,
        /// Where to write it (default: NAME beside the staging directory).
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Report a recording as text tables, JSON or CSV.
    Report {
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
        /// With `--format flamegraph`: a frame per source line (where debug info has them), not per function.
        #[arg(long)]
        lines: bool,
    },
    /// Recordings (or bench cells: directories of repetitions) side by side, per operation where
    /// each knows its work, with the differences against the first. `--format flamegraph` with two:
    /// the differential flamegraph of B against A.
    Compare {
        #[arg(required = true, num_args = 2..)]
        recordings: Vec<PathBuf>,
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
        /// Rows per table.
        #[arg(long, default_value_t = 15)]
        top: usize,
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Why B costs more or less than A per operation: the difference in CPU time split by role and
    /// state, ranked, the terms summing to the total; then the finer figures behind it.
    Explain {
        a: PathBuf,
        b: PathBuf,
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
        /// Terms shown before "the rest".
        #[arg(long, default_value_t = 12)]
        top: usize,
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Record a matrix of platforms x workloads x parameters x repetitions against lab instances
    /// (started and stopped here, or already up), every run kept with its workload's output;
    /// `vtrace report DIR` draws the figures. Re-running the same command resumes.
    Bench {
        #[command(flatten)]
        matrix: vtrace::bench::Matrix,
        /// Layers recorded in each run (as `record --layers`; the run queue too by default: how long the
        /// workload's threads waited for a CPU, under `--stress` above all).
        #[arg(long, value_delimiter = ',', default_values_t = vtrace::bench::default_layers())]
        layers: Vec<String>,
        /// Each layer's own switches, as `record` takes them.
        #[command(flatten)]
        layer_opts: LayerOptions,
        #[arg(short, long, default_value = "bench")]
        output: PathBuf,
    },
    /// List the platform instances running now: processes, threads, roles and devices.
    Platforms {
        #[arg(long)]
        json: bool,
        /// Extra platform profiles (TOML).
        #[arg(long)]
        platform_file: Option<PathBuf>,
    },
    /// Start, stop and list real platform instances serving redis and iperf3.
    Lab {
        #[command(subcommand)]
        action: LabAction,
    },
    /// Send N HTTP GET requests to ADDR:PORT, some connections at a time, and print how many
    /// were answered and why the others were not (exits 1 only when none was) (a counted load for HTTP servers, e.g. a Unikraft image's; `record` reads
    /// its summary as the run's operations).
    HttpLoad {
        /// The server, e.g. 10.99.23.2:8123.
        addr: std::net::SocketAddr,
        #[arg(short = 'n', long, default_value_t = 1000)]
        requests: u64,
        /// Connections at a time.
        #[arg(short, long, default_value_t = 1)]
        concurrency: u32,
        /// Per request (connect, reply).
        #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
        timeout: std::time::Duration,
    },
    /// List every probe and the attach method it would use on this kernel, or why it cannot.
    Probes {
        #[arg(long)]
        json: bool,
    },
    /// The embedded default: redis-server in a network namespace behind a veth pair,
    /// driven by redis-benchmark (GET/SET, 64 B values), recorded and reported.
    Demo {
        #[arg(short, long, default_value = "demo.vtrace")]
        output: PathBuf,
        /// redis-benchmark requests per test.
        #[arg(long, default_value_t = 200_000)]
        requests: u32,
    },
}

#[derive(Subcommand)]
enum LabAction {
    /// Start an instance of PLATFORM (host, runc, crun, docker, gvisor, lxc, linuxvm, lwip,
    /// qemu-kvm, qemu-kvm-novhost, firecracker, unikraft-vhost, unikraft-virtio).
    Up { platform: String },
    /// Stop it and remove everything `up` made.
    Down { platform: String },
    /// Run a command inside the running instance of PLATFORM (its runtime's
    /// exec; the host platform's network namespace), e.g.
    /// `vtrace record --platform runc -- vtrace lab exec runc -- fio ...`.
    Exec {
        platform: String,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// What runs, what can start here, and what cannot (and why).
    Status,
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
    match run(Cli::parse()) {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("vtrace: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// The report to `output`, or to standard output.
fn emit(text: &str, output: Option<&std::path::Path>) -> anyhow::Result<i32> {
    match output {
        Some(file) => {
            std::fs::write(file, text).with_context(|| format!("write the report to {}", file.display()))?;
            eprintln!("vtrace: report written to {}", file.display());
        }
        None => print!("{text}"),
    }
    Ok(0)
}

/// Sections of several recordings: text, JSON or HTML.
fn render_many(sections: &[report::model::Section], format: Format, title: &str) -> anyhow::Result<String> {
    anyhow::ensure!(
        matches!(format, Format::Text | Format::Json | Format::Html),
        "this command writes text, json or html (csv and folded are of one recording: `vtrace report`)"
    );
    Ok(report::render_sections(sections, format, title))
}

fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Record { opts } => {
            let outcome = record(&opts)?;
            eprintln!(
                "vtrace: recorded {:.1} s into {} ({} threads); `vtrace report {}` shows it",
                outcome.recording.meta.wall_ns as f64 / 1e9,
                outcome.path.display(),
                outcome.recording.rows::<layers::cpu::ThreadRow>().len(),
                outcome.path.display()
            );
            Ok(outcome.exit_code)
        }
        Command::Serve {
            listen,
            web_config,
            platform,
            layers,
            layer_opts,
            self_stats,
            platform_file,
            pid_labels,
        } => {
            let opts = RecordOptions {
                platform: platform.unwrap_or_else(|| vtrace::platforms::HOST.into()),
                platform_file,
                layer_opts,
                self_stats,
                ..RecordOptions::default()
            }
            .layers(layers);
            vtrace::serve::serve(&opts, listen, web_config.as_deref(), pid_labels)?;
            Ok(0)
        }
        Command::Recover {
            recording: path,
            output,
        } => {
            let written = layers::recover_into(&path, output.as_deref())?;
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
        Command::Report {
            recording: path,
            format,
            top,
            table,
            output,
            ops,
            lines,
        } => {
            if path.join(vtrace::bench::MATRIX_FILE).is_file() {
                anyhow::ensure!(table.is_none(), "--table is of a recording, not of a bench");
                let (matrix, cells) = vtrace::bench::report::summarize(&path)?;
                let text = match format {
                    Format::Csv => vtrace::bench::report::csv(&cells),
                    _ => render_many(
                        &vtrace::bench::report::sections(&path, &matrix, &cells),
                        format,
                        &format!("vtrace bench {}", path.display()),
                    )?,
                };
                return emit(&text, output.as_deref());
            }
            let mut rec = layers::read(&path)?;
            if let Some(n) = ops {
                rec.set_ops(vtrace::workload::ops::Operations::given(n));
            }
            if format == Format::Flamegraph {
                let svg = layers::sample::flamegraph::svg(&rec, &rec.title(), lines).map_err(anyhow::Error::msg)?;
                return emit(&svg, output.as_deref());
            }
            let text = if let Some(name) = table {
                anyhow::ensure!(format == Format::Csv, "--table goes with --format csv");
                report::csv::table(&rec, &name)?
            } else {
                report::render(&rec, &ReportOptions { format, top })
            };
            emit(&text, output.as_deref())
        }
        Command::Bench {
            matrix,
            layers,
            layer_opts,
            output,
        } => {
            let opts = RecordOptions {
                layer_opts,
                ..RecordOptions::default()
            }
            .layers(layers);
            let outcome = vtrace::bench::run(&matrix, &output, &opts)?;
            eprintln!(
                "vtrace bench: {} runs recorded, {} done before, {} failed; `vtrace report {}` draws the figures",
                outcome.recorded,
                outcome.done_before,
                outcome.failed.len(),
                output.display()
            );
            if outcome.interrupted {
                eprintln!("vtrace bench: interrupted; the same command resumes with the runs not done");
                return Ok(130);
            }
            Ok(0)
        }
        Command::Compare {
            recordings,
            format,
            top,
            output,
        } => {
            if format == Format::Flamegraph {
                let [a, b] = recordings.as_slice() else {
                    anyhow::bail!("a differential flamegraph compares two: vtrace compare A B --format flamegraph");
                };
                let read = |p: &PathBuf| -> anyhow::Result<Vec<recording::Recording>> {
                    vtrace::compare::recordings_in(p)?
                        .iter()
                        .map(|r| Ok(layers::read(r)?))
                        .collect()
                };
                let title = format!("{} (B) against {} (A)", b.display(), a.display());
                let svg = layers::sample::flamegraph::differential_svg(&read(a)?, &read(b)?, &title)
                    .map_err(anyhow::Error::msg)?;
                return emit(&svg, output.as_deref());
            }
            let subjects = recordings
                .iter()
                .map(|p| vtrace::compare::Subject::load(p))
                .collect::<Result<Vec<_>, _>>()?;
            let sections = vtrace::compare::compare(&subjects, top);
            emit(&render_many(&sections, format, "vtrace compare")?, output.as_deref())
        }
        Command::Explain {
            a,
            b,
            format,
            top,
            output,
        } => {
            let (a, b) = (vtrace::compare::Subject::load(&a)?, vtrace::compare::Subject::load(&b)?);
            let sections = vtrace::compare::explain::explain(&a, &b, top);
            emit(&render_many(&sections, format, "vtrace explain")?, output.as_deref())
        }
        Command::Platforms { json, platform_file } => {
            let profiles = vtrace::platforms::profiles(platform_file.as_deref())?;
            let instances = vtrace::platforms::detect(&profiles, &vtrace::platforms::SystemSnapshot::live());
            if json {
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
        Command::HttpLoad {
            addr,
            requests,
            concurrency,
            timeout,
        } => {
            let load = vtrace::workload::http::run(addr, requests, concurrency, timeout);
            println!("{}", load.summary());
            // A server that answered was measured, its failures with it (the
            // summary says them; `record` and `bench` keep them): only one
            // that answered nothing failed the run.
            Ok(if load.ok == 0 { 1 } else { 0 })
        }
        Command::Lab { action } => {
            match action {
                LabAction::Up { platform } => {
                    if vtrace::lab::is_up(&platform) {
                        println!("{platform} is already up (`vtrace lab down {platform}` removes it)");
                    }
                    let l = vtrace::lab::up(&platform)?;
                    println!("{platform} up: {}", vtrace::lab::serves(&platform, &l.address));
                    if !l.note.is_empty() {
                        println!("  {}", l.note);
                    }
                    let workload = vtrace::lab::example_workload(&platform, &l.address);
                    println!("  e.g. {workload}");
                    println!(
                        "  record: vtrace record --platform {} -- {workload}",
                        vtrace::lab::recorded_as(&platform)
                    );
                }
                LabAction::Down { platform } => {
                    if vtrace::lab::down(&platform)? {
                        println!("{platform} down: nothing left behind");
                    } else {
                        println!("{platform} is not up: nothing to remove");
                    }
                }
                LabAction::Exec { platform, command } => {
                    let argv = vtrace::lab::exec_command(&platform, &command)?;
                    let status = std::process::Command::new(&argv[0])
                        .args(&argv[1..])
                        .status()
                        .with_context(|| format!("run {}", argv[0]))?;
                    return Ok(status
                        .code()
                        .unwrap_or(128 + std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0)));
                }
                LabAction::Status => {
                    for (name, state) in vtrace::lab::status() {
                        println!("{name:<12} {state}");
                    }
                }
            }
            Ok(0)
        }
        Command::Probes { json } => {
            let plan = vtrace::record::probe_plan();
            if json {
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
        Command::Demo { output, requests } => {
            let outcome = vtrace::demo::run(output, requests)?;
            print!(
                "{}",
                report::render(
                    &outcome.recording,
                    &ReportOptions {
                        format: Format::Text,
                        top: 15
                    }
                )
            );
            let html_path = outcome.path.with_extension("html");
            let html = report::render(
                &outcome.recording,
                &ReportOptions {
                    format: Format::Html,
                    top: 15,
                },
            );
            std::fs::write(&html_path, html).with_context(|| format!("write {}", html_path.display()))?;
            eprintln!("vtrace: recording kept in {}", outcome.path.display());
            eprintln!(
                "vtrace: the report with its figures: {} (open it in a browser; it needs no network)",
                html_path.display()
            );
            Ok(outcome.exit_code)
        }
    }
}

#[cfg(test)]
mod tests {
    /// Every flag of every command (the layers' own groups flattened into
    /// `record` and `bench` among them) is unique and well formed.
    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}
