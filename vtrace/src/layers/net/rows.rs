//! Net snapshots -> rows: devices (with owner and counters), hops, size
//! histograms, drops, hop latency, and syscalls on tun fds.

use std::collections::HashMap;

use super::{
    collector::NetSnapshot,
    tables::{NetDeviceRow, NetDropRow, NetHopRow, NetLatencyRow, NetSizeRow, TunIoRow},
};
use crate::{
    analysis::histogram::Histogram,
    platforms::netdev::DeviceCounters,
    platforms::{self, SystemSnapshot, attribute::Attribution},
};

pub type NetTables = (Vec<NetDeviceRow>, Vec<NetHopRow>, Vec<NetSizeRow>, Vec<NetDropRow>);

/// Network tables: devices (with owner and counters), hops, size histograms, drops.
pub fn net_rows(
    net: &NetSnapshot,
    start: &HashMap<(u32, u32), DeviceCounters>,
    end: &HashMap<(u32, u32), DeviceCounters>,
    attribution: &Attribution,
    drop_names: &HashMap<u32, String>,
    location_names: &HashMap<u64, String>,
    device_names: &HashMap<(u32, u32), String>,
) -> NetTables {
    use vtrace_common::{LOG2_BUCKETS, hop};
    // A device gone by the end has no counters there: its name is the one a
    // probe saw (`device_names`), or the one detection saw.
    let seen_name = |netns: u32, ifindex: u32| {
        device_names.get(&(netns, ifindex)).cloned().or_else(|| {
            attribution
                .instances()
                .iter()
                .flat_map(|i| &i.devices)
                .find(|d| d.netns as u32 == netns && d.ifindex == ifindex)
                .map(|d| d.name.clone())
        })
    };
    let owner: HashMap<(u32, u32), (String, String, String)> = attribution
        .instances()
        .iter()
        .flat_map(|i| {
            i.devices.iter().map(move |d| {
                (
                    (d.netns as u32, d.ifindex),
                    (i.platform.clone(), i.id.clone(), d.role.clone()),
                )
            })
        })
        .collect();
    let mut devices: std::collections::BTreeSet<(u32, u32)> =
        net.devices.keys().map(|k| (k.netns, k.ifindex)).collect();
    devices.extend(
        net.softirq
            .keys()
            .chain(net.napi.keys())
            .filter(|&&k| k != 0)
            .map(|&k| ((k >> 32) as u32, k as u32)),
    );
    let mut dev_rows = Vec::new();
    for (netns, ifindex) in devices {
        let c_end = end.get(&(netns, ifindex)).or_else(|| start.get(&(netns, ifindex)));
        let c_start = start.get(&(netns, ifindex));
        // A device made during the recording (a sandbox's tap and veth)
        // counted from zero, so all it counted is the window's.
        let delta = |f: fn(&DeviceCounters) -> u64| match (c_start, c_end) {
            (Some(a), Some(b)) => f(b).saturating_sub(f(a)),
            (None, Some(b)) => f(b),
            _ => 0,
        };
        let napi = net
            .napi
            .get(&vtrace_common::dev_key(netns, ifindex))
            .copied()
            .unwrap_or_default();
        let (platform, instance, role) = owner
            .get(&(netns, ifindex))
            .cloned()
            .unwrap_or_else(|| (platforms::HOST.into(), String::new(), String::new()));
        dev_rows.push(NetDeviceRow {
            netns,
            ifindex,
            name: c_end
                .map(|c| c.name.clone())
                .or_else(|| seen_name(netns, ifindex))
                .unwrap_or_else(|| format!("if{ifindex}")),
            kind: c_end.map(|c| c.kind.clone()).unwrap_or_default(),
            platform,
            instance,
            role,
            softirq_ns: net
                .softirq
                .get(&vtrace_common::dev_key(netns, ifindex))
                .copied()
                .unwrap_or(0),
            napi_polls: napi[0],
            napi_packets: napi[1],
            napi_budget_exhausted: napi[2],
            counter_rx_packets: delta(|c| c.rx_packets),
            counter_rx_bytes: delta(|c| c.rx_bytes),
            counter_tx_packets: delta(|c| c.tx_packets),
            counter_tx_bytes: delta(|c| c.tx_bytes),
        });
    }
    let mut hops = Vec::new();
    let mut sizes = Vec::new();
    for (k, v) in &net.devices {
        let name = hop::name(k.hop).to_string();
        hops.push(NetHopRow {
            netns: k.netns,
            ifindex: k.ifindex,
            hop: name.clone(),
            direction: if hop::is_tx(k.hop) { "tx" } else { "rx" }.into(),
            packets: v.packets,
            bytes: v.bytes,
            gso_packets: v.gso_packets,
            gso_segs: v.gso_segs,
            errors: v.errors,
            max_bytes: v.max_len,
            mtu_edge: v.mtu_edge,
        });
        for (le, count) in size_buckets(v) {
            sizes.push(NetSizeRow {
                netns: k.netns,
                ifindex: k.ifindex,
                hop: name.clone(),
                kind: "mtu".into(),
                le,
                count,
            });
        }
        for (i, &count) in v.log2_hist.iter().enumerate().take(LOG2_BUCKETS) {
            if count > 0 {
                let le = (1u64 << (i + 1)) - 1;
                sizes.push(NetSizeRow {
                    netns: k.netns,
                    ifindex: k.ifindex,
                    hop: name.clone(),
                    kind: "log2".into(),
                    le,
                    count,
                });
            }
        }
    }
    let drops = net
        .drops
        .iter()
        .map(|(k, &count)| {
            let location = location_names
                .get(&k.location)
                .cloned()
                .unwrap_or_else(|| format!("{:#x}", k.location));
            let reason = drop_names
                .get(&k.reason)
                .cloned()
                .unwrap_or_else(|| format!("reason {}", k.reason));
            let fate = drop_fate(k.protocol, &location, &reason);
            NetDropRow {
                lost: fate == "lost",
                fate: fate.to_string(),
                reason,
                protocol: ether_type(k.protocol),
                netns: k.netns,
                ifindex: k.ifindex,
                location,
                count,
            }
        })
        .collect();
    (dev_rows, hops, sizes, drops)
}

