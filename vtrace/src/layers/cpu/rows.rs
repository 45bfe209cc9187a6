//! CPU snapshots -> rows: threads (with their owner, decided in
//! [`super::ownership`]), CPUs, softirq vectors, IRQs, and the per-interval
//! time series.

use std::{
    collections::{HashMap, HashSet},
    path::Path,
};

use vtrace_common::{IRQ_DEVICE_SLOTS, SOFTIRQ_NAMES, ThreadTimes, irq_vector, state, thread_flag};

use super::{
    collector::{CpuSnapshot, CpuSplit},
    ownership,
    tables::{CpuRow, IntervalRow, IrqRow, SoftirqRow, ThreadRow, VcpuIndex},
};
use crate::{
    collectors::procfs::{self, TaskStat},
    layers::{Facts, Request},
    platforms::{Instance, attribute::Attribution},
    recording::Workload,
};

/// Per-interval deltas of each thread's totals. A snapshot charges a running
/// thread the time its CPU has pending, which the kernel side may trim when
/// the thread switches out (the scheduler's own slice length, the tick split
/// shifting): a total can go down between snapshots. What went down is owed
/// and taken from that thread's next increases (its last rows, if none come),
/// so each thread's rows sum to its final total, as the threads table says.
/// A thread's incarnation: its tid and its fork (ns since the start, 0:
/// before it), so that a tid reused while recording is two threads.
pub type ThreadKey = (u32, u64);

#[derive(Default)]
pub struct Series {
    last_at: Option<u64>,
    last: HashMap<ThreadKey, [u64; state::REPORTED]>,
    owed: HashMap<ThreadKey, [u64; state::REPORTED]>,
    pub rows: Vec<IntervalRow>,
}

/// A CLOCK_MONOTONIC time as ns since the recording started (0 stays 0:
/// unknown, or before the start).
fn since(ns: u64, start_mono: u64) -> u64 {
    if ns == 0 {
        0
    } else {
        ns.saturating_sub(start_mono).max(1)
    }
}

impl Series {
    pub fn push(&mut self, snap: &CpuSnapshot, start_mono: u64) {
        let mut now: HashMap<ThreadKey, ([u64; state::REPORTED], u32)> = HashMap::new();
        for (tid, t) in &snap.threads {
            let e = now
                .entry((*tid, since(t.born_ns, start_mono)))
                .or_insert(([0; state::REPORTED], t.tgid));
            for s in 0..state::REPORTED {
                e.0[s] += t.ns[s];
            }
        }
        // A thread first read before its fork time was (its per-CPU slot
        // read before its map entry, a fork racing the read) is the same
        // thread once its fork shows: its readings carry over, or its time
        // so far would count twice.
        for &(tid, born) in now.keys() {
            if born != 0
                && !self.last.contains_key(&(tid, born))
                && !now.contains_key(&(tid, 0))
                && let Some(prev) = self.last.remove(&(tid, 0))
            {
                self.last.insert((tid, born), prev);
                if let Some(owed) = self.owed.remove(&(tid, 0)) {
                    self.owed.insert((tid, born), owed);
                }
                for row in self.rows.iter_mut().filter(|r| r.tid == tid && r.born_ns == 0) {
                    row.born_ns = born;
                }
            }
        }
        let start_ns = self.last_at.unwrap_or(start_mono).saturating_sub(start_mono);
        let end_ns = snap.at_ns.saturating_sub(start_mono);
        let mut keys: Vec<_> = now.keys().copied().collect();
        keys.sort_unstable();
        for key in keys {
            let (cur, pid) = now[&key];
            let prev = self.last.get(&key).copied().unwrap_or_default();
            let owed = self.owed.entry(key).or_default();
            let mut d = [0u64; state::REPORTED];
            for s in 0..state::REPORTED {
                if cur[s] >= prev[s] {
                    let repaid = (cur[s] - prev[s]).min(owed[s]);
                    owed[s] -= repaid;
                    d[s] = cur[s] - prev[s] - repaid;
                } else {
                    owed[s] += prev[s] - cur[s];
                }
            }
            if d.iter().any(|&v| v > 0) {
                self.rows.push(IntervalRow {
                    start_ns,
                    end_ns,
                    tid: key.0,
                    pid,
                    user_ns: d[state::USER],
                    system_ns: d[state::SYSTEM],
                    softirq_ns: d[state::SOFTIRQ],
                    hardirq_ns: d[state::HARDIRQ],
                    guest_ns: d[state::GUEST],
                    idle_ns: d[state::IDLE],
                    born_ns: key.1,
                });
            }
            self.last.insert(key, cur);
        }
        self.last_at = Some(snap.at_ns);
    }

