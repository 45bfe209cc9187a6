//! vsock packets through the host's virtio transport (the vsock layer): a
//! VMM's or a sandbox shim's control channel into its guest (Kata's shim to
//! its agent), counted by kind.

/// What a vsock packet was and who handled it: the key of VSOCK_PACKETS.
/// `peer_cid` is the other end (the guest, seen from its host); `port` the
/// lower of the two ports, which is the listening service's (ephemeral
/// ports are drawn above the reserved ones: a service below them is named
/// exactly, Kata's agent at 1024 too).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct VsockKey {
    /// The thread that handled it (a vhost-vsock worker receiving, the
    /// sending thread otherwise).
    pub tid: u32,
    pub peer_cid: u32,
    pub port: u32,
    /// [`vsock_dir`].
    pub dir: u16,
    /// VIRTIO_VSOCK_OP_* ([`vsock_op`]).
    pub op: u16,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VsockStats {
    pub packets: u64,
    /// Payload bytes (the header's `len`).
    pub bytes: u64,
    /// bpf_ktime of the first and last such packet on this CPU (0: none).
    pub first_ns: u64,
    pub last_ns: u64,
}

pub mod vsock_dir {
    /// virtio_transport_recv_pkt: the peer sent it.
    pub const RECEIVED: u16 = 0;
    /// virtio_transport_alloc_pkt: made here to send.
    pub const SENT: u16 = 1;
}

pub mod vsock_op {
    pub const REQUEST: u16 = 1;
    /// The listening side accepted a connection.
    pub const RESPONSE: u16 = 2;
    pub const NAMES: [&str; 8] = [
        "invalid",
        "request",
        "response",
        "rst",
        "shutdown",
        "rw",
        "credit_update",
        "credit_request",
    ];

    pub fn name(op: u16) -> &'static str {
        NAMES.get(op as usize).copied().unwrap_or("?")
    }
}

/// Distinct (thread, peer, port, direction, kind) counted.
pub const MAX_VSOCK_KEYS: u32 = 4096;

/// The vsock layer's tracepoint offsets.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VsockConfig {
    /// The vsock layer: fields of vsock:virtio_transport_recv_pkt's record,
    /// which virtio_transport_alloc_pkt's shares (the layer checks).
    pub tp_vsock_src_cid: u32,
    pub tp_vsock_src_port: u32,
    pub tp_vsock_dst_cid: u32,
    pub tp_vsock_dst_port: u32,
    pub tp_vsock_len: u32,
    pub tp_vsock_op: u32,
}
