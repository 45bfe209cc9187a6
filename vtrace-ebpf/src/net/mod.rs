//! Network devices: packets, bytes, GSO segments and size histograms per
//! (namespace, device, hop) in per-CPU hash maps; drops per reason; and
//! NET_RX softirq time per device (see `account::net_softirq_switch`).
//!
//! Every hook reads the skb and its device with BTF offsets (config.rs). The
//! classic-tracepoint fallbacks take the skb address from the record.
//!
//! The skb's journey from hop to hop (latency, `--events`) is `journey.rs`;
//! drops and frees are `drops.rs`.

mod drops;
mod journey;

use journey::journey;

use crate::hist::log2_bucket;
use crate::runs::{count_run, hook_programs};
use aya_ebpf::{
    EbpfContext,
    macros::{map, tracepoint},
    maps::{Array, PerCpuArray, PerCpuHashMap, RingBuf},
    programs::{BtfTracePointContext, TracePointContext},
};
use vtrace_common::{
    DEV_SLOTS, DROP_KEYS, DevKey, DevSlot, DevStats, DropKey, HopEdge, HopLatency, LATENCY_BUCKETS, LOG2_BUCKETS,
    NetEvent, SKB_MARK_SLOTS, SkbMark, dev_key, dev_size_bucket, dev_slot, hop, net_loss, skb_mark_slot,
};

use crate::kmem::{BtfLoad, KernelMem, ProbeRead, tp_field};
use crate::{account, config::conf};

/// Counters per (device, hop), direct-mapped by ifindex and hop: the common
/// case costs no hash lookup and no read of the device's namespace.
#[map]
pub static DEV_SLOT_STATS: PerCpuArray<DevSlot> = PerCpuArray::with_max_entries(DEV_SLOTS, 0);

/// Counters of the (device, hop) pairs whose slot another one holds.
#[map]
pub static NET_DEVICES: PerCpuHashMap<DevKey, DevStats> = PerCpuHashMap::with_max_entries(4096, 0);

/// NAPI polls per device: [polls, packets processed, polls that used their whole budget].
#[map]
pub static NAPI_POLLS: PerCpuHashMap<u64, [u64; 3]> = PerCpuHashMap::with_max_entries(1024, 0);

/// What was lost, indexed by [`net_loss`].
#[map]
pub static NET_LOSSES: PerCpuArray<u64> = PerCpuArray::with_max_entries(net_loss::COUNT, 0);

#[inline(always)]
fn lost(what: u32) {
    if let Some(c) = NET_LOSSES.get_ptr_mut(what) {
        unsafe { *c += 1 };
    }
}

/// The counters of `dev` at `hop_id` and the device's (netns, ifindex):
/// its slot in DEV_SLOT_STATS when the slot is this device's or free; the
/// hash map otherwise. A slot is this device's when the address, ifindex
/// and namespace pointer all match what was read when the slot was taken:
/// a device moved to another namespace, or a freed one whose address went
/// to a device of another index, goes to the hash map, which reads its
/// namespace afresh. (A device freed and replaced at the same address with
/// the same index in a namespace allocated at its predecessor's address
/// would keep the old namespace: not seen in practice.)
#[inline(always)]
fn device_stats<M: KernelMem>(dev: u64, hop_id: u32) -> Option<(DevKey, u32, &'static mut DevStats)> {
    let ifindex: u32 = M::read(dev, conf!(net_device.dev_ifindex))?;
    let net: u64 = M::read(dev, conf!(net_device.dev_nd_net))?;
    let index = dev_slot(ifindex, hop_id);
    if let Some(slot) = DEV_SLOT_STATS.get_ptr_mut(index) {
        let slot = unsafe { &mut *slot };
        if slot.dev == dev && slot.net == net && slot.key.hop == hop_id && slot.key.ifindex == ifindex {
            return Some((slot.key, index, &mut slot.stats));
        }
        if slot.dev == 0 {
            slot.key = DevKey {
                netns: netns_inum::<M>(net),
                ifindex,
                hop: hop_id,
                _pad: 0,
            };
            slot.net = net;
            slot.dev = dev;
            return Some((slot.key, index, &mut slot.stats));
        }
    }
    let key = DevKey {
        netns: netns_inum::<M>(net),
        ifindex,
        hop: hop_id,
        _pad: 0,
    };
    account::entry(&NET_DEVICES, &key).map(|s| (key, DEV_SLOTS, s))
}

