//! `vtrace report BENCH_DIR`: the studies' figures from a bench matrix.
//! Throughput per platform and parameter (mean, min..max over the
//! repetitions), CPU per operation by role, packets and bytes per hop per
//! operation, round-trip times; each as tables, figures, JSON and CSV with
//! the same numbers, all computed from the cells' recordings.

use std::path::Path;

use serde::Serialize;
use serde_json::json;

use super::{Cell, Matrix, Workload, error_path, run_path};
use crate::{
    Result,
    compare::{MetricId, Subject},
    recording,
    report::model::{Figure, FigureKind, RangedSeries, Section, Series, Table, amount, col, left},
};

/// Mean and range over a cell's repetitions.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct Spread {
    pub mean: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    fn of(values: &[f64]) -> Option<Spread> {
        if values.is_empty() {
            return None;
        }
        Some(Spread {
            mean: values.iter().sum::<f64>() / values.len() as f64,
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        })
    }
}

/// A packet hop per operation.
#[derive(Clone, Debug, Serialize)]
pub struct Hop {
    pub device: String,
    pub hop: String,
    pub packets_per_op: f64,
    pub bytes_per_packet: f64,
}

/// Everything the report says of one cell.
#[derive(Clone, Debug, Serialize)]
pub struct CellSummary {
    pub platform: String,
    pub workload: String,
    pub param: String,
    pub stress: u32,
    pub neighbour: bool,
    pub runs: usize,
    pub errors: Vec<String>,
    /// What one operation is (request, MiB, reply).
    pub unit: Option<String>,
    /// Operations per second as the workload measured them.
    pub ops_per_s: Option<Spread>,
    /// CPU ns per operation by role (vtrace's own and stressors' left out), largest first.
    pub cpu_ns_per_op: Vec<(String, f64)>,
    pub cpu_ns_per_op_total: f64,
    pub hops: Vec<Hop>,
    /// ping round-trip times over every reply of every run (µs).
    pub rtt_us: Option<Rtt>,
    /// Run-queue wait per operation by role (ns; the run-queue layer's,
    /// stressors and vtrace left out), largest first; empty without it.
    pub runq_ns_per_op: Vec<(String, f64)>,
    /// fio cells: the victim's latency as fio measured it, and who else
    /// had requests on its disk meanwhile.
    pub victim: Option<Victim>,
    /// Module-load cells: file syscalls per module by call (the fs
    /// layer's rows of the instance's processes, or node's on the host),
    /// with their mean latency: (call, calls per module, mean ns).
    pub file_calls_per_op: Vec<(String, f64, f64)>,
}

/// A fio cell's reads (medians over the runs) and the other requests on
/// the same device during them (summed over the runs).
#[derive(Clone, Debug, Serialize)]
pub struct Victim {
    pub clat_p50_us: f64,
    pub clat_p99_us: f64,
    pub device: String,
    /// Its reads' time on the device (vtrace's block layer), median p50 over the runs.
    pub device_p50_us: f64,
    /// (owner and operation, requests, MiB) of every other cgroup on that device.
    pub others: Vec<(String, u64, f64)>,
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct Rtt {
    pub replies: usize,
    pub p50: f64,
    pub p99: f64,
    pub mean: f64,
    pub max: f64,
}

/// Reads every cell of the bench under `root`.
pub fn summarize(root: &Path) -> Result<(Matrix, Vec<CellSummary>)> {
    let m = Matrix::load(root)?;
    let mut cells = Vec::new();
    for cell in m.cells() {
        cells.push(summarize_cell(root, &m, &cell)?);
    }
    Ok((m, cells))
}

fn summarize_cell(root: &Path, m: &Matrix, cell: &Cell) -> Result<CellSummary> {
    let dir = cell.dir(root);
    let mut recs = Vec::new();
    let mut outputs = Vec::new();
    let mut errors = Vec::new();
    for rep in 1..=m.repeat {
        let path = run_path(&dir, rep);
        if path.join(recording::META).is_file() {
            outputs.push(std::fs::read_to_string(path.join("workload.out")).unwrap_or_default());
            recs.push(crate::layers::read(&path)?);
        } else if let Ok(why) = std::fs::read_to_string(error_path(&dir, rep)) {
            errors.push(format!("rep {rep}: {}", why.trim()));
        }
    }
    let subject = Subject::of(cell.name(), &recs);
    let rates: Vec<f64> = recs.iter().filter_map(|r| r.ops()?.per_second).collect();
    let per_op = |id: &MetricId| subject.metrics.get(id).and_then(|v| v.per_op).unwrap_or(0.0);
    let dim = |id: &MetricId, name: &str| id.1.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());

