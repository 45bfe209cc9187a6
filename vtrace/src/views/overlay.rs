//! The overlay cost per instance, from two layers' tables: the fs layer's
//! file syscalls through overlay mounts (and its credential-switch counts)
//! beside the sample layer's stacks in overlayfs. A join of two layers sits
//! above them: it is added to the fs layer's section here.

use std::collections::BTreeMap;

use crate::{
    layers::{
        fs::{FsRow, OverlayCredsRow, summary::owner},
        sample::SampleRow,
    },
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

/// Adds the overlay cost table (where any instance used an overlay) and its
/// JSON (`overlay_cost`) to the fs section.
pub fn join(sections: &mut [Section], rec: &Recording) {
    let Some(s) = sections.iter_mut().find(|s| s.id == "fs") else {
        return;
    };
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
    s.json("overlay_cost", overlay);
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
        let e = entry(&mut instances, &s.owner.platform, &s.owner.instance);
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
            .entry((r.owner.platform.clone(), r.owner.instance.clone(), r.op.clone()))
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
                    .filter(|c| c.owner.platform == e.platform && c.owner.instance == e.instance)
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
