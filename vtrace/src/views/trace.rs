//! `report --format trace`: the Chrome trace event format (JSON), which
//! ui.perfetto.dev and chrome://tracing open. One track ("process") per
//! platform role, named `platform/role`, whose counters are the CPU ns of
//! each state in each interval (they sum to the recording's totals); its
//! threads named by their comm; with `--events`, one span per packet per
//! hop-to-hop step on a "packets" track; KVM exits per vCPU thread as
//! totals at the end (exits are aggregated in the kernel, not timestamped).
//! Each guest recorded with the host (`record --guest`) is a track of its
//! own right under its VM's vCPU track, on the host's timeline: its CPU by
//! state and its busiest threads; each round trip joined across the
//! boundary is a span whose host and guest parts nest inside it.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use vtrace_common::{dev_key, hop};

use crate::{
    layers::{
        cpu::{IntervalRow, ThreadIndex, ThreadRow},
        kvm::KvmLatencyRow,
    },
    recording::Recording,
};

/// Packet spans beyond this many are left out (the trace says how many):
/// a viewer loads a few hundred thousand events comfortably.
const MAX_PACKET_SPANS: usize = 200_000;
/// Track ids that no real process has (pids stop at 2^22).
const ROLE_TRACK_BASE: u64 = 1 << 24;
const PACKETS_TRACK: u64 = (1 << 24) - 1;
/// Guests' tracks, and the round trips across the boundary.
const GUEST_TRACK_BASE: u64 = 1 << 25;
const BOUNDARY_TRACK: u64 = (1 << 24) - 2;
/// A guest's threads drawn one by one (the rest are in its CPU counter).
const GUEST_THREADS: usize = 16;

const STATES: [&str; 5] = ["user", "system", "softirq", "hardirq", "guest"];

fn us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