    // A metric per operation summed by role, the roles left out left out.
    let by_role = |key: &str| {
        let mut roles: Vec<(String, f64)> = Vec::new();
        for id in subject.metrics.keys().filter(|(k, _)| k == key) {
            let role = dim(id, "role").unwrap_or_default();
            if crate::platforms::ROLES_LEFT_OUT.contains(&role.as_str()) {
                continue;
            }
            match roles.iter_mut().find(|(r, _)| *r == role) {
                Some(e) => e.1 += per_op(id),
                None => roles.push((role, per_op(id))),
            }
        }
        roles.retain(|(_, ns)| *ns > 0.0);
        roles.sort_by(|a, b| b.1.total_cmp(&a.1));
        roles
    };
    let roles = by_role("cpu_ns");

    let mut hops: Vec<Hop> = subject
        .metrics
        .keys()
        .filter(|(k, _)| k == "packets")
        .map(|id| {
            let bytes_id = ("bytes".to_string(), id.1.clone());
            let packets = subject.metrics[id].value;
            Hop {
                device: dim(id, "device").unwrap_or_default(),
                hop: dim(id, "hop").unwrap_or_default(),
                packets_per_op: per_op(id),
                bytes_per_packet: subject.metrics.get(&bytes_id).map_or(0.0, |b| b.value) / packets.max(1.0),
            }
        })
        .filter(|h| h.packets_per_op > 0.0)
        .collect();
    hops.sort_by(|a, b| b.packets_per_op.total_cmp(&a.packets_per_op));

    let rtt_us = (cell.workload == Workload::Ping)
        .then(|| {
            let mut all: Vec<f64> = outputs
                .iter()
                .flat_map(|o| crate::workload::ops::ping_rtts_ms(o))
                .collect();
            all.sort_by(f64::total_cmp);
            let q = |p: f64| all[((all.len() - 1) as f64 * p).round() as usize] * 1e3;
            (!all.is_empty()).then(|| Rtt {
                replies: all.len(),
                p50: q(0.5),
                p99: q(0.99),
                mean: all.iter().sum::<f64>() / all.len() as f64 * 1e3,
                max: q(1.0),
            })
        })
        .flatten();
    Ok(CellSummary {
        platform: cell.platform.clone(),
        workload: cell.workload.name().into(),
        param: cell.param.clone(),
        stress: cell.stress,
        neighbour: cell.neighbour,
        runs: recs.len(),
        errors,
        unit: subject.ops.as_ref().map(|o| o.unit.clone()),
        ops_per_s: Spread::of(&rates),
        // + 0.0: an empty sum is -0.0.
        cpu_ns_per_op_total: roles.iter().map(|(_, ns)| ns).sum::<f64>() + 0.0,
        cpu_ns_per_op: roles,
        hops,
        rtt_us,
        runq_ns_per_op: by_role("runq_delay_ns"),
        file_calls_per_op: if cell.workload == Workload::Modules {
            file_calls(&recs, &cell.platform)
        } else {
            Vec::new()
        },
        victim: (cell.workload == Workload::Fio)
            .then(|| {
                let neighbours: Vec<u64> = std::fs::read_to_string(dir.join(super::NEIGHBOUR_CGROUP))
                    .unwrap_or_default()
                    .lines()
                    .filter_map(|id| id.trim().parse().ok())
                    .collect();
                victim(&recs, &neighbours)
            })
            .flatten(),
    })
}

