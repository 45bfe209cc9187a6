//! KVM's own per-VM statistics (debugfs), sampled over the recording for a
//! cross-check of vtrace's counts.

use std::collections::BTreeMap;

use super::tables::KvmStatRow;

/// KVM's own per-VM counters (debugfs `kvm/<pid>-<fd>/<stat>`, summed over
/// the VM's vCPUs) that vtrace's events can be checked against.
pub const KVM_STATS: &[&str] = &[
    "exits",
    "io_exits",
    "mmio_exits",
    "halt_exits",
    "halt_wakeup",
    "irq_exits",
    "irq_injections",
    "signal_exits",
    "request_irq_exits",
    "insn_emulation",
    "hypercalls",
];

const KVM_DEBUGFS: &str = "/sys/kernel/debug/kvm";

/// KVM's statistics of every VM seen while recording: the first and last
/// value of each, sampled each interval (a VM's directory goes with the VM,
/// so one that lives less than an interval may be missed). Only debugfs
/// serves them to another process: the binary stats fd (KVM_GET_STATS_FD)
/// answers the VMM's own process only.
#[derive(Default)]
pub struct KvmStatsSampler {
    first: BTreeMap<(String, &'static str), u64>,
    last: BTreeMap<(String, &'static str), u64>,
    /// VMs that existed when recording started (their first value is a baseline, not 0).
    at_start: std::collections::HashSet<String>,
    /// Why statistics could not be read, once.
    pub error: Option<String>,
}

impl KvmStatsSampler {
    pub fn start() -> Self {
        let mut s = KvmStatsSampler::default();
        s.sample();
        s.at_start = s.first.keys().map(|(vm, _)| vm.clone()).collect();
        s
    }

    pub fn sample(&mut self) {
        // Refused once (lockdown), refused always: do not retry every interval.
        if self.error.is_some() {
            return;
        }
        let Ok(dir) = std::fs::read_dir(KVM_DEBUGFS) else {
            return;
        };
        for vm in dir.flatten() {
            let name = vm.file_name().to_string_lossy().into_owned();
            // Per-VM directories are `<pid>-<fd>`; the top level holds totals.
            if !name.contains('-') || !vm.path().is_dir() {
                continue;
            }
            for stat in KVM_STATS {
                match std::fs::read_to_string(vm.path().join(stat)) {
                    Ok(v) => {
                        if let Ok(v) = v.trim().parse::<u64>() {
                            self.first.entry((name.clone(), stat)).or_insert(v);
                            self.last.insert((name.clone(), stat), v);
                        }
                    }
                    Err(e) if self.error.is_none() => {
                        let why = if e.raw_os_error() == Some(libc::EPERM) {
                            " (debugfs is locked down: see kernel_lockdown(7))"
                        } else {
                            ""
                        };
                        self.error = Some(format!("{KVM_DEBUGFS}/{name}/{stat}: {e}{why}"));
                    }
                    Err(_) => {}
                }
            }
        }
    }

    pub fn rows(&self) -> Vec<KvmStatRow> {
        self.last
            .iter()
            .map(|((vm, stat), &end)| KvmStatRow {
                vm: vm.clone(),
                pid: vm.split('-').next().and_then(|p| p.parse().ok()).unwrap_or(0),
                stat: stat.to_string(),
                // A VM created while recording counted from 0.
                start: if self.at_start.contains(vm) {
                    self.first.get(&(vm.clone(), *stat)).copied().unwrap_or(0)
                } else {
                    0
                },
                end,
            })
            .collect()
    }
}
