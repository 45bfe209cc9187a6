//! CPU attribution collector: reads the per-CPU state machines and the
//! per-thread map written by `vtrace-ebpf/src/account.rs`.
//!
//! Each snapshot also charges, in userspace, the time each CPU's current
//! thread has run since the last kernel event, so long-running threads with no
//! events (a busy loop on a quiet CPU) are not under-counted.
//!
//! With `--cpu-split ticks` the kernel leaves process-context time unsplit and
//! `ticks.rs` divides it.

use std::collections::{BTreeMap, HashMap as StdHashMap, HashSet};

use aya::{
    Ebpf,
    maps::{HashMap, MapData, PerCpuArray},
};
use vtrace_common::{
    CpuState, IRQ_SLOTS, IrqStat, NO_SOFTIRQ, OVERFLOW_TID, THREAD_SLOTS, ThreadSlot, ThreadTimes, state, thread_flag,
};

use super::ticks::{cpu_user_system_ticks, split_by_ticks, split_cpus_by_ticks};
use crate::{Error, Result, collectors::maps::take};

/// Everything the kernel side holds, at one instant.
#[derive(Clone, Debug, Default)]
pub struct CpuSnapshot {
    /// Monotonic ns the snapshot stands for.
    pub at_ns: u64,
    /// (tid, totals) of every thread seen, exited ones included; a tid may
    /// appear twice if it was reused after its first thread exited.
    pub threads: Vec<(u32, ThreadTimes)>,
    /// Per CPU: the state machine, with time pending up to `at_ns` charged.
    pub cpus: Vec<CpuState>,
    /// Per CPU, per IRQ slot.
    pub irqs: Vec<Vec<IrqStat>>,
}

/// How each thread's process-context time is split into user and system
/// (`record --cpu-split`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum CpuSplit {
    /// Exactly, at every syscall entry and exit. The syscall hooks are the
    /// hottest of all: every syscall of every process pays for them.
    Syscalls,
    /// The default. No syscall hooks: each thread's exact process-context time is divided in
    /// the ratio of the kernel's tick-sampled utime/stime over the slices seen
    /// (what top and /proc report), each CPU's by /proc/stat.
    #[default]
    Ticks,
}

impl CpuSplit {
    pub fn name(self) -> &'static str {
        match self {
            CpuSplit::Syscalls => "syscalls",
            CpuSplit::Ticks => "ticks",
        }
    }
}

pub struct CpuCollector {
    threads: HashMap<MapData, u32, ThreadTimes>,
    /// Per-CPU thread slots (`--cpu-split ticks`), summed into the threads.
    thread_slots: PerCpuArray<MapData, ThreadSlot>,
    cpu_state: PerCpuArray<MapData, CpuState>,
    irqs: PerCpuArray<MapData, IrqStat>,
    /// Totals of exited threads removed from the kernel map to keep it small.
    retired: Vec<(u32, ThreadTimes)>,
    /// Exited threads seen in the previous snapshot: removed at the next one,
    /// after their final context switch has certainly been flushed.
    exited_last_time: HashSet<u32>,
    split: CpuSplit,
    /// /proc/stat per CPU (user, system) ticks when recording started (`CpuSplit::Ticks`).
    cpu_ticks_at_start: Vec<(u64, u64)>,
}

fn map_err(e: impl std::fmt::Display) -> Error {
    Error::Ebpf(e.to_string())
}

impl CpuCollector {
    /// Takes the engine's maps out of the loaded object (before programs attach).
    pub fn new(ebpf: &mut Ebpf, split: CpuSplit) -> Result<Self> {
        let mut threads: HashMap<MapData, u32, ThreadTimes> = take(ebpf, "THREADS")?;
        // The bucket for threads that find the map full must exist up front.
        threads
            .insert(OVERFLOW_TID, ThreadTimes::default(), 0)
            .map_err(map_err)?;
        Ok(CpuCollector {
            threads,
            thread_slots: take(ebpf, "THREAD_SLOT_TIMES")?,
            cpu_state: take(ebpf, "CPU_STATE")?,
            irqs: take(ebpf, "IRQS")?,
            retired: Vec::new(),
            exited_last_time: HashSet::new(),
            split,
            cpu_ticks_at_start: cpu_user_system_ticks(),
        })
    }

