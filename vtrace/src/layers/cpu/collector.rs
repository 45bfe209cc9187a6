//! CPU attribution collector: reads the per-CPU state machines and the
//! per-thread map written by `vtrace-ebpf/src/account/`.
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
    CpuState, IRQ_DEVICE_SLOTS, IRQ_NAME_LEN, IrqStat, NO_SOFTIRQ, OVERFLOW_TID, ThreadSlot, ThreadTimes, state,
    thread_flag, thread_slot,
};

use super::ticks::{cpu_user_system_ticks, split_by_ticks, split_cpus_by_ticks};
use crate::{
    Error, Result,
    collectors::{batch::BatchReader, maps::take},
};

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
    /// Device IRQ names as their handlers ran (kept for IRQs freed since).
    pub irq_names: BTreeMap<u32, String>,
    /// (CPU, tid, totals on that CPU) with `--thread-cpus`: what each
    /// thread's per-CPU slots hold, with the time its CPU has pending; what
    /// its hash entry holds under CPU [`NO_CPU`]. Split as `threads` is.
    pub thread_cpus: Vec<(u32, u32, ThreadTimes)>,
}

/// The CPU of time a thread's hash entry holds: none known.
pub const NO_CPU: u32 = u32::MAX;

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
    /// Maps read whole at each snapshot (collectors/batch.rs): a few
    /// system calls, not one per slot and two per thread.
    threads_whole: BatchReader<u32, ThreadTimes>,
    slots_whole: BatchReader<u32, ThreadSlot>,
    irqs_whole: BatchReader<u32, IrqStat>,
    irq_names_whole: BatchReader<u32, [u8; IRQ_NAME_LEN]>,
    cpu_state: PerCpuArray<MapData, CpuState>,
    /// Totals of exited threads removed from the kernel map to keep it small.
    retired: Vec<(u32, ThreadTimes)>,
    /// Exited threads seen in the previous snapshot: removed at the next one,
    /// after their final context switch has certainly been flushed.
    exited_last_time: HashSet<u32>,
    split: CpuSplit,
    /// /proc/stat per CPU (user, system) ticks when recording started (`CpuSplit::Ticks`).
    cpu_ticks_at_start: Vec<(u64, u64)>,
    /// Each thread's times per CPU too (`CpuSnapshot::thread_cpus`).
    per_cpu_threads: bool,
}

fn map_err(e: impl std::fmt::Display) -> Error {
    Error::Ebpf(e.to_string())
}

impl CpuCollector {
    /// Takes the engine's maps out of the loaded object (before programs attach).
    pub fn new(ebpf: &mut Ebpf, split: CpuSplit, per_cpu_threads: bool) -> Result<Self> {
        let threads_whole = BatchReader::of(ebpf, "THREADS")?;
        let slots_whole = BatchReader::of(ebpf, "THREAD_SLOT_TIMES")?;
        let mut threads: HashMap<MapData, u32, ThreadTimes> = take(ebpf, "THREADS")?;
        // The bucket for threads that find the map full must exist up front.
        threads
            .insert(OVERFLOW_TID, ThreadTimes::default(), 0)
            .map_err(map_err)?;
        Ok(CpuCollector {
            threads,
            threads_whole,
            slots_whole,
            irqs_whole: BatchReader::of(ebpf, "IRQS")?,
            irq_names_whole: BatchReader::of(ebpf, "IRQ_NAMES")?,
            thread_slots: take(ebpf, "THREAD_SLOT_TIMES")?,
            cpu_state: take(ebpf, "CPU_STATE")?,
            retired: Vec::new(),
            exited_last_time: HashSet::new(),
            split,
            cpu_ticks_at_start: cpu_user_system_ticks(),
            // With one CPU the per-CPU table is the intervals table: not kept.
            per_cpu_threads: per_cpu_threads && aya::util::nr_cpus().is_ok_and(|n| n > 1),
        })
    }

