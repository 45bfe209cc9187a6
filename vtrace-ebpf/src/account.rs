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

use crate::config::conf;
use aya_ebpf::{
    helpers::{bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::map,
    maps::{HashMap, PerCpuArray, PerCpuHashMap},
};
use vtrace_common::{
    CpuState, IRQ_SLOTS, IrqStat, MAX_THREADS, NO_SOFTIRQ, OVERFLOW_TID, SOFTIRQ_VECTORS, ThreadTimes, state,
    thread_flag,
};

#[map]
pub static CPU_STATE: PerCpuArray<CpuState> = PerCpuArray::with_max_entries(1, 0);

#[map]
pub static THREADS: HashMap<u32, ThreadTimes> = HashMap::with_max_entries(MAX_THREADS, 0);

/// NET_RX softirq ns per device ([`vtrace_common::dev_key`]; 0: softirqs that received no packet).
#[map]
pub static NET_SOFTIRQ: PerCpuHashMap<u64, u64> = PerCpuHashMap::with_max_entries(4096, 0);

#[map]
pub static IRQS: PerCpuArray<IrqStat> = PerCpuArray::with_max_entries(IRQ_SLOTS, 0);

/// The value under `key`, inserted as `V::default()` first if absent.
#[inline(always)]
pub fn entry<K, V: Default>(map: &PerCpuHashMap<K, V>, key: &K) -> Option<&'static mut V> {
    if let Some(v) = map.get_ptr_mut(key) {
        return Some(unsafe { &mut *v });
    }
    let _ = map.insert(key, &V::default(), 0);
    map.get_ptr_mut(key).map(|v| unsafe { &mut *v })
}

