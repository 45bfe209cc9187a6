//! The net layer's report section: packet size at each hop of each device,
//! packets against the MTU, hop latency, drops, tun fds and journeys.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{
    NetDeviceRow, NetDropRow, NetHopRow, NetLatencyRow, TunIoRow,
    analysis::{size_hist, within_full_frame},
};
use crate::{
    analysis::histogram::Histogram,
    recording::Recording,
    report_model::{Figure, FigureKind, RangedSeries, Section, Table, col, left},
};

fn device(rec: &Recording, netns: u32, ifindex: u32) -> Option<&NetDeviceRow> {
    rec.rows::<NetDeviceRow>()
        .iter()
        .find(|d| d.netns == netns && d.ifindex == ifindex)
}

fn device_name(rec: &Recording, netns: u32, ifindex: u32) -> String {
    device(rec, netns, ifindex).map_or_else(|| format!("if{ifindex}"), |d| d.name.clone())
}

pub fn section(rec: &Recording) -> Section {
    let mut s = Section::new("net", "Network");
    if !rec.rows::<NetHopRow>().is_empty() {
        hops(&mut s, rec);
        against_mtu(&mut s, rec);
        size_figures(&mut s, rec);
        latency(&mut s, rec);
        drop_lines(&mut s, rec);
    }
    json_fields(&mut s, rec);
    s
}

/// Packets lost (by reason, protocol, device and the function that freed
/// them), and apart from them the skbs freed the same way with nothing lost
/// (vsock packets and unix-socket messages consumed, frames delivered).
fn drop_lines(s: &mut Section, rec: &Recording) {
    let rows = rec.rows::<NetDropRow>();
    // Table version 1 (no protocol): a reason and a count, of every kind,
    // shown as they were.
    let old: Vec<String> = rows
        .iter()
        .filter(|d| d.protocol.is_empty())
        .map(|d| format!("{} {}", d.reason, d.count))
        .collect();
    if !old.is_empty() {
        s.lines([format!("  drops: {}", old.join(", "))]);
    }
    let lost: Vec<String> = rows
        .iter()
        .filter(|d| d.lost)
        .map(|d| {
            format!(
                "{} {} {} on {} in {}",
                d.count,
                d.protocol,
                d.reason,
                device_name(rec, d.netns, d.ifindex),
                d.location
            )
        })
        .collect();
    let mut freed: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for d in rows.iter().filter(|d| !d.lost && !d.protocol.is_empty()) {
        *freed.entry((d.fate.as_str(), d.location.as_str())).or_default() += d.count;
    }
    if !lost.is_empty() {
        s.lines([format!("  packets lost: {}", lost.join("; "))]);
    }
    if !freed.is_empty() {
        let by: Vec<String> = freed.iter().map(|((fate, f), n)| format!("{n} {fate} ({f})")).collect();
        s.lines([format!("  freed as dropped, nothing lost: {}", by.join(", "))]);
    }
}

/// Packet size at each hop of each device, with its owner and softirq time.
fn hops(s: &mut Section, rec: &Recording) {
    let mut t = Table::new(
        "Network devices: packet size at each hop (bytes with link-layer header; p50/p99 are bucket bounds)",
        vec![
            left("device", 16),
            left("kind", 8),
            left("owner", 16),
            left("hop", 11),
            col("packets", 9),
            col("bytes", 12),
            col("mean", 7),
            col("p50", 7),
            col("p99", 7),
            col("gso", 7),
            col("softirq(ms)", 12),
        ],
    );
    for h in rec.rows::<NetHopRow>() {
        let d = device(rec, h.netns, h.ifindex);
        let hist = size_hist(rec, h);
        let sizes = Histogram::from_upper_bounds(hist);
        let quantile = |q: f64| match sizes.bucket_bound(q) {
            0 => String::new(),
            le if le >= u32::MAX as u64 => ">64K".to_string(),
            le => le.to_string(),
        };
        let owner = d
            .map(|d| {
                if d.instance.is_empty() {
                    d.platform.clone()
                } else {
                    format!("{}/{}", d.platform, d.role)
                }
            })
            .unwrap_or_default();
        let softirq = match (h.hop.as_str(), d) {
            ("receive", Some(d)) => format!("{:.1}", d.softirq_ns as f64 / 1e6),
            _ => String::new(),
        };
        let name = d.map_or("?", |d| d.name.as_str());
        t.row(vec![
            name.to_string(),
            d.map_or("", |d| d.kind.as_str()).to_string(),
            owner,
            h.hop.clone(),
            h.packets.to_string(),
            h.bytes.to_string(),
            (h.bytes / h.packets.max(1)).to_string(),
            quantile(0.5),
            quantile(0.99),
            h.gso_packets.to_string(),
            softirq,
        ]);
        let platform = d.map_or("host", |d| d.platform.as_str());
        let dims = [("device", name), ("hop", h.hop.as_str()), ("platform", platform)];
        s.metric("packets", h.packets as f64, "packets", &dims);
        s.metric("bytes", h.bytes as f64, "bytes", &dims);
    }
    s.table(t);
}

