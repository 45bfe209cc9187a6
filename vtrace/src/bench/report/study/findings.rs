//! The study's findings, each against this machine's cells: what the
//! study found, what this machine measured of it, a verdict, and the role,
//! stage or device behind this machine's figures.

use serde::Serialize;

use super::{Cells, FROM_GUEST, FrameSizes, is_unikraft, op_label, size_label};
use crate::bench::report::CellSummary;

/// One finding of the study against this machine.
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    pub claim: String,
    pub study: String,
    pub here: String,
    /// `agrees`, `disagrees`, or `not measured` (a platform or size missing).
    pub verdict: &'static str,
    /// The role, stage or device behind this machine's figures.
    pub why: String,
}

/// A finding that one group of platforms spends more of a CPU state than another.
struct Comparison<'a> {
    claim: &'static str,
    study: &'static str,
    state: &'static str,
    more: &'a [&'a String],
    less: &'a [&'a String],
}

/// Every finding of the study against this machine's cells.
pub(super) fn findings(c: &Cells) -> Vec<Finding> {
    let mut out = Vec::new();
    let vhost: Vec<&String> = c.platforms.iter().filter(|p| c.uses_vhost(p)).collect();
    let virtio: Vec<&String> = c.platforms.iter().filter(|p| !c.uses_vhost(p)).collect();
    let verdict = |ok: bool| if ok { "agrees" } else { "disagrees" };
    let missing = |claim: &str, study: &str, what: &str| Finding {
        claim: claim.into(),
        study: study.into(),
        here: format!("not measured: {what}"),
        verdict: "not measured",
        why: format!("the bench has no {what}"),
    };
    // What one request costs a platform at `size`, and the role that spends most of it.
    let cost = |p: &str, size: u32| -> String {
        let cells: Vec<&CellSummary> = c.ops.iter().filter_map(|op| c.get(p, size, op)).collect();
        let Some(cell) = cells.first() else {
            return format!("{p} -");
        };
        let top = cell
            .serving
            .role_ns_per_op
            .first()
            .map_or(String::new(), |(r, st, ns)| format!(", most {r} {st} {:.0}", ns / 1e3));
        format!("{p} {:.0} µs/request{top}", cell.serving.total_ns() / 1e3)
    };

    // 1. Below the MTU the vhost platforms serve the most.
    let claim = "Below the MTU, the vhost platforms serve the most requests";
    let study = "Kata and UK-vhost: 75 % (GET) and 79 % (SET) above the other three at 64 B";
    let below = c.below_mtu();
    if below.is_empty() || vhost.is_empty() || virtio.is_empty() {
        out.push(missing(
            claim,
            study,
            "size below the MTU with vhost and virtio platforms",
        ));
    } else {
        let mut here = Vec::new();
        let mut ok = true;
        for op in &c.ops {
            let mut ranked: Vec<(&String, f64)> = c
                .platforms
                .iter()
                .filter_map(|p| Some((p, c.mean_rate(p, &below, op)?)))
                .collect();
            ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
            let top: Vec<&String> = ranked.iter().take(vhost.len()).map(|(p, _)| *p).collect();
            ok &= ranked.len() == c.platforms.len() && vhost.iter().all(|p| top.contains(p));
            here.push(format!(
                "{}: {}",
                op_label(op),
                ranked
                    .iter()
                    .map(|(p, r)| format!("{p} {r:.0}"))
                    .collect::<Vec<_>>()
                    .join(" > ")
            ));
        }
        let size = below[0];
        out.push(Finding {
            claim: claim.into(),
            study: study.into(),
            here: format!(
                "{} (requests/s, mean over {})",
                here.join("; "),
                below.iter().map(|&s| size_label(s)).collect::<Vec<_>>().join(", ")
            ),
            verdict: verdict(ok),
            why: format!(
                "vhost here: {}. CPU per request at {}: {}",
                vhost.iter().map(|p| p.as_str()).collect::<Vec<_>>().join(", "),
                size_label(size),
                c.platforms.iter().map(|p| cost(p, size)).collect::<Vec<_>>().join("; ")
            ),
        });
    }

    // 2. Above the MTU Unikraft falls steeply.
    let claim = "Above the MTU, Unikraft's requests/s fall the most";
    let study = "UK-virtio and UK-vhost 69 % and 32 % below LinuxVM at 16 KiB, after leading it below the MTU";
    match (below.last().copied(), c.large()) {
        (Some(small), Some(large)) if c.platforms.iter().any(|p| is_unikraft(p)) => {
            let mut here = Vec::new();
            let mut ok = true;
            for op in &c.ops {
                let kept: Vec<(&String, f64)> = c
                    .platforms
                    .iter()
                    .filter_map(|p| Some((p, c.rate(p, large, op)? / c.rate(p, small, op)?)))
                    .collect();
                let worst_other = kept
                    .iter()
                    .filter(|(p, _)| !is_unikraft(p))
                    .map(|(_, k)| *k)
                    .fold(f64::INFINITY, f64::min);
                ok &= kept.len() == c.platforms.len()
                    && kept
                        .iter()
                        .filter(|(p, _)| is_unikraft(p))
                        .all(|(_, k)| *k < worst_other);
                here.push(format!(
                    "{} at {} as a share of {}: {}",
                    op_label(op),
                    size_label(large),
                    size_label(small),
                    kept.iter()
                        .map(|(p, k)| format!("{p} {:.0} %", k * 100.0))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            let per_request = |p: &str| -> String {
                let Some(cell) = c.get(p, large, c.read_op()) else {
                    return format!("{p} -");
                };
                let frames = c.frames(p, large, FROM_GUEST);
                let per_op = frames.and_then(|f| {
                    let hop = cell.hops.iter().find(|h| h.device == f.device && h.hop == "receive")?;
                    Some(hop.packets_per_op)
                });
                format!(
                    "{p} {} frames/request from the guest, largest {} B",
                    per_op.map_or("-".into(), |n| format!("{n:.1}")),
                    frames.map_or("-".into(), |f| f.max_bytes.to_string())
                )
            };
            out.push(Finding {
                claim: claim.into(),
                study: study.into(),
                here: here.join("; "),
                verdict: verdict(ok),
                why: format!(
                    "at {} {}: {}",
                    size_label(large),
                    op_label(c.read_op()),
                    c.platforms
                        .iter()
                        .map(|p| per_request(p))
                        .collect::<Vec<_>>()
                        .join("; ")
                ),
            });
        }
        _ => out.push(missing(
            claim,
            study,
            "Unikraft platform, or sizes both sides of the MTU",
        )),
    }

    // 3. Unikraft's frames from the guest stay within the MTU; Firecracker's and Kata's do not.
    let claim = "At the largest size, Unikraft's frames from the guest stay within a full frame; Firecracker's and Kata's do not";
    let study = "16 KiB GET at the tap: Kata 8250 B, Firecracker 8263 B, UK-vhost and UK-virtio 1224 B";
    match c.large() {
        Some(large) => {
            let judged: Vec<(&String, &FrameSizes)> = c
                .platforms
                .iter()
                .filter_map(|p| Some((p, c.frames(p, large, FROM_GUEST)?)))
                .collect();
            let expect_large = |p: &str| ["kata", "firecracker"].contains(&p);
            let ok = !judged.is_empty()
                && judged.iter().all(|(p, f)| {
                    if is_unikraft(p) {
                        f.above_full_frame == 0 && f.max_bytes <= f.full_frame
                    } else if expect_large(p) {
                        f.above_full_frame > 0
                    } else {
                        true
                    }
                });
            out.push(Finding {
                claim: claim.into(),
                study: study.into(),
                here: judged
                    .iter()
                    .map(|(p, f)| {
                        format!(
                            "{p} mean {:.0} B, largest {} B, {} of {} above {} B",
                            f.mean_bytes, f.max_bytes, f.above_full_frame, f.packets, f.full_frame
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; "),
                verdict: if judged.is_empty() { "not measured" } else { verdict(ok) },
                why: format!(
                    "the tap's receive hop (frames its VMM or vhost-net wrote in), {} {}: a guest with TSO \
                     hands the host whole segments, lwIP MTU-sized frames",
                    size_label(large),
                    op_label(c.read_op())
                ),
            });
        }
        None => out.push(missing(claim, study, "size above the MTU")),
    }

    // 4-7. Where the CPU goes (the study's percentages at 64 B).
    let Some(small) = c.small() else {
        return out;
    };
    let group_pct = |group: &[&String], state: &str| -> Option<f64> {
        let values: Vec<f64> = group
            .iter()
            .filter_map(|p| c.over_ops(p, small, |cell| cell.serving.pct(state)))
            .collect();
        (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
    };
    let each = |state: &str| -> String {
        c.platforms
            .iter()
            .filter_map(|p| {
                let pct = c.over_ops(p, small, |cell| cell.serving.pct(state))?;
                Some(format!("{p} {pct:.1} %"))
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let roles = |state: &str| -> String {
        c.platforms
            .iter()
            .filter_map(|p| {
                let cell = c.get(p, small, c.ops[0])?;
                let (role, ns) = cell.serving.top_role(state)?;
                Some(format!("{p} {role} {:.1} µs/request", ns / 1e3))
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    let busy = || -> String {
        c.platforms
            .iter()
            .filter_map(|p| {
                let pct = c.over_ops(p, small, |cell| cell.serving.pct_of_cpu.iter().map(|(_, p)| p).sum())?;
                Some(format!("{p} {pct:.0} %"))
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let unikraft: Vec<&String> = c.platforms.iter().filter(|p| is_unikraft(p)).collect();
    let others: Vec<&String> = c.platforms.iter().filter(|p| !is_unikraft(p)).collect();
    let comparisons = [
        Comparison {
            claim: "The virtio platforms spend more user (VMM) CPU than the vhost ones",
            study: "UK-virtio, Firecracker and LinuxVM 7.3 % (GET) and 7.8 % (SET) more at 64 B",
            state: "user",
            more: &virtio,
            less: &vhost,
        },
        Comparison {
            claim: "Unikraft spends less system CPU than the others",
            study: "28.8 % (GET) and 16.7 % (SET) less at 64 B",
            state: "system",
            more: &others,
            less: &unikraft,
        },
        Comparison {
            claim: "The vhost platforms spend more softirq CPU than the virtio ones",
            study: "4.8 % (GET) and 7.7 % (SET) more at 64 B, from their higher rate",
            state: "softirq",
            more: &vhost,
            less: &virtio,
        },
        Comparison {
            claim: "Unikraft spends more guest CPU than the others",
            study: "23.5 % (GET) and 19.2 % (SET) more at 64 B",
            state: "guest",
            more: &unikraft,
            less: &others,
        },
    ];
    for Comparison {
        claim,
        study,
        state,
        more,
        less,
    } in comparisons
    {
        match (group_pct(more, state), group_pct(less, state)) {
            (Some(hi), Some(lo)) => out.push(Finding {
                claim: claim.into(),
                study: study.into(),
                here: format!(
                    "{state} at {} ({}): {} against {}: {}",
                    size_label(small),
                    c.ops.iter().map(|op| op_label(op)).collect::<Vec<_>>().join(" and "),
                    format_args!("{hi:.1} %"),
                    format_args!("{lo:.1} %"),
                    each(state)
                ),
                verdict: verdict(hi > lo),
                why: format!(
                    "the role spending the most {state} per request: {}. The serving side's whole share of \
                     one CPU: {} (the study's one core per platform was its limit)",
                    roles(state),
                    busy()
                ),
            }),
            _ => out.push(missing(claim, study, "platform of each group")),
        }
    }
    out
}
