//! A recording's start: the layers it runs, the eBPF object they configure
//! and load, their collectors, their probes attached and baselines taken.

use super::{
    edge,
    run::{Live, Session, unix_ns},
    session::Control,
};
use crate::{
    Error, Result,
    collectors::bpf_stats::{self, Calibration, SelfStats, StatsWindow},
    layers::{self, Attached, Layer, cpu::monotonic_ns},
    probes::{self, offsets},
};

impl Session<'_> {
    /// The layers this recording asked for that can run here; a note for each other.
    pub(super) fn choose_layers(&mut self) -> Vec<&'static dyn Layer> {
        let mut running = Vec::new();
        for layer in layers::REGISTRY.iter().copied().filter(|l| l.wanted(&self.asked)) {
            match layer.can_run(&self.setup(0)) {
                Ok(()) => running.push(layer),
                Err(why) => self.notes.push(format!("layer {} skipped: {why}", layer.name())),
            }
        }
        running
    }

    /// Each layer configures the eBPF object, which is loaded (the BPF
    /// statistics' floor measured), then their collectors start: the window
    /// starts when the layers do.
    pub(super) fn load(&mut self, running: Vec<&'static dyn Layer>) -> Result<Live> {
        let kernel = offsets::KernelLayout::of(&self.caps);
        let mut config = vtrace_common::Config::default();
        for layer in &running {
            layer.offsets(&kernel, &mut config);
            layer.configure(&self.setup(0), &mut config);
        }
        let mut specs = Vec::new();
        for layer in &running {
            specs.extend(layer.probes(&self.setup(0), &config)?);
        }
        self.step("configure");
        let mut ebpf = crate::ebpf::load(&config)?;
        let mut calibration = Calibration::default();
        if self.opts.self_stats != SelfStats::Off {
            match bpf_stats::calibrate(&mut ebpf) {
                Ok(c) => calibration = c,
                Err(e) => self.notes.push(format!(
                    "BPF statistics floor not measured ({e}): run times are as measured"
                )),
            }
        }
        self.step("load");
        let start_unix = unix_ns();
        let start_mono = monotonic_ns();
        let mut collectors = Vec::new();
        for layer in &running {
            collectors.push(layer.start(&mut ebpf, &self.setup(start_mono), &config)?);
        }
        Ok(Live {
            ebpf,
            uprobe_links: Vec::new(),
            running,
            specs,
            collectors,
            probes: Vec::new(),
            calibration,
            start_unix,
            start_mono,
        })
    }

    /// The kernel's BPF statistics (vtrace's own cost per program), on as `--self-stats` says.
    pub(super) fn stats_window(&mut self) -> StatsWindow {
        let stats = StatsWindow::start(self.opts.self_stats, self.opts.interval);
        if let Some(e) = &stats.error {
            self.notes.push(format!("self-overhead unknown: {e}"));
        }
        if self.opts.self_stats == SelfStats::Off {
            self.notes
                .push("BPF statistics off (--self-stats off): vtrace's own cost per program was not measured".into());
        }
        stats
    }

    /// The catalog's probes, the CPU engine's first; then what layers attach
    /// themselves (perf events); then every layer's baseline. Whoever waits
    /// for the probes is told.
    pub(super) fn attach(&mut self, live: &mut Live, control: &mut Control) -> Result<()> {
        live.probes = probes::attach_all(&mut live.ebpf, &self.caps, &live.specs, &mut live.uprobe_links);
        // A uprobe the user asked for by name must attach (a missing symbol).
        if let Some(p) = live
            .probes
            .iter()
            .find(|p| (p.id.starts_with("uprobe:") || p.id.starts_with("uretprobe:")) && !p.available)
        {
            return Err(Error::BadArgument(format!(
                "--uprobe {}: {}",
                p.id.split_once(':').map_or("", |(_, rest)| rest),
                p.reason.clone().unwrap_or_default()
            )));
        }
        for c in &mut live.collectors {
            live.probes.extend(c.attach(&mut live.ebpf)?);
        }
        let attached = Attached { probes: &live.probes };
        self.notes.extend(edge::read_edge(&mut live.collectors, "start", |c| {
            c.baseline(&attached)
        })?);
        // A set-up longer than an interval (agents attaching in guests take
        // seconds) closes an interval of its own as the workload starts:
        // else the workload's first interval would hold the whole set-up.
        // A shorter one adds no row.
        let now = monotonic_ns();
        if !self.opts.live && now.saturating_sub(live.start_mono) > self.opts.interval.as_nanos() as u64 {
            for c in &mut live.collectors {
                c.tick(now)?;
            }
        }
        if let Some(tx) = control.attached.take() {
            let _ = tx.send(());
        }
        Ok(())
    }
}