/// File syscalls per operation by call over the runs: the instance's
/// processes (every process on the host platform that is node).
fn file_calls(recs: &[recording::Recording], platform: &str) -> Vec<(String, f64, f64)> {
    use crate::layers::fs::FsRow;
    let mut by_op: Vec<(String, u64, u64)> = Vec::new();
    let mut ops = 0.0;
    for r in recs {
        ops += r.ops().map_or(0.0, |o| o.count);
        for f in r.rows::<FsRow>().iter().filter(|f| {
            if platform == crate::platforms::HOST {
                f.comm == "node"
            } else {
                f.platform == platform
            }
        }) {
            match by_op.iter_mut().find(|(op, ..)| *op == f.op) {
                Some(e) => {
                    e.1 += f.count;
                    e.2 += f.total_ns;
                }
                None => by_op.push((f.op.clone(), f.count, f.total_ns)),
            }
        }
    }
    let mut out: Vec<(String, f64, f64)> = by_op
        .into_iter()
        .map(|(op, n, ns)| (op, n as f64 / ops.max(1.0), ns as f64 / n.max(1) as f64))
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1));
    out
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// The victim's figures from a fio cell's recordings: its own cgroup is the
/// one with the most reads on the busiest device.
fn victim(recs: &[recording::Recording], neighbour_cgroups: &[u64]) -> Option<Victim> {
    use crate::layers::block::{BlockHistRow, BlockRow};
    let mut p50 = Vec::new();
    let mut p99 = Vec::new();
    let mut device_p50 = Vec::new();
    let mut device = String::new();
    let mut others: Vec<(String, u64, f64)> = Vec::new();
    for r in recs {
        let fio = r.meta.workload.as_ref()?.fio.iter().find(|j| j.op == "read")?;
        p50.push(fio.clat_p50_ns as f64 / 1e3);
        p99.push(fio.clat_p99_ns as f64 / 1e3);
        let rows = r.rows::<BlockRow>();
        // Its reads as requests to a disk: fewer than half of fio's I/Os
        // means they were served above it (gVisor's sentry keeps a page
        // cache, O_DIRECT or not), and the disk's readers are others.
        let mine = rows
            .iter()
            .filter(|b| b.op == "read" && b.requests * 2 >= fio.ios)
            .max_by_key(|b| b.requests);
        // The disk: its reads', else the busiest one.
        let Some(dev) = mine.or_else(|| rows.iter().max_by_key(|b| b.requests)).map(|b| b.dev) else {
            continue;
        };
        if let Some(mine) = mine {
            device = mine.device.clone();
            let mut h = crate::analysis::histogram::Histogram::default();
            for b in r.rows::<BlockHistRow>().iter().filter(|b| {
                b.dev == mine.dev
                    && b.op == "read"
                    && b.cgroup_id == mine.cgroup_id
                    && b.pid == mine.pid
                    && b.kind == "device"
            }) {
                h.add(b.lo, b.hi, b.count);
            }
            device_p50.push(h.quantile(0.5) as f64 / 1e3);
        }
        let mine_cgroup = mine.map(|m| m.cgroup_id);
        for b in rows.iter().filter(|b| b.dev == dev && Some(b.cgroup_id) != mine_cgroup) {
            let owner = if neighbour_cgroups.contains(&b.cgroup_id) {
                format!("neighbour {}", b.op)
            } else if b.instance.is_empty() {
                format!("{} (cgroup {}) {}", b.platform, b.cgroup_id, b.op)
            } else {
                format!("{} {}", b.instance, b.op)
            };
            let mib = b.bytes as f64 / (1 << 20) as f64;
            match others.iter_mut().find(|o| o.0 == owner) {
                Some(o) => {
                    o.1 += b.requests;
                    o.2 += mib;
                }
                None => others.push((owner, b.requests, mib)),
            }
        }
    }
    others.sort_by_key(|o| std::cmp::Reverse(o.1));
    (!p50.is_empty()).then(|| Victim {
        clat_p50_us: median(p50),
        clat_p99_us: median(p99),
        device,
        device_p50_us: median(device_p50),
        others,
    })
}

