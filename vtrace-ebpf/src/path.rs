//! The path layer: latency along a VM's virtio data path, stage by stage
//! ([`vtrace_common::path_stage`]), as histograms in the kernel per stage
//! and process that ended it.
//!
//! rx (host -> guest): a frame queued to a tap (tun_net_xmit, keyed by its
//! skb) -> taken by vhost-net (tun_recvmsg, the skb in msg_control) or by
//! a VMM's read (consume_skb of that skb once copied out) [rx_tap_queue];
//! the VM's first frame taken and not signalled -> the next interrupt a
//! thread of the VM raises for its guest (irqfd_wakeup in the writer's
//! context, MSI or line; KVM_SIGNAL_MSI; KVM_IRQ_LINE) [rx_signal]; that
//! MSI's vector, or a vector a line delivered (learnt at
//! kvm_apic_accept_irq) -> its injection into a vCPU of the same VM
//! (kvm_inj_virq) [rx_inject]; the injection -> that vCPU thread's next
//! guest entry (kvm_entry) [rx_entry].
//!
//! tx (guest -> host): the VM's first virtqueue kick not served yet (an
//! ioeventfd took the guest's write) -> a thread of the same VM starts
//! serving: vhost-net's handle_tx [tx_kick] -> its first batch into the
//! tap (tun_sendmsg) [tx_serve], or the VMM's write into the tap
//! (tun_get_user) [tx_kick]; each batch or frame into the tap -> handed to
//! the host's stack (the call's return) [tx_tap].
//!
//! A VM is its `mm_struct`: its vCPU threads and its VMM's share it, and a
//! vhost worker runs with its owner's (kthread_use_mm before Linux 6.4, a
//! thread of the owner since). Starts still waiting for their end live in
//! LRU maps: one whose end never comes is evicted instead of filling a map.
//! One or two hash lookups a hit; kvm_entry, the hottest hook, one.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_get_current_task},
    macros::{kretprobe, map},
    maps::{Array, LruHashMap, PerCpuArray, PerCpuHashMap, RingBuf},
    programs::RetProbeContext,
};
use vtrace_common::{
    IRQ_DEVICE_SLOTS, MAX_PATH_STATS, PathKey, PathKick, PathPacket, PathPtIrq, PathRxBatch, PathRxPending, PathStats,
    PathTxFrame, PathVectorKey, TUN_MSG_PTR, TUN_XDP_FLAG, path_dir, path_loss, path_stage,
};

use crate::{
    account,
    config::conf,
    hist,
    kmem::{read_or_zero, tp_field},
    runs::{count_run, hook_programs, kfunc_programs},
};

/// Each stage's latencies per process that ended it.
#[map]
pub static PATH_STATS: PerCpuHashMap<PathKey, PathStats> = PerCpuHashMap::with_max_entries(MAX_PATH_STATS, 0);

/// The template of new PATH_STATS entries (too large for the eBPF stack).
#[map]
pub static ZERO_PATH: Array<PathStats> = Array::with_max_entries(1, 0);

/// skb -> when it was queued to a tap.
#[map]
pub static PATH_QUEUED: LruHashMap<u64, u64> = LruHashMap::with_max_entries(16384, 0);

/// VM ([`vm_key`]) -> the frames its threads took from taps and have not
/// signalled.
#[map]
pub static PATH_RX_PENDING: LruHashMap<u64, PathRxPending> = LruHashMap::with_max_entries(4096, 0);

/// (VM, vector) -> the batch a path signal raised that MSI for
/// (`signal_ns` 0: injected since).
#[map]
pub static PATH_VECTORS: LruHashMap<PathVectorKey, PathRxBatch> = LruHashMap::with_max_entries(4096, 0);

/// vCPU tid -> the batch whose interrupt was injected into it (`inject_ns`
/// 0: entered since).
#[map]
pub static PATH_INJECTED: LruHashMap<u32, PathRxBatch> = LruHashMap::with_max_entries(4096, 0);

/// VM (mm) -> the batch its last signal that may be a line ended (an
/// irqfd, KVM_IRQ_LINE), until a line's vector is injected (`signal_ns`
/// 0: injected since).
#[map]
pub static PATH_LINES: LruHashMap<u64, PathRxBatch> = LruHashMap::with_max_entries(1024, 0);

