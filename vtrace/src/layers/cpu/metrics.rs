//! The CPU layer's Prometheus series (`vtrace serve`): every thread's time
//! by state into its platform, instance and role, and softirq time by vector.

use crate::{
    exposition::{Family, INSTANCE, Kind, Samples, Unit, or},
    recording::TableSet,
};

use super::{SoftirqRow, ThreadIndex, ThreadRow, analysis::StateTimes};

pub static CPU_SECONDS: Family = Family {
    name: "cpu",
    unit: Some(Unit::Seconds),
    kind: Kind::Counter,
    per_unit: 1e9,
    help: "CPU time by platform, instance, role and state; every CPU-second is in one series, idle \
           included, so the rate of the sum is the number of CPUs. state=guest is time a vCPU thread ran \
           its guest, never inside user (unlike /proc/stat's user, which includes it).",
};

pub static SOFTIRQ_SECONDS: Family = Family {
    name: "softirq",
    unit: Some(Unit::Seconds),
    kind: Kind::Counter,
    per_unit: 1e9,
    help: "Softirq time by vector (NET_RX, TIMER, ...), all CPUs; also inside vtrace_cpu_seconds_total's \
           state=softirq, charged there to the thread it interrupted.",
};

pub fn metrics(tables: &TableSet, out: &mut Samples) {
    let threads = tables.rows::<ThreadRow>();
    // (built only where process labels are asked for)
    let index = std::cell::LazyCell::new(|| ThreadIndex::new(threads));
    for t in threads {
        // Every state, zeros too: one thread's states are a group whose sum
        // only grows while the tick split may move time between them.
        let thread = format!("{}/{}", t.tid, t.born_ns);
        let mut labels = vec![
            ("platform", or(&t.owner.platform, "host")),
            (INSTANCE, or(&t.owner.instance, "none")),
            ("role", or(&t.owner.role, "other")),
        ];
        labels.extend(out.process_labels_for(t.owner.pid, || index.process_comm(t.owner.pid)));
        for (state, ns) in StateTimes::of_thread(t).named() {
            let mut labels = labels.clone();
            labels.push(("state", state.to_string()));
            out.push_grouped(&CPU_SECONDS, &thread, format!("{thread}/{state}"), labels, ns as f64);
        }
    }
    for s in tables.rows::<SoftirqRow>() {
        out.push(
            &SOFTIRQ_SECONDS,
            format!("{}/{}", s.cpu, s.vector),
            vec![("vector", s.vector.clone())],
            s.ns as f64,
        );
    }
}
