//! CPU snapshots -> rows: threads (with their owner, decided in
//! [`super::ownership`]), with stand-ins for idle instances' threads, CPUs
//! and softirq vectors. The time series is `series.rs`, IRQs `irqs.rs`,
//! what the selectors cover `selection.rs`.

use std::collections::{HashMap, HashSet};

use vtrace_common::{SOFTIRQ_NAMES, ThreadTimes, state, thread_flag};

use super::{
    collector::{CpuSnapshot, CpuSplit},
    ownership,
    selection::Selection,
    series::since,
    tables::{CpuRow, SoftirqRow, ThreadRow, VcpuIndex},
};
use crate::recording::Owner;
use crate::{layers::Facts, platforms::attribute::Attribution};

/// A thread's name. A kernel thread's longer name (KVM's
/// `kvm-nx-lpage-recovery-<pid>`, which says whose VM it serves) is cut to
/// 15 bytes in its task; /proc gives it whole while the thread lives
/// (Linux 5.18 on).
pub(crate) fn comm_of(t: &ThreadTimes) -> String {
    let end = t.comm.iter().position(|&b| b == 0).unwrap_or(t.comm.len());
    let comm = String::from_utf8_lossy(&t.comm[..end]).into_owned();
    if end + 1 == t.comm.len()
        && t.flags & thread_flag::KTHREAD != 0
        && let Ok(full) = std::fs::read_to_string(format!("/proc/{}/comm", t.tgid))
        && full.trim_end().len() > end
        && full.starts_with(&comm)
    {
        return full.trim_end().to_string();
    }
    comm
}

/// A name cut to 15 bytes in the task (`comm` from the kernel's events)
/// made whole from what detection read in /proc while the thread lived
/// (KVM's `kvm-nx-lpage-recovery-<pid>` after its VM exited).
fn full_name(comm: String, detected: Option<&str>) -> String {
    match detected {
        Some(full) if comm.len() == 15 && full.len() > 15 && full.starts_with(&comm) => full.to_string(),
        _ => comm,
    }
}

/// The snapshot with, at no time, each thread of a detected instance that
/// the engine never saw: it existed and never ran in the window (a thread
/// that ran, was born or exited was seen). An instance's idle threads still
/// show in its roles: a VMM's main loop while vhost-net and irqfds carry
/// the I/O, an I/O thread with nothing to do.
pub fn with_idle_instance_threads(snap: &CpuSnapshot, attribution: &Attribution) -> CpuSnapshot {
    let seen: HashSet<u32> = snap.threads.iter().map(|(tid, _)| *tid).collect();
    let mut out = snap.clone();
    let mut idle: Vec<(u32, ThreadTimes)> = attribution
        .instances()
        .iter()
        .flat_map(|i| &i.threads)
        .filter(|t| !seen.contains(&t.tid))
        .map(|t| {
            let mut times = ThreadTimes {
                tgid: t.pid,
                ..Default::default()
            };
            // A vhost worker before Linux 6.4, KVM's per-VM threads: kernel threads.
            if t.tid == t.pid && crate::platforms::detect::serves_pid(&t.comm).is_some() {
                times.flags |= thread_flag::KTHREAD;
            }
            let name = t.comm.as_bytes();
            let n = name.len().min(times.comm.len() - 1);
            times.comm[..n].copy_from_slice(&name[..n]);
            (t.tid, times)
        })
        .collect();
    idle.sort_by_key(|(tid, _)| *tid);
    idle.dedup_by_key(|(tid, _)| *tid);
    out.threads.extend(idle);
    out
}

/// How the CPU layer's clocks read: the recording's start (CLOCK_MONOTONIC
/// ns), USER_HZ, and how user and system time were told apart.
#[derive(Clone, Copy, Debug)]
pub struct Clocks {
    pub start_mono: u64,
    pub clock_ticks: u64,
    pub split: CpuSplit,
}

