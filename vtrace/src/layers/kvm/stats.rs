//! KVM's own per-VM statistics (debugfs), sampled over the recording for a
//! cross-check of vtrace's counts.

use std::collections::BTreeMap;

use super::tables::KvmStatRow;
use crate::platforms::snapshot::{self, KVM_DEBUGFS};

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

/// The statistics vtrace counts in the kernel per vCPU thread, read beside
/// KVM's own (see [`read_paired`]): its exits, and its injected interrupts.
pub const PAIRED_STATS: &[&str] = &["exits", "irq_injections"];

/// vtrace's running count of a paired statistic over the given threads.
pub type CountOf<'a> = &'a dyn Fn(&[u32], &str) -> u64;

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
    /// When each VM's statistics were last read, ns since the start.
    read_at: BTreeMap<String, u64>,
    /// vtrace's own count of each VM's paired statistics at their first
    /// and last reading, read around it (see [`read_paired`]).
    vtrace_paired: BTreeMap<(String, &'static str), (u64, u64)>,
    /// Each VM's vCPU threads when last read ([`snapshot::vcpu_threads`]):
    /// (tid, vCPU id), kept once the VM is gone.
    vcpu_threads: BTreeMap<String, Vec<(u32, u32)>>,
    start_mono: u64,
    /// Why statistics could not be read, once.
    pub error: Option<String>,
}

impl KvmStatsSampler {
    /// The first reading: taken once every probe is attached, so that what
    /// KVM counts from here vtrace counts too.
    pub fn start(start_mono: u64, now_mono: u64, count_of: CountOf) -> Self {
        let mut s = KvmStatsSampler {
            start_mono,
            ..Default::default()
        };
        s.sample(now_mono, count_of);
        s.at_start = s.first.keys().map(|(vm, _)| vm.clone()).collect();
        s
    }

    /// Reads every VM's statistics now (`now_mono`); `count_of` gives
    /// vtrace's count of a paired statistic of the given threads.
    pub fn sample(&mut self, now_mono: u64, count_of: CountOf) {
        let Ok(dir) = std::fs::read_dir(KVM_DEBUGFS) else {
            return;
        };
        for vm in dir.flatten() {
            let name = vm.file_name().to_string_lossy().into_owned();
            // Per-VM directories are `<pid>-<fd>`; the top level holds totals.
            if !name.contains('-') || !vm.path().is_dir() {
                continue;
            }
            let pid = name.split('-').next().unwrap_or("");
            let vcpus = snapshot::vcpu_threads(&vm.path());
            if !vcpus.is_empty() {
                self.vcpu_threads.insert(name.clone(), vcpus);
            }
            // Refused once (lockdown), refused always: do not retry every interval.
            if self.error.is_some() {
                continue;
            }
            for &stat in PAIRED_STATS {
                if let Some((kvm, vtrace)) = read_paired(&vm.path(), pid, stat, count_of) {
                    self.first.entry((name.clone(), stat)).or_insert(kvm);
                    self.last.insert((name.clone(), stat), kvm);
                    self.vtrace_paired
                        .entry((name.clone(), stat))
                        .or_insert((vtrace, vtrace))
                        .1 = vtrace;
                }
            }
            for stat in KVM_STATS.iter().filter(|s| !PAIRED_STATS.contains(s)) {
                match std::fs::read_to_string(vm.path().join(stat)) {
                    Ok(v) => {
                        if let Ok(v) = v.trim().parse::<u64>() {
                            self.first.entry((name.clone(), stat)).or_insert(v);
                            self.last.insert((name.clone(), stat), v);
                            self.read_at
                                .insert(name.clone(), now_mono.saturating_sub(self.start_mono));
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

    /// tid -> the id of the vCPU it ran, over every VM seen.
    pub fn vcpu_index(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.vcpu_threads.values().flatten().copied()
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
                read_ns: self.read_at.get(vm).copied().unwrap_or(0),
                // A VM created while recording: vtrace counted from 0 too.
                vtrace_start: match self.vtrace_paired.get(&(vm.clone(), *stat)) {
                    Some(&(first, _)) if self.at_start.contains(vm) => first,
                    _ => 0,
                },
                vtrace_end: self.vtrace_paired.get(&(vm.clone(), *stat)).map_or(0, |v| v.1),
            })
            .collect()
    }
}

/// KVM's statistic `stat` of the VM at `dir` (of process `pid`) and
/// vtrace's count of the same at the same moment: vtrace's count is read
/// before and after KVM's, and again until both agree (an event between
/// them would be in one and not the other). None when the VM is gone.
fn read_paired(dir: &std::path::Path, pid: &str, stat: &str, count_of: CountOf) -> Option<(u64, u64)> {
    let tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    let mut last = None;
    for _ in 0..5 {
        let before = count_of(&tids, stat);
        let kvm: u64 = std::fs::read_to_string(dir.join(stat)).ok()?.trim().parse().ok()?;
        let after = count_of(&tids, stat);
        last = Some((kvm, after));
        if before == after {
            break;
        }
    }
    last
}
