//! The fs layer's probes (vtrace-ebpf/src/files.rs): file syscalls from
//! entry to exit, and overlayfs's credential switches.

use crate::probes::catalog::{ProbeSpec, Strategy};

/// In attach order: the exit hook last, so no call is seen ending unstarted.
///
/// The calls are followed at the syscall boundary. The VFS functions
/// (vfs_read, vfs_write, ...) would be cheaper to hook with fentry/fexit,
/// but they miss the path walk of open and stat and the fd lookup, which is
/// where overlayfs and FUSE spend; and on kernels without fentry or kprobes
/// (this repository's CI) only the syscall tracepoints attach. Attaching
/// either of them puts every syscall of every process on the kernel's slow
/// entry path (docs/overhead.md, "Costs no figure shows").
pub const FS: &[ProbeSpec] = &[
    ProbeSpec {
        id: "fs_sys_enter",
        layer: "fs",
        what: "file syscall entry: filesystem resolved from the fd or the path's start",
        strategies: &[
            Strategy::RawTracepoint {
                program: "raw_fs_sys_enter",
                tracepoint: "sys_enter",
            },
            Strategy::Tracepoint {
                program: "tp_fs_sys_enter",
                category: "raw_syscalls",
                name: "sys_enter",
            },
        ],
    },
    ProbeSpec {
        id: "fs_sys_exit",
        layer: "fs",
        what: "file syscall exit: counted per process, call and filesystem with its latency",
        strategies: &[
            Strategy::RawTracepoint {
                program: "raw_fs_sys_exit",
                tracepoint: "sys_exit",
            },
            Strategy::Tracepoint {
                program: "tp_fs_sys_exit",
                category: "raw_syscalls",
                name: "sys_exit",
            },
        ],
    },
    ProbeSpec {
        id: "ovl_override_creds",
        layer: "fs",
        what: "overlayfs takes its mounter's credentials (calls)",
        strategies: &[
            Strategy::FEntry {
                program: "fentry_ovl_override_creds",
                function: "ovl_override_creds",
            },
            Strategy::KProbe {
                program: "kprobe_ovl_override_creds",
                function: "ovl_override_creds",
            },
        ],
    },
    ProbeSpec {
        id: "ovl_revert_creds",
        layer: "fs",
        what: "overlayfs gives them back (calls)",
        strategies: &[
            Strategy::FEntry {
                program: "fentry_ovl_revert_creds",
                function: "ovl_revert_creds",
            },
            Strategy::KProbe {
                program: "kprobe_ovl_revert_creds",
                function: "ovl_revert_creds",
            },
        ],
    },
];
