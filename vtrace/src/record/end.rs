//! A recording's end: the last readings, who owned what, every layer's
//! tables with vtrace's own cost, and the write.

use super::{
    edge,
    emit::{emit_all, self_usage},
    preflight::platform_instances,
    programs,
    run::{Ending, Live, RecordOutcome, Session, Window, unix_ns},
    session::Stop,
};
use crate::{
    Result,
    layers::{self, Emit, End, Facts, cpu::monotonic_ns},
    platforms::{self, SystemSnapshot, attribute::Attribution},
    recording::{self, Overhead, Recording, TableSet},
};

impl Session<'_> {
    /// The last readings, taken like the baselines, then every program's
    /// cost; the window closes after every layer's last reading, so that CPU
    /// time (`close`) covers all they counted. The programs detach here.
    pub(super) async fn read_end(
        &mut self,
        mut live: Live,
        window: &Window,
        bpf_stats_coverage: f64,
    ) -> Result<Ending> {
        // A workload's last packets (TCP close) land before anything is read.
        if window.child.child.is_some()
            && let Some(settle) = live.collectors.iter().map(|c| c.settle()).max()
        {
            tokio::time::sleep(settle).await;
        }
        // One look at the system after the run: the devices' kinds for their
        // counters, and the platform's processes and threads started meanwhile.
        let system = SystemSnapshot::live();
        let end = End { system: &system };
        self.notes.extend(edge::read_edge(&mut live.collectors, "end", |c| {
            c.checkpoint(&end).map(drop)
        })?);
        for c in &mut live.collectors {
            c.end(&live.ebpf, &end)?;
        }
        let end_mono = monotonic_ns();
        let end_unix = unix_ns();
        let programs = programs::read(&live.ebpf, &live.probes);
        for c in &mut live.collectors {
            c.close(end_mono)?;
        }
        let usage_at_end = self_usage();
        // The programs detach while the recording is written (their
        // detaches wait for the kernel; run() joins them).
        let (ebpf, links) = (live.ebpf, live.uprobe_links);
        let detaching = std::thread::spawn(move || crate::ebpf::unload(ebpf, links));
        Ok(Ending {
            detaching,
            collectors: live.collectors,
            probes: live.probes,
            programs,
            calibration: live.calibration,
            bpf_stats_coverage,
            system,
            usage_at_end,
            start_mono: live.start_mono,
            end_mono,
            end_unix,
        })
    }

    /// Who owned what: the platform's instances at the start, seen during
    /// the run, and at the end (processes and threads started meanwhile).
    pub(super) fn attribute(&mut self, window: &Window, end: &Ending) -> Attribution {
        let opts = self.opts;
        let instances_at_end = if opts.platform == platforms::HOST {
            Vec::new()
        } else {
            platform_instances(opts, &self.profiles, &end.system).unwrap_or_default()
        };
        let no_instance = opts.platform != platforms::HOST
            && self.instances_at_start.is_empty()
            && window.watch.sightings.is_empty()
            && instances_at_end.is_empty();
        if no_instance {
            self.notes.push(format!(
                "no {} instance ran during the recording: nothing is attributed to it",
                opts.platform
            ));
        }
        let sightings = std::iter::once(self.instances_at_start.clone())
            .chain(window.watch.sightings.iter().cloned())
            .chain([instances_at_end]);
        let attribution = Attribution::new(self.profiles.clone(), sightings.collect());
        self.notes.extend(instance_notes(&attribution));
        self.notes.extend(window.checkpoints.notes());
        attribution
    }

    /// Every layer's tables, vtrace's own cost and the programs' table, into
    /// the recording's metadata as it stood at the start.
    pub(super) fn emit(
        &mut self,
        window: &Window,
        end: &Ending,
        attribution: &Attribution,
        own_threads: Option<&'static str>,
        stop: &Stop,
    ) -> Result<Recording> {
        let usage_total = self_usage();
        let (at_start, at_end) = (&window.usage_at_start, &end.usage_at_end);
        let mut overhead = Overhead {
            vtrace_user_ns: at_end.vtrace_user_ns.saturating_sub(at_start.vtrace_user_ns),
            vtrace_system_ns: at_end.vtrace_system_ns.saturating_sub(at_start.vtrace_system_ns),
            vtrace_peak_rss_kib: usage_total.vtrace_peak_rss_kib,
            ..Default::default()
        };
        window.checkpoints.count(&mut overhead);
        overhead.vtrace_setup_ns = at_start
            .vtrace_cpu_ns()
            .saturating_sub(self.usage_at_preflight.vtrace_cpu_ns());
        overhead.setup_steps_ns = self.steps.clone();
        let parts = Emit {
            asked: &self.asked,
            caps: &self.caps,
            system: &self.system,
            attribution,
            probes: &end.probes,
            workload: window.child.workload.as_ref(),
            own_threads,
            facts: &Facts::default(),
            tables: &TableSet::default(),
            checkpoint: false,
        };
        let mut tables = emit_all(end.collectors.iter(), &parts, &mut overhead, &mut self.notes)?;
        let cpus = aya::util::nr_cpus().map(|n| n as u32).unwrap_or(1);
        let wall_ns = end.end_mono.saturating_sub(end.start_mono);
        program_cost(&mut overhead, end, &tables, wall_ns, cpus);
        tables.put(end.programs.clone());
        let mut meta = window.meta.clone();
        meta.workload = window.child.workload.clone();
        meta.stopped_by = stop.describe();
        meta.end_unix_ns = end.end_unix;
        meta.wall_ns = wall_ns;
        meta.host.cpus = cpus;
        meta.probes = end.probes.clone();
        meta.overhead = overhead;
        meta.notes = std::mem::take(&mut self.notes);
        Ok(Recording {
            meta,
            tables,
            net_events: recording::NetEvents::default(),
            read_notes: Vec::new(),
            guests: Vec::new(),
        })
    }

    /// The recording, written atomically.
    pub(super) fn write(self, mut rec: Recording, exit_code: i32) -> Result<RecordOutcome> {
        let path = recording::write(&self.slot, &mut rec)?;
        Ok(RecordOutcome {
            path,
            exit_code,
            recording: rec,
        })
    }
}

