//! Packet journeys from per-packet events: the hops each skb went through.

use std::collections::HashMap;

use serde_json::{Value, json};

use crate::recording::Recording;

/// Past this, a packet "received" is taken as delivered, not forwarded
/// (as in vtrace-ebpf/src/net.rs).
const REUSE_AFTER_RECEIVE_NS: u64 = 20_000;

/// Summary of per-packet journeys: how many packets were followed across two
/// or more hops, and the longest journey seen (hops with device and time).
pub fn journeys(rec: &Recording) -> Value {
    if rec.net_events.is_empty() {
        return json!({"events": 0, "packets": 0, "multi_hop": 0, "longest": []});
    }
    // An skb address is reused once the packet is freed: a new journey starts
    // by the rule the kernel side uses (vtrace-ebpf/src/net.rs, is_reuse).
    let mut by_skb: HashMap<u64, Vec<Vec<usize>>> = HashMap::new();
    for (i, e) in rec.net_events.iter().enumerate() {
        let runs = by_skb.entry(e.skb).or_default();
        let continues = runs.last().is_some_and(|run| {
            let prev = &rec.net_events[*run.last().unwrap()];
            let gap = e.ts_ns.saturating_sub(prev.ts_ns);
            gap < 1_000_000_000 && !(prev.hop == "receive" && gap > REUSE_AFTER_RECEIVE_NS)
        });
        if continues {
            runs.last_mut().unwrap().push(i);
        } else {
            runs.push(vec![i]);
        }
    }
    let all: Vec<&Vec<usize>> = by_skb.values().flatten().collect();
    let multi = all.iter().filter(|r| r.len() >= 2).count();
    let longest = all.iter().max_by_key(|r| r.len()).map(|r| {
        let t0 = rec.net_events[r[0]].ts_ns;
        r.iter()
            .map(|&i| {
                let e = &rec.net_events[i];
                let name = rec
                    .net_devices
                    .iter()
                    .find(|d| d.netns == e.netns && d.ifindex == e.ifindex)
                    .map(|d| d.name.clone())
                    .unwrap_or_else(|| format!("if{}", e.ifindex));
                json!({"device": name, "hop": e.hop, "len": e.len, "t_ns": e.ts_ns - t0, "skb": format!("{:#x}", e.skb)})
            })
            .collect::<Vec<_>>()
    });
    json!({"events": rec.net_events.len(), "packets": all.len(), "multi_hop": multi, "longest": longest.unwrap_or_default()})
}
