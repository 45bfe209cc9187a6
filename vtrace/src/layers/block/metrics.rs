//! The block layer's Prometheus series (`vtrace serve --layers ...,block`):
//! completed requests, bytes and time on the device per platform instance,
//! device and operation.

use std::collections::HashMap;

use crate::{
    exposition::{Buckets, Family, INSTANCE, Kind, Labels, Samples, Unit, or, time_bound},
    recording::TableSet,
};

use super::{BlockHistRow, BlockRow};

pub static REQUESTS: Family = Family {
    name: "block_requests",
    unit: None,
    kind: Kind::Counter,
    per_unit: 1.0,
    help: "Block requests completed, by the platform instance whose process submitted them, device and \
           operation (read, write, flush, discard, ...).",
};

pub static BYTES: Family = Family {
    name: "block",
    unit: Some(Unit::Bytes),
    kind: Kind::Counter,
    per_unit: 1.0,
    help: "Bytes of the block requests completed, by instance, device and operation.",
};

pub static DEVICE_SECONDS: Family = Family {
    name: "block_device",
    unit: Some(Unit::Seconds),
    kind: Kind::Histogram,
    per_unit: 1e9,
    help: "Time block requests spent on the device (issue to completion), by instance, device and operation.",
};

/// A row's key in its histograms: (dev, op, cgroup, pid).
fn source(dev: u32, op: &str, cgroup_id: u64, pid: u32) -> String {
    format!("{dev}/{op}/{cgroup_id}/{pid}")
}

pub fn metrics(tables: &TableSet, out: &mut Samples) {
    let mut labels_of: HashMap<String, Labels> = HashMap::new();
    for r in tables.rows::<BlockRow>() {
        let labels: Labels = vec![
            ("platform", or(&r.platform, "host")),
            (INSTANCE, or(&r.instance, "none")),
            ("device", or(&r.device, "none")),
            ("op", r.op.clone()),
        ];
        let source = source(r.dev, &r.op, r.cgroup_id, r.pid);
        out.push(&REQUESTS, source.clone(), labels.clone(), r.requests as f64);
        out.push(&BYTES, source.clone(), labels.clone(), r.bytes as f64);
        out.bucket_sum(&DEVICE_SECONDS, &source, labels.clone(), r.device_ns as f64);
        labels_of.insert(source, labels);
    }
    let mut buckets = Buckets::default();
    for h in tables.rows::<BlockHistRow>().iter().filter(|h| h.kind == "device") {
        let source = source(h.dev, &h.op, h.cgroup_id, h.pid);
        if let Some(labels) = labels_of.get(&source) {
            buckets.add(source, labels, time_bound(h.hi), h.count);
        }
    }
    buckets.push_into(&DEVICE_SECONDS, out);
}
