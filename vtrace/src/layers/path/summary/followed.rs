//! Followed packets (`--events`): round trips at the tap decomposed, and
//! the slowest packets of each direction with every stage.

use super::*;

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
pub(super) fn add_section(s: &mut Section, rows: &[PathPacketRow], top: usize) {
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
    for dir in ["rx", "tx", "pt", "guest_rx", "guest_tx"] {
        let named: Vec<usize> = (0..path_stage::COUNT)
            .filter(|&i| path_stage::DIRECTIONS[i] == dir)
            .collect();
        let mut cols = vec![left("vm", 22), col("at(ms)", 10), col("total(us)", 10)];
        cols.extend(named.iter().map(|&i| col(format!("{}(us)", path_stage::NAMES[i]), 17)));
        let mut t = Table::new(
            format!("The slowest {dir} packets followed, stage by stage (-: no such stage, or not seen)"),
            cols,
        );
        // A VF's transmits are the guest's tx too (guest_tx_xmit).
        let of_dir = |p: &PathPacketRow| p.dir == dir || (dir == "guest_tx" && p.dir == "guest_vf_tx");
        for (p, total) in slowest.iter().filter(|(p, _)| of_dir(p)).take(top.min(10)) {
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
