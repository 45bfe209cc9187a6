//! tun/tap and vhost-net: frames per function, a VMM's reads and writes on a tap.

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
    /// A tap's user (a VMM's read/readv, io_uring) takes one frame from it;
    /// a call that got none (EAGAIN) counts as a call without a frame.
    pub const READ_ITER: u32 = 3;
    /// The stack queues a frame to a tap for its user (tun_net_xmit; counted
    /// at the net_dev_start_xmit tracepoint).
    pub const NET_XMIT: u32 = 4;
    pub const HANDLE_TX: u32 = 5;
    pub const HANDLE_RX: u32 = 6;
    pub const HANDLE_TX_KICK: u32 = 7;
    pub const HANDLE_RX_KICK: u32 = 8;
    pub const NAMES: [&str; 9] = [
        "tun_get_user",
        "tun_sendmsg",
        "tun_recvmsg",
        "tun_chr_read_iter",
        "tun_net_xmit",
        "handle_tx",
        "handle_rx",
        "handle_tx_kick",
        "handle_rx_kick",
    ];
}

/// `tun_msg_ctl.type` of a vhost-net batch (include/linux/if_tun.h).
pub const TUN_MSG_PTR: u16 = 2;
/// The low bit of a tun ring entry marks an xdp_frame rather than an skb
/// (the kernel's TUN_XDP_FLAG).
pub const TUN_XDP_FLAG: u64 = 1;
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

/// The tun layer's offsets (the tun module's own structs from its BTF).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TunConfig {
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
    /// struct kiocb `ki_filp`, struct file `private_data` (a tap's tun_file):
    /// tun_chr_read_iter's way from its kiocb to the tap.
    pub kiocb_filp: u32,
    pub file_private_data: u32,
}