    /// What each thread's snapshots gave back and its later intervals have
    /// not yet repaid (non-zero only).
    pub fn owed(&self) -> Vec<(ThreadKey, [u64; state::REPORTED])> {
        let mut owed: Vec<_> = self
            .owed
            .iter()
            .filter(|(_, o)| o.iter().any(|&v| v > 0))
            .map(|(key, o)| (*key, *o))
            .collect();
        owed.sort_unstable();
        owed
    }

    /// The rows, after the last snapshot (see [`settle`]).
    pub fn finish(&self) -> Vec<IntervalRow> {
        settle(self.rows.clone(), self.owed())
    }
}

/// What is still owed comes off each thread's latest rows: its rows then
/// sum to its last snapshot. (Also how a journal is settled: recording::journal.)
pub fn settle(
    mut rows: Vec<IntervalRow>,
    owed: impl IntoIterator<Item = (ThreadKey, [u64; state::REPORTED])>,
) -> Vec<IntervalRow> {
    for ((tid, born_ns), mut owed) in owed {
        for row in rows.iter_mut().rev().filter(|r| r.tid == tid && r.born_ns == born_ns) {
            for (s, value) in [
                (state::USER, &mut row.user_ns),
                (state::SYSTEM, &mut row.system_ns),
                (state::SOFTIRQ, &mut row.softirq_ns),
                (state::HARDIRQ, &mut row.hardirq_ns),
                (state::GUEST, &mut row.guest_ns),
                (state::IDLE, &mut row.idle_ns),
            ] {
                let take = owed[s].min(*value);
                *value -= take;
                owed[s] -= take;
            }
            if owed.iter().all(|&o| o == 0) {
                break;
            }
        }
    }
    rows.retain(|r| r.user_ns + r.system_ns + r.softirq_ns + r.hardirq_ns + r.guest_ns + r.idle_ns > 0);
    rows
}

/// guest_time of every thread at the start and at its last sighting.
pub struct GuestSampler {
    first: HashMap<u32, u64>,
    last: HashMap<u32, u64>,
}

impl GuestSampler {
    pub fn new(at_start: &HashMap<(u32, u32), TaskStat>) -> Self {
        let first: HashMap<u32, u64> = at_start.iter().map(|((_, tid), s)| (*tid, s.guest_ticks)).collect();
        GuestSampler {
            last: first.clone(),
            first,
        }
    }

    pub fn sample(&mut self) {
        for ((_, tid), s) in procfs::scan_tasks() {
            if s.guest_ticks > 0 || self.last.contains_key(&tid) {
                self.last.insert(tid, s.guest_ticks);
            }
        }
    }

    pub fn deltas(&self) -> HashMap<u32, u64> {
        self.last
            .iter()
            .filter_map(|(tid, &last)| {
                let d = last.saturating_sub(self.first.get(tid).copied().unwrap_or(0));
                (d > 0).then_some((*tid, d))
            })
            .collect()
    }
}

/// Which processes the selectors (and the command's process tree) cover.
pub struct Selection {
    /// Parent of each process (from /proc at start, from fork events after).
    parent: HashMap<u32, u32>,
    tgids: HashSet<u32>,
    comms: Vec<String>,
    cgroup_ids: HashSet<u64>,
    own_tgid: u32,
    /// Embedded in another program: only threads of this name are vtrace's.
    own_comm: Option<&'static str>,
}