    /// Reads the maps. With `gc`, threads that exited before the previous
    /// snapshot are moved out of the kernel map into `retired`.
    pub fn snapshot(&mut self, now_ns: u64, gc: bool) -> Result<CpuSnapshot> {
        let mut live: BTreeMap<u32, ThreadTimes> = BTreeMap::new();
        for entry in self.threads.iter() {
            let (tid, t) = entry.map_err(map_err)?;
            live.insert(tid, t);
        }
        if gc {
            let mut exited_now = HashSet::new();
            for (&tid, t) in &live {
                if t.flags & thread_flag::EXITED != 0 && tid != OVERFLOW_TID {
                    if self.exited_last_time.contains(&tid) {
                        let _ = self.threads.remove(&tid);
                        self.retired.push((tid, *t));
                    } else {
                        exited_now.insert(tid);
                    }
                }
            }
            for (tid, _) in &self.retired {
                live.remove(tid);
            }
            self.exited_last_time = exited_now;
        }

        let per_cpu = self.cpu_state.get(&0, 0).map_err(map_err)?;
        let mut cpus = Vec::with_capacity(per_cpu.len());
        for st in per_cpu.iter() {
            let mut st = *st;
            charge_pending(&mut st, now_ns, self.split);
            // A thread that exited is not running, whatever the CPU's state
            // says (its switch-out can go unreported on some kernels): its
            // totals are final, and the CPU's pending time is not its.
            let exited = live.get(&st.tid).is_some_and(|t| t.flags & thread_flag::EXITED != 0)
                || self.retired.iter().any(|(tid, _)| *tid == st.tid);
            // The idle task's time is kept per CPU (account.rs): its row is
            // made here.
            if st.idle_switches > 0 {
                let idle = live.entry(0).or_default();
                for s in 0..state::REPORTED {
                    idle.ns[s] += st.idle_acc[s];
                }
                idle.unsplit_ns += st.idle_acc[state::UNRESOLVED];
                idle.switches += st.idle_switches;
                idle.flags |= thread_flag::KTHREAD;
                // The idle task is in the root cgroup (cgroup v2: id 1).
                idle.cgroup_id = 1;
            }
            if st.initialized != 0 && !exited {
                let t = live.entry(st.tid).or_default();
                for s in 0..state::REPORTED {
                    t.ns[s] += st.acc[s];
                }
                t.unsplit_ns += st.acc[state::UNRESOLVED];
            }
            cpus.push(st);
        }
        if self.split == CpuSplit::Ticks {
            split_cpus_by_ticks(&mut cpus, &self.cpu_ticks_at_start, &cpu_user_system_ticks());
        }
        let mut irqs = vec![Vec::with_capacity(IRQ_SLOTS as usize); cpus.len()];
        for slot in 0..IRQ_SLOTS {
            let values = self.irqs.get(&slot, 0).map_err(map_err)?;
            for (cpu, v) in values.iter().enumerate() {
                if let Some(row) = irqs.get_mut(cpu) {
                    row.push(*v);
                }
            }
        }
        let mut threads: Vec<(u32, ThreadTimes)> = self.retired.clone();
        threads.extend(live);
        self.add_slots(&mut threads)?;
        threads.retain(|(_, t)| t.ns.iter().any(|&n| n > 0) || t.unsplit_ns > 0 || t.switches > 0);
        if self.split == CpuSplit::Ticks {
            split_by_ticks(&mut threads);
        }
        Ok(CpuSnapshot {
            at_ns: now_ns,
            threads,
            cpus,
            irqs,
        })
    }
}

impl CpuCollector {
    /// Adds the per-CPU thread slots to the threads.
    fn add_slots(&self, threads: &mut Vec<(u32, ThreadTimes)>) -> Result<()> {
        let mut slots = Vec::new();
        for index in 0..THREAD_SLOTS {
            let per_cpu = self.thread_slots.get(&index, 0).map_err(map_err)?;
            slots.extend(per_cpu.iter().filter(|s| s.tid != 0).copied());
        }
        merge_slots(threads, &slots);
        Ok(())
    }
}

/// Adds each slot to its thread's entry (the last one of that tid: a live
/// thread comes after the retired ones), or to a new one.
fn merge_slots(threads: &mut Vec<(u32, ThreadTimes)>, slots: &[ThreadSlot]) {
    let mut by_tid: StdHashMap<u32, usize> = StdHashMap::new();
    for (i, (tid, _)) in threads.iter().enumerate() {
        by_tid.insert(*tid, i);
    }
    for slot in slots {
        let i = *by_tid.entry(slot.tid).or_insert_with(|| {
            threads.push((slot.tid, ThreadTimes::default()));
            threads.len() - 1
        });
        add_thread_times(&mut threads[i].1, &slot.times);
    }
}

