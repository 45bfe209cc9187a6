//! The fs layer's report section: file syscalls per process, filesystem and
//! call with their latency; the same per filesystem; and the overlay cost
//! per instance, with the method that produced it.

use std::collections::BTreeMap;

use serde_json::json;

use super::{FsHistRow, FsRow, OverlayCredsRow};
use crate::{
    analysis::histogram::Histogram,
    layers::sample::SampleRow,
    recording::{ProgramRow, Recording},
    report_model::{Section, Table, col, left, us},
};

/// The kernel functions of overlayfs's credential switch; a sampled stack
/// through any of them (the reference-count atomics below included) is
/// overlay credential time.
pub const CREDS_FUNCTIONS: [&str; 4] = [
    "ovl_override_creds",
    "ovl_revert_creds",
    "override_creds",
    "revert_creds",
];

fn owner(platform: &str, instance: &str) -> String {
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
        let h = hist_of(&|b| b.pid == r.pid && b.magic == r.magic && b.op == r.op);
        let mean = r.total_ns / r.count.max(1);
        if shown < top && r.role != "vtrace" {
            shown += 1;
            t.row(vec![
                r.pid.to_string(),
                r.comm.clone(),
                owner(&r.platform, &r.instance),
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
            "pid": r.pid, "comm": r.comm, "platform": r.platform, "instance": r.instance,
            "role": r.role, "fs": r.fs, "magic": r.magic, "op": r.op, "count": r.count, "bytes": r.bytes,
            "errors": r.errors, "total_ns": r.total_ns, "mean_ns": mean,
            "p50_ns": h.quantile(0.5), "p90_ns": h.quantile(0.9), "p99_ns": h.quantile(0.99),
            "max_ns": r.max_ns,
        }));
        let dims = [
            ("fs", r.fs.as_str()),
            ("op", r.op.as_str()),
            ("platform", r.platform.as_str()),
        ];
        s.metric("file_calls", r.count as f64, "calls", &dims);
        s.metric("file_bytes", r.bytes as f64, "bytes", &dims);
    }
    s.table(t);

    // Per filesystem and call, every process together.
    let mut by_fs: BTreeMap<(&str, &str), (u64, u64, u64, u64)> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.role != "vtrace") {
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

    let overlay = overlay_cost(rec);
    if !overlay.is_empty() {
        let mut t = Table::new(
            "Overlay cost per instance: sampled time in overlayfs's credential switch (ovl_override_creds / ovl_revert_creds and below) and in all of overlayfs, and what an overlay call costs over the same call on a disk filesystem",
            vec![
                left("platform/instance", 24),
                left("method", 30).gap(2),
                col("creds share", 12),
                col("ovl_* share", 12),
                col("creds calls", 12),
                col("overlay calls", 14),
                col("overlay mean(us)", 17),
                col("lower mean(us)", 15),
            ],
        );
        for o in &overlay {
            t.row(vec![
                owner(&o.platform, &o.instance),
                o.method.clone(),
                o.sampled_share.map_or("-".into(), |f| format!("{:.1} %", f * 100.0)),
                o.sampled_overlay_share
                    .map_or("-".into(), |f| format!("{:.1} %", f * 100.0)),
                o.calls.map_or("-".into(), |c| c.to_string()),
                o.overlay_calls.to_string(),
                o.overlay_mean_ns.map_or("-".into(), us),
                o.lower_mean_ns.map_or("-".into(), us),
            ]);
        }
        s.table(t);
    }
    s.json("files", json_rows);
    s.json("files_by_fs", fs_json);
    s.json("overlay_cost", overlay);
    s.json("overlay_creds", rec.rows::<OverlayCredsRow>());
    s
}

/// One instance's overlay cost and the method that produced it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct OverlayCost {
    pub platform: String,
    pub instance: String,
    /// "fentry calls" / "kprobe calls" (counted in the kernel, every
    /// instance together), "sampled stacks" (this kernel cannot probe the
    /// functions), or both.
    pub method: String,
    /// Share of the instance's sampled CPU time inside the credential functions.
    pub sampled_share: Option<f64>,
    pub sampled_in_creds: u64,
    /// Share of its sampled CPU time in any overlayfs function (`ovl_*`).
    pub sampled_overlay_share: Option<f64>,
    pub sampled_in_overlay: u64,
    pub samples: u64,
    /// Calls of ovl_override_creds counted by a probe: the instance's (all
    /// instances' together in recordings without per-process counts).
    pub calls: Option<u64>,
    /// File syscalls of the instance that went to an overlay mount.
    pub overlay_calls: u64,
    /// Mean latency of those calls, and of the same calls (weighted the
    /// same, call by call) on the instance's other disk filesystems.
    pub overlay_mean_ns: Option<u64>,
    pub lower_mean_ns: Option<u64>,
}

