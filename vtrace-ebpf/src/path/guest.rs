//! Inside a guest (`vtrace agent`): virtio-net's side of the path, in the
//! guest's own kernel. rx: a receive queue's interrupt -> its NAPI poll
//! starts [guest_rx_poll] -> that poll returns, the frames through the
//! guest's stack [guest_rx_stack]. tx: the first frame a virtio-net device
//! starts to transmit and not announced -> the driver's kick
//! [guest_tx_kick] -> the kick's write back from the host
//! [guest_tx_notify].
//!
//! A passed-through VF (SR-IOV) the same way, at tracepoints only: its
//! driver's receive IRQ -> the NET_RX softirq's entry [guest_rx_poll] ->
//! its device's napi_poll [guest_rx_stack]; each frame's transmit, the
//! driver's doorbell write included [guest_tx_xmit]. The VF's IRQs and
//! devices come from userspace (/proc/interrupts, sysfs).
//!
//! Frames are counted at tracepoints (net_dev_start_xmit, napi_poll),
//! times taken at kprobes on virtio_ring and virtio_net (modules); without
//! kprobes, rx's at tracepoints too (a receive queue's own MSI-X IRQ, the
//! NET_RX softirq). A
//! kprobe cannot fire while another kprobe's program runs on its CPU: an
//! interrupt, and the softirq after it, that comes during one (a vsock
//! kick's in a kworker) finds its kprobes skipped, and kernels before 6.7
//! count such misses nowhere. A tracepoint's program is blocked only by
//! itself. So a missed kprobe costs a time, never a frame: a poll whose
//! start was missed adds its frames untimed, and frames whose kick was
//! missed join the next one.
//!
//! virtio-net is told from the guest's other devices by its
//! `net_device_ops` (mod.rs, which starts a transmit) and its poll function (their addresses from
//! kallsyms), and its queues from other virtqueues (vsock, block) by their
//! names, `input.N` and `output.N`. Per-CPU state where one CPU runs the
//! whole step (an interrupt and the poll it schedules there, a transmit
//! and its kick, under the queue's lock with bottom halves off); a
//! queue's unannounced frames in a map by queue.

use vtrace_common::{PathGuestKick, PathGuestRx, PathGuestTx};

use super::*;

/// Per CPU: virtio-net's receive interrupt and poll.
#[map]
pub static PATH_GUEST_RX: PerCpuArray<PathGuestRx> = PerCpuArray::with_max_entries(1, 0);

/// Per CPU: the virtio-net transmit running and the queue it kicks.
#[map]
pub static PATH_GUEST_KICK: PerCpuArray<PathGuestKick> = PerCpuArray::with_max_entries(1, 0);

/// Transmit queue (its device's address plus its index) -> its frames not
/// announced yet.
#[map]
pub static PATH_GUEST_TX: LruHashMap<u64, PathGuestTx> = LruHashMap::with_max_entries(256, 0);

/// Whether virtqueue `vq`'s name starts with `prefix` (six bytes:
/// `input.`, `output`). Never, where the name's offset is unknown.
#[inline(always)]
fn named(vq: u64, prefix: &[u8; 6]) -> bool {
    let at = conf!(path.virtqueue_name);
    if at == 0 || vq == 0 {
        return false;
    }
    let name: u64 = read_or_zero(vq, at);
    let head: [u8; 6] = read_or_zero(name, 0);
    &head == prefix
}

// vring_interrupt(int irq, void *vq): a virtqueue's interrupt.
kfunc_programs!(kprobe_path_vring_interrupt, fentry_path_vring_interrupt, "vring_interrupt", counted "path_vring_interrupt", [_irq, vq] => {
    if named(vq, b"input.") {
        if conf!(path.rx_irq_at_return) == 0 {
            rx_interrupt();
        } else if let Some(rx) = PATH_GUEST_RX.get_ptr_mut(0) {
            unsafe { (*rx).entering_ns = account::now() };
        }
    }
});

/// vring_interrupt returns: a receive queue's is its interrupt where it
/// handled used buffers (IRQ_HANDLED, 1; IRQ_NONE, 0: nothing there).
#[kretprobe]
pub fn kretprobe_path_vring_interrupt(ctx: RetProbeContext) -> u32 {
    count_run!("kretprobe_path_vring_interrupt");
    let Some(rx) = PATH_GUEST_RX.get_ptr_mut(0) else {
        return 0;
    };
    let rx = unsafe { &mut *rx };
    let entered = rx.entering_ns;
    if entered == 0 {
        return 0;
    }
    rx.entering_ns = 0;
    if ctx.ret::<u64>() & 0xffff_ffff != 0 && rx.irq_ns == 0 {
        rx.irq_ns = entered;
    }
    0
}

