//! Scheduler hooks: context switch (flushes per-thread time), fork (marks new
//! threads as seen from birth), exec (reads the new name), exit (marks
//! threads whose totals are final).

use crate::runs::hook_programs;
use aya_ebpf::helpers::{bpf_get_current_pid_tgid, bpf_get_current_task, bpf_ktime_get_ns};
use vtrace_common::{CpuState, LastSwitchOut, ThreadTimes, clocks_in, state, thread_flag, thread_slot};

use crate::kmem::{BtfLoad, KernelMem, ProbeRead};
use crate::{
    account::{self, SliceClocks},
    config::conf,
};

/// PF_KTHREAD from include/linux/sched.h.
const PF_KTHREAD: u32 = 0x0020_0000;

#[inline(always)]
fn read_task_u32<M: KernelMem>(task: u64, offset: u32) -> u32 {
    M::read(task, offset).unwrap_or(0)
}

/// A u64 member of the task, None when its offset is unknown (0) or the read fails.
#[inline(always)]
fn read_task_u64<M: KernelMem>(task: u64, offset: u32) -> Option<u64> {
    if offset == 0 {
        return None;
    }
    M::read(task, offset)
}

/// The task's `utime` and `stime`: one read where they are adjacent (they are
/// in every kernel so far), two otherwise.
#[inline(always)]
fn read_utime_stime<M: KernelMem>(task: u64) -> Option<(u64, u64)> {
    let (u, s) = (conf!(cpu.task_utime), conf!(cpu.task_stime));
    if u == 0 || s == 0 {
        return None;
    }
    if s == u + 8 {
        let both: [u64; 2] = M::read(task, u)?;
        return Some((both[0], both[1]));
    }
    read_task_u64::<M>(task, u).zip(read_task_u64::<M>(task, s))
}

/// (tid, tgid) of the running task `task`: two loads where reads are
/// loads, one helper call otherwise.
#[inline(always)]
fn current_ids<M: KernelMem>(task: u64) -> (u32, u32) {
    if M::DIRECT && conf!(cpu.task_pid) != 0 && conf!(cpu.task_tgid) != 0 {
        return (
            read_task_u32::<M>(task, conf!(cpu.task_pid)),
            read_task_u32::<M>(task, conf!(cpu.task_tgid)),
        );
    }
    let id = bpf_get_current_pid_tgid();
    (id as u32, (id >> 32) as u32)
}

/// The readings a slice is measured against, taken from the incoming
/// thread's task at switch-in (and again from the same task at switch-out).
#[inline(always)]
fn read_clocks<M: KernelMem>(task: u64) -> (Option<u64>, Option<(u64, u64)>) {
    let runtime = read_task_u64::<M>(task, conf!(cpu.task_runtime));
    let ticks = if account::tick_split() {
        read_utime_stime::<M>(task)
    } else {
        None
    };
    (runtime, ticks)
}

/// What the outgoing thread ran in this slice, by the scheduler's clocks
/// as read now (`out`): the gain since its last switch-out where that was
/// seen (exact even when the switch that brought it in went unreported),
/// else the gain since its switch-in where that was seen; nothing
/// otherwise. `last.clocks` is 0 where its last switch-out is not known.
/// (Plain values throughout, no Option payloads: the verifier refuses a
/// spilled register that one path left unset.)
#[inline(always)]
fn slice_clocks(st: &CpuState, seen_in: bool, last: &LastSwitchOut, out: &LastSwitchOut) -> SliceClocks {
    let from_last = |bit: u32| out.clocks & last.clocks & bit != 0;
    let from_in = |bit: u32| seen_in && out.clocks & st.in_clocks & bit != 0;
    let runtime = if from_last(clocks_in::RUNTIME) && out.runtime >= last.runtime {
        Some(out.runtime - last.runtime)
    } else if from_in(clocks_in::RUNTIME) && out.runtime >= st.in_runtime {
        Some(out.runtime - st.in_runtime)
    } else {
        None
    };
    // utime/stime only move while the thread runs: the gain since it last
    // ran is exactly this slice's ticks.
    let ticks = if from_last(clocks_in::TICKS) {
        Some((
            out.utime.saturating_sub(last.utime),
            out.stime.saturating_sub(last.stime),
        ))
    } else if from_in(clocks_in::TICKS) {
        Some((
            out.utime.saturating_sub(st.in_utime),
            out.stime.saturating_sub(st.in_stime),
        ))
    } else {
        None
    };
    SliceClocks { runtime, ticks }
}

