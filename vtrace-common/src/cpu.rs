//! CPU attribution: per-CPU state machine, per-thread times, interrupts.

/// CPU-time states a thread's time is split into. The index is the slot in
/// [`ThreadTimes::ns`] and [`CpuState::cpu_ns`].
pub mod state {
    pub const USER: usize = 0;
    pub const SYSTEM: usize = 1;
    pub const SOFTIRQ: usize = 2;
    pub const HARDIRQ: usize = 3;
    pub const GUEST: usize = 4;
    pub const IDLE: usize = 5;
    /// Process-context time whose mode (user or kernel) is not known yet: a
    /// thread already running when recording started, resolved at its next
    /// syscall event or context switch; or, with the syscall hooks off
    /// (`--cpu-split ticks`), all process-context time, split in userspace by
    /// the kernel's tick-sampled utime/stime. Never reported as such.
    pub const UNRESOLVED: usize = 6;
    /// Number of reported states.
    pub const REPORTED: usize = 6;
    /// Number of slots including [`UNRESOLVED`].
    pub const SLOTS: usize = 7;
    pub const NAMES: [&str; REPORTED] = ["user", "system", "softirq", "hardirq", "guest", "idle"];
}

/// Softirq vectors, numbered as in the kernel's `enum { HI_SOFTIRQ = 0, ... }`.
pub const SOFTIRQ_VECTORS: usize = 10;
pub const SOFTIRQ_NAMES: [&str; SOFTIRQ_VECTORS] = [
    "HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU",
];
/// `softirq_vec` value when no softirq is running.
pub const NO_SOFTIRQ: u32 = u32::MAX;

/// Hard interrupt slots: device IRQ numbers below [`IRQ_DEVICE_SLOTS`] map to
/// themselves (larger ones share the last device slot); x86 system vectors,
/// which have their own tracepoints, follow.
pub const IRQ_DEVICE_SLOTS: u32 = 256;
pub mod irq_vector {
    pub const LOCAL_TIMER: u32 = 256;
    pub const RESCHEDULE: u32 = 257;
    pub const CALL_FUNCTION: u32 = 258;
    pub const CALL_FUNCTION_SINGLE: u32 = 259;
    pub const IRQ_WORK: u32 = 260;
    pub const NAMES: [(u32, &str); 5] = [
        (LOCAL_TIMER, "LOC (local timer)"),
        (RESCHEDULE, "RES (reschedule IPI)"),
        (CALL_FUNCTION, "CAL (function call IPI)"),
        (CALL_FUNCTION_SINGLE, "CAL (single function call IPI)"),
        (IRQ_WORK, "IWI (irq work)"),
    ];
}
pub const IRQ_SLOTS: u32 = 264;

/// Bytes of a device IRQ's name kept as the kernel gave it at its handler
/// (`IRQ_NAMES`): an IRQ freed before the recording ends (vfio's, when its
/// VMM exits) keeps the name it had, which /proc/interrupts no longer shows.
pub const IRQ_NAME_LEN: usize = 32;

/// Bits of [`ThreadTimes::flags`].
pub mod thread_flag {
    /// The thread was inside a syscall when it was switched out.
    pub const IN_SYSCALL: u32 = 1 << 0;
    /// `sched_process_exit` fired for the thread.
    pub const EXITED: u32 = 1 << 1;
    /// A kernel thread (PF_KTHREAD): all of its non-interrupt time is system time.
    pub const KTHREAD: u32 = 1 << 2;
    /// Created (fork/clone) while recording, so its whole life was seen.
    pub const BORN_DURING_RUN: u32 = 1 << 3;
    /// Guest time came from kvm_entry/kvm_exit, not from tick sampling.
    pub const GUEST_TRACED: u32 = 1 << 4;
}

/// Key of the per-thread map reserved for time that found the map full.
pub const OVERFLOW_TID: u32 = u32::MAX;
/// Capacity of the per-thread map.
pub const MAX_THREADS: u32 = 32768;

