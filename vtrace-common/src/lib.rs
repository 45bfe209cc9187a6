//! Types shared by the eBPF programs (`vtrace-ebpf`) and userspace (`vtrace`).
//!
//! Every struct here is a BPF map value: `#[repr(C)]`, plain old data, no padding
//! surprises (all fields are 8-byte aligned groups), identical on both sides.
#![no_std]

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
/// fork/exit), never per syscall or interrupt.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadTimes {
    /// Nanoseconds per state, indexed by [`state`].
    pub ns: [u64; state::REPORTED],
    /// Times the thread was switched out.
    pub switches: u64,
    /// cgroup v2 id (inode of the cgroup directory) at the last switch-out.
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

/// Points on a packet's way through a network device.
pub mod hop {
    /// net_dev_queue: handed to the device's queue (qdisc) for transmit.
    pub const QUEUE: u32 = 0;
    /// net_dev_start_xmit: given to the driver.
    pub const START_XMIT: u32 = 1;
    /// net_dev_xmit: the driver took it (rc 0) or refused it (counted as an error).
    pub const XMIT: u32 = 2;
    /// netif_rx: queued for receive (veth, tun/tap, loopback, backlog).
    pub const RX: u32 = 3;
    /// netif_receive_skb: entering the protocol stack.
    pub const RECEIVE: u32 = 4;
    /// napi_gro_receive_entry: a NAPI driver's receive, before GRO.
    pub const GRO: u32 = 5;
    pub const NAMES: [&str; 6] = ["queue", "start_xmit", "xmit", "rx", "receive", "gro"];

    /// A hop's name ("?" for an unknown code).
    pub fn name(hop: u32) -> &'static str {
        NAMES.get(hop as usize).copied().unwrap_or("?")
    }

    /// A hop's code from its name (`u32::MAX` for an unknown name).
    pub fn code(name: &str) -> u32 {
        NAMES.iter().position(|n| *n == name).map_or(u32::MAX, |i| i as u32)
    }
    pub const fn is_tx(hop: u32) -> bool {
        hop <= XMIT
    }

    /// Past this after a `receive`, an skb address seen again is a new packet:
    /// one delivered locally is freed without an event (TCP frees its skbs
    /// directly) and its address soon reused, while forwarding (a bridge, a
    /// router) moves a packet on within microseconds.
    pub const REUSE_AFTER_RECEIVE_NS: u64 = 20_000;
    /// Past this after any hop, an address seen again is a new packet.
    pub const REUSE_AFTER_NS: u64 = 1_000_000_000;

    /// Whether an skb address seen at `hop` of `dev`, `gap_ns` after it was
    /// last seen at `prev_hop` of `prev_dev`, is a new packet rather than the
    /// same one's next hop. The one rule the kernel side (hop latency) and
    /// the report (journeys) both follow. A packet delivered on a device is
    /// not queued again on that same device (loopback and namespace replies
    /// reuse addresses within microseconds); hairpin forwarding out of the
    /// interface it came in on, the exception, shows as two packets.
    pub const fn is_new_packet(prev_hop: u32, prev_dev: u64, hop: u32, dev: u64, gap_ns: u64) -> bool {
        gap_ns >= REUSE_AFTER_NS
            || (prev_hop == RECEIVE && (gap_ns > REUSE_AFTER_RECEIVE_NS || (dev == prev_dev && hop == QUEUE)))
    }
}

/// Upper bounds of the size histogram's buckets: they make the MTU (1500)
/// and GSO aggregates visible. One more bucket counts larger packets.
pub const SIZE_BUCKETS: [u64; 10] = [64, 128, 256, 512, 1024, 1500, 4096, 8192, 16384, 65536];
pub const LOG2_BUCKETS: usize = 20;

/// Index of `len`'s bucket in a [`SIZE_BUCKETS`] histogram (the last for larger sizes).
#[inline(always)]
pub fn size_bucket(len: u64) -> usize {
    let mut i = 0;
    while i < SIZE_BUCKETS.len() {
        if len <= SIZE_BUCKETS[i] {
            return i;
        }
        i += 1;
    }
    SIZE_BUCKETS.len()
}

/// Counts one `len` in a size histogram (buckets of [`size_bucket`]). The
/// explicit bound check is the one the verifier needs to see.
#[inline(always)]
pub fn count_size(hist: &mut [u64], len: u64) {
    let b = size_bucket(len);
    if b < hist.len() {
        hist[b] += 1;
    }
}

/// Buckets of a device's size histogram: [`SIZE_BUCKETS`] plus one edge at
/// the device's MTU plus its link-layer header (a full frame), plus one for
/// larger sizes.
pub const DEV_SIZE_BUCKETS: usize = SIZE_BUCKETS.len() + 2;

/// Index of `len` in a device's size histogram whose extra edge is
/// `mtu_edge` (0: none): the buckets are [`SIZE_BUCKETS`] and `mtu_edge`
/// in ascending order, so a frame of exactly the MTU lands at or below the
/// edge and a GSO aggregate above it.
#[inline(always)]
pub fn dev_size_bucket(len: u64, mtu_edge: u64) -> usize {
    size_bucket(len) + (mtu_edge != 0 && len > mtu_edge) as usize
}

