//! Each skb's journey: the latency between its consecutive hops, and its
//! per-packet events (`--events`).

use super::*;

/// Latency between consecutive hops of the same skb (by address).
#[map]
pub static NET_HOP_LATENCY: PerCpuHashMap<HopEdge, HopLatency> = PerCpuHashMap::with_max_entries(4096, 0);

/// Last hop of each skb in flight, direct-mapped by address: a lookup and an
/// in-place write per hop, no locks and no allocation. (An LRU hash did this
/// before; its LRU list locks cost more than the rest of the program.) An skb
/// whose slot holds another one still in flight takes it; that is counted.
#[map]
pub static SKB_MARKS: Array<SkbMark> = Array::with_max_entries(SKB_MARK_SLOTS, 0);

/// Per-packet events (`--events`).
#[map]
pub static NET_EVENTS: RingBuf = RingBuf::with_byte_size(64 * 1024 * 1024, 0);

#[inline(always)]
fn mark_of(skb: u64) -> Option<&'static mut SkbMark> {
    SKB_MARKS.get_ptr_mut(skb_mark_slot(skb)).map(|m| unsafe { &mut *m })
}

/// The skb's journey ended (freed): its slot is free again.
#[inline(always)]
pub(super) fn forget(skb: u64) {
    if conf!(net.net_hops_on) == 0 {
        return;
    }
    if let Some(m) = mark_of(skb)
        && m.skb == skb
    {
        m.skb = 0;
    }
}

/// Records the step from the skb's previous hop to this one, and this hop
/// as its last. `redirected` reads tc's redirect mark: only where the rule
/// asks for it (a hop after a `receive` on another device), so every other
/// hop costs no read.
#[inline(always)]
pub(super) fn journey(skb: u64, dev: u64, hop_id: u32, len: u32, redirected: impl FnOnce() -> bool) {
    let Some(mark) = mark_of(skb) else { return };
    let now = account::now();
    let mut redirected_here = false;
    if mark.skb == skb {
        let redirected = mark.hop == hop::RECEIVE && mark.dev != dev && redirected();
        redirected_here = redirected;
        let ns = now.saturating_sub(mark.ts);
        if !hop::is_new_packet(mark.hop, mark.dev, hop_id, dev, ns, redirected) {
            let edge = HopEdge {
                from_dev: mark.dev,
                to_dev: dev,
                from_hop: mark.hop,
                to_hop: hop_id,
            };
            if let Some(l) = account::entry(&NET_HOP_LATENCY, &edge) {
                l.count += 1;
                l.sum_ns += ns;
                l.log2[log2_bucket(ns, LATENCY_BUCKETS)] += 1;
            }
        }
    } else {
        // Another skb's mark: this one's redirect says nothing of it.
        if mark.skb != 0 && !hop::is_new_packet(mark.hop, mark.dev, hop_id, dev, now.saturating_sub(mark.ts), false) {
            lost(net_loss::MARKS_DISPLACED);
        }
        mark.skb = skb;
    }
    mark.ts = now;
    mark.dev = dev;
    mark.hop = hop_id;
    if conf!(net.net_events_on) != 0 {
        match NET_EVENTS.reserve::<NetEvent>(0) {
            Some(mut e) => {
                e.write(NetEvent {
                    ts: now,
                    skb,
                    dev,
                    len,
                    hop: hop_id as u16,
                    redirected: redirected_here as u16,
                });
                e.submit(0);
            }
            None => lost(net_loss::EVENT_DROPS),
        }
    }
}
