//! Self-overhead: the kernel's BPF run-time statistics (run count and run
//! time per program), enabled only while recording, as bpftop does.

use std::os::fd::OwnedFd;

use aya::{Ebpf, sys::Stats};

use crate::{Error, Result, probes::ProbeStatus, recording::ProgramRow};

/// Keeps kernel BPF statistics enabled until dropped.
pub struct StatsGuard(#[allow(dead_code)] OwnedFd);

pub fn enable() -> Result<StatsGuard> {
    aya::sys::enable_stats(Stats::RunTime)
        .map(StatsGuard)
        .map_err(|e| Error::Ebpf(format!("cannot enable BPF run-time statistics: {e}")))
}

/// Run count and run time of each attached program.
pub fn read(ebpf: &Ebpf, probes: &[ProbeStatus]) -> Vec<ProgramRow> {
    probes
        .iter()
        .filter_map(|p| {
            let name = p.program.as_deref()?;
            let info = ebpf.program(name)?.info().ok()?;
            Some(ProgramRow {
                probe: p.id.clone(),
                program: name.to_string(),
                method: p.method.clone().unwrap_or_default(),
                run_count: info.run_count(),
                run_time_ns: info.run_time().as_nanos() as u64,
            })
        })
        .collect()
}