/// The thread that raised a line on this CPU, until the APIC accepts its
/// vector (0: none).
#[map]
pub static PATH_RAISING: PerCpuArray<u32> = PerCpuArray::with_max_entries(1, 0);

/// Vectors that lines delivered (1): an injection of one ends a line batch.
#[map]
pub static PATH_LINE_VECTORS: Array<u8> = Array::with_max_entries(256, 0);

/// tid -> the frame it is writing to a tap (tun_get_user, until it returns).
#[map]
pub static PATH_TX_FRAMES: LruHashMap<u32, PathTxFrame> = LruHashMap::with_max_entries(4096, 0);

/// Followed packets (`--events`): one per rx interrupt and per tx kick.
#[map]
pub static PATH_PACKETS: RingBuf = RingBuf::with_byte_size(4 * 1024 * 1024, 0);

/// VM (mm) -> its kicks not served yet.
#[map]
pub static PATH_KICKS: LruHashMap<u64, PathKick> = LruHashMap::with_max_entries(1024, 0);

/// The VF interrupt (a `vfio-*` IRQ) this CPU's hardirq is handling
/// (`entry_ns` 0: none).
#[map]
pub static PT_IRQ: PerCpuArray<PathPtIrq> = PerCpuArray::with_max_entries(1, 0);

/// MSI vector -> the VF interrupt that set it, until a vCPU injects it
/// (`signal_ns` 0: injected since). Keyed by vector alone: in the hardirq
/// the VM is not the current task's, and the vector is what the vCPU
/// injects. Two VMs whose VFs raise the same vector at once are confused.
#[map]
pub static PT_VECTORS: LruHashMap<u32, PathPtIrq> = LruHashMap::with_max_entries(256, 0);

/// vCPU tid -> the VF interrupt injected into it, until its guest entry
/// (`inject_ns` 0: entered since).
#[map]
pub static PT_INJECTED: LruHashMap<u32, PathPtIrq> = LruHashMap::with_max_entries(4096, 0);

/// [`path_loss`] counters.
#[map]
pub static PATH_LOSSES: PerCpuArray<u64> = PerCpuArray::with_max_entries(path_loss::COUNT, 0);

/// EPOLLIN in the poll flags an eventfd's wakeup passes.
const EPOLLIN: u64 = 0x1;

#[inline(always)]
fn lost(slot: u32) {
    if let Some(c) = PATH_LOSSES.get_ptr_mut(slot) {
        unsafe { *c += 1 };
    }
}

/// One latency of `stage`, covering `frames`, ended by the current process.
#[inline(always)]
fn add(stage: u32, ns: u64, frames: u64) {
    add_irq(stage, ns, frames, 0);
}

/// [`add`] for a passthrough stage of host IRQ `irq`.
#[inline(always)]
fn add_irq(stage: u32, ns: u64, frames: u64, irq: u32) {
    let key = PathKey {
        tgid: (bpf_get_current_pid_tgid() >> 32) as u32,
        stage,
        irq,
        _pad: 0,
    };
    match account::entry_from(&PATH_STATS, &ZERO_PATH, &key) {
        Some(s) => {
            s.frames += frames;
            hist::add(&mut s.hist, ns);
        }
        None => lost(path_loss::STATS_FULL),
    }
}

/// The current task's VM: its `mm_struct *` (0 when the offset is unknown,
/// and for kernel threads that borrowed none).
#[inline(always)]
fn current_mm() -> u64 {
    let at = conf!(path.task_mm);
    if at == 0 {
        return 0;
    }
    read_or_zero(unsafe { bpf_get_current_task() }, at)
}

/// tun_net_xmit(skb, dev): `skb` waits in the tap's ring from now (a frame
/// the tap drops stays until a later frame at its address, or the LRU,
/// replaces it; a frame taken from the ring is always its latest entry).
#[inline(always)]
fn queued(skb: u64) {
    if skb != 0 {
        let _ = PATH_QUEUED.insert(&skb, &account::now(), 0);
    }
}