    /// Reads the maps. With `gc`, threads that exited before the previous
    /// snapshot are moved out of the kernel map into `retired`.
    ///
    /// The CPUs' states are read first, the threads' entries after, the
    /// states again last: time a CPU held that a switch flushed into an
    /// entry during the read is not added again (see [`flushed_during_read`]). (Read the other way round, slots
    /// after states, a busy loop's slice counted twice whenever its CPU
    /// switched during the read: 0.96 s of one busy loop in a 0.91 s window.)
    pub fn snapshot(&mut self, now_ns: u64, gc: bool) -> Result<CpuSnapshot> {
        let per_cpu = self.cpu_state.get(&0, 0).map_err(map_err)?;
        let mut live: BTreeMap<u32, ThreadTimes> = BTreeMap::new();
        for (tid, t) in self.threads_whole.read()? {
            live.insert(tid, t[0]);
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
        let slots = self.read_slots()?;
        let after_read = self.cpu_state.get(&0, 0).map_err(map_err)?;
        // (CPU, tid) -> times: the hash entries' first, before the CPUs'
        // pending time is added to them.
        let mut per_cpu_threads: BTreeMap<(u32, u32), ThreadTimes> = BTreeMap::new();
        if self.per_cpu_threads {
            for (tid, t) in self.retired.iter().map(|(tid, t)| (tid, t)).chain(live.iter()) {
                if t.ns.iter().any(|&n| n > 0) || t.unsplit_ns > 0 {
                    add_thread_times(per_cpu_threads.entry((NO_CPU, *tid)).or_default(), t);
                }
            }
        }

        let mut cpus = Vec::with_capacity(per_cpu.len());
        for (cpu, st) in per_cpu.iter().enumerate() {
            let mut st = *st;
            let pending_flushed = after_read
                .get(cpu)
                .is_some_and(|later| flushed_during_read(&st, later, live.get(&st.tid), slots.get(cpu)));
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
            if st.initialized != 0 && !exited && !pending_flushed {
                let t = live.entry(st.tid).or_default();
                for s in 0..state::REPORTED {
                    t.ns[s] += st.acc[s];
                }
                t.unsplit_ns += st.acc[state::UNRESOLVED];
                if self.per_cpu_threads && st.tid != 0 {
                    let t = per_cpu_threads.entry((cpu as u32, st.tid)).or_default();
                    for s in 0..state::REPORTED {
                        t.ns[s] += st.acc[s];
                    }
                    t.unsplit_ns += st.acc[state::UNRESOLVED];
                }
            }
            cpus.push(st);
        }
        if self.split == CpuSplit::Ticks {
            split_cpus_by_ticks(&mut cpus, &self.cpu_ticks_at_start, &cpu_user_system_ticks());
        }
        let mut irqs = self.irqs_whole.per_cpu()?;
        irqs.resize_with(cpus.len(), Vec::new);
        let irq_names = self
            .irq_names_whole
            .read()?
            .into_iter()
            .filter_map(|(slot, raw)| {
                let raw = raw[0];
                let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
                (slot < IRQ_DEVICE_SLOTS && end > 0).then(|| (slot, String::from_utf8_lossy(&raw[..end]).into_owned()))
            })
            .collect();
        let mut threads: Vec<(u32, ThreadTimes)> = self.retired.clone();
        threads.extend(live);
        merge_slots(&mut threads, slots.iter().flatten().filter(|s| s.tid != 0));
        threads.retain(|(_, t)| t.ns.iter().any(|&n| n > 0) || t.unsplit_ns > 0 || t.switches > 0);
        let thread_cpus = if self.per_cpu_threads {
            for (cpu, of_cpu) in slots.iter().enumerate() {
                for slot in of_cpu.iter().filter(|s| s.tid != 0) {
                    add_thread_times(per_cpu_threads.entry((cpu as u32, slot.tid)).or_default(), &slot.times);
                }
            }
            of_each_cpu(per_cpu_threads, &threads, self.split)
        } else {
            Vec::new()
        };
        if self.split == CpuSplit::Ticks {
            split_by_ticks(&mut threads);
        }
        Ok(CpuSnapshot {
            at_ns: now_ns,
            threads,
            cpus,
            irqs,
            irq_names,
            thread_cpus,
        })
    }
}

impl CpuCollector {
    /// Drops the totals of threads that exited (`vtrace serve`, once a
    /// snapshot that held them was read): their kernel entries are gone already.
    /// Their per-CPU slots (`--cpu-split ticks`) are freed too: a slot is
    /// its thread's until cleared, and the slots of ended threads came back
    /// at every read as threads of their own, up to one per slot index (a
    /// process a second added 1 MiB a minute to `vtrace serve`). A thread
    /// that takes a free slot in the microseconds between this read and
    /// write loses that slot's time so far.
    pub fn forget_retired(&mut self) -> Result<()> {
        let ended: HashSet<u32> = self.retired.iter().map(|(tid, _)| *tid).collect();
        self.retired.clear();
        let indexes: std::collections::BTreeSet<u32> = ended.iter().map(|&tid| thread_slot(tid)).collect();
        for index in indexes {
            let mut slots = self.thread_slots.get(&index, 0).map_err(map_err)?.to_vec();
            let mut freed = false;
            for slot in slots.iter_mut().filter(|s| s.tid != 0 && ended.contains(&s.tid)) {
                slot.tid = 0;
                slot.start_time = 0;
                freed = true;
            }
            if freed {
                let values = aya::maps::PerCpuValues::try_from(slots).map_err(map_err)?;
                self.thread_slots.set(index, values, 0).map_err(map_err)?;
            }
        }
        Ok(())
    }

