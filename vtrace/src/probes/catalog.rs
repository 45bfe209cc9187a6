//! The probe registry: every probe point vtrace knows, its layer, and its
//! attach strategies in order of preference. Each strategy names the eBPF
//! program (in `vtrace-ebpf/src/<family>.rs`) that implements it.

/// One way to attach a probe. Ordered best-first in [`ProbeSpec::strategies`]:
/// fentry (cheapest, typed) > kprobe > tp_btf > raw_tp > tracepoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    FEntry {
        program: &'static str,
        function: &'static str,
    },
    KProbe {
        program: &'static str,
        function: &'static str,
    },
    BtfTracepoint {
        program: &'static str,
        tracepoint: &'static str,
    },
    RawTracepoint {
        program: &'static str,
        tracepoint: &'static str,
    },
    Tracepoint {
        program: &'static str,
        category: &'static str,
        name: &'static str,
    },
    /// A user-space function in `binary` (a path, or a file name searched in
    /// the usual library and binary directories); `size` tells what a call handles.
    UProbe {
        program: &'static str,
        binary: &'static str,
        symbol: &'static str,
        size: UprobeSize,
    },
}

/// Where a uprobe reads the size of what a call handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UprobeSize {
    None,
    /// An integer argument.
    Arg(u32),
    /// tot_len of an lwIP `struct pbuf *` argument.
    PbufArg(u32),
}

impl Strategy {
    pub fn method(&self) -> &'static str {
        match self {
            Strategy::FEntry { .. } => "fentry",
            Strategy::KProbe { program, .. } if program.starts_with("kret") => "kretprobe",
            Strategy::KProbe { .. } => "kprobe",
            Strategy::BtfTracepoint { .. } => "tp_btf",
            Strategy::RawTracepoint { .. } => "raw_tp",
            Strategy::Tracepoint { .. } => "tracepoint",
            Strategy::UProbe { program, .. } if program.starts_with("uret") => "uretprobe",
            Strategy::UProbe { .. } => "uprobe",
        }
    }

    pub fn program(&self) -> &'static str {
        match *self {
            Strategy::FEntry { program, .. }
            | Strategy::KProbe { program, .. }
            | Strategy::BtfTracepoint { program, .. }
            | Strategy::RawTracepoint { program, .. }
            | Strategy::Tracepoint { program, .. }
            | Strategy::UProbe { program, .. } => program,
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct ProbeSpec {
    pub id: &'static str,
    /// The probe family it belongs to, as its layer names it (`vtrace probes`'s
    /// `layer` column: a layer may have several, e.g. the CPU engine's sched,
    /// irq, softirq and syscall hooks).
    pub layer: &'static str,
    pub what: &'static str,
    pub strategies: &'static [Strategy],
}

/// raw_tp first (no record formatting, args straight from TP_PROTO), the
/// classic tracepoint as fallback (kernels without raw_tp, or a raw_tp that
/// fails to attach). With a leading `tp_btf`, a tp_btf program comes first:
/// BTF-typed arguments, so it reads the structs they point to with plain
/// loads instead of helper calls.
macro_rules! tracepoint_probe {
    ($($typed:ident)? $id:literal, $layer:expr, $what:literal, $category:literal) => {
        $crate::probes::catalog::ProbeSpec {
            id: $id,
            layer: $layer,
            what: $what,
            strategies: &[
                $(tracepoint_probe!(@$typed $id),)?
                $crate::probes::catalog::Strategy::RawTracepoint {
                    program: concat!("raw_", $id),
                    tracepoint: $id,
                },
                $crate::probes::catalog::Strategy::Tracepoint {
                    program: concat!("tp_", $id),
                    category: $category,
                    name: $id,
                },
            ],
        }
    };
    (@tp_btf $id:literal) => {
        $crate::probes::catalog::Strategy::BtfTracepoint {
            program: concat!("btf_", $id),
            tracepoint: $id,
        }
    };
}
pub(crate) use tracepoint_probe;

/// An event read through its classic record only (fields at offsets from
/// its format file): rare enough per second that the record costs little.
macro_rules! classic_tracepoint {
    ($id:literal, $layer:expr, $what:literal, $category:literal) => {
        $crate::probes::catalog::ProbeSpec {
            id: $id,
            layer: $layer,
            what: $what,
            strategies: &[$crate::probes::catalog::Strategy::Tracepoint {
                program: concat!("tp_", $id),
                category: $category,
                name: $id,
            }],
        }
    };
}
pub(crate) use classic_tracepoint;

/// A kvm/* event read through its classic record.
macro_rules! kvm_tracepoint {
    ($id:literal, $what:literal) => {
        $crate::probes::catalog::classic_tracepoint!($id, "kvm", $what, "kvm")
    };
}
pub(crate) use kvm_tracepoint;

/// A uprobe catalog entry on a function of a well-known binary.
macro_rules! uprobe_probe {
    ($id:literal, $layer:expr, $what:literal, $binary:literal, $symbol:literal, $size:expr) => {
        $crate::probes::catalog::ProbeSpec {
            id: $id,
            layer: $layer,
            what: $what,
            strategies: &[$crate::probes::catalog::Strategy::UProbe {
                program: "uprobe_call",
                binary: $binary,
                symbol: $symbol,
                size: $size,
            }],
        }
    };
}
pub(crate) use uprobe_probe;

/// A kernel function probed by fentry, else kprobe.
macro_rules! kfunc_probe {
    // Then, with `raw_tp`, where neither attaches, a raw tracepoint's program.
    ($id:literal, $layer:expr, $what:literal, $function:literal, $fentry:literal, $kprobe:literal
     $(, raw_tp $tracepoint:literal => $raw:literal)?) => {
        $crate::probes::catalog::ProbeSpec {
            id: $id,
            layer: $layer,
            what: $what,
            strategies: &[
                $crate::probes::catalog::Strategy::FEntry {
                    program: $fentry,
                    function: $function,
                },
                $crate::probes::catalog::Strategy::KProbe {
                    program: $kprobe,
                    function: $function,
                },
                $($crate::probes::catalog::Strategy::RawTracepoint {
                    program: $raw,
                    tracepoint: $tracepoint,
                },)?
            ],
        }
    };
}
pub(crate) use kfunc_probe;

/// Directories searched for a uprobe binary given by file name.
pub const UPROBE_SEARCH_PATH: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/lib/x86_64-linux-gnu",
    "/usr/lib",
    "/usr/local/lib",
    "/usr/bin",
    "/usr/local/bin",
    "/usr/sbin",
    "/bin",
];

