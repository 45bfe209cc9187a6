//! The recording's `programs` table: vtrace's own cost per eBPF program,
//! from the kernel's readings (`collectors::bpf_stats`).

use std::os::fd::AsFd;

use aya::Ebpf;

use vtrace_common::COUNTED_HOOKS;

use crate::{
    collectors::bpf_stats::{hook_of, hook_runs, recursion_misses},
    probes::ProbeStatus,
    recording::ProgramRow,
};

/// Runs, run count and run time of each attached program.
pub fn read(ebpf: &Ebpf, probes: &[ProbeStatus]) -> Vec<ProgramRow> {
    let runs = hook_runs(ebpf);
    // A program attached at several points (the shared uprobe programs) is listed once.
    let mut seen = std::collections::HashSet::new();
    probes
        .iter()
        .filter_map(|p| {
            let name = p.program.as_deref()?;
            if !seen.insert(name) {
                return None;
            }
            let program = ebpf.program(name)?;
            let info = program.info().ok()?;
            let misses = program.fd().map(|fd| recursion_misses(fd.as_fd())).unwrap_or(0);
            Some(ProgramRow {
                probe: p.id.clone(),
                program: name.to_string(),
                method: p.method.clone().unwrap_or_default(),
                events: COUNTED_HOOKS
                    .iter()
                    .position(|h| *h == hook_of(name))
                    .and_then(|i| runs.get(i).copied())
                    .unwrap_or(0),
                run_count: info.run_count(),
                run_time_ns: info.run_time().as_nanos() as u64,
                recursion_misses: misses,
            })
        })
        .collect()
}