/// vhost-net took `ptr` from a tap's ring (tun_recvmsg): an skb, or an
/// xdp_frame (low bit set) that tun_net_xmit never queued.
#[inline(always)]
fn dequeued(ptr: u64) {
    if ptr == 0 {
        return;
    }
    let now = account::now();
    let mut queued_ns = 0;
    // (an xdp_frame is never in PATH_QUEUED: untimed too)
    match (ptr & TUN_XDP_FLAG == 0)
        .then(|| unsafe { PATH_QUEUED.get(&ptr) }.copied())
        .flatten()
    {
        Some(at) => {
            let _ = PATH_QUEUED.remove(&ptr);
            add(path_stage::RX_TAP_QUEUE, now.saturating_sub(at), 1);
            queued_ns = at;
        }
        None => lost(path_loss::UNTIMED),
    }
    batch_frame(now, queued_ns);
}

/// An skb freed after its copy out: when it is a frame a tap queued, a
/// reader of the tap (a VMM) took it.
#[inline(always)]
fn taken_by_reader(skb: u64) {
    let Some(at) = (unsafe { PATH_QUEUED.get(&skb) }).copied() else {
        return;
    };
    let _ = PATH_QUEUED.remove(&skb);
    let now = account::now();
    add(path_stage::RX_TAP_QUEUE, now.saturating_sub(at), 1);
    batch_frame(now, at);
}

/// The VM of the current thread, as PATH_RX_PENDING keys it: its mm, or
/// for a thread with none, its tid (no kernel address is that small).
#[inline(always)]
fn vm_key() -> u64 {
    match current_mm() {
        0 => account::current_tid() as u64,
        mm => mm,
    }
}

/// A thread of the current VM took a frame (queued at `queued_ns`, 0: not
/// seen) at `now`: it waits for the VM's next signal from now if nothing
/// taken before does. The VM, not the thread: the thread that raises the
/// interrupt may be another (QEMU raises the INTx line of vhost-net's
/// queues from its own thread).
#[inline(always)]
fn batch_frame(now: u64, queued_ns: u64) {
    let key = vm_key();
    match PATH_RX_PENDING.get_ptr_mut(&key) {
        Some(p) => {
            let p = unsafe { &mut *p };
            if p.batch.dequeued_ns == 0 {
                p.batch.queued_ns = queued_ns;
                p.batch.dequeued_ns = now;
                // A new batch: a signal that stored no MSI (a line) is over.
                p.signalled.signal_ns = 0;
            }
            p.batch.frames += 1;
        }
        None => {
            let p = PathRxPending {
                batch: PathRxBatch {
                    queued_ns,
                    dequeued_ns: now,
                    frames: 1,
                    ..Default::default()
                },
                signalled: PathRxBatch::default(),
            };
            let _ = PATH_RX_PENDING.insert(&key, &p, 0);
        }
    }
}

/// A thread of the current VM raises an interrupt for its guest at `now`:
/// the end of the wait of the first frame its threads took since its last
/// signal, if any. The VM's pending state, None where none took a frame.
#[inline(always)]
fn signalled(now: u64) -> Option<&'static mut PathRxPending> {
    let p = PATH_RX_PENDING.get_ptr_mut(&vm_key())?;
    let p = unsafe { &mut *p };
    if p.batch.dequeued_ns != 0 {
        add(
            path_stage::RX_SIGNAL,
            now.saturating_sub(p.batch.dequeued_ns),
            p.batch.frames,
        );
        p.signalled = p.batch;
        p.signalled.signal_ns = now;
        p.batch = PathRxBatch::default();
    }
    Some(p)
}

/// The current thread signals its guest at `now` by a way that may be a
/// line (an irqfd, KVM_IRQ_LINE): the batch it ends waits, as the VM's
/// line batch, for the injection of a line's vector; an MSI that follows
/// in the same call (kvm_msi_set_irq) takes it over.
#[inline(always)]
fn signalled_maybe_line(now: u64) {
    let Some(p) = signalled(now) else {
        return;
    };
    // Only a batch this very signal ended (a line's earlier batch stays in
    // `signalled`: no MSI takes it).
    if p.signalled.signal_ns != now {
        return;
    }
    let batch = p.signalled;
    let mm = current_mm();
    if mm != 0 {
        let _ = PATH_LINES.insert(&mm, &batch, 0);
    }
}

/// irqfd_wakeup(wait, mode, sync, key): an eventfd that KVM watches was
/// written (EPOLLIN in the poll flags `key`), in the writer's context:
/// vhost-net or a VMM signalling its guest's used ring, MSI or line.
#[inline(always)]
fn on_irqfd(flags: u64) {
    if flags & EPOLLIN != 0 && !in_vf_irq() {
        signalled_maybe_line(account::now());
    }
}