/// Network frames the kernel frees through kfree_skb with nothing lost, by
/// the function that frees them and the reason it gives ("": any): what
/// became of them instead.
const NOT_LOST: &[(&str, &str, &str)] = &[
    // An ICMP message (an echo reply) raw sockets were handed a copy of:
    // the lookup for a datagram ping socket after them finds none and frees
    // the original as NO_SOCKET. (With no raw socket either it had no
    // taker; the kernel does not tell the two apart.)
    ("icmp_rcv", "NO_SOCKET", "raw sockets took it"),
    // Data received into a socket's queue, unread when the socket went.
    ("sk_stream_kill_queues", "", "unread at socket close"),
    // TCP's own discards after handling a segment: above all segments for
    // a connection in TIME_WAIT, which TCP answers (a closing storm of
    // many connections makes many).
    ("tcp_v4_rcv", "NOT_SPECIFIED", "TCP handled it (TIME_WAIT)"),
    ("tcp_v6_rcv", "NOT_SPECIFIED", "TCP handled it (TIME_WAIT)"),
    // A segment for no connection (a closed port, or a reply arriving after
    // its socket was closed with a reset): delivered, and refused with a
    // reset of TCP's own (Tcp OutRsts), like a datagram ping socket's
    // ICMP above. A peer that closes with unread data makes these.
    ("tcp_v4_rcv", "NO_SOCKET", "no connection: TCP answered with a reset"),
    ("tcp_v6_rcv", "NO_SOCKET", "no connection: TCP answered with a reset"),
    // A retransmission of data already received, or merged into the queue.
    ("", "TCP_OLD_DATA", "duplicate of data received"),
    ("", "TCP_OFOMERGE", "merged into queued data"),
];

