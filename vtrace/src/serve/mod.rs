//! `vtrace serve`: the recording's probes left attached, every map read at
//! each scrape, and what the layers emit exported as Prometheus series
//! (`Layer::metrics`, each layer's `metrics.rs`). A live session
//! (`record::live`) on the main thread; the HTTP side (`http.rs`) on one
//! of its own; the series' state (`series.rs`) between them.

mod http;
mod options;
mod own;
pub mod series;
pub mod web_config;

use std::{collections::HashSet, sync::Arc, time::Instant};

use tokio::sync::{mpsc, oneshot};

use crate::{
    Error, Result,
    exposition::Samples,
    layers,
    record::{self, Scrape},
};
use series::SeriesSet;

pub use http::encode;
pub use options::{DEFAULT_LISTEN, ServeOptions};

/// The exporter: asks the live session for a read, keeps the series.
pub struct Exporter {
    scrapes: mpsc::Sender<Scrape>,
    pub series: SeriesSet,
    /// `--pid-labels`: per-process series carry the process's pid and name.
    process_labels: bool,
}

impl Exporter {
    /// Reads every layer now and adds it to the series.
    pub async fn read(&mut self) -> Result<()> {
        let began = Instant::now();
        // The last read's tables and text (megabytes, freed by now) go back
        // to the system: glibc keeps freed memory in its heap, and the holes
        // a scrape's many small allocations leave grew a session that never
        // ends by a few MiB every minute.
        #[cfg(target_env = "gnu")]
        unsafe {
            libc::malloc_trim(0);
        }
        let (reply, answer) = oneshot::channel();
        self.scrapes
            .send(Scrape { reply })
            .await
            .map_err(|_| Error::Ebpf("the probes are detached: vtrace serve is stopping".into()))?;
        let read = answer
            .await
            .map_err(|_| Error::Ebpf("the probes are detached: vtrace serve is stopping".into()))??;
        let mut samples = Samples::new(self.process_labels);
        for layer in layers::REGISTRY {
            layer.metrics(&read.tables, &mut samples);
        }
        own::metrics(&read, began.elapsed().as_secs_f64(), &mut samples);
        let running: HashSet<String> = read.instances.iter().map(|i| i.id.clone()).collect();
        // The series count as of this read, itself a series.
        let count = self.series.len() as f64;
        samples.push(&own::SERIES, "series", Vec::new(), count);
        self.series.add(samples, &running);
        Ok(())
    }
}

/// Binds `--listen` (a one-line error when it is in use or not allowed),
/// attaches the probes, and serves until SIGINT/SIGTERM; over TLS and with
/// basic auth where `--web.config.file` says; per-process series labelled
/// with the process where `--pid-labels`.
pub fn serve(serve: &ServeOptions) -> Result<()> {
    let listen = serve.listen;
    let process_labels = serve.pid_labels;
    let web = Arc::new(match &serve.web_config {
        Some(path) => web_config::WebConfig::load(path)?,
        None => web_config::WebConfig {
            tls: None,
            users: web_config::BasicAuth::none(),
        },
    });
    let scheme = if web.tls.is_some() { "https" } else { "http" };
    let listener = std::net::TcpListener::bind(listen).map_err(|e| {
        Error::BadArgument(format!(
            "--listen {listen}: {e}{}",
            match e.kind() {
                std::io::ErrorKind::AddrInUse => " (another vtrace serve or exporter has it: pick another port)",
                std::io::ErrorKind::AddrNotAvailable => " (no interface of this host has that address)",
                std::io::ErrorKind::PermissionDenied => " (a port below 1024 needs CAP_NET_BIND_SERVICE)",
                _ => "",
            }
        ))
    })?;
    listener
        .set_nonblocking(true)
        .map_err(crate::error::io("make the listener non-blocking"))?;
    let opts = serve.record_options();
    let (tx, rx) = mpsc::channel(4);
    let (attached_tx, attached_rx) = std::sync::mpsc::channel();
    let exporter = Arc::new(tokio::sync::Mutex::new(Exporter {
        scrapes: tx,
        series: SeriesSet::default(),
        process_labels,
    }));
    std::thread::Builder::new()
        .name("vtrace-http".into())
        .spawn(move || {
            // Serve only once the probes are attached: a scrape before has nothing to read.
            if attached_rx.recv().is_err() {
                return;
            }
            eprintln!("vtrace serve: probes attached; serving {scheme}://{listen}/metrics");
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                return;
            };
            rt.block_on(async move {
                match tokio::net::TcpListener::from_std(listener) {
                    Ok(listener) => http::serve(listener, exporter, web).await,
                    Err(e) => eprintln!("vtrace serve: {e}"),
                }
            });
        })
        .map_err(crate::error::io("start the HTTP thread"))?;
    record::live(&opts, rx, attached_tx)
}
