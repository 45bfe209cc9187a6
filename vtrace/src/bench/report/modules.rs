//! Node.js requiring a tree of small modules from the lab volume: load time
//! and the file syscalls behind it.

use super::{CellSummary, Runs, WorkloadSection, sections::label};
use crate::{
    bench::Matrix,
    recording,
    report::model::{Section, Table, col, left},
};

pub struct Modules;

impl WorkloadSection for Modules {
    fn heading(&self) -> (&'static str, &'static str) {
        ("bench_modules", "Node.js loading small modules from a host volume")
    }

    fn param(&self, param: &str) -> String {
        match crate::bench::matrix::modules_param(param) {
            (m, 1) => format!("{m} modules"),
            (m, l) => format!("{m} modules x {l}"),
        }
    }

    fn summarize(&self, runs: &Runs, summary: &mut CellSummary) {
        summary.file_calls_per_op = file_calls(runs.recs, &runs.cell.platform);
    }

    fn section(&self, s: &mut Section, _m: &Matrix, cells: &[&CellSummary], _labels: &[String]) {
        let mut t = Table::new(
            "Load time per loader and the file syscalls behind it: per module, by role and call, with their mean latency (the fs layer; gVisor's are its sandbox's and gofer's host calls, Kata's its virtiofsd's and shim's)",
            vec![
                left("platform", 17),
                left("parameter", 14),
                col("load ms", 9),
                left("calls per module (mean µs)", 0).gap(2),
            ],
        );
        for c in cells {
            // Each loader's modules at its share of the rate.
            let (modules, loaders) = crate::bench::matrix::modules_param(&c.param);
            let load_ms = c.ops_per_s.map_or("-".into(), |r| {
                format!("{:.1}", (modules * loaders) as f64 / r.mean * 1e3)
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
}

/// File syscalls per operation by role and call (`role:call`) over the
/// runs: the instance's processes (every process on the host platform that
/// is node), as the lab platform is recorded (containerd-runc as runc).
fn file_calls(recs: &[recording::Recording], platform: &str) -> Vec<(String, f64, f64)> {
    use crate::layers::fs::FsRow;
    let recorded_as = crate::lab::recorded_as(platform);
    let mut by_op: Vec<(String, u64, u64)> = Vec::new();
    let mut ops = 0.0;
    for r in recs {
        ops += r.ops().map_or(0.0, |o| o.count);
        for f in r.rows::<FsRow>().iter().filter(|f| {
            if platform == crate::platforms::HOST {
                f.owner.comm == "node"
            } else {
                f.owner.platform == recorded_as
            }
        }) {
            let call = format!("{}:{}", f.owner.role, f.op);
            match by_op.iter_mut().find(|(op, ..)| *op == call) {
                Some(e) => {
                    e.1 += f.count;
                    e.2 += f.total_ns;
                }
                None => by_op.push((call, f.count, f.total_ns)),
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
