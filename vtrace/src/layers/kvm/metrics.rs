//! The KVM layer's Prometheus series (`vtrace serve`): exits by reason and
//! how long they took, per platform instance.

use std::collections::HashMap;

use crate::{
    exposition::{Buckets, Family, INSTANCE, Kind, Labels, Samples, Unit, or, time_bound},
    recording::TableSet,
};

use super::{KvmLatencyHistRow, KvmLatencyRow};

pub static EXITS: Family = Family {
    name: "kvm_exits",
    unit: None,
    kind: Kind::Counter,
    per_unit: 1.0,
    help: "KVM exits of vCPU threads by platform instance, kind (exit: into KVM; userspace: on to the VMM) and \
           reason.",
};

pub static EXIT_SECONDS: Family = Family {
    name: "kvm_exit_duration",
    unit: Some(Unit::Seconds),
    kind: Kind::Histogram,
    per_unit: 1e9,
    help: "How long KVM exits took, from the exit to the vCPU's next entry, by platform instance, kind and reason.",
};

pub fn metrics(tables: &TableSet, out: &mut Samples) {
    let mut labels_of: HashMap<(u32, &str, &str), Labels> = HashMap::new();
    for r in tables.rows::<KvmLatencyRow>() {
        let labels: Labels = vec![
            ("platform", or(&r.owner.platform, "host")),
            (INSTANCE, or(&r.owner.instance, "none")),
            ("kind", r.kind.clone()),
            ("reason", r.reason_name.clone()),
        ];
        let source = format!("{}/{}/{}", r.tid, r.kind, r.reason_name);
        out.push(&EXITS, source.clone(), labels.clone(), r.count as f64);
        out.bucket_sum(&EXIT_SECONDS, &source, labels.clone(), r.sum_ns as f64);
        labels_of.insert((r.tid, &r.kind, &r.reason_name), labels);
    }
    let mut buckets = Buckets::default();
    for h in tables.rows::<KvmLatencyHistRow>() {
        if let Some(labels) = labels_of.get(&(h.tid, h.kind.as_str(), h.reason_name.as_str())) {
            let source = format!("{}/{}/{}", h.tid, h.kind, h.reason_name);
            buckets.add(source, labels, time_bound(h.hi_ns), h.count);
        }
    }
    buckets.push_into(&EXIT_SECONDS, out);
}