/// Per-thread CPU time, keyed by tid. Written only at context switch (and
/// fork/exec/exit), never per syscall or interrupt.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadTimes {
    /// Nanoseconds per state, indexed by [`state`].
    pub ns: [u64; state::REPORTED],
    /// Times the thread was switched out.
    pub switches: u64,
    /// cgroup v2 id (inode of the cgroup directory), read with `comm`.
    pub cgroup_id: u64,
    /// Net ns moved into system time so that slices match the scheduler's
    /// own accounting (see `account::flush_thread`); diagnostic.
    pub sched_adjust_ns: i64,
    /// Process-context ns left for userspace to split into user and system
    /// (`--cpu-split ticks`: the syscall hooks are off).
    pub unsplit_ns: u64,
    /// The kernel's tick-sampled `utime` / `stime` (ns) gained over the slices
    /// seen whole: the ratio that splits `unsplit_ns`.
    pub user_tick_ns: u64,
    pub system_tick_ns: u64,
    /// Time in slices that no scheduler clock bounded (switch-in unreported
    /// and no earlier switch-out of the thread seen): its total may be off
    /// by at most this much.
    pub unbounded_ns: u64,
    /// CLOCK_MONOTONIC ns of the fork that made the thread (0: it predates
    /// the recording) and of its exit (0: still running). Only the thread's
    /// hash-map entry holds them (fork, exec and exit write nothing else).
    pub born_ns: u64,
    pub exited_ns: u64,
    /// CLOCK_MONOTONIC ns of the last switch-out that added to this entry:
    /// a snapshot that read a CPU's pending time before the entry knows
    /// from it whether that time was flushed in meanwhile.
    pub flushed_ns: u64,
    pub tgid: u32,
    /// tgid of the process that forked this thread's process (0 if unknown).
    pub parent_tgid: u32,
    pub flags: u32,
    pub _pad: u32,
    pub comm: [u8; 16],
}

/// Slots of the per-CPU direct-mapped thread array (a power of two).
pub const THREAD_SLOTS: u32 = 1024;

/// The slot of thread `tid` in the per-CPU thread array.
pub const fn thread_slot(tid: u32) -> u32 {
    tid & (THREAD_SLOTS - 1)
}

/// A thread's times on one CPU, in the per-CPU array that spares a context
/// switch the per-thread hash map (`--cpu-split ticks`). The slot is the
/// thread's while `tid` and `start_time` match; a thread whose slot another
/// holds uses the hash map. Userspace sums a thread's slots over the CPUs
/// and its hash entry.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadSlot {
    /// 0: free (the idle task never takes one).
    pub tid: u32,
    pub _pad: u32,
    /// The task's `start_time`: a reused tid is another thread.
    pub start_time: u64,
    pub times: ThreadTimes,
}

/// A thread's scheduler clocks as its last switch-out read them, in a
/// global array direct-mapped by tid ([`thread_slot`]). At its next
/// switch-out the gains are exactly what it ran since, even where the
/// switch that brought it in was never reported (a slice timed from the
/// last event seen on the CPU then also holds the previous thread's time).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LastSwitchOut {
    pub tid: u32,
    /// [`clocks_in`] bits: which readings below are valid.
    pub clocks: u32,
    /// The task's `start_time`: a reused tid is another thread.
    pub start_time: u64,
    pub runtime: u64,
    pub utime: u64,
    pub stime: u64,
}

/// Per-CPU accounting state machine. One instance per CPU in a per-CPU array,
/// so the hot path (syscall, irq, softirq events) touches nothing else.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuState {
    /// Timestamp (CLOCK_MONOTONIC ns) up to which time has been charged.
    pub last_ts: u64,
    /// Time charged to the current thread since it was switched in; flushed
    /// into its [`ThreadTimes`] at switch-out.
    pub acc: [u64; state::SLOTS],
    /// Time charged on this CPU per state, all threads together.
    pub cpu_ns: [u64; state::SLOTS],
    pub softirq_ns: [u64; SOFTIRQ_VECTORS],
    pub softirq_count: [u64; SOFTIRQ_VECTORS],
    /// Hardirq time of the interrupt in progress, flushed into its slot at exit.
    pub irq_acc: u64,
    /// Events that found the per-thread map full (their time went to OVERFLOW_TID).
    pub thread_map_overflows: u64,
    /// Process-context events (syscall, context switch) that found an
    /// interrupt still "open" because its exit event was missed; the
    /// interrupt state was reset.
    pub state_repairs: u64,
    /// Context switches whose outgoing thread was not the one the last
    /// sched_switch switched in: a switch happened that no tracepoint reported.
    pub untraced_switches: u64,
    /// What slices whose switch-in went unreported would have over-charged
    /// their thread: taken back by its own scheduler clock.
    pub untraced_trimmed_ns: u64,
    /// What the idle task (tid 0) was charged on this CPU, and its
    /// switch-outs: kept here rather than in the per-thread map, which
    /// spares about half of all context switches a hash lookup.
    pub idle_acc: [u64; state::SLOTS],
    pub idle_switches: u64,
    /// NET_RX softirq time per device: the device whose packet was last
    /// received in the running softirq ([`dev_key`]; 0 before the first).
    pub net_dev: u64,
    /// When `net_dev` took over.
    pub net_mark: u64,
    /// The current thread's `se.sum_exec_runtime`, `utime` and `stime` when
    /// it was switched in: at its switch-out the differences are the
    /// slice's length and ticks by the scheduler's own clocks.
    pub in_runtime: u64,
    pub in_utime: u64,
    pub in_stime: u64,
    /// A switch-out's figures parked while its thread's entry is found
    /// (see vtrace-ebpf's `account::flush_thread`): [`flush_parked`] slots.
    pub flush_parked: [u64; flush_parked::SLOTS],
    /// Current thread on this CPU.
    pub tid: u32,
    /// Base state of the current thread: USER, SYSTEM, GUEST, IDLE or UNRESOLVED.
    pub base: u32,
    /// Softirq vector running now, or [`NO_SOFTIRQ`].
    pub softirq_vec: u32,
    /// Nesting depth of hard interrupts.
    pub hardirq_depth: u32,
    /// Slot of the outermost hard interrupt in progress.
    pub irq_slot: u32,
    /// 0 until the first event on this CPU: time before it is not invented.
    pub initialized: u32,
    /// `net_dev`'s slot in the DEV_SLOTS array, whose `softirq_ns` its time
    /// goes to; [`DEV_SLOTS`] when it has none (the hash map then).
    pub net_slot: u32,
    /// Which of `in_runtime` and `in_utime`/`in_stime` hold the current
    /// thread's readings ([`clocks_in`]).
    pub in_clocks: u32,
}

