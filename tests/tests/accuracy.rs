//! CPU attribution against ground truth: each cpu-mix thread's total must
//! match its own /proc/<tid>/schedstat run time within 2 %; with
//! `--cpu-split ticks` its user share must also match the kernel's own
//! tick-sampled utime/stime.

use serde_json::Value;
use vtrace_tests::{TempDir, bin, num, report_json, stderr, vtrace_env};

fn thread(report: &Value, tid: u64) -> &Value {
    report["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tid"] == tid)
        .unwrap_or_else(|| panic!("tid {tid} missing from the report"))
}

#[test]
fn per_thread_cpu_time_matches_schedstat() {
    check_against_schedstat(&[], "tp_btf", "syscalls");
}

/// The fallbacks, forced, must be as exact: raw_tp reads the tasks through
/// helper calls, the classic tracepoint through its record.
#[test]
fn raw_tp_fallback_matches_schedstat_too() {
    check_against_schedstat(&[("VTRACE_SKIP_METHODS", "tp_btf")], "raw_tp", "syscalls");
}

#[test]
fn tracepoint_fallback_matches_schedstat_too() {
    check_against_schedstat(&[("VTRACE_SKIP_METHODS", "tp_btf,raw_tp")], "tracepoint", "syscalls");
}

/// Without syscall hooks the totals stay exact and the user/system split is
/// the kernel's own tick-sampled one.
#[test]
fn tick_split_matches_schedstat_and_kernel_utime_stime() {
    check_against_schedstat(&[], "tp_btf", "ticks");
}

/// Plain `vtrace record`, every default layer on: the same.
#[test]
fn the_default_mode_matches_schedstat() {
    check_against_schedstat(&[], "tp_btf", "default");
}