/// Upper bounds of a device histogram's buckets (the last is u32::MAX for
/// larger sizes), for `mtu_edge` (0: none).
pub fn dev_size_edges(mtu_edge: u64) -> [u64; DEV_SIZE_BUCKETS] {
    let mut edges = [u32::MAX as u64; DEV_SIZE_BUCKETS];
    let mut i = 0;
    let mut placed = mtu_edge == 0;
    for &e in SIZE_BUCKETS.iter() {
        if !placed && mtu_edge < e {
            edges[i] = mtu_edge;
            i += 1;
            placed = true;
        }
        edges[i] = e;
        i += 1;
    }
    if !placed {
        edges[i] = mtu_edge;
    }
    edges
}

/// Slots of the direct-mapped per-CPU array that counts a (device, hop)
/// without a hash lookup: a power of two.
pub const DEV_SLOTS: u32 = 64;

/// The slot of device `ifindex` at `hop`. (Not its address: a tp_btf
/// program holds that as a typed pointer, on which the verifier allows no
/// shifts.) Devices of different namespaces with the same index share a
/// slot; the first one seen keeps it.
pub const fn dev_slot(ifindex: u32, hop: u32) -> u32 {
    let x = ifindex.wrapping_mul(0x9e37_79b1) ^ hop.wrapping_mul(0x85eb_ca6b);
    (x >> 26) & (DEV_SLOTS - 1)
}

/// One (device, hop) in a [`DEV_SLOTS`] array: the device's identity is read
/// once, when a CPU first sees it in this slot (`dev` 0: free). A device
/// whose slot holds another goes to the hash map instead.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DevSlot {
    /// The `struct net_device` address.
    pub dev: u64,
    /// Its namespace's `struct net` address when the slot was taken.
    pub net: u64,
    pub key: DevKey,
    pub stats: DevStats,
    /// NET_RX softirq ns charged to the device (in its `receive` slot only).
    pub softirq_ns: u64,
}

/// A network device in one namespace at one hop.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DevKey {
    /// Network namespace inode.
    pub netns: u32,
    pub ifindex: u32,
    pub hop: u32,
    pub _pad: u32,
}

/// `netns << 32 | ifindex`: a device across namespaces.
pub const fn dev_key(netns: u32, ifindex: u32) -> u64 {
    ((netns as u64) << 32) | ifindex as u64
}

/// Packets through a device at one hop, per CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DevStats {
    pub packets: u64,
    /// Bytes as the device counts them (with the link-layer header).
    pub bytes: u64,
    /// Packets that were GSO aggregates (gso_size > 0).
    pub gso_packets: u64,
    /// Segments these packets become on the wire (1 for a non-GSO packet).
    pub gso_segs: u64,
    /// net_dev_xmit with a non-zero return code.
    pub errors: u64,
    /// Packets per bucket of [`dev_size_edges`]`(mtu_edge)`.
    pub size_hist: [u64; DEV_SIZE_BUCKETS],
    /// Packets per power-of-two size: bucket i holds sizes in [2^i, 2^(i+1)).
    pub log2_hist: [u64; LOG2_BUCKETS],
    /// The device's MTU plus its link-layer header at the last packet (0 when unknown).
    pub mtu_edge: u64,
    /// The largest packet seen.
    pub max_len: u64,
}

impl Default for DevStats {
    fn default() -> Self {
        DevStats {
            packets: 0,
            bytes: 0,
            gso_packets: 0,
            gso_segs: 0,
            errors: 0,
            size_hist: [0; DEV_SIZE_BUCKETS],
            log2_hist: [0; LOG2_BUCKETS],
            mtu_edge: 0,
            max_len: 0,
        }
    }
}

/// One step of a packet's journey: from (device, hop) to (device, hop).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HopEdge {
    /// [`dev_key`] of both ends.
    pub from_dev: u64,
    pub to_dev: u64,
    pub from_hop: u32,
    pub to_hop: u32,
}

/// Latency of one [`HopEdge`], per CPU: log2 ns buckets.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HopLatency {
    pub count: u64,
    pub sum_ns: u64,
    pub log2: [u64; LATENCY_BUCKETS],
}

impl Default for HopLatency {
    fn default() -> Self {
        HopLatency {
            count: 0,
            sum_ns: 0,
            log2: [0; LATENCY_BUCKETS],
        }
    }
}

/// Where an skb was last seen (for the next hop's latency): one slot of the
/// direct-mapped `SKB_MARKS` table, owned by `skb` (0: free).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SkbMark {
    pub skb: u64,
    pub ts: u64,
    pub dev: u64,
    pub hop: u32,
    pub _pad: u32,
}

/// Slots of the `SKB_MARKS` table (a power of two).
pub const SKB_MARK_SLOTS: u32 = 1 << 16;

/// The `SKB_MARKS` slot of an skb address: sk_buffs are 256-byte slab
/// objects, so the low bits carry nothing; a Fibonacci hash spreads the rest.
#[inline(always)]
pub const fn skb_mark_slot(skb: u64) -> u32 {
    ((skb >> 8).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SKB_MARK_SLOTS.trailing_zeros())) as u32
}

