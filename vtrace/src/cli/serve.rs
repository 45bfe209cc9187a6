//! `vtrace serve`.

use std::path::PathBuf;

use vtrace::{
    collectors::bpf_stats::SelfStats,
    layers::{self, Switches},
    record::RecordOptions,
};

#[derive(clap::Args)]
pub struct Args {
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
    switches: Switches,
    /// When the kernel's BPF statistics (vtrace_bpf_run_seconds_total) are on.
    #[arg(long, value_enum, default_value_t = SelfStats::Sampled)]
    self_stats: SelfStats,
    /// Platform profiles to add (TOML).
    #[arg(long)]
    platform_file: Option<PathBuf>,
    /// Label per-process series (CPU seconds, run-queue delay) with the process too (`pid`,
    /// `process`): one series per process and state, so off by default.
    #[arg(long)]
    pid_labels: bool,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let opts = RecordOptions {
        platform: args.platform.unwrap_or_else(|| vtrace::platforms::HOST.into()),
        platform_file: args.platform_file,
        switches: args.switches,
        self_stats: args.self_stats,
        ..RecordOptions::default()
    }
    .layers(args.layers);
    vtrace::serve::serve(&opts, args.listen, args.web_config.as_deref(), args.pid_labels)?;
    Ok(0)
}
