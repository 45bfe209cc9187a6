//! The path layer's report section: per VM instance and direction, each
//! stage of the virtio data path (its processes together): count, mean,
//! p50, p99, max, and its share of the direction's sum of means; a latency
//! histogram per stage; with followed packets (`--events`), round trips at
//! the tap decomposed and the slowest packets stage by stage.

use std::collections::BTreeMap;

use serde::Serialize;
use vtrace_common::path_stage;

use super::{
    PathHistRow, PathPacketRow, PathRow,
    packets::{self, RoundTrip},
};
use crate::{
    analysis::histogram::Histogram,
    recording::Recording,
    report_model::{Figure, FigureKind, Section, Series, Table, col, left, us},
};

/// One stage over one VM instance (the rows of the processes that ended it).
#[derive(Clone, Debug, Default, Serialize)]
pub struct StageStats {
    pub platform: String,
    /// Empty: processes no instance claims, together.
    pub instance: String,
    /// rx (host -> guest) or tx (guest -> host).
    pub direction: &'static str,
    pub stage: String,
    pub count: u64,
    pub frames: u64,
    pub sum_ns: u64,
    pub mean_ns: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    /// Its mean over the sum of the means of its direction's stages in
    /// this instance, in percent: where the direction's time goes.
    pub pct_of_direction: f64,
}

/// The stage's place in [`path_stage::NAMES`] (unknown ones last).
fn order(stage: &str) -> usize {
    path_stage::NAMES.iter().position(|n| *n == stage).unwrap_or(usize::MAX)
}

fn direction(stage: &str) -> &'static str {
    path_stage::DIRECTIONS.get(order(stage)).copied().unwrap_or("?")
}

/// How a report names the instance.
fn vm_name(platform: &str, instance: &str) -> String {
    if instance.is_empty() {
        format!("{platform} (no instance)")
    } else {
        instance.to_string()
    }
}