/// The cell's parameter as its figures label it.
fn label(c: &CellSummary) -> String {
    let param = match c.workload.as_str() {
        "redis" => format!("{} B", c.param),
        "iperf3" => format!("window {}", c.param),
        "modules" => format!("{} modules", c.param),
        _ => c.param.clone(),
    };
    let param = if c.neighbour {
        format!("{param} +neighbour")
    } else {
        param
    };
    if c.stress > 0 {
        format!("{param} +{} stressors", c.stress)
    } else {
        param
    }
}

/// The report's sections.
pub fn sections(root: &Path, m: &Matrix, cells: &[CellSummary]) -> Vec<Section> {
    let mut head = Section::new("bench", "Bench");
    let runs: usize = cells.iter().map(|c| c.runs).sum();
    let failed: Vec<String> = cells
        .iter()
        .flat_map(|c| {
            c.errors
                .iter()
                .map(move |e| format!("{} {}: {e}", c.platform, label(c)))
        })
        .collect();
    let mut lines = vec![
        format!(
            "bench {} | platforms {} | workloads {} | {} repetitions | {} runs recorded, {} failed",
            root.display(),
            m.platforms.join(","),
            m.workloads.iter().map(|w| w.name()).collect::<Vec<_>>().join(","),
            m.repeat,
            runs,
            failed.len()
        ),
        "Every figure: the mean over the repetitions, [min, max] where shown; per operation as each workload counts it."
            .into(),
    ];
    lines.extend(failed.iter().map(|f| format!("failed: {f}")));
    head.lines(lines);
    head.json(
        "bench",
        json!({"dir": root.display().to_string(), "matrix": m, "cells": cells}),
    );
    let mut sections = vec![head];
    for w in &m.workloads {
        let mine: Vec<&CellSummary> = cells.iter().filter(|c| c.workload == w.name()).collect();
        if !mine.is_empty() {
            sections.push(workload_section(*w, m, &mine));
        }
    }
    sections
}