/// (netns inode, ifindex) of a net_device.
#[inline(always)]
fn device_id<M: KernelMem>(dev: u64) -> Option<(u32, u32)> {
    if dev == 0 {
        return None;
    }
    let ifindex: u32 = M::read(dev, conf!(net_device.dev_ifindex))?;
    let net: u64 = M::read(dev, conf!(net_device.dev_nd_net))?;
    Some((netns_inum::<M>(net), ifindex))
}

/// The namespace inode of a `struct net` (0 for none).
#[inline(always)]
fn netns_inum<M: KernelMem>(net: u64) -> u32 {
    if net == 0 {
        0
    } else {
        M::read(net, conf!(net_device.net_ns_inum)).unwrap_or(0)
    }
}

/// `mtu + hard_header_len` of a net_device; 0 when BTF lacks either member.
#[inline(always)]
fn mtu_edge<M: KernelMem>(dev: u64) -> u64 {
    let (mtu_at, header_at) = (conf!(net.dev_mtu), conf!(net.dev_hard_header_len));
    if mtu_at == 0 || header_at == 0 {
        return 0;
    }
    let mtu: u32 = M::read(dev, mtu_at).unwrap_or(0);
    let header: u16 = M::read(dev, header_at).unwrap_or(0);
    if mtu == 0 { 0 } else { mtu as u64 + header as u64 }
}

/// Counts `skb` at `hop` of `dev` (the skb's own device when 0). At
/// net_dev_xmit the driver may already have freed or changed the skb, so
/// `xmit_len` (the tracepoint's own length) is used and the skb is not read.
/// `skb_id` gives the skb's address as a plain number (for tp_btf, `skb` is
/// a typed pointer, on which the verifier allows no arithmetic but
/// addition); it costs a helper call there, so it is asked for only when
/// hops are correlated.
#[inline(always)]
fn count<M: KernelMem>(skb: u64, skb_id: impl FnOnce() -> u64, dev: u64, hop_id: u32, rc: i32, xmit_len: Option<u32>) {
    if skb == 0 {
        return;
    }
    let dev = if dev != 0 {
        dev
    } else {
        M::read::<u64>(skb, conf!(net.skb_dev)).unwrap_or(0)
    };
    if dev == 0 {
        return;
    }
    let Some((key, slot, s)) = device_stats::<M>(dev, hop_id) else {
        return;
    };
    let (netns, ifindex) = (key.netns, key.ifindex);
    let (len, head): (u32, u64) = match xmit_len {
        Some(l) => (l, 0),
        None => (
            M::read(skb, conf!(net_device.skb_len)).unwrap_or(0),
            M::read(skb, conf!(net.skb_head)).unwrap_or(0),
        ),
    };
    let mut wire = len as u64;
    if !hop::is_tx(hop_id) && head != 0 {
        // Received skbs had their link-layer header pulled: add it back, as
        // the device's own byte counters include it.
        let data: u64 = M::read(skb, conf!(net.skb_data)).unwrap_or(0);
        let mac: u16 = M::read(skb, conf!(net.skb_mac_header)).unwrap_or(u16::MAX);
        if mac != u16::MAX && head != 0 && data >= head + mac as u64 {
            wire += data - (head + mac as u64);
        }
    }

    if hop_id == hop::RECEIVE {
        account::net_softirq_switch(None, dev_key(netns, ifindex), slot);
    }
    if conf!(net.net_hops_on) != 0 {
        // At net_dev_start_xmit and net_dev_xmit the skb is the driver's
        // (or freed): only the hops a redirect can lead to read the mark.
        let redirect_hop = matches!(hop_id, hop::QUEUE | hop::RX | hop::RECEIVE);
        journey(skb_id(), dev_key(netns, ifindex), hop_id, wire as u32, || {
            redirect_hop && redirected::<M>(skb)
        });
    }
    if rc != 0 {
        s.errors += 1;
        return;
    }
    s.packets += 1;
    s.bytes += wire;
    if s.mtu_edge == 0 {
        // A full frame: the device's MTU plus its link-layer header, read at
        // the entry's first packet only (one bucket layout per entry).
        s.mtu_edge = mtu_edge::<M>(dev);
    }
    // Only an aggregate can be larger than a full frame, so a packet that
    // fits one is one segment and its skb_shared_info (a helper call:
    // reached through `head`, a plain number to the verifier) is not read.
    // A GSO skb that fits in one frame is counted as a plain packet.
    let (gso_size, gso_segs) = if head != 0 && (s.mtu_edge == 0 || wire > s.mtu_edge) {
        let end: u32 = M::read(skb, conf!(net.skb_end)).unwrap_or(0);
        gso(head + end as u64)
    } else {
        (0, 1)
    };
    if gso_size != 0 {
        s.gso_packets += 1;
    }
    s.gso_segs += if gso_segs == 0 { 1 } else { gso_segs as u64 };
    let b = dev_size_bucket(wire, s.mtu_edge);
    if b < s.size_hist.len() {
        s.size_hist[b] += 1;
    }
    if wire > s.max_len {
        s.max_len = wire;
    }
    let l = log2_bucket(wire, LOG2_BUCKETS);
    if l < LOG2_BUCKETS {
        s.log2_hist[l] += 1;
    }
}