/// The BPF programs' cost over the whole recording (their calibrated run
/// time, the share of the CPUs it took) and vtrace's against the machine's busy time.
fn program_cost(overhead: &mut Overhead, end: &Ending, tables: &TableSet, wall_ns: u64, cpus: u32) {
    overhead.bpf_stats_floor_ns = end.calibration.floor_ns;
    overhead.bpf_hook_ns = end.calibration.hook_ns;
    let bpf_run_time_ns = end
        .programs
        .iter()
        .map(|p| crate::report::whole_run_time_ns(p, overhead))
        .sum();
    overhead.bpf_run_time_ns = bpf_run_time_ns;
    overhead.bpf_run_count = end.programs.iter().map(|p| p.events).sum();
    overhead.bpf_stats_coverage = end.bpf_stats_coverage;
    overhead.bpf_cpu_fraction = bpf_run_time_ns as f64 / (wall_ns.max(1) as f64 * cpus.max(1) as f64);
    let busy_ns: u64 = tables
        .rows::<layers::cpu::CpuRow>()
        .iter()
        .map(|c| layers::cpu::analysis::StateTimes::of_cpu(c).busy_ns())
        .sum();
    overhead.set_self_cost(wall_ns * cpus.max(1) as u64, busy_ns);
}

/// One note per platform instance: its processes, threads and devices.
fn instance_notes(attribution: &Attribution) -> Vec<String> {
    attribution
        .instances()
        .iter()
        .map(|i| {
            let devices: Vec<String> = i.devices.iter().map(|d| format!("{} ({})", d.name, d.role)).collect();
            let passthrough: String = i
                .passthrough
                .iter()
                .map(|d| match (&d.pf, d.vf_index) {
                    (Some(pf), Some(vf)) => format!(
                        "; passes through VF {} (vf {vf} of {pf}, MAC {}, IOMMU group {})",
                        d.pci,
                        d.mac.as_deref().unwrap_or("unknown"),
                        d.group
                    ),
                    _ => format!("; passes through PCI {} (IOMMU group {})", d.pci, d.group),
                })
                .collect();
            format!(
                "instance {} ({}): {} processes, {} threads, devices: {}{passthrough}",
                i.id,
                i.variant,
                i.processes.len(),
                i.threads.len(),
                if devices.is_empty() {
                    "none".to_string()
                } else {
                    devices.join(", ")
                }
            )
        })
        .collect()
}
