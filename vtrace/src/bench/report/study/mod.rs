//! `--study redis-sizes`: the microVM study's (seed 000) figures drawn
//! from the bench's cells, and its findings beside this machine's. Its
//! Fig. 2 (requests/s by value size, GET and SET), Fig. 3 (CPU as mpstat
//! splits it: user, system, softirq, guest, the client left out) and Table
//! 2 (frame sizes from the guest and towards the client at a size below
//! the MTU and the largest); then each finding of the study, what this
//! machine measured of it, whether they agree, and the role or device
//! that explains the difference. Rankings are this machine's: nested
//! virtualization under TCG changes absolute figures and can change them.

use std::path::Path;

use serde_json::json;

mod findings;

use self::findings::findings;
use super::{
    CellSummary,
    serving::{FROM_GUEST, FrameSizes, TO_CLIENT},
};
use crate::{
    bench::{Matrix, pilot, redis_param},
    report::model::{Figure, FigureKind, RangedSeries, Section, Series, Table, col, left},
};

/// The value size the study's MTU divides (bytes of payload).
const MTU: u32 = 1500;

/// The study's Table 2: frame sizes at the tap/bridge (GET), by platform,
/// at 64 B and 16 KiB (no LinuxVM there).
const STUDY_TABLE_2: &[(&str, u32, u32)] = &[
    ("kata", 123, 8250),
    ("unikraft-vhost", 124, 1224),
    ("unikraft-virtio", 124, 1224),
    ("firecracker", 137, 8263),
];

/// The parts of CPU time the study splits (mpstat's), and the one it leaves out.
const PARTS: [&str; 4] = ["user", "system", "softirq", "guest"];

/// The bench's redis cells, looked up by platform, size and operation.
struct Cells<'a> {
    cells: Vec<&'a CellSummary>,
    platforms: Vec<String>,
    /// Sizes ascending.
    sizes: Vec<u32>,
    /// `get` and `set`, or `get,set` where each cell ran both.
    ops: Vec<&'static str>,
}

impl<'a> Cells<'a> {
    fn of(m: &Matrix, cells: &'a [CellSummary]) -> Cells<'a> {
        let cells: Vec<&CellSummary> = cells
            .iter()
            .filter(|c| c.workload == "redis" && c.stress == 0 && c.runs > 0)
            .collect();
        let mut sizes = m.sizes.clone();
        sizes.sort_unstable();
        sizes.dedup();
        // Each op's cells (GET first: the one read), or cells of both.
        let ran = |op: &str| cells.iter().any(|c| redis_param(&c.param).1 == Some(op));
        let mut ops: Vec<&'static str> = ["get", "set"].into_iter().filter(|op| ran(op)).collect();
        if ops.is_empty() {
            ops.push("get,set");
        }
        Cells {
            cells,
            platforms: m.platforms.clone(),
            sizes,
            ops,
        }
    }

    fn get(&self, platform: &str, size: u32, op: &str) -> Option<&'a CellSummary> {
        self.cells.iter().copied().find(|c| {
            let (s, o) = redis_param(&c.param);
            c.platform == platform && s == size.to_string() && o.unwrap_or("get,set") == op
        })
    }

    fn rate(&self, platform: &str, size: u32, op: &str) -> Option<f64> {
        self.get(platform, size, op)?.ops_per_s.map(|r| r.mean)
    }

    /// The mean over `sizes` of a platform's rate (None if one is missing).
    fn mean_rate(&self, platform: &str, sizes: &[u32], op: &str) -> Option<f64> {
        let rates: Option<Vec<f64>> = sizes.iter().map(|&s| self.rate(platform, s, op)).collect();
        rates
            .filter(|r| !r.is_empty())
            .map(|r| r.iter().sum::<f64>() / r.len() as f64)
    }

    fn below_mtu(&self) -> Vec<u32> {
        self.sizes.iter().copied().filter(|&s| s < MTU).collect()
    }

    /// The size the study's CPU and small-frame figures cite: 64 B, else the smallest.
    fn small(&self) -> Option<u32> {
        self.sizes
            .iter()
            .copied()
            .find(|&s| s == 64)
            .or(self.sizes.first().copied())
    }

    /// The largest size, where above the MTU.
    fn large(&self) -> Option<u32> {
        self.sizes.last().copied().filter(|&s| s > MTU)
    }

