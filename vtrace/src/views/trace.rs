//! `report --format trace`: the Chrome trace event format (JSON), which
//! ui.perfetto.dev and chrome://tracing open. One track ("process") per
//! platform role, named `platform/role`, whose counters are the CPU ns of
//! each state in each interval (they sum to the recording's totals); its
//! threads named by their comm; with `--events`, one span per packet per
//! hop-to-hop step on a "packets" track; KVM exits per vCPU thread as
//! totals at the end (exits are aggregated in the kernel, not timestamped).
//! Each guest recorded with the host (`record --guest`) has a track per
//! vCPU right under its VM's vCPU role track, on the host's timeline: the
//! host thread's guest mode beside what the guest counted on that CPU, by
//! state and for its busiest threads there; each round trip joined across
//! the boundary is a span whose host and guest parts nest inside it.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use vtrace_common::{dev_key, hop};

use crate::{
    layers::{
        cpu::{IntervalRow, ThreadCpuRow, ThreadIndex, ThreadRow, collector::NO_CPU},
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
/// A guest's threads drawn one by one on each of its vCPUs' tracks (the
/// rest are in its CPU counter).
const GUEST_THREADS: usize = 16;
/// Role tracks' sort indexes this far apart: the guests' vCPU tracks sort
/// between a VM's vCPU role track and the next role's.
const ROLE_SORT_STRIDE: u64 = 4096;

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
        events.push(json!({"ph": "M", "name": "process_sort_index", "pid": track(role),
                           "args": {"sort_index": ROLE_SORT_STRIDE * i as u64}}));
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

/// A guest's busy time on one of its CPUs in one interval, by state
/// (user, system, softirq, hardirq, idle), guest ns since its start.
struct GuestSlice {
    start_ns: u64,
    tid: u32,
    states: [u64; 5],
}

impl GuestSlice {
    fn busy(&self) -> u64 {
        self.states[..4].iter().sum()
    }
}

/// A guest's intervals by the guest CPU they ran on: its `thread_cpus`
/// rows where it has several CPUs (time on no CPU known under
/// [`NO_CPU`]), else its intervals, all on its one CPU 0.
fn guest_slices_by_cpu(guest: &Recording) -> BTreeMap<u32, Vec<GuestSlice>> {
    let mut by_cpu: BTreeMap<u32, Vec<GuestSlice>> = BTreeMap::new();
    let per_cpu = guest.rows::<ThreadCpuRow>();
    if per_cpu.is_empty() {
        for r in guest.rows::<IntervalRow>() {
            by_cpu.entry(0).or_default().push(GuestSlice {
                start_ns: r.start_ns,
                tid: r.tid,
                states: [r.user_ns, r.system_ns, r.softirq_ns, r.hardirq_ns, r.idle_ns],
            });
        }
    } else {
        for r in per_cpu {
            by_cpu.entry(r.cpu).or_default().push(GuestSlice {
                start_ns: r.start_ns,
                tid: r.tid,
                states: [r.user_ns, r.system_ns, r.softirq_ns, r.hardirq_ns, r.idle_ns],
            });
        }
    }
    by_cpu
}

/// Each guest's tracks, one per vCPU, sorted right after its VM's vCPU
/// role track: the host thread's guest-mode ns per interval beside what
/// the guest counted on that vCPU's CPU, by state and for its busiest
/// threads there, each guest interval placed on the host's timeline by
/// the guest's clock. Time the guest counted on no CPU known has a track
/// of its own.
fn guest_tracks(rec: &Recording, roles: &[String], events: &mut Vec<Value>) {
    use crate::layers::guest::{GuestLinkRow, clock::ClockMap, summary::vcpu_index};
    // Tracks under each role so far: each next one sorts after them.
    let mut under_role: BTreeMap<usize, u64> = BTreeMap::new();
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
        let vcpu_threads: Vec<&ThreadRow> = rec
            .rows::<ThreadRow>()
            .iter()
            .filter(|t| t.owner.pid == vmm && t.owner.role == "vcpu")
            .collect();
        let vcpu_role = vcpu_threads
            .first()
            .map(|t| format!("{}/{}", t.owner.platform, t.owner.role));
        let at = vcpu_role.as_ref().and_then(|r| roles.iter().position(|x| x == r));
        let comm = |tid: u32| {
            guest
                .rows::<ThreadRow>()
                .iter()
                .find(|t| t.tid == tid)
                .map_or_else(|| tid.to_string(), |t| format!("{} ({tid})", t.owner.comm))
        };
        for (cpu, slices) in guest_slices_by_cpu(guest) {
            let host_thread = vcpu_threads.iter().find(|t| vcpu_index(t) == Some(cpu));
            let mut name = match &vcpu_role {
                Some(r) => format!("{r} > guest {}", part.name),
                None => format!("guest {}", part.name),
            };
            if cpu == NO_CPU {
                name.push_str(" > on no CPU known");
            } else {
                name.push_str(&format!(" > vCPU {cpu}"));
                if let Some(t) = host_thread {
                    name.push_str(&format!(" ({} {})", t.owner.comm, t.tid));
                }
            }
            // Up to 1024 tracks a guest: its CPUs, and time on none (last).
            let pid = GUEST_TRACK_BASE + ((i as u64) << 10) + u64::from(cpu.min(1023));
            let seq = under_role.entry(at.unwrap_or(roles.len())).or_default();
            *seq += 1;
            let sort = ROLE_SORT_STRIDE * at.unwrap_or(roles.len()) as u64 + *seq;
            events.push(json!({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}}));
            events.push(json!({"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": sort}}));
            // The host thread's own guest mode, on the host's timeline.
            if let Some(t) = host_thread {
                for r in rec
                    .rows::<IntervalRow>()
                    .iter()
                    .filter(|r| r.tid == t.tid && r.born_ns == t.born_ns)
                {
                    events.push(json!({"ph": "C", "name": "host guest-mode ns per interval", "pid": pid,
                                       "ts": us(r.start_ns), "args": {"guest": r.guest_ns}}));
                }
            }
            // The guest's threads busiest on this CPU, and its CPU by state.
            let mut per_thread: BTreeMap<u32, u64> = BTreeMap::new();
            for s in &slices {
                *per_thread.entry(s.tid).or_default() += s.busy();
            }
            let mut busiest: Vec<(u32, u64)> = per_thread.into_iter().filter(|(_, ns)| *ns > 0).collect();
            busiest.sort_by_key(|(_, ns)| std::cmp::Reverse(*ns));
            busiest.truncate(GUEST_THREADS);
            let mut per_interval: BTreeMap<u64, [u64; 5]> = BTreeMap::new();
            for s in &slices {
                let e = per_interval.entry(s.start_ns).or_default();
                for (sum, v) in e.iter_mut().zip(s.states) {
                    *sum += v;
                }
                if busiest.iter().any(|(t, _)| *t == s.tid) {
                    events.push(
                        json!({"ph": "C", "name": format!("CPU ns: {}", comm(s.tid)), "pid": pid,
                                       "ts": on_host(s.start_ns), "args": {"busy": s.busy()}}),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        layers::guest::{GuestClockRow, GuestLinkRow},
        recording::{GuestPart, Owner},
    };

    /// A two-vCPU guest whose clock is the host's less 1 s: a track per
    /// vCPU, named by the host thread that ran it and sorted right after
    /// the VM's vCPU role track, each with the host thread's guest mode
    /// and only the guest threads that ran on its CPU; time on no CPU
    /// known apart.
    #[test]
    fn each_vcpu_is_a_track_with_the_guest_threads_that_ran_on_its_cpu() {
        let mut guest = Recording::default();
        guest.meta.start_mono_ns = 4_000_000_000;
        let thread = |tid: u32, comm: &str, role: &str, pid: u32| ThreadRow {
            tid,
            owner: Owner {
                pid,
                comm: comm.into(),
                platform: "qemu-kvm".into(),
                role: role.into(),
                ..Default::default()
            },
            ..Default::default()
        };
        guest.tables.put(vec![
            thread(7, "redis-server", "app", 7),
            thread(9, "ksoftirqd/0", "kernel", 9),
        ]);
        let on = |tid: u32, cpu: u32, system_ns: u64| ThreadCpuRow {
            start_ns: 0,
            end_ns: 100_000_000,
            tid,
            cpu,
            system_ns,
            ..Default::default()
        };
        guest.tables.put(vec![on(7, 1, 30), on(9, 0, 20), on(9, NO_CPU, 5)]);
        let mut host = Recording::default();
        host.meta.start_mono_ns = 5_000_000_000;
        host.tables.put(vec![
            thread(101, "CPU 0/KVM", "vcpu", 100),
            thread(102, "CPU 1/KVM", "vcpu", 100),
            thread(200, "redis-benchmark", "app", 200),
        ]);
        let interval = |tid: u32, guest_ns: u64| IntervalRow {
            end_ns: 100_000_000,
            tid,
            pid: 100,
            guest_ns,
            ..Default::default()
        };
        host.tables.put(vec![interval(101, 40), interval(102, 60)]);
        host.tables.put(vec![GuestLinkRow {
            guest: "vm1".into(),
            vmm_pid: 100,
            state: "complete".into(),
            ..Default::default()
        }]);
        // The guest read 4.0 s while the host's 5.0 s ran.
        host.tables.put(vec![GuestClockRow {
            guest: "vm1".into(),
            seq: 0,
            host_send_ns: 5_000_000_000,
            guest_ns: 4_000_000_000,
            host_recv_ns: 5_000_000_000,
        }]);
        host.guests.push(GuestPart {
            name: "vm1".into(),
            recording: Ok(guest),
        });
        let doc: Value = serde_json::from_str(&render(&host)).unwrap();
        let events = doc["traceEvents"].as_array().unwrap();
        let meta = |name: &str| -> BTreeMap<u64, Value> {
            events
                .iter()
                .filter(|e| e["ph"] == "M" && e["name"] == name)
                .map(|e| (e["pid"].as_u64().unwrap(), e["args"].clone()))
                .collect()
        };
        let names = meta("process_name");
        let sorts = meta("process_sort_index");
        let track = |name: &str| {
            let (pid, _) = names
                .iter()
                .find(|(_, a)| a["name"] == name)
                .unwrap_or_else(|| panic!("no track {name}: {names:?}"));
            (*pid, sorts[pid]["sort_index"].as_u64().unwrap())
        };
        let (_, role) = track("qemu-kvm/vcpu");
        let (vcpu0, sort0) = track("qemu-kvm/vcpu > guest vm1 > vCPU 0 (CPU 0/KVM 101)");
        let (vcpu1, sort1) = track("qemu-kvm/vcpu > guest vm1 > vCPU 1 (CPU 1/KVM 102)");
        let (none, sort_none) = track("qemu-kvm/vcpu > guest vm1 > on no CPU known");
        let (_, app) = track("qemu-kvm/app");
        assert!(app < role && sort0 < sort1 && sort1 < sort_none && sort_none < role + ROLE_SORT_STRIDE);
        assert_eq!(sort0, role + 1);
        let counters = |pid: u64| -> Vec<(String, f64, Value)> {
            events
                .iter()
                .filter(|e| e["ph"] == "C" && e["pid"].as_u64() == Some(pid))
                .map(|e| {
                    (
                        e["name"].as_str().unwrap().to_string(),
                        e["ts"].as_f64().unwrap(),
                        e["args"].clone(),
                    )
                })
                .collect()
        };
        let named = |pid: u64, name: &str| {
            counters(pid)
                .into_iter()
                .filter(|(n, ..)| n == name)
                .collect::<Vec<_>>()
        };
        assert_eq!(named(vcpu0, "host guest-mode ns per interval")[0].2["guest"], 40);
        assert_eq!(named(vcpu1, "host guest-mode ns per interval")[0].2["guest"], 60);
        assert_eq!(named(vcpu0, "CPU ns: ksoftirqd/0 (9)")[0].2["busy"], 20);
        assert!(named(vcpu0, "CPU ns: redis-server (7)").is_empty());
        let redis = named(vcpu1, "CPU ns: redis-server (7)");
        assert_eq!(redis[0].2["busy"], 30);
        // Guest 4.0 s is host 5.0 s, the host's start: 0 on its timeline.
        assert_eq!(redis[0].1, 0.0);
        assert!(named(vcpu1, "CPU ns: ksoftirqd/0 (9)").is_empty());
        assert_eq!(named(vcpu1, "guest CPU ns per interval")[0].2["system"], 30);
        assert_eq!(named(none, "guest CPU ns per interval")[0].2["system"], 5);
        assert!(named(none, "host guest-mode ns per interval").is_empty());
    }
}