/// kvm_set_irq(gsi, level, source): a line raised (level != 0): by a VMM's
/// KVM_IRQ_LINE in its own thread, which ends its batch; by the kworker of
/// an irqfd on a line, which took no frame. Either way, the vector the
/// line delivers (kvm_apic_accept_irq, next in the same call) is learnt.
#[inline(always)]
fn on_set_irq(level: i32) {
    if level == 0 {
        return;
    }
    signalled_maybe_line(account::now());
    if let Some(slot) = PATH_RAISING.get_ptr_mut(0) {
        unsafe { *slot = account::current_tid() };
    }
}

/// kvm_apic_accept_irq(apicid, dm, tm, vec): a local APIC accepts `vec`;
/// right after a line was raised on this CPU by this thread (under the
/// IOAPIC's lock), `vec` is a line's vector.
#[inline(always)]
fn on_apic_accept(vector: u32) {
    let Some(slot) = PATH_RAISING.get_ptr_mut(0) else {
        return;
    };
    let slot = unsafe { &mut *slot };
    if *slot == 0 || *slot != account::current_tid() {
        return;
    }
    *slot = 0;
    if let Some(v) = PATH_LINE_VECTORS.get_ptr_mut(vector & 0xff) {
        unsafe { *v = 1 };
    }
}

/// kvm_msi_set_irq(address, data): an MSI of `vector`, raised in the
/// signalling thread's context (irqfd_wakeup: vhost-net's or the VMM's
/// eventfd write; or the VMM's KVM_SIGNAL_MSI). A path signal's vector is
/// kept for its injection into the same VM.
#[inline(always)]
fn on_msi(vector: u32) {
    if vf_msi(vector) {
        return;
    }
    let Some(p) = signalled(account::now()) else {
        return;
    };
    if p.signalled.signal_ns == 0 {
        return;
    }
    let batch = p.signalled;
    p.signalled.signal_ns = 0;
    let mm = current_mm();
    if mm == 0 {
        return;
    }
    // Not a line: an irqfd_wakeup just before stored it as one.
    let _ = PATH_LINES.remove(&mm);
    let key = PathVectorKey { mm, vector, _pad: 0 };
    match PATH_VECTORS.get_ptr_mut(&key) {
        Some(v) => {
            let v = unsafe { &mut *v };
            if v.signal_ns != 0 {
                lost(path_loss::UNINJECTED);
            }
            *v = batch;
        }
        None => {
            let _ = PATH_VECTORS.insert(&key, &batch, 0);
        }
    }
}

/// kvm_inj_virq(vector, soft, reinjected) on a vCPU thread: KVM injects
/// `vector`; a path MSI of this VM waiting for it ends here, and the
/// vCPU's next entry is waited for.
#[inline(always)]
fn on_inject(vector: u32, soft: u8) {
    if soft != 0 || vf_injected(vector) {
        return;
    }
    let mm = current_mm();
    if mm == 0 {
        return;
    }
    let key = PathVectorKey { mm, vector, _pad: 0 };
    let v = match PATH_VECTORS.get_ptr_mut(&key) {
        Some(v) if unsafe { (*v).signal_ns } != 0 => v,
        // A line's vector: the VM's line batch, if one waits.
        _ if is_line_vector(vector) => match PATH_LINES.get_ptr_mut(&mm) {
            Some(v) if unsafe { (*v).signal_ns } != 0 => v,
            _ => return,
        },
        _ => return,
    };
    let v = unsafe { &mut *v };
    let now = account::now();
    add(path_stage::RX_INJECT, now.saturating_sub(v.signal_ns), 0);
    let mut batch = *v;
    batch.inject_ns = now;
    v.signal_ns = 0;
    let _ = PATH_INJECTED.insert(&account::current_tid(), &batch, 0);
}

#[inline(always)]
fn is_line_vector(vector: u32) -> bool {
    PATH_LINE_VECTORS.get(vector & 0xff).is_some_and(|v| *v != 0)
}