/// Filesystems an overlay's layers live on (not pseudo filesystems).
const DISK_FS: [&str; 5] = ["ext4", "xfs", "btrfs", "tmpfs", "zfs"];

/// One row per instance that used an overlay mount or sampled a credential switch.
pub fn overlay_cost(rec: &Recording) -> Vec<OverlayCost> {
    let rows = rec.rows::<FsRow>();
    let samples = rec.rows::<SampleRow>();
    let probed: Option<(String, u64)> = rec
        .rows::<ProgramRow>()
        .iter()
        .find(|p| p.probe == "ovl_override_creds")
        .map(|p| (format!("{} calls", p.method), p.events));
    let mut instances: BTreeMap<(String, String), OverlayCost> = BTreeMap::new();
    fn entry<'a>(
        instances: &'a mut BTreeMap<(String, String), OverlayCost>,
        platform: &str,
        instance: &str,
    ) -> &'a mut OverlayCost {
        instances
            .entry((platform.to_string(), instance.to_string()))
            .or_insert_with(|| OverlayCost {
                platform: platform.to_string(),
                instance: instance.to_string(),
                method: String::new(),
                sampled_share: None,
                sampled_in_creds: 0,
                sampled_overlay_share: None,
                sampled_in_overlay: 0,
                samples: 0,
                calls: None,
                overlay_calls: 0,
                overlay_mean_ns: None,
                lower_mean_ns: None,
            })
    }
    for s in samples {
        let e = entry(&mut instances, &s.platform, &s.instance);
        e.samples += s.count;
        let in_creds = s.stack.split(';').any(|f| {
            f.strip_suffix("_[k]")
                .is_some_and(|name| CREDS_FUNCTIONS.contains(&name))
        });
        if in_creds {
            e.sampled_in_creds += s.count;
        }
        if s.stack.split(';').any(|f| f.starts_with("ovl_") && f.ends_with("_[k]")) {
            e.sampled_in_overlay += s.count;
        }
    }
    // Per instance and call: (overlay calls, ns) and (lower calls, ns).
    let mut per_call: BTreeMap<(String, String, String), [(u64, u64); 2]> = BTreeMap::new();
    for r in rows {
        let side = if r.fs == "overlay" {
            0
        } else if DISK_FS.contains(&r.fs.as_str()) {
            1
        } else {
            continue;
        };
        let e = per_call
            .entry((r.platform.clone(), r.instance.clone(), r.op.clone()))
            .or_default();
        e[side].0 += r.count;
        e[side].1 += r.total_ns;
    }
    // The calls both sides made, the lower side weighted by the overlay
    // side's counts (a different mix of calls must not read as a cost):
    // per instance (overlay ns, weighted lower ns, calls weighted).
    let mut compared: BTreeMap<(String, String), (u64, u64, u64)> = BTreeMap::new();
    for ((platform, instance, _op), [overlay, lower]) in &per_call {
        entry(&mut instances, platform, instance).overlay_calls += overlay.0;
        if overlay.0 > 0 && lower.0 > 0 {
            let c = compared.entry((platform.clone(), instance.clone())).or_default();
            c.0 += overlay.1;
            c.1 += lower.1 * overlay.0 / lower.0;
            c.2 += overlay.0;
        }
    }
    let mut out: Vec<OverlayCost> = instances
        .into_values()
        .filter(|e| e.overlay_calls > 0 || e.sampled_in_overlay > 0)
        .collect();
    for e in &mut out {
        if let Some(&(overlay_ns, lower_ns, calls)) = compared.get(&(e.platform.clone(), e.instance.clone())) {
            e.overlay_mean_ns = Some(overlay_ns / calls);
            e.lower_mean_ns = Some(lower_ns / calls);
        }
        let mut methods = Vec::new();
        if let Some((method, calls)) = &probed {
            methods.push(method.clone());
            // Per instance where the kernel counted per process; else every instance's together.
            let creds = rec.rows::<OverlayCredsRow>();
            e.calls = Some(if creds.is_empty() {
                *calls
            } else {
                creds
                    .iter()
                    .filter(|c| c.platform == e.platform && c.instance == e.instance)
                    .map(|c| c.override_calls)
                    .sum()
            });
        }
        if e.samples > 0 {
            methods.push("sampled stacks".to_string());
            e.sampled_share = Some(e.sampled_in_creds as f64 / e.samples as f64);
            e.sampled_overlay_share = Some(e.sampled_in_overlay as f64 / e.samples as f64);
        }
        if methods.is_empty() {
            methods.push("latency only (add --sample)".to_string());
        }
        e.method = methods.join(" + ");
    }
    out
}