impl Selection {
    pub fn new(
        asked: &Request,
        own_comm: Option<&'static str>,
        workload: Option<&Workload>,
        at_start: &HashMap<(u32, u32), TaskStat>,
        snap: &CpuSnapshot,
    ) -> Self {
        // Parent of each process: from /proc for processes that predate the
        // run, from the fork tracepoint for the ones born during it.
        let mut parent: HashMap<u32, u32> = at_start.iter().map(|((tgid, _), s)| (*tgid, s.ppid)).collect();
        for (_, t) in &snap.threads {
            if t.flags & thread_flag::BORN_DURING_RUN != 0 && t.parent_tgid != t.tgid && t.tgid != 0 {
                parent.insert(t.tgid, t.parent_tgid);
            }
        }
        let roots: HashSet<u32> = asked.pids.iter().copied().chain(workload.map(|w| w.pid)).collect();
        let mut tgids = HashSet::new();
        for &tgid in parent.keys().chain(roots.iter()) {
            let mut cur = tgid;
            for _ in 0..64 {
                if roots.contains(&cur) {
                    tgids.insert(tgid);
                    break;
                }
                match parent.get(&cur) {
                    Some(&p) if p != 0 && p != cur => cur = p,
                    _ => break,
                }
            }
        }
        let cgroup_ids = match procfs::cgroup2_root() {
            Some(root) => asked
                .cgroups
                .iter()
                .flat_map(|c| {
                    let p = if c.is_absolute() && c.exists() {
                        c.clone()
                    } else {
                        Path::new(&root).join(c.strip_prefix("/").unwrap_or(c))
                    };
                    procfs::cgroup_ids_under(&p)
                })
                .collect(),
            None => HashSet::new(),
        };
        Selection {
            parent,
            tgids,
            comms: asked.comms.clone(),
            cgroup_ids,
            own_tgid: std::process::id(),
            own_comm,
        }
    }

    /// vtrace's own thread: any of its process on the command line, only
    /// its recorder's when embedded in the program it measures.
    /// vtrace's own threads, and the helpers it runs (`ip` reading a
    /// namespace's devices): children of vtrace that are not the workload.
    fn is_vtrace(&self, t: &ThreadTimes, comm: &str) -> bool {
        let own = t.tgid == self.own_tgid && self.own_comm.is_none_or(|c| comm == c);
        let helper =
            self.own_comm.is_none() && self.parent.get(&t.tgid) == Some(&self.own_tgid) && !self.selects(t, comm);
        own || helper
    }

    fn selects(&self, t: &ThreadTimes, comm: &str) -> bool {
        self.tgids.contains(&t.tgid) || self.comms.iter().any(|c| c == comm) || self.cgroup_ids.contains(&t.cgroup_id)
    }
}

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
            let owner = ownership::owner(
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
                pid: t.tgid,
                ppid: t.parent_tgid,
                role: owner.role,
                platform: owner.platform,
                instance: owner.instance,
                comm,
                selected: owner.selected,
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

/// Device IRQ names from /proc/interrupts (its last column).
fn irq_names() -> HashMap<u32, String> {
    std::fs::read_to_string("/proc/interrupts")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (num, rest) = l.trim_start().split_once(':')?;
            let irq = num.trim().parse::<u32>().ok()?;
            Some((irq, rest.split_whitespace().last().unwrap_or("").to_string()))
        })
        .collect()
}

/// The instance that passes through the PCI function a vfio IRQ named
/// `name` belongs to (`vfio-msix[0](0000:00:12.0)`, `vfio-intx(...)`).
fn irq_instance<'a>(name: &str, instances: &'a [Instance]) -> Option<&'a str> {
    let pci = name.strip_prefix("vfio-")?.split_once('(')?.1.strip_suffix(')')?;
    instances
        .iter()
        .find(|i| i.passthrough.iter().any(|d| d.pci == pci))
        .map(|i| i.id.as_str())
}

