//! The tun layer: tun/tap and vhost-net kernel functions, per device and
//! calling process: calls, the frames they moved, bytes and a size
//! histogram (fentry, else kprobe; module functions need the module's
//! split BTF for fentry, so kprobes are what attaches on stock kernels).
//! Frames queued to a tap are counted at the net_dev_start_xmit tracepoint
//! instead (see [`start_xmit`]). Frames, not calls: vhost-net hands a tap up to 64 frames per
//! tun_sendmsg (a TUN_MSG_PTR batch of xdp_buffs), so that call's frames
//! are read from its message. Where neither method attaches (this
//! project's CI kernel), the tap's hops come from the net tracepoints on
//! the tap device instead (net.rs).

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_kernel},
    macros::{kprobe, kretprobe, map},
    maps::{HashMap, PerCpuHashMap},
    programs::{ProbeContext, RetProbeContext},
};
use vtrace_common::{TUN_BATCH_MAX, TUN_MSG_PTR, TUN_XDP_FLAG, TunKey, TunStats, dev_key, tun_fn, tun_size_bucket};

use crate::{
    account,
    config::conf,
    devices,
    kmem::read_or_zero,
    runs::{count_run, hook_programs, kfunc_programs},
};

#[map]
pub static TUN_STATS: PerCpuHashMap<TunKey, TunStats> = PerCpuHashMap::with_max_entries(1024, 0);

/// tid -> the tap of its tun_chr_read_iter in progress (entry to return).
#[map]
pub static TUN_READS: HashMap<u32, u64> = HashMap::with_max_entries(4096, 0);

/// The net_device of a `struct tun_struct *`.
#[inline(always)]
fn tun_dev(tun: u64) -> u64 {
    read_or_zero(tun, conf!(tun.tun_struct_dev))
}

/// The net_device behind a tap's `struct socket *` (embedded in its tun_file).
#[inline(always)]
fn socket_dev(sock: u64) -> u64 {
    let at = conf!(tun.tun_file_socket) as u64;
    if sock < at {
        return 0;
    }
    tun_dev(read_or_zero(sock - at, conf!(tun.tun_file_tun)))
}

/// The stats of `function` on `dev` by the current process, with the
/// device's name filled in when the entry is new.
#[inline(always)]
fn stats(function: u32, dev: u64) -> Option<&'static mut TunStats> {
    let (netns, ifindex) = if dev == 0 {
        (0, 0)
    } else {
        let net: u64 = read_or_zero(dev, conf!(net_device.dev_nd_net));
        let inum: u32 = read_or_zero(net, conf!(net_device.net_ns_inum));
        (inum, read_or_zero::<u32>(dev, conf!(net_device.dev_ifindex)))
    };
    let key = TunKey {
        dev: dev_key(netns, ifindex),
        tgid: (bpf_get_current_pid_tgid() >> 32) as u32,
        function,
    };
    let s = account::entry(&TUN_STATS, &key)?;
    if s.calls == 0 && dev != 0 {
        s.name = unsafe { bpf_probe_read_kernel((dev + conf!(net_device.dev_name) as u64) as *const [u8; 16]) }
            .unwrap_or([0; 16]);
    }
    s.calls += 1;
    Some(s)
}

#[inline(always)]
fn add_frame(s: &mut TunStats, bytes: u64) {
    s.frames += 1;
    s.bytes += bytes;
    let b = tun_size_bucket(bytes);
    if b < s.sizes.len() {
        s.sizes[b] += 1;
    }
}

/// tun_get_user(tun, tfile, msg_control, struct iov_iter *from, noblock, more):
/// one frame of `from`'s length (with the vnet header where the tap has one).
#[inline(always)]
fn get_user(tun: u64, from: u64) {
    if let Some(s) = stats(tun_fn::GET_USER, tun_dev(tun)) {
        add_frame(s, read_or_zero::<u64>(from, conf!(tun.iov_iter_count)));
    }
}

/// tun_sendmsg(sock, struct msghdr *m, total_len): a vhost-net batch
/// (msg_control a TUN_MSG_PTR `tun_msg_ctl` of `num` xdp_buffs), else one
/// frame that tun_get_user takes.
#[inline(always)]
fn sendmsg(sock: u64, msg: u64, total_len: u64) {
    let Some(s) = stats(tun_fn::SENDMSG, socket_dev(sock)) else {
        return;
    };
    let ctl: u64 = read_or_zero(msg, conf!(tun.msghdr_control));
    if ctl == 0 || read_or_zero::<u16>(ctl, conf!(tun.tun_msg_ctl_type)) != TUN_MSG_PTR {
        add_frame(s, total_len);
        return;
    }
    let num = read_or_zero::<u16>(ctl, conf!(tun.tun_msg_ctl_num)) as u32;
    let buffs: u64 = read_or_zero(ctl, conf!(tun.tun_msg_ctl_ptr));
    let stride = conf!(tun.xdp_buff_size) as u64;
    for i in 0..TUN_BATCH_MAX {
        if i >= num {
            break;
        }
        let xdp = buffs + i as u64 * stride;
        let data: u64 = read_or_zero(xdp, conf!(tun.xdp_buff_data));
        let end: u64 = read_or_zero(xdp, conf!(tun.xdp_buff_data_end));
        add_frame(s, end.saturating_sub(data));
    }
}