/// kvm_entry: the vCPU thread enters its guest; a path interrupt injected
/// into it is delivered.
#[inline(always)]
fn on_entry() {
    vf_entered();
    let Some(at) = PATH_INJECTED.get_ptr_mut(&account::current_tid()) else {
        return;
    };
    let at = unsafe { &mut *at };
    if at.inject_ns == 0 {
        return;
    }
    let now = account::now();
    add(path_stage::RX_ENTRY, now.saturating_sub(at.inject_ns), 0);
    let b = *at;
    at.inject_ns = 0;
    followed(PathPacket {
        ts: [b.queued_ns, b.dequeued_ns, b.signal_ns, b.inject_ns, now],
        vm: current_mm(),
        tgid: 0,
        tid: 0,
        dir: path_dir::RX,
        frames: b.frames as u32,
        irq: 0,
        _pad: 0,
    });
}

/// A packet followed to its path's end (`--events`), ended by the current thread.
#[inline(always)]
fn followed(mut p: PathPacket) {
    if conf!(path.path_packets_on) == 0 {
        return;
    }
    let id = bpf_get_current_pid_tgid();
    p.tgid = (id >> 32) as u32;
    p.tid = id as u32;
    match PATH_PACKETS.reserve::<PathPacket>(0) {
        Some(mut e) => {
            e.write(p);
            e.submit(0);
        }
        None => lost(path_loss::PACKETS_DROPPED),
    }
}

/// A vCPU kicked a virtqueue (an ioeventfd took its write): the VM's first
/// kick not served starts now unless one waits already.
#[inline(always)]
fn kicked() {
    let mm = current_mm();
    if mm == 0 {
        return;
    }
    match PATH_KICKS.get_ptr_mut(&mm) {
        Some(k) => {
            let k = unsafe { &mut *k };
            if k.first_ns == 0 {
                k.first_ns = account::now();
            }
            k.kicks += 1;
        }
        None => {
            let k = PathKick {
                first_ns: account::now(),
                kicks: 1,
                ..Default::default()
            };
            let _ = PATH_KICKS.insert(&mm, &k, 0);
        }
    }
}

/// The kicks waiting in `k` are served at `now`.
#[inline(always)]
fn take_kicks(k: &mut PathKick, now: u64) {
    add(path_stage::TX_KICK, now.saturating_sub(k.first_ns), k.kicks);
    k.served_kick_ns = k.first_ns;
    k.served_kicks = k.kicks;
    k.first_ns = 0;
    k.kicks = 0;
}

/// handle_tx: vhost-net starts serving the current VM's tx queue.
#[inline(always)]
fn vhost_serves() {
    let mm = current_mm();
    if mm == 0 {
        return;
    }
    let Some(k) = PATH_KICKS.get_ptr_mut(&mm) else {
        return;
    };
    let k = unsafe { &mut *k };
    if k.first_ns == 0 {
        return;
    }
    let now = account::now();
    take_kicks(k, now);
    k.serve_ns = now;
}

/// `frames` of the current VM enter its tap: vhost-net's tun_sendmsg (a
/// batch of up to 64, or one that tun_get_user then takes, nested), or the
/// VMM's write (tun_get_user), which serves waiting kicks itself. The
/// first frame after a kick is followed.
#[inline(always)]
fn tap_entered(frames: u64) {
    let tid = account::current_tid();
    if let Some(f) = PATH_TX_FRAMES.get_ptr_mut(&tid) {
        let f = unsafe { &mut *f };
        if f.tap_ns != 0 {
            f.depth += 1;
            return;
        }
    }
    let now = account::now();
    let mut frame = PathTxFrame {
        tap_ns: now,
        frames,
        ..Default::default()
    };
    let mm = current_mm();
    if mm != 0
        && let Some(k) = PATH_KICKS.get_ptr_mut(&mm)
    {
        let k = unsafe { &mut *k };
        if k.serve_ns != 0 {
            add(path_stage::TX_SERVE, now.saturating_sub(k.serve_ns), k.served_kicks);
            frame.serve_ns = k.serve_ns;
            k.serve_ns = 0;
        } else if k.first_ns != 0 {
            take_kicks(k, now);
        } else {
            let _ = PATH_TX_FRAMES.insert(&tid, &frame, 0);
            return;
        }
        frame.kick_ns = k.served_kick_ns;
        frame.kicks = k.served_kicks;
    }
    let _ = PATH_TX_FRAMES.insert(&tid, &frame, 0);
}

