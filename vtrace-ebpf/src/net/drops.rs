//! skbs freed: counted as dropped per reason, protocol, device and
//! freeing code; every free ends the skb's journey.

use super::{journey::forget, *};

/// skbs freed as dropped, per (reason, protocol, device, freeing code).
#[map]
pub static NET_DROPS: PerCpuHashMap<DropKey, u64> = PerCpuHashMap::with_max_entries(DROP_KEYS, 0);

/// Counts a dropped skb by what it carried (`protocol`, big-endian as in
/// the skb), its device and the code that freed it.
#[inline(always)]
fn dropped(skb: u64, location: u64, reason: u32, protocol: u16) {
    let dev: u64 = if skb == 0 {
        0
    } else {
        ProbeRead::read(skb, conf!(net.skb_dev)).unwrap_or(0)
    };
    let (netns, ifindex) = device_id::<ProbeRead>(dev).unwrap_or((0, 0));
    let key = DropKey {
        location,
        netns,
        ifindex,
        reason,
        protocol: u16::from_be(protocol),
        _pad: 0,
    };
    match account::entry(&NET_DROPS, &key) {
        Some(c) => *c += 1,
        None => lost(net_loss::DROP_KEYS_FULL),
    }
}

// TP_PROTO(struct sk_buff *skb, void *location, enum skb_drop_reason reason, struct sock *rx_sk)
hook_programs! {
    "kfree_skb", "skb";
    raw raw_kfree_skb(ctx) => {
        let skb: u64 = ctx.arg(0);
        let location: u64 = ctx.arg(1);
        let reason: u64 = ctx.arg(2);
        let protocol: u16 = if skb == 0 { 0 } else { ProbeRead::read(skb, conf!(net.skb_protocol)).unwrap_or(0) };
        dropped(skb, location, reason as u32, protocol);
        forget(skb);
    }
    tp tp_kfree_skb(ctx) => {
        let skb: u64 = tp_field(&ctx, 8);
        let location: u64 = tp_field(&ctx, conf!(net.tp_kfree_skb_location));
        let reason: u32 = tp_field(&ctx, conf!(net.tp_kfree_skb_reason));
        // The record's protocol is already in host order.
        let protocol: u16 = tp_field(&ctx, conf!(net.tp_kfree_skb_protocol));
        dropped(skb, location, reason, protocol.to_be());
        forget(skb);
    }
}

// TP_PROTO(struct sk_buff *skb, void *location): the skb's journey ends; its
// address may be reused.
hook_programs! {
    "consume_skb", "skb";
    raw raw_consume_skb(ctx) => {
        let skb: u64 = ctx.arg(0);
        forget(skb);
    }
    tp tp_consume_skb(ctx) => {
        let skb: u64 = unsafe { ctx.read_at(8) }.unwrap_or(0);
        forget(skb);
    }
}
