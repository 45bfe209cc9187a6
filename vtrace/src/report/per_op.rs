//! Every headline figure per operation of the workload (requests, MiB,
//! I/Os, replies): the fair comparison between platforms that reach
//! different throughputs. Built from the sections' metrics, so a layer's
//! figures are divided without this file knowing the layer.

use super::model::{Figure, FigureKind, Section, Series, Table, amount, col, left};
use crate::workload::ops::Operations;

/// Sets every metric's `per_op` (fractions have none).
pub fn divide(sections: &mut [Section], ops: f64) {
    for m in sections.iter_mut().flat_map(|s| &mut s.metrics) {
        if m.unit != "fraction" {
            m.per_op = Some(m.value / ops);
        }
    }
}

/// What one metric key is, in words, for its table's title.
fn label(key: &str) -> &str {
    match key {
        "cpu_ns" => "CPU time",
        "softirq_ns" => "Softirq time by vector",
        "packets" => "Packets by device and hop",
        "bytes" => "Bytes by device and hop",
        "kvm_exits" => "KVM exits by reason",
        "kvm_exit_ns" => "Time in KVM exits by reason",
        "calls" => "Function calls (uprobes)",
        "bpf_run_ns" => "vtrace's eBPF run time by program",
        other => other,
    }
}

/// The per-operation section: CPU by role and state (a table and a
/// figure), then every other metric key as a table of its largest values.
pub fn section(ops: &Operations, sections: &[Section], top: usize) -> Section {
    let mut s = Section::new("per_op", "Per operation");
    let rate = ops
        .per_second
        .map_or(String::new(), |r| format!(", {r:.0} {}/s as it measured", ops.units()));
    s.lines([
        format!(
            "Per {}: {:.0} {} done (from {}{rate})",
            ops.unit,
            ops.count,
            ops.units(),
            ops.source
        ),
        String::new(),
    ]);
    let metrics: Vec<_> = sections.iter().flat_map(|x| &x.metrics).collect();
    cpu_by_role(&mut s, ops, &metrics);
    let mut keys: Vec<&str> = Vec::new();
    for m in &metrics {
        if m.key != "cpu_ns" && m.per_op.is_some() && !keys.contains(&m.key.as_str()) {
            keys.push(&m.key);
        }
    }
    for key in keys {
        let mut rows: Vec<_> = metrics.iter().filter(|m| m.key == key && m.value > 0.0).collect();
        if rows.is_empty() {
            continue;
        }
        rows.sort_by(|a, b| b.value.total_cmp(&a.value));
        let dims: Vec<&String> = rows[0].dims.keys().collect();
        let unit = rows[0].unit;
        let width = |d: &str| {
            rows.iter()
                .map(|m| m.dims.get(d).map_or(0, String::len))
                .max()
                .unwrap_or(0)
        };
        let mut columns: Vec<_> = dims
            .iter()
            .map(|d| left(d.to_string(), width(d).max(d.len()) + 2))
            .collect();
        columns.push(col(format!("{unit}/{}", ops.unit), 14));
        columns.push(col("total", 16));
        let mut t = Table::new(format!("{} per {}", label(key), ops.unit), columns);
        for m in rows.iter().take(top) {
            let mut cells: Vec<String> = dims
                .iter()
                .map(|d| m.dims.get(*d).cloned().unwrap_or_default())
                .collect();
            cells.push(amount(m.per_op.unwrap_or(0.0)));
            cells.push(format!("{:.0}", m.value));
            t.row(cells);
        }
        s.table(t);
    }
    s
}

/// CPU ns per operation, a row per platform and role with a column per state.
fn cpu_by_role(s: &mut Section, ops: &Operations, metrics: &[&super::model::Metric]) {
    let cpu: Vec<_> = metrics.iter().filter(|m| m.key == "cpu_ns").collect();
    let mut roles: Vec<(String, String)> = Vec::new();
    let mut states: Vec<String> = Vec::new();
    for m in &cpu {
        let role = (m.dims["platform"].clone(), m.dims["role"].clone());
        if !roles.contains(&role) {
            roles.push(role);
        }
        if !states.contains(&m.dims["state"]) {
            states.push(m.dims["state"].clone());
        }
    }
    let per_op = |role: &(String, String), state: &str| -> f64 {
        cpu.iter()
            .filter(|m| m.dims["platform"] == role.0 && m.dims["role"] == role.1 && m.dims["state"] == state)
            .filter_map(|m| m.per_op)
            .sum()
    };
    let total = |role: &(String, String)| states.iter().map(|st| per_op(role, st)).sum::<f64>();
    roles.retain(|r| total(r) > 0.0);
    if roles.is_empty() {
        return;
    }
    roles.sort_by(|a, b| total(b).total_cmp(&total(a)));
    let mut columns = vec![left("platform", 10), left("role", 10)];
    columns.extend(states.iter().map(|st| col(st.clone(), 10)));
    columns.push(col("total", 10));
    let mut t = Table::new(format!("CPU ns per {} by platform and role", ops.unit), columns);
    for r in &roles {
        let mut cells = vec![r.0.clone(), r.1.clone()];
        cells.extend(states.iter().map(|st| amount(per_op(r, st))));
        cells.push(amount(total(r)));
        t.row(cells);
    }
    s.table(t);
    s.figure(Figure {
        title: format!("CPU time per {} by platform, role and state", ops.unit),
        value_label: format!("CPU µs per {}", ops.unit),
        kind: FigureKind::StackedBars {
            categories: roles.iter().map(|r| format!("{}/{}", r.0, r.1)).collect(),
            series: states
                .iter()
                .map(|st| Series {
                    name: st.clone(),
                    values: roles.iter().map(|r| per_op(r, st) / 1e3).collect(),
                })
                .collect(),
        },
    });
}
