//! What each of vtrace's programs cost, from the kernel's BPF statistics
//! and the calibration a recording kept.

use crate::{
    collectors::bpf_stats::Calibration,
    recording::{Overhead, ProgramRow},
};

/// ns per event of a program; 0 when it never ran.
pub fn ns_per_event(run_time_ns: u64, run_count: u64) -> f64 {
    if run_count == 0 {
        0.0
    } else {
        run_time_ns as f64 / run_count as f64
    }
}

/// A program's real cost per run: what the kernel's statistics measured,
/// less what they add to every measured run themselves, plus the real cost
/// of running an empty program at a hook, dispatch included, which no
/// statistic counts (both measured at start-up: `bpf_stats::calibrate`).
pub fn calibrated_ns_per_event(p: &ProgramRow, ov: &Overhead) -> f64 {
    calibration(ov).ns_per_run(p.run_time_ns, p.run_count)
}

/// A program's run time over the whole recording: its exact number of runs
/// times its calibrated cost per run, measured while the statistics were on.
pub fn whole_run_time_ns(p: &ProgramRow, ov: &Overhead) -> u64 {
    calibration(ov).whole_run_time_ns(p.run_time_ns, p.run_count, p.events)
}

/// The calibration a recording kept (none before it was measured: 0 and 0).
fn calibration(ov: &Overhead) -> Calibration {
    Calibration {
        floor_ns: ov.bpf_stats_floor_ns,
        hook_ns: ov.bpf_hook_ns,
    }
}
