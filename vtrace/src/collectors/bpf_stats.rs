//! Self-overhead: the kernel's BPF run-time statistics (run count and run
//! time per program), enabled only while recording, as bpftop does.

use std::os::fd::{AsFd, OwnedFd};

use aya::{Ebpf, sys::Stats};

use crate::{Error, Result, probes::ProbeStatus, recording::ProgramRow};

/// Keeps kernel BPF statistics enabled until dropped.
pub struct StatsGuard(#[allow(dead_code)] OwnedFd);

pub fn enable() -> Result<StatsGuard> {
    aya::sys::enable_stats(Stats::RunTime)
        .map(StatsGuard)
        .map_err(|e| Error::Ebpf(format!("cannot enable BPF run-time statistics: {e}")))
}

/// Runs the kernel skipped because the program was already running on that
/// CPU (a softirq interrupting it, say): `recursion_misses` of bpf_prog_info,
/// which aya does not expose.
fn recursion_misses(fd: std::os::fd::BorrowedFd<'_>) -> u64 {
    use std::os::fd::AsRawFd;
    let mut info: aya_obj::generated::bpf_prog_info = unsafe { std::mem::zeroed() };
    #[repr(C)]
    struct InfoAttr {
        bpf_fd: u32,
        info_len: u32,
        info: u64,
    }
    let attr = InfoAttr {
        bpf_fd: fd.as_raw_fd() as u32,
        info_len: std::mem::size_of_val(&info) as u32,
        info: &mut info as *mut _ as u64,
    };
    const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET_INFO_BY_FD,
            &attr,
            std::mem::size_of::<InfoAttr>(),
        )
    };
    if rc == 0 { info.recursion_misses } else { 0 }
}

/// Run count and run time of each attached program.
pub fn read(ebpf: &Ebpf, probes: &[ProbeStatus]) -> Vec<ProgramRow> {
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
                run_count: info.run_count(),
                run_time_ns: info.run_time().as_nanos() as u64,
                recursion_misses: misses,
            })
        })
        .collect()
}