/// Whether the skb carries tc's redirect mark (`sk_buff.redirected`, a
/// bitfield: its byte read, its bit tested); false where BTF lacks it.
#[inline(always)]
fn redirected<M: KernelMem>(skb: u64) -> bool {
    let bit = conf!(net.skb_redirected_bit);
    if bit == 0 {
        return false;
    }
    let byte: u8 = M::read(skb, bit / 8).unwrap_or(0);
    (byte >> (bit % 8)) & 1 != 0
}

/// `gso_size` and `gso_segs` of an skb_shared_info: one helper call where
/// they are adjacent (they are in every kernel so far), two otherwise.
#[inline(always)]
fn gso(shinfo: u64) -> (u16, u16) {
    let (size_at, segs_at) = (conf!(net.shinfo_gso_size), conf!(net.shinfo_gso_segs));
    if segs_at == size_at + 2 {
        let both: [u16; 2] = ProbeRead::read(shinfo, size_at).unwrap_or([0, 1]);
        return (both[0], if both[0] != 0 { both[1] } else { 1 });
    }
    let size: u16 = ProbeRead::read(shinfo, size_at).unwrap_or(0);
    let segs: u16 = if size != 0 {
        ProbeRead::read(shinfo, segs_at).unwrap_or(1)
    } else {
        1
    };
    (size, segs)
}

/// The skb argument's address as a plain number (a copy of the context
/// slot: the typed pointer itself cannot be hashed).
#[inline(always)]
fn arg_number(ctx: &BtfTracePointContext, n: usize) -> u64 {
    ProbeRead::read(ctx.as_ptr() as u64, (n * 8) as u32).unwrap_or(0)
}

hook_programs! {
    "net_dev_queue";
    btf btf_net_dev_queue(ctx) => {
        count::<BtfLoad>(ctx.arg(0), || arg_number(&ctx, 0), 0, hop::QUEUE, 0, None);
    }
    raw raw_net_dev_queue(ctx) => {
        count::<ProbeRead>(ctx.arg(0), || ctx.arg(0), 0, hop::QUEUE, 0, None);
    }
}

hook_programs! {
    "net_dev_start_xmit";
    btf btf_net_dev_start_xmit(ctx) => {
        count::<BtfLoad>(ctx.arg(0), || arg_number(&ctx, 0), ctx.arg(1), hop::START_XMIT, 0, None);
    }
    raw raw_net_dev_start_xmit(ctx) => {
        count::<ProbeRead>(ctx.arg(0), || ctx.arg(0), ctx.arg(1), hop::START_XMIT, 0, None);
    }
}

