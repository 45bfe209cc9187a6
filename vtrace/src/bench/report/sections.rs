//! What every workload's section shows (throughput, CPU per operation by
//! role, packets per hop, run-queue wait), and the helpers its tables and
//! figures share.

use super::{CellSummary, WorkloadSection, part_named};
use crate::{
    bench::Matrix,
    report::model::{Figure, FigureKind, RangedSeries, Section, Series, Table, amount, col, left},
};

/// The cell's parameter as its figures label it.
pub fn label(c: &CellSummary) -> String {
    let param = match part_named(&c.workload) {
        Some(w) => w.param(&c.param),
        None => c.param.clone(),
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

/// A workload's section: what every workload shows, then its own.
pub fn workload_section(w: &dyn WorkloadSection, m: &Matrix, cells: &[&CellSummary]) -> Section {
    let (id, title) = w.heading();
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
            left("platform", 17),
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
    if w.throughput_figure() {
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

    // Inside the guests (`--guest auto`): what the vCPU's time above was.
    if cells.iter().any(|c| !c.guest_cpu_ns_per_op.is_empty()) {
        per_role_figures(
            &mut s,
            cells,
            |c| &c.guest_cpu_ns_per_op,
            &amount,
            [
                format!(
                    "CPU ns per {unit} inside the guests, by program and state: their vCPUs' guest-mode time on \
                     the host, shared out by what each guest counted (their agents' own left out; a guest whose VM \
                     was not found by its own clock, which runs on while its vCPU does not; -: no guest recorded, \
                     a unikernel's or one no agent answered in)"
                ),
                format!("CPU time per {unit} inside the guests by platform, program and state"),
                format!("guest CPU µs per {unit}"),
            ],
        );
    }

    // Packets per hop.
    let mut t = Table::new(
        format!("Packets per {unit} and their mean size, per device and hop"),
        vec![
            left("platform", 17),
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

    w.section(&mut s, m, cells, &labels);
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
    let mut columns = vec![left("platform", 17), left("parameter", 24), col("total", 10)];
    columns.extend(roles.iter().map(|r| col(r.clone(), 10)));
    let mut t = Table::new(table_title, columns);
    for c in cells {
        // A cell with none of these figures has none to show, not zeros.
        let none = per_role(c).is_empty();
        let shown = |ns: f64| if none { "-".to_string() } else { show(ns) };
        // + 0.0: an empty sum is -0.0.
        let total = per_role(c).iter().map(|(_, ns)| ns).sum::<f64>() + 0.0;
        let mut row = vec![c.platform.clone(), label(c), shown(total)];
        row.extend(roles.iter().map(|r| shown(role_ns(c, r))));
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
pub fn by_platform(
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