/// A receive queue's interrupt on this CPU (the first, until its poll).
#[inline(always)]
fn rx_interrupt() {
    if let Some(rx) = PATH_GUEST_RX.get_ptr_mut(0) {
        let rx = unsafe { &mut *rx };
        if rx.irq_ns == 0 {
            rx.irq_ns = account::now();
        }
    }
}

/// A receive poll starts on this CPU: the interrupt's wait for it ends.
#[inline(always)]
fn rx_poll_starts() {
    if let Some(rx) = PATH_GUEST_RX.get_ptr_mut(0) {
        let rx = unsafe { &mut *rx };
        let now = account::now();
        if rx.irq_ns != 0 {
            add(path_stage::GUEST_RX_POLL, now.saturating_sub(rx.irq_ns), 1);
        }
        rx.poll_irq_ns = rx.irq_ns;
        rx.irq_ns = 0;
        rx.poll_ns = now;
    }
}

// virtnet_poll(struct napi_struct *napi, int budget): a receive queue's poll.
kfunc_programs!(kprobe_path_virtnet_poll, fentry_path_virtnet_poll, "virtnet_poll", counted "path_virtnet_poll", [] => {
    rx_poll_starts();
});

/// Whether device IRQ `irq` is set in `bitmap`, one of the
/// configuration's (from /proc/interrupts).
#[inline(always)]
fn irq_in(bitmap: &[u32; RX_IRQ_WORDS], irq: u32) -> bool {
    // Every word read (volatile, at its constant offset), then one chosen:
    // read at an index, LLVM checks the IRQ's bound on a copy of its
    // register that the verifier does not tie to the index (a classic
    // tracepoint's IRQ, read from its record), and it refuses the program.
    let word = irq / 32;
    let mut bits = 0;
    let mut i = 0;
    while i < RX_IRQ_WORDS {
        let w = crate::config::read(&bitmap[i]);
        if word == i as u32 {
            bits = w;
        }
        i += 1;
    }
    (bits >> (irq % 32)) & 1 != 0
}

/// Whether device IRQ `irq` is a virtio-net receive queue's own.
#[inline(always)]
fn virtio_rx_irq(irq: u32) -> bool {
    irq_in(&crate::config::CONFIG.path.virtio_rx_irqs, irq)
}

/// A device IRQ's handler starts (path:irq_handler_entry): a VF's
/// receive IRQ is the guest's receive interrupt.
#[inline(always)]
pub(super) fn device_irq(irq: u32) {
    // No VF (every host): one read per device IRQ, not the bitmap's eight.
    if crate::config::read(&crate::config::CONFIG.path.vf_ifindexes[0]) == 0 {
        return;
    }
    if irq_in(&crate::config::CONFIG.path.vf_rx_irqs, irq) {
        rx_interrupt();
    }
}

/// Whether network device `dev` is one of the guest's VFs (by ifindex).
#[inline(always)]
pub(super) fn is_vf(dev: u64) -> bool {
    let slots = &crate::config::CONFIG.path.vf_ifindexes;
    // No VF: no read on every other device's frame.
    let first = crate::config::read(&slots[0]);
    let at = conf!(net_device.dev_ifindex);
    if first == 0 || at == 0 || dev == 0 {
        return false;
    }
    let ifindex: u32 = read_or_zero(dev, at);
    ifindex != 0 && slots.iter().any(|s| crate::config::read(s) == ifindex)
}

// Without kprobes (the fallbacks of vring_interrupt and virtnet_poll):
// irq_handler_entry(irq, action) of a receive queue's own MSI-X vector is
// its interrupt, and the NET_RX softirq that follows on that CPU starts
// its poll (the stack's time then holds any other device's poll before
// virtio-net's in that softirq).
hook_programs! {
    "irq_handler_entry", "irq", counted "path_virtio_rx_irq";
    raw raw_path_virtio_rx_irq(ctx) => {
        let irq: u64 = ctx.arg(0);
        if virtio_rx_irq(irq as u32) {
            rx_interrupt();
        }
    }
}

/// softirq_entry's vector of the network receive softirq.
const NET_RX_SOFTIRQ: u32 = 3;

// A VF's poll starts at the NET_RX softirq's entry, as virtio-net's
// fallback above (which, where it runs, starts it: `vf_starts_poll` 0).
hook_programs! {
    "softirq_entry", "irq", counted "path_vf_rx_softirq";
    raw raw_path_vf_rx_softirq(ctx) => {
        let vec: u64 = ctx.arg(0);
        if vec as u32 == NET_RX_SOFTIRQ && conf!(path.vf_starts_poll) != 0 {
            rx_poll_starts();
        }
    }
}

