//! The embedded eBPF object and how it is loaded.

use aya::{Ebpf, EbpfLoader};

use crate::{Error, Result, probes::offsets::KernelOffsets};

/// vtrace-ebpf, compiled by build.rs.
pub const OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/vtrace"));

/// Loads the object (maps created, programs not yet loaded into the kernel)
/// with the kernel offsets written into its globals.
pub fn load(offsets: &KernelOffsets) -> Result<Ebpf> {
    raise_memlock_limit();
    let globals = offsets.globals();
    let mut loader = EbpfLoader::new();
    for (name, value) in &globals {
        loader.override_global(name, value, true);
    }
    // The per-packet event ring costs 64 MiB of kernel memory: only with --events.
    loader.map_max_entries("NET_EVENTS", if offsets.net_events_on != 0 { 64 << 20 } else { 4096 });
    loader
        .load(OBJECT)
        .map_err(|e| Error::Ebpf(format!("loading the eBPF object: {e}")))
}

/// Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK.
fn raise_memlock_limit() {
    let rlim = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &rlim) };
}