/// The outgoing thread's readings in [`account::LAST_SWITCH_OUT`] (all zero
/// when another thread's are there), and the entry to overwrite.
#[inline(always)]
fn last_switch_out(tid: u32, start_time: u64) -> (LastSwitchOut, Option<&'static mut LastSwitchOut>) {
    let Some(entry) = account::LAST_SWITCH_OUT.get_ptr_mut(thread_slot(tid)) else {
        return (LastSwitchOut::default(), None);
    };
    let entry = unsafe { &mut *entry };
    let mine = if entry.tid == tid && entry.start_time == start_time {
        *entry
    } else {
        LastSwitchOut::default()
    };
    (mine, Some(entry))
}

/// `prev_running`: the outgoing thread was preempted (TASK_RUNNING) rather
/// than blocking, which for a thread of unknown mode means it was in user space.
/// `prev`, `next`: their task_structs, read through `M` (`next` is None
/// where the tracepoint does not give it: no slice is then measured by the
/// scheduler's clocks).
#[inline(always)]
fn on_switch<M: KernelMem>(prev: u64, prev_running: bool, next: Option<u64>, next_tid: u32) {
    let now = account::now();
    let Some(st) = account::cpu_state() else { return };
    if st.initialized == 0 {
        st.initialized = 1;
        st.softirq_vec = vtrace_common::NO_SOFTIRQ;
        st.hardirq_depth = 0;
    } else {
        // `st` is this CPU's state; charge through it rather than calling
        // account::enter, which would create a second &mut to the same value.
        account::charge(st, now);
        account::in_process_context(st);
        let (prev_tid, prev_tgid) = current_ids::<M>(prev);
        let seen_in = prev_tid == st.tid;
        if !seen_in {
            // A switch happened that no sched_switch event reported (seen on
            // this kernel). The slice's owner is uncertain: keep its time on
            // the CPU, give idle time to the idle task, and let the
            // scheduler-runtime match in flush_thread trim a real thread's
            // slice to what it actually ran.
            st.untraced_switches += 1;
            if prev_tid == 0 {
                account::move_slice_time(st, state::USER, state::IDLE);
                account::move_slice_time(st, state::SYSTEM, state::IDLE);
                account::move_slice_time(st, state::UNRESOLVED, state::IDLE);
                st.base = state::IDLE as u32;
            } else if st.tid == 0 {
                account::move_slice_time(st, state::IDLE, state::UNRESOLVED);
                st.base = state::UNRESOLVED as u32;
            }
        }
        // The idle task's flags are never used (its time stays per CPU).
        let kthread = prev_tid != 0 && read_task_u32::<M>(prev, conf!(cpu.task_flags)) & PF_KTHREAD != 0;
        let tick_split = account::tick_split();
        if st.base == state::UNRESOLVED as u32 && !tick_split {
            let mode = if kthread || !prev_running {
                state::SYSTEM
            } else {
                state::USER
            };
            account::resolve(st, mode);
        }
        let mut flags = 0;
        if st.base == state::SYSTEM as u32 {
            flags |= thread_flag::IN_SYSCALL;
        }
        if kthread {
            flags |= thread_flag::KTHREAD;
        }
        if prev_tid == 0 {
            for s in 0..state::SLOTS {
                st.idle_acc[s] += st.acc[s];
            }
            st.idle_switches += 1;
        } else {
            let (runtime, ticks) = read_clocks::<M>(prev);
            let start_time = read_task_u64::<M>(prev, conf!(cpu.task_start_time)).unwrap_or(0);
            let out = LastSwitchOut {
                tid: prev_tid,
                clocks: if runtime.is_some() { clocks_in::RUNTIME } else { 0 }
                    | if ticks.is_some() { clocks_in::TICKS } else { 0 },
                start_time,
                runtime: runtime.unwrap_or(0),
                utime: ticks.map_or(0, |t| t.0),
                stime: ticks.map_or(0, |t| t.1),
            };
            let (last, entry) = last_switch_out(prev_tid, start_time);
            let slice = slice_clocks(st, seen_in, &last, &out);
            let who = account::Outgoing {
                tid: prev_tid,
                tgid: prev_tgid,
                start_time,
            };
            let adjust = account::flush_thread(st, who, flags, slice);
            if !seen_in && adjust < 0 {
                st.untraced_trimmed_ns += adjust.unsigned_abs();
            }
            if let Some(entry) = entry {
                *entry = out;
            }
        }
    }
    st.acc = [0; state::SLOTS];
    st.tid = next_tid;
    st.last_ts = now;
    st.in_clocks = 0;
    if next_tid != 0
        && let Some(next) = next
    {
        let (runtime, ticks) = read_clocks::<M>(next);
        if let Some(r) = runtime {
            st.in_runtime = r;
            st.in_clocks |= clocks_in::RUNTIME;
        }
        if let Some((u, s)) = ticks {
            st.in_utime = u;
            st.in_stime = s;
            st.in_clocks |= clocks_in::TICKS;
        }
    }
    st.base = if next_tid == 0 {
        state::IDLE
    } else if account::tick_split() {
        // Its mode is never decided in the kernel: no lookup needed.
        state::UNRESOLVED
    } else {
        match unsafe { account::THREADS.get(&next_tid) } {
            Some(t) if t.flags & (thread_flag::IN_SYSCALL | thread_flag::KTHREAD) != 0 => state::SYSTEM,
            Some(_) => state::USER,
            None => state::UNRESOLVED,
        }
    } as u32;
}