/// Indices of the `NET_LOSSES` per-CPU array: what the net layer could not keep.
pub mod net_loss {
    /// Per-packet events that found the ring buffer full (`--events`).
    pub const EVENT_DROPS: u32 = 0;
    /// In-flight skbs whose mark another skb's took (same `SKB_MARKS` slot):
    /// their next hop's latency is not measured.
    pub const MARKS_DISPLACED: u32 = 1;
    pub const COUNT: u32 = 2;
}

/// A per-packet event (`vtrace record --events`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetEvent {
    pub ts: u64,
    pub skb: u64,
    pub dev: u64,
    pub len: u32,
    pub hop: u32,
}

/// read/write-family syscalls of one process on a tun/tap fd (the VMM side
/// of a tap: a user-space virtio backend moving packets).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TunIoKey {
    /// [`dev_key`] of the tap.
    pub dev: u64,
    pub tgid: u32,
    /// 1: write/writev (packets into the tap), 0: read/readv.
    pub write: u32,
}

/// A syscall on a tun fd in progress (between sys_enter and sys_exit).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TunPending {
    pub dev: u64,
    pub write: u32,
    pub _pad: u32,
}

/// The tun layer's functions ([`TunKey::function`]), in catalog order.
pub mod tun_fn {
    /// A frame written into a tap by its user (write(2), or one sendmsg frame).
    pub const GET_USER: u32 = 0;
    /// vhost-net (or another in-kernel user) sends frames into a tap.
    pub const SENDMSG: u32 = 1;
    /// vhost-net takes one frame from a tap.
    pub const RECVMSG: u32 = 2;
    /// The stack queues a frame to a tap for its user.
    pub const NET_XMIT: u32 = 3;
    pub const HANDLE_TX: u32 = 4;
    pub const HANDLE_RX: u32 = 5;
    pub const HANDLE_TX_KICK: u32 = 6;
    pub const HANDLE_RX_KICK: u32 = 7;
    pub const NAMES: [&str; 8] = [
        "tun_get_user",
        "tun_sendmsg",
        "tun_recvmsg",
        "tun_net_xmit",
        "handle_tx",
        "handle_rx",
        "handle_tx_kick",
        "handle_rx_kick",
    ];
}

/// `tun_msg_ctl.type` of a vhost-net batch (include/linux/if_tun.h).
pub const TUN_MSG_PTR: u16 = 2;
/// Frames in one vhost-net batch at most (VHOST_NET_BATCH).
pub const TUN_BATCH_MAX: u32 = 64;
/// Frame size buckets: up to 64 B, 128 B, ... 4096 B, larger.
pub const TUN_SIZE_BUCKETS: usize = 8;

/// The bucket of a frame of `bytes`.
#[inline(always)]
pub const fn tun_size_bucket(bytes: u64) -> usize {
    let mut b = 0;
    let mut edge = 64;
    while b < TUN_SIZE_BUCKETS - 1 && bytes > edge {
        b += 1;
        edge <<= 1;
    }
    b
}

/// A tun/vhost function's work on one device ([`dev_key`]; 0 for the
/// vhost handlers, which do not name it) by one process.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TunKey {
    pub dev: u64,
    pub tgid: u32,
    /// [`tun_fn`].
    pub function: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TunStats {
    pub calls: u64,
    /// Frames the calls moved: a vhost-net batch is many frames in one call.
    pub frames: u64,
    pub bytes: u64,
    pub sizes: [u64; TUN_SIZE_BUCKETS],
    /// The device's name when first seen (a tap may be gone by the end).
    pub name: [u8; 16],
}

/// Drop reasons counted (enum skb_drop_reason values below this).
pub const DROP_REASONS: u32 = 256;

/// Uprobe attachments (each attach point has a slot, passed as its BPF cookie).
pub const MAX_UPROBES: u32 = 64;

/// How a uprobe finds the size of what a call handles.
pub mod uprobe_size {
    /// No size: calls only.
    pub const NONE: u32 = 0;
    /// The integer argument `arg`.
    pub const ARG: u32 = 1;
    /// `tot_len` (u16 at offset 16) of the lwIP `struct pbuf *` in argument `arg`.
    pub const PBUF_ARG: u32 = 2;
}

/// Per-slot configuration written by userspace.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UprobeSpec {
    pub size_kind: u32,
    pub arg: u32,
}

/// Calls of one uprobe slot by one process.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UprobeKey {
    pub slot: u32,
    pub tgid: u32,
}

pub const LATENCY_BUCKETS: usize = 32;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UprobeStats {
    pub calls: u64,
    pub bytes: u64,
    /// Sizes per [`SIZE_BUCKETS`] bucket (calls with a size only).
    pub size_hist: [u64; 11],
    /// Returns seen (uretprobe) and their latency: log2 ns buckets.
    pub returns: u64,
    pub latency_sum_ns: u64,
    pub latency_log2: [u64; LATENCY_BUCKETS],
}

