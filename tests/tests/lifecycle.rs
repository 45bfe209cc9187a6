//! `record` and `report` under failure: failing and missing commands, Ctrl-C,
//! corrupt recordings, unwritable paths, missing privilege, unknown platforms.

use std::{
    process::{Command, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use vtrace_tests::{TempDir, bin, report_json, stderr, vtrace};

#[test]
fn record_returns_the_commands_exit_status_and_keeps_the_recording() {
    let dir = TempDir::new("exit");
    let rec = dir.join("fail.vtrace");
    let o = vtrace(&[
        "record",
        "-o",
        rec.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "echo working; exit 3",
    ]);
    assert_eq!(o.status.code(), Some(3), "stderr: {}", stderr(&o));
    let r = report_json(&rec);
    assert_eq!(r["workload"]["exit_code"], 3);
    assert_eq!(r["stopped_by"], "workload exited");
    assert!(!r["threads"].as_array().unwrap().is_empty());
}

#[test]
fn a_command_that_cannot_start_still_leaves_a_recording() {
    let dir = TempDir::new("nostart");
    let rec = dir.join("nostart.vtrace");
    let o = vtrace(&[
        "record",
        "-o",
        rec.to_str().unwrap(),
        "--",
        "/nonexistent/vtrace-no-such-command",
    ]);
    assert_eq!(o.status.code(), Some(127));
    assert!(
        stderr(&o).contains("cannot start /nonexistent/vtrace-no-such-command"),
        "{}",
        stderr(&o)
    );
    let r = report_json(&rec);
    assert!(
        r["stopped_by"]
            .as_str()
            .unwrap()
            .starts_with("workload failed to start")
    );
}

fn interrupt_after(args: &[&str], after: Duration) -> (std::process::ExitStatus, Duration) {
    let mut child = Command::new(bin("vtrace"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    sleep(after);
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let start = Instant::now();
    let status = child.wait().unwrap();
    (status, start.elapsed())
}

#[test]
fn sigint_mid_run_leaves_a_valid_recording() {
    let dir = TempDir::new("sigint");
    // With a command: the command gets the signal, its status is recorded.
    let rec = dir.join("cmd.vtrace");
    let (status, took) = interrupt_after(
        &["record", "-o", rec.to_str().unwrap(), "--", "sleep", "30"],
        Duration::from_millis(2500),
    );
    assert!(took < Duration::from_secs(10), "vtrace took {took:?} to stop");
    assert_eq!(status.code(), Some(130), "sleep killed by SIGINT is reported as 128+2");
    let r = report_json(&rec);
    assert_eq!(r["stopped_by"], "SIGINT");
    assert_eq!(r["workload"]["signal"], libc::SIGINT);
    assert!(r["wall_ns"].as_u64().unwrap() >= 2_000_000_000);

    // Without a command: recording for a long duration, stopped early.
    let rec = dir.join("nocmd.vtrace");
    let (status, _) = interrupt_after(
        &["record", "--duration", "60s", "-o", rec.to_str().unwrap()],
        Duration::from_millis(2500),
    );
    assert_eq!(status.code(), Some(0));
    let r = report_json(&rec);
    assert_eq!(r["stopped_by"], "SIGINT");
    assert!(r["threads"].as_array().unwrap().len() > 2);
}

#[test]
fn duration_stops_a_recording_without_a_command() {
    let dir = TempDir::new("duration");
    let rec = dir.join("d.vtrace");
    let start = Instant::now();
    let o = vtrace(&[
        "record",
        "--duration",
        "1500ms",
        "--interval",
        "500ms",
        "-o",
        rec.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(8),
        "took {took:?}"
    );
    let r = report_json(&rec);
    assert_eq!(r["stopped_by"], "duration elapsed");
}

#[test]
fn report_rejects_corrupt_and_foreign_recordings() {
    let dir = TempDir::new("corrupt");
    // A real recording, then damaged two ways.
    let rec = dir.join("ok.vtrace");
    assert!(
        vtrace(&["record", "-o", rec.to_str().unwrap(), "--", "true"])
            .status
            .success()
    );
    std::fs::write(rec.join("threads.parquet"), b"PAR1 this is not parquet").unwrap();
    let o = vtrace(&["report", rec.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let msg = stderr(&o);
    assert!(
        msg.contains("corrupt vtrace recording") && msg.contains("threads.parquet"),
        "{msg}"
    );
    assert_eq!(msg.trim().lines().count(), 1, "one-line message: {msg}");

    std::fs::write(rec.join("meta.json"), b"{ truncated").unwrap();
    let msg = stderr(&vtrace(&["report", rec.to_str().unwrap()]));
    assert!(
        msg.contains("corrupt vtrace recording") && msg.contains("meta.json"),
        "{msg}"
    );

    let foreign = dir.join("notes.txt");
    std::fs::write(&foreign, "hello").unwrap();
    let o = vtrace(&["report", foreign.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("is not a vtrace recording"), "{}", stderr(&o));
}

#[test]
fn unwritable_output_fails_before_the_workload_runs() {
    let dir = TempDir::new("unwritable");
    let marker = dir.join("ran");
    let o = vtrace(&[
        "record",
        "-o",
        "/proc/vtrace-cannot-write-here/run.vtrace",
        "--",
        "touch",
        marker.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("cannot write the recording to /proc/vtrace-cannot-write-here/run.vtrace"),
        "{}",
        stderr(&o)
    );
    assert!(
        !marker.exists(),
        "the workload ran although the recording could not be written"
    );
    // An existing path that is not a recording is never replaced.
    let o = vtrace(&["record", "-o", dir.0.to_str().unwrap(), "--", "true"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("is not a vtrace recording (refusing to replace it)"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn unknown_platform_is_named() {
    let o = vtrace(&["record", "--platform", "no-such-platform", "--", "true"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("unknown platform 'no-such-platform'") && stderr(&o).contains("running now: "),
        "{}",
        stderr(&o)
    );
}

#[test]
fn probes_lists_every_probe_with_method_or_reason() {
    let o = vtrace(&["probes", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let probes: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let probes = probes.as_array().unwrap();
    assert!(probes.len() >= 21);
    for p in probes {
        for key in ["id", "layer", "method", "available", "reason"] {
            assert!(p.get(key).is_some(), "{key} missing in {p}");
        }
        if p["available"] == false {
            assert!(
                p["reason"].as_str().is_some_and(|r| !r.is_empty()),
                "unavailable without a reason: {p}"
            );
        }
    }
    let switch = probes.iter().find(|p| p["id"] == "sched_switch").unwrap();
    assert_eq!(switch["method"], "tp_btf");
}