/// Every stage per (platform, instance), in path order, with its quantiles
/// from the in-kernel histograms and its share of its direction.
pub fn stages(rec: &Recording) -> Vec<StageStats> {
    let hists = rec.rows::<PathHistRow>();
    let mut groups: BTreeMap<(String, String, usize, String), Vec<&PathRow>> = BTreeMap::new();
    for r in rec.rows::<PathRow>() {
        groups
            .entry((
                r.owner.platform.clone(),
                r.owner.instance.clone(),
                order(&r.stage),
                r.stage.clone(),
            ))
            .or_default()
            .push(r);
    }
    let mut out: Vec<StageStats> = groups
        .into_iter()
        .map(|((platform, instance, _, stage), rows)| {
            let count: u64 = rows.iter().map(|r| r.count).sum();
            let sum_ns: u64 = rows.iter().map(|r| r.sum_ns).sum();
            let min_ns = rows.iter().map(|r| r.min_ns).min().unwrap_or(0);
            let max_ns = rows.iter().map(|r| r.max_ns).max().unwrap_or(0).max(min_ns);
            let mut h = Histogram::default();
            for b in hists
                .iter()
                .filter(|b| b.stage == stage && rows.iter().any(|r| r.owner.pid == b.pid))
            {
                h.add(b.lo_ns, b.hi_ns, b.count);
            }
            // Buckets are 12.5 % wide: trimmed to the exact extremes.
            let h = h.clamp(min_ns, max_ns);
            StageStats {
                platform,
                instance,
                direction: direction(&stage),
                count,
                frames: rows.iter().map(|r| r.frames).sum(),
                sum_ns,
                mean_ns: sum_ns / count.max(1),
                p50_ns: h.quantile(0.50).clamp(min_ns, max_ns),
                p99_ns: h.quantile(0.99).clamp(min_ns, max_ns),
                min_ns,
                max_ns,
                stage,
                pct_of_direction: 0.0,
            }
        })
        .collect();
    let mut sums: BTreeMap<(String, String, &'static str), u64> = BTreeMap::new();
    for s in &out {
        *sums
            .entry((s.platform.clone(), s.instance.clone(), s.direction))
            .or_default() += s.mean_ns;
    }
    for s in &mut out {
        let sum = sums[&(s.platform.clone(), s.instance.clone(), s.direction)];
        s.pct_of_direction = s.mean_ns as f64 * 100.0 / sum.max(1) as f64;
    }
    out
}

pub fn section(rec: &Recording, top: usize) -> Section {
    let mut s = Section::new("path", "Data path (virtio, passthrough)");
    let rows = rec.rows::<PathRow>();
    if rows.is_empty() {
        return s;
    }
    let stages = stages(rec);
    let mut vms: BTreeMap<(&str, &str), Vec<&StageStats>> = BTreeMap::new();
    for x in &stages {
        vms.entry((x.platform.as_str(), x.instance.as_str()))
            .or_default()
            .push(x);
    }
    // The VMs whose paths took the most time first.
    let mut vms: Vec<_> = vms.into_iter().collect();
    vms.sort_by_key(|(_, st)| std::cmp::Reverse(st.iter().map(|x| x.sum_ns).sum::<u64>()));
    for ((platform, instance), st) in vms.iter().take(top) {
        let mut t = Table::new(
            format!(
                "Data path of {}, stage by stage (share: of the sum of its direction's means; \
                 pt: a passed-through VF's interrupt)",
                vm_name(platform, instance)
            ),
            vec![
                left("dir", 4),
                left("stage", 13),
                col("count", 10),
                col("frames", 10),
                col("mean(us)", 10),
                col("p50(us)", 10),
                col("p99(us)", 10),
                col("max(us)", 10),
                col("share", 7),
            ],
        );
        for x in st {
            t.row(vec![
                x.direction.to_string(),
                x.stage.clone(),
                x.count.to_string(),
                x.frames.to_string(),
                us(x.mean_ns),
                us(x.p50_ns),
                us(x.p99_ns),
                us(x.max_ns),
                format!("{:.1}%", x.pct_of_direction),
            ]);
        }
        s.table(t);
    }
    passthrough(&mut s, rec, rows);
    if let Some(f) = means_figure(&stages) {
        s.figure(f);
    }
    for f in stage_histograms(rec.rows::<PathHistRow>()) {
        s.figure(f);
    }
    followed(&mut s, rec.rows::<PathPacketRow>(), top);
    for x in &stages {
        let dims = [
            ("platform", x.platform.as_str()),
            ("instance", x.instance.as_str()),
            ("stage", x.stage.as_str()),
        ];
        s.metric("path_stage_mean_ns", x.mean_ns as f64, "ns", &dims);
        s.metric("path_stage_count", x.count as f64, "events", &dims);
    }
    // The VMs' stages pooled, without instance ids: what `explain` sets
    // side by side across recordings (mean = path_sum_ns / path_events).
    let mut pooled: BTreeMap<(&str, &str), (u64, u64)> = BTreeMap::new();
    for x in stages.iter().filter(|x| !x.instance.is_empty()) {
        let e = pooled.entry((x.direction, x.stage.as_str())).or_default();
        e.0 += x.sum_ns;
        e.1 += x.count;
    }
    for ((direction, stage), (sum_ns, count)) in pooled {
        let dims = [("dir", direction), ("stage", stage)];
        s.metric("path_sum_ns", sum_ns as f64, "ns", &dims);
        s.metric("path_events", count as f64, "events", &dims);
    }
    s.json("path", rows);
    s.json("path_stages", &stages);
    s
}

/// One passthrough stage of one host IRQ (a VF's vector), pooled over the
/// processes that ended it.
#[derive(Clone, Debug, Serialize)]
pub struct PassthroughStage {
    pub instance: String,
    pub irq: u32,
    /// The IRQ's name (`vfio-msix[0](0000:00:12.0)`: vector 0 of that VF).
    pub name: String,
    /// The host's count of the IRQ (the hardirqs table).
    pub host_irqs: u64,
    pub stage: String,
    pub count: u64,
    pub mean_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
}

/// The passthrough stages per VF vector: the host's hardirq, the delay to
/// KVM's MSI, to the injection (the vCPU woken and run), to the guest entry.
pub fn passthrough_stages(rec: &Recording) -> Vec<PassthroughStage> {
    let mut irqs: BTreeMap<u32, (String, String, u64)> = BTreeMap::new();
    for r in rec.rows::<crate::layers::cpu::IrqRow>() {
        let e = irqs
            .entry(r.irq)
            .or_insert_with(|| (r.name.clone(), r.instance.clone(), 0));
        e.2 += r.count;
    }
    // (irq, stage order) -> (stage, count, sum, min, max)
    type Pooled = (String, u64, u64, u64, u64);
    let mut groups: BTreeMap<(u32, usize), Pooled> = BTreeMap::new();
    for r in rec.rows::<PathRow>().iter().filter(|r| r.stage.starts_with("pt_")) {
        let e = groups
            .entry((r.irq, order(&r.stage)))
            .or_insert_with(|| (r.stage.clone(), 0, 0, u64::MAX, 0));
        e.1 += r.count;
        e.2 += r.sum_ns;
        e.3 = e.3.min(r.min_ns);
        e.4 = e.4.max(r.max_ns);
    }
    groups
        .into_iter()
        .map(|((irq, _), (stage, count, sum_ns, min_ns, max_ns))| {
            let (name, instance, host_irqs) = irqs.get(&irq).cloned().unwrap_or_default();
            PassthroughStage {
                instance,
                irq,
                name,
                host_irqs,
                stage,
                count,
                mean_ns: sum_ns / count.max(1),
                min_ns,
                max_ns,
            }
        })
        .collect()
}

fn passthrough(s: &mut Section, rec: &Recording, rows: &[PathRow]) {
    if !rows.iter().any(|r| r.stage.starts_with("pt_")) {
        return;
    }
    let stages = passthrough_stages(rec);
    let mut t = Table::new(
        "Passthrough path per VF interrupt: the host's hardirq (pt_hardirq), and in sequence its MSI set by \
         KVM (pt_signal), its injection once the vCPU runs (pt_inject: wake-up and run-queue wait included), \
         the guest entry (pt_entry)",
        vec![
            left("instance", 16),
            col("irq", 5),
            left("name", 28).gap(1),
            col("host irqs", 10),
            left("stage", 11).gap(2),
            col("count", 8),
            col("mean(us)", 10),
            col("min(us)", 10),
            col("max(us)", 10),
        ],
    );
    for x in &stages {
        t.row(vec![
            x.instance.clone(),
            x.irq.to_string(),
            x.name.clone(),
            x.host_irqs.to_string(),
            x.stage.clone(),
            x.count.to_string(),
            us(x.mean_ns),
            us(x.min_ns),
            us(x.max_ns),
        ]);
        let dims = [
            ("instance", x.instance.as_str()),
            ("irq", x.name.as_str()),
            ("stage", x.stage.as_str()),
        ];
        s.metric("path_passthrough_mean_ns", x.mean_ns as f64, "ns", &dims);
    }
    s.table(t);
    s.json("path_passthrough", &stages);
}

/// Each instance's direction as a bar of its stages' means, stacked in
/// path order: where a frame's way through the host goes.
fn means_figure(stages: &[StageStats]) -> Option<Figure> {
    let mut bars: Vec<(&str, &str, &str)> = Vec::new();
    for x in stages {
        let bar = (x.platform.as_str(), x.instance.as_str(), x.direction);
        if !bars.contains(&bar) {
            bars.push(bar);
        }
    }
    if bars.is_empty() {
        return None;
    }
    let series = path_stage::NAMES
        .iter()
        .filter(|name| stages.iter().any(|x| x.stage == **name))
        .map(|name| Series {
            name: name.to_string(),
            values: bars
                .iter()
                .map(|&(platform, instance, dir)| {
                    stages
                        .iter()
                        .filter(|x| {
                            x.platform == platform && x.instance == instance && x.direction == dir && x.stage == *name
                        })
                        .map(|x| x.mean_ns as f64 / 1e3)
                        .sum()
                })
                .collect(),
        })
        .collect();
    Some(Figure {
        title: "Mean latency of each stage of the virtio data path".into(),
        value_label: "mean latency (us), stages stacked".into(),
        kind: FigureKind::StackedBars {
            categories: bars
                .iter()
                .map(|(platform, instance, dir)| format!("{} {dir}", vm_name(platform, instance)))
                .collect(),
            series,
        },
    })
}

/// A latency histogram per stage, the VMs' processes together (power-of-two
/// buckets, from the 8-per-power path_hists).
fn stage_histograms(hists: &[PathHistRow]) -> Vec<Figure> {
    path_stage::NAMES
        .iter()
        .filter_map(|stage| {
            let mut log2: BTreeMap<u32, u64> = BTreeMap::new();
            for b in hists.iter().filter(|b| b.stage == *stage) {
                *log2.entry(b.lo_ns.max(1).ilog2()).or_default() += b.count;
            }
            Some(Figure {
                title: format!("Latency of the virtio path's {stage} stage"),
                value_label: "events".into(),
                kind: FigureKind::latency_log2(&log2)?,
            })
        })
        .collect()
}

/// The round trips of each VM instance: count and quantiles of the whole,
/// and each part's mean and share of the mean whole.
#[derive(Clone, Debug, Serialize)]
pub struct RoundTrips {
    pub platform: String,
    pub instance: String,
    pub count: usize,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub mean_ns: u64,
    /// (part, mean ns, p50 ns, share of the mean round trip in %), in path order.
    pub parts: Vec<(String, u64, u64, f64)>,
}

pub fn round_trips(trips: &[RoundTrip]) -> Vec<RoundTrips> {
    let mut vms: BTreeMap<(&str, &str), Vec<&RoundTrip>> = BTreeMap::new();
    for t in trips {
        vms.entry((t.platform.as_str(), t.instance.as_str()))
            .or_default()
            .push(t);
    }
    vms.into_iter()
        .map(|((platform, instance), ts)| {
            let mut totals: Vec<u64> = ts.iter().map(|t| t.total_ns).collect();
            let mean_ns = totals.iter().sum::<u64>() / totals.len() as u64;
            let mut names: Vec<&str> = Vec::new();
            for t in &ts {
                for (n, _) in &t.parts {
                    if !names.contains(&n.as_str()) {
                        names.push(n);
                    }
                }
            }
            let parts = names
                .iter()
                .map(|n| {
                    let mut v: Vec<u64> = ts
                        .iter()
                        .map(|t| t.parts.iter().filter(|p| p.0 == *n).map(|p| p.1).sum())
                        .collect();
                    let mean = v.iter().sum::<u64>() / v.len() as u64;
                    let p50 = packets::quantile(&mut v, 0.5);
                    (n.to_string(), mean, p50, mean as f64 * 100.0 / mean_ns.max(1) as f64)
                })
                .collect();
            RoundTrips {
                platform: platform.into(),
                instance: instance.into(),
                count: ts.len(),
                p50_ns: packets::quantile(&mut totals, 0.5),
                p99_ns: packets::quantile(&mut totals, 0.99),
                mean_ns,
                parts,
            }
        })
        .collect()
}

/// Followed packets: round trips at the tap decomposed, and the slowest
/// packets of each direction with every stage.
fn followed(s: &mut Section, rows: &[PathPacketRow], top: usize) {
    if rows.is_empty() {
        return;
    }
    let trips = round_trips(&packets::round_trips(rows));
    for vm in &trips {
        let mut t = Table::new(
            format!(
                "Round trips at the tap of {}: {} requests queued to it and the replies the guest put back \
                 (p50 {} us, p99 {} us); the parts sum to each",
                vm_name(&vm.platform, &vm.instance),
                vm.count,
                us(vm.p50_ns),
                us(vm.p99_ns)
            ),
            vec![
                left("part", 13),
                col("mean(us)", 10),
                col("p50(us)", 10),
                col("share", 7),
            ],
        );
        for (part, mean, p50, share) in &vm.parts {
            t.row(vec![part.clone(), us(*mean), us(*p50), format!("{share:.1}%")]);
        }
        t.row(vec![
            "(round trip)".into(),
            us(vm.mean_ns),
            us(vm.p50_ns),
            "100.0%".into(),
        ]);
        s.table(t);
        let dims = [("platform", vm.platform.as_str()), ("instance", vm.instance.as_str())];
        s.metric("path_round_trip_p50_ns", vm.p50_ns as f64, "ns", &dims);
        s.metric("path_round_trips", vm.count as f64, "events", &dims);
    }
    let mut slowest: Vec<(&PathPacketRow, u64)> = rows
        .iter()
        .map(|p| {
            let (first, last) = packets::span(p);
            (p, last - first)
        })
        .collect();
    slowest.sort_by_key(|(_, ns)| std::cmp::Reverse(*ns));
    for dir in ["rx", "tx", "pt"] {
        let named: Vec<usize> = (0..path_stage::COUNT)
            .filter(|&i| path_stage::DIRECTIONS[i] == dir)
            .collect();
        let mut cols = vec![left("vm", 22), col("at(ms)", 10), col("total(us)", 10)];
        cols.extend(named.iter().map(|&i| col(format!("{}(us)", path_stage::NAMES[i]), 17)));
        let mut t = Table::new(
            format!("The slowest {dir} packets followed, stage by stage (-: no such stage, or not seen)"),
            cols,
        );
        for (p, total) in slowest.iter().filter(|(p, _)| p.dir == dir).take(top.min(10)) {
            let st = packets::stages(p);
            let mut row = vec![
                vm_name(&p.owner.platform, &p.owner.instance),
                format!("{:.3}", packets::span(p).0 as f64 / 1e6),
                us(*total),
            ];
            row.extend(named.iter().map(|&i| {
                st.iter()
                    .find(|(s, _)| *s as usize == i)
                    .map_or("-".to_string(), |(_, ns)| us(*ns))
            }));
            t.row(row);
        }
        if !t.rows.is_empty() {
            s.table(t);
        }
    }
    s.json("path_round_trips", &trips);
    s.json(
        "path_slowest",
        slowest
            .iter()
            .take(top.min(10) * 2)
            .map(|(p, total)| {
                serde_json::json!({
                    "dir": p.dir, "platform": p.owner.platform, "instance": p.owner.instance, "total_ns": total,
                    "stages": packets::stages(p).iter().map(|(st, ns)| (path_stage::NAMES[*st as usize], *ns)).collect::<Vec<_>>(),
                })
            })
            .collect::<Vec<_>>(),
    );
}