impl Default for UprobeStats {
    fn default() -> Self {
        UprobeStats {
            calls: 0,
            bytes: 0,
            size_hist: [0; 11],
            returns: 0,
            latency_sum_ns: 0,
            latency_log2: [0; LATENCY_BUCKETS],
        }
    }
}

/// KVM: what a [`KvmLatencyKey`] times.
pub mod kvm_latency {
    /// kvm_exit -> next kvm_entry of the vCPU thread (`reason` = exit reason, `isa` = 1 VMX / 2 SVM).
    pub const EXIT: u32 = 0;
    /// kvm_userspace_exit -> the thread's next `ioctl(KVM_RUN)`: the VMM's
    /// handling time (`reason` = KVM_EXIT_*, or [`super::KVM_RUN_INTERRUPTED`]).
    pub const USERSPACE: u32 = 1;
    /// kvm_vcpu_wakeup: a halted vCPU woke (`reason` 1 = waited, 0 = polled; time from the event).
    pub const HALT: u32 = 2;
    pub const NAMES: [&str; 3] = ["exit", "userspace_exit", "halt"];
}

/// kvm_userspace_exit with a negative errno (KVM_RUN interrupted by a
/// signal: -EINTR), kept apart from real exit reasons.
pub const KVM_RUN_INTERRUPTED: u32 = 0x8000_0000;

/// Log-linear latency buckets: 8 per power of two (12.5 % wide), exact
/// below 8 ns, up to 2^34 ns (17 s); larger values land in the last bucket.
pub const FINE_BUCKETS: usize = 256;

#[inline(always)]
pub fn fine_bucket(ns: u64) -> usize {
    if ns < 8 {
        return ns as usize;
    }
    let e = 63 - ns.leading_zeros() as usize;
    let i = 8 * (e - 2) + ((ns >> (e - 3)) & 7) as usize;
    if i < FINE_BUCKETS { i } else { FINE_BUCKETS - 1 }
}

/// The values bucket `i` holds: `[lo, hi)`.
pub fn fine_bucket_range(i: usize) -> (u64, u64) {
    if i < 8 {
        return (i as u64, i as u64 + 1);
    }
    let e = i / 8 + 2;
    let step = 1u64 << (e - 3);
    let lo = (1u64 << e) + (i % 8) as u64 * step;
    (lo, lo + step)
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KvmLatencyKey {
    pub tid: u32,
    /// [`kvm_latency`] kind.
    pub kind: u32,
    pub reason: u32,
    pub isa: u32,
}

/// Count, sum, extremes and a [`fine_bucket`] histogram of one latency.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatencyHist {
    pub count: u64,
    pub sum_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    pub buckets: [u64; FINE_BUCKETS],
}

impl Default for LatencyHist {
    fn default() -> Self {
        LatencyHist {
            count: 0,
            sum_ns: 0,
            min_ns: 0,
            max_ns: 0,
            buckets: [0; FINE_BUCKETS],
        }
    }
}

/// KVM events counted per vCPU thread and address ([`KvmEventKey::kind`]).
pub mod kvm_event {
    /// kvm_pio: `addr` = port, `op` = 0 read / 1 write, `size` = bytes per access.
    pub const PIO: u32 = 0;
    /// kvm_mmio: `addr` = guest-physical address, `op` = 0 unsatisfied read / 1 read / 2 write.
    pub const MMIO: u32 = 1;
    /// kvm_fast_mmio (ioeventfd, handled in the kernel): `addr` = gpa.
    pub const FAST_MMIO: u32 = 2;
    /// kvm_set_irq: `addr` = GSI, `op` = level.
    pub const SET_IRQ: u32 = 3;
    /// kvm_msi_set_irq: `addr` = MSI address, `op` = vector.
    pub const MSI: u32 = 4;
    /// kvm_inj_virq: `addr` = vector, `op` = 1 soft (INTn) / 0 IRQ.
    pub const INJ_VIRQ: u32 = 5;
    /// kvm_userspace_exit: `addr` = KVM_EXIT_* reason (every exit, also one
    /// the VMM never returns from; [`super::kvm_latency::USERSPACE`] times the others).
    pub const USERSPACE_EXIT: u32 = 6;
    /// kvm_exit: `addr` = exit reason, `op` = isa (every exit, also one
    /// with no kvm_entry after it; [`super::kvm_latency::EXIT`] times the others).
    pub const EXIT: u32 = 7;
    pub const NAMES: [&str; 8] = [
        "pio",
        "mmio",
        "fast_mmio",
        "set_irq",
        "msi",
        "inj_virq",
        "userspace_exit",
        "exit",
    ];
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KvmEventKey {
    pub tid: u32,
    pub kind: u32,
    pub addr: u64,
    pub op: u32,
    pub size: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KvmEventStats {
    pub count: u64,
    /// size x repeat count (string I/O), 0 for interrupts.
    pub bytes: u64,
}

/// What a vCPU thread is in the middle of: since its last kvm_exit and
/// since its last return to user space.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VcpuPending {
    pub exit_ns: u64,
    pub exit_reason: u32,
    pub exit_isa: u32,
    pub userspace_ns: u64,
    pub userspace_reason: u32,
    pub _pad: u32,
}

/// One sampled stack: the thread and its kernel and user stack ids (-1:
/// none, e.g. a kernel thread has no user stack).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SampleKey {
    pub tgid: u32,
    pub tid: u32,
    pub kernel_stack: i32,
    pub user_stack: i32,
}