    /// The op Table 2 is of: GET, or GET and SET together.
    fn read_op(&self) -> &'static str {
        self.ops[0]
    }

    /// A platform's mean over ops at `size` of `value(cell)`.
    fn over_ops(&self, platform: &str, size: u32, value: impl Fn(&CellSummary) -> f64) -> Option<f64> {
        let values: Vec<f64> = self
            .ops
            .iter()
            .filter_map(|op| self.get(platform, size, op))
            .map(value)
            .collect();
        (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
    }

    /// Platforms whose vhost-net worker carried the traffic (a `vhost` role with CPU).
    fn uses_vhost(&self, platform: &str) -> bool {
        self.cells
            .iter()
            .any(|c| c.platform == platform && c.serving.role_ns_per_op.iter().any(|(r, _, _)| r == "vhost"))
    }

    fn frames(&self, platform: &str, size: u32, point: &str) -> Option<&'a FrameSizes> {
        self.get(platform, size, self.read_op())?
            .frames
            .iter()
            .find(|f| f.point == point)
    }
}

fn is_unikraft(platform: &str) -> bool {
    platform.starts_with("unikraft")
}

fn op_label(op: &str) -> String {
    op.to_uppercase().replace(',', "+")
}

fn size_label(size: u32) -> String {
    match size {
        s if s >= 1024 && s % 1024 == 0 => format!("{} KiB", s / 1024),
        s => format!("{s} B"),
    }
}

/// The study's section of the bench report.
pub fn section(root: &Path, m: &Matrix, cells: &[CellSummary]) -> Section {
    let c = Cells::of(m, cells);
    let mut s = Section::new(
        "study_redis_sizes",
        "Study redis-sizes: Redis by value size on the microVM platforms (seed 000)",
    );
    let mut lines = vec![
        "The study's Fig. 2, Fig. 3 and Table 2 as this machine draws them, then its findings beside this machine's."
            .to_string(),
        "CPU is the serving side's, as the study's mpstat saw it (its client ran on another machine): every thread \
         but the client's (redis-benchmark here), vtrace's and stressors'."
            .into(),
        "Nested virtualization under TCG changes absolute figures and can change rankings; frame sizes and which \
         role does the work should not change."
            .into(),
    ];
    let sized: Vec<String> = c
        .platforms
        .iter()
        .map(|p| match pilot::load(root, p) {
            Some(sz) => format!(
                "{p} {} (pilot: {:.0}/s at {})",
                sz.requests,
                sz.pilot_per_s,
                size_label(sz.size)
            ),
            None => format!("{p} {}", m.requests),
        })
        .collect();
    lines.push(format!("requests per test: {}", sized.join(", ")));
    s.lines(lines);

    throughput(&mut s, m, &c);
    cpu(&mut s, &c);
    frame_sizes(&mut s, &c);
    let findings = findings(&c);
    let mut lines = vec!["The study's findings beside this machine's:".to_string()];
    for (i, f) in findings.iter().enumerate() {
        lines.push(format!("{}. {}: {}", i + 1, f.claim, f.verdict.to_uppercase()));
        lines.push(format!("   the study: {}", f.study));
        lines.push(format!("   here: {}", f.here));
        lines.push(format!("   behind it: {}", f.why));
    }
    s.lines(lines);
    s.json(
        "study",
        json!({"name": "redis-sizes", "mtu": MTU, "findings": findings, "requests": sized}),
    );
    s
}

/// Requests/s per platform, size and operation (the study's Fig. 2).
fn throughput(s: &mut Section, m: &Matrix, c: &Cells) {
    let mut columns = vec![left("platform", 17)];
    for &size in &c.sizes {
        for op in &c.ops {
            columns.push(col(format!("{} {}", op_label(op), size_label(size)), 13));
        }
    }
    let mut t = Table::new("Requests per second (the study's Fig. 2; mean over the runs)", columns);
    for p in &c.platforms {
        let mut row = vec![p.clone()];
        for &size in &c.sizes {
            for op in &c.ops {
                row.push(c.rate(p, size, op).map_or("-".into(), |r| format!("{r:.0}")));
            }
        }
        t.row(row);
    }
    s.table(t);
    for op in &c.ops {
        s.figure(Figure {
            title: format!("{} requests per second by value size", op_label(op)),
            value_label: format!(
                "requests per second (bars: mean; whiskers: min..max over {} runs)",
                m.repeat
            ),
            kind: FigureKind::Bars {
                categories: c.sizes.iter().map(|&s| size_label(s)).collect(),
                series: c
                    .platforms
                    .iter()
                    .map(|p| RangedSeries {
                        name: p.clone(),
                        values: c
                            .sizes
                            .iter()
                            .map(|&size| {
                                let r = c.get(p, size, op)?.ops_per_s?;
                                Some((r.mean, r.min, r.max))
                            })
                            .collect(),
                    })
                    .collect(),
            },
        });
    }
}

