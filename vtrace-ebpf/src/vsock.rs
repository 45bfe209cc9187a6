//! vsock packets through the virtio transport (vsock:virtio_transport_*):
//! one per-CPU hash update a packet, keyed by thread, peer, port, direction
//! and kind, with the first and last time each was seen (a guest's first
//! accepted connection is when its agent became reachable).

use aya_ebpf::{
    macros::map,
    maps::{PerCpuArray, PerCpuHashMap},
    programs::TracePointContext,
};
use vtrace_common::{MAX_VSOCK_KEYS, VsockKey, VsockStats, vsock_dir};

use crate::{account, config::conf, kmem::tp_field, runs::hook_programs};

#[map]
pub static VSOCK_PACKETS: PerCpuHashMap<VsockKey, VsockStats> = PerCpuHashMap::with_max_entries(MAX_VSOCK_KEYS, 0);

/// Packets not counted: VSOCK_PACKETS was full.
#[map]
pub static VSOCK_DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
fn count(ctx: &TracePointContext, dir: u16) {
    let src_cid: u32 = tp_field(ctx, conf!(vsock.tp_vsock_src_cid));
    let src_port: u32 = tp_field(ctx, conf!(vsock.tp_vsock_src_port));
    let dst_cid: u32 = tp_field(ctx, conf!(vsock.tp_vsock_dst_cid));
    let dst_port: u32 = tp_field(ctx, conf!(vsock.tp_vsock_dst_port));
    let len: u32 = tp_field(ctx, conf!(vsock.tp_vsock_len));
    let op: u16 = tp_field(ctx, conf!(vsock.tp_vsock_op));
    let key = VsockKey {
        tid: account::current_tid(),
        peer_cid: if dir == vsock_dir::RECEIVED { src_cid } else { dst_cid },
        port: src_port.min(dst_port),
        dir,
        op,
    };
    let now = account::now();
    match account::entry(&VSOCK_PACKETS, &key) {
        Some(s) => {
            s.packets += 1;
            s.bytes += len as u64;
            if s.first_ns == 0 {
                s.first_ns = now;
            }
            s.last_ns = now;
        }
        None => {
            if let Some(d) = VSOCK_DROPS.get_ptr_mut(0) {
                unsafe { *d += 1 };
            }
        }
    }
}

hook_programs! {
    "virtio_transport_recv_pkt", "vsock";
    tp tp_virtio_transport_recv_pkt(ctx) => { count(&ctx, vsock_dir::RECEIVED); }
}

hook_programs! {
    "virtio_transport_alloc_pkt", "vsock";
    tp tp_virtio_transport_alloc_pkt(ctx) => { count(&ctx, vsock_dir::SENT); }
}