/// tun_sendmsg(sock, msg, len): vhost-net hands its tap a TUN_MSG_PTR
/// batch of `num` frames in msg_control, else one frame for tun_get_user.
#[inline(always)]
fn sendmsg_frames(msg: u64) -> u64 {
    let ctl: u64 = read_or_zero(msg, conf!(path.msghdr_control));
    if ctl != 0 && read_or_zero::<u16>(ctl, conf!(path.tun_msg_ctl_type)) == TUN_MSG_PTR {
        read_or_zero::<u16>(ctl, conf!(path.tun_msg_ctl_num)) as u64
    } else {
        1
    }
}

/// tun_get_user returns: the frame is in the host's stack.
#[inline(always)]
fn tap_left() {
    let Some(f) = PATH_TX_FRAMES.get_ptr_mut(&account::current_tid()) else {
        return;
    };
    let f = unsafe { &mut *f };
    if f.tap_ns == 0 {
        return;
    }
    if f.depth > 0 {
        f.depth -= 1;
        return;
    }
    let now = account::now();
    add(path_stage::TX_TAP, now.saturating_sub(f.tap_ns), f.frames);
    let frame = *f;
    f.tap_ns = 0;
    if frame.kick_ns != 0 {
        followed(PathPacket {
            ts: [frame.kick_ns, frame.serve_ns, frame.tap_ns, now, 0],
            vm: current_mm(),
            tgid: 0,
            tid: 0,
            dir: path_dir::TX,
            frames: frame.kicks as u32,
            irq: 0,
            _pad: 0,
        });
    }
}

// tun_net_xmit(struct sk_buff *skb, struct net_device *dev)
kfunc_programs!(kprobe_path_tun_net_xmit, fentry_path_tun_net_xmit, "tun_net_xmit", counted "path_tun_net_xmit", [skb] => queued(skb));
// tun_recvmsg(struct socket *sock, struct msghdr *m, size_t total_len, int flags):
// vhost-net hands the frame it took in m->msg_control (NULL: tun_do_read
// takes one itself, through tun_ring_recv).
kfunc_programs!(kprobe_path_tun_recvmsg, fentry_path_tun_recvmsg, "tun_recvmsg", counted "path_tun_recvmsg", [_sock, msg] => dequeued(read_or_zero(msg, conf!(path.msghdr_control))));
// irqfd_wakeup(wait_queue_entry_t *wait, unsigned mode, int sync, void *key)
kfunc_programs!(kprobe_path_irqfd_wakeup, fentry_path_irqfd_wakeup, "irqfd_wakeup", counted "path_irqfd_wakeup", [_wait, _mode, _sync, key] => on_irqfd(key));
// handle_tx(struct vhost_net *net), in the vhost worker (its owner's mm).
kfunc_programs!(kprobe_path_handle_tx, fentry_path_handle_tx, "handle_tx", counted "path_handle_tx", [] => vhost_serves());
// tun_get_user(tun, tfile, msg_control, from, noblock, more): a frame
// written into a tap (a VMM's write; vhost-net's handle_tx came first).
kfunc_programs!(kprobe_path_tun_get_user, fentry_path_tun_get_user, "tun_get_user", counted "path_tun_get_user", [] => tap_entered(1));
// tun_sendmsg(struct socket *sock, struct msghdr *m, size_t total_len):
// vhost-net's way into the tap.
kfunc_programs!(kprobe_path_tun_sendmsg, fentry_path_tun_sendmsg, "tun_sendmsg", counted "path_tun_sendmsg", [_sock, msg] => tap_entered(sendmsg_frames(msg)));

/// tun_sendmsg returns: its frames went through the tap into the host's stack.
#[kretprobe]
pub fn kretprobe_path_tun_sendmsg(_ctx: RetProbeContext) -> u32 {
    count_run!("kretprobe_path_tun_sendmsg");
    tap_left();
    0
}

/// tun_get_user returns: its frame went through the tap into the host's
/// stack (run inline, up to its socket or the next device's queue).
#[kretprobe]
pub fn kretprobe_path_tun_get_user(_ctx: RetProbeContext) -> u32 {
    count_run!("kretprobe_path_tun_get_user");
    tap_left();
    0
}

// consume_skb(skb): a VMM's read of its tap (tun_chr_read_iter ->
// tun_do_read, which takes the skb from the ring inside the inlined
// tun_ring_recv) frees the skb once copied out, in the reader's context.
// Every skb freed anywhere comes here: one lookup each; only the tap's
// queued ones are in PATH_QUEUED (vhost-net's were taken out at
// tun_recvmsg).
hook_programs! {
    "consume_skb", "skb", counted "path_consume_skb";
    btf btf_path_consume_skb(ctx) => {
        taken_by_reader(ctx.arg(0));
    }
    raw raw_path_consume_skb(ctx) => {
        taken_by_reader(ctx.arg(0));
    }
}

