//! What survives when vtrace is stopped or killed: SIGKILL mid-run leaves a
//! journal that `vtrace report` reads and `vtrace recover` writes, with
//! per-thread CPU time consistent with the kernel's schedstat up to the
//! kill, and nothing of vtrace's left in the kernel; SIGTERM and SIGHUP
//! write a complete recording and pass the stop on to the workload; an
//! older recording at the output path is kept; two recordings at once are
//! each exact.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;
use vtrace_tests::{TempDir, bin, report_json, stderr, vtrace};

const INTERVAL_MS: u64 = 200;

/// `vtrace record --interval 200ms -o OUT -- cpu-mix --only spin --seconds S`, not waited for.
fn start_recording(out: &Path, seconds: u32, truth: Option<&Path>) -> Child {
    let mix = bin("cpu-mix");
    let mut args: Vec<String> = vec![
        "record".into(),
        "--interval".into(),
        format!("{INTERVAL_MS}ms"),
        "-o".into(),
        out.display().to_string(),
        "--".into(),
        mix.display().to_string(),
        "--only".into(),
        "spin".into(),
        "--seconds".into(),
        seconds.to_string(),
    ];
    if let Some(t) = truth {
        args.extend(["--out".into(), t.display().to_string()]);
    }
    Command::new(bin("vtrace"))
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start vtrace")
}

/// The staging directory of a recording in progress at `out`.
fn staging_of(out: &Path) -> Option<PathBuf> {
    let prefix = format!(".{}.tmp.", out.file_name().unwrap().to_string_lossy());
    std::fs::read_dir(out.parent().unwrap())
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(&prefix))
}

