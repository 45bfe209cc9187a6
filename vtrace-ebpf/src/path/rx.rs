//! The rx path (host -> guest): tap queue, signal, injection, guest entry.

use super::{
    passthrough::{in_vf_irq, vf_entered, vf_injected, vf_msi},
    *,
};

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

/// EPOLLIN in the poll flags an eventfd's wakeup passes.
const EPOLLIN: u64 = 0x1;

/// A tap starts to transmit `skb` (net_dev_start_xmit, before
/// tun_net_xmit): it waits in the tap's ring from now (a frame the tap
/// drops stays until a later frame at its address, or the LRU, replaces
/// it; a frame taken from the ring is always its latest entry).
#[inline(always)]
pub(super) fn queued(skb: u64) {
    if skb != 0 {
        let _ = PATH_QUEUED.insert(&skb, &account::now(), 0);
    }
}

/// vhost-net took `ptr` from a tap's ring (tun_recvmsg): an skb, or an
/// xdp_frame (low bit set) that was never queued as an skb.
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

// tun_recvmsg(struct socket *sock, struct msghdr *m, size_t total_len, int flags):
// vhost-net hands the frame it took in m->msg_control (NULL: tun_do_read
// takes one itself, through tun_ring_recv).
kfunc_programs!(kprobe_path_tun_recvmsg, fentry_path_tun_recvmsg, "tun_recvmsg", counted "path_tun_recvmsg", [_sock, msg] => dequeued(read_or_zero(msg, conf!(path.msghdr_control))));
// irqfd_wakeup(wait_queue_entry_t *wait, unsigned mode, int sync, void *key)
kfunc_programs!(kprobe_path_irqfd_wakeup, fentry_path_irqfd_wakeup, "irqfd_wakeup", counted "path_irqfd_wakeup", [_wait, _mode, _sync, key] => on_irqfd(key));

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