    /// The per-CPU thread slots, per CPU (index: the slot).
    fn read_slots(&self) -> Result<Vec<Vec<ThreadSlot>>> {
        self.slots_whole.per_cpu()
    }
}

/// Whether the time `st` (a CPU's state, read before the threads' entries;
/// `later`: read again after them) held for its thread was flushed during
/// the read, into an entry that may have been read after the flush: then it
/// is not added again. Its thread's hash entry or its slot on that CPU tell
/// by their flush time (the hash map is read before the slots, so a later
/// flush elsewhere into the hash entry cannot stand for one into the slot
/// missed). A switch the kernel did not report flushes into the thread that
/// ran instead, and a full map into the overflow bucket: either during the
/// read, and the time is left to the next snapshot (as it is when the entry
/// was read before the flush) rather than risk counting it twice.
fn flushed_during_read(
    st: &CpuState,
    later: &CpuState,
    hash_entry: Option<&ThreadTimes>,
    slots_of_cpu: Option<&Vec<ThreadSlot>>,
) -> bool {
    // (`>=`: a state copied in the middle of a switch has the flush's time
    // as its last event's)
    let after = |t: &ThreadTimes| t.flushed_ns >= st.last_ts;
    let elsewhere =
        later.untraced_switches != st.untraced_switches || later.thread_map_overflows != st.thread_map_overflows;
    // (the idle task's time stays in the CPU's state)
    st.tid != 0
        && (elsewhere
            || hash_entry.is_some_and(after)
            || slots_of_cpu
                .and_then(|slots| slots.get(thread_slot(st.tid) as usize))
                .is_some_and(|slot| slot.tid == st.tid && after(&slot.times)))
}

/// Each (CPU, thread)'s times as `(cpu, tid, times)`, with its thread's
/// identity (fork, process, kernel thread) from its totals in `threads`,
/// split into user and system as the totals are: by its own ticks on that
/// CPU, else its process's there, else everyone's.
fn of_each_cpu(
    per_cpu: BTreeMap<(u32, u32), ThreadTimes>,
    threads: &[(u32, ThreadTimes)],
    split: CpuSplit,
) -> Vec<(u32, u32, ThreadTimes)> {
    // (a reused tid: its latest thread, as merge_slots adds its slots to)
    let whole: StdHashMap<u32, &ThreadTimes> = threads.iter().map(|(tid, t)| (*tid, t)).collect();
    let (cpus, mut times): (Vec<u32>, Vec<(u32, ThreadTimes)>) = per_cpu
        .into_iter()
        .filter(|(_, t)| t.ns.iter().any(|&n| n > 0) || t.unsplit_ns > 0)
        .map(|((cpu, tid), mut t)| {
            if let Some(w) = whole.get(&tid) {
                t.born_ns = w.born_ns;
                t.tgid = w.tgid;
                t.flags |= w.flags & thread_flag::KTHREAD;
            }
            (cpu, (tid, t))
        })
        .unzip();
    if split == CpuSplit::Ticks {
        split_by_ticks(&mut times);
    }
    cpus.into_iter()
        .zip(times)
        .map(|(cpu, (tid, t))| (cpu, tid, t))
        .collect()
}

/// Adds each slot to its thread's entry (the last one of that tid: a live
/// thread comes after the retired ones), or to a new one.
fn merge_slots<'a>(threads: &mut Vec<(u32, ThreadTimes)>, slots: impl IntoIterator<Item = &'a ThreadSlot>) {
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
    total.flushed_ns = total.flushed_ns.max(part.flushed_ns);
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
    use vtrace_common::THREAD_SLOTS;

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

    /// A CPU read when its last event, at 1000, was thread 7's: an entry of
    /// 7's flushed since (and read later) holds what the CPU had pending; a
    /// switch no tracepoint reported, during the read, may have put it in
    /// another thread's.
    #[test]
    fn pending_time_flushed_during_the_read_is_not_added_again() {
        let st = CpuState {
            tid: 7,
            last_ts: 1000,
            ..CpuState::default()
        };
        let flushed = |at: u64| ThreadTimes {
            flushed_ns: at,
            ..ThreadTimes::default()
        };
        let slots_with = |tid: u32, at: u64| {
            let mut slots = vec![ThreadSlot::default(); THREAD_SLOTS as usize];
            slots[thread_slot(7) as usize] = ThreadSlot {
                tid,
                times: flushed(at),
                ..ThreadSlot::default()
            };
            slots
        };
        let unreported = CpuState {
            untraced_switches: 1,
            ..st
        };
        let during = |later: &CpuState, hash: Option<&ThreadTimes>, slots: Option<&Vec<ThreadSlot>>| {
            flushed_during_read(&st, later, hash, slots)
        };
        assert!(!during(&st, Some(&flushed(900)), Some(&slots_with(7, 900))));
        assert!(during(&st, Some(&flushed(1100)), None), "into the hash entry");
        assert!(during(&st, None, Some(&slots_with(7, 1100))), "into its slot");
        assert!(during(&st, None, Some(&slots_with(7, 1000))), "copied mid-switch");
        assert!(
            !during(&st, None, Some(&slots_with(7 + THREAD_SLOTS, 1100))),
            "another thread's slot"
        );
        assert!(during(&unreported, Some(&flushed(900)), None), "into another thread");
        let idle = CpuState { tid: 0, ..st };
        let idle_later = CpuState { tid: 0, ..unreported };
        assert!(!flushed_during_read(&idle, &idle_later, None, None), "the idle task's");
    }
}