/// tun_recvmsg(sock, struct msghdr *m, total_len, flags): one frame, the
/// skb or xdp_frame vhost-net took from the tap's ring (in msg_control).
#[inline(always)]
fn recvmsg(sock: u64, msg: u64) {
    let Some(s) = stats(tun_fn::RECVMSG, socket_dev(sock)) else {
        return;
    };
    let ptr: u64 = read_or_zero(msg, conf!(tun.msghdr_control));
    let bytes = if ptr & TUN_XDP_FLAG != 0 {
        read_or_zero::<u32>(ptr & !TUN_XDP_FLAG, conf!(tun.xdp_frame_len))
    } else {
        read_or_zero::<u32>(ptr, conf!(net_device.skb_len))
    };
    add_frame(s, bytes as u64);
}

/// tun_chr_read_iter(struct kiocb *iocb, struct iov_iter *to), entry: the
/// tap of iocb->ki_filp->private_data (its tun_file), kept for the return.
#[inline(always)]
fn read_iter_enter(iocb: u64) {
    let file: u64 = read_or_zero(iocb, conf!(tun.kiocb_filp));
    let tfile: u64 = read_or_zero(file, conf!(tun.file_private_data));
    let dev = tun_dev(read_or_zero(tfile, conf!(tun.tun_file_tun)));
    if dev != 0 {
        let _ = TUN_READS.insert(&(bpf_get_current_pid_tgid() as u32), &dev, 0);
    }
}

/// Its return: one call; one frame of `ret` bytes (what tun_put_user
/// copied: the vnet header and tun_pi where the tap has them, as
/// tun_get_user's bytes) when it read one (> 0; EAGAIN reads none).
#[inline(always)]
fn read_iter_exit(ret: i64) {
    let tid = bpf_get_current_pid_tgid() as u32;
    let Some(dev) = (unsafe { TUN_READS.get(&tid) }).copied() else {
        return;
    };
    let _ = TUN_READS.remove(&tid);
    if let Some(s) = stats(tun_fn::READ_ITER, dev)
        && ret > 0
    {
        add_frame(s, ret as u64);
    }
}

/// net_dev_start_xmit(skb, dev) on a tun or tap device: one frame queued
/// to the tap for its user, the
/// tun_net_xmit call that follows. A tracepoint: a kprobe on tun_net_xmit,
/// in the softirq that forwards the frame, is skipped whenever that softirq
/// interrupted another kprobe's program on its CPU (uncounted before Linux
/// 6.7), and a count must miss nothing.
#[inline(always)]
fn start_xmit(skb: u64, dev: u64) {
    if !devices::is_tun(devices::netdev_ops(dev)) {
        return;
    }
    if let Some(s) = stats(tun_fn::NET_XMIT, dev) {
        add_frame(s, read_or_zero::<u32>(skb, conf!(net_device.skb_len)) as u64);
    }
}

/// A vhost-net handler: calls by the worker (they name no device).
#[inline(always)]
fn handler(function: u32) {
    let _ = stats(function, 0);
}

kfunc_programs!(kprobe_tun_get_user, fentry_tun_get_user, "tun_get_user", [tun, _tfile, _control, from] => get_user(tun, from));
kfunc_programs!(kprobe_tun_sendmsg, fentry_tun_sendmsg, "tun_sendmsg", [sock, msg, len] => sendmsg(sock, msg, len));
kfunc_programs!(kprobe_tun_recvmsg, fentry_tun_recvmsg, "tun_recvmsg", [sock, msg] => recvmsg(sock, msg));

#[kprobe]
pub fn kprobe_tun_chr_read_iter(ctx: ProbeContext) -> u32 {
    count_run!("tun_chr_read_iter");
    read_iter_enter(ctx.arg(0).unwrap_or(0));
    0
}

#[kretprobe]
pub fn kretprobe_tun_chr_read_iter(ctx: RetProbeContext) -> u32 {
    count_run!("kretprobe_tun_chr_read_iter");
    read_iter_exit(ctx.ret::<i64>());
    0
}

hook_programs! {
    "net_dev_start_xmit", "net", counted "tun_net_dev_start_xmit";
    btf btf_tun_net_dev_start_xmit(ctx) => {
        start_xmit(ctx.arg(0), ctx.arg(1));
    }
    raw raw_tun_net_dev_start_xmit(ctx) => {
        start_xmit(ctx.arg(0), ctx.arg(1));
    }
}
kfunc_programs!(kprobe_handle_tx, fentry_handle_tx, "handle_tx", [] => handler(tun_fn::HANDLE_TX));
kfunc_programs!(kprobe_handle_rx, fentry_handle_rx, "handle_rx", [] => handler(tun_fn::HANDLE_RX));
kfunc_programs!(kprobe_handle_tx_kick, fentry_handle_tx_kick, "handle_tx_kick", [] => handler(tun_fn::HANDLE_TX_KICK));
kfunc_programs!(kprobe_handle_rx_kick, fentry_handle_rx_kick, "handle_rx_kick", [] => handler(tun_fn::HANDLE_RX_KICK));