/// A thread's longest run-queue wait (the run-queue layer), and the thread
/// that ran on that CPU just before it got in: who ran instead.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunqWorst {
    pub ns: u64,
    /// When the wait ended (bpf_ktime_get_ns).
    pub at_ns: u64,
    pub prev_tid: u32,
    pub cpu: u32,
}

/// A thread's run-queue waits, and the start of the one under way: one map
/// value, so one lookup per wakeup, preemption or switch-in.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunqStats {
    /// When it became runnable (bpf_ktime_get_ns); 0 while it runs or sleeps.
    pub since: u64,
    pub hist: LatencyHist,
    pub worst: RunqWorst,
}

/// Block requests counted per device, operation and submitting cgroup (the
/// block layer).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockKey {
    /// dev_t as the kernel keeps it: major << 20 | minor.
    pub dev: u32,
    /// [`block_op`].
    pub op: u32,
    pub cgroup_id: u64,
    /// The submitting process (tgid; a kworker's for writeback).
    pub pid: u32,
    pub _pad: u32,
}

/// Log2 buckets of the block histograms: bucket `i` holds `[2^i, 2^(i+1))`.
pub const BLOCK_BUCKETS: usize = 32;

/// Completed requests of one [`BlockKey`]: bytes, time queued (insert ->
/// issue, for requests that were inserted) and on the device (issue ->
/// complete), with log2 histograms of both and of the request size.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockStats {
    pub requests: u64,
    pub bytes: u64,
    /// Requests that went through the I/O scheduler's queue (insert seen).
    pub queued: u64,
    pub queue_ns: u64,
    pub device_ns: u64,
    pub queue_hist: [u64; BLOCK_BUCKETS],
    pub device_hist: [u64; BLOCK_BUCKETS],
    pub size_hist: [u64; BLOCK_BUCKETS],
}

impl Default for BlockStats {
    fn default() -> Self {
        BlockStats {
            requests: 0,
            bytes: 0,
            queued: 0,
            queue_ns: 0,
            device_ns: 0,
            queue_hist: [0; BLOCK_BUCKETS],
            device_hist: [0; BLOCK_BUCKETS],
            size_hist: [0; BLOCK_BUCKETS],
        }
    }
}

/// A request between its insert or issue and its completion.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockPending {
    pub insert_ns: u64,
    pub issue_ns: u64,
    /// The cgroup of the task that inserted (or, without an insert, issued) it.
    pub cgroup_id: u64,
    /// Its device (dev_t), whose in-flight count it is part of.
    pub dev: u32,
    /// The process that inserted (or issued) it.
    pub pid: u32,
}

/// Requests of one device between insert (or issue) and completion, now
/// and at most since the layer started ([`BlockPending`]s counted).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockInflight {
    pub now: u64,
    pub peak: u64,
}

/// Block operations (`REQ_OP_*`, the low byte of a request's cmd_flags).
pub mod block_op {
    pub const READ: u32 = 0;
    pub const WRITE: u32 = 1;
    pub const FLUSH: u32 = 2;
    pub const DISCARD: u32 = 3;
    /// Names by `REQ_OP_*` value; others read as "op<N>".
    pub const NAMES: [&str; 4] = ["read", "write", "flush", "discard"];
}

/// File syscalls counted per process, syscall and filesystem (the fs layer).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FsKey {
    pub tgid: u32,
    /// The x86-64 syscall number ([`fs_op`]).
    pub nr: u32,
    /// `s_magic` of the superblock the call went to (0: not resolved).
    pub magic: u64,
}

/// Calls of one [`FsKey`]: bytes moved (read/write family), failed calls,
/// and the entry -> exit latency of every call.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsStats {
    pub bytes: u64,
    pub errors: u64,
    pub latency: LatencyHist,
}

/// A thread inside a file syscall: when it entered, which call, and the
/// superblock resolved at entry (from its fd, or where its path starts).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsPending {
    pub start_ns: u64,
    pub magic: u64,
    pub nr: u32,
    pub _pad: u32,
}

/// The file syscalls the fs layer follows (x86-64 numbers) and how each
/// finds its filesystem.
pub mod fs_op {
    pub const READ: u32 = 0;
    pub const WRITE: u32 = 1;
    pub const OPEN: u32 = 2;
    pub const CLOSE: u32 = 3;
    pub const STAT: u32 = 4;
    pub const FSTAT: u32 = 5;
    pub const LSTAT: u32 = 6;
    pub const PREAD64: u32 = 17;
    pub const PWRITE64: u32 = 18;
    pub const READV: u32 = 19;
    pub const WRITEV: u32 = 20;
    pub const FSYNC: u32 = 74;
    pub const FDATASYNC: u32 = 75;
    pub const GETDENTS64: u32 = 217;
    pub const OPENAT: u32 = 257;
    pub const NEWFSTATAT: u32 = 262;
    pub const PREADV: u32 = 295;
    pub const PWRITEV: u32 = 296;
    pub const PREADV2: u32 = 327;
    pub const PWRITEV2: u32 = 328;
    pub const STATX: u32 = 332;
    pub const OPENAT2: u32 = 437;

