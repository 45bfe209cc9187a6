//! The block layer's report section: requests per device, operation and
//! owner with their queue and device latency, beside each device's own
//! counters.

use serde_json::json;

use super::{BlockDeviceRow, BlockHistRow, BlockRow};
use crate::{
    analysis::histogram::Histogram,
    recording::Recording,
    report_model::{Figure, FigureKind, Section, Table, col, left, log2_bucket, us},
};

pub fn section(rec: &Recording, top: usize) -> Section {
    let mut s = Section::new("block", "Block I/O");
    let rows = rec.rows::<BlockRow>();
    if rows.is_empty() {
        return s;
    }
    let hists = rec.rows::<BlockHistRow>();
    let hist = |r: &BlockRow, kind: &str| {
        let mut h = Histogram::default();
        for b in hists.iter().filter(|b| {
            b.dev == r.dev && b.op == r.op && b.cgroup_id == r.cgroup_id && b.pid == r.pid && b.kind == kind
        }) {
            h.add(b.lo, b.hi, b.count);
        }
        h
    };
    let mut sorted: Vec<&BlockRow> = rows.iter().collect();
    sorted.sort_by_key(|r| std::cmp::Reverse(r.requests));
    let mut t = Table::new(
        "Block requests per device, operation and submitter (queue: insert -> issue; device: issue -> complete)",
        vec![
            left("device", 10),
            left("op", 8),
            left("platform/instance", 24).gap(2),
            left("process", 16),
            col("requests", 10),
            col("MiB", 9),
            col("queue p50(us)", 14),
            col("queue p99(us)", 14),
            col("device p50(us)", 15),
            col("device p99(us)", 15),
        ],
    );
    let mut json_rows = Vec::new();
    for r in sorted.iter().take(top) {
        let (q, d) = (hist(r, "queue"), hist(r, "device"));
        let owner = if r.instance.is_empty() {
            r.platform.clone()
        } else {
            format!("{}/{}", r.platform, r.instance)
        };
        t.row(vec![
            r.device.clone(),
            r.op.clone(),
            owner,
            format!("{} {}", r.pid, r.comm),
            r.requests.to_string(),
            format!("{:.2}", r.bytes as f64 / (1 << 20) as f64),
            us(q.quantile(0.5)),
            us(q.quantile(0.99)),
            us(d.quantile(0.5)),
            us(d.quantile(0.99)),
        ]);
    }
    for r in rows {
        let (q, d) = (hist(r, "queue"), hist(r, "device"));
        json_rows.push(json!({
            "device": r.device, "op": r.op, "cgroup": r.cgroup_id, "pid": r.pid, "comm": r.comm, "platform": r.platform,
            "instance": r.instance, "count": r.requests, "bytes": r.bytes, "queued": r.queued,
            "queue_p50_ns": q.quantile(0.5), "queue_p99_ns": q.quantile(0.99),
            "device_p50_ns": d.quantile(0.5), "device_p99_ns": d.quantile(0.99),
            "queue_ns": r.queue_ns, "device_ns": r.device_ns,
        }));
        let dims = [
            ("device", r.device.as_str()),
            ("op", r.op.as_str()),
            ("platform", r.platform.as_str()),
        ];
        s.metric("block_requests", r.requests as f64, "requests", &dims);
        s.metric("block_bytes", r.bytes as f64, "bytes", &dims);
    }
    s.table(t);

    // The devices' own counters: what vtrace counted should be all of it.
    let devices = rec.rows::<BlockDeviceRow>();
    if !devices.is_empty() {
        let mut t = Table::new(
            "Per device: requests vtrace counted / the device's own counters (/sys/block/<dev>/stat)",
            vec![
                left("device", 10),
                col("reads", 16),
                col("writes", 16),
                col("flushes", 16),
                col("discards", 16),
                col("in flight peak", 15),
            ],
        );
        let counted = |dev: u32, op: &str| -> u64 {
            rows.iter()
                .filter(|r| r.dev == dev && r.op == op)
                .map(|r| r.requests)
                .sum()
        };
        for d in devices {
            t.row(vec![
                d.device.clone(),
                format!("{} / {}", counted(d.dev, "read"), d.reads),
                format!("{} / {}", counted(d.dev, "write"), d.writes),
                format!("{} / {}", counted(d.dev, "flush"), d.flushes),
                format!("{} / {}", counted(d.dev, "discard"), d.discards),
                d.inflight_peak.to_string(),
            ]);
        }
        s.table(t);
    }

    // Device latency of the busiest device and operation.
    if let Some(r) = sorted.first() {
        let mut buckets: std::collections::BTreeMap<u32, u64> = std::collections::BTreeMap::new();
        for b in hists
            .iter()
            .filter(|b| b.dev == r.dev && b.op == r.op && b.kind == "device")
        {
            *buckets.entry(log2_bucket(b.lo)).or_default() += b.count;
        }
        if let Some(kind) = FigureKind::latency_log2(&buckets) {
            s.figure(Figure {
                title: format!("Device time of {} {}s (issue -> complete)", r.device, r.op),
                value_label: "requests".into(),
                kind,
            });
        }
    }
    s.json("block", json_rows);
    s.json("block_devices", devices);
    s
}
