//! vtrace's own cost: each hook counts its runs, and the kernel's BPF
//! statistics time them (always, in sampled windows, or not at all), against
//! a workload that knows how many syscalls it makes (dd: one read and one
//! write per block).

use serde_json::Value;
use vtrace_tests::{TempDir, report_json, stderr, vtrace};

const BLOCKS: u64 = 5_000_000;

fn record_dd(dir: &TempDir, name: &str, mode: &str) -> Value {
    let rec = dir.join(name);
    let count = format!("count={BLOCKS}");
    let o = vtrace(&[
        "record",
        "--layers",
        "cpu",
        // The exact split attaches sys_enter, the hook whose runs dd's blocks count.
        "--cpu-split",
        "syscalls",
        "--interval",
        "200ms",
        "--self-stats",
        mode,
        "-o",
        rec.to_str().unwrap(),
        "--",
        "dd",
        "if=/dev/zero",
        "of=/dev/null",
        "bs=512",
        &count,
        "status=none",
    ]);
    assert!(o.status.success(), "record: {}", stderr(&o));
    report_json(&rec)
}

fn sys_enter(r: &Value) -> &Value {
    r["overhead"]["programs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["probe"] == "sys_enter")
        .unwrap_or_else(|| panic!("no sys_enter program in {}", r["overhead"]))
}

/// The hook's own count over the whole run: dd's 2 syscalls per block, plus
/// its start-up and everything else on the machine (a few per cent).
fn assert_counts_dd(p: &Value) -> u64 {
    let events = p["events"].as_u64().unwrap();
    assert!(
        (2 * BLOCKS..=2 * BLOCKS + 2 * BLOCKS / 20).contains(&events),
        "sys_enter ran {events} times for {} dd syscalls",
        2 * BLOCKS
    );
    events
}

#[test]
fn statistics_always_on_agree_with_the_hooks_own_count() {
    let dir = TempDir::new("self-stats-always");
    let r = record_dd(&dir, "always.vtrace", "always");
    let p = sys_enter(&r);
    let events = assert_counts_dd(p);
    let counted = p["run_count"].as_u64().unwrap();
    eprintln!(
        "always: sys_enter {events} runs, kernel stats {counted}, {} ns/event",
        p["ns_per_event"]
    );
    assert_eq!(r["overhead"]["bpf_stats_coverage"], 1.0);
    // Both count from about when the programs were attached.
    assert!(
        counted.abs_diff(events) < events / 100,
        "stats {counted} vs hook {events}"
    );
    assert!(p["ns_per_event"].as_f64().unwrap() > 0.0);
}

#[test]
fn sampled_statistics_still_count_every_run() {
    let dir = TempDir::new("self-stats-sampled");
    let r = record_dd(&dir, "sampled.vtrace", "sampled");
    let coverage = r["overhead"]["bpf_stats_coverage"].as_f64().unwrap();
    let p = sys_enter(&r);
    let events = assert_counts_dd(p);
    let counted = p["run_count"].as_u64().unwrap();
    eprintln!("sampled: coverage {coverage:.3}, sys_enter {events} runs, {counted} timed");
    // 20 ms windows every 200 ms interval: about a tenth of the run.
    assert!(coverage > 0.03 && coverage < 0.5, "coverage {coverage}");
    assert!(counted > 0 && counted < events / 2, "timed {counted} of {events} runs");
    let per = p["ns_per_event"].as_f64().unwrap();
    let whole = p["whole_run_time_ns"].as_f64().unwrap();
    assert!(per > 0.0 && (whole - per * events as f64).abs() <= 1.0, "{p}");
}

#[test]
fn statistics_off_still_count_runs() {
    let dir = TempDir::new("self-stats-off");
    let r = record_dd(&dir, "off.vtrace", "off");
    assert_eq!(r["overhead"]["bpf_stats_coverage"], 0.0);
    let p = sys_enter(&r);
    assert_counts_dd(p);
    assert_eq!(p["run_count"], 0);
}
