//! Privilege check before anything is loaded, so a user without rights gets
//! one clear message instead of an EPERM from deep inside the loader.
//!
//! What `record` needs, and why (checked with a process holding only these,
//! tests/tests/privileges.rs):
//! - CAP_BPF: load programs and create maps;
//! - CAP_PERFMON: attach tracepoints, kprobes and perf events, read kernel
//!   memory from programs;
//! - CAP_DAC_READ_SEARCH, when not root: tracefs is mode 0700 (event ids and
//!   format files).
//!
//! Optional: CAP_SYS_ADMIN (the kernel's BPF run-time statistics, vtrace's
//! own cost per program; without it the report says it was not measured,
//! and it stands for CAP_BPF and CAP_PERFMON), CAP_SYS_PTRACE (the fds of
//! other users' processes: the taps a VMM of another user holds). Memory for
//! maps is charged to the cgroup (Linux 5.11 on): no CAP_SYS_RESOURCE.
//! `vtrace lab` needs root.

use crate::{Error, Result};

const CAP_DAC_READ_SEARCH: u32 = 2;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// Effective capability set of this process, from /proc/self/status.
pub fn effective_caps() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0)
}

pub fn can_trace(caps: u64) -> bool {
    let has = |c: u32| caps & (1u64 << c) != 0;
    has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON))
}

/// The capabilities `record` needs that `caps` lacks (by name), for uid `uid`.
pub fn missing(caps: u64, uid: u32) -> Vec<&'static str> {
    let has = |c: u32| caps & (1u64 << c) != 0;
    let mut out = Vec::new();
    if !has(CAP_SYS_ADMIN) {
        if !has(CAP_BPF) {
            out.push("CAP_BPF");
        }
        if !has(CAP_PERFMON) {
            out.push("CAP_PERFMON");
        }
    }
    if uid != 0 && !has(CAP_DAC_READ_SEARCH) {
        out.push("CAP_DAC_READ_SEARCH");
    }
    out
}

pub fn check() -> Result<()> {
    let lacking = missing(effective_caps(), unsafe { libc::geteuid() });
    if lacking.is_empty() {
        Ok(())
    } else {
        Err(Error::MissingPrivilege {
            missing: lacking.join(", "),
        })
    }
}

/// `vtrace lab` changes the machine (namespaces, mounts, cgroups): root only.
pub fn check_root() -> Result<()> {
    if unsafe { libc::geteuid() } == 0 && effective_caps() & (1u64 << CAP_SYS_ADMIN) != 0 {
        Ok(())
    } else {
        Err(Error::LabNeedsRoot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_sets() {
        assert!(can_trace(1 << CAP_SYS_ADMIN));
        assert!(can_trace((1 << CAP_BPF) | (1 << CAP_PERFMON)));
        assert!(!can_trace(1 << CAP_BPF));
        assert!(!can_trace(0));
        assert_eq!(missing(0, 1000), ["CAP_BPF", "CAP_PERFMON", "CAP_DAC_READ_SEARCH"]);
        assert!(missing((1 << CAP_BPF) | (1 << CAP_PERFMON), 0).is_empty());
        assert_eq!(
            missing((1 << CAP_BPF) | (1 << CAP_PERFMON), 65534),
            ["CAP_DAC_READ_SEARCH"]
        );
    }
}
