//! Everything the report says of one cell, aggregated from its runs'
//! recordings into per-platform figures: throughput, CPU and run-queue wait
//! per operation by role, packets per hop; what only one workload has its
//! file adds ([`WorkloadSection::summarize`](super::WorkloadSection::summarize)).

use std::path::Path;

use serde::Serialize;

use super::{
    Runs, part,
    serving::{FrameSizes, ServingCpu},
};
use crate::{
    Result,
    bench::{Cell, Matrix, error_path, run_path},
    compare::{MetricId, Subject},
    layers::guest::summary::AGENT_PART,
    recording,
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
#[derive(Clone, Debug, Default, Serialize)]
pub struct CellSummary {
    pub platform: String,
    pub workload: String,
    pub param: String,
    pub stress: u32,
    pub neighbour: bool,
    pub runs: usize,
    pub errors: Vec<String>,
    /// Recorded runs whose workload counted some operations failed (a
    /// server that let requests go unanswered): what it said.
    pub workload_failures: Vec<String>,
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
    /// CPU ns per operation inside the guests (`bench --guest auto`), by
    /// part (a program's threads, or interrupts while idle) and state,
    /// largest first, the rest as `other`: where the vCPU's guest-mode time
    /// went (see `guest_parts`).
    pub guest_cpu_ns_per_op: Vec<(String, f64)>,
    /// The data path's stages (the path layer's, when recorded): mean µs
    /// of each, the instance's processes pooled, in path order.
    pub path_stage_mean_us: Vec<(String, f64)>,
    /// fio cells: the victim's latency as fio measured it, and who else
    /// had requests on its disk meanwhile.
    pub victim: Option<Victim>,
    /// The serving side's CPU (every thread but the client's): by state
    /// per operation and as mpstat shows it, and by role.
    pub serving: ServingCpu,
    /// Frames from the guest at the instance's tap and at its last host
    /// device before the client (the net layer's, when recorded).
    pub frames: Vec<FrameSizes>,
    /// Module-load cells: file syscalls per module by call (the fs
    /// layer's rows of the instance's processes, or node's on the host),
    /// with their mean latency: (`role:call`, calls per module, mean ns).
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

/// Each data path stage's mean over the cell's runs (path_sum_ns over
/// path_events), in path order.
fn path_stages(subject: &Subject) -> Vec<(String, f64)> {
    vtrace_common::path_stage::NAMES
        .iter()
        .filter_map(|stage| {
            let total = |key: &str| -> f64 {
                subject
                    .metrics
                    .iter()
                    .filter(|((k, dims), _)| k == key && dims.iter().any(|(d, v)| d == "stage" && v == stage))
                    .map(|(_, v)| v.value)
                    .sum()
            };
            let events = total("path_events");
            (events > 0.0).then(|| (stage.to_string(), total("path_sum_ns") / events / 1e3))
        })
        .collect()
}

/// Guest parts shown per cell; the rest are summed as `other`.
const GUEST_PARTS_SHOWN: usize = 7;

/// Where the vCPUs' time went inside the guests, per operation by part and
/// state, largest first, past the seventh as `other`: each guest's share of
/// its VM's guest-mode time on the host (`guest_vcpu_ns`), or, for a guest
/// whose VM was not found, its own account (`guest_cpu_ns`, its clock's);
/// the agents' own left out, as vtrace's own is on the host.
fn guest_parts(subject: &Subject) -> Vec<(String, f64)> {
    let dim = |dims: &[(String, String)], name: &str| {
        dims.iter()
            .find(|(k, _)| k == name)
            .map_or(String::new(), |(_, v)| v.clone())
    };
    let on_host: std::collections::BTreeSet<String> = subject
        .metrics
        .keys()
        .filter(|(key, _)| key == "guest_vcpu_ns")
        .map(|(_, dims)| dim(dims, "guest"))
        .collect();
    let mut parts: Vec<(String, f64)> = Vec::new();
    for ((key, dims), v) in &subject.metrics {
        let wanted = if on_host.contains(&dim(dims, "guest")) {
            "guest_vcpu_ns"
        } else {
            "guest_cpu_ns"
        };
        if key != wanted || dim(dims, "part") == AGENT_PART {
            continue;
        }
        let name = format!("{} {}", dim(dims, "part"), dim(dims, "state"));
        let ns = v.per_op.unwrap_or(0.0);
        match parts.iter_mut().find(|(p, _)| *p == name) {
            Some(e) => e.1 += ns,
            None => parts.push((name, ns)),
        }
    }
    parts.retain(|(_, ns)| *ns > 0.0);
    parts.sort_by(|a, b| b.1.total_cmp(&a.1));
    if parts.len() > GUEST_PARTS_SHOWN {
        let other: f64 = parts.drain(GUEST_PARTS_SHOWN..).map(|(_, ns)| ns).sum();
        parts.push(("other".into(), other));
    }
    parts
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
    let mut reps = Vec::new();
    let mut errors = Vec::new();
    for rep in 1..=m.repeat {
        let path = run_path(&dir, rep);
        if path.join(recording::META).is_file() {
            reps.push(rep);
            outputs.push(std::fs::read_to_string(path.join("workload.out")).unwrap_or_default());
            recs.push(crate::layers::read(&path)?);
        } else if let Ok(why) = std::fs::read_to_string(error_path(&dir, rep)) {
            errors.push(format!("rep {rep}: {}", why.trim()));
        }
    }
    let workload_failures: Vec<String> = recs
        .iter()
        .zip(outputs.iter().zip(&reps))
        .filter_map(|(r, (out, rep))| {
            let ops = r.ops()?;
            let failed = ops.failed.filter(|f| *f > 0.0)?;
            // What the workload said of them, e.g. "2 connect: nothing in 5s".
            let why = out
                .lines()
                .find_map(|l| {
                    l.split_once(" failed: ")
                        .map(|(_, why)| why.trim_end_matches(')').to_string())
                })
                .unwrap_or_default();
            Some(format!(
                "rep {rep}: {failed} of {} {} failed ({why})",
                failed + ops.count,
                ops.units()
            ))
        })
        .collect();
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

    let mut summary = CellSummary {
        platform: cell.platform.clone(),
        workload: cell.workload.name().into(),
        param: cell.param.clone(),
        stress: cell.stress,
        neighbour: cell.neighbour,
        runs: recs.len(),
        errors,
        workload_failures,
        unit: subject.ops.as_ref().map(|o| o.unit.clone()),
        ops_per_s: Spread::of(&rates),
        // + 0.0: an empty sum is -0.0.
        cpu_ns_per_op_total: roles.iter().map(|(_, ns)| ns).sum::<f64>() + 0.0,
        cpu_ns_per_op: roles,
        hops,
        rtt_us: None,
        runq_ns_per_op: by_role("runq_delay_ns"),
        guest_cpu_ns_per_op: guest_parts(&subject),
        path_stage_mean_us: path_stages(&subject),
        serving: ServingCpu::of(&recs),
        frames: FrameSizes::of(&recs),
        file_calls_per_op: Vec::new(),
        victim: None,
    };
    let runs = Runs {
        cell,
        dir: &dir,
        recs: &recs,
        outputs: &outputs,
    };
    part(cell.workload).summarize(&runs, &mut summary);
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::Value;

    /// Each guest's parts per operation summed by part and state over the
    /// guests, largest first, past the seventh as `other`.
    #[test]
    fn the_guests_cpu_is_summed_per_operation_by_part() {
        let mut metrics = std::collections::BTreeMap::new();
        let mut metric = |key: &str, guest: &str, part: &str, state: &str, ns_per_op: f64| {
            let dims = [("guest", guest), ("part", part), ("state", state)]
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .to_vec();
            metrics.insert(
                (key.to_string(), dims),
                Value {
                    unit: "ns",
                    value: ns_per_op * 10.0,
                    per_op: Some(ns_per_op),
                },
            );
        };
        // Guest c's VM was found: its vCPUs' share, not its own clock's;
        // its agent's part left out.
        metric("guest_cpu_ns", "c", "redis-server", "user", 5000.0);
        metric("guest_vcpu_ns", "c", "redis-server", "user", 50.0);
        metric("guest_vcpu_ns", "c", AGENT_PART, "user", 77.0);
        let mut add = |guest: &str, part: &str, state: &str, ns_per_op: f64| {
            metric("guest_cpu_ns", guest, part, state, ns_per_op)
        };
        add("a", "redis-server", "user", 500.0);
        add("b", "redis-server", "user", 100.0);
        add("a", "redis-server", "system", 900.0);
        for (i, part) in [
            "kworker",
            "rcu_preempt",
            "ksoftirqd",
            "migration",
            "kcompactd0",
            "ip",
            "sh",
        ]
        .into_iter()
        .enumerate()
        {
            add("a", part, "system", 10.0 * (i + 1) as f64);
        }
        let subject = Subject {
            name: "cell".into(),
            platform: "qemu-kvm".into(),
            recordings: 1,
            ops: None,
            metrics,
            keys: Vec::new(),
        };
        let parts = guest_parts(&subject);
        assert_eq!(parts.len(), GUEST_PARTS_SHOWN + 1);
        assert_eq!(parts[0], ("redis-server system".to_string(), 900.0));
        assert_eq!(parts[1], ("redis-server user".to_string(), 650.0));
        assert_eq!(parts[2], ("sh system".to_string(), 70.0));
        // The two smallest of the nine: kworker 10 + rcu_preempt 20.
        assert_eq!(parts.last().unwrap(), &("other".to_string(), 30.0));
        let total: f64 = parts.iter().map(|(_, ns)| ns).sum();
        assert_eq!(total, 900.0 + 650.0 + 280.0);
    }
}