/// Slots of [`CpuState::flush_parked`].
pub mod flush_parked {
    /// The scheduler-clock adjustment (an i64's bits).
    pub const ADJUST: usize = 0;
    pub const UNBOUNDED: usize = 1;
    pub const USER_TICKS: usize = 2;
    pub const SYSTEM_TICKS: usize = 3;
    /// The thread flags to set.
    pub const FLAGS: usize = 4;
    pub const SLOTS: usize = 5;
}

/// Bits of [`CpuState::in_clocks`].
pub mod clocks_in {
    pub const RUNTIME: u32 = 1 << 0;
    pub const TICKS: u32 = 1 << 1;
}

/// Per-CPU time and count of one hard interrupt slot.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IrqStat {
    pub ns: u64,
    pub count: u64,
}

/// The CPU layer's offsets and switch (its task and sched_switch offsets serve the run-queue layer too: the CPU layer always runs).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuConfig {
    /// `offsetof(struct task_struct, pid)` from BTF.
    pub task_pid: u32,
    /// `offsetof(struct task_struct, tgid)` from BTF.
    pub task_tgid: u32,
    /// `offsetof(struct task_struct, flags)` from BTF.
    pub task_flags: u32,
    /// `offsetof(struct task_struct, se) + offsetof(struct sched_entity, sum_exec_runtime)`.
    pub task_runtime: u32,
    /// `offsetof(struct task_struct, utime)` and `stime` from BTF (read with `TICK_SPLIT_ON`).
    pub task_utime: u32,
    pub task_stime: u32,
    /// `offsetof(struct task_struct, start_time)`: tells a reused tid apart.
    pub task_start_time: u32,
    /// The path from a task to its runqueue's current task, which the
    /// classic sched_switch record lacks (the scheduler sets `rq->curr` to
    /// `next` before the tracepoint): `task->se.cfs_rq` (with
    /// FAIR_GROUP_SCHED), `cfs_rq->rq`, `rq->curr`; 0 where missing.
    pub task_cfs_rq: u32,
    pub cfs_rq_rq: u32,
    pub rq_curr: u32,
    /// 1: `--cpu-split ticks`: the syscall hooks do no accounting (they are
    /// attached only when tun fd tracking needs them), process-context
    /// time stays unsplit and each slice's utime/stime ticks are kept.
    pub tick_split_on: u32,
    /// sched/sched_switch record: offset of `prev_state`.
    pub tp_switch_prev_state: u32,
    /// sched/sched_switch record: offset of `next_pid`.
    pub tp_switch_next_pid: u32,
    /// sched/sched_process_fork record: offset of `child_pid`.
    pub tp_fork_child_pid: u32,
    /// irq/irq_handler_entry and _exit records: offset of `irq`.
    pub tp_irq_irq: u32,
    /// irq/irq_handler_entry records: offset of the `name` __data_loc word.
    pub tp_irq_name: u32,
    /// `struct irqaction`: offset of `name` (raw irq_handler_entry's action).
    pub irqaction_name: u32,
    /// irq/softirq_entry and _exit records: offset of `vec`.
    pub tp_softirq_vec: u32,
}