/// Per device and hop: packets within a full frame (MTU plus link-layer
/// header), packets above it (GSO/GRO aggregates), and the largest; only for
/// recordings that know the MTU (net_hops version 2 on).
fn against_mtu(s: &mut Section, rec: &Recording) {
    let hops: Vec<&NetHopRow> = rec.rows::<NetHopRow>().iter().filter(|h| h.mtu_edge > 0).collect();
    if hops.is_empty() {
        return;
    }
    let mut t = Table::new(
        "  Packets against the MTU (full frame = MTU + link-layer header)",
        vec![
            left("device", 16),
            left("hop", 11),
            col("full frame", 10),
            col("<= frame", 12),
            col("> frame", 12),
            col("largest", 10),
        ],
    );
    for h in hops {
        let within = within_full_frame(rec, h);
        t.row(vec![
            device_name(rec, h.netns, h.ifindex),
            h.hop.clone(),
            h.mtu_edge.to_string(),
            within.to_string(),
            h.packets.saturating_sub(within).to_string(),
            h.max_bytes.to_string(),
        ]);
    }
    s.table(t);
}

/// Packet sizes of the busiest device hops, buckets above a full frame
/// (GSO aggregates) drawn apart.
fn size_figures(s: &mut Section, rec: &Recording) {
    const SHOWN: usize = 4;
    let mut hops: Vec<&NetHopRow> = rec.rows::<NetHopRow>().iter().filter(|h| h.packets > 0).collect();
    hops.sort_by_key(|h| std::cmp::Reverse(h.packets));
    for h in hops.into_iter().take(SHOWN) {
        let hist = size_hist(rec, h);
        let label = |le: u64| match le {
            le if le >= u32::MAX as u64 => ">64K".to_string(),
            le => format!("<={le}"),
        };
        let marked_from = (h.mtu_edge > 0)
            .then(|| hist.iter().position(|(le, _)| *le > h.mtu_edge))
            .flatten()
            .map(|i| (i, format!("larger than a full frame ({} B)", h.mtu_edge)));
        s.figure(Figure {
            title: format!("Packet sizes: {} {}", device_name(rec, h.netns, h.ifindex), h.hop),
            value_label: "packets".into(),
            kind: FigureKind::Histogram {
                bucket_label: "bytes, with the link-layer header".into(),
                buckets: hist.iter().map(|(le, _)| label(*le)).collect(),
                counts: hist.iter().map(|(_, c)| *c as f64).collect(),
                marked_from,
            },
        });
    }
}

fn latency(s: &mut Section, rec: &Recording) {
    if rec.rows::<NetLatencyRow>().is_empty() {
        return;
    }
    let mut t = Table::new(
        "  Hop latency (same skb, consecutive hops)",
        vec![
            left("from", 32),
            left("to", 32),
            col("packets", 10),
            col("mean(us)", 10),
            col("p50(us)", 10),
            col("p99(us)", 10),
        ],
    );
    for l in rec.rows::<NetLatencyRow>() {
        t.row(vec![
            format!("{}:{}", device_name(rec, l.from_netns, l.from_ifindex), l.from_hop),
            format!("{}:{}", device_name(rec, l.to_netns, l.to_ifindex), l.to_hop),
            l.count.to_string(),
            format!("{:.2}", l.sum_ns as f64 / l.count.max(1) as f64 / 1e3),
            format!("{:.2}", l.p50_ns as f64 / 1e3),
            format!("{:.2}", l.p99_ns as f64 / 1e3),
        ]);
    }
    s.table(t);
    let mut edges: Vec<&NetLatencyRow> = rec.rows::<NetLatencyRow>().iter().filter(|l| l.count > 0).collect();
    edges.sort_by_key(|l| std::cmp::Reverse(l.count));
    edges.truncate(12);
    let hop = |netns, ifindex, hop: &str| format!("{}:{hop}", device_name(rec, netns, ifindex));
    s.figure(Figure {
        title: "Hop latency (bar: median, whisker: to p99)".into(),
        value_label: "µs from one hop to the next of the same packet".into(),
        kind: FigureKind::Bars {
            categories: edges
                .iter()
                .map(|l| {
                    format!(
                        "{} → {}",
                        hop(l.from_netns, l.from_ifindex, &l.from_hop),
                        hop(l.to_netns, l.to_ifindex, &l.to_hop)
                    )
                })
                .collect(),
            series: vec![RangedSeries {
                name: "p50".into(),
                values: edges
                    .iter()
                    .map(|l| {
                        let (p50, p99) = (l.p50_ns as f64 / 1e3, l.p99_ns as f64 / 1e3);
                        Some((p50, p50, p99))
                    })
                    .collect(),
            }],
        },
    });
    let displaced = rec.meta.overhead.lost("net.skb_marks_displaced");
    if displaced > 0 {
        s.lines([format!(
            "  {displaced} hops not timed: their skb's mark was displaced by another in flight (table slot collision)"
        )]);
    }
}

