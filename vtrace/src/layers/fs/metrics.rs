//! The fs layer's Prometheus series (`vtrace serve --layers ...,fs`): file
//! syscalls per platform instance, role, filesystem and call, their bytes,
//! failures and latency.

use std::collections::HashMap;

use crate::{
    exposition::{Buckets, Family, INSTANCE, Kind, Labels, Samples, Unit, or, time_bound},
    recording::TableSet,
};

use super::{FsHistRow, FsRow};

pub static CALLS: Family = Family {
    name: "file_calls",
    unit: None,
    kind: Kind::Counter,
    per_unit: 1.0,
    help: "File syscalls (read, write, openat, stat, ...) by platform instance, the role of the process \
           that made them, filesystem type and call.",
};

pub static BYTES: Family = Family {
    name: "file",
    unit: Some(Unit::Bytes),
    kind: Kind::Counter,
    per_unit: 1.0,
    help: "Bytes the file syscalls moved, by instance, role, filesystem and call.",
};

pub static ERRORS: Family = Family {
    name: "file_call_errors",
    unit: None,
    kind: Kind::Counter,
    per_unit: 1.0,
    help: "File syscalls that failed, by instance, role, filesystem and call.",
};

pub static CALL_SECONDS: Family = Family {
    name: "file_call",
    unit: Some(Unit::Seconds),
    kind: Kind::Histogram,
    per_unit: 1e9,
    help: "Latency of the file syscalls (entry to exit), by instance, role, filesystem and call.",
};

pub fn metrics(tables: &TableSet, out: &mut Samples) {
    let mut labels_of: HashMap<String, Labels> = HashMap::new();
    for r in tables.rows::<FsRow>() {
        let labels: Labels = vec![
            ("platform", or(&r.owner.platform, "host")),
            (INSTANCE, or(&r.owner.instance, "none")),
            ("role", or(&r.owner.role, "other")),
            ("fs", or(&r.fs, "unknown")),
            ("call", r.op.clone()),
        ];
        let source = format!("{}/{}/{}", r.owner.pid, r.magic, r.op);
        out.push(&CALLS, source.clone(), labels.clone(), r.count as f64);
        out.push(&BYTES, source.clone(), labels.clone(), r.bytes as f64);
        out.push(&ERRORS, source.clone(), labels.clone(), r.errors as f64);
        out.bucket_sum(&CALL_SECONDS, &source, labels.clone(), r.total_ns as f64);
        labels_of.insert(source, labels);
    }
    let mut buckets = Buckets::default();
    for h in tables.rows::<FsHistRow>() {
        let source = format!("{}/{}/{}", h.pid, h.magic, h.op);
        if let Some(labels) = labels_of.get(&source) {
            buckets.add(source, labels, time_bound(h.hi_ns), h.count);
        }
    }
    buckets.push_into(&CALL_SECONDS, out);
}
