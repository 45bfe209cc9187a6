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
    // User against kernel: each thread's share of samples with a kernel leaf
    // against the kernel's own tick split of the same thread (stime against
    // utime). The syscall thread's kernel time is continuous, so two samplers
    // at different phases (199 Hz here, the 250 Hz tick) agree on it within a
    // few percent. The spinner's kernel time comes in bursts at preemption
    // (reschedule IPI, return to user), 0-20 % of it depending on how busy the
    // machine is, and the two samplers catch different bursts (0.04 against
    // 0.19 in one CI run): for it, only that user code dominates.
    let kernel_share = |name: &str| {
        let t = truth["threads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap();
        let rows: Vec<&Value> = rows.iter().filter(|s| s["tid"] == t["tid"]).collect();
        let count = |leaf_in_kernel: bool| -> u64 {
            rows.iter()
                .filter(|s| s["stack"].as_str().unwrap().ends_with("_[k]") || !leaf_in_kernel)
                .map(|s| s["count"].as_u64().unwrap())
                .sum()
        };
        let ticks = |field: &str| t[field].as_f64().unwrap();
        let stime_share = ticks("stime_ticks") / (ticks("utime_ticks") + ticks("stime_ticks"));
        (count(true) as f64 / count(false) as f64, stime_share)
    };
    let (sampled, ticked) = kernel_share("mix-syscall");
    assert!(
        (sampled - ticked).abs() < 0.1,
        "mix-syscall: {sampled:.2} of its samples in the kernel, its stime share {ticked:.2}"
    );
    let (sampled, ticked) = kernel_share("mix-spin");
    assert!(
        sampled < 0.5,
        "mix-spin: {sampled:.2} of its samples in the kernel (stime share {ticked:.2}); its user loop should dominate"
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
