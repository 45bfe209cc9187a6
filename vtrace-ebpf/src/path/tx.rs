//! The tx path (guest -> host): kick, serve, tap.

use super::*;

/// tid -> the frame it is writing to a tap (tun_get_user, until it returns).
#[map]
pub static PATH_TX_FRAMES: LruHashMap<u32, PathTxFrame> = LruHashMap::with_max_entries(4096, 0);

/// VM (mm) -> its kicks not served yet.
#[map]
pub static PATH_KICKS: LruHashMap<u64, PathKick> = LruHashMap::with_max_entries(1024, 0);

/// A vCPU kicked a virtqueue (an ioeventfd took its write, signalling
/// `eventfd`; `vhost_tx`: it woke vhost-net's transmit queue): the VM's
/// first kick not served starts now unless one waits already. In a VM
/// vhost-net serves, a kick that woke no vhost queue went to a device the
/// VMM serves (a 9p share): not a transmit kick, and none counted before
/// the VM's first vhost-net one was either. Where the VMM serves its
/// queues, a kick of another eventfd than the one its tap writes follow
/// is not one either (its vsock's, its 9p share's); until that is known
/// (its first few writes), no kick is timed: any could be another
/// queue's, waiting long before the transmit that would take it.
#[inline(always)]
fn kicked(vhost_tx: bool, eventfd: u64) {
    let mm = current_mm();
    if mm == 0 {
        return;
    }
    match PATH_KICKS.get_ptr_mut(&mm) {
        Some(k) => {
            let k = unsafe { &mut *k };
            if vhost_tx && k.vhost == 0 {
                k.vhost = 1;
                if k.first_ns != 0 {
                    lost(path_loss::OTHER_KICKS);
                    k.first_ns = 0;
                    k.kicks = 0;
                }
            } else if !vhost_tx && k.vhost != 0 {
                lost(path_loss::OTHER_KICKS);
                return;
            } else if k.vhost == 0 && k.tx_eventfd != 0 && eventfd != 0 && eventfd != k.tx_eventfd {
                lost(path_loss::OTHER_KICKS);
                return;
            } else if !vhost_tx && k.vhost == 0 && k.tx_eventfd == 0 && eventfd != 0 {
                lost(path_loss::TX_QUEUE_UNKNOWN);
                return;
            }
            if k.first_ns == 0 {
                k.first_ns = account::now();
            }
            k.kicks += 1;
        }
        None => {
            // The VM's first kick: untimed unless it woke vhost-net's
            // transmit queue (its queue is known then) or its eventfd is
            // unknown (no learning: every kick counts, as before).
            let timed = vhost_tx || eventfd == 0;
            if !timed {
                lost(path_loss::TX_QUEUE_UNKNOWN);
            }
            let k = PathKick {
                first_ns: if timed { account::now() } else { 0 },
                kicks: timed as u64,
                vhost: vhost_tx as u64,
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
        learn_tx_eventfd(k, tid);
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

/// Thread -> the eventfds it read since its last tap write.
#[map]
pub static PATH_READS: LruHashMap<u32, PathReads> = LruHashMap::with_max_entries(4096, 0);

/// A VMM's thread `tid` writes to its VM's tap (`k`): the eventfds it read
/// since its last write include the queue this write serves. The VM's
/// candidates are those read before every write so far (a write after
/// none is a batch's next frame, or a timer's: it says nothing); once one
/// is left, it is the transmit queue's. An empty meet starts over.
#[inline(always)]
fn learn_tx_eventfd(k: &mut PathKick, tid: u32) {
    let Some(r) = PATH_READS.get_ptr_mut(&tid) else {
        return;
    };
    let r = unsafe { &mut *r };
    if k.vhost == 0 && r.count > 0 && r.count as usize <= PATH_READS_KEPT {
        let mut left = 0;
        let mut last = 0;
        for i in 0..PATH_READS_KEPT {
            let c = k.candidates[i];
            let mut kept = false;
            if c != 0 {
                for j in 0..PATH_READS_KEPT {
                    if (j as u64) < r.count && r.eventfds[j] == c {
                        kept = true;
                    }
                }
            }
            if kept {
                left += 1;
                last = c;
            } else {
                k.candidates[i] = 0;
            }
        }
        if left == 0 {
            k.candidates = r.eventfds;
        } else if left == 1 {
            k.tx_eventfd = last;
        }
    }
    *r = PathReads::default();
}

// eventfd_read(struct kiocb *iocb, struct iov_iter *to): a thread of a VM's
// process (a VMM's, serving a queue) reads an eventfd; others are not kept.
kfunc_programs!(kprobe_path_eventfd_read, fentry_path_eventfd_read, "eventfd_read", counted "path_eventfd_read", [iocb] => {
    let private_data = conf!(path.file_private_data);
    let mm = current_mm();
    if private_data != 0 && conf!(path.ioeventfd_eventfd) != 0 && mm != 0 && PATH_KICKS.get_ptr(&mm).is_some() {
        let file: u64 = read_or_zero(iocb, conf!(path.kiocb_filp));
        let eventfd: u64 = read_or_zero(file, private_data);
        let tid = account::current_tid();
        if eventfd != 0 {
            if PATH_READS.get_ptr(&tid).is_none() {
                let _ = PATH_READS.insert(&tid, &PathReads::default(), 0);
            }
            if let Some(r) = PATH_READS.get_ptr_mut(&tid) {
                let r = unsafe { &mut *r };
                let mut seen = false;
                for j in 0..PATH_READS_KEPT {
                    if (j as u64) < r.count && r.eventfds[j] == eventfd {
                        seen = true;
                    }
                }
                if !seen {
                    let at = r.count as usize;
                    if at < PATH_READS_KEPT {
                        r.eventfds[at] = eventfd;
                    }
                    r.count += 1;
                }
            }
        }
    }
});

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

/// Per CPU: the vCPU thread inside ioeventfd_write, and whether its
/// write woke a vhost queue other than vhost-net's transmit one.
#[map]
pub static PATH_KICK_TARGET: PerCpuArray<PathKickTarget> = PerCpuArray::with_max_entries(1, 0);

// ioeventfd_write(vcpu, dev, addr, len, val): a guest write an ioeventfd
// may take; its eventfd's waiters are woken inside it.
kfunc_programs!(kprobe_path_ioeventfd_write, fentry_path_ioeventfd_write, "ioeventfd_write", counted "path_ioeventfd_write", [_vcpu, dev] => {
    if let Some(k) = PATH_KICK_TARGET.get_ptr_mut(0) {
        // Its eventfd: `dev` is inside its struct _ioeventfd.
        let at = conf!(path.ioeventfd_eventfd);
        let eventfd = if at != 0 && dev != 0 {
            read_or_zero::<u64>(dev.wrapping_sub(conf!(path.ioeventfd_dev) as u64), at)
        } else {
            0
        };
        unsafe { *k = PathKickTarget { tid: account::current_tid(), eventfd, ..Default::default() } };
    }
});

// vhost_poll_wakeup(wait, mode, sync, key): an eventfd vhost polls woke
// it; inside a guest's write, the queue the write kicked. Its work's
// function tells vhost-net's transmit queue (handle_tx_kick) from the rest.
kfunc_programs!(kprobe_path_vhost_poll_wakeup, fentry_path_vhost_poll_wakeup, "vhost_poll_wakeup", counted "path_vhost_poll_wakeup", [wait] => {
    let at = conf!(path.vhost_wait_to_fn);
    let tx_kick = address(conf!(path.vhost_tx_kick_fn_lo), conf!(path.vhost_tx_kick_fn_hi));
    if at != 0 && tx_kick != 0 {
        if let Some(k) = PATH_KICK_TARGET.get_ptr_mut(0) {
            let k = unsafe { &mut *k };
            if k.tid == account::current_tid() {
                if read_or_zero::<u64>(wait, at) == tx_kick {
                    k.tx = 1;
                } else {
                    k.other = 1;
                }
            }
        }
    }
});

// ioeventfd_write returns 0 when the guest's write was a notify an
// ioeventfd took (its address, and its value where it has a datamatch): a
// virtqueue kick, to vhost-net or the VMM's thread, unless it woke another
// vhost queue. Other MMIO and port writes (interrupt acks, EOIs) are not
// kicks.
#[kretprobe]
pub fn kretprobe_path_ioeventfd_write(ctx: RetProbeContext) -> u32 {
    count_run!("kretprobe_path_ioeventfd_write");
    let (mut other, mut tx, mut eventfd) = (false, false, 0);
    if let Some(k) = PATH_KICK_TARGET.get_ptr_mut(0) {
        let k = unsafe { &mut *k };
        if k.tid == account::current_tid() {
            (other, tx, eventfd) = (k.other != 0, k.tx != 0, k.eventfd);
        }
        *k = PathKickTarget::default();
    }
    if ctx.ret::<i64>() == 0 {
        if other && !tx {
            lost(path_loss::OTHER_KICKS);
        } else {
            kicked(tx, eventfd);
        }
    }
    0
}
