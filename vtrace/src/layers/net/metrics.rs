//! The net layer's Prometheus series (`vtrace serve`): packets and bytes
//! per device, hop and direction, with the device's owner.

use std::collections::HashMap;

use crate::{
    exposition::{Family, INSTANCE, Kind, Labels, Samples, Unit, or},
    recording::TableSet,
};

use super::{NetDeviceRow, NetHopRow, NetSizeRow};

pub static SIZES: Family = Family {
    name: "net_packet_size",
    unit: Some(Unit::Bytes),
    kind: Kind::Histogram,
    per_unit: 1.0,
    help: "Packet sizes (with the link-layer header) per device and hop; the buckets include the device's full \
           frame (MTU plus header).",
};

/// The size buckets' top bound: larger than any frame.
const LARGER: u64 = u32::MAX as u64;

pub static PACKETS: Family = Family {
    name: "net_packets",
    unit: None,
    kind: Kind::Counter,
    per_unit: 1.0,
    help: "Packets through a device at one hop (xmit and receive count as the device's own counters do); \
           a packet is counted at every hop it passes, so sum over one hop.",
};

pub static BYTES: Family = Family {
    name: "net",
    unit: Some(Unit::Bytes),
    kind: Kind::Counter,
    per_unit: 1.0,
    help: "Bytes (with the link-layer header) through a device at one hop.",
};

pub fn metrics(tables: &TableSet, out: &mut Samples) {
    let devices: HashMap<(u32, u32), &NetDeviceRow> = tables
        .rows::<NetDeviceRow>()
        .iter()
        .map(|d| ((d.netns, d.ifindex), d))
        .collect();
    for h in tables.rows::<NetHopRow>() {
        let device = devices.get(&(h.netns, h.ifindex));
        let labels: Labels = vec![
            (
                "device",
                device.map_or_else(|| format!("if{}", h.ifindex), |d| d.name.clone()),
            ),
            ("netns", h.netns.to_string()),
            (INSTANCE, or(device.map_or("", |d| d.instance.as_str()), "none")),
            ("hop", h.hop.clone()),
            (
                "direction",
                if h.direction == "tx" { "transmit" } else { "receive" }.to_string(),
            ),
        ];
        let source = format!("{}/{}/{}/{}", h.netns, h.ifindex, h.hop, h.direction);
        out.push(&PACKETS, source.clone(), labels.clone(), h.packets as f64);
        out.push(&BYTES, source.clone(), labels.clone(), h.bytes as f64);
        let sized: Vec<&NetSizeRow> = tables
            .rows::<NetSizeRow>()
            .iter()
            .filter(|s| s.kind == "mtu" && (s.netns, s.ifindex) == (h.netns, h.ifindex) && s.hop == h.hop)
            .collect();
        if !sized.is_empty() {
            let size_labels: Labels = labels.iter().filter(|(k, _)| *k != "direction").cloned().collect();
            out.bucket_sum(&SIZES, &source, size_labels.clone(), h.bytes as f64);
            for s in sized {
                let le = if s.le >= LARGER { f64::INFINITY } else { s.le as f64 };
                out.bucket(&SIZES, &source, size_labels.clone(), le, s.count);
            }
        }
    }
}