fn workload_section(w: Workload, m: &Matrix, cells: &[&CellSummary]) -> Section {
    let (id, title) = match w {
        Workload::Redis => ("bench_redis", "redis GET/SET by value size"),
        Workload::Iperf3 => ("bench_iperf3", "iperf3 by TCP window"),
        Workload::Ping => ("bench_ping", "ping round trips"),
        Workload::Fio => ("bench_fio", "fio random 4 KiB direct reads inside the instance"),
        Workload::Modules => ("bench_modules", "Node.js loading small modules from a host volume"),
    };
    let mut s = Section::new(id, title);
    let unit = cells.iter().find_map(|c| c.unit.clone()).unwrap_or_else(|| "op".into());
    let units = crate::workload::ops::plural(&unit);
    let mut labels: Vec<String> = Vec::new();
    for c in cells {
        if !labels.contains(&label(c)) {
            labels.push(label(c));
        }
    }

    // Throughput.
    let mut t = Table::new(
        format!("{units} per second (mean [min, max] over the runs)"),
        vec![
            left("platform", 12),
            left("parameter", 24),
            col("runs", 5),
            col("mean", 12),
            col("min", 12),
            col("max", 12),
        ],
    );
    for c in cells {
        let (mean, min, max) = c.ops_per_s.map_or(("-".into(), "-".into(), "-".into()), |r| {
            (
                format!("{:.0}", r.mean),
                format!("{:.0}", r.min),
                format!("{:.0}", r.max),
            )
        });
        t.row(vec![c.platform.clone(), label(c), c.runs.to_string(), mean, min, max]);
    }
    s.table(t);
    if w != Workload::Ping {
        s.figure(Figure {
            title: format!("{title}: {units} per second"),
            value_label: format!(
                "{units} per second (bars: mean; whiskers: min..max over {} runs)",
                m.repeat
            ),
            kind: by_platform(m, &labels, cells, |c| c.ops_per_s.map(|r| (r.mean, r.min, r.max))),
        });
    }

    // CPU per operation by role.
    per_role_figures(
        &mut s,
        cells,
        |c| &c.cpu_ns_per_op,
        &amount,
        [
            format!("CPU ns per {unit} by role (vtrace's own and stressors' left out)"),
            format!("CPU time per {unit} by platform and role"),
            format!("CPU µs per {unit}"),
        ],
    );

    // Packets per hop.
    let mut t = Table::new(
        format!("Packets per {unit} and their mean size, per device and hop"),
        vec![
            left("platform", 12),
            left("parameter", 24),
            left("device", 16),
            left("hop", 10),
            col(format!("packets/{unit}"), 16),
            col("bytes/packet", 14),
        ],
    );
    for c in cells {
        for h in c.hops.iter().take(6) {
            t.row(vec![
                c.platform.clone(),
                label(c),
                h.device.clone(),
                h.hop.clone(),
                amount(h.packets_per_op),
                format!("{:.0}", h.bytes_per_packet),
            ]);
        }
    }
    s.table(t);

    // Waiting for a CPU, per operation: what CPU stress does to each role.
    if cells.iter().any(|c| !c.runq_ns_per_op.is_empty()) {
        per_role_figures(
            &mut s,
            cells,
            |c| &c.runq_ns_per_op,
            &|ns| format!("{:.2}", ns / 1e3),
            [
                format!("Run-queue wait per {unit} by role (µs; runnable, waiting for a CPU)"),
                format!("Run-queue wait per {unit} by platform and role"),
                format!("µs waiting for a CPU per {unit}"),
            ],
        );
    }

    if w == Workload::Modules {
        let mut t = Table::new(
            "Load time and the file syscalls behind it: per module, by call, with their mean latency (the fs layer; gVisor's are its sandbox's and gofer's host calls)",
            vec![
                left("platform", 12),
                left("parameter", 14),
                col("load ms", 9),
                left("calls per module (mean µs)", 0).gap(2),
            ],
        );
        for c in cells {
            let load_ms = c.ops_per_s.map_or("-".into(), |r| {
                format!("{:.1}", c.param.parse::<f64>().unwrap_or(0.0) / r.mean * 1e3)
            });
            let calls: Vec<String> = c
                .file_calls_per_op
                .iter()
                .take(6)
                .map(|(op, n, ns)| format!("{op} {n:.1} ({:.1})", ns / 1e3))
                .collect();
            t.row(vec![c.platform.clone(), label(c), load_ms, calls.join(", ")]);
        }
        s.table(t);
    }
    if w == Workload::Fio {
        let mut t = Table::new(
            "The reads' latency (fio's own clat; device: vtrace's issue -> complete), and the other requests on the same disk meanwhile",
            vec![
                left("platform", 12),
                left("parameter", 28),
                col("p50(us)", 9),
                col("p99(us)", 9),
                col("device p50(us)", 15),
                left("others on its disk: requests, MiB", 0).gap(2),
            ],
        );
        for c in cells {
            if let Some(v) = &c.victim {
                let others: Vec<String> = v
                    .others
                    .iter()
                    .take(3)
                    .map(|(who, n, mib)| format!("{who}: {n}, {mib:.0}"))
                    .collect();
                t.row(vec![
                    c.platform.clone(),
                    label(c),
                    format!("{:.1}", v.clat_p50_us),
                    format!("{:.1}", v.clat_p99_us),
                    if v.device.is_empty() {
                        "not on disk".into()
                    } else {
                        format!("{:.1}", v.device_p50_us)
                    },
                    if others.is_empty() {
                        "-".into()
                    } else {
                        others.join("; ")
                    },
                ]);
            }
        }
        s.table(t);
    }
    if w == Workload::Ping {
        let mut t = Table::new(
            "Round-trip time (µs) over every reply of every run",
            vec![
                left("platform", 12),
                left("parameter", 24),
                col("replies", 8),
                col("p50", 10),
                col("p99", 10),
                col("mean", 10),
                col("max", 10),
            ],
        );
        for c in cells {
            if let Some(r) = c.rtt_us {
                t.row(vec![
                    c.platform.clone(),
                    label(c),
                    r.replies.to_string(),
                    format!("{:.1}", r.p50),
                    format!("{:.1}", r.p99),
                    format!("{:.1}", r.mean),
                    format!("{:.1}", r.max),
                ]);
            }
        }
        s.table(t);
        s.figure(Figure {
            title: "Round-trip time by platform (bars: p50; whiskers: p50..p99)".into(),
            value_label: "round-trip time (µs)".into(),
            kind: by_platform(m, &labels, cells, |c| c.rtt_us.map(|r| (r.p50, r.p50, r.p99))),
        });
    }
    s
}

