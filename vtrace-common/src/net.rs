//! Network devices and hops: sizes, per-device slots, hop latency, per-packet events, drops.

use crate::*;

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
    /// Within this after a `receive`, an skb a tc action redirected
    /// (`sk_buff.redirected`: mirred, bpf_redirect) to another device is the
    /// same packet: tc acts in the softirq that received it, which takes
    /// microseconds even under nested emulation, yet more than
    /// [`REUSE_AFTER_RECEIVE_NS`] there; and inside a guest whose vCPU its
    /// host preempts mid-softirq, as long as the host keeps it off a CPU
    /// (a Kata guest's one frame in 62 took over 1 ms on a busy host). A
    /// new skb starts without the mark, so only a slip this long is left
    /// out (the report keeps a received packet's journey open this long).
    pub const REDIRECT_WITHIN_NS: u64 = 100_000_000;

    /// Whether an skb address seen at `hop` of `dev`, `gap_ns` after it was
    /// last seen at `prev_hop` of `prev_dev`, is a new packet rather than the
    /// same one's next hop. The one rule the kernel side (hop latency) and
    /// the report (journeys, traces) follow. A packet delivered on a device
    /// is not queued again on that same device (loopback and namespace
    /// replies reuse addresses within microseconds); hairpin forwarding out
    /// of the interface it came in on, the exception, shows as two packets.
    /// `redirected`: the skb carries tc's redirect mark at this hop (a
    /// delivered skb loses it after ingress; a new one starts without it).
    pub const fn is_new_packet(
        prev_hop: u32,
        prev_dev: u64,
        hop: u32,
        dev: u64,
        gap_ns: u64,
        redirected: bool,
    ) -> bool {
        if gap_ns >= REUSE_AFTER_NS {
            return true;
        }
        if prev_hop != RECEIVE {
            return false;
        }
        if redirected && dev != prev_dev && gap_ns < REDIRECT_WITHIN_NS {
            return false;
        }
        gap_ns > REUSE_AFTER_RECEIVE_NS || (dev == prev_dev && hop == QUEUE)
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
    /// Drops whose (reason, protocol, device, location) found NET_DROPS full.
    pub const DROP_KEYS_FULL: u32 = 2;
    pub const COUNT: u32 = 3;
}

/// A per-packet event (`vtrace record --events`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetEvent {
    pub ts: u64,
    pub skb: u64,
    pub dev: u64,
    pub len: u32,
    pub hop: u16,
    /// 1: the skb carried tc's redirect mark, read where the rule asks (a
    /// queue, rx or receive hop right after a receive on another device).
    pub redirected: u16,
}

/// What an skb freed as dropped (kfree_skb) was and where it went: the key
/// of NET_DROPS. `protocol` is skb->protocol in host order: 0 for an skb
/// that carries no network frame (a vsock packet, a unix-socket message),
/// which is freed, not lost. `location` is the freeing code's address,
/// named from kallsyms in userspace.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct DropKey {
    pub location: u64,
    pub netns: u32,
    pub ifindex: u32,
    pub reason: u32,
    pub protocol: u16,
    pub _pad: u16,
}

/// Distinct (reason, protocol, device, location) drop keys kept.
pub const DROP_KEYS: u32 = 1024;

/// The net layer's offsets and switches (`tun_fds_on` also turns on the CPU layer's syscall hooks for tun fds).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetConfig {
    pub skb_dev: u32,
    pub skb_head: u32,
    pub skb_data: u32,
    pub skb_end: u32,
    pub skb_mac_header: u32,
    pub skb_protocol: u32,
    /// Bit offset of `sk_buff.redirected` (set by a tc redirect); 0: unknown.
    pub skb_redirected_bit: u32,
    /// skb/kfree_skb record: offsets of `location`, `protocol`, `reason`.
    pub tp_kfree_skb_location: u32,
    pub tp_kfree_skb_protocol: u32,
    pub tp_kfree_skb_reason: u32,
    /// struct skb_shared_info: `gso_size`, `gso_segs`.
    pub shinfo_gso_size: u32,
    pub shinfo_gso_segs: u32,
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
    /// struct net_device: `mtu` and `hard_header_len` (the size histograms' MTU edge).
    pub dev_mtu: u32,
    pub dev_hard_header_len: u32,
}