hook_programs! {
    "softirq_entry", "irq", counted "path_net_rx_softirq";
    raw raw_path_net_rx_softirq(ctx) => {
        let vec: u64 = ctx.arg(0);
        if vec as u32 == NET_RX_SOFTIRQ {
            rx_poll_starts();
        }
    }
}

/// Whether `napi` is virtio-net's receive poll (by its function) or a
/// VF's (by its device).
#[inline(always)]
fn guest_rx_napi(napi: u64) -> bool {
    let poll = address(conf!(path.virtnet_poll_lo), conf!(path.virtnet_poll_hi));
    let at = conf!(path.napi_poll);
    if poll != 0 && at != 0 && read_or_zero::<u64>(napi, at) == poll {
        return true;
    }
    let dev_at = conf!(path.napi_dev);
    dev_at != 0 && is_vf(read_or_zero(napi, dev_at))
}

/// A NAPI poll returned `work` frames: virtio-net's or a VF's receive
/// poll's are its frames through the guest's stack, untimed where its
/// start's kprobe was missed.
#[inline(always)]
fn on_napi_poll(napi: u64, work: u64) {
    if !guest_rx_napi(napi) {
        return;
    }
    let Some(rx) = PATH_GUEST_RX.get_ptr_mut(0) else {
        return;
    };
    let rx = unsafe { &mut *rx };
    let frames = work;
    if rx.poll_ns == 0 {
        add_frames(path_stage::GUEST_RX_STACK, frames);
        return;
    }
    let now = account::now();
    add(path_stage::GUEST_RX_STACK, now.saturating_sub(rx.poll_ns), frames);
    // An interrupt's poll, followed: the host's injection joins it.
    if rx.poll_irq_ns != 0 {
        followed(PathPacket {
            ts: [rx.poll_irq_ns, rx.poll_ns, now, 0, 0],
            dir: path_dir::GUEST_RX,
            frames: frames as u32,
            ..Default::default()
        });
    }
    rx.poll_ns = 0;
    rx.poll_irq_ns = 0;
}

// napi_poll(napi, work, budget): after each poll, of any device.
hook_programs! {
    "napi_poll", "napi", counted "path_napi_poll";
    btf btf_path_napi_poll(ctx) => {
        let work: u64 = ctx.arg(1);
        on_napi_poll(ctx.arg(0), (work as i32).max(0) as u64);
    }
    raw raw_path_napi_poll(ctx) => {
        let work: u64 = ctx.arg(1);
        on_napi_poll(ctx.arg(0), (work as i32).max(0) as u64);
    }
}

/// virtio-net device `dev` starts to transmit `skb`: the frame is counted
/// onto its queue, which this CPU's kick (if any) announces before the
/// transmit ends (net_dev_xmit).
#[inline(always)]
pub(super) fn virtio_start_xmit(skb: u64, dev: u64) {
    let Some(k) = PATH_GUEST_KICK.get_ptr_mut(0) else {
        return;
    };
    let k = unsafe { &mut *k };
    let queue: u16 = read_or_zero(skb, conf!(path.skb_queue_mapping));
    let txq = dev + queue as u64;
    k.txq = txq;
    match PATH_GUEST_TX.get_ptr_mut(&txq) {
        Some(t) => {
            let t = unsafe { &mut *t };
            if t.frames == 0 {
                t.first_ns = account::now();
            }
            t.frames += 1;
        }
        None => {
            let t = PathGuestTx {
                first_ns: account::now(),
                frames: 1,
            };
            let _ = PATH_GUEST_TX.insert(&txq, &t, 0);
        }
    }
}

/// A VF starts to transmit a frame on this CPU.
#[inline(always)]
pub(super) fn vf_start_xmit() {
    if let Some(k) = PATH_GUEST_KICK.get_ptr_mut(0) {
        unsafe { (*k).vf_xmit_ns = account::now() };
    }
}

/// The transmit ended: a VF's is timed, if the driver took the frame; a
/// frame virtio-net's driver refused (`rc` non-zero, to be requeued) is
/// no longer on its queue.
#[inline(always)]
fn on_xmit(rc: i32) {
    let Some(k) = PATH_GUEST_KICK.get_ptr_mut(0) else {
        return;
    };
    let k = unsafe { &mut *k };
    if k.vf_xmit_ns != 0 {
        if rc == 0 {
            let now = account::now();
            add(path_stage::GUEST_TX_XMIT, now.saturating_sub(k.vf_xmit_ns), 1);
            // Its start joins the host's receive of the frame on the PF.
            followed(PathPacket {
                ts: [k.vf_xmit_ns, now, 0, 0, 0],
                dir: path_dir::GUEST_VF_TX,
                frames: 1,
                ..Default::default()
            });
        }
        k.vf_xmit_ns = 0;
        return;
    }
    let txq = k.txq;
    k.txq = 0;
    if txq == 0 || rc == 0 {
        return;
    }
    if let Some(t) = PATH_GUEST_TX.get_ptr_mut(&txq) {
        let t = unsafe { &mut *t };
        t.frames = t.frames.saturating_sub(1);
    }
}

