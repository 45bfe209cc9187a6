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
    maps::{Array, HashMap, PerCpuArray, PerCpuHashMap},
};
use vtrace_common::{
    CpuState, IRQ_SLOTS, IrqStat, LastSwitchOut, MAX_THREADS, NO_SOFTIRQ, OVERFLOW_TID, SOFTIRQ_VECTORS, THREAD_SLOTS,
    ThreadSlot, ThreadTimes, state, thread_flag, thread_slot,
};

#[map]
pub static CPU_STATE: PerCpuArray<CpuState> = PerCpuArray::with_max_entries(1, 0);

/// Per-thread times and identity. With `--cpu-split ticks` it holds the
/// threads whose slot in THREAD_SLOT_TIMES another thread holds, and what
/// fork, exec and exit note (birth, parent, name and cgroup, exit).
#[map]
pub static THREADS: HashMap<u32, ThreadTimes> = HashMap::with_max_entries(MAX_THREADS, 0);

/// Per-thread times per CPU, direct-mapped by tid: a context switch costs
/// an array lookup instead of a hash lookup and update. (Not with the
/// syscall hooks on: a switch-in then needs the thread's mode as last seen
/// on any CPU, which only the hash map holds.)
#[map]
pub static THREAD_SLOT_TIMES: PerCpuArray<ThreadSlot> = PerCpuArray::with_max_entries(THREAD_SLOTS, 0);

/// Each thread's scheduler clocks at its last switch-out, direct-mapped by
/// tid (global: a thread's next switch-out may come on another CPU). A
/// switch-out always runs in the outgoing thread's context, so it is seen
/// even where the switch that brought the thread in was not: the gain since
/// then bounds the slice exactly (see [`LastSwitchOut`]).
#[map]
pub static LAST_SWITCH_OUT: Array<LastSwitchOut> = Array::with_max_entries(THREAD_SLOTS, 0);

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

/// The outgoing thread's slice by the scheduler's own clocks (differences
/// of its readings at switch-out and at switch-in), where both were read.
#[derive(Clone, Copy, Default)]
pub struct SliceClocks {
    /// `se.sum_exec_runtime` gained.
    pub runtime: Option<u64>,
    /// `utime`, `stime` gained (tick-sampled ns), read only with `--cpu-split ticks`.
    pub ticks: Option<(u64, u64)>,
}

/// Who the outgoing thread is.
#[derive(Clone, Copy)]
pub struct Outgoing {
    pub tid: u32,
    pub tgid: u32,
    /// Its task's `start_time`.
    pub start_time: u64,
}

/// Adds the CPU's accumulated time for the outgoing thread to its entry.
/// Called once per context switch. Returns the ns the scheduler's clock
/// added to (or, negative, took from) the slice.
///
/// Slices are timed from tracepoint to tracepoint, but the scheduler starts
/// and stops a thread's clock a few microseconds away from them (in
/// pick_next_task/put_prev_task). For threads that run in short slices (a
/// server woken per request) that gap is a large share of their time, so each
/// slice is set to the scheduler's own length and the difference, scheduler
/// code either way, is taken to or from system time.
#[inline(always)]
pub fn flush_thread(st: &mut CpuState, who: Outgoing, flags_set: u32, slice: SliceClocks) -> i64 {
    let (adjust, unbounded) = match slice.runtime {
        Some(ns) => (match_scheduler(st, ns), 0),
        None => (0, st.acc.iter().sum::<u64>()),
    };
    let guest = if st.acc[state::GUEST] != 0 {
        thread_flag::GUEST_TRACED
    } else {
        0
    };
    let Some((t, fresh, in_slot)) = thread_entry(who) else {
        st.thread_map_overflows += 1;
        if let Some(t) = THREADS.get_ptr_mut(&OVERFLOW_TID) {
            add_times(unsafe { &mut *t }, st);
        }
        return adjust;
    };
    t.sched_adjust_ns += adjust;
    t.unbounded_ns += unbounded;
    if let Some((user, system)) = slice.ticks {
        t.user_tick_ns += user;
        t.system_tick_ns += system;
    }
    add_times(t, st);
    t.switches += 1;
    // comm[0] == 0: created at fork, in the parent's context.
    if fresh || t.switches % IDENTITY_REFRESH_SWITCHES == 0 || t.comm[0] == 0 {
        refresh_identity(t);
        if in_slot {
            copy_identity_to_hash_entry(who.tid, t);
        }
    }
    t.flags = (t.flags & !thread_flag::IN_SYSCALL) | flags_set | guest;
    t.tgid = who.tgid;
    adjust
}

/// The outgoing thread's entry on this CPU: its slot (taken if free) with
/// `--cpu-split ticks`, its hash map entry (created if absent) otherwise or
/// when another thread holds the slot. Then: just created, and a slot.
#[inline(always)]
fn thread_entry(who: Outgoing) -> Option<(&'static mut ThreadTimes, bool, bool)> {
    if tick_split()
        && let Some(slot) = THREAD_SLOT_TIMES.get_ptr_mut(thread_slot(who.tid))
    {
        let slot = unsafe { &mut *slot };
        if slot.tid == who.tid && slot.start_time == who.start_time {
            return Some((&mut slot.times, false, true));
        }
        if slot.tid == 0 {
            slot.tid = who.tid;
            slot.start_time = who.start_time;
            slot.times = ThreadTimes::default();
            return Some((&mut slot.times, true, true));
        }
    }
    if let Some(t) = THREADS.get_ptr_mut(&who.tid) {
        return Some((unsafe { &mut *t }, false, false));
    }
    THREADS.insert(&who.tid, &ThreadTimes::default(), 0).ok()?;
    THREADS.get_ptr_mut(&who.tid).map(|t| (unsafe { &mut *t }, true, false))
}

/// A thread with slots may also have a hash entry (from fork, exec or a
/// slot held by another thread), whose name and cgroup win over the slots'
/// when userspace merges them: a slot's refresh goes there too, or a rename
/// or cgroup move after exec would never show. An exited entry keeps what
/// its exit read.
#[inline(always)]
fn copy_identity_to_hash_entry(tid: u32, slot: &ThreadTimes) {
    if let Some(t) = THREADS.get_ptr_mut(&tid) {
        let t = unsafe { &mut *t };
        if t.flags & thread_flag::EXITED == 0 {
            t.comm = slot.comm;
            t.cgroup_id = slot.cgroup_id;
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

/// Flushes the CPU's slice into `t`, noting when (see `ThreadTimes::flushed_ns`).
#[inline(always)]
fn add_times(t: &mut ThreadTimes, st: &CpuState) {
    t.ns[state::USER] += st.acc[state::USER];
    t.ns[state::SYSTEM] += st.acc[state::SYSTEM];
    t.ns[state::SOFTIRQ] += st.acc[state::SOFTIRQ];
    t.ns[state::HARDIRQ] += st.acc[state::HARDIRQ];
    t.ns[state::GUEST] += st.acc[state::GUEST];
    t.ns[state::IDLE] += st.acc[state::IDLE];
    t.unsplit_ns += st.acc[state::UNRESOLVED];
    t.flushed_ns = st.last_ts;
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
