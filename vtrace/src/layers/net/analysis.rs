//! Packet journeys from per-packet events: the hops each skb went through.

use std::collections::HashMap;

use serde_json::{Value, json};
use vtrace_common::{dev_key, hop};

use super::{NetHopRow, NetSizeRow};
use crate::recording::{EventRow, Recording};

/// Hops kept per journey for the longest one's listing.
const HOPS_KEPT: usize = 64;
/// Events between sweeps for journeys that can no longer continue.
const SWEEP_EVERY: u64 = 1 << 16;
/// How far the file's order may stray from time order across CPUs (the
/// ring buffer orders by reservation, each event carries its own clock read).
const ORDER_SLACK_NS: u64 = 1_000_000;

#[derive(Clone, Debug)]
struct Hop {
    ts_ns: u64,
    netns: u32,
    ifindex: u32,
    hop: u32,
    len: u32,
    redirected: bool,
}

impl Hop {
    fn of(e: &EventRow<'_>) -> Hop {
        Hop {
            ts_ns: e.ts_ns,
            netns: e.netns,
            ifindex: e.ifindex,
            hop: hop::code(e.hop),
            len: e.len,
            redirected: e.redirected,
        }
    }

    fn dev(&self) -> u64 {
        dev_key(self.netns, self.ifindex)
    }
}

#[derive(Debug)]
struct Journey {
    last: Hop,
    hops_seen: usize,
    hops: Vec<Hop>,
    skb: u64,
}

impl Journey {
    fn new(skb: u64, first: Hop) -> Journey {
        Journey {
            last: first.clone(),
            hops_seen: 1,
            hops: vec![first],
            skb,
        }
    }

    fn push(&mut self, h: Hop) {
        self.hops_seen += 1;
        if self.hops.len() < HOPS_KEPT {
            self.hops.push(h.clone());
        }
        self.last = h;
    }

    /// The skb address seen again is this packet's next hop, by the rule the
    /// kernel side follows too.
    fn continues_with(&self, h: &Hop) -> bool {
        let gap = h.ts_ns.saturating_sub(self.last.ts_ns);
        !hop::is_new_packet(self.last.hop, self.last.dev(), h.hop, h.dev(), gap, h.redirected)
    }

    /// No event at or after `now` (less the ordering slack) can continue it
    /// (after a `receive`, only a tc redirect could).
    fn over_by(&self, now: u64) -> bool {
        now.saturating_sub(ORDER_SLACK_NS).saturating_sub(self.last.ts_ns)
            > if self.last.hop == hop::RECEIVE {
                hop::REDIRECT_WITHIN_NS
            } else {
                hop::REUSE_AFTER_NS
            }
    }
}

#[derive(Default)]
struct Tally {
    packets: u64,
    multi_hop: u64,
    longest: Option<Journey>,
}

impl Tally {
    fn close(&mut self, j: Journey) {
        self.packets += 1;
        self.multi_hop += (j.hops_seen >= 2) as u64;
        if self.longest.as_ref().is_none_or(|l| j.hops_seen > l.hops_seen) {
            self.longest = Some(j);
        }
    }
}

/// A hop's size histogram (`mtu` kind): (bucket upper bound, packets).
pub fn size_hist(rec: &Recording, h: &NetHopRow) -> Vec<(u64, u64)> {
    rec.rows::<NetSizeRow>()
        .iter()
        .filter(|s| s.netns == h.netns && s.ifindex == h.ifindex && s.hop == h.hop && s.kind == "mtu")
        .map(|s| (s.le, s.count))
        .collect()
}

/// A hop's packets within a full frame (its MTU plus link-layer header;
/// the histogram's buckets include that edge).
pub fn within_full_frame(rec: &Recording, h: &NetHopRow) -> u64 {
    size_hist(rec, h)
        .iter()
        .filter(|(le, _)| *le <= h.mtu_edge)
        .map(|(_, c)| c)
        .sum()
}