/// The incoming task where the record names only its tid: the runqueue's
/// current task, reached from the outgoing one (`task->se.cfs_rq->rq->curr`),
/// if it is `next_tid`.
#[inline(always)]
fn runqueue_current(prev: u64, next_tid: u32) -> Option<u64> {
    let (cfs_rq_at, rq_at, curr_at) = (conf!(cpu.task_cfs_rq), conf!(cpu.cfs_rq_rq), conf!(cpu.rq_curr));
    if cfs_rq_at == 0 || rq_at == 0 || curr_at == 0 || next_tid == 0 {
        return None;
    }
    let cfs_rq: u64 = ProbeRead::read(prev, cfs_rq_at)?;
    let rq: u64 = ProbeRead::read(cfs_rq, rq_at)?;
    let next: u64 = ProbeRead::read(rq, curr_at)?;
    (read_task_u32::<ProbeRead>(next, conf!(cpu.task_pid)) == next_tid).then_some(next)
}

/// A thread created while recording starts inside the kernel (returning from
/// clone), so it is known to be in "syscall" mode from birth.
#[inline(always)]
fn on_fork(child_tid: u32, child_tgid: u32) {
    let parent_tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    let fresh = ThreadTimes {
        tgid: child_tgid,
        parent_tgid,
        flags: thread_flag::IN_SYSCALL | thread_flag::BORN_DURING_RUN,
        born_ns: unsafe { bpf_ktime_get_ns() },
        ..ThreadTimes::default()
    };
    let _ = account::THREADS.insert(&child_tid, &fresh, 0);
}

