//! The run-queue layer's Prometheus series (`vtrace serve`): how long
//! threads waited to run once woken, per platform instance and role.

use std::collections::HashMap;

use crate::{
    exposition::{Buckets, Family, INSTANCE, Kind, Labels, Samples, Unit, or, time_bound},
    recording::TableSet,
};

use super::{RunqHistRow, RunqRow};
use crate::layers::cpu::{ThreadIndex, ThreadRow};

pub static DELAY_SECONDS: Family = Family {
    name: "runq_delay",
    unit: Some(Unit::Seconds),
    kind: Kind::Histogram,
    per_unit: 1e9,
    help: "Run-queue delay (wakeup to running) of threads by platform, instance and role.",
};

pub fn metrics(tables: &TableSet, out: &mut Samples) {
    let mut labels_of: HashMap<u32, Labels> = HashMap::new();
    let rows = tables.rows::<RunqRow>();
    // (built only where process labels are asked for)
    let index = std::cell::LazyCell::new(|| ThreadIndex::new(tables.rows::<ThreadRow>()));
    for r in rows {
        let mut labels: Labels = vec![
            ("platform", or(&r.owner.platform, "host")),
            (INSTANCE, or(&r.owner.instance, "none")),
            ("role", or(&r.owner.role, "other")),
        ];
        labels.extend(out.process_labels_for(r.owner.pid, || index.process_comm(r.owner.pid)));
        let source = format!("{}", r.tid);
        out.bucket_sum(&DELAY_SECONDS, &source, labels.clone(), r.delay_ns as f64);
        labels_of.insert(r.tid, labels);
    }
    let mut buckets = Buckets::default();
    for h in tables.rows::<RunqHistRow>() {
        if let Some(labels) = labels_of.get(&h.tid) {
            buckets.add(h.tid.to_string(), labels, time_bound(h.hi_ns), h.count);
        }
    }
    buckets.push_into(&DELAY_SECONDS, out);
}