fn json_fields(s: &mut Section, rec: &Recording) {
    let devices: Vec<Value> = rec
        .rows::<NetHopRow>()
        .iter()
        .map(|h| {
            let d = device(rec, h.netns, h.ifindex);
            let hist: Vec<Value> = size_hist(rec, h)
                .into_iter()
                .map(|(le, count)| json!({"le": le, "count": count}))
                .collect();
            json!({
                "name": d.map(|d| d.name.as_str()).unwrap_or(""), "ifindex": h.ifindex, "netns": h.netns,
                "kind": d.map(|d| d.kind.as_str()).unwrap_or(""),
                "direction": h.direction, "hop": h.hop,
                "platform": d.map(|d| d.platform.as_str()).unwrap_or("host"),
                "instance": d.map(|d| d.instance.as_str()).unwrap_or(""),
                "role": d.map(|d| d.role.as_str()).unwrap_or(""),
                "packets": h.packets, "bytes": h.bytes, "gso_packets": h.gso_packets, "gso_segs": h.gso_segs,
                "errors": h.errors, "size_hist": hist, "max_bytes": h.max_bytes, "mtu_edge": h.mtu_edge,
            })
        })
        .collect();
    let counters: Vec<Value> = rec
        .rows::<NetDeviceRow>()
        .iter()
        .map(|d| {
            json!({"name": d.name, "ifindex": d.ifindex, "netns": d.netns, "kind": d.kind, "platform": d.platform,
                   "instance": d.instance, "role": d.role, "softirq_ns": d.softirq_ns,
                   "napi_polls": d.napi_polls, "napi_packets": d.napi_packets, "napi_budget_exhausted": d.napi_budget_exhausted,
                   "rx_packets": d.counter_rx_packets, "rx_bytes": d.counter_rx_bytes,
                   "tx_packets": d.counter_tx_packets, "tx_bytes": d.counter_tx_bytes})
        })
        .collect();
    let drops: Vec<Value> = rec
        .rows::<NetDropRow>()
        .iter()
        .map(|d| {
            json!({"reason": d.reason, "protocol": d.protocol, "lost": d.lost, "fate": d.fate,
                   "device": device_name(rec, d.netns, d.ifindex), "netns": d.netns, "ifindex": d.ifindex,
                   "location": d.location, "count": d.count})
        })
        .collect();
    let hops: Vec<Value> = rec
        .rows::<NetLatencyRow>()
        .iter()
        .map(|l| {
            json!({
                "from": format!("{}:{}", device_name(rec, l.from_netns, l.from_ifindex), l.from_hop),
                "to": format!("{}:{}", device_name(rec, l.to_netns, l.to_ifindex), l.to_hop),
                "count": l.count, "mean_ns": l.sum_ns / l.count.max(1), "p50_ns": l.p50_ns, "p99_ns": l.p99_ns,
            })
        })
        .collect();
    s.json("devices", devices);
    s.json("device_counters", counters);
    s.json("drops", drops);
    s.json("tun_io", rec.rows::<TunIoRow>());
    s.json("hops", hops);
    s.json(
        "journeys",
        super::analysis::journeys(rec)
            .unwrap_or_else(|e| json!({"error": format!("per-packet events unreadable: {e}")})),
    );
}
