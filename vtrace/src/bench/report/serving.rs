//! What a cell's recordings say of the side that serves, as a study that
//! ran its client on another machine measures it: CPU by state of every
//! thread but the client's (mpstat's split), and the sizes of the frames
//! the instance's devices carried from the guest towards the client.

use serde::Serialize;

use crate::{
    layers::{
        cpu::{ThreadRow, analysis::StateTimes},
        net::{NetDeviceRow, NetHopRow, analysis::within_full_frame},
    },
    platforms::ROLES_LEFT_OUT,
    recording::Recording,
};

/// The serving side's CPU over a cell's runs.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct ServingCpu {
    /// ns per operation by state (user, system, softirq, hardirq, guest).
    pub ns_per_op: Vec<(String, f64)>,
    /// Percent of one CPU over the recordings by state: what mpstat shows.
    pub pct_of_cpu: Vec<(String, f64)>,
    /// ns per operation by (role, state), the largest first.
    pub role_ns_per_op: Vec<(String, String, f64)>,
    /// The client's ns per operation (the recorded command's process:
    /// redis-benchmark on this host).
    pub client_ns_per_op: f64,
}

impl ServingCpu {
    /// Every thread's CPU but the client's (the recorded command's
    /// process), vtrace's and stressors'.
    pub fn of(recs: &[Recording]) -> ServingCpu {
        let ops: f64 = recs.iter().filter_map(|r| r.ops()).map(|o| o.count).sum();
        let wall: f64 = recs.iter().map(|r| r.meta.wall_ns as f64).sum();
        if ops <= 0.0 || wall <= 0.0 {
            return ServingCpu::default();
        }
        let mut total = StateTimes::default();
        let mut by_role: Vec<(String, StateTimes)> = Vec::new();
        let mut client = 0u64;
        for r in recs {
            let client_pid = r.meta.workload.as_ref().map(|w| w.pid);
            for t in r.rows::<ThreadRow>() {
                if ROLES_LEFT_OUT.contains(&t.owner.role.as_str()) {
                    continue;
                }
                let times = StateTimes::of_thread(t);
                if Some(t.owner.pid) == client_pid {
                    client += times.busy_ns();
                    continue;
                }
                total.add(&times);
                match by_role.iter_mut().find(|(role, _)| *role == t.owner.role) {
                    Some((_, sum)) => sum.add(&times),
                    None => by_role.push((t.owner.role.clone(), times)),
                }
            }
        }
        let busy = |t: &StateTimes| t.named().into_iter().filter(|(state, _)| *state != "idle");
        let mut role_ns_per_op: Vec<(String, String, f64)> = by_role
            .iter()
            .flat_map(|(role, t)| busy(t).map(move |(state, ns)| (role.clone(), state.to_string(), ns as f64 / ops)))
            .filter(|(_, _, ns)| *ns > 0.0)
            .collect();
        role_ns_per_op.sort_by(|a, b| b.2.total_cmp(&a.2));
        ServingCpu {
            ns_per_op: busy(&total).map(|(s, ns)| (s.to_string(), ns as f64 / ops)).collect(),
            pct_of_cpu: busy(&total)
                .map(|(s, ns)| (s.to_string(), ns as f64 / wall * 100.0))
                .collect(),
            role_ns_per_op,
            client_ns_per_op: client as f64 / ops,
        }
    }

    /// ns per operation in `state`.
    pub fn ns(&self, state: &str) -> f64 {
        self.ns_per_op
            .iter()
            .find(|(s, _)| s == state)
            .map_or(0.0, |(_, ns)| *ns)
    }

    /// Percent of one CPU in `state`.
    pub fn pct(&self, state: &str) -> f64 {
        self.pct_of_cpu
            .iter()
            .find(|(s, _)| s == state)
            .map_or(0.0, |(_, p)| *p)
    }

    pub fn total_ns(&self) -> f64 {
        self.ns_per_op.iter().map(|(_, ns)| ns).sum::<f64>() + 0.0
    }

    /// The role that spent the most of `state` per operation.
    pub fn top_role(&self, state: &str) -> Option<(&str, f64)> {
        self.role_ns_per_op
            .iter()
            .find(|(_, s, _)| s == state)
            .map(|(role, _, ns)| (role.as_str(), *ns))
    }
}

/// Frames the instance's devices received on their way from the guest
/// to the client, over a cell's runs.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct FrameSizes {
    /// `from the guest` (the instance's tap: what its VMM or vhost-net
    /// wrote in) or `to the client` (its last device on the host: a
    /// bridge, the host's end of its veth, or the tap itself).
    pub point: String,
    pub device: String,
    pub packets: u64,
    pub mean_bytes: f64,
    pub max_bytes: u64,
    /// MTU plus the link-layer header (0: unknown).
    pub full_frame: u64,
    /// Frames larger than a full frame (GSO aggregates).
    pub above_full_frame: u64,
}

pub const FROM_GUEST: &str = "from the guest";
pub const TO_CLIENT: &str = "to the client";

impl FrameSizes {
    /// Both points of a cell's runs, where the net layer recorded them.
    pub fn of(recs: &[Recording]) -> Vec<FrameSizes> {
        let mut out: Vec<FrameSizes> = Vec::new();
        for r in recs {
            let devices = r.rows::<NetDeviceRow>();
            let received = |d: &NetDeviceRow| {
                r.rows::<NetHopRow>()
                    .iter()
                    .find(|h| (h.netns, h.ifindex) == (d.netns, d.ifindex) && h.hop == "receive")
            };
            let with_role = |role: &str| {
                devices
                    .iter()
                    .filter(|d| d.role == role)
                    .filter_map(|d| Some((d, received(d)?)))
                    .max_by_key(|(_, h)| h.packets)
            };
            let tap = with_role("tap");
            let last = with_role("bridge").or_else(|| with_role("veth")).or(tap);
            for (point, found) in [(FROM_GUEST, tap), (TO_CLIENT, last)] {
                let Some((d, h)) = found else { continue };
                let above = h.packets.saturating_sub(within_full_frame(r, h));
                let above = if h.mtu_edge > 0 { above } else { 0 };
                match out.iter_mut().find(|f| f.point == point && f.device == d.name) {
                    Some(f) => {
                        let bytes = f.mean_bytes * f.packets as f64 + h.bytes as f64;
                        f.packets += h.packets;
                        f.mean_bytes = bytes / f.packets.max(1) as f64;
                        f.max_bytes = f.max_bytes.max(h.max_bytes);
                        f.above_full_frame += above;
                    }
                    None => out.push(FrameSizes {
                        point: point.into(),
                        device: d.name.clone(),
                        packets: h.packets,
                        mean_bytes: h.bytes as f64 / h.packets.max(1) as f64,
                        max_bytes: h.max_bytes,
                        full_frame: h.mtu_edge,
                        above_full_frame: above,
                    }),
                }
            }
        }
        out
    }
}