pub fn irq_rows(snap: &CpuSnapshot, instances: &[Instance]) -> Vec<IrqRow> {
    let listed = irq_names();
    let mut rows = Vec::new();
    for (cpu, slots) in snap.irqs.iter().enumerate() {
        for (slot, s) in slots.iter().enumerate() {
            if s.count == 0 && s.ns == 0 {
                continue;
            }
            let slot = slot as u32;
            let name = if slot < IRQ_DEVICE_SLOTS {
                snap.irq_names
                    .get(&slot)
                    .or_else(|| listed.get(&slot))
                    .cloned()
                    .unwrap_or_else(|| format!("irq {slot}"))
            } else {
                irq_vector::NAMES
                    .iter()
                    .find(|(v, _)| *v == slot)
                    .map(|(_, n)| n.to_string())
                    .unwrap_or_default()
            };
            rows.push(IrqRow {
                cpu: cpu as u32,
                irq: slot,
                instance: irq_instance(&name, instances).unwrap_or_default().to_string(),
                name,
                ns: s.ns,
                count: s.count,
            });
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A snapshot at `at_ns` with each thread's totals (user, system).
    fn snapshot(at_ns: u64, threads: &[(u32, u64, u64)]) -> CpuSnapshot {
        CpuSnapshot {
            at_ns,
            threads: threads
                .iter()
                .map(|&(tid, user, system)| {
                    let mut ns = [0; state::REPORTED];
                    ns[state::USER] = user;
                    ns[state::SYSTEM] = system;
                    (
                        tid,
                        ThreadTimes {
                            ns,
                            tgid: tid,
                            ..Default::default()
                        },
                    )
                })
                .collect(),
            ..Default::default()
        }
    }

    fn interval(start_ns: u64, tid: u32, user_ns: u64, system_ns: u64) -> IntervalRow {
        IntervalRow {
            start_ns,
            end_ns: start_ns + 10,
            tid,
            pid: tid,
            user_ns,
            system_ns,
            ..Default::default()
        }
    }

    fn owed(user: u64, system: u64) -> [u64; state::REPORTED] {
        let mut o = [0; state::REPORTED];
        o[state::USER] = user;
        o[state::SYSTEM] = system;
        o
    }

    /// (start, user, system) of `tid`'s rows.
    fn of(rows: &[IntervalRow], tid: u32) -> Vec<(u64, u64, u64)> {
        rows.iter()
            .filter(|r| r.tid == tid)
            .map(|r| (r.start_ns, r.user_ns, r.system_ns))
            .collect()
    }

    fn total(rows: &[IntervalRow], tid: u32) -> (u64, u64) {
        of(rows, tid)
            .iter()
            .fold((0, 0), |(u, s), &(_, user, system)| (u + user, s + system))
    }

    #[test]
    fn settle_takes_what_is_owed_from_the_latest_rows() {
        let rows = vec![
            interval(0, 1, 10, 4),
            interval(0, 2, 7, 0),
            interval(10, 1, 10, 4),
            interval(20, 1, 10, 0),
        ];
        let settled = settle(rows, [((1, 0), owed(15, 3))]);
        // User: 10 off the last row (dropped, empty), 5 off the one before;
        // system: 3 off the latest row that has any.
        assert_eq!(of(&settled, 1), [(0, 10, 4), (10, 5, 1)]);
        assert_eq!(total(&settled, 1), (30 - 15, 8 - 3));
        // Other threads untouched.
        assert_eq!(of(&settled, 2), [(0, 7, 0)]);
    }

    #[test]
    fn settle_never_goes_below_zero() {
        let rows = vec![interval(0, 1, 10, 4), interval(10, 1, 5, 0), interval(0, 2, 3, 0)];
        let settled = settle(rows, [((1, 0), owed(100, 1)), ((3, 0), owed(5, 5))]);
        // More owed than the rows hold: they go to zero, the empty ones away.
        assert_eq!(of(&settled, 1), [(0, 0, 3)]);
        // Owed by a thread with no rows: nothing to take.
        assert_eq!(of(&settled, 2), [(0, 3, 0)]);
        assert!(settle(Vec::new(), [((1, 0), owed(1, 1))]).is_empty());
    }

    #[test]
    fn a_reused_tid_is_two_threads_with_intervals_of_their_own() {
        let mut series = Series::default();
        // Thread 7 (there from the start) ran 10 and exited; at 25 a new
        // thread took tid 7 and ran 4, then 6: both stay in the snapshots.
        let first = |user| {
            let mut ns = [0; state::REPORTED];
            ns[state::USER] = user;
            ThreadTimes {
                ns,
                tgid: 7,
                ..Default::default()
            }
        };
        let second = |user| ThreadTimes {
            born_ns: 25,
            ..first(user)
        };
        let rows = born_start_user(
            &mut series,
            [
                (10, vec![(7, first(10))]),
                (30, vec![(7, first(10)), (7, second(4))]),
                (40, vec![(7, first(10)), (7, second(10))]),
            ],
        );
        assert_eq!(rows, [(0, 0, 10), (25, 10, 4), (25, 30, 6)]);
    }

    /// A thread read once before its fork time showed (born 0, then 8) is
    /// one thread: its 6 ns are counted once (kata.rs saw a role's
    /// intervals sum 0.5 ms over its total).
    #[test]
    fn a_thread_whose_fork_shows_late_keeps_its_intervals() {
        let mut series = Series::default();
        let thread = |born_ns, user| {
            let mut ns = [0; state::REPORTED];
            ns[state::USER] = user;
            ThreadTimes {
                ns,
                tgid: 7,
                born_ns,
                ..Default::default()
            }
        };
        let rows = born_start_user(
            &mut series,
            [(10, vec![(7, thread(0, 2))]), (20, vec![(7, thread(8, 6))])],
        );
        assert_eq!(rows, [(8, 0, 2), (8, 10, 4)]);
    }

    /// Pushes a snapshot per (time, threads) and gives the interval rows
    /// as (born_ns, start_ns, user_ns).
    fn born_start_user<const N: usize>(
        series: &mut Series,
        snapshots: [(u64, Vec<(u32, ThreadTimes)>); N],
    ) -> Vec<(u64, u64, u64)> {
        for (at_ns, threads) in snapshots {
            series.push(
                &CpuSnapshot {
                    at_ns,
                    threads,
                    ..Default::default()
                },
                0,
            );
        }
        series
            .finish()
            .iter()
            .map(|r| (r.born_ns, r.start_ns, r.user_ns))
            .collect()
    }

    #[test]
    fn series_repays_what_a_snapshot_gave_back_from_the_next_intervals() {
        let mut series = Series::default();
        // Thread 1 over-charged at 20 (25), trimmed at 30 (20): 5 owed,
        // repaid out of its next increase. Thread 2 grows steadily.
        for (at, t1, t2) in [(10, 10, 1), (20, 25, 2), (30, 20, 3), (40, 40, 4), (50, 50, 5)] {
            series.push(&snapshot(at, &[(1, t1, 0), (2, t2, 0)]), 0);
        }
        assert_eq!(of(&series.rows, 1), [(0, 10, 0), (10, 15, 0), (30, 15, 0), (40, 10, 0)]);
        assert!(series.owed().is_empty());
        let rows = series.finish();
        assert_eq!(total(&rows, 1), (50, 0));
        assert_eq!(total(&rows, 2), (5, 0));
        // Each row spans the interval since the previous snapshot.
        assert!(rows.iter().all(|r| r.end_ns == r.start_ns + 10));
    }

    #[test]
    fn series_settles_what_is_still_owed_at_the_end_from_the_last_rows() {
        let mut series = Series::default();
        for (at, user, system) in [(10, 10, 10), (20, 30, 12), (30, 22, 12), (40, 22, 9)] {
            series.push(&snapshot(at, &[(1, user, system)]), 0);
        }
        assert_eq!(series.owed(), [((1, 0), owed(8, 3))]);
        let rows = series.finish();
        // The last snapshot's totals, never below zero in any row.
        assert_eq!(total(&rows, 1), (22, 9));
        assert_eq!(of(&rows, 1), [(0, 10, 9), (10, 12, 0)]);
    }
}