hook_programs! {
    "net_dev_xmit";
    btf btf_net_dev_xmit(ctx) => {
        let rc: u64 = ctx.arg(1);
        let len: u64 = ctx.arg(3);
        count::<BtfLoad>(
            ctx.arg(0),
            || arg_number(&ctx, 0),
            ctx.arg(2),
            hop::XMIT,
            rc as i32,
            Some(len as u32),
        );
    }
    raw raw_net_dev_xmit(ctx) => {
        let rc: u64 = ctx.arg(1);
        let len: u64 = ctx.arg(3);
        count::<ProbeRead>(
            ctx.arg(0),
            || ctx.arg(0),
            ctx.arg(2),
            hop::XMIT,
            rc as i32,
            Some(len as u32),
        );
    }
}

hook_programs! {
    "netif_rx";
    btf btf_netif_rx(ctx) => {
        count::<BtfLoad>(ctx.arg(0), || arg_number(&ctx, 0), 0, hop::RX, 0, None);
    }
    raw raw_netif_rx(ctx) => {
        count::<ProbeRead>(ctx.arg(0), || ctx.arg(0), 0, hop::RX, 0, None);
    }
}

hook_programs! {
    "netif_receive_skb";
    btf btf_netif_receive_skb(ctx) => {
        count::<BtfLoad>(ctx.arg(0), || arg_number(&ctx, 0), 0, hop::RECEIVE, 0, None);
    }
    raw raw_netif_receive_skb(ctx) => {
        count::<ProbeRead>(ctx.arg(0), || ctx.arg(0), 0, hop::RECEIVE, 0, None);
    }
}

// TP_PROTO(struct sk_buff *skb)

// TP_PROTO(const struct sk_buff *skb, const struct net_device *dev)

// TP_PROTO(struct sk_buff *skb, int rc, struct net_device *dev, unsigned int skb_len)

hook_programs! {
    "napi_gro_receive_entry";
    raw raw_napi_gro_receive_entry(ctx) => {
        count::<ProbeRead>(ctx.arg(0), || ctx.arg(0), 0, hop::GRO, 0, None);
    }
}

// TP_PROTO(struct napi_struct *napi, int work, int budget)
hook_programs! {
    "napi_poll";
    raw raw_napi_poll(ctx) => {
        let napi: u64 = ctx.arg(0);
        let work: u64 = ctx.arg(1);
        let budget: u64 = ctx.arg(2);
        let dev: u64 = if napi == 0 {
            0
        } else {
            ProbeRead::read(napi, conf!(net.napi_dev)).unwrap_or(0)
        };
        let Some((netns, ifindex)) = device_id::<ProbeRead>(dev) else {
            return 0;
        };
        let key = dev_key(netns, ifindex);
        let full = (work as i32 >= budget as i32) as u64;
        match NAPI_POLLS.get_ptr_mut(&key) {
            Some(v) => {
                let v = unsafe { &mut *v };
                v[0] += 1;
                v[1] += work as u32 as u64;
                v[2] += full;
            }
            None => {
                let _ = NAPI_POLLS.insert(&key, &[1, work as u32 as u64, full], 0);
            }
        }
    }
}

/// Classic tracepoints whose record starts with `void *skbaddr` at offset 8.
macro_rules! skb_tracepoint {
    ($name:ident, $event:literal, $hop:expr) => {
        #[tracepoint(category = "net", name = $event)]
        pub fn $name(ctx: TracePointContext) -> i32 {
            count_run!($event);
            let skb: u64 = unsafe { ctx.read_at(8) }.unwrap_or(0);
            if $hop == hop::XMIT {
                // Length and rc come from the record; the record names the
                // device only as a string, so its pointer is read from the skb,
                // best effort (the driver may have freed it).
                let rc: i32 = unsafe { ctx.read_at(20) }.unwrap_or(0);
                let len: u32 = unsafe { ctx.read_at(16) }.unwrap_or(0);
                count::<ProbeRead>(skb, || skb, 0, $hop, rc, Some(len));
            } else {
                count::<ProbeRead>(skb, || skb, 0, $hop, 0, None);
            }
            0
        }
    };
}

skb_tracepoint!(tp_net_dev_queue, "net_dev_queue", hop::QUEUE);
skb_tracepoint!(tp_net_dev_xmit, "net_dev_xmit", hop::XMIT);
skb_tracepoint!(tp_netif_rx, "netif_rx", hop::RX);
skb_tracepoint!(tp_netif_receive_skb, "netif_receive_skb", hop::RECEIVE);