// net_dev_xmit(skb, rc, dev, skb_len): after the driver's ndo_start_xmit.
hook_programs! {
    "net_dev_xmit", "net", counted "path_net_dev_xmit";
    btf btf_path_net_dev_xmit(ctx) => {
        let rc: u64 = ctx.arg(1);
        on_xmit(rc as i32);
    }
    raw raw_path_net_dev_xmit(ctx) => {
        let rc: u64 = ctx.arg(1);
        on_xmit(rc as i32);
    }
}

// virtqueue_kick_prepare(vq): whether the host wants this kick.
kfunc_programs!(kprobe_path_virtqueue_kick_prepare, fentry_path_virtqueue_kick_prepare, "virtqueue_kick_prepare", counted "path_virtqueue_kick_prepare", [vq] => {
    if let Some(k) = PATH_GUEST_KICK.get_ptr_mut(0) {
        let k = unsafe { &mut *k };
        k.vq = if k.txq != 0 && named(vq, b"output") { vq } else { 0 };
    }
});

/// virtqueue_kick_prepare returns false: no kick, the host is still
/// serving the queue and takes the frames without one. (A bool: only the
/// return register's low byte is defined.)
#[kretprobe]
pub fn kretprobe_path_virtqueue_kick_prepare(ctx: RetProbeContext) -> u32 {
    count_run!("kretprobe_path_virtqueue_kick_prepare");
    let Some(k) = PATH_GUEST_KICK.get_ptr_mut(0) else {
        return 0;
    };
    let k = unsafe { &mut *k };
    let (vq, txq) = (k.vq, k.txq);
    if vq == 0 || txq == 0 || ctx.ret::<u64>() & 0xff != 0 {
        return 0;
    }
    k.vq = 0;
    if let Some(t) = PATH_GUEST_TX.get_ptr_mut(&txq) {
        let t = unsafe { &mut *t };
        if let Some(c) = PATH_LOSSES.get_ptr_mut(path_loss::GUEST_UNANNOUNCED) {
            unsafe { *c += t.frames };
        }
        t.frames = 0;
    }
    0
}

// virtqueue_notify(vq): the kick, a write the host traps.
kfunc_programs!(kprobe_path_virtqueue_notify, fentry_path_virtqueue_notify, "virtqueue_notify", counted "path_virtqueue_notify", [vq] => {
    if named(vq, b"output") {
        let now = account::now();
        if let Some(k) = PATH_GUEST_KICK.get_ptr_mut(0) {
            let k = unsafe { &mut *k };
            let (mut first_ns, mut frames) = (0, 0);
            // The queue this CPU's transmit put its frames on (none: a kick
            // from outside a transmit announces none).
            let txq = k.txq;
            if let Some(t) = PATH_GUEST_TX.get_ptr_mut(&txq) {
                let t = unsafe { &mut *t };
                if t.frames != 0 {
                    add(path_stage::GUEST_TX_KICK, now.saturating_sub(t.first_ns), t.frames);
                    (first_ns, frames) = (t.first_ns, t.frames);
                    t.frames = 0;
                }
            }
            k.notify_ns = now;
            k.first_ns = first_ns;
            k.frames = frames;
        }
    }
});

/// virtqueue_notify returns: the host let the guest run again.
#[kretprobe]
pub fn kretprobe_path_virtqueue_notify(_ctx: RetProbeContext) -> u32 {
    count_run!("kretprobe_path_virtqueue_notify");
    if let Some(k) = PATH_GUEST_KICK.get_ptr_mut(0) {
        let k = unsafe { &mut *k };
        if k.notify_ns != 0 {
            let now = account::now();
            add(path_stage::GUEST_TX_NOTIFY, now.saturating_sub(k.notify_ns), 1);
            // A kick, followed: the host's ioeventfd joins it.
            followed(PathPacket {
                ts: [k.first_ns, k.notify_ns, now, 0, 0],
                dir: path_dir::GUEST_TX,
                frames: k.frames as u32,
                ..Default::default()
            });
            k.notify_ns = 0;
            k.vq = 0;
        }
    }
    0
}