pub fn render(rec: &Recording) -> String {
    // A thread is its tid and its fork: a tid reused while recording is two.
    let threads: BTreeMap<(u32, u64), &ThreadRow> = rec
        .rows::<ThreadRow>()
        .iter()
        .map(|t| ((t.tid, t.born_ns), t))
        .collect();
    // By tid alone for intervals written before they carried the fork.
    let index = ThreadIndex::new(rec.rows::<ThreadRow>());
    let role_of = |tid: u32, born_ns: u64| {
        index.interval_thread(tid, born_ns).map_or_else(
            || "host/other".to_string(),
            |t| format!("{}/{}", t.owner.platform, t.owner.role),
        )
    };
    let mut roles: Vec<String> = threads
        .values()
        .map(|t| format!("{}/{}", t.owner.platform, t.owner.role))
        .collect();
    roles.sort();
    roles.dedup();
    let track = |role: &str| ROLE_TRACK_BASE + roles.iter().position(|r| r == role).unwrap_or(roles.len()) as u64;
    let mut events: Vec<Value> = Vec::new();
    for (i, role) in roles.iter().enumerate() {
        events.push(json!({"ph": "M", "name": "process_name", "pid": track(role), "args": {"name": role}}));
        events
            .push(json!({"ph": "M", "name": "process_sort_index", "pid": track(role), "args": {"sort_index": 2 * i}}));
    }
    guest_tracks(rec, &roles, &mut events);
    for t in threads.values() {
        let role = format!("{}/{}", t.owner.platform, t.owner.role);
        events.push(
            json!({"ph": "M", "name": "thread_name", "pid": track(&role), "tid": t.tid,
                           "args": {"name": format!("{} ({})", t.owner.comm, t.tid)}}),
        );
    }

    // CPU ns per role, state and interval: a counter sample at each interval's start.
    let mut per_interval: BTreeMap<(String, u64), ([u64; 5], u64)> = BTreeMap::new();
    for r in rec.rows::<IntervalRow>() {
        let e = per_interval.entry((role_of(r.tid, r.born_ns), r.start_ns)).or_default();
        for (sum, v) in
            e.0.iter_mut()
                .zip([r.user_ns, r.system_ns, r.softirq_ns, r.hardirq_ns, r.guest_ns])
        {
            *sum += v;
        }
        e.1 = e.1.max(r.end_ns);
    }
    let mut last_end: BTreeMap<&str, u64> = BTreeMap::new();
    for ((role, start), (ns, end)) in &per_interval {
        let args: serde_json::Map<String, Value> =
            STATES.iter().zip(ns).map(|(s, v)| (s.to_string(), json!(v))).collect();
        events.push(
            json!({"ph": "C", "name": "CPU ns per interval", "pid": track(role), "ts": us(*start), "args": args}),
        );
        let e = last_end.entry(role.as_str()).or_default();
        *e = (*e).max(*end);
    }
    // Each counter back to zero where its last interval ends.
    for (role, end) in last_end {
        let zeros: serde_json::Map<String, Value> = STATES.iter().map(|s| (s.to_string(), json!(0))).collect();
        events
            .push(json!({"ph": "C", "name": "CPU ns per interval", "pid": track(role), "ts": us(end), "args": zeros}));
    }

    // Packets: a span from each hop to the next of the same skb.
    let mut spans = 0usize;
    let mut left_out = 0usize;
    // Each skb's last hop: (time, hop code, device).
    let mut last_hop: std::collections::HashMap<u64, (u64, u32, (u32, u32))> = std::collections::HashMap::new();
    // A device is its (netns, ifindex): ifindexes repeat across namespaces.
    let mut devices: Vec<((u32, u32), String)> = rec
        .rows::<crate::layers::net::NetDeviceRow>()
        .iter()
        .map(|d| ((d.netns, d.ifindex), d.name.clone()))
        .collect();
    fn dev_track(devices: &mut Vec<((u32, u32), String)>, key: (u32, u32)) -> usize {
        devices.iter().position(|(k, _)| *k == key).unwrap_or_else(|| {
            devices.push((key, format!("if{} (netns {})", key.1, key.0)));
            devices.len() - 1
        })
    }
    let walked = rec.net_events.for_each(|e| {
        let here = dev_track(&mut devices, (e.netns, e.ifindex));
        let code = hop::code(e.hop);
        if let Some((ts, hop, from)) = last_hop.get(&e.skb)
            && e.ts_ns >= *ts
            && !hop::is_new_packet(
                *hop,
                dev_key(from.0, from.1),
                code,
                dev_key(e.netns, e.ifindex),
                e.ts_ns - ts,
                e.redirected,
            )
        {
            if spans < MAX_PACKET_SPANS {
                let from = dev_track(&mut devices, *from);
                let name = format!(
                    "{} {} -> {} {}",
                    devices[from].1,
                    hop::name(*hop),
                    devices[here].1,
                    e.hop
                );
                events.push(json!({"ph": "X", "name": name,
                                   "cat": "packet", "pid": PACKETS_TRACK, "tid": here, "ts": us(*ts),
                                   "dur": us(e.ts_ns - ts), "args": {"skb": format!("{:#x}", e.skb), "len": e.len}}));
                spans += 1;
            } else {
                left_out += 1;
            }
        }
        last_hop.insert(e.skb, (e.ts_ns, code, (e.netns, e.ifindex)));
    });
    if spans > 0 {
        events.push(
            json!({"ph": "M", "name": "process_name", "pid": PACKETS_TRACK, "args": {"name": "packets (hop to hop)"}}),
        );
        for (i, (_, name)) in devices.iter().enumerate() {
            events.push(
                json!({"ph": "M", "name": "thread_name", "pid": PACKETS_TRACK, "tid": i, "args": {"name": name}}),
            );
        }
    }

    // KVM: per vCPU thread and exit reason, the totals, at the end.
    let end = us(rec.meta.wall_ns);
    for k in rec.rows::<KvmLatencyRow>() {
        events.push(
            json!({"ph": "i", "s": "t", "name": format!("{} {} (totals)", k.kind, k.reason_name),
                           "pid": track(&format!("{}/{}", k.owner.platform, k.owner.role)), "tid": k.tid, "ts": end,
                           "args": {"count": k.count, "sum_ns": k.sum_ns, "min_ns": k.min_ns, "max_ns": k.max_ns}}),
        );
    }

    boundary_spans(rec, &mut events);

    let doc = json!({
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {
            "vtrace_version": rec.meta.vtrace_version,
            "platform": rec.meta.selectors.platform,
            "wall_ns": rec.meta.wall_ns,
            "packet_spans": spans,
            "packet_spans_left_out": left_out,
            "packet_events_unreadable": walked.err(),
        },
    });
    serde_json::to_string(&doc).expect("trace serializes")
}