/// CPU per request and as a share of one CPU by the study's parts (its Fig. 3).
fn cpu(s: &mut Section, c: &Cells) {
    let mut t = Table::new(
        "Serving CPU by the study's parts (its Fig. 3): µs per request, and % of one CPU as mpstat shows it",
        vec![
            left("platform", 17),
            left("size", 7),
            left("op", 7),
            col("user", 8),
            col("system", 8),
            col("softirq", 8),
            col("guest", 8),
            col("hardirq", 8),
            col("user%", 7),
            col("sys%", 7),
            col("soft%", 7),
            col("guest%", 7),
            col("client", 8),
            left("most (role state µs)", 24).gap(2),
        ],
    );
    for p in &c.platforms {
        for &size in &c.sizes {
            for op in &c.ops {
                let Some(cell) = c.get(p, size, op) else { continue };
                let v = &cell.serving;
                let mut row = vec![p.clone(), size_label(size), op_label(op)];
                row.extend(
                    PARTS
                        .iter()
                        .chain(&["hardirq"])
                        .map(|st| format!("{:.1}", v.ns(st) / 1e3)),
                );
                row.extend(PARTS.iter().map(|st| format!("{:.1}", v.pct(st))));
                row.push(format!("{:.1}", v.client_ns_per_op / 1e3));
                row.push(
                    v.role_ns_per_op
                        .first()
                        .map_or("-".into(), |(r, st, ns)| format!("{r} {st} {:.1}", ns / 1e3)),
                );
                t.row(row);
            }
        }
    }
    s.table(t);
    for op in &c.ops {
        let shown: Vec<(&String, u32)> = c
            .platforms
            .iter()
            .flat_map(|p| c.sizes.iter().map(move |&size| (p, size)))
            .filter(|(p, size)| c.get(p, *size, op).is_some())
            .collect();
        s.figure(Figure {
            title: format!("Serving CPU while answering {}, by the study's parts", op_label(op)),
            value_label: "% of one CPU over the run (mpstat's measure; the client left out)".into(),
            kind: FigureKind::StackedBars {
                categories: shown
                    .iter()
                    .map(|(p, size)| format!("{p} {}", size_label(*size)))
                    .collect(),
                series: PARTS
                    .iter()
                    .map(|st| Series {
                        name: st.to_string(),
                        values: shown
                            .iter()
                            .map(|(p, size)| c.get(p, *size, op).map_or(0.0, |cell| cell.serving.pct(st)))
                            .collect(),
                    })
                    .collect(),
            },
        });
    }
}

