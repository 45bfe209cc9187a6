//! Every layer that can lose events says so: with one of its maps made too
//! small on purpose (VTRACE_MAP_ENTRIES), a real workload makes it drop,
//! and the loss is in the JSON report (`overhead.losses`) under the layer's
//! name and in the text report (the cost line for the CPU engine's, a
//! `lost:` line naming the counter and its meaning for the others). With
//! the maps at their size, the same counters read 0.

use serde_json::Value;
use vtrace_tests::{TempDir, bin, report_json, stderr, vtrace, vtrace_env};

/// Records `workload` with `args` and the maps in `small` shrunk; returns
/// the JSON report and the text report.
fn record(name: &str, args: &[&str], small: &str, workload: &[&str]) -> (Value, String) {
    let dir = TempDir::new(&format!("losses-{name}"));
    let rec = dir.join("run.vtrace");
    let mut all = vec!["record"];
    all.extend_from_slice(args);
    all.extend(["-o", rec.to_str().unwrap(), "--"]);
    all.extend_from_slice(workload);
    let o = vtrace_env(&all, &[("VTRACE_MAP_ENTRIES", small)]);
    assert!(o.status.success(), "{name}: record failed: {}", stderr(&o));
    let text = vtrace(&["report", rec.to_str().unwrap()]);
    assert!(text.status.success());
    (report_json(&rec), String::from_utf8_lossy(&text.stdout).into_owned())
}

fn lost(report: &Value, key: &str) -> u64 {
    report["overhead"]["losses"][key]
        .as_u64()
        .unwrap_or_else(|| panic!("no {key} in overhead.losses: {}", report["overhead"]["losses"]))
}

/// The counter is non-zero in JSON and named with its count in the text.
fn assert_reported(name: &str, report: &Value, text: &str, key: &str) {
    let n = lost(report, key);
    eprintln!("{name}: {key} = {n}");
    assert!(n > 0, "{name}: nothing counted in {key}");
    assert!(
        text.contains(&format!("lost: {key} {n}: ")),
        "{name}: the text report does not name {key} {n}"
    );
}

#[test]
fn each_layer_that_can_lose_events_reports_its_losses() {
    let mix = bin("cpu-mix");
    let mix = mix.to_str().unwrap();
    let reader = bin("file-reader");
    let reader = reader.to_str().unwrap();
    let files = TempDir::new("losses-files");

    // CPU engine: a per-thread map of two entries (one is the overflow row).
    let (r, text) = record(
        "cpu",
        &["--layers", "cpu", "--cpu-split", "syscalls"],
        "THREADS=2",
        &[mix, "--seconds", "1", "--only", "spin,syscall,sleep"],
    );
    let overflows = lost(&r, "cpu.thread_map_overflows");
    assert!(overflows > 0, "per-thread map overflows counted");
    assert!(
        text.contains(&format!("per-thread map overflows: {overflows};")),
        "the cost line names them"
    );

    // Run queue: one thread's waits kept, four spinners on two CPUs wait.
    let (r, text) = record(
        "runq",
        &["--layers", "cpu,runq"],
        "RUNQ_STATS=1",
        &[mix, "--seconds", "1", "--only", "spin", "--spinners", "4"],
    );
    assert_reported("runq", &r, &text, "runq.drops");

    // Files: one key (process, call, filesystem) where the reader makes several.
    let (r, text) = record(
        "fs",
        &["--layers", "cpu,fs"],
        "FS_STATS=1",
        &[reader, "--dir", files.0.to_str().unwrap(), "--reads", "200"],
    );
    assert_reported("fs", &r, &text, "fs.dropped");

    // Block: one key where direct writes then direct reads make two.
    let target = files.join("block.dat");
    let script = format!(
        "dd if=/dev/zero of={0} bs=4k count=32 oflag=direct status=none && \
         dd if={0} of=/dev/null bs=4k iflag=direct status=none",
        target.display()
    );
    let (r, text) = record(
        "block",
        &["--layers", "cpu,block"],
        "BLOCK_STATS=1",
        &["sh", "-c", &script],
    );
    assert_reported("block", &r, &text, "block.unpaired");

    // Stacks: one sampled stack kept where a busy process has many.
    let (r, text) = record(
        "sample",
        &["--layers", "cpu,sample", "--sample", "499"],
        "SAMPLES=1",
        &[mix, "--seconds", "1", "--only", "spin,syscall"],
    );
    assert_reported("sample", &r, &text, "sample.drops");

    // Page faults: one thread's counts kept where every process faults.
    let (r, text) = record(
        "faults",
        &["--layers", "cpu,faults"],
        "FAULTS=1",
        &[mix, "--only", "faults", "--pages", "500"],
    );
    assert_reported("faults", &r, &text, "faults.drops");

    // Per-packet events: a one-page ring under a flood ping on loopback.
    let (r, text) = record(
        "net",
        &["--layers", "cpu,net", "--events"],
        "NET_EVENTS=4096",
        &["ping", "-f", "-q", "-w", "1", "127.0.0.1"],
    );
    assert_reported("net", &r, &text, "net.event_drops");

    // At their own size, the same workload loses nothing: the counters are 0, not absent.
    let (r, text) = record(
        "none",
        &["--layers", "cpu,runq,fs"],
        "",
        &[reader, "--dir", files.0.to_str().unwrap(), "--reads", "200"],
    );
    for key in ["cpu.thread_map_overflows", "runq.drops", "fs.dropped"] {
        assert_eq!(lost(&r, key), 0, "{key} with maps at their size");
    }
    assert!(!text.contains("lost: "), "no loss line when nothing was lost");
}