/// "lost", or what became of a freed skb instead.
fn drop_fate(protocol: u16, location: &str, reason: &str) -> &'static str {
    if protocol == 0 {
        return "no network frame";
    }
    NOT_LOST
        .iter()
        .find(|(function, why, _)| (function.is_empty() || *function == location) && (why.is_empty() || *why == reason))
        .map_or("lost", |(_, _, fate)| fate)
}

/// An EtherType by its usual name, else its number; "none" for 0.
fn ether_type(protocol: u16) -> String {
    match protocol {
        0 => "none".into(),
        0x0800 => "IPv4".into(),
        0x86dd => "IPv6".into(),
        0x0806 => "ARP".into(),
        0x8100 => "VLAN".into(),
        p => format!("{p:#06x}"),
    }
}

pub fn latency_rows(net: &NetSnapshot) -> Vec<NetLatencyRow> {
    net.latency
        .iter()
        .map(|(e, l)| (e, l, Histogram::from_log2(&l.log2)))
        .map(|(e, l, hist)| NetLatencyRow {
            from_netns: (e.from_dev >> 32) as u32,
            from_ifindex: e.from_dev as u32,
            from_hop: vtrace_common::hop::name(e.from_hop).to_string(),
            to_netns: (e.to_dev >> 32) as u32,
            to_ifindex: e.to_dev as u32,
            to_hop: vtrace_common::hop::name(e.to_hop).to_string(),
            count: l.count,
            sum_ns: l.sum_ns,
            p50_ns: hist.bucket_bound(0.5),
            p99_ns: hist.bucket_bound(0.99),
        })
        .collect()
}

/// Syscalls on tun fds per (tap, process, direction), with their sizes.
pub fn tun_rows(
    stats: &std::collections::BTreeMap<vtrace_common::TunIoKey, vtrace_common::DevStats>,
    system: &SystemSnapshot,
    threads: &[crate::layers::cpu::ThreadRow],
    device_names: &HashMap<(u32, u32), String>,
) -> (Vec<TunIoRow>, Vec<NetSizeRow>) {
    let mut rows = Vec::new();
    let mut sizes = Vec::new();
    for (k, v) in stats {
        let (netns, ifindex) = ((k.dev >> 32) as u32, k.dev as u32);
        let device = system
            .netdevs
            .iter()
            .find(|d| d.netns as u32 == netns && d.ifindex == ifindex)
            .map(|d| d.name.clone())
            .or_else(|| device_names.get(&(netns, ifindex)).cloned())
            .unwrap_or_else(|| format!("if{ifindex}"));
        let comm = threads
            .iter()
            .find(|t| t.tid == k.tgid)
            .map(|t| t.owner.comm.clone())
            .unwrap_or_default();
        let direction = if k.write == 1 { "write" } else { "read" };
        rows.push(TunIoRow {
            pid: k.tgid,
            comm,
            device,
            netns,
            ifindex,
            direction: direction.into(),
            calls: v.packets,
            bytes: v.bytes,
        });
        for (le, count) in size_buckets(v) {
            sizes.push(NetSizeRow {
                netns,
                ifindex,
                hop: format!("fd_{direction}"),
                kind: "mtu".into(),
                le,
                count,
            });
        }
    }
    (rows, sizes)
}

/// (upper bound, count) of a device histogram's buckets, the MTU edge among
/// them; a bucket that repeats the previous bound (the edge equal to a fixed
/// one, or no edge) is always empty and left out.
fn size_buckets(v: &vtrace_common::DevStats) -> Vec<(u64, u64)> {
    let edges = vtrace_common::dev_size_edges(v.mtu_edge);
    edges
        .iter()
        .zip(v.size_hist)
        .enumerate()
        .filter(|&(i, (le, count))| i == 0 || count > 0 || *le != edges[i - 1])
        .map(|(_, (le, count))| (*le, count))
        .collect()
}