/// Intervals journaled so far (the lines that close one).
fn journaled_intervals(staging: &Path) -> usize {
    let text = std::fs::read_to_string(staging.join("journal/intervals.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("owed").is_some())
        .count()
}

/// Waits for `cond` for at most `limit`.
fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// The workload's pid, from the journal's metadata.
fn workload_pid(staging: &Path) -> u32 {
    let meta: Value = serde_json::from_slice(&std::fs::read(staging.join("journal/meta.json")).unwrap()).unwrap();
    meta["workload"]["pid"].as_u64().expect("workload pid") as u32
}

/// Gone, or a zombie waiting for its new parent.
fn is_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

/// Names of vtrace's programs loaded in the kernel (BPF names are cut to 15 bytes).
fn vtrace_programs_loaded() -> Vec<String> {
    const OURS: [&str; 3] = ["btf_sched_switc", "raw_sched_proce", "raw_softirq_ent"];
    aya::programs::loaded_programs()
        .flatten()
        .filter_map(|p| p.name_as_str().map(str::to_string))
        .filter(|n| OURS.contains(&n.as_str()))
        .collect()
}

fn process_total(report: &Value, pid: u32) -> u64 {
    report["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["pid"] == pid)
        .map(|t| t["total_ns"].as_u64().unwrap())
        .sum()
}

#[test]
fn sigkill_leaves_a_journal_that_recovers_up_to_the_last_interval() {
    assert!(vtrace_tests::is_root(), "run as root");
    let dir = TempDir::new("sigkill");
    let out = dir.join("run.vtrace");
    let mut vt = start_recording(&out, 30, None);
    let staging = {
        let found = wait_for(Duration::from_secs(20), || {
            staging_of(&out).is_some_and(|s| s.join("journal/meta.json").is_file())
        });
        assert!(found, "no journal appeared");
        staging_of(&out).unwrap()
    };
    const N: usize = 8;
    assert!(
        wait_for(Duration::from_secs(20), || journaled_intervals(&staging) >= N),
        "{N} intervals were not journaled"
    );
    assert!(
        !vtrace_programs_loaded().is_empty(),
        "vtrace's programs are loaded while it records"
    );
    let pid = workload_pid(&staging);
    let before_kill = journaled_intervals(&staging);
    let truth = vtrace_tests::schedstat_ns(pid).expect("the workload's schedstat");
    vt.kill().unwrap(); // SIGKILL
    vt.wait().unwrap();

    // The kernel keeps nothing of it: its programs went with its fds.
    assert!(
        wait_for(Duration::from_secs(5), || vtrace_programs_loaded().is_empty()),
        "programs still loaded after SIGKILL: {:?}",
        vtrace_programs_loaded()
    );
    // Its command got SIGTERM (PR_SET_PDEATHSIG) instead of running on unrecorded.
    assert!(
        wait_for(Duration::from_secs(5), || is_gone(pid)),
        "the workload outlived vtrace"
    );

    // `report` reads the unfinished directory as it is, and names it from the target.
    let o = vtrace(&["report", out.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("vtrace recover"), "{}", stderr(&o));
    let r = report_json(&staging);
    let incomplete = &r["incomplete"];
    let intervals = incomplete["intervals"].as_u64().expect("marked incomplete") as usize;
    assert!(intervals + 1 >= before_kill, "{intervals} intervals of {before_kill}");
    // Killed before the first checkpoint (every 10 s): the CPU layer's journal alone, and a note says so.
    assert!(incomplete["checkpoint_ns"].is_null(), "{incomplete}");
    assert!(
        r["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap_or_default().contains("before the first checkpoint")),
        "{}",
        r["notes"]
    );
    // The spinner's CPU time up to the last interval: at most what schedstat
    // said at the kill, and short of it by no more than the time since the
    // last journaled interval (under two intervals) with 2 % slack.
    let got = process_total(&r, pid);
    assert!(
        got <= truth + truth / 50,
        "{got} ns recovered, more than schedstat's {truth} ns"
    );
    let missing = truth.saturating_sub(got);
    eprintln!(
        "journaled before the kill: {before_kill} intervals; recovered {intervals} ({} ms); \
         spinner {got} ns recovered, schedstat at the kill {truth} ns",
        incomplete["covered_ns"].as_u64().unwrap_or(0) / 1_000_000
    );
    assert!(
        missing <= 2 * INTERVAL_MS * 1_000_000 + truth / 50,
        "{got} ns recovered, schedstat {truth} ns: {missing} ns missing"
    );

    // The same journal as a vtrace that was PID 1 would leave it (a
    // container's entry point), for a `recover` that is PID 1 as well.
    let left_by_pid1 = dir.join(".pid1.vtrace.tmp.1");
    let o = Command::new("cp")
        .arg("-a")
        .arg(&staging)
        .arg(&left_by_pid1)
        .output()
        .unwrap();
    assert!(o.status.success(), "cp: {}", stderr(&o));

    // `recover` writes a normal recording and removes the journal's directory.
    let o = vtrace(&["recover", out.to_str().unwrap()]);
    assert!(o.status.success(), "recover failed: {}", stderr(&o));
    assert!(out.join("meta.json").is_file());
    assert!(!staging.exists(), "the unfinished directory remains");
    assert!(!out.join("journal").exists());
    let recovered = report_json(&out);
    assert_eq!(recovered["incomplete"], r["incomplete"]);
    assert_eq!(process_total(&recovered, pid), got);
    let text = String::from_utf8(vtrace(&["report", out.to_str().unwrap()]).stdout).unwrap();
    assert!(text.contains("INCOMPLETE"), "the text report says so");

    let pid1_out = dir.join("pid1.vtrace");
    let o = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc"])
        .arg(bin("vtrace"))
        .args(["recover", pid1_out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "recover as PID 1 failed: {}", stderr(&o));
    assert!(staging_of(&pid1_out).is_none(), "a directory of it remains");
    assert_eq!(report_json(&pid1_out)["incomplete"], r["incomplete"]);
}

/// SIGKILL after a checkpoint: every layer's tables survive as they stood
/// at it, checked against ground truth: the preads file-reader counted
/// itself, the loopback packets against lo's own counters (50 pings, 100
/// packets each way at least), roles from the platform attribution. CPU
/// time still runs to the last interval.
#[test]
fn sigkill_after_a_checkpoint_keeps_every_layers_tables() {
    assert!(vtrace_tests::is_root(), "run as root");
    let dir = TempDir::new("sigkill-checkpoint");
    let out = dir.join("run.vtrace");
    let truth = dir.join("reads.json");
    let script = format!(
        "ping -c 50 -i 0.01 -q 127.0.0.1 >/dev/null && {} --dir {} --reads 3000 --out {} >/dev/null && exec sleep 30",
        bin("file-reader").display(),
        dir.0.display(),
        truth.display()
    );
    let mut vt = Command::new(bin("vtrace"))
        .args([
            "record",
            "--interval",
            &format!("{INTERVAL_MS}ms"),
            "--checkpoint",
            "1s",
        ])
        .args([
            "--layers",
            "cpu,net,fs",
            "-o",
            out.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start vtrace");
    assert!(
        wait_for(Duration::from_secs(30), || truth.is_file()),
        "file-reader did not finish"
    );
    // A checkpoint that read the maps after the reads ended: a checkpoint
    // reads them before it writes its file, so the first one written after
    // the reads may have read before them; the one after it has not.
    let reads_done = std::fs::metadata(&truth).unwrap().modified().unwrap();
    let checkpoint = || {
        staging_of(&out).and_then(|s| {
            std::fs::metadata(s.join("journal/checkpoint.json"))
                .ok()?
                .modified()
                .ok()
        })
    };
    assert!(
        wait_for(Duration::from_secs(30), || checkpoint().is_some_and(|t| t > reads_done)),
        "no checkpoint after the reads"
    );
    let written_after_the_reads = checkpoint().unwrap();
    assert!(
        wait_for(Duration::from_secs(30), || checkpoint()
            .is_some_and(|t| t > written_after_the_reads)),
        "no second checkpoint after the reads"
    );
    let staging = staging_of(&out).unwrap();
    vt.kill().unwrap();
    vt.wait().unwrap();
    assert!(
        wait_for(Duration::from_secs(5), || vtrace_programs_loaded().is_empty()),
        "programs still loaded after SIGKILL"
    );

    let r = report_json(&staging);
    let incomplete = &r["incomplete"];
    let at = incomplete["checkpoint_ns"].as_u64().expect("a checkpoint survived");
    assert!(at <= incomplete["covered_ns"].as_u64().unwrap());
    // The fs layer: every pread file-reader made, in its process's row.
    let truth: Value = serde_json::from_slice(&std::fs::read(&truth).unwrap()).unwrap();
    for p in truth["processes"].as_array().unwrap() {
        let preads: u64 = r["files"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["pid"] == p["pid"] && f["op"] == "pread64")
            .map(|f| f["count"].as_u64().unwrap())
            .sum();
        assert_eq!(preads, p["preads"].as_u64().unwrap(), "preads of {}", p["pid"]);
    }
    // The net layer: loopback's packets at both hops equal its own counters, read with them.
    let counters = r["device_counters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "lo")
        .expect("lo's counters");
    for (hop, counter) in [("xmit", "tx_packets"), ("receive", "rx_packets")] {
        let packets = r["devices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["name"] == "lo" && d["hop"] == hop)
            .and_then(|d| d["packets"].as_u64())
            .unwrap_or(0);
        eprintln!("lo {hop}: {packets} packets, counters {}", counters[counter]);
        assert!(packets >= 100, "lo {hop}: {packets} packets, 50 pings make 100");
        assert_eq!(Some(packets), counters[counter].as_u64(), "lo {hop}");
    }
    // Attribution from the checkpoint: ping is the workload's.
    let ping = r["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["comm"] == "ping")
        .expect("ping's thread");
    assert_eq!(
        (&ping["role"], &ping["selected"]),
        (&Value::from("app"), &Value::from(true))
    );

    // `recover` keeps it all.
    let o = vtrace(&["recover", out.to_str().unwrap()]);
    assert!(o.status.success(), "recover failed: {}", stderr(&o));
    let recovered = report_json(&out);
    assert_eq!(recovered["incomplete"], r["incomplete"]);
    assert_eq!(recovered["files"], r["files"]);
    assert_eq!(recovered["devices"], r["devices"]);
}

/// SIGTERM and SIGHUP stop the recording, which is written whole; the
/// workload gets SIGTERM and its end is recorded.
#[test]
fn sigterm_and_sighup_write_a_complete_recording() {
    assert!(vtrace_tests::is_root(), "run as root");
    for (signal, name) in [(libc::SIGTERM, "SIGTERM"), (libc::SIGHUP, "SIGHUP")] {
        let dir = TempDir::new(&format!("signal-{name}"));
        let out = dir.join("run.vtrace");
        let mut vt = start_recording(&out, 30, None);
        assert!(
            wait_for(Duration::from_secs(20), || staging_of(&out)
                .is_some_and(|s| journaled_intervals(&s) >= 3)),
            "recording did not start"
        );
        let started = Instant::now();
        unsafe { libc::kill(vt.id() as i32, signal) };
        let status = vt.wait().unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{name}: took {:?}",
            started.elapsed()
        );
        let mut err = String::new();
        std::io::Read::read_to_string(vt.stderr.as_mut().unwrap(), &mut err).unwrap();
        assert!(out.join("meta.json").is_file(), "{name}: no recording: {err}");
        assert!(
            !out.join("journal").exists(),
            "{name}: a complete recording keeps no journal"
        );
        let r = report_json(&out);
        assert_eq!(r["stopped_by"], name);
        assert!(r["incomplete"].is_null(), "{name}: {}", r["incomplete"]);
        assert_eq!(
            r["workload"]["signal"],
            libc::SIGTERM,
            "{name}: the workload got SIGTERM"
        );
        // vtrace exits as its command did: killed by SIGTERM.
        assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{name}: {status:?}");
        assert!(staging_of(&out).is_none(), "{name}: staging left behind");
    }
}

#[test]
fn an_existing_recording_is_kept_as_old_unless_forced() {
    assert!(vtrace_tests::is_root(), "run as root");
    let dir = TempDir::new("keep-old");
    let out = dir.join("run.vtrace");
    let old = dir.join("run.vtrace.old");
    let record = |extra: &[&str]| {
        let mut args = vec!["record", "--layers", "cpu", "-o", out.to_str().unwrap()];
        args.extend(extra);
        args.extend(["--", "true"]);
        let o = vtrace(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        report_json(&out)["workload"]["pid"].as_u64().unwrap()
    };
    let first = record(&[]);
    let second = record(&[]);
    assert_eq!(
        report_json(&old)["workload"]["pid"].as_u64(),
        Some(first),
        "the first kept as .old"
    );
    let third = record(&["--force"]);
    assert_eq!(report_json(&out)["workload"]["pid"].as_u64(), Some(third));
    assert_eq!(
        report_json(&old)["workload"]["pid"].as_u64(),
        Some(first),
        "--force replaced run.vtrace without touching .old"
    );
    assert_ne!(second, third);
}

/// Two recordings of two workloads at the same time: each thread's total in
/// each recording within 2 % of its own schedstat (cpu-mix's ground truth).
#[test]
fn two_recordings_at_once_are_each_exact() {
    assert!(vtrace_tests::is_root(), "run as root");
    let dir = TempDir::new("concurrent");
    let runs: Vec<(PathBuf, PathBuf, Child)> = ["a", "b"]
        .iter()
        .map(|n| {
            let out = dir.join(&format!("{n}.vtrace"));
            let truth = dir.join(&format!("{n}.json"));
            let child = start_recording(&out, 3, Some(&truth));
            (out, truth, child)
        })
        .collect();
    for (out, truth, mut child) in runs {
        let status = child.wait().unwrap();
        assert!(status.success(), "{}: {status:?}", out.display());
        vtrace_tests::assert_threads_match_schedstat(&report_json(&out), &truth, &out.display().to_string());
    }
}

/// A tmpfs mounted for one test, unmounted when dropped (a failure included).
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// `dir`/mnt, a tmpfs of `size` (mount's syntax: "12m").
    fn mount(dir: &TempDir, size: &str) -> Tmpfs {
        let mnt = dir.join("mnt");
        std::fs::create_dir_all(&mnt).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&mnt)
            .status()
            .unwrap();
        assert!(ok.success(), "mount a tmpfs");
        Tmpfs(mnt)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Recording `--events` onto a disk too small for them: the events stop
/// before the disk is full, every one not written is counted, the aggregate
/// tables are whole and the workload runs to its end (vtrace exits with its
/// status).
#[test]
fn a_disk_that_fills_drops_events_counted_and_keeps_the_tables() {
    assert!(vtrace_tests::is_root(), "run as root");
    let dir = TempDir::new("tiny-disk");
    let mounted = Tmpfs::mount(&dir, "28m");
    let mnt = mounted.0.clone();
    let out = mnt.join("run.vtrace");
    let o = vtrace(&[
        "record",
        "--events",
        "-o",
        out.to_str().unwrap(),
        "--",
        "ping",
        "-f",
        "-q",
        "-w",
        "3",
        "127.0.0.1",
    ]);
    assert!(o.status.success(), "vtrace exits as ping did: {}", stderr(&o));
    let r = report_json(&out);
    let dropped = r["overhead"]["net_event_drops"].as_u64().unwrap();
    let written = r["journeys"]["events"].as_u64().unwrap_or(0);
    eprintln!("events written {written}, dropped {dropped}");
    assert!(dropped > 0, "the disk was too small for every event");
    assert!(written > 0, "events up to the margin are kept");
    // The loss is in both reports, under its layer's name.
    assert_eq!(r["overhead"]["losses"]["net.event_drops"].as_u64(), Some(dropped));
    let text = vtrace_tests::vtrace(&["report", out.to_str().unwrap()]);
    assert!(
        String::from_utf8_lossy(&text.stdout).contains(&format!("lost: net.event_drops {dropped}:")),
        "the text report names the loss"
    );
    assert!(
        r["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap_or_default().contains("were dropped")),
        "a note says so: {}",
        r["notes"]
    );
    // The aggregate tables: ping's thread and loopback's packets.
    assert!(
        r["threads"].as_array().unwrap().iter().any(|t| t["comm"] == "ping"),
        "ping's thread"
    );
    assert!(
        r["devices"].as_array().unwrap().iter().any(|d| d["name"] == "lo"),
        "loopback's rows"
    );
    assert_eq!(r["workload"]["exit_code"], 0);
}

/// A vtrace killed before its probes were attached has recorded nothing: the
/// next recording to the same path removes the staging directory it left
/// (8 MiB set aside for tables), which no `recover` could use.
#[test]
fn a_staging_directory_with_nothing_recorded_is_removed_by_the_next_recording() {
    assert!(vtrace_tests::is_root(), "run as root");
    let dir = TempDir::new("dead-staging");
    let out = dir.join("run.vtrace");
    let mut vt = start_recording(&out, 30, None);
    // Killed as soon as its staging directory exists: loading and attaching
    // the programs (hundreds of ms) come before the journal.
    assert!(wait_for(Duration::from_secs(10), || staging_of(&out).is_some()));
    unsafe { libc::kill(vt.id() as i32, libc::SIGSTOP) };
    let left = staging_of(&out).unwrap();
    assert!(
        !left.join("journal").exists(),
        "stopped too late: it had journaled already"
    );
    vt.kill().unwrap();
    vt.wait().unwrap();
    assert!(left.is_dir(), "SIGKILL leaves it");
    let o = vtrace(&["record", "--layers", "cpu", "-o", out.to_str().unwrap(), "--", "true"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!left.exists(), "{} is still there", left.display());
    assert!(out.join("meta.json").is_file());
}

/// A vtrace killed after its recording was whole (meta.json written) but
/// before it was moved into place (syncing the tables comes between) left
/// it in its staging directory, journal and all: the next recording to that
/// path moves it there, as that vtrace would have, then keeps it as `.old`
/// like any earlier recording.
#[test]
fn a_finished_recording_a_killed_vtrace_left_unmoved_is_kept() {
    assert!(vtrace_tests::is_root(), "run as root");
    let dir = TempDir::new("unmoved");
    let out = dir.join("run.vtrace");
    let record = || {
        let o = vtrace(&["record", "--layers", "cpu", "-o", out.to_str().unwrap(), "--", "true"]);
        assert!(o.status.success(), "{}", stderr(&o));
        o
    };
    record();
    let first = report_json(&out)["workload"]["pid"].as_u64().unwrap();
    // Left as the kill would: named for a vtrace that is gone (no pid is
    // above the kernel's largest pid_max, 2^22), its journal not yet removed.
    let left = dir.join(".run.vtrace.tmp.4999999");
    std::fs::rename(&out, &left).unwrap();
    std::fs::create_dir(left.join("journal")).unwrap();
    std::fs::write(left.join("journal/meta.json"), b"{}").unwrap();
    let o = record();
    assert!(stderr(&o).contains("moved to"), "{}", stderr(&o));
    assert!(!left.exists(), "{} is still there", left.display());
    assert_eq!(
        report_json(&dir.join("run.vtrace.old"))["workload"]["pid"].as_u64(),
        Some(first),
        "the killed vtrace's recording, kept as .old"
    );
    assert!(!dir.join("run.vtrace.old/journal").exists());
    let second = report_json(&out)["workload"]["pid"].as_u64();
    assert_ne!(second, Some(first));

    // A vtrace that is PID 1 (a container's entry point) finds its own pid
    // on the one a killed run left: moved aside, then into place, not taken over.
    std::fs::rename(&out, dir.join(".run.vtrace.tmp.1")).unwrap();
    let o = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc"])
        .arg(bin("vtrace"))
        .args(["record", "--layers", "cpu", "-o", out.to_str().unwrap(), "--", "true"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("moved to"), "{}", stderr(&o));
    assert_eq!(
        report_json(&dir.join("run.vtrace.old"))["workload"]["pid"].as_u64(),
        second,
        "the killed PID 1's recording, kept as .old"
    );

    // --force replaces what is at the target, not what a killed run left.
    let left = dir.join(".run.vtrace.tmp.4999999");
    std::fs::rename(&out, &left).unwrap();
    let o = vtrace(&[
        "record",
        "--layers",
        "cpu",
        "--force",
        "-o",
        out.to_str().unwrap(),
        "--",
        "true",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(left.join("meta.json").is_file(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("{} holds", left.display())),
        "{}",
        stderr(&o)
    );
}

/// A disk that fills mid-run under the journal: checkpoints fail (each
/// counted, the last whole one kept, never a stop), the workload runs to its
/// end, and the recording is written whole from the space set aside.
#[test]
fn a_disk_that_fills_under_the_journal_keeps_recording() {
    assert!(vtrace_tests::is_root(), "run as root");
    let dir = TempDir::new("full-journal");
    let mounted = Tmpfs::mount(&dir, "12m");
    let mnt = mounted.0.clone();
    let out = mnt.join("run.vtrace");
    let vt = Command::new(bin("vtrace"))
        .args([
            "record",
            "--interval",
            "100ms",
            "--checkpoint",
            "200ms",
            "--layers",
            "cpu,net",
        ])
        .args([
            "-o",
            out.to_str().unwrap(),
            "--",
            "ping",
            "-c",
            "30",
            "-i",
            "0.1",
            "127.0.0.1",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(
        wait_for(Duration::from_secs(20), || staging_of(&out)
            .is_some_and(|s| s.join("journal/checkpoint.json").is_file())),
        "no checkpoint written"
    );
    // Every byte left goes to a filler file.
    let filled = Command::new("dd")
        .args(["if=/dev/zero", "bs=64k"])
        .arg(format!("of={}", mnt.join("filler").display()))
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(!filled.success(), "dd stops at a full disk");
    let o = vt.wait_with_output().unwrap();
    assert!(o.status.success(), "vtrace exits as ping did: {}", stderr(&o));
    let r = report_json(&out);
    assert!(r["incomplete"].is_null());
    assert_eq!(r["workload"]["exit_code"], 0);
    let notes = r["notes"].as_array().unwrap();
    assert!(
        notes
            .iter()
            .any(|n| n.as_str().unwrap_or_default().contains("checkpoints failed")),
        "a note counts the failed checkpoints: {notes:?}"
    );
    // The recording's tables are whole: ping's thread and loopback's 60 packets each way.
    assert!(r["threads"].as_array().unwrap().iter().any(|t| t["comm"] == "ping"));
    let lo_xmit = r["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "lo" && d["hop"] == "xmit")
        .and_then(|d| d["packets"].as_u64())
        .unwrap_or(0);
    assert!(lo_xmit >= 60, "lo xmit {lo_xmit}");
}

/// A path that cannot hold a recording is refused before the workload starts.
#[test]
fn an_unwritable_output_fails_before_the_workload_starts() {
    assert!(vtrace_tests::is_root(), "run as root");
    let dir = TempDir::new("unwritable");
    let marker = dir.join("ran");
    let o = vtrace(&[
        "record",
        "-o",
        "/proc/run.vtrace",
        "--",
        "touch",
        marker.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("/proc/run.vtrace") && err.lines().count() <= 2, "{err}");
    assert!(!marker.exists(), "the workload ran");
}
