//! The CPU attribution state machine: exact nanoseconds per (thread, state).
//!
//! Each CPU holds a [`CpuState`]: the current thread, its base state (user,
//! system, guest, idle or not yet known) and whether a softirq or hardirq is
//! running on top of it. Every event first *charges* the time since the
//! previous event on that CPU to whatever was running (the innermost context),
//! then changes the state. Time is summed per CPU in the per-CPU array and
//! flushed into the per-thread map only at context switch, so a syscall or
//! interrupt costs one per-CPU array lookup and a few adds.
//!
//! Interrupt time is charged to the interrupted thread (as softirq/hardirq) and
//! also kept per CPU, per softirq vector and per IRQ.
//!
//! Per-thread flushing at context switch is `threads.rs`; interrupt and
//! NET_RX softirq bookkeeping is `interrupts.rs`.

mod interrupts;
mod threads;

use crate::config::conf;
use aya_ebpf::{
    helpers::{bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::map,
    maps::{Array, HashMap, PerCpuArray, PerCpuHashMap},
};
use vtrace_common::{
    CpuState, IRQ_SLOTS, IrqStat, LastSwitchOut, MAX_THREADS, NO_SOFTIRQ, OVERFLOW_TID, SOFTIRQ_VECTORS, THREAD_SLOTS,
    ThreadSlot, ThreadTimes, flush_parked, state, thread_flag, thread_slot,
};

pub use interrupts::{NET_DEV_PENDING, irq_done, net_softirq_switch};
pub use threads::{LAST_SWITCH_OUT, Outgoing, SliceClocks, THREADS, flush_thread, refresh_identity};

#[map]
pub static CPU_STATE: PerCpuArray<CpuState> = PerCpuArray::with_max_entries(1, 0);

/// The value under `key`, inserted as `V::default()` first if absent.
#[inline(always)]
pub fn entry<K, V: Default>(map: &PerCpuHashMap<K, V>, key: &K) -> Option<&'static mut V> {
    if let Some(v) = map.get_ptr_mut(key) {
        return Some(unsafe { &mut *v });
    }
    let _ = map.insert(key, &V::default(), 0);
    map.get_ptr_mut(key).map(|v| unsafe { &mut *v })
}

/// The value under `key`, inserted first as a copy of `zero`'s one entry
/// if absent: for values too large to build on the 512-byte eBPF stack
/// (histograms). None when the map is full.
#[inline(always)]
pub fn entry_from<K, V>(map: &PerCpuHashMap<K, V>, zero: &Array<V>, key: &K) -> Option<&'static mut V> {
    if let Some(v) = map.get_ptr_mut(key) {
        return Some(unsafe { &mut *v });
    }
    map.insert(key, zero.get(0)?, 0).ok()?;
    map.get_ptr_mut(key).map(|v| unsafe { &mut *v })
}

/// True with `--cpu-split ticks`: user/system is not decided in the kernel.
#[inline(always)]
pub fn tick_split() -> bool {
    conf!(cpu.tick_split_on) != 0
}

/// The base state of a thread known to be in the kernel now but about to
/// return to user space unseen when the syscall hooks are off.
#[inline(always)]
pub fn kernel_base() -> usize {
    if tick_split() { state::UNRESOLVED } else { state::SYSTEM }
}

#[inline(always)]
pub fn now() -> u64 {
    unsafe { bpf_ktime_get_ns() }
}

#[inline(always)]
pub fn current_tid() -> u32 {
    bpf_get_current_pid_tgid() as u32
}

#[inline(always)]
pub fn cpu_state() -> Option<&'static mut CpuState> {
    CPU_STATE.get_ptr_mut(0).map(|p| unsafe { &mut *p })
}

/// Charges the time since the last event on this CPU to the innermost context.
#[inline(always)]
pub fn charge(st: &mut CpuState, now: u64) {
    let delta = now.wrapping_sub(st.last_ts);
    st.last_ts = now;
    // Events on one CPU are ordered; a "negative" delta would be a clock bug.
    if delta >> 62 != 0 {
        return;
    }
    let slot = if st.hardirq_depth > 0 {
        st.irq_acc += delta;
        state::HARDIRQ
    } else if st.softirq_vec != NO_SOFTIRQ {
        let vec = st.softirq_vec as usize;
        if vec < SOFTIRQ_VECTORS {
            st.softirq_ns[vec] += delta;
        }
        state::SOFTIRQ
    } else {
        st.base as usize
    };
    if slot < state::SLOTS {
        st.acc[slot] += delta;
        st.cpu_ns[slot] += delta;
    }
}

/// Starts the CPU's state machine on its first event (nothing before it is
/// invented) or charges the elapsed time. Returns the state to act on.
#[inline(always)]
pub fn enter(now: u64, base_if_new: usize) -> Option<&'static mut CpuState> {
    let st = cpu_state()?;
    if st.initialized == 0 {
        let tid = current_tid();
        st.initialized = 1;
        st.last_ts = now;
        st.tid = tid;
        st.base = if tid == 0 { state::IDLE } else { base_if_new } as u32;
        st.softirq_vec = NO_SOFTIRQ;
        st.hardirq_depth = 0;
    } else {
        charge(st, now);
    }
    Some(st)
}

/// Called by events that only happen in process context (syscalls, context
/// switches): an interrupt still open here lost its exit event (e.g. one
/// dropped by BPF recursion protection), so the state is repaired rather than
/// charging hardirq/softirq time until the end of the run.
#[inline(always)]
pub fn in_process_context(st: &mut CpuState) {
    if st.hardirq_depth != 0 || st.softirq_vec != NO_SOFTIRQ {
        st.hardirq_depth = 0;
        st.irq_acc = 0;
        st.softirq_vec = NO_SOFTIRQ;
        st.state_repairs += 1;
    }
}

/// Moves this slice's time in `from` to `to` (per thread and per CPU).
#[inline(always)]
pub fn move_slice_time(st: &mut CpuState, from: usize, to: usize) {
    if from >= state::SLOTS || to >= state::SLOTS {
        return;
    }
    let ns = st.acc[from];
    st.acc[from] = 0;
    st.acc[to] += ns;
    st.cpu_ns[from] = st.cpu_ns[from].saturating_sub(ns);
    st.cpu_ns[to] += ns;
}

/// Moves time charged while the base state was unknown to the state that the
/// thread turned out to be in.
#[inline(always)]
pub fn resolve(st: &mut CpuState, target: usize) {
    let pending = st.acc[state::UNRESOLVED];
    st.base = target as u32;
    if pending == 0 || target >= state::REPORTED {
        return;
    }
    st.acc[state::UNRESOLVED] = 0;
    st.acc[target] += pending;
    st.cpu_ns[state::UNRESOLVED] = st.cpu_ns[state::UNRESOLVED].saturating_sub(pending);
    st.cpu_ns[target] += pending;
}