// ioeventfd_write(vcpu, dev, addr, len, val) returns 0 when the guest's
// write was a notify an ioeventfd took (its address, and its value where
// it has a datamatch): a virtqueue kick, to vhost-net or the VMM's thread.
// Other MMIO and port writes (interrupt acks, EOIs) are not kicks.
#[kretprobe]
pub fn kretprobe_path_ioeventfd_write(ctx: RetProbeContext) -> u32 {
    count_run!("kretprobe_path_ioeventfd_write");
    if ctx.ret::<i64>() == 0 {
        kicked();
    }
    0
}

// Records at offsets from the kvm/* format files (the kvm layer's Config
// fields, resolved by this layer too).
hook_programs! {
    "kvm_set_irq", "kvm", counted "path_kvm_set_irq";
    tp tp_path_kvm_set_irq(ctx) => {
        on_set_irq(tp_field(&ctx, conf!(path.tp_kvm_set_irq_level)));
    }
}

hook_programs! {
    "kvm_apic_accept_irq", "kvm", counted "path_kvm_apic_accept_irq";
    tp tp_path_kvm_apic_accept_irq(ctx) => {
        let vector: u8 = tp_field(&ctx, conf!(path.tp_kvm_apic_accept_irq_vec));
        on_apic_accept(vector as u32);
    }
}

hook_programs! {
    "kvm_msi_set_irq", "kvm", counted "path_kvm_msi_set_irq";
    tp tp_path_kvm_msi_set_irq(ctx) => {
        let data: u64 = tp_field(&ctx, conf!(path.tp_kvm_msi_data));
        on_msi((data & 0xff) as u32);
    }
}

hook_programs! {
    "kvm_inj_virq", "kvm", counted "path_kvm_inj_virq";
    tp tp_path_kvm_inj_virq(ctx) => {
        let vector: u32 = tp_field(&ctx, conf!(path.tp_kvm_inj_virq_vector));
        // Records before Linux 6.0 have no `soft` (offset 0: unknown).
        let soft_at = conf!(path.tp_kvm_inj_virq_soft);
        let soft: u8 = if soft_at != 0 { tp_field(&ctx, soft_at) } else { 0 };
        on_inject(vector, soft);
    }
}

hook_programs! {
    "kvm_entry", "kvm", counted "path_kvm_entry";
    raw raw_path_kvm_entry(_ctx) => {
        on_entry();
    }
    tp tp_path_kvm_entry(_ctx) => {
        on_entry();
    }
}

// The passthrough path: a VF's interrupt (vfio-pci) from the host's
// hardirq to the guest entry that delivers it.

/// A VF interrupt waiting longer than this for its injection never gets
/// one (its VM exited): a new MSI of its vector replaces it.
const PT_STALE_NS: u64 = 1_000_000_000;

/// Whether this CPU is in a VF interrupt's handler.
#[inline(always)]
fn in_vf_irq() -> bool {
    PT_IRQ.get(0).is_some_and(|p| p.entry_ns != 0)
}

/// A device IRQ's handler starts: a `vfio-*` one (the name's first five
/// bytes at `name`) is a passed-through device's interrupt.
#[inline(always)]
fn vf_irq_entry(irq: u32, name: *const u8) {
    if name.is_null() || irq >= IRQ_DEVICE_SLOTS {
        return;
    }
    let prefix: [u8; 5] =
        unsafe { aya_ebpf::helpers::bpf_probe_read_kernel(name as *const [u8; 5]) }.unwrap_or_default();
    if &prefix != b"vfio-" {
        return;
    }
    if let Some(p) = PT_IRQ.get_ptr_mut(0) {
        unsafe {
            *p = PathPtIrq {
                entry_ns: account::now(),
                irq,
                ..Default::default()
            }
        };
    }
}

/// The handler returns: the interrupt's hardirq time.
#[inline(always)]
fn vf_irq_exit() {
    let Some(p) = PT_IRQ.get_ptr_mut(0) else {
        return;
    };
    let p = unsafe { &mut *p };
    if p.entry_ns == 0 {
        return;
    }
    add_irq(
        path_stage::PT_HARDIRQ,
        account::now().saturating_sub(p.entry_ns),
        0,
        p.irq,
    );
    p.entry_ns = 0;
}