/// `split` "default": no --layers or --cpu-split, which must mean ticks.
fn check_against_schedstat(env: &[(&str, &str)], method: &str, split: &str) {
    let dir = TempDir::new(&format!("accuracy-{method}-{split}"));
    let rec = dir.join("run.vtrace");
    let truth_path = dir.join("truth.json");
    let mix = bin("cpu-mix");
    let mut args = vec!["record"];
    if split != "default" {
        args.extend(["--layers", "cpu", "--cpu-split", split]);
    }
    args.extend([
        "-o",
        rec.to_str().unwrap(),
        "--",
        mix.to_str().unwrap(),
        "--seconds",
        "4",
        "--out",
        truth_path.to_str().unwrap(),
    ]);
    let o = vtrace_env(&args, env);
    let plain = split == "default";
    let split = if plain { "ticks" } else { split };
    assert!(o.status.success(), "record failed: {}", stderr(&o));
    let truth: Value = serde_json::from_slice(&std::fs::read(&truth_path).unwrap()).unwrap();
    let report = report_json(&rec);
    let switch = report["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == "sched_switch")
        .unwrap();
    assert_eq!(switch["method"], method, "attach method");
    assert_eq!(report["cpu_split"], split);
    let syscall_hooks = report["probes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["id"] == "sys_enter" && p["available"] == true);
    assert_eq!(syscall_hooks, split == "syscalls", "sys_enter attached");
    if plain {
        assert_eq!(report["mode"], "default");
        assert_eq!(
            report["layers"],
            serde_json::json!(["cpu", "net", "tun", "kvm", "uprobe", "vsock"])
        );
        let attached = |id: &str| {
            report["probes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["id"] == id && p["available"] == true)
        };
        // kvm_run only with a vCPU at the start or --kvm-run (tests/kvm.rs).
        for id in ["sys_exit", "net_dev_queue", "consume_skb", "kvm_run"] {
            assert!(!attached(id), "{id} attached by plain record");
        }
        assert!(report["self_cost_fraction"].as_f64().unwrap() > 0.0);
    }
    let wall = num(&report, "wall_ns");
    let cpus = report["cpus"].as_u64().unwrap();

    let mut max_err: f64 = 0.0;
    eprintln!(
        "{:<12}{:>14}{:>14}{:>9}{:>7}{:>7}{:>8}{:>14}",
        "thread", "schedstat_ns", "vtrace_ns", "err%", "user%", "sys%", "sirq%", "kernel user%"
    );
    for t in truth["threads"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        let expected = num(t, "schedstat_ns");
        let got = thread(&report, t["tid"].as_u64().unwrap());
        let total = num(got, "total_ns");
        let err = (total as f64 - expected as f64).abs() / expected as f64;
        max_err = max_err.max(err);
        let share = |f: &str| num(got, f) as f64 * 100.0 / total.max(1) as f64;
        let (utime, stime) = (num(t, "utime_ticks"), num(t, "stime_ticks"));
        let kernel_user = utime as f64 * 100.0 / (utime + stime).max(1) as f64;
        eprintln!(
            "{name:<12}{expected:>14}{total:>14}{:>9.3}{:>7.1}{:>7.1}{:>8.2}{kernel_user:>14.1}",
            err * 100.0,
            share("user_ns"),
            share("system_ns"),
            share("softirq_ns")
        );
        // The kernel's share counts interrupts as system; the user share of
        // both is sampled at 1 tick (4 ms at HZ=250) resolution.
        if split == "ticks" && utime + stime >= 50 {
            assert!(
                (share("user_ns") - kernel_user).abs() <= 5.0,
                "{name}: user {:.1} % vs the kernel's tick-sampled {kernel_user:.1} %",
                share("user_ns")
            );
        }
        assert!(
            err <= 0.02,
            "{name}: vtrace {total} ns vs schedstat {expected} ns ({:.2} % off)",
            err * 100.0
        );
        assert!(total <= wall, "{name}: {total} ns of CPU in {wall} ns of wall time");
        match name {
            // With ticks the kernel's own utime/stime above is the truth: on
            // this shared VM a pure user loop has read as low as 80 % user
            // there (ticks that land in interrupt work count as system), so
            // an absolute floor would test the machine, not vtrace.
            "mix-spin" if split == "syscalls" => assert!(
                share("user_ns") >= 97.0,
                "spin thread only {:.1} % user",
                share("user_ns")
            ),
            "mix-syscall" => assert!(
                share("system_ns") > 50.0,
                "syscall thread only {:.1} % system",
                share("system_ns")
            ),
            _ => {}
        }
    }
    eprintln!("max relative error vs schedstat: {:.3} %", max_err * 100.0);

    let net_rx = report["softirq_vectors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["vector"] == "NET_RX")
        .expect("NET_RX seen");
    assert!(num(net_rx, "ns") > 0 && num(net_rx, "count") > 0, "NET_RX: {net_rx}");

    let threads = report["threads"].as_array().unwrap();
    let busy: u64 = threads.iter().map(|t| num(t, "total_ns")).sum();
    let all: u64 = threads.iter().map(|t| num(t, "total_ns") + num(t, "idle_ns")).sum();
    assert!(busy <= wall * cpus, "busy {busy} ns > wall x CPUs {}", wall * cpus);
    assert!(
        all <= wall * cpus + wall / 100,
        "busy+idle {all} ns > wall x CPUs {}",
        wall * cpus
    );
    // Per-CPU table and per-thread table account for the same time.
    let per_cpu: u64 = report["per_cpu"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            ["user_ns", "system_ns", "softirq_ns", "hardirq_ns", "guest_ns"]
                .iter()
                .map(|f| num(c, f))
                .sum::<u64>()
        })
        .sum();
    let diff = (per_cpu as f64 - busy as f64).abs() / busy as f64;
    // Threads are timed by the scheduler's clock, CPUs by tracepoint timestamps: they
    // differ by scheduler-path gaps handed to and from the idle task, and by steal time.
    assert!(diff < 0.03, "per-CPU busy {per_cpu} vs per-thread busy {busy}");
}

/// A thread that sleeps and wakes thousands of times (cpu-mix's `mix-sleep`:
/// 200 us sleeps between short bursts) beside a spinner and a syscall thread:
/// every thread within 2 % of its own schedstat in five recordings in a row,
/// in both split modes. Each wakeup is a switch-in; where the kernel does
/// not report one (this machine's PID-1 blind spot), only the thread's own
/// scheduler clock keeps the next slice from taking the previous thread's
/// time (issue #25: +6 % in one run of two before).
#[test]
fn a_thread_that_sleeps_and_wakes_matches_schedstat_five_times_in_a_row() {
    for split in ["ticks", "syscalls"] {
        for round in 1..=5 {
            let dir = TempDir::new(&format!("accuracy-sleep-{split}-{round}"));
            let rec = dir.join("run.vtrace");
            let truth_path = dir.join("truth.json");
            let mix = bin("cpu-mix");
            let o = vtrace_env(
                &[
                    "record",
                    "--layers",
                    "cpu",
                    "--cpu-split",
                    split,
                    "-o",
                    rec.to_str().unwrap(),
                    "--",
                    mix.to_str().unwrap(),
                    "--seconds",
                    "3",
                    "--only",
                    "spin,syscall,sleep",
                    "--out",
                    truth_path.to_str().unwrap(),
                ],
                &[],
            );
            assert!(o.status.success(), "record failed: {}", stderr(&o));
            let truth: Value = serde_json::from_slice(&std::fs::read(&truth_path).unwrap()).unwrap();
            let report = report_json(&rec);
            let untraced = report["overhead"]["untraced_switches"].as_u64().unwrap_or(0);
            for t in truth["threads"].as_array().unwrap() {
                let name = t["name"].as_str().unwrap();
                let expected = num(t, "schedstat_ns");
                let got = thread(&report, t["tid"].as_u64().unwrap());
                let total = num(got, "total_ns");
                let err = (total as f64 - expected as f64) / expected as f64;
                eprintln!(
                    "{split} #{round} {name:<12} schedstat {expected:>12} vtrace {total:>12} err {:+.3} % \
                     unbounded {} ns, switches {}, untraced switches in the run {untraced}",
                    err * 100.0,
                    num(got, "unbounded_ns"),
                    num(got, "switches"),
                );
                if name == "mix-sleep" {
                    assert!(
                        num(t, "units") >= 1000,
                        "mix-sleep slept only {} times",
                        num(t, "units")
                    );
                }
                assert!(
                    err.abs() <= 0.02,
                    "{split} round {round}: {name}: vtrace {total} ns vs schedstat {expected} ns ({:+.2} %)",
                    err * 100.0
                );
            }
        }
    }
}
