//! What the running kernel offers, detected once: BTF, tracefs and its
//! events, kprobe/uprobe PMUs, kallsyms. Strategies are checked against it
//! so that `vtrace probes` can say why a strategy is unusable before trying.

use std::{
    collections::HashMap,
    fs,
    path::{Path, PathBuf},
    sync::{Arc, OnceLock},
};

use super::catalog::Strategy;

pub const BTF_PATH: &str = "/sys/kernel/btf/vmlinux";
pub const TRACEFS_PATHS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// Comma-separated attach methods to treat as unavailable (e.g. `raw_tp`),
/// to exercise fallback strategies on a kernel that has the preferred ones.
pub const SKIP_METHODS_ENV: &str = "VTRACE_SKIP_METHODS";

/// The running kernel's BTF (vmlinux), parsed once a process: a process
/// that records again and again (a bench's cells, an agent's recordings)
/// parses it once, and an agent parses it while it waits for the host
/// ([`warm`]). It cannot change while the kernel runs (modules' BTF are
/// files of their own, read where needed).
fn vmlinux_btf() -> &'static Result<Arc<btf_rs::Btf>, String> {
    static BTF: OnceLock<Result<Arc<btf_rs::Btf>, String>> = OnceLock::new();
    BTF.get_or_init(|| {
        if !Path::new(BTF_PATH).exists() {
            return Err(format!(
                "{BTF_PATH} missing (kernel built without CONFIG_DEBUG_INFO_BTF)"
            ));
        }
        // Read whole, then parsed: btf-rs's file reader seeks before each
        // read, 126 000 syscalls for vmlinux's BTF (seconds in an emulated
        // guest).
        fs::read(BTF_PATH)
            .map_err(|e| format!("cannot read {BTF_PATH}: {e}"))
            .and_then(|bytes| btf_rs::Btf::from_bytes(&bytes).map_err(|e| format!("cannot parse {BTF_PATH}: {e}")))
            .map(Arc::new)
    })
}

/// Parses the kernel's BTF now, both ways a recording needs it (btf-rs
/// for offsets, aya's for loading BTF-typed programs), ahead of the first
/// recording: a recording that starts meanwhile waits for this one parse.
/// Six seconds of an agent's start in a guest under nested emulation.
pub fn warm() {
    let _ = vmlinux_btf();
    let _ = crate::ebpf::kernel_btf();
}

pub struct Capabilities {
    pub kernel_release: String,
    /// Parsed vmlinux BTF, or why it is missing.
    pub btf: Result<Arc<btf_rs::Btf>, String>,
    /// Mounted tracefs, or why none is.
    pub tracefs: Result<PathBuf, String>,
    pub kprobe_pmu: bool,
    pub uprobe_pmu: bool,
    /// Functions kprobes can attach to (available_filter_functions), if
    /// readable, each with the module it is in (None: vmlinux). Read at the
    /// first kprobe or fentry strategy checked: a recording with neither
    /// never reads it (40 000 lines, 0.4 s in the stock-kernel guest).
    kprobe_functions: OnceLock<Option<HashMap<String, Option<String>>>>,
    /// Whether this kernel loads fentry programs, once tried (see `try_fentry`).
    pub fentry: Option<Result<(), String>>,
    /// The loaded KVM vendor module: kvm_intel, kvm_amd or kvm_pvm.
    pub kvm_module: Option<&'static str>,
}

impl Capabilities {
    pub fn detect() -> Self {
        let btf = vmlinux_btf().clone();
        let tracefs = find_tracefs()
            .ok_or_else(|| "tracefs is not mounted (mount -t tracefs nodev /sys/kernel/tracing)".to_string());
        Capabilities {
            kernel_release: fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
            btf,
            tracefs,
            kprobe_pmu: Path::new("/sys/bus/event_source/devices/kprobe/type").exists(),
            uprobe_pmu: Path::new("/sys/bus/event_source/devices/uprobe/type").exists(),
            kprobe_functions: OnceLock::new(),
            fentry: None,
            kvm_module: ["kvm_intel", "kvm_amd", "kvm_pvm"]
                .into_iter()
                .find(|m| Path::new("/sys/module").join(m).exists()),
        }
    }

    /// Finds out whether fentry programs load here by loading one of ours
    /// (it reads no argument) on a function every kernel has, then unloading it.
    pub fn try_fentry(&mut self, ebpf: &mut aya::Ebpf) {
        const PROGRAM: &str = "fentry_handle_tx";
        const FUNCTION: &str = "vfs_read";
        let result = (|| -> Result<(), String> {
            let btf = crate::ebpf::kernel_btf()?;
            let p: &mut aya::programs::FEntry = ebpf
                .program_mut(PROGRAM)
                .ok_or("no fentry program")?
                .try_into()
                .map_err(|e: aya::programs::ProgramError| e.to_string())?;
            p.load(FUNCTION, btf).map_err(|e| {
                let s = format!("{e:#}");
                if s.contains("Permission denied") || s.contains("os error 1)") {
                    "the kernel refuses fentry programs (EPERM)".to_string()
                } else {
                    format!(
                        "an fentry program on {FUNCTION} does not load: {}",
                        s.replace('\n', " ")
                    )
                }
            })?;
            p.unload().map_err(|e| e.to_string())
        })();
        self.fentry = Some(result);
    }

