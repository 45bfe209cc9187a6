//! The embedded eBPF object and how it is loaded.

use aya::{Ebpf, EbpfLoader};

use vtrace_common::Config;

use crate::{Error, Result};

/// vtrace-ebpf, compiled by build.rs.
pub const OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/vtrace"));

/// The running kernel's BTF (/sys/kernel/btf/vmlinux), parsed once a
/// process: aya parsed it again for each object load and each BTF-typed
/// program (a dozen parses of megabytes a recording; seconds in an emulated
/// guest). Err: why it cannot be read.
pub fn kernel_btf() -> std::result::Result<&'static aya::Btf, String> {
    static BTF: std::sync::OnceLock<std::result::Result<aya::Btf, String>> = std::sync::OnceLock::new();
    BTF.get_or_init(|| aya::Btf::from_sys_fs().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(Clone::clone)
}

/// Loads the object (maps created, programs not yet loaded into the kernel)
/// with `config` written into its one `CONFIG` global.
pub fn load(config: &Config) -> Result<Ebpf> {
    if OBJECT.is_empty() {
        return Err(Error::Ebpf(
            "this vtrace was built without its eBPF object (AYA_BUILD_SKIP=1, for lints only): build it again \
             without AYA_BUILD_SKIP"
                .into(),
        ));
    }
    raise_memlock_limit();
    let small = std::env::var("VTRACE_MAP_ENTRIES").unwrap_or_default();
    let mut loader = EbpfLoader::new();
    // Without it aya reads and parses the kernel's BTF itself.
    loader.btf(kernel_btf().ok());
    loader.override_global("CONFIG", config, true);
    // The per-packet event ring costs 64 MiB of kernel memory: only with --events.
    loader.map_max_entries(
        "NET_EVENTS",
        if config.net.net_events_on != 0 { 64 << 20 } else { 4096 },
    );
    // Maps made small on purpose, so that a test sees each layer's losses
    // counted and reported (tests/tests/losses.rs): "NAME=ENTRIES,...".
    for item in small.split(',').filter(|i| !i.is_empty()) {
        let parsed = item
            .split_once('=')
            .and_then(|(name, n)| Some((name, n.parse::<u32>().ok()?)));
        let Some((name, entries)) = parsed else {
            return Err(Error::BadArgument(format!(
                "VTRACE_MAP_ENTRIES: '{item}' is not MAP=ENTRIES (e.g. RUNQ_STATS=1)"
            )));
        };
        loader.map_max_entries(name, entries);
    }
    loader
        .load(OBJECT)
        .map_err(|e| Error::Ebpf(format!("loading the eBPF object: {e}")))
}

/// Detaches and unloads every program of `ebpf` at once, and every link
/// of `links` (taken from their programs), then frees its maps. Each
/// tracepoint's or uprobe's detach waits for RCU grace periods (75-100 ms
/// each on this machine, more in an emulated guest): one after the other
/// they cost a recording a second or more at its end; waited for together
/// they share them.
pub fn unload(mut ebpf: Ebpf, links: Vec<aya::programs::uprobe::UProbeLink>) {
    use aya::programs::Program;
    std::thread::scope(|s| {
        for link in links {
            s.spawn(move || drop(link));
        }
        for (_, program) in ebpf.programs_mut() {
            s.spawn(move || {
                // Not loaded, or not attached: nothing to wait for.
                let _ = match program {
                    Program::TracePoint(p) => p.unload(),
                    Program::RawTracePoint(p) => p.unload(),
                    Program::BtfTracePoint(p) => p.unload(),
                    Program::KProbe(p) => p.unload(),
                    Program::UProbe(p) => p.unload(),
                    Program::PerfEvent(p) => p.unload(),
                    Program::FEntry(p) => p.unload(),
                    Program::FExit(p) => p.unload(),
                    _ => Ok(()),
                };
            });
        }
    });
}

/// Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK.
fn raise_memlock_limit() {
    let rlim = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &rlim) };
}
