//! fio's direct random reads inside the instance (the victim), beside a
//! noisy neighbour or not: their latency, and who else used the disk.

use super::{CellSummary, Runs, Victim, WorkloadSection, sections::label};
use crate::{
    bench::Matrix,
    recording,
    report::model::{Section, Table, col, left},
};

pub struct Fio;

impl WorkloadSection for Fio {
    fn heading(&self) -> (&'static str, &'static str) {
        ("bench_fio", "fio random 4 KiB direct reads inside the instance")
    }

    fn summarize(&self, runs: &Runs, summary: &mut CellSummary) {
        let neighbours: Vec<u64> = std::fs::read_to_string(runs.dir.join(crate::bench::NEIGHBOUR_CGROUP))
            .unwrap_or_default()
            .lines()
            .filter_map(|id| id.trim().parse().ok())
            .collect();
        summary.victim = victim(runs.recs, &neighbours);
    }

    fn section(&self, s: &mut Section, _m: &Matrix, cells: &[&CellSummary], _labels: &[String]) {
        let mut t = Table::new(
            "The reads' latency (fio's own clat; device: vtrace's issue -> complete), and the other requests on the same disk meanwhile",
            vec![
                left("platform", 17),
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