    /// available_filter_functions, read at the first call.
    fn kprobe_functions(&self) -> Option<&HashMap<String, Option<String>>> {
        self.kprobe_functions
            .get_or_init(|| {
                let t = self.tracefs.as_ref().ok()?;
                let text = fs::read_to_string(t.join("available_filter_functions")).ok()?;
                Some(
                    text.lines()
                        .filter_map(|l| {
                            let mut words = l.split_whitespace();
                            let function = words.next()?.to_string();
                            let module = words
                                .next()
                                .and_then(|m| m.strip_prefix('[')?.strip_suffix(']'))
                                .map(str::to_string);
                            Some((function, module))
                        })
                        .collect(),
                )
            })
            .as_ref()
    }

    /// The module a kernel function is in (None: vmlinux, or not known).
    fn module_of(&self, function: &str) -> Option<&str> {
        self.kprobe_functions()?.get(function)?.as_deref()
    }

    fn btf_has(&self, name: &str) -> Result<(), String> {
        let btf = self.btf.as_ref().map_err(|e| e.clone())?;
        match btf.resolve_ids_by_name(name) {
            Ok(ids) if !ids.is_empty() => Ok(()),
            _ => Err(format!("{name} not in kernel BTF")),
        }
    }

    /// Whether this kernel can use `strategy`, or why not.
    pub fn check(&self, strategy: &Strategy) -> Result<(), String> {
        if let Ok(skip) = std::env::var(SKIP_METHODS_ENV)
            && skip.split(',').any(|m| m.trim() == strategy.method())
        {
            return Err(format!("disabled by {SKIP_METHODS_ENV}"));
        }
        match *strategy {
            Strategy::FEntry { function, .. } => {
                if let Some(Err(why)) = &self.fentry {
                    return Err(why.clone());
                }
                if let Some(module) = self.module_of(function) {
                    return Err(format!(
                        "{function} is in module {module}: fentry needs the module's split BTF, which aya 0.14 does not load"
                    ));
                }
                self.btf_has(function)
            }
            Strategy::KProbe { function, .. } => {
                if !self.kprobe_pmu {
                    return Err("kprobes unavailable: no kprobe PMU (kernel built without CONFIG_KPROBES)".into());
                }
                match self.kprobe_functions() {
                    Some(f) if !f.contains_key(function) => {
                        Err(format!("{function} is not a traceable kernel function"))
                    }
                    _ => Ok(()),
                }
            }
            Strategy::BtfTracepoint { tracepoint, .. } | Strategy::RawTracepoint { tracepoint, .. } => self
                .btf_has(&format!("btf_trace_{tracepoint}"))
                .map_err(|_| format!("tracepoint {tracepoint} not in vmlinux BTF (a module's, or not in this kernel)")),
            Strategy::UProbe { binary, .. } => {
                if !self.uprobe_pmu {
                    return Err(
                        "uprobes unavailable: no uprobe PMU (kernel built without CONFIG_UPROBE_EVENTS)".into(),
                    );
                }
                super::catalog::resolve_binary(binary)
                    .map(|_| ())
                    .ok_or_else(|| format!("{binary} not found"))
            }
            Strategy::Tracepoint { category, name, .. } => {
                let tracefs = self.tracefs.as_ref().map_err(|e| e.clone())?;
                if tracefs.join("events").join(category).join(name).is_dir() {
                    Ok(())
                } else {
                    Err(format!("tracepoint {category}:{name} not in this kernel"))
                }
            }
        }
    }
}

fn find_tracefs() -> Option<PathBuf> {
    TRACEFS_PATHS
        .iter()
        .map(PathBuf::from)
        .find(|p| p.join("events").is_dir())
}

/// Makes sure tracefs is mounted (classic tracepoints need it to resolve event
/// ids), mounting it at /sys/kernel/tracing if needed.
pub fn ensure_tracefs() -> crate::Result<PathBuf> {
    if let Some(p) = find_tracefs() {
        return Ok(p);
    }
    let path = PathBuf::from(TRACEFS_PATHS[0]);
    let c = |s: &str| std::ffi::CString::new(s).unwrap();
    let rc = unsafe {
        libc::mount(
            c("nodev").as_ptr(),
            c(TRACEFS_PATHS[0]).as_ptr(),
            c("tracefs").as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(crate::Error::TracefsNotMounted {
            path,
            reason: std::io::Error::last_os_error().to_string(),
        });
    }
    Ok(path)
}