/// Sums `part` (one CPU's slot of a thread) into `total`; identity from the
/// part where the total has none yet.
fn add_thread_times(total: &mut ThreadTimes, part: &ThreadTimes) {
    for s in 0..state::REPORTED {
        total.ns[s] += part.ns[s];
    }
    total.switches += part.switches;
    total.sched_adjust_ns += part.sched_adjust_ns;
    total.unbounded_ns += part.unbounded_ns;
    total.unsplit_ns += part.unsplit_ns;
    total.user_tick_ns += part.user_tick_ns;
    total.system_tick_ns += part.system_tick_ns;
    total.flags |= part.flags & !thread_flag::IN_SYSCALL;
    if total.comm[0] == 0 {
        total.comm = part.comm;
    }
    if total.cgroup_id == 0 {
        total.cgroup_id = part.cgroup_id;
    }
    if total.tgid == 0 {
        total.tgid = part.tgid;
    }
    total.born_ns = total.born_ns.max(part.born_ns);
    total.exited_ns = total.exited_ns.max(part.exited_ns);
}

/// Charges time since the CPU's last event to its innermost context, as the
/// kernel would at the next event. With the syscall hooks on, a thread whose
/// mode is still unresolved has run without a syscall or a switch since
/// recording began: counted as user. With `CpuSplit::Ticks` it stays unsplit.
fn charge_pending(st: &mut CpuState, now_ns: u64, split: CpuSplit) {
    if st.initialized == 0 || now_ns <= st.last_ts {
        return;
    }
    let delta = now_ns - st.last_ts;
    st.last_ts = now_ns;
    let slot = if st.hardirq_depth > 0 {
        state::HARDIRQ
    } else if st.softirq_vec != NO_SOFTIRQ {
        if let Some(v) = st.softirq_ns.get_mut(st.softirq_vec as usize) {
            *v += delta;
        }
        state::SOFTIRQ
    } else {
        st.base as usize
    };
    let slot = slot.min(state::SLOTS - 1);
    st.acc[slot] += delta;
    st.cpu_ns[slot] += delta;
    if split == CpuSplit::Ticks {
        return;
    }
    let pending = std::mem::take(&mut st.acc[state::UNRESOLVED]);
    st.acc[state::USER] += pending;
    let pending_cpu = std::mem::take(&mut st.cpu_ns[state::UNRESOLVED]);
    st.cpu_ns[state::USER] += pending_cpu;
}

/// CLOCK_MONOTONIC in ns: the clock of bpf_ktime_get_ns().
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_add_up_with_the_hash_entry_of_their_thread() {
        let named = |comm: &[u8], cgroup: u64, flags: u32, user: u64, switches: u64| {
            let mut t = ThreadTimes {
                cgroup_id: cgroup,
                flags,
                switches,
                ..ThreadTimes::default()
            };
            t.comm[..comm.len()].copy_from_slice(comm);
            t.ns[state::USER] = user;
            t
        };
        let slot = |tid: u32, times: ThreadTimes| ThreadSlot {
            tid,
            times,
            ..ThreadSlot::default()
        };
        // Thread 7 exited: its hash entry (birth, exit) was retired, its
        // times are in two CPUs' slots. Thread 9 lives in one slot only.
        let mut threads = vec![(
            7,
            named(b"", 0, thread_flag::BORN_DURING_RUN | thread_flag::EXITED, 0, 0),
        )];
        merge_slots(
            &mut threads,
            &[
                slot(7, named(b"worker", 42, thread_flag::IN_SYSCALL, 300, 3)),
                slot(9, named(b"other", 5, thread_flag::KTHREAD, 50, 1)),
                slot(7, named(b"worker", 43, thread_flag::GUEST_TRACED, 200, 2)),
            ],
        );
        assert_eq!(threads.len(), 2);
        let (tid, t) = &threads[0];
        assert_eq!((*tid, t.ns[state::USER], t.switches), (7, 500, 5));
        assert_eq!(&t.comm[..6], b"worker");
        assert_eq!(t.cgroup_id, 42, "identity from the first slot that has one");
        assert_eq!(
            t.flags,
            thread_flag::BORN_DURING_RUN | thread_flag::EXITED | thread_flag::GUEST_TRACED,
            "a slot's mode at switch-out is not the thread's"
        );
        assert_eq!((threads[1].0, threads[1].1.ns[state::USER]), (9, 50));
    }
}
