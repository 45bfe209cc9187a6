//! `record --layers cpu --sample HZ`: the CPU engine alone, plus stack
//! samples whose per-thread counts follow each thread's CPU time (schedstat,
//! from cpu-mix) at the asked frequency.

use serde_json::Value;
use vtrace_tests::{TempDir, bin, report_json, stderr, vtrace};

#[test]
fn samples_follow_cpu_time_and_layers_limit_the_probes() {
    assert!(vtrace_tests::is_root(), "run as root");
    let dir = TempDir::new("sampler");
    let rec = dir.join("run.vtrace");
    let truth_path = dir.join("truth.json");
    let mix = bin("cpu-mix");
    const HZ: f64 = 199.0;
    let o = vtrace(&[
        "record",
        "--layers",
        "cpu",
        "--sample",
        "199",
        "-o",
        rec.to_str().unwrap(),
        "--",
        mix.to_str().unwrap(),
        "--seconds",
        "3",
        "--out",
        truth_path.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "record failed: {}", stderr(&o));
    let truth: Value = serde_json::from_slice(&std::fs::read(&truth_path).unwrap()).unwrap();
    let r = report_json(&rec);

    // Only the CPU engine's probes (no syscall hooks: the default split is by ticks), and the sampler.
    let layers: std::collections::BTreeSet<&str> = r["probes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["layer"].as_str().unwrap())
        .collect();
    assert_eq!(
        layers,
        ["irq", "sample", "sched", "softirq"].into_iter().collect(),
        "--layers cpu attached other layers"
    );

    // Samples per thread ~ its CPU time x HZ (cpu-clock fires on busy CPUs).
    let folded = vtrace(&["report", "--format", "folded", rec.to_str().unwrap()]);
    assert!(folded.status.success());
    let folded = String::from_utf8_lossy(&folded.stdout).into_owned();
    assert!(
        folded
            .lines()
            .all(|l| l.rsplit_once(' ').is_some_and(|(_, n)| n.parse::<u64>().is_ok()))
    );
    let rows = r["samples"].as_array().expect("report JSON lists samples");
    let (mut got_all, mut want_all) = (0.0, 0.0);
    for t in truth["threads"].as_array().unwrap() {
        let tid = t["tid"].as_u64().unwrap();
        let got = rows
            .iter()
            .filter(|s| s["tid"].as_u64() == Some(tid))
            .map(|s| s["count"].as_u64().unwrap())
            .sum::<u64>() as f64;
        let want = t["schedstat_ns"].as_u64().unwrap() as f64 / 1e9 * HZ;
        eprintln!("{}: {got} samples, {want:.0} expected", t["name"]);
        (got_all, want_all) = (got_all + got, want_all + want);
        // Threads that run in long slices are sampled in proportion; the
        // network threads run in tens-of-µs slices, where a timer-based
        // sampler is known to be biased (their share is checked in total only).
        if ["mix-spin", "mix-syscall"].contains(&t["name"].as_str().unwrap()) {
            assert!(
                (got - want).abs() / want < 0.25,
                "{}: {got} samples vs {want:.0}",
                t["name"]
            );
        }
    }
    assert!(
        (got_all - want_all).abs() / want_all < 0.15,
        "{got_all} samples vs {want_all:.0}"
    );
    // The spinning thread's samples are user code; the syscall thread's mostly kernel.
    let spin = truth["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "mix-spin")
        .unwrap();
    let spin_rows: Vec<&Value> = rows.iter().filter(|s| s["tid"] == spin["tid"]).collect();
    let kernel: u64 = spin_rows
        .iter()
        .filter(|s| s["stack"].as_str().unwrap().ends_with("_[k]"))
        .map(|s| s["count"].as_u64().unwrap())
        .sum();
    let all: u64 = spin_rows.iter().map(|s| s["count"].as_u64().unwrap()).sum();
    // Its kernel share is not zero: preempted by the other three on two
    // CPUs, it spends time in the reschedule path, more the busier the
    // machine (5 % here, 21 % in one CI run). The kernel's own tick samples
    // of the same thread (stime against utime) are the ground truth.
    let ticks = |name: &str| spin[name].as_f64().unwrap();
    let stime_share = ticks("stime_ticks") / (ticks("utime_ticks") + ticks("stime_ticks"));
    let kernel_share = kernel as f64 / all as f64;
    assert!(
        (kernel_share - stime_share).abs() < 0.1 && kernel_share < 0.5,
        "mix-spin: {kernel} of {all} samples in the kernel; its stime share {stime_share:.2}"
    );

    // cpu-mix is Rust: its frames read as demangled paths, without hashes.
    let frames: Vec<&str> = rows
        .iter()
        .flat_map(|s| s["stack"].as_str().unwrap().split(';'))
        .collect();
    let mangled: Vec<&&str> = frames
        .iter()
        .filter(|f| (f.starts_with("_ZN") && f.ends_with('E')) || f.starts_with("_R"))
        .collect();
    assert!(mangled.is_empty(), "mangled frames: {mangled:?}");
    assert!(
        frames.iter().any(|f| f.contains("::") && !f.ends_with("_[k]")),
        "no demangled Rust frame in {} frames",
        frames.len()
    );
}
