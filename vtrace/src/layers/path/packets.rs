//! Followed packets (the path_packets table, `record --events`): each one's
//! stages, the slowest ones, and round trips at the tap: a frame queued to a
//! VM's tap, the guest's time between the vCPU entry that delivered it and
//! its next kick, and the frame that kick put into the tap.

use std::collections::BTreeMap;

use serde::Serialize;
use vtrace_common::path_stage;

use super::PathPacketRow;

/// The stage each point of a packet ends when the point before it is its
/// previous one (`PathPacketRow` t0..t4), per direction. A point after an
/// absent one ends the stage that starts after the last present point: a
/// VMM's tx has no handle_tx, so its write to the tap ends tx_kick.
const RX_ENDS: [Option<u32>; 5] = [
    None,
    Some(path_stage::RX_TAP_QUEUE),
    Some(path_stage::RX_SIGNAL),
    Some(path_stage::RX_INJECT),
    Some(path_stage::RX_ENTRY),
];
const TX_ENDS: [Option<u32>; 5] = [
    None,
    Some(path_stage::TX_KICK),
    Some(path_stage::TX_SERVE),
    Some(path_stage::TX_TAP),
    None,
];

const PT_ENDS: [Option<u32>; 5] = [
    None,
    Some(path_stage::PT_SIGNAL),
    Some(path_stage::PT_INJECT),
    Some(path_stage::PT_ENTRY),
    None,
];

const GUEST_RX_ENDS: [Option<u32>; 5] = [
    None,
    Some(path_stage::GUEST_RX_POLL),
    Some(path_stage::GUEST_RX_STACK),
    None,
    None,
];
const GUEST_VF_TX_ENDS: [Option<u32>; 5] = [None, Some(path_stage::GUEST_TX_XMIT), None, None, None];
const GUEST_TX_ENDS: [Option<u32>; 5] = [
    None,
    Some(path_stage::GUEST_TX_KICK),
    Some(path_stage::GUEST_TX_NOTIFY),
    None,
    None,
];

pub fn points(p: &PathPacketRow) -> [u64; 5] {
    [p.t0_ns, p.t1_ns, p.t2_ns, p.t3_ns, p.t4_ns]
}

/// A followed packet's stages in path order: (stage, ns). They sum exactly
/// to its last point minus its first.
pub fn stages(p: &PathPacketRow) -> Vec<(u32, u64)> {
    let ends = match p.dir.as_str() {
        "tx" => &TX_ENDS,
        "pt" => &PT_ENDS,
        "guest_rx" => &GUEST_RX_ENDS,
        "guest_tx" => &GUEST_TX_ENDS,
        "guest_vf_tx" => &GUEST_VF_TX_ENDS,
        _ => &RX_ENDS,
    };
    let pts = points(p);
    let mut out = Vec::new();
    let mut prev: Option<usize> = None;
    for (i, &t) in pts.iter().enumerate() {
        if t == 0 {
            continue;
        }
        if let Some(j) = prev
            && let Some(stage) = ends[j + 1]
        {
            out.push((stage, t.saturating_sub(pts[j])));
        }
        prev = Some(i);
    }
    out
}

/// First and last points of a packet (0, 0 when it has none).
pub fn span(p: &PathPacketRow) -> (u64, u64) {
    let pts = points(p);
    let first = pts.iter().copied().find(|&t| t != 0).unwrap_or(0);
    let last = pts.iter().copied().rev().find(|&t| t != 0).unwrap_or(0);
    (first, last)
}

/// A request into a VM and its reply, as its tap saw them.
#[derive(Clone, Debug, Serialize)]
pub struct RoundTrip {
    pub platform: String,
    pub instance: String,
    /// The request queued to the tap (ns since the recording started).
    pub start_ns: u64,
    /// Request queued to the tap -> reply into the tap.
    pub total_ns: u64,
    /// rx stages, then `guest` (the vCPU's entry with the request's
    /// interrupt -> its next kick), then tx stages up to the tap: they sum
    /// to `total_ns` exactly.
    pub parts: Vec<(String, u64)>,
    /// The VM's key, and the guest part's ends (ns since the start): the
    /// vCPU's entry with the request's interrupt, the reply's kick.
    #[serde(skip)]
    pub vm: u64,
    #[serde(skip)]
    pub entry_ns: u64,
    #[serde(skip)]
    pub kick_ns: u64,
}