/// Frame sizes from the guest and to the client (the study's Table 2).
fn frame_sizes(s: &mut Section, c: &Cells) {
    let sizes: Vec<u32> = [c.small(), c.large()].into_iter().flatten().collect();
    let mut t = Table::new(
        format!(
            "Frames from the guest and to the client, {} (the study's Table 2; bytes with the Ethernet header)",
            op_label(c.read_op())
        ),
        vec![
            left("platform", 17),
            left("size", 7),
            left("tap (from the guest)", 21).gap(2),
            col("mean B", 8),
            col("largest B", 10),
            col("> frame", 12),
            left("last host device", 17).gap(2),
            col("mean B", 8),
            col("study B", 8),
        ],
    );
    for p in &c.platforms {
        for &size in &sizes {
            let from = c.frames(p, size, FROM_GUEST);
            let to = c.frames(p, size, TO_CLIENT);
            if from.is_none() && to.is_none() {
                continue;
            }
            let study = STUDY_TABLE_2
                .iter()
                .find(|(sp, _, _)| sp == p)
                .and_then(|(_, small, large)| match size {
                    64 => Some(*small),
                    16384 => Some(*large),
                    _ => None,
                });
            t.row(vec![
                p.clone(),
                size_label(size),
                from.map_or("-".into(), |f| f.device.clone()),
                from.map_or("-".into(), |f| format!("{:.0}", f.mean_bytes)),
                from.map_or("-".into(), |f| f.max_bytes.to_string()),
                from.map_or("-".into(), |f| format!("{}/{}", f.above_full_frame, f.packets)),
                to.map_or("-".into(), |f| f.device.clone()),
                to.map_or("-".into(), |f| format!("{:.0}", f.mean_bytes)),
                study.map_or("-".into(), |b| b.to_string()),
            ]);
        }
    }
    s.table(t);
    s.lines([
        "On the wire: the lab has no NIC between the instance and the client (redis-benchmark runs on this host), \
         so frames reach the client as the last host device carries them; the study's NIC cut its larger frames \
         to the MTU (1327 B)."
            .to_string(),
    ]);
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::bench::report::{Spread, serving::ServingCpu};

    #[derive(Parser)]
    struct Line {
        #[command(flatten)]
        matrix: Matrix,
    }

    fn matrix(args: &[&str]) -> Matrix {
        Line::parse_from(std::iter::once("bench").chain(args.iter().copied())).matrix
    }

    /// The study's settings come with it; a flag beside it overrides one.
    #[test]
    fn the_study_sets_its_matrix_and_flags_override_it() {
        let m = matrix(&["--study", "redis-sizes", "--sizes", "64,16384"]);
        assert_eq!(m.platforms.len(), 5, "{:?}", m.platforms);
        assert_eq!(
            (m.each_op, m.request_seconds, m.sizes.clone()),
            (true, Some(10), vec![64, 16384])
        );
        let params: Vec<String> = m.cells().iter().map(|c| c.param.clone()).take(4).collect();
        // SET before GET: a GET reads what the SET of its size wrote.
        assert_eq!(params, ["64-set", "64-get", "16384-set", "16384-get"]);
        // GET alone: its cells only.
        let get = matrix(&["--study", "redis-sizes", "--sizes", "64,16384", "--redis-ops", "get"]);
        let params: Vec<String> = get.cells().iter().map(|c| c.param.clone()).take(3).collect();
        assert_eq!(params, ["64-get", "16384-get", "64-get"]);
        let plain = matrix(&[]);
        assert_eq!((plain.each_op, plain.request_seconds, plain.study), (false, None, None));
        assert_eq!(plain.cells()[0].param, "32");
    }

    /// A cell of `platform` at `size` and `op` serving `rate` requests/s,
    /// its frames from the guest at most `largest` bytes.
    fn cell(platform: &str, size: u32, op: &str, rate: f64, largest: u64, vhost: bool) -> CellSummary {
        let role = if vhost { "vhost" } else { "vmm" };
        CellSummary {
            platform: platform.into(),
            workload: "redis".into(),
            param: format!("{size}-{op}"),
            runs: 1,
            ops_per_s: Some(Spread {
                mean: rate,
                min: rate,
                max: rate,
            }),
            serving: ServingCpu {
                ns_per_op: vec![("user".into(), 10.0), ("guest".into(), 100.0)],
                pct_of_cpu: vec![("user".into(), 1.0), ("guest".into(), 10.0)],
                role_ns_per_op: vec![(role.into(), "system".into(), 50.0)],
                client_ns_per_op: 5.0,
            },
            frames: vec![FrameSizes {
                point: FROM_GUEST.into(),
                device: "tap0".into(),
                packets: 10,
                mean_bytes: largest as f64 / 2.0,
                max_bytes: largest,
                full_frame: 1514,
                above_full_frame: u64::from(largest > 1514) * 5,
            }],
            ..Default::default()
        }
    }

    fn frames_verdict(unikraft_largest: u64) -> &'static str {
        let m = matrix(&[
            "--study",
            "redis-sizes",
            "--platforms",
            "kata,unikraft-vhost,firecracker",
            "--sizes",
            "64,16384",
        ]);
        let mut cells = Vec::new();
        for op in ["get", "set"] {
            for (p, vhost, large) in [
                ("kata", true, 15994),
                ("unikraft-vhost", true, unikraft_largest),
                ("firecracker", false, 15994),
            ] {
                cells.push(cell(p, 64, op, 1000.0, 137, vhost));
                cells.push(cell(p, 16384, op, 300.0, large, vhost));
            }
        }
        let c = Cells::of(&m, &cells);
        let found = findings(&c);
        found
            .iter()
            .find(|f| f.claim.contains("frames from the guest"))
            .unwrap()
            .verdict
    }

    /// Unikraft's frames within a full frame and the TSO guests' above it
    /// agree with the study; a Unikraft frame above it does not.
    #[test]
    fn the_frame_finding_follows_the_largest_frames() {
        assert_eq!(frames_verdict(1514), "agrees");
        assert_eq!(frames_verdict(2962), "disagrees");
    }
}
