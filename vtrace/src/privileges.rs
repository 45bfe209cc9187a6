//! Privilege check before anything is loaded, so a user without rights gets
//! one clear message instead of an EPERM from deep inside the loader.

use crate::{Error, Result};

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

pub fn check() -> Result<()> {
    if can_trace(effective_caps()) {
        Ok(())
    } else {
        Err(Error::MissingPrivilege)
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
    }
}
