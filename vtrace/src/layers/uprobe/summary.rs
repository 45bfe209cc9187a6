//! The uprobe layer's report section: calls of user-space functions per process.

use serde_json::{Value, json};

use super::{UprobeHistRow, UprobeRow};
use crate::{
    recording::Recording,
    report_model::{Section, Table, col, left},
};

pub fn section(rec: &Recording) -> Section {
    let mut s = Section::new("uprobe", "User-space probes");
    let rows = rec.rows::<UprobeRow>();
    if !rows.is_empty() {
        let mut t = Table::new(
            "User-space functions (uprobes)",
            vec![
                left("probe", 34),
                col("pid", 8),
                left("comm", 16).gap(1),
                left("owner", 16),
                col("calls", 10),
                col("bytes", 12),
                col("mean", 9),
                col("mean lat(us)", 14),
            ],
        );
        for u in rows {
            let owner = if u.instance.is_empty() {
                u.platform.clone()
            } else {
                u.instance.clone()
            };
            let mean = if u.bytes > 0 {
                (u.bytes / u.calls.max(1)).to_string()
            } else {
                "-".into()
            };
            let lat = if u.returns > 0 {
                format!("{:.2}", u.latency_sum_ns as f64 / u.returns as f64 / 1e3)
            } else {
                "-".into()
            };
            t.row(vec![
                u.probe.clone(),
                u.pid.to_string(),
                u.comm.clone(),
                owner.clone(),
                u.calls.to_string(),
                u.bytes.to_string(),
                mean,
                lat,
            ]);
            s.metric(
                "calls",
                u.calls as f64,
                "calls",
                &[("probe", &u.probe), ("owner", &owner)],
            );
        }
        s.table(t);
    }
    let json_rows: Vec<Value> = rows
        .iter()
        .map(|u| {
            let hist = |kind: &str| -> Vec<Value> {
                rec.rows::<UprobeHistRow>()
                    .iter()
                    .filter(|h| h.probe == u.probe && h.pid == u.pid && h.kind == kind)
                    .map(|h| json!({"le": h.le, "count": h.count}))
                    .collect()
            };
            json!({"probe": u.probe, "pid": u.pid, "comm": u.comm, "platform": u.platform, "instance": u.instance,
                   "calls": u.calls, "bytes": u.bytes, "size_hist": hist("size"), "returns": u.returns,
                   "latency_sum_ns": u.latency_sum_ns, "latency_hist": hist("latency")})
        })
        .collect();
    s.json("uprobes", json_rows);
    s
}