/// Each guest's track, sorted right after its VM's vCPU role track: the
/// guest's CPU ns per interval by state and its busiest threads' CPU ns,
/// each interval placed on the host's timeline by the guest's clock.
fn guest_tracks(rec: &Recording, roles: &[String], events: &mut Vec<Value>) {
    use crate::layers::guest::{GuestLinkRow, clock::ClockMap};
    for (i, part) in rec.guests.iter().enumerate() {
        let (Ok(guest), Some(map)) = (&part.recording, ClockMap::of(rec, &part.name)) else {
            continue;
        };
        let (host_start, guest_start) = (rec.meta.start_mono_ns, guest.meta.start_mono_ns);
        if host_start == 0 || guest_start == 0 {
            continue;
        }
        let on_host = |t: u64| (map.to_host(t + guest_start) - host_start as f64).max(0.0) / 1e3;
        let vmm = rec
            .rows::<GuestLinkRow>()
            .iter()
            .find(|l| l.guest == part.name)
            .map_or(0, |l| l.vmm_pid);
        let vcpu_role = rec
            .rows::<ThreadRow>()
            .iter()
            .find(|t| t.owner.pid == vmm && t.owner.role == "vcpu")
            .map(|t| format!("{}/{}", t.owner.platform, t.owner.role));
        let at = vcpu_role.as_ref().and_then(|r| roles.iter().position(|x| x == r));
        let pid = GUEST_TRACK_BASE + i as u64;
        let name = match &vcpu_role {
            Some(r) => format!("{r} > guest {}", part.name),
            None => format!("guest {}", part.name),
        };
        events.push(json!({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}}));
        events.push(json!({"ph": "M", "name": "process_sort_index", "pid": pid,
                           "args": {"sort_index": at.map_or(2 * roles.len() + 1, |a| 2 * a + 1)}}));
        // Its CPU by state, and its busiest threads', per interval.
        let busy = |r: &IntervalRow| r.user_ns + r.system_ns + r.softirq_ns + r.hardirq_ns;
        let mut per_thread: BTreeMap<u32, u64> = BTreeMap::new();
        for r in guest.rows::<IntervalRow>() {
            *per_thread.entry(r.tid).or_default() += busy(r);
        }
        let mut busiest: Vec<(u32, u64)> = per_thread.into_iter().filter(|(_, ns)| *ns > 0).collect();
        busiest.sort_by_key(|(_, ns)| std::cmp::Reverse(*ns));
        busiest.truncate(GUEST_THREADS);
        let comm = |tid: u32| {
            guest
                .rows::<ThreadRow>()
                .iter()
                .find(|t| t.tid == tid)
                .map_or_else(|| tid.to_string(), |t| format!("{} ({tid})", t.owner.comm))
        };
        let mut per_interval: BTreeMap<u64, [u64; 5]> = BTreeMap::new();
        for r in guest.rows::<IntervalRow>() {
            let e = per_interval.entry(r.start_ns).or_default();
            for (sum, v) in e
                .iter_mut()
                .zip([r.user_ns, r.system_ns, r.softirq_ns, r.hardirq_ns, r.idle_ns])
            {
                *sum += v;
            }
            if busiest.iter().any(|(t, _)| *t == r.tid) {
                events.push(
                    json!({"ph": "C", "name": format!("CPU ns: {}", comm(r.tid)), "pid": pid,
                                   "ts": on_host(r.start_ns), "args": {"busy": busy(r)}}),
                );
            }
        }
        for (start, ns) in per_interval {
            let args: serde_json::Map<String, Value> = ["user", "system", "softirq", "hardirq", "idle"]
                .iter()
                .zip(ns)
                .map(|(s, v)| (s.to_string(), json!(v)))
                .collect();
            events.push(json!({"ph": "C", "name": "guest CPU ns per interval", "pid": pid,
                               "ts": on_host(start), "args": args}));
        }
    }
}

/// Each round trip joined across the boundary (views/boundary.rs): a span
/// from the request queued to the reply into the tap, its host and guest
/// parts nested inside it in order, one thread per guest.
fn boundary_spans(rec: &Recording, events: &mut Vec<Value>) {
    let boundaries = super::boundary::boundaries(rec);
    let mut any = false;
    for (i, b) in boundaries.iter().enumerate() {
        for trip in &b.round_trips {
            any = true;
            events.push(
                json!({"ph": "X", "name": "round trip", "cat": "boundary", "pid": BOUNDARY_TRACK, "tid": i,
                               "ts": us(trip.start_ns), "dur": us(trip.total_ns)}),
            );
            let mut at = trip.start_ns;
            for (part, ns) in &trip.parts {
                let side = super::boundary::side_of(part);
                events.push(
                    json!({"ph": "X", "name": part, "cat": side, "pid": BOUNDARY_TRACK, "tid": i,
                                   "ts": us(at), "dur": us(*ns), "args": {"side": side}}),
                );
                at += ns;
            }
        }
        events.push(
            json!({"ph": "M", "name": "thread_name", "pid": BOUNDARY_TRACK, "tid": i,
                           "args": {"name": format!("guest {}", b.guest)}}),
        );
    }
    if any {
        events.push(json!({"ph": "M", "name": "process_name", "pid": BOUNDARY_TRACK,
                           "args": {"name": "round trips across the boundary (host and guest parts)"}}));
    }
}