/// The thread's hash map entry, created if absent (its times may all be in
/// per-CPU slots with `--cpu-split ticks`, or it has not switched out yet).
#[inline(always)]
fn current_thread_entry() -> Option<&'static mut ThreadTimes> {
    let id = bpf_get_current_pid_tgid();
    let tid = id as u32;
    if account::THREADS.get_ptr_mut(&tid).is_none() {
        let fresh = ThreadTimes {
            tgid: (id >> 32) as u32,
            ..ThreadTimes::default()
        };
        let _ = account::THREADS.insert(&tid, &fresh, 0);
    }
    account::THREADS.get_ptr_mut(&tid).map(|t| unsafe { &mut *t })
}

/// Notes the exit in the thread's entry.
#[inline(always)]
fn on_exit() {
    if let Some(t) = current_thread_entry() {
        t.flags |= thread_flag::EXITED;
        t.exited_ns = unsafe { bpf_ktime_get_ns() };
        // Context switches refresh these only now and then: make the final row right.
        account::refresh_identity(t);
    }
}

/// Takes the name the thread has just exec'd into. Context switches read it
/// only on a thread's first switch-out and every 16th after (per CPU slot
/// with `--cpu-split ticks`): a child switched out between fork and exec
/// kept its parent's name through a whole busy run. (The hash entry's name
/// wins over the per-CPU slots' when they are merged; their refreshes reach
/// it, see `account/threads.rs` `copy_identity_to_hash_entry`.)
#[inline(always)]
fn on_exec() {
    if let Some(t) = current_thread_entry() {
        account::refresh_identity(t);
    }
}

// TP_PROTO(bool preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state)
hook_programs! {
    "sched_switch", "sched";
    btf btf_sched_switch(ctx) => {
        let next: u64 = ctx.arg(2);
        let prev_state: u64 = ctx.arg(3);
        on_switch::<BtfLoad>(
            ctx.arg(1),
            prev_state as u32 == 0,
            Some(next),
            read_task_u32::<BtfLoad>(next, conf!(cpu.task_pid)),
        );
    }
    raw raw_sched_switch(ctx) => {
        let next: u64 = ctx.arg(2);
        let prev_state: u64 = ctx.arg(3);
        on_switch::<ProbeRead>(
            ctx.arg(1),
            prev_state as u32 == 0,
            Some(next),
            read_task_u32::<ProbeRead>(next, conf!(cpu.task_pid)),
        );
    }
    tp tp_sched_switch(ctx) => {
        let prev_state: i64 = unsafe { ctx.read_at(conf!(cpu.tp_switch_prev_state) as usize) }.unwrap_or(1);
        let next_tid: u32 = unsafe { ctx.read_at(conf!(cpu.tp_switch_next_pid) as usize) }.unwrap_or(0);
        let prev = unsafe { bpf_get_current_task() };
        on_switch::<ProbeRead>(prev, prev_state == 0, runqueue_current(prev, next_tid), next_tid);
    }
}

// TP_PROTO(struct task_struct *parent, struct task_struct *child)
hook_programs! {
    "sched_process_fork", "sched";
    raw raw_sched_process_fork(ctx) => {
        let child: u64 = ctx.arg(1);
        on_fork(
            read_task_u32::<ProbeRead>(child, conf!(cpu.task_pid)),
            read_task_u32::<ProbeRead>(child, conf!(cpu.task_tgid)),
        );
    }
    tp tp_sched_process_fork(ctx) => {
        let child_tid: u32 = unsafe { ctx.read_at(conf!(cpu.tp_fork_child_pid) as usize) }.unwrap_or(0);
        // The record has no tgid; the first switch-out of the child fills it in.
        on_fork(child_tid, 0);
    }
}

// TP_PROTO(struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm): p is current.
hook_programs! {
    "sched_process_exec", "sched";
    raw raw_sched_process_exec(_ctx) => {
        on_exec();
    }
    tp tp_sched_process_exec(_ctx) => {
        on_exec();
    }
}

hook_programs! {
    "sched_process_exit", "sched";
    raw raw_sched_process_exit(_ctx) => {
        on_exit();
    }
    tp tp_sched_process_exit(_ctx) => {
        on_exit();
    }
}
