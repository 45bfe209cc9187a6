//! CPU attribution collector: reads the per-CPU state machines and the
//! per-thread map written by `vtrace-ebpf/src/account.rs`.
//!
//! Each snapshot also charges, in userspace, the time each CPU's current
//! thread has run since the last kernel event, so long-running threads with no
//! events (a busy loop on a quiet CPU) are not under-counted.

use std::collections::{BTreeMap, HashSet};

use aya::{
    Ebpf,
    maps::{HashMap, MapData, PerCpuArray},
};
use vtrace_common::{CpuState, IRQ_SLOTS, IrqStat, NO_SOFTIRQ, OVERFLOW_TID, ThreadTimes, state, thread_flag};

use crate::{Error, Result};

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

pub struct CpuCollector {
    threads: HashMap<MapData, u32, ThreadTimes>,
    cpu_state: PerCpuArray<MapData, CpuState>,
    irqs: PerCpuArray<MapData, IrqStat>,
    /// Totals of exited threads removed from the kernel map to keep it small.
    retired: Vec<(u32, ThreadTimes)>,
    /// Exited threads seen in the previous snapshot: removed at the next one,
    /// after their final context switch has certainly been flushed.
    exited_last_time: HashSet<u32>,
}

fn map_err(e: impl std::fmt::Display) -> Error {
    Error::Ebpf(e.to_string())
}

impl CpuCollector {
    /// Takes the engine's maps out of the loaded object (before programs attach).
    pub fn new(ebpf: &mut Ebpf) -> Result<Self> {
        let take = |ebpf: &mut Ebpf, name: &str| {
            ebpf.take_map(name)
                .ok_or_else(|| Error::Ebpf(format!("map {name} missing from the eBPF object")))
        };
        let mut threads: HashMap<MapData, u32, ThreadTimes> =
            HashMap::try_from(take(ebpf, "THREADS")?).map_err(map_err)?;
        // The bucket for threads that find the map full must exist up front.
        threads
            .insert(OVERFLOW_TID, ThreadTimes::default(), 0)
            .map_err(map_err)?;
        Ok(CpuCollector {
            threads,
            cpu_state: PerCpuArray::try_from(take(ebpf, "CPU_STATE")?).map_err(map_err)?,
            irqs: PerCpuArray::try_from(take(ebpf, "IRQS")?).map_err(map_err)?,
            retired: Vec::new(),
            exited_last_time: HashSet::new(),
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
            charge_pending(&mut st, now_ns);
            // A thread that exited is not running, whatever the CPU's state
            // says (its switch-out can go unreported on some kernels): its
            // totals are final, and the CPU's pending time is not its.
            let exited = live.get(&st.tid).is_some_and(|t| t.flags & thread_flag::EXITED != 0)
                || self.retired.iter().any(|(tid, _)| *tid == st.tid);
            if st.initialized != 0 && !exited {
                let t = live.entry(st.tid).or_default();
                for s in 0..state::REPORTED {
                    t.ns[s] += st.acc[s];
                }
            }
            cpus.push(st);
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
        threads.extend(
            live.into_iter()
                .filter(|(_, t)| t.ns.iter().any(|&n| n > 0) || t.switches > 0),
        );
        Ok(CpuSnapshot {
            at_ns: now_ns,
            threads,
            cpus,
            irqs,
        })
    }
}

/// Charges time since the CPU's last event to its innermost context, as the
/// kernel would at the next event. A thread whose mode is still unresolved has
/// run without a syscall or a switch since recording began: counted as user.
fn charge_pending(st: &mut CpuState, now_ns: u64) {
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
    let slot = if slot == state::UNRESOLVED {
        state::USER
    } else {
        slot.min(state::SLOTS - 1)
    };
    st.acc[slot] += delta;
    st.cpu_ns[slot] += delta;
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