    /// How a followed call finds its filesystem.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Target {
        /// Its first argument is a file descriptor.
        Fd,
        /// `(dirfd, path, ...)`: the directory the path starts from.
        DirfdPath,
        /// `(path, ...)`: the working or root directory.
        Path,
    }

    /// How `nr` finds its filesystem; `None` for a call not followed.
    #[inline(always)]
    pub const fn target(nr: u32) -> Option<Target> {
        match nr {
            READ | WRITE | CLOSE | FSTAT | PREAD64 | PWRITE64 | READV | WRITEV | FSYNC | FDATASYNC | GETDENTS64
            | PREADV | PWRITEV | PREADV2 | PWRITEV2 => Some(Target::Fd),
            OPENAT | NEWFSTATAT | STATX | OPENAT2 => Some(Target::DirfdPath),
            OPEN | STAT | LSTAT => Some(Target::Path),
            _ => None,
        }
    }

    /// Calls whose return value is a byte count.
    pub const fn moves_bytes(nr: u32) -> bool {
        matches!(
            nr,
            READ | WRITE | PREAD64 | PWRITE64 | READV | WRITEV | PREADV | PWRITEV | PREADV2 | PWRITEV2
        )
    }

    /// Calls whose return value is a new file descriptor.
    pub const fn opens(nr: u32) -> bool {
        matches!(nr, OPEN | OPENAT | OPENAT2)
    }

    /// The call's name as strace writes it.
    pub const fn name(nr: u32) -> &'static str {
        match nr {
            READ => "read",
            WRITE => "write",
            OPEN => "open",
            CLOSE => "close",
            STAT => "stat",
            FSTAT => "fstat",
            LSTAT => "lstat",
            PREAD64 => "pread64",
            PWRITE64 => "pwrite64",
            READV => "readv",
            WRITEV => "writev",
            FSYNC => "fsync",
            FDATASYNC => "fdatasync",
            GETDENTS64 => "getdents64",
            OPENAT => "openat",
            NEWFSTATAT => "newfstatat",
            PREADV => "preadv",
            PWRITEV => "pwritev",
            PREADV2 => "preadv2",
            PWRITEV2 => "pwritev2",
            STATX => "statx",
            OPENAT2 => "openat2",
            _ => "other",
        }
    }
}