/// Summary of per-packet journeys: how many packets were followed across two
/// or more hops, and the longest journey seen (hops with device and time).
///
/// One pass over the events in file order; only packets still in flight are
/// held (an address's next event either continues its journey or starts a
/// new one, and journeys past the reuse rule are closed every few thousand
/// events), so memory does not grow with the number of events.
pub fn journeys(rec: &Recording) -> Result<Value, String> {
    let mut open: HashMap<u64, Journey> = HashMap::new();
    let mut tally = Tally::default();
    let mut events = 0u64;
    rec.net_events.for_each(|e| {
        events += 1;
        let h = Hop::of(&e);
        match open.get_mut(&e.skb) {
            Some(j) if j.continues_with(&h) => j.push(h),
            Some(j) => tally.close(std::mem::replace(j, Journey::new(e.skb, h))),
            None => {
                open.insert(e.skb, Journey::new(e.skb, h));
            }
        }
        if events.is_multiple_of(SWEEP_EVERY) {
            let over: Vec<u64> = open.values().filter(|j| j.over_by(e.ts_ns)).map(|j| j.skb).collect();
            for skb in over {
                if let Some(j) = open.remove(&skb) {
                    tally.close(j);
                }
            }
        }
    })?;
    for (_, j) in open.drain() {
        tally.close(j);
    }
    let longest: Vec<Value> = match &tally.longest {
        None => Vec::new(),
        Some(j) => {
            let t0 = j.hops.first().map(|h| h.ts_ns).unwrap_or(0);
            j.hops
                .iter()
                .map(|h| {
                    let name = rec
                        .rows::<crate::layers::net::NetDeviceRow>()
                        .iter()
                        .find(|d| d.netns == h.netns && d.ifindex == h.ifindex)
                        .map(|d| d.name.clone())
                        .unwrap_or_else(|| format!("if{}", h.ifindex));
                    json!({"device": name, "hop": hop::name(h.hop), "len": h.len, "t_ns": h.ts_ns - t0,
                           "skb": format!("{:#x}", j.skb)})
                })
                .collect()
        }
    };
    Ok(json!({
        "events": events,
        "packets": tally.packets,
        "multi_hop": tally.multi_hop,
        "longest_hops": tally.longest.as_ref().map(|j| j.hops_seen).unwrap_or(0),
        "longest": longest,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::{NetEventWriter, NetEvents};
    use vtrace_common::NetEvent;

    const LO: u64 = 1;
    const ETH: u64 = 2;

    fn ev(ts: u64, skb: u64, dev: u64, hop: u32) -> NetEvent {
        NetEvent {
            ts,
            skb,
            dev,
            len: 100,
            hop: hop as u16,
            redirected: 0,
        }
    }

    /// The event as an skb that tc redirected.
    fn redirected(e: NetEvent) -> NetEvent {
        NetEvent { redirected: 1, ..e }
    }

    fn journeys_of(events: &[NetEvent]) -> Value {
        let dir = std::env::temp_dir().join(format!("vtrace-journeys-{}-{}", std::process::id(), events.len()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut w = NetEventWriter::create(&dir, 0).unwrap();
        for e in events {
            w.push(*e).unwrap();
        }
        assert_eq!(w.finish().unwrap().rows, events.len() as u64);
        let rec = Recording {
            net_events: NetEvents::open(&dir).unwrap(),
            ..Recording::default()
        };
        let j = journeys(&rec).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        j
    }

    /// Loopback packets reusing 1000 addresses, read back across more than
    /// one slice: every 5-hop packet is one journey.
    #[test]
    fn journeys_span_slices_and_split_on_address_reuse() {
        let hops = [hop::QUEUE, hop::START_XMIT, hop::RX, hop::XMIT, hop::RECEIVE];
        let packets = crate::recording::CHUNK_ROWS / 5 + 1000;
        let events: Vec<NetEvent> = (0..packets * 5)
            .map(|i| ev(i as u64 * 1000, 0x1000 + ((i / 5) % 1000) as u64 * 256, LO, hops[i % 5]))
            .collect();
        let j = journeys_of(&events);
        assert_eq!(j["events"], (packets * 5) as u64);
        assert_eq!(j["packets"], packets as u64, "{j}");
        assert_eq!(j["multi_hop"], packets as u64);
        assert_eq!(j["longest_hops"], 5);
    }

    #[test]
    fn the_same_address_soon_after_receive_is_forwarded_unless_requeued_on_that_device() {
        let j = journeys_of(&[
            // Forwarded: received on eth, queued on lo 5 µs later: one packet.
            ev(0, 0xa00, ETH, hop::RECEIVE),
            ev(5_000, 0xa00, LO, hop::QUEUE),
            // Delivered on lo, the address reused 5 µs later on lo: two packets.
            ev(1_000_000, 0xb00, LO, hop::RECEIVE),
            ev(1_005_000, 0xb00, LO, hop::QUEUE),
            // Delivered on eth, reused 30 µs later elsewhere: two packets.
            ev(2_000_000, 0xc00, ETH, hop::RECEIVE),
            ev(2_030_000, 0xc00, LO, hop::QUEUE),
        ]);
        assert_eq!(j["packets"], 5, "{j}");
        assert_eq!(j["multi_hop"], 1, "{j}");
        assert_eq!(j["longest"][1]["t_ns"], 5_000, "{j}");
    }

    /// A tc redirect (Kata's mirred between a tap's ingress and eth0's
    /// egress) is followed however slow tc was, up to REDIRECT_WITHIN_NS.
    #[test]
    fn a_redirected_skb_continues_its_journey_on_the_other_device() {
        let j = journeys_of(&[
            // Redirected 3 ms after it was received (its vCPU preempted
            // mid-softirq): one packet.
            ev(0, 0xa00, ETH, hop::RECEIVE),
            redirected(ev(3_000_000, 0xa00, LO, hop::QUEUE)),
            ev(3_010_000, 0xa00, LO, hop::START_XMIT),
            // The same gap without the mark: delivered, the address reused.
            ev(5_000_000, 0xb00, ETH, hop::RECEIVE),
            ev(5_300_000, 0xb00, LO, hop::QUEUE),
            // Marked, but 200 ms on: past what tc takes even with its
            // vCPU preempted, a new packet.
            ev(10_000_000, 0xc00, ETH, hop::RECEIVE),
            redirected(ev(210_000_000, 0xc00, LO, hop::QUEUE)),
        ]);
        assert_eq!(j["packets"], 5, "{j}");
        assert_eq!(j["multi_hop"], 1, "{j}");
        assert_eq!(j["longest_hops"], 3, "{j}");
    }
}
