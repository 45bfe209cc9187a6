//! The vsock layer's probes (vtrace-ebpf/src/vsock.rs): classic tracepoints
//! of the virtio vsock transport (vmw_vsock_virtio_transport_common, loaded
//! with vhost_vsock on a host and virtio-vsock in a guest).

use crate::probes::catalog::{ProbeSpec, classic_tracepoint};

pub const VSOCK: &[ProbeSpec] = &[
    classic_tracepoint!(
        "virtio_transport_recv_pkt",
        "vsock",
        "a vsock packet from the peer (on a host: a vhost-vsock worker taking the guest's)",
        "vsock"
    ),
    classic_tracepoint!(
        "virtio_transport_alloc_pkt",
        "vsock",
        "a vsock packet made to send (connection requests and replies, data, credit)",
        "vsock"
    ),
];