/// Resolves a uprobe binary: a path as is, a file name in [`UPROBE_SEARCH_PATH`].
pub fn resolve_binary(binary: &str) -> Option<std::path::PathBuf> {
    if binary.contains('/') {
        let p = std::path::PathBuf::from(binary);
        return p.exists().then_some(p);
    }
    UPROBE_SEARCH_PATH
        .iter()
        .map(|d| std::path::Path::new(d).join(binary))
        .find(|p| p.exists())
}

/// `--uprobe BINARY:SYMBOL[:ret]`: a probe for any function (the return
/// probe adds latency). Strings live for the rest of the run.
pub fn user_uprobe(spec: &str) -> Result<Vec<ProbeSpec>, String> {
    let parts: Vec<&str> = spec.split(':').collect();
    let (binary, symbol, ret) = match parts.as_slice() {
        [b, s] => (*b, *s, false),
        [b, s, "ret"] => (*b, *s, true),
        _ => return Err(format!("--uprobe {spec}: expected BINARY:SYMBOL or BINARY:SYMBOL:ret")),
    };
    if binary.is_empty() || symbol.is_empty() {
        return Err(format!("--uprobe {spec}: expected BINARY:SYMBOL or BINARY:SYMBOL:ret"));
    }
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let base = std::path::Path::new(binary)
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (binary, symbol) = (leak(binary.to_string()), leak(symbol.to_string()));
    let mut out = vec![ProbeSpec {
        id: leak(format!("uprobe:{base}:{symbol}")),
        layer: "uprobe",
        what: "user-requested uprobe",
        strategies: Box::leak(Box::new([Strategy::UProbe {
            program: "uprobe_call",
            binary,
            symbol,
            size: UprobeSize::None,
        }])),
    }];
    if ret {
        // Must follow the entry probe: slots are given in order, and the
        // return program finds the entry time under the previous slot.
        out.push(ProbeSpec {
            id: leak(format!("uretprobe:{base}:{symbol}")),
            layer: "uprobe",
            what: "user-requested return probe (latency)",
            strategies: Box::leak(Box::new([Strategy::UProbe {
                program: "uretprobe_call",
                binary,
                symbol,
                size: UprobeSize::None,
            }])),
        });
    }
    Ok(out)
}
