//! `vtrace record`: one generic loop over the layers (`run.rs`, its steps
//! named). Choose the layers this recording wants and this machine can run,
//! let each configure the eBPF object, load it, start their collectors,
//! attach their probes, take baselines, tick every interval until the stop,
//! take the last readings, emit every layer's tables, and write the
//! recording atomically, also when the workload fails or the user
//! interrupts. Nothing here knows a layer.

mod checkpoint;
mod edge;
mod emit;
mod end;
mod options;
mod preflight;
mod programs;
mod recorder;
mod run;
mod session;
mod start;
mod watch;
mod window;

pub use options::RecordOptions;
pub use preflight::{Prepared, preflight};
pub use recorder::Recorder;
pub use run::RecordOutcome;
use run::run;
use session::{Control, runtime};
pub use session::{OUTPUT_FILE, Scrape, Scraped, Stop};

use crate::{
    Result, layers,
    probes::{self, Capabilities, ProbeStatus},
};

/// A live session for `vtrace serve`: probes attached until SIGINT/SIGTERM,
/// read at each [`Scrape`] that `scrapes` brings; `attached` is told once
/// they are. Writes nothing.
pub fn live(
    opts: &RecordOptions,
    scrapes: tokio::sync::mpsc::Receiver<Scrape>,
    attached: std::sync::mpsc::Sender<()>,
) -> Result<()> {
    let prepared = preflight(opts)?;
    runtime()?.block_on(async {
        let mut control = Control::command_line()?;
        control.scrapes = Some(scrapes);
        control.attached = Some(attached);
        run(opts, prepared, control).await.map(|_| ())
    })
}

/// Records until the command exits, the duration passes, or SIGINT/SIGTERM.
pub fn record(opts: &RecordOptions) -> Result<RecordOutcome> {
    let prepared = preflight(opts)?;
    // Signal handlers need the runtime's reactor: installed inside it.
    runtime()?.block_on(async { run(opts, prepared, Control::command_line()?).await })
}

/// `vtrace probes`: every layer's catalog judged against this kernel (with
/// privilege, also whether fentry programs load).
pub fn probe_plan() -> Vec<ProbeStatus> {
    let mut caps = Capabilities::detect();
    if crate::privileges::check().is_ok()
        && let Ok(mut ebpf) = crate::ebpf::load(&layers::kernel_config(&caps))
    {
        caps.try_fentry(&mut ebpf);
    }
    probes::plan(&caps, &layers::catalog())
}