/// kvm_msi_set_irq of `vector` in a VF interrupt's handler (vfio's
/// eventfd -> irqfd_wakeup -> KVM): the interrupt's signal. False outside
/// one: a virtio signal.
#[inline(always)]
fn vf_msi(vector: u32) -> bool {
    let Some(p) = PT_IRQ.get_ptr_mut(0) else {
        return false;
    };
    let p = unsafe { &mut *p };
    if p.entry_ns == 0 {
        return false;
    }
    let now = account::now();
    add_irq(path_stage::PT_SIGNAL, now.saturating_sub(p.entry_ns), 0, p.irq);
    p.signal_ns = now;
    let key = vector & 0xff;
    // One still waiting for its injection: the APIC holds the vector once,
    // so this one is coalesced into it, and the wait is the earlier one's
    // (unless it waited past any delivery: its VM is gone).
    if let Some(v) = PT_VECTORS.get_ptr_mut(&key)
        && unsafe { (*v).signal_ns } != 0
        && now.saturating_sub(unsafe { (*v).signal_ns }) < PT_STALE_NS
    {
        lost(path_loss::UNINJECTED);
        return true;
    }
    let _ = PT_VECTORS.insert(&key, p, 0);
    true
}

/// kvm_inj_virq of `vector` on a vCPU thread: a VF interrupt waiting for
/// it ends its inject stage here. True when it was one.
#[inline(always)]
fn vf_injected(vector: u32) -> bool {
    let Some(v) = PT_VECTORS.get_ptr_mut(&(vector & 0xff)) else {
        return false;
    };
    let v = unsafe { &mut *v };
    if v.signal_ns == 0 {
        return false;
    }
    let now = account::now();
    add_irq(path_stage::PT_INJECT, now.saturating_sub(v.signal_ns), 0, v.irq);
    let mut pending = *v;
    pending.inject_ns = now;
    v.signal_ns = 0;
    let _ = PT_INJECTED.insert(&account::current_tid(), &pending, 0);
    true
}

/// kvm_entry: a VF interrupt injected into this vCPU is delivered.
#[inline(always)]
fn vf_entered() {
    let Some(p) = PT_INJECTED.get_ptr_mut(&account::current_tid()) else {
        return;
    };
    let p = unsafe { &mut *p };
    if p.inject_ns == 0 {
        return;
    }
    let now = account::now();
    add_irq(path_stage::PT_ENTRY, now.saturating_sub(p.inject_ns), 0, p.irq);
    let done = *p;
    p.inject_ns = 0;
    followed(PathPacket {
        ts: [done.entry_ns, done.signal_ns, done.inject_ns, now, 0],
        vm: current_mm(),
        tgid: 0,
        tid: 0,
        dir: path_dir::PASSTHROUGH,
        frames: 0,
        irq: done.irq,
        _pad: 0,
    });
}

// irq_handler_entry(irq, action): the name from the record's __data_loc
// word, or the action's (the cpu layer's offsets).
hook_programs! {
    "irq_handler_entry", "irq", counted "path_irq_handler_entry";
    raw raw_path_irq_handler_entry(ctx) => {
        let at = conf!(cpu.irqaction_name);
        if at != 0 {
            let action: u64 = ctx.arg(1);
            let name: u64 = read_or_zero(action, at);
            vf_irq_entry(ctx.arg::<u64>(0) as u32, name as *const u8);
        }
    }
    tp tp_path_irq_handler_entry(ctx) => {
        let at = conf!(cpu.tp_irq_name);
        if at != 0 {
            let irq: i32 = tp_field(&ctx, conf!(cpu.tp_irq_irq));
            let loc: u32 = tp_field(&ctx, at);
            let name = unsafe { (aya_ebpf::EbpfContext::as_ptr(&ctx) as *const u8).add((loc & 0xffff) as usize) };
            vf_irq_entry(irq as u32, name);
        }
    }
}

hook_programs! {
    "irq_handler_exit", "irq", counted "path_irq_handler_exit";
    raw raw_path_irq_handler_exit(_ctx) => {
        vf_irq_exit();
    }
    tp tp_path_irq_handler_exit(_ctx) => {
        vf_irq_exit();
    }
}
