//! The tun layer's report section: frames and bytes per tap, function and
//! process, with the attach method that counted them.

use serde_json::json;

use super::TunRow;
use crate::{
    recording::Recording,
    report_model::{Section, Table, col, left},
};

pub fn section(rec: &Recording, top: usize) -> Section {
    let mut s = Section::new("tun", "tun/tap and vhost-net functions");
    let rows = rec.rows::<TunRow>();
    if rows.is_empty() {
        return s;
    }
    let mut sorted: Vec<&TunRow> = rows.iter().collect();
    sorted.sort_by_key(|r| std::cmp::Reverse(r.frames.max(r.calls)));
    let mut t = Table::new(
        "tun/tap and vhost-net functions per device and process (frames: a vhost-net batch is many frames in one call)",
        vec![
            left("device", 16),
            left("function", 15),
            left("pid", 8),
            left("comm", 16),
            left("role", 8),
            left("method", 7).gap(2),
            col("calls", 10),
            col("frames", 10),
            col("frames/call", 12),
            col("KiB", 10),
            col("mean B", 8),
        ],
    );
    for r in sorted.iter().take(top) {
        t.row(vec![
            if r.device.is_empty() {
                "-".into()
            } else {
                r.device.clone()
            },
            r.function.clone(),
            r.owner.pid.to_string(),
            r.owner.comm.clone(),
            r.owner.role.clone(),
            r.method.clone(),
            r.calls.to_string(),
            r.frames.to_string(),
            format!("{:.2}", r.frames as f64 / r.calls.max(1) as f64),
            format!("{:.1}", r.bytes as f64 / 1024.0),
            (r.bytes / r.frames.max(1)).to_string(),
        ]);
    }
    s.table(t);
    let json_rows: Vec<_> = sorted
        .iter()
        .map(|r| {
            let sizes: Vec<u64> = r.sizes.split(',').filter_map(|v| v.parse().ok()).collect();
            json!({
                "device": r.device, "netns": r.netns, "ifindex": r.ifindex, "function": r.function,
                "pid": r.owner.pid, "comm": r.owner.comm, "platform": r.owner.platform, "instance": r.owner.instance, "role": r.owner.role,
                "method": r.method, "calls": r.calls, "frames": r.frames, "bytes": r.bytes,
                "sizes": {"edges": [64, 128, 256, 512, 1024, 2048, 4096], "frames": sizes},
            })
        })
        .collect();
    s.json("tun", json_rows);
    s
}