/// True with `--cpu-split ticks`: user/system is not decided in the kernel.
#[inline(always)]
pub fn tick_split() -> bool {
    conf!(tick_split_on) != 0
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

/// The outgoing thread's scheduler readings at switch-out.
#[derive(Clone, Copy, Default)]
pub struct TaskClocks {
    /// `se.sum_exec_runtime`, when it could be read.
    pub runtime: Option<u64>,
    /// `utime`, `stime` (tick-sampled ns), read only with `--cpu-split ticks`.
    pub ticks: Option<(u64, u64)>,
}

/// Adds the CPU's accumulated time for the outgoing thread to its map entry.
/// Called once per context switch.
///
/// Slices are timed from tracepoint to tracepoint, but the scheduler starts
/// and stops a thread's clock a few microseconds away from them (in
/// pick_next_task/put_prev_task). For threads that run in short slices (a
/// server woken per request) that gap is a large share of their time, so each
/// slice is set to the scheduler's own length and the difference, scheduler
/// code either way, is taken to or from system time.
#[inline(always)]
pub fn flush_thread(st: &mut CpuState, tid: u32, tgid: u32, flags_set: u32, clocks: TaskClocks) {
    let guest = if st.acc[state::GUEST] != 0 {
        thread_flag::GUEST_TRACED
    } else {
        0
    };
    let known = if clocks.runtime.is_some() {
        thread_flag::RUNTIME_KNOWN
    } else {
        0
    };
    let runtime_now = clocks.runtime.unwrap_or(0);
    let (utime, stime) = clocks.ticks.unwrap_or((0, 0));
    let ticks_known = if clocks.ticks.is_some() {
        thread_flag::TICKS_KNOWN
    } else {
        0
    };
    if let Some(t) = THREADS.get_ptr_mut(&tid) {
        let t = unsafe { &mut *t };
        if tid != 0 && t.flags & thread_flag::RUNTIME_KNOWN != 0 && runtime_now >= t.sched_runtime && known != 0 {
            t.sched_adjust_ns += match_scheduler(st, runtime_now - t.sched_runtime);
        }
        // utime/stime only move while the thread runs: the gain since its
        // last switch-out is exactly this slice's ticks.
        if t.flags & thread_flag::TICKS_KNOWN != 0 && ticks_known != 0 {
            t.user_tick_ns += utime.saturating_sub(t.utime_at_switch);
            t.system_tick_ns += stime.saturating_sub(t.stime_at_switch);
        }
        t.utime_at_switch = utime;
        t.stime_at_switch = stime;
        add_times(t, st);
        t.switches += 1;
        // comm[0] == 0: created at fork, in the parent's context.
        if t.switches % IDENTITY_REFRESH_SWITCHES == 0 || t.comm[0] == 0 {
            refresh_identity(t);
        }
        t.flags = (t.flags & !(thread_flag::IN_SYSCALL | thread_flag::RUNTIME_KNOWN | thread_flag::TICKS_KNOWN))
            | flags_set
            | guest
            | known
            | ticks_known;
        t.tgid = tgid;
        t.sched_runtime = runtime_now;
        return;
    }
    let mut fresh = ThreadTimes {
        switches: 1,
        sched_runtime: runtime_now,
        utime_at_switch: utime,
        stime_at_switch: stime,
        tgid,
        flags: flags_set | guest | known | ticks_known,
        ..ThreadTimes::default()
    };
    refresh_identity(&mut fresh);
    add_times(&mut fresh, st);
    if THREADS.insert(&tid, &fresh, 0).is_err() {
        st.thread_map_overflows += 1;
        if let Some(t) = THREADS.get_ptr_mut(&OVERFLOW_TID) {
            add_times(unsafe { &mut *t }, st);
        }
    }
}

/// How often (in switch-outs) a thread's name and cgroup are read again: each
/// read costs more than the rest of a context switch's bookkeeping, and both
/// rarely change (a new entry and the exit event read them too).
const IDENTITY_REFRESH_SWITCHES: u64 = 16;

/// Reads the current thread's name and cgroup into its entry.
#[inline(always)]
pub fn refresh_identity(t: &mut ThreadTimes) {
    t.comm = bpf_get_current_comm().unwrap_or([0; 16]);
    t.cgroup_id = unsafe { bpf_get_current_cgroup_id() };
}

/// Makes the slice in `st.acc` last `sched_ns`; returns the ns added (or
/// removed, negative) to system time.
#[inline(always)]
fn match_scheduler(st: &mut CpuState, sched_ns: u64) -> i64 {
    let mut seen: u64 = 0;
    for s in 0..state::SLOTS {
        seen += st.acc[s];
    }
    if sched_ns >= seen {
        let more = sched_ns - seen;
        st.acc[state::SYSTEM] += more;
        more as i64
    } else {
        // Too much was charged: after an unreported switch the slice also
        // holds another thread's time, interrupts included. Take it back from
        // system and user first, then from the other states.
        let mut less = seen - sched_ns;
        let taken_total = less;
        for slot in [
            state::SYSTEM,
            state::USER,
            state::UNRESOLVED,
            state::SOFTIRQ,
            state::HARDIRQ,
            state::GUEST,
            state::IDLE,
        ] {
            let take = if less < st.acc[slot] { less } else { st.acc[slot] };
            st.acc[slot] -= take;
            less -= take;
        }
        -((taken_total - less) as i64)
    }
}

#[inline(always)]
fn add_times(t: &mut ThreadTimes, st: &CpuState) {
    t.ns[state::USER] += st.acc[state::USER];
    t.ns[state::SYSTEM] += st.acc[state::SYSTEM];
    t.ns[state::SOFTIRQ] += st.acc[state::SOFTIRQ];
    t.ns[state::HARDIRQ] += st.acc[state::HARDIRQ];
    t.ns[state::GUEST] += st.acc[state::GUEST];
    t.ns[state::IDLE] += st.acc[state::IDLE];
    t.unsplit_ns += st.acc[state::UNRESOLVED];
}

const NET_RX: u32 = 3;

/// `CpuState::net_dev` from NET_RX entry until its first packet names a device.
pub const NET_DEV_PENDING: u64 = u64::MAX;

/// Charges the running NET_RX softirq's time since the last device switch to
/// the device it was processing, then hands over to `dev` (0 at softirq
/// end), whose counters are in DEV_SLOT_STATS slot `slot` (or `DEV_SLOTS`:
/// none). The time before a softirq's first packet goes to that packet's
/// device (its poll); a softirq without packets charges device 0. Packets of
/// the device already charged cost nothing; a device change costs one
/// array update, or a hash map update for a device without a slot. Time is
/// softirq time only: the caller's event timestamps are those of the softirq
/// state machine.
#[inline(always)]
pub fn net_softirq_switch(now: Option<u64>, dev: u64, slot: u32) {
    let Some(st) = cpu_state() else { return };
    if st.softirq_vec != NET_RX || st.net_dev == dev {
        return;
    }
    if st.net_dev == NET_DEV_PENDING {
        st.net_slot = slot;
        if dev != 0 {
            st.net_dev = dev;
            return;
        }
        st.net_dev = 0;
    }
    let now = now.unwrap_or_else(self::now);
    let elapsed = now.saturating_sub(st.net_mark);
    if st.net_mark != 0 && elapsed > 0 {
        let in_slot = match crate::net::DEV_SLOT_STATS.get_ptr_mut(st.net_slot) {
            Some(s) => {
                unsafe { (*s).softirq_ns += elapsed };
                true
            }
            None => false,
        };
        if !in_slot {
            match NET_SOFTIRQ.get_ptr_mut(&st.net_dev) {
                Some(v) => unsafe { *v += elapsed },
                None => {
                    let _ = NET_SOFTIRQ.insert(&st.net_dev, &elapsed, 0);
                }
            }
        }
    }
    st.net_dev = dev;
    st.net_slot = slot;
    st.net_mark = now;
}

/// Records the end of the outermost hard interrupt in its IRQ slot.
#[inline(always)]
pub fn irq_done(st: &mut CpuState) {
    let slot = if st.irq_slot < IRQ_SLOTS {
        st.irq_slot
    } else {
        IRQ_SLOTS - 1
    };
    if let Some(s) = IRQS.get_ptr_mut(slot) {
        let s = unsafe { &mut *s };
        s.ns += st.irq_acc;
        s.count += 1;
    }
    st.irq_acc = 0;
}
