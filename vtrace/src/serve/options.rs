//! `vtrace serve`'s options, and the live recording they ask for.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use crate::{
    collectors::bpf_stats::SelfStats,
    layers::{self, Switches},
    record::RecordOptions,
};

/// Where `vtrace serve` listens unless told otherwise (loopback: the series
/// name every process on the host).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9477";

#[derive(Clone, Debug, clap::Args)]
pub struct ServeOptions {
    /// Address to listen on (loopback unless told otherwise).
    #[arg(long, default_value = DEFAULT_LISTEN)]
    pub listen: SocketAddr,
    /// TLS and basic auth, in the web configuration file format Prometheus exporters share
    /// (tls_server_config, basic_auth_users; docs/prometheus.md).
    #[arg(long = "web.config.file", value_name = "FILE")]
    pub web_config: Option<PathBuf>,
    /// Instances of this platform only (default: every platform's instances).
    #[arg(long)]
    pub platform: Option<String>,
    /// Layers, comma-separated (the CPU layer is always on).
    #[arg(long, value_delimiter = ',', default_values_t = layers::default_names())]
    pub layers: Vec<String>,
    #[command(flatten)]
    pub switches: Switches,
    /// When the kernel's BPF statistics (vtrace_bpf_run_seconds_total) are on.
    #[arg(long, value_enum, default_value_t = SelfStats::Sampled)]
    pub self_stats: SelfStats,
    /// Platform profiles to add (TOML).
    #[arg(long)]
    pub platform_file: Option<PathBuf>,
    /// Label per-process series (CPU seconds, run-queue delay) with the process too (`pid`,
    /// `process`): one series per process and state, so off by default.
    #[arg(long)]
    pub pid_labels: bool,
}

impl ServeOptions {
    /// The live session these options ask for: no command, no end, nothing
    /// journaled.
    pub fn record_options(&self) -> RecordOptions {
        RecordOptions {
            platform: self.platform.clone().unwrap_or_else(|| crate::platforms::HOST.into()),
            platform_file: self.platform_file.clone(),
            switches: self.switches.clone(),
            self_stats: self.self_stats,
            live: true,
            command: Vec::new(),
            duration: None,
            // Nothing is journaled: a live session writes nothing.
            checkpoint: Duration::ZERO,
            // The staging directory is claimed (and removed at the end) like a recording's.
            output: std::env::temp_dir().join(format!("vtrace-serve.{}", std::process::id())),
            force: true,
            ..RecordOptions::default()
        }
        .layers(self.layers.clone())
    }
}
