//! Per-thread times: flushed from the CPU's accumulator at each context
//! switch, matched to the scheduler's own clocks, and each thread's identity.

use super::*;

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
    // No ticks measured adds nothing: as adding none.
    let (user, system) = slice.ticks.unwrap_or((0, 0));
    // Parked in the CPU's state, map memory whose values the verifier does
    // not carry, and read back once the entry is found: otherwise each way
    // the entry is found (a slot, taken or held; the hash map, found or
    // made) is verified again for each way the slice was measured and each
    // set of flags. btf_sched_switch with --cpu-split ticks: a 6.1 kernel's
    // verifier walked 161 000 instructions (1-2 s under TCG), 11 000 so
    // (6.18's: 20 000, 8 300).
    park(st, flush_parked::ADJUST, adjust as u64);
    park(st, flush_parked::UNBOUNDED, unbounded);
    park(st, flush_parked::USER_TICKS, user);
    park(st, flush_parked::SYSTEM_TICKS, system);
    park(st, flush_parked::FLAGS, flags_set as u64);
    let Some((t, fresh, in_slot)) = thread_entry(who) else {
        st.thread_map_overflows += 1;
        if let Some(t) = THREADS.get_ptr_mut(&OVERFLOW_TID) {
            add_times(unsafe { &mut *t }, st);
        }
        return parked(st, flush_parked::ADJUST) as i64;
    };
    let adjust = parked(st, flush_parked::ADJUST) as i64;
    let flags_set = parked(st, flush_parked::FLAGS) as u32;
    let guest = if st.acc[state::GUEST] != 0 {
        thread_flag::GUEST_TRACED
    } else {
        0
    };
    t.sched_adjust_ns += adjust;
    t.unbounded_ns += parked(st, flush_parked::UNBOUNDED);
    t.user_tick_ns += parked(st, flush_parked::USER_TICKS);
    t.system_tick_ns += parked(st, flush_parked::SYSTEM_TICKS);
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

/// Writes `value` to `slot` of the CPU's parked figures (volatile: read back
/// from memory, not kept in a register).
#[inline(always)]
fn park(st: &mut CpuState, slot: usize, value: u64) {
    if let Some(p) = st.flush_parked.get_mut(slot) {
        unsafe { core::ptr::write_volatile(p, value) };
    }
}

#[inline(always)]
fn parked(st: &CpuState, slot: usize) -> u64 {
    st.flush_parked
        .get(slot)
        .map_or(0, |p| unsafe { core::ptr::read_volatile(p) })
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