/// What userspace writes into the eBPF object at load (one `CONFIG`
/// global, pwru-style, instead of a global per value): kernel struct member
/// offsets from BTF and tracepoint record offsets from tracefs format files
/// (Rust eBPF has no CO-RE), and each layer's switches (`*_on`). Read-only
/// to the programs, so the verifier prunes what a switch turns off.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Config {
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
    /// sched/sched_switch record: offset of `prev_pid` (the run-queue layer).
    pub tp_switch_prev_pid: u32,
    /// sched/sched_wakeup and sched_wakeup_new records: offset of `pid`.
    pub tp_wakeup_pid: u32,
    /// irq/irq_handler_entry and _exit records: offset of `irq`.
    pub tp_irq_irq: u32,
    /// irq/softirq_entry and _exit records: offset of `vec`.
    pub tp_softirq_vec: u32,
    /// struct sk_buff: `len`, `dev`, `head`, `data`, `end`, `mac_header`.
    pub skb_len: u32,
    pub skb_dev: u32,
    pub skb_head: u32,
    pub skb_data: u32,
    pub skb_end: u32,
    pub skb_mac_header: u32,
    /// struct skb_shared_info: `gso_size`, `gso_segs`.
    pub shinfo_gso_size: u32,
    pub shinfo_gso_segs: u32,
    /// struct net_device: `ifindex`, `nd_net` (possible_net_t, whose first member is the struct net pointer).
    pub dev_ifindex: u32,
    pub dev_nd_net: u32,
    /// struct net: `ns.inum`.
    pub net_ns_inum: u32,
    /// struct pt_regs: `di` (first syscall argument on x86-64).
    pub pt_regs_di: u32,
    /// 1: some process holds a tun fd: follow read/write syscalls on them.
    pub tun_fds_on: u32,
    /// struct napi_struct: `dev`.
    pub napi_dev: u32,
    /// 1: stream every packet at every hop to NET_EVENTS (`record --events`).
    pub net_events_on: u32,
    /// 1: the net layer is traced: NET_RX softirq time is kept per device.
    pub net_layer_on: u32,
    /// 1: follow each skb across hops (per-hop latency, `record --hops`;
    /// also with `--events`). Off by default: it costs a map update per
    /// packet and hop, and a program on every freed skb.
    pub net_hops_on: u32,
    /// kvm/* records (from their format files): the fields the programs read.
    pub tp_kvm_exit_reason: u32,
    pub tp_kvm_exit_isa: u32,
    pub tp_kvm_uexit_reason: u32,
    pub tp_kvm_uexit_errno: u32,
    pub tp_kvm_pio_rw: u32,
    pub tp_kvm_pio_port: u32,
    pub tp_kvm_pio_size: u32,
    pub tp_kvm_pio_count: u32,
    pub tp_kvm_mmio_type: u32,
    pub tp_kvm_mmio_len: u32,
    pub tp_kvm_mmio_gpa: u32,
    pub tp_kvm_fast_mmio_gpa: u32,
    pub tp_kvm_set_irq_gsi: u32,
    pub tp_kvm_set_irq_level: u32,
    pub tp_kvm_msi_address: u32,
    pub tp_kvm_msi_data: u32,
    pub tp_kvm_inj_virq_vector: u32,
    pub tp_kvm_inj_virq_soft: u32,
    pub tp_kvm_wakeup_ns: u32,
    pub tp_kvm_wakeup_waited: u32,
    /// struct net_device: `mtu` and `hard_header_len` (the size histograms' MTU edge).
    pub dev_mtu: u32,
    pub dev_hard_header_len: u32,
    /// struct request: `cmd_flags`, `part` (its block_device); struct
    /// block_device: `bd_dev` (the block layer).
    pub request_cmd_flags: u32,
    pub request_part: u32,
    pub bdev_dev: u32,
    /// The fs layer's walk from the current task to a superblock:
    /// task_struct `files`, `fs`; files_struct `fdt`; fdtable `max_fds`,
    /// `fd`; file `f_inode`; inode `i_sb`; super_block `s_magic`;
    /// fs_struct `pwd.dentry`, `root.dentry`; dentry `d_sb`; pt_regs `si`
    /// (a syscall's second argument), `orig_ax` (its number at exit).
    pub task_files: u32,
    pub task_fs: u32,
    pub files_fdt: u32,
    pub fdtable_max_fds: u32,
    pub fdtable_fd: u32,
    pub file_inode: u32,
    pub inode_sb: u32,
    pub sb_magic: u32,
    pub fs_pwd_dentry: u32,
    pub fs_root_dentry: u32,
    pub dentry_sb: u32,
    pub pt_regs_si: u32,
    pub pt_regs_orig_ax: u32,
    /// raw_syscalls/sys_exit record: offset of `id`.
    pub tp_sys_exit_id: u32,
    /// The tun layer: `struct tun_struct` and `struct tun_file` live in the
    /// tun module's BTF (split on vmlinux's), the rest in vmlinux's.
    pub tun_struct_dev: u32,
    pub tun_file_tun: u32,
    pub tun_file_socket: u32,
    pub msghdr_control: u32,
    pub tun_msg_ctl_type: u32,
    pub tun_msg_ctl_num: u32,
    pub tun_msg_ctl_ptr: u32,
    pub xdp_buff_data: u32,
    pub xdp_buff_data_end: u32,
    /// `sizeof(struct xdp_buff)`: the stride of a vhost-net batch.
    pub xdp_buff_size: u32,
    pub xdp_frame_len: u32,
    pub iov_iter_count: u32,
    pub dev_name: u32,
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all three are repr(C), Copy, and made only of integers.
    unsafe impl aya::Pod for super::Config {}
    unsafe impl aya::Pod for super::ThreadTimes {}
    unsafe impl aya::Pod for super::ThreadSlot {}
    unsafe impl aya::Pod for super::CpuState {}
    unsafe impl aya::Pod for super::IrqStat {}
    unsafe impl aya::Pod for super::DevKey {}
    unsafe impl aya::Pod for super::DevStats {}
    unsafe impl aya::Pod for super::DevSlot {}
    unsafe impl aya::Pod for super::UprobeSpec {}
    unsafe impl aya::Pod for super::HopEdge {}
    unsafe impl aya::Pod for super::TunIoKey {}
    unsafe impl aya::Pod for super::TunPending {}
    unsafe impl aya::Pod for super::HopLatency {}
    unsafe impl aya::Pod for super::SkbMark {}
    unsafe impl aya::Pod for super::NetEvent {}
    unsafe impl aya::Pod for super::UprobeKey {}
    unsafe impl aya::Pod for super::UprobeStats {}
    unsafe impl aya::Pod for super::KvmLatencyKey {}
    unsafe impl aya::Pod for super::LatencyHist {}
    unsafe impl aya::Pod for super::KvmEventKey {}
    unsafe impl aya::Pod for super::KvmEventStats {}
    unsafe impl aya::Pod for super::VcpuPending {}
    unsafe impl aya::Pod for super::SampleKey {}
    unsafe impl aya::Pod for super::RunqStats {}
    unsafe impl aya::Pod for super::BlockKey {}
    unsafe impl aya::Pod for super::BlockStats {}
    unsafe impl aya::Pod for super::BlockPending {}
    unsafe impl aya::Pod for super::BlockInflight {}
    unsafe impl aya::Pod for super::FsKey {}
    unsafe impl aya::Pod for super::FsStats {}
    unsafe impl aya::Pod for super::FsPending {}
    unsafe impl aya::Pod for super::TunKey {}
    unsafe impl aya::Pod for super::TunStats {}
}

