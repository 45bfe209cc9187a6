//! The workload's window: the command started and journaled, an interval's
//! tick (checkpoints), a live session's reads, until the stop.

use super::{
    checkpoint::{self, Checkpoints, checkpoint},
    emit::self_usage,
    run::{Live, Session, Window, hostname},
    session::{Control, Scraped, Signals, Stop, WorkloadChild},
    watch::InstanceWatch,
};
use crate::{
    Result,
    collectors::bpf_stats::StatsWindow,
    layers::{self, Emit, Facts, cpu::monotonic_ns},
    platforms::{self, SystemSnapshot, attribute::Attribution},
    recording::{self, FORMAT_NAME, Host, Metadata, Overhead, SCHEMA_VERSION, Selectors, TableSet},
    workload::ops::Operations,
};

impl Session<'_> {
    /// The command starts, and what is known now goes into the journal at
    /// once: a vtrace killed from here on leaves a recording `vtrace
    /// recover` can write.
    pub(super) fn start_workload(&mut self, live: &Live) -> Window {
        // Loading, verifying and attaching happened before the workload started.
        let usage_at_start = self_usage();
        let opts = self.opts;
        let mut watch = InstanceWatch::new(
            self.profiles.clone(),
            &opts.platform,
            opts.instance.as_deref(),
            &self.instances_at_start,
        );
        let (child, failed_to_start) = WorkloadChild::spawn(&opts.command, self.slot.staging(), opts.pass_output);
        watch.command(child.child.as_ref().and_then(|c| c.id()));
        let meta = Metadata {
            format: FORMAT_NAME.into(),
            schema_version: SCHEMA_VERSION,
            vtrace_version: env!("CARGO_PKG_VERSION").into(),
            host: Host {
                hostname: hostname(),
                kernel: self.caps.kernel_release.clone(),
                cpus: aya::util::nr_cpus().map(|n| n as u32).unwrap_or(1),
                clock_ticks: crate::collectors::procfs::clock_ticks(),
            },
            command_line: std::env::args().collect(),
            selectors: Selectors {
                platform: opts.platform.clone(),
                pids: opts.pids.clone(),
                comms: opts.comms.clone(),
                cgroups: opts.cgroups.iter().map(|p| p.display().to_string()).collect(),
            },
            workload: child.workload.clone(),
            stopped_by: String::new(),
            start_unix_ns: live.start_unix,
            start_mono_ns: live.start_mono,
            end_unix_ns: live.start_unix,
            wall_ns: 0,
            cpu_split: opts.switches.get::<layers::cpu::CpuOptions>().cpu_split.name().into(),
            mode: opts.mode(),
            layers: live.running.iter().map(|l| l.name().to_string()).collect(),
            tables: Default::default(),
            checksums: Default::default(),
            probes: live.probes.clone(),
            overhead: Overhead::default(),
            notes: self.notes.clone(),
            incomplete: None,
        };
        Window {
            child,
            failed_to_start,
            watch,
            meta,
            checkpoints: Checkpoints::new(opts.checkpoint),
            usage_at_start,
        }
    }

    /// Ticks every interval until the command exits, the duration passes,
    /// a signal or the embedding program says stop; checkpoints and a live
    /// session's reads on the way.
    pub(super) async fn until_stop(
        &mut self,
        live: &mut Live,
        stats: &mut StatsWindow,
        window: &mut Window,
        control: &mut Control,
    ) -> Result<Stop> {
        let opts = self.opts;
        if !opts.live {
            recording::journal::start(self.slot.staging(), &window.meta)?;
        }
        if let Some(stop) = window.failed_to_start.take() {
            return Ok(stop);
        }
        // Checkpoints see the platform's instances as they were at the start.
        let attribution_at_start = Attribution::new(self.profiles.clone(), vec![self.instances_at_start.clone()]);
        let deadline = match (&window.child.child, opts.duration) {
            (None, Some(d)) => Some(tokio::time::Instant::now() + d),
            _ => None,
        };
        let mut ticker = tokio::time::interval(opts.interval);
        ticker.tick().await; // the first tick fires at once
        loop {
            let stats_close = stats.closes_at();
            tokio::select! {
                s = window.child.wait() => return Ok(s),
                _ = async { tokio::time::sleep_until(deadline.unwrap()).await }, if deadline.is_some() => return Ok(Stop::Duration),
                name = Signals::next(&mut control.signals) => return Ok(Stop::Signal(name)),
                _ = async { control.stop.as_mut().unwrap().await }, if control.stop.is_some() => return Ok(Stop::Requested),
                scrape = async { control.scrapes.as_mut().unwrap().recv().await }, if control.scrapes.is_some() => {
                    match scrape {
                        Some(s) => {
                            let _ = s.reply.send(self.read_live(live, &window.usage_at_start));
                        }
                        // The exporter is gone: so is the session.
                        None => return Ok(Stop::Requested),
                    }
                }
                _ = async { tokio::time::sleep_until(stats_close.unwrap()).await }, if stats_close.is_some() => {
                    stats.close();
                }
                _ = ticker.tick() => self.tick(live, stats, window, &attribution_at_start, control.own_threads)?,
            }
        }
    }

    /// One interval: every layer's time series, the BPF statistics' window,
    /// the instance watch, and a checkpoint when one is due.
    pub(super) fn tick(
        &self,
        live: &mut Live,
        stats: &mut StatsWindow,
        window: &mut Window,
        attribution_at_start: &Attribution,
        own_threads: Option<&'static str>,
    ) -> Result<()> {
        let now = monotonic_ns();
        for c in &mut live.collectors {
            c.tick(now)?;
        }
        stats.tick();
        // A live session looks for instances at each read instead.
        if !self.opts.live {
            window.watch.tick();
        }
        if window.checkpoints.due() {
            let parts = Emit {
                asked: &self.asked,
                caps: &self.caps,
                system: &self.system,
                attribution: attribution_at_start,
                probes: &live.probes,
                workload: window.child.workload.as_ref(),
                own_threads,
                facts: &Facts::default(),
                tables: &TableSet::default(),
                checkpoint: true,
            };
            let began = std::time::Instant::now();
            let result = checkpoint(
                &mut live.collectors,
                &live.ebpf,
                &parts,
                &window.meta,
                (live.start_mono, now, &window.usage_at_start),
                self.slot.staging(),
            );
            window.checkpoints.done(result, began.elapsed());
        }
        Ok(())
    }

    /// The command's exit status once it has ended, its output kept, and the
    /// work it did (its own output says, or `--ops`).
    pub(super) async fn finish_workload(&self, window: &mut Window, stop: &Stop, control: &mut Control) -> i32 {
        let exit_code = window.child.finish(stop, &mut control.signals).await;
        let output = window.child.output(self.slot.staging()).await;
        if let Some(w) = window.child.workload.as_mut() {
            w.ops = match self.opts.ops {
                Some(n) => Some(Operations::given(n)),
                None => crate::workload::ops::parse(&w.command, &output),
            };
            w.fio = crate::workload::fio::jobs(&output);
        }
        exit_code
    }

    /// One read of a live session: every collector brought up to now, the
    /// instances running now, every layer's tables; then each collector
    /// forgets what it kept only for a recording.
    pub(super) fn read_live(&self, live: &mut Live, usage_at_start: &Overhead) -> Result<Scraped> {
        let now = monotonic_ns();
        for c in live.collectors.iter_mut() {
            c.tick(now)?;
        }
        let system = SystemSnapshot::live();
        let all = platforms::detect(&self.profiles, &system);
        let opts = self.opts;
        // `host` (serve's default): every platform's instances.
        let instances = if opts.platform == platforms::HOST {
            all
        } else {
            platforms::select(&self.profiles, all, &opts.platform, opts.instance.as_deref()).unwrap_or_default()
        };
        let attribution = Attribution::new(self.profiles.clone(), vec![instances.clone()]);
        let parts = Emit {
            asked: &self.asked,
            caps: &self.caps,
            system: &system,
            attribution: &attribution,
            probes: &live.probes,
            workload: None,
            own_threads: None,
            facts: &Facts::default(),
            tables: &TableSet::default(),
            checkpoint: true,
        };
        let checkpoint::Emitted {
            tables,
            overhead,
            notes,
            ..
        } = checkpoint::emit_now(&mut live.collectors, &live.ebpf, &parts, usage_at_start)?;
        for c in live.collectors.iter_mut() {
            c.forget()?;
        }
        Ok(Scraped {
            tables,
            instances,
            overhead,
            notes,
        })
    }
}
