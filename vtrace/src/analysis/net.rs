//! Packet journeys from per-packet events: the hops each skb went through.

use serde_json::{Value, json};

use crate::recording::Recording;

/// Past this, a packet "received" is taken as delivered, not forwarded
/// (as in vtrace-ebpf/src/net.rs).
const REUSE_AFTER_RECEIVE_NS: u64 = 20_000;

/// Summary of per-packet journeys: how many packets were followed across two
/// or more hops, and the longest journey seen (hops with device and time).
pub fn journeys(rec: &Recording) -> Value {
    let events = &rec.net_events;
    if events.is_empty() {
        return json!({"events": 0, "packets": 0, "multi_hop": 0, "longest": []});
    }
    // One index per event sorted by (skb, time): each skb's events are then
    // contiguous, and journeys are runs in one pass (no per-skb lists: 10
    // million events cost 40 MB here).
    let mut order: Vec<u32> = (0..events.len() as u32).collect();
    order.sort_unstable_by_key(|&i| (events[i as usize].skb, events[i as usize].ts_ns, i));
    let (mut packets, mut multi) = (0usize, 0usize);
    // (start in `order`, length) of the longest journey.
    let mut longest = (0usize, 0usize);
    let mut run_start = 0usize;
    for k in 0..=order.len() {
        // An skb address is reused once the packet is freed: a new journey
        // starts by the rule the kernel side uses (vtrace-ebpf/src/net.rs, is_reuse).
        let continues = k > run_start && k < order.len() && {
            let (prev, e) = (&events[order[k - 1] as usize], &events[order[k] as usize]);
            let gap = e.ts_ns.saturating_sub(prev.ts_ns);
            e.skb == prev.skb && gap < 1_000_000_000 && !(prev.hop == "receive" && gap > REUSE_AFTER_RECEIVE_NS)
        };
        if k == 0 || continues {
            continue;
        }
        let len = k - run_start;
        packets += 1;
        multi += (len >= 2) as usize;
        if len > longest.1 {
            longest = (run_start, len);
        }
        run_start = k;
    }
    let run = &order[longest.0..longest.0 + longest.1];
    let t0 = events[run[0] as usize].ts_ns;
    let hops: Vec<Value> = run
        .iter()
        .map(|&i| {
            let e = &events[i as usize];
            let name = rec
                .net_devices
                .iter()
                .find(|d| d.netns == e.netns && d.ifindex == e.ifindex)
                .map(|d| d.name.clone())
                .unwrap_or_else(|| format!("if{}", e.ifindex));
            json!({"device": name, "hop": e.hop, "len": e.len, "t_ns": e.ts_ns - t0, "skb": format!("{:#x}", e.skb)})
        })
        .collect();
    json!({"events": events.len(), "packets": packets, "multi_hop": multi, "longest": hops})
}