/// Hooks whose programs count their own runs in the `HOOK_RUNS` per-CPU
/// array (index: position here), named as the program without its attach
/// prefix (`raw_`, `tp_`, `btf_`, `kprobe_`, `fentry_`). Exact event counts at the
/// cost of one per-CPU array add, where the kernel's BPF statistics would
/// add two clock reads per run.
pub const COUNTED_HOOKS: [&str; 60] = [
    "sched_switch",
    "sched_process_fork",
    "sched_process_exit",
    "sys_enter",
    "sys_exit",
    "sys_enter_ioctl",
    "irq_handler_entry",
    "irq_handler_exit",
    "local_timer_entry",
    "local_timer_exit",
    "reschedule_entry",
    "reschedule_exit",
    "call_function_entry",
    "call_function_exit",
    "call_function_single_entry",
    "call_function_single_exit",
    "irq_work_entry",
    "irq_work_exit",
    "softirq_entry",
    "softirq_exit",
    "net_dev_queue",
    "net_dev_start_xmit",
    "net_dev_xmit",
    "netif_rx",
    "netif_receive_skb",
    "napi_gro_receive_entry",
    "napi_poll",
    "kfree_skb",
    "consume_skb",
    "kvm_exit",
    "kvm_entry",
    "kvm_userspace_exit",
    "kvm_pio",
    "kvm_mmio",
    "kvm_fast_mmio",
    "kvm_set_irq",
    "kvm_msi_set_irq",
    "kvm_inj_virq",
    "kvm_vcpu_wakeup",
    "sample_cpu",
    "uprobe_call",
    "uretprobe_call",
    "tun_get_user",
    "tun_sendmsg",
    "tun_recvmsg",
    "tun_net_xmit",
    "handle_tx",
    "handle_rx",
    "handle_tx_kick",
    "handle_rx_kick",
    "runq_switch",
    "runq_wakeup",
    "runq_wakeup_new",
    "block_rq_insert",
    "block_rq_issue",
    "block_rq_complete",
    "fs_sys_enter",
    "fs_sys_exit",
    "ovl_override_creds",
    "ovl_revert_creds",
];

const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Index of `hook` in [`COUNTED_HOOKS`]; evaluated at compile time by the
/// eBPF programs, so a name missing from the table fails the build.
pub const fn hook_index(hook: &str) -> u32 {
    let mut i = 0;
    while i < COUNTED_HOOKS.len() {
        if same(COUNTED_HOOKS[i], hook) {
            return i as u32;
        }
        i += 1;
    }
    panic!("hook missing from COUNTED_HOOKS")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A full frame on a 1500-MTU Ethernet device (1514 B with its header)
    /// lands at or below the MTU edge; 1515 .. 65536 B (GSO aggregates)
    /// above it; every size lands in the bucket whose bounds hold it.
    #[test]
    fn size_buckets_make_the_mtu_visible() {
        let edge = 1500 + 14;
        let edges = dev_size_edges(edge);
        let b = dev_size_bucket(1514, edge);
        assert_eq!(edges[b], 1514);
        for len in 1..=70_000u64 {
            let b = dev_size_bucket(len, edge);
            assert!(b < DEV_SIZE_BUCKETS, "{len}");
            assert!(len <= edges[b], "{len} above its bucket's edge {}", edges[b]);
            assert!(
                b == 0 || len > edges[b - 1],
                "{len} not above the previous edge {}",
                edges[b - 1]
            );
            if (1515..=65536).contains(&len) {
                assert!(edges[b] > 1514, "{len} at or below the MTU edge");
            }
        }
        // Edges equal to a fixed one, beyond every fixed one, or none.
        for edge in [0, 1500, 576 + 14, 65536 + 14] {
            let edges = dev_size_edges(edge);
            for len in [1u64, 64, 65, 590, 591, 1500, 1501, 65536, 65550, 65551, 1 << 20] {
                let b = dev_size_bucket(len, edge);
                assert!(
                    len <= edges[b] && (b == 0 || len > edges[b - 1]),
                    "edge {edge}, len {len}: {edges:?}"
                );
            }
        }
    }

    #[test]
    fn fine_buckets_hold_their_values() {
        for v in [
            0u64,
            1,
            7,
            8,
            9,
            15,
            16,
            17,
            100,
            999,
            1_000_000,
            1 << 33,
            (1 << 34) - 1,
        ] {
            let (lo, hi) = fine_bucket_range(fine_bucket(v));
            assert!(lo <= v && v < hi, "{v} not in [{lo}, {hi})");
            assert!((hi - lo) as f64 <= (lo as f64 / 8.0).max(1.0), "{v}: bucket too wide");
        }
        assert_eq!(fine_bucket(u64::MAX), FINE_BUCKETS - 1);
        for i in 1..FINE_BUCKETS {
            assert_eq!(
                fine_bucket_range(i - 1).1,
                fine_bucket_range(i).0,
                "gap before bucket {i}"
            );
        }
    }
}
