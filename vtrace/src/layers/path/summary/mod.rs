//! The path layer's report section: per VM instance and direction, each
//! stage of the virtio data path (its processes together): count, mean,
//! p50, p99, max, and its share of the direction's sum of means; a latency
//! histogram per stage; with followed packets (`--events`), round trips at
//! the tap decomposed and the slowest packets stage by stage.

mod followed;
mod passthrough;

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
                 pt: a passed-through VF's interrupt; -: frames counted, none timed)",
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
            // Frames counted at a tracepoint whose timing kprobe was missed
            // every time: no latency, rather than a latency of 0.
            let timed = |v: String| if x.count == 0 { "-".to_string() } else { v };
            t.row(vec![
                x.direction.to_string(),
                x.stage.clone(),
                x.count.to_string(),
                x.frames.to_string(),
                timed(us(x.mean_ns)),
                timed(us(x.p50_ns)),
                timed(us(x.p99_ns)),
                timed(us(x.max_ns)),
                timed(format!("{:.1}%", x.pct_of_direction)),
            ]);
        }
        s.table(t);
    }
    passthrough::add_section(&mut s, rec, rows);
    if let Some(f) = means_figure(&stages) {
        s.figure(f);
    }
    for f in stage_histograms(rec.rows::<PathHistRow>()) {
        s.figure(f);
    }
    followed::add_section(&mut s, rec.rows::<PathPacketRow>(), top);
    for x in &stages {
        let dims = [
            ("platform", x.platform.as_str()),
            ("instance", x.instance.as_str()),
            ("stage", x.stage.as_str()),
        ];
        if x.count > 0 {
            s.metric("path_stage_mean_ns", x.mean_ns as f64, "ns", &dims);
        }
        s.metric("path_stage_count", x.count as f64, "events", &dims);
    }
    // The VMs' stages pooled, without instance ids: what `explain` sets
    // side by side across recordings (mean = path_sum_ns / path_events). A
    // guest's own stages have no instance (the guest's recording has no
    // platform): they are its VM's.
    let mut pooled: BTreeMap<(&str, &str), (u64, u64)> = BTreeMap::new();
    for x in stages
        .iter()
        .filter(|x| !x.instance.is_empty() || x.direction.starts_with("guest"))
    {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report_model::Block;

    /// A stage whose frames were counted but none timed (its timing kprobe
    /// missed every time) shows no latency, where a timed one shows its own.
    #[test]
    fn an_untimed_stage_shows_its_frames_and_no_latency() {
        let row = |stage: &str, count: u64, sum_ns: u64, frames: u64| PathRow {
            stage: stage.into(),
            count,
            sum_ns,
            min_ns: sum_ns / count.max(1),
            max_ns: sum_ns / count.max(1),
            frames,
            ..Default::default()
        };
        let mut rec = Recording::default();
        rec.tables
            .put(vec![row("guest_rx_stack", 0, 0, 5), row("guest_rx_poll", 4, 8_000, 4)]);
        let section = section(&rec, 5);
        let table = section
            .blocks
            .iter()
            .find_map(|b| match b {
                Block::Table(t) => Some(t),
                _ => None,
            })
            .expect("the stage table");
        let cells = |stage: &str| {
            table
                .rows
                .iter()
                .find(|r| r[1] == stage)
                .unwrap_or_else(|| panic!("no {stage} row: {:?}", table.rows))
                .clone()
        };
        assert_eq!(cells("guest_rx_stack")[2..], ["0", "5", "-", "-", "-", "-", "-"]);
        assert_eq!(cells("guest_rx_poll")[2..5], ["4", "4", "2.00"]);
        let means: Vec<&str> = section
            .metrics
            .iter()
            .filter(|m| m.key == "path_stage_mean_ns")
            .map(|m| m.dims["stage"].as_str())
            .collect();
        assert_eq!(means, ["guest_rx_poll"]);
    }
}
