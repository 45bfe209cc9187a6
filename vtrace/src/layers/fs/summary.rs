//! The fs layer's report section: file syscalls per process, filesystem and
//! call with their latency; the same per filesystem. (The overlay cost per
//! instance joins these with the sample layer's stacks: `report/overlay.rs`.)

use std::collections::BTreeMap;

use serde_json::json;

use super::{FsHistRow, FsRow, OverlayCredsRow};
use crate::{
    analysis::histogram::Histogram,
    recording::Recording,
    report_model::{Section, Table, col, left, us},
};

pub fn owner(platform: &str, instance: &str) -> String {
    if instance.is_empty() {
        platform.to_string()
    } else {
        format!("{platform}/{instance}")
    }
}

pub fn section(rec: &Recording, top: usize) -> Section {
    let mut s = Section::new("files", "File I/O");
    let rows = rec.rows::<FsRow>();
    if rows.is_empty() {
        return s;
    }
    let hists = rec.rows::<FsHistRow>();
    let hist_of = |pred: &dyn Fn(&FsHistRow) -> bool| {
        let mut h = Histogram::default();
        for b in hists.iter().filter(|b| pred(b)) {
            h.add(b.lo_ns, b.hi_ns, b.count);
        }
        h
    };

    // vtrace's own reads of /proc stay in the JSON rows (role "vtrace"), not in the tables.
    let mut sorted: Vec<&FsRow> = rows.iter().collect();
    sorted.sort_by_key(|r| std::cmp::Reverse(r.total_ns));
    let mut t = Table::new(
        "File syscalls per process, filesystem and call (latency: entry -> exit)",
        vec![
            left("pid", 8),
            left("comm", 16),
            left("platform/instance", 22).gap(2),
            left("fs", 12),
            left("call", 11),
            col("calls", 9),
            col("MiB", 9),
            col("errors", 7),
            col("mean(us)", 10),
            col("p50(us)", 9),
            col("p99(us)", 9),
        ],
    );
    let mut json_rows = Vec::new();
    let mut shown = 0;
    for r in &sorted {
        let h = hist_of(&|b| b.pid == r.owner.pid && b.magic == r.magic && b.op == r.op);
        let mean = r.total_ns / r.count.max(1);
        if shown < top && r.owner.role != "vtrace" {
            shown += 1;
            t.row(vec![
                r.owner.pid.to_string(),
                r.owner.comm.clone(),
                owner(&r.owner.platform, &r.owner.instance),
                r.fs.clone(),
                r.op.clone(),
                r.count.to_string(),
                format!("{:.2}", r.bytes as f64 / (1 << 20) as f64),
                r.errors.to_string(),
                us(mean),
                us(h.quantile(0.5)),
                us(h.quantile(0.99)),
            ]);
        }
        json_rows.push(json!({
            "pid": r.owner.pid, "comm": r.owner.comm, "platform": r.owner.platform, "instance": r.owner.instance,
            "role": r.owner.role, "fs": r.fs, "magic": r.magic, "op": r.op, "count": r.count, "bytes": r.bytes,
            "errors": r.errors, "total_ns": r.total_ns, "mean_ns": mean,
            "p50_ns": h.quantile(0.5), "p90_ns": h.quantile(0.9), "p99_ns": h.quantile(0.99),
            "max_ns": r.max_ns,
        }));
        let dims = [
            ("fs", r.fs.as_str()),
            ("op", r.op.as_str()),
            ("platform", r.owner.platform.as_str()),
        ];
        s.metric("file_calls", r.count as f64, "calls", &dims);
        s.metric("file_bytes", r.bytes as f64, "bytes", &dims);
    }
    s.table(t);

    // Per filesystem and call, every process together.
    let mut by_fs: BTreeMap<(&str, &str), (u64, u64, u64, u64)> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.owner.role != "vtrace") {
        let e = by_fs.entry((r.fs.as_str(), r.op.as_str())).or_default();
        e.0 += r.count;
        e.1 += r.bytes;
        e.2 += r.errors;
        e.3 += r.total_ns;
    }
    let mut t = Table::new(
        "File syscalls per filesystem and call, every process",
        vec![
            left("fs", 12),
            left("call", 11),
            col("calls", 10),
            col("MiB", 9),
            col("errors", 7),
            col("mean(us)", 10),
            col("p50(us)", 9),
            col("p99(us)", 9),
        ],
    );
    let mut fs_json = Vec::new();
    let magic_of: BTreeMap<&str, u64> = rows.iter().map(|r| (r.fs.as_str(), r.magic)).collect();
    for ((fs, op), (count, bytes, errors, total)) in &by_fs {
        let magic = magic_of[fs];
        let h = hist_of(&|b| b.magic == magic && b.op == *op);
        let mean = total / count.max(&1);
        t.row(vec![
            fs.to_string(),
            op.to_string(),
            count.to_string(),
            format!("{:.2}", *bytes as f64 / (1 << 20) as f64),
            errors.to_string(),
            us(mean),
            us(h.quantile(0.5)),
            us(h.quantile(0.99)),
        ]);
        fs_json.push(json!({
            "fs": fs, "op": op, "count": count, "bytes": bytes, "errors": errors,
            "mean_ns": mean, "p50_ns": h.quantile(0.5), "p99_ns": h.quantile(0.99),
        }));
    }
    s.table(t);

    s.json("files", json_rows);
    s.json("files_by_fs", fs_json);
    s.json("overlay_creds", rec.rows::<OverlayCredsRow>());
    s
}
