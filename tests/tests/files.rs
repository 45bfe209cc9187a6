//! The fs layer against the workload's own counts: two file-reader
//! processes pread the same files a known number of times, one through an
//! overlay mount and one on the overlay's lower directory. Per process and
//! filesystem, vtrace's pread64 calls and bytes equal theirs exactly; the
//! overlay reads are attributed to `overlay`, the others to the lower
//! filesystem's type (its magic number, from statfs).

use std::process::Command;

use serde_json::Value;
use vtrace_tests::{TempDir, bin, report_json, stderr, vtrace};

/// An overlay mount, unmounted when dropped (a failed test included).
struct Overlay(std::path::PathBuf);

impl Drop for Overlay {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

const READS: u64 = 3000;
const BLOCK: u64 = 4096;

/// The filesystem magic number of `path` (`stat -f`).
fn fs_magic(path: &std::path::Path) -> u64 {
    let o = Command::new("stat")
        .args(["-f", "-c", "%t"])
        .arg(path)
        .output()
        .unwrap();
    u64::from_str_radix(String::from_utf8(o.stdout).unwrap().trim(), 16).unwrap()
}

#[test]
fn preads_per_process_and_filesystem_equal_the_workloads_own_counts() {
    assert!(vtrace_tests::is_root(), "run as root");
    let dir = TempDir::new("files");
    let [lower, upper, work, merged] = ["lower", "upper", "work", "merged"].map(|d| {
        let p = dir.join(d);
        std::fs::create_dir_all(&p).unwrap();
        p
    });
    // The files exist in the lower directory before the overlay is mounted:
    // reading them through it goes down to them without a copy-up.
    let reader = bin("file-reader");
    let made = Command::new(&reader)
        .args(["--dir", lower.to_str().unwrap(), "--reads", "1"])
        .output()
        .unwrap();
    assert!(made.status.success());
    let o = Command::new("mount")
        .args(["-t", "overlay", "overlay", "-o"])
        .arg(format!(
            "lowerdir={},upperdir={},workdir={}",
            lower.display(),
            upper.display(),
            work.display()
        ))
        .arg(&merged)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "mount overlay: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let _overlay = Overlay(merged.clone());

    let rec = dir.join("files.vtrace");
    let (via_overlay, via_lower) = (dir.join("overlay.json"), dir.join("lower.json"));
    let script = format!(
        "{r} --dir {m} --reads {READS} --out {a} >/dev/null && {r} --dir {l} --reads {READS} --out {b} >/dev/null",
        r = reader.display(),
        m = merged.display(),
        l = lower.display(),
        a = via_overlay.display(),
        b = via_lower.display(),
    );
    let o = vtrace(&[
        "record",
        "--layers",
        "fs",
        "-o",
        rec.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert!(o.status.success(), "record: {}", stderr(&o));
    let r = report_json(&rec);
    let files = r["files"].as_array().expect("report JSON has files rows");

    let lower_magic = fs_magic(&lower);
    for (truth_path, magic, fs) in [
        (&via_overlay, 0x794c_7630u64, Some("overlay")),
        (&via_lower, lower_magic, None),
    ] {
        let truth: Value = serde_json::from_slice(&std::fs::read(truth_path).unwrap()).unwrap();
        let child = &truth["processes"][0];
        let (pid, preads, bytes) = (
            child["pid"].as_u64().unwrap(),
            child["preads"].as_u64().unwrap(),
            child["bytes"].as_u64().unwrap(),
        );
        assert_eq!((preads, bytes), (READS, READS * BLOCK));
        let rows: Vec<&Value> = files
            .iter()
            .filter(|f| f["pid"].as_u64() == Some(pid) && f["op"] == "pread64")
            .collect();
        eprintln!(
            "pid {pid}: {preads} preads of {bytes} B; vtrace: {:?}",
            rows.iter()
                .map(|f| format!("{} {} calls {} B", f["fs"], f["count"], f["bytes"]))
                .collect::<Vec<_>>()
        );
        assert_eq!(rows.len(), 1, "pid {pid}: its preads on one filesystem");
        let row = rows[0];
        assert_eq!(
            row["magic"].as_u64(),
            Some(magic),
            "pid {pid}: filesystem of its preads"
        );
        if let Some(fs) = fs {
            assert_eq!(row["fs"], fs);
        } else {
            assert_ne!(row["fs"], "overlay");
        }
        assert_eq!(
            (row["count"].as_u64(), row["bytes"].as_u64(), row["errors"].as_u64()),
            (Some(preads), Some(bytes), Some(0)),
            "pid {pid}: preads and bytes"
        );
        // Latency quantiles are measured and ordered.
        let (p50, p99) = (row["p50_ns"].as_u64().unwrap(), row["p99_ns"].as_u64().unwrap());
        assert!(p50 > 0 && p50 <= p99, "pid {pid}: p50 {p50} p99 {p99}");
        // Its open of the file: one openat on the same filesystem.
        let opens: u64 = files
            .iter()
            .filter(|f| f["pid"].as_u64() == Some(pid) && f["op"] == "openat" && f["magic"].as_u64() == Some(magic))
            .map(|f| f["count"].as_u64().unwrap())
            .sum();
        assert!(opens >= 1, "pid {pid}: its openat of the file on that filesystem");
    }
}