pub fn thread_rows(
    snap: &CpuSnapshot,
    sel: &Selection,
    attribution: &Attribution,
    guest_ticks: &HashMap<u32, u64>,
    facts: &Facts,
    clocks: Clocks,
) -> Vec<ThreadRow> {
    let vcpu_tids = &facts.vcpu_tids;
    let Clocks {
        start_mono,
        clock_ticks,
        split,
    } = clocks;
    // A fork or exit before the window (a thread born as recording began)
    // reads as its start.
    let since_start = |ns: u64| since(ns, start_mono);
    // Processes that run vCPUs: their other threads are the VMM.
    let vmm_tgids: HashSet<u32> = snap
        .threads
        .iter()
        .filter(|(tid, _)| vcpu_tids.contains(tid))
        .map(|(_, t)| t.tgid)
        .collect();
    // A process is named after its main thread.
    let process_comm: HashMap<u32, String> = snap
        .threads
        .iter()
        .filter(|(tid, t)| *tid == t.tgid)
        .map(|(tid, t)| (*tid, comm_of(t)))
        .collect();
    let parent = |pid: u32| sel.parent.get(&pid).copied();
    let mut rows: Vec<ThreadRow> = snap
        .threads
        .iter()
        .map(|(tid, t)| {
            let comm = if *tid == 0 {
                "swapper".to_string()
            } else {
                full_name(comm_of(t), attribution.detected_comm(*tid))
            };
            let (mut user_ns, mut system_ns, mut guest_ns) =
                (t.ns[state::USER], t.ns[state::SYSTEM], t.ns[state::GUEST]);
            let guest_source = if t.flags & thread_flag::GUEST_TRACED != 0 {
                "kvm_tracepoints"
            } else if let Some(&ticks) = guest_ticks.get(tid) {
                // The vCPU ran the guest inside ioctl(KVM_RUN), which the engine
                // saw as system time (the kernel's ticks as user time): move
                // the sampled amount over.
                let host = match split {
                    CpuSplit::Syscalls => &mut system_ns,
                    CpuSplit::Ticks => &mut user_ns,
                };
                guest_ns = (ticks * 1_000_000_000 / clock_ticks.max(1)).min(*host);
                *host -= guest_ns;
                "tick_sampled"
            } else {
                "none"
            };
            let pcomm = process_comm.get(&t.tgid).cloned().unwrap_or_else(|| comm.clone());
            let place = ownership::place(
                &ownership::Thread {
                    tid: *tid,
                    pid: t.tgid,
                    kthread: t.flags & thread_flag::KTHREAD != 0,
                    comm: &comm,
                    process_comm: &pcomm,
                    selected: sel.selects(t, &comm),
                    vcpu: guest_ns > 0 || vcpu_tids.contains(tid),
                    in_vmm: vmm_tgids.contains(&t.tgid),
                    vtrace: sel.is_vtrace(t, &comm),
                },
                attribution,
                &parent,
            );
            ThreadRow {
                tid: *tid,
                owner: Owner {
                    pid: t.tgid,
                    comm,
                    platform: place.platform,
                    instance: place.instance,
                    role: place.role,
                },
                ppid: t.parent_tgid,
                selected: place.selected,
                kthread: t.flags & thread_flag::KTHREAD != 0,
                exited: t.flags & thread_flag::EXITED != 0,
                born_during_run: t.flags & thread_flag::BORN_DURING_RUN != 0,
                user_ns,
                system_ns,
                softirq_ns: t.ns[state::SOFTIRQ],
                hardirq_ns: t.ns[state::HARDIRQ],
                guest_ns,
                idle_ns: t.ns[state::IDLE],
                guest_source: guest_source.into(),
                switches: t.switches,
                cgroup_id: t.cgroup_id,
                unbounded_ns: t.unbounded_ns,
                born_ns: since_start(t.born_ns),
                exited_ns: since_start(t.exited_ns),
                // The KVM layer's reading (each interval), else detection's.
                vcpu: VcpuIndex(
                    facts
                        .vcpu_index
                        .get(tid)
                        .copied()
                        .or_else(|| attribution.detected_vcpu(*tid))
                        .map_or(-1, |i| i as i32),
                ),
            }
        })
        .collect();
    ownership::claim_by_table(&mut rows);
    rows
}

pub fn cpu_rows(snap: &CpuSnapshot) -> Vec<CpuRow> {
    snap.cpus
        .iter()
        .enumerate()
        .map(|(cpu, c)| CpuRow {
            cpu: cpu as u32,
            user_ns: c.cpu_ns[state::USER],
            system_ns: c.cpu_ns[state::SYSTEM],
            softirq_ns: c.cpu_ns[state::SOFTIRQ],
            hardirq_ns: c.cpu_ns[state::HARDIRQ],
            guest_ns: c.cpu_ns[state::GUEST],
            idle_ns: c.cpu_ns[state::IDLE],
        })
        .collect()
}

pub fn softirq_rows(snap: &CpuSnapshot) -> Vec<SoftirqRow> {
    let mut rows = Vec::new();
    for (cpu, c) in snap.cpus.iter().enumerate() {
        for (v, name) in SOFTIRQ_NAMES.iter().enumerate() {
            if c.softirq_ns[v] > 0 || c.softirq_count[v] > 0 {
                rows.push(SoftirqRow {
                    cpu: cpu as u32,
                    vector: name.to_string(),
                    ns: c.softirq_ns[v],
                    count: c.softirq_count[v],
                });
            }
        }
    }
    rows
}
