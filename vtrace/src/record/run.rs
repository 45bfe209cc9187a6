//! One recording, as the steps it takes: choose the layers, load and start
//! them, attach their probes and take the baselines, start the workload,
//! tick until the stop (checkpoints, a live session's reads), take the last
//! readings, attribute, emit every layer's tables with vtrace's own cost,
//! and write. Nothing here knows a layer.

use std::{
    path::PathBuf,
    time::{SystemTime, UNIX_EPOCH},
};

use aya::Ebpf;

use super::{
    RecordOptions,
    checkpoint::Checkpoints,
    preflight::Prepared,
    session::{Control, Stop, WorkloadChild},
    watch::InstanceWatch,
};
use crate::{
    Result,
    collectors::bpf_stats::Calibration,
    layers::{Collector, Layer, Request, Setup},
    platforms::{Instance, Profile, SystemSnapshot},
    probes::{Capabilities, ProbeSpec, ProbeStatus},
    recording::{Metadata, OutputSlot, Overhead, ProgramRow, Recording},
};

#[derive(Debug)]
pub struct RecordOutcome {
    pub path: PathBuf,
    /// The command's exit status as a shell reports it (128+signal when killed), 0 without a command.
    pub exit_code: i32,
    pub recording: Recording,
}

/// One recording. Failing before its probes are attached, it drops
/// `control`, and with it the channel a [`super::Recorder`] waits on: the
/// recorder then takes the typed error from this function's result.
pub(super) async fn run(opts: &RecordOptions, prepared: Prepared, mut control: Control) -> Result<RecordOutcome> {
    let mut rec = Session::new(opts, prepared);
    let running = rec.choose_layers();
    let mut live = rec.load(running)?;
    let mut stats = rec.stats_window();
    rec.attach(&mut live, &mut control)?;
    rec.step("attach");
    let mut window = rec.start_workload(&live);
    let stop = rec.until_stop(&mut live, &mut stats, &mut window, &mut control).await?;
    if opts.live {
        // Nothing to write: the programs detach.
        crate::ebpf::unload(live.ebpf, live.uprobe_links);
        return Ok(RecordOutcome {
            path: PathBuf::new(),
            exit_code: 0,
            recording: Recording::default(),
        });
    }
    let bpf_stats_coverage = stats.finish();
    let exit_code = rec.finish_workload(&mut window, &stop, &mut control).await;
    rec.step_ended = std::time::Instant::now();
    let end = rec.read_end(live, &window, bpf_stats_coverage).await?;
    rec.step("read_end");
    let attribution = rec.attribute(&window, &end);
    let recording = rec.emit(&window, &end, &attribution, control.own_threads, &stop)?;
    let outcome = rec.write(recording, exit_code);
    let _ = end.detaching.join();
    outcome
}

/// What a recording holds from its start to its write.
pub(super) struct Session<'o> {
    pub(super) opts: &'o RecordOptions,
    pub(super) asked: Request,
    pub(super) caps: Capabilities,
    pub(super) slot: OutputSlot,
    pub(super) profiles: Vec<Profile>,
    pub(super) system: SystemSnapshot,
    pub(super) instances_at_start: Vec<Instance>,
    pub(super) notes: Vec<String>,
    /// vtrace's own CPU when this recording's preflight began.
    pub(super) usage_at_preflight: Overhead,
    /// vtrace's own steps so far (`Overhead::setup_steps_ns`), and when
    /// the last one ended.
    pub(super) steps: Vec<(String, u64)>,
    pub(super) step_ended: std::time::Instant,
}

/// The eBPF side while it runs: the object, the layers and their collectors.
pub(super) struct Live {
    pub(super) ebpf: Ebpf,
    /// The uprobes' links, each its own (`probes::attach_all`).
    pub(super) uprobe_links: Vec<aya::programs::uprobe::UProbeLink>,
    pub(super) running: Vec<&'static dyn Layer>,
    pub(super) specs: Vec<ProbeSpec>,
    pub(super) collectors: Vec<Box<dyn Collector>>,
    pub(super) probes: Vec<ProbeStatus>,
    pub(super) calibration: Calibration,
    pub(super) start_unix: u64,
    pub(super) start_mono: u64,
}

/// The workload's window: from the command's start to the stop.
pub(super) struct Window {
    pub(super) child: WorkloadChild,
    /// The command could not start: the recording stops at once.
    pub(super) failed_to_start: Option<Stop>,
    pub(super) watch: InstanceWatch,
    /// What is known at the start, journaled at once.
    pub(super) meta: Metadata,
    pub(super) checkpoints: Checkpoints,
    /// vtrace's own CPU is counted from here.
    pub(super) usage_at_start: Overhead,
}

/// The readings at the end, probes detaching.
pub(super) struct Ending {
    /// Every program's detach (crate::ebpf::unload), joined once written.
    pub(super) detaching: std::thread::JoinHandle<()>,
    pub(super) collectors: Vec<Box<dyn Collector>>,
    pub(super) probes: Vec<ProbeStatus>,
    pub(super) programs: Vec<ProgramRow>,
    pub(super) calibration: Calibration,
    pub(super) bpf_stats_coverage: f64,
    pub(super) system: SystemSnapshot,
    pub(super) usage_at_end: Overhead,
    pub(super) start_mono: u64,
    pub(super) end_mono: u64,
    pub(super) end_unix: u64,
}

impl<'o> Session<'o> {
    fn new(opts: &'o RecordOptions, prepared: Prepared) -> Self {
        let Prepared {
            slot,
            profiles,
            system,
            instances,
            usage_at_preflight,
            started,
        } = prepared;
        let caps_from = std::time::Instant::now();
        let caps = Capabilities::detect();
        let steps = vec![
            ("preflight".to_string(), (caps_from - started).as_nanos() as u64),
            ("kernel".to_string(), caps_from.elapsed().as_nanos() as u64),
        ];
        Session {
            opts,
            asked: opts.request(),
            caps,
            slot,
            profiles,
            system,
            instances_at_start: instances,
            notes: Vec::new(),
            usage_at_preflight,
            steps,
            step_ended: std::time::Instant::now(),
        }
    }

    /// Step `name` of vtrace's own (`Overhead::setup_steps_ns`) ended now.
    pub(super) fn step(&mut self, name: &str) {
        let now = std::time::Instant::now();
        self.steps
            .push((name.to_string(), (now - self.step_ended).as_nanos() as u64));
        self.step_ended = now;
    }

    /// What the layers see while the recording is set up.
    pub(super) fn setup(&self, start_mono: u64) -> Setup<'_> {
        Setup {
            asked: &self.asked,
            caps: &self.caps,
            system: &self.system,
            staging: self.slot.staging(),
            start_mono,
        }
    }
}

pub(super) fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

pub(super) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}