/// The round trips of each VM: every rx packet followed from its queueing
/// to its entry, paired with the VM's first tx packet kicked after that
/// entry and before the VM's next rx entry (the reply, when requests and
/// replies alternate: ping, redis or HTTP with one connection).
pub fn round_trips(packets: &[PathPacketRow]) -> Vec<RoundTrip> {
    let mut vms: BTreeMap<u64, (Vec<&PathPacketRow>, Vec<&PathPacketRow>)> = BTreeMap::new();
    for p in packets.iter().filter(|p| p.vm != 0) {
        let e = vms.entry(p.vm).or_default();
        if p.dir == "tx" {
            if p.t0_ns != 0 && p.t2_ns != 0 {
                e.1.push(p);
            }
        } else if p.dir == "rx" && p.t4_ns != 0 {
            e.0.push(p);
        }
    }
    let mut out = Vec::new();
    for (_, (mut rx, mut tx)) in vms {
        rx.sort_by_key(|p| p.t4_ns);
        tx.sort_by_key(|p| p.t0_ns);
        for (i, r) in rx.iter().enumerate() {
            if r.t0_ns == 0 {
                continue;
            }
            let next_entry = rx.get(i + 1).map_or(u64::MAX, |n| n.t4_ns);
            let at = tx.partition_point(|x| x.t0_ns < r.t4_ns);
            let Some(x) = tx.get(at).filter(|x| x.t0_ns < next_entry) else {
                continue;
            };
            let mut parts: Vec<(String, u64)> = stages(r)
                .into_iter()
                .map(|(s, ns)| (path_stage::NAMES[s as usize].to_string(), ns))
                .collect();
            parts.push(("guest".into(), x.t0_ns - r.t4_ns));
            parts.extend(
                stages(x)
                    .into_iter()
                    .filter(|(s, _)| *s != path_stage::TX_TAP)
                    .map(|(s, ns)| (path_stage::NAMES[s as usize].to_string(), ns)),
            );
            out.push(RoundTrip {
                platform: r.owner.platform.clone(),
                instance: r.owner.instance.clone(),
                start_ns: r.t0_ns,
                total_ns: x.t2_ns - r.t0_ns,
                parts,
                vm: r.vm,
                entry_ns: r.t4_ns,
                kick_ns: x.t0_ns,
            });
        }
    }
    out
}

/// The `q` quantile of `v` (sorted in place), nearest rank.
pub fn quantile(v: &mut [u64], q: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(dir: &str, vm: u64, t: [u64; 5]) -> PathPacketRow {
        PathPacketRow {
            dir: dir.into(),
            owner: crate::recording::Owner {
                pid: 1,
                comm: String::new(),
                platform: "qemu-kvm".into(),
                instance: "qemu-kvm:1".into(),
                role: "vcpu".into(),
            },
            tid: 1,
            vm,
            frames: 1,
            t0_ns: t[0],
            t1_ns: t[1],
            t2_ns: t[2],
            t3_ns: t[3],
            t4_ns: t[4],
            irq: 0,
        }
    }

    #[test]
    fn stages_sum_to_the_span_and_skip_what_a_vmm_has_not() {
        let rx = packet("rx", 1, [100, 150, 400, 420, 500]);
        assert_eq!(
            stages(&rx),
            vec![
                (path_stage::RX_TAP_QUEUE, 50),
                (path_stage::RX_SIGNAL, 250),
                (path_stage::RX_INJECT, 20),
                (path_stage::RX_ENTRY, 80)
            ]
        );
        // A VMM's write to its tap ends the kick's wait: no tx_serve.
        let tx = packet("tx", 1, [1000, 0, 1300, 1350, 0]);
        assert_eq!(stages(&tx), vec![(path_stage::TX_KICK, 300), (path_stage::TX_TAP, 50)]);
        let untimed = packet("rx", 1, [0, 150, 400, 420, 500]);
        assert_eq!(stages(&untimed).iter().map(|s| s.1).sum::<u64>(), 350);
        assert_eq!(span(&untimed), (150, 500));
    }

    #[test]
    fn a_round_trip_pairs_an_entry_with_the_next_kick_of_the_same_vm() {
        let packets = vec![
            packet("rx", 1, [100, 150, 400, 420, 500]),
            // Another VM's kick in between is not this VM's reply.
            packet("tx", 2, [600, 650, 700, 720, 0]),
            packet("tx", 1, [900, 950, 1000, 1100, 0]),
            // An rx packet with no kick before the next entry: no round trip.
            packet("rx", 1, [2000, 2050, 2100, 2120, 2200]),
            packet("rx", 1, [3000, 3050, 3100, 3120, 3200]),
            packet("tx", 1, [3300, 0, 3500, 3600, 0]),
        ];
        let trips = round_trips(&packets);
        assert_eq!(trips.len(), 2);
        assert_eq!(trips[0].total_ns, 900);
        assert_eq!(trips[0].parts.iter().map(|p| p.1).sum::<u64>(), 900);
        assert_eq!(trips[0].parts[4], ("guest".to_string(), 400));
        assert_eq!(trips[1].start_ns, 3000);
        assert_eq!(trips[1].total_ns, 500);
        assert_eq!(trips[1].parts.last().unwrap(), &("tx_kick".to_string(), 200));
    }
}