/// A table of `per_role(cell)` (ns per operation by role) with its total,
/// each value shown by `show`, and its stacked bars in µs; `titles`: the
/// table's, the figure's and its value label.
fn per_role_figures(
    s: &mut Section,
    cells: &[&CellSummary],
    per_role: impl Fn(&CellSummary) -> &[(String, f64)],
    show: &dyn Fn(f64) -> String,
    [table_title, figure_title, value_label]: [String; 3],
) {
    let mut roles: Vec<String> = Vec::new();
    for c in cells {
        for (r, _) in per_role(c) {
            if !roles.contains(r) {
                roles.push(r.clone());
            }
        }
    }
    let role_ns = |c: &CellSummary, role: &str| per_role(c).iter().find(|(r, _)| r == role).map_or(0.0, |(_, ns)| *ns);
    let mut columns = vec![left("platform", 12), left("parameter", 24), col("total", 10)];
    columns.extend(roles.iter().map(|r| col(r.clone(), 10)));
    let mut t = Table::new(table_title, columns);
    for c in cells {
        // + 0.0: an empty sum is -0.0.
        let total = per_role(c).iter().map(|(_, ns)| ns).sum::<f64>() + 0.0;
        let mut row = vec![c.platform.clone(), label(c), show(total)];
        row.extend(roles.iter().map(|r| show(role_ns(c, r))));
        t.row(row);
    }
    s.table(t);
    s.figure(Figure {
        title: figure_title,
        value_label,
        kind: FigureKind::StackedBars {
            categories: cells.iter().map(|c| format!("{} {}", c.platform, label(c))).collect(),
            series: roles
                .iter()
                .map(|r| Series {
                    name: r.clone(),
                    values: cells.iter().map(|c| role_ns(c, r) / 1e3).collect(),
                })
                .collect(),
        },
    });
}

/// Bars per parameter label, one series per platform, each bar `value(cell)`.
fn by_platform(
    m: &Matrix,
    labels: &[String],
    cells: &[&CellSummary],
    value: impl Fn(&CellSummary) -> Option<(f64, f64, f64)>,
) -> FigureKind {
    FigureKind::Bars {
        categories: labels.to_vec(),
        series: m
            .platforms
            .iter()
            .map(|p| RangedSeries {
                name: p.clone(),
                values: labels
                    .iter()
                    .map(|l| {
                        cells
                            .iter()
                            .find(|c| &c.platform == p && &label(c) == l)
                            .and_then(|c| value(c))
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// One CSV line per cell: the numbers of the tables above.
pub fn csv(cells: &[CellSummary]) -> String {
    let mut out = String::from(
        "platform,workload,param,stress,runs,unit,ops_per_s_mean,ops_per_s_min,ops_per_s_max,cpu_ns_per_op,rtt_p50_us,rtt_p99_us,runq_ns_per_op\n",
    );
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v}"));
    for c in cells {
        out.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
            c.platform,
            c.workload,
            c.param,
            c.stress,
            c.runs,
            c.unit.clone().unwrap_or_default(),
            opt(c.ops_per_s.map(|r| r.mean)),
            opt(c.ops_per_s.map(|r| r.min)),
            opt(c.ops_per_s.map(|r| r.max)),
            c.cpu_ns_per_op_total,
            opt(c.rtt_us.map(|r| r.p50)),
            opt(c.rtt_us.map(|r| r.p99)),
            opt((!c.runq_ns_per_op.is_empty()).then(|| c.runq_ns_per_op.iter().map(|(_, ns)| ns).sum())),
        ));
    }
    out
}
