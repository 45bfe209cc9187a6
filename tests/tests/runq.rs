//! The run-queue layer against the kernel's own account: more spinning
//! threads than CPUs, so each waits runnable for a good share of the run;
//! the wait vtrace timed per thread (wakeup or preemption -> switch-in) must
//! agree with the run_delay of /proc/<tid>/schedstat, which cpu-mix reads
//! for each of its threads once they are parked.

use serde_json::Value;
use vtrace_tests::{TempDir, bin, report_json, stderr, vtrace};

#[test]
fn run_queue_delay_per_thread_agrees_with_schedstat() {
    let cpus = std::thread::available_parallelism().unwrap().get();
    let spinners = (2 * cpus).to_string();
    let dir = TempDir::new("runq");
    let rec = dir.join("runq.vtrace");
    let mix = bin("cpu-mix");
    let o = vtrace(&[
        "record",
        "--layers",
        "cpu,runq",
        "-o",
        rec.to_str().unwrap(),
        "--",
        mix.to_str().unwrap(),
        "--only",
        "spin",
        "--spinners",
        &spinners,
        "--seconds",
        "2",
    ]);
    assert!(o.status.success(), "record: {}", stderr(&o));
    let truth: Value = String::from_utf8_lossy(&o.stdout)
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .expect("cpu-mix prints one JSON line");
    let r = report_json(&rec);
    let rows = r["runq"].as_array().expect("the runq rows");
    let threads = truth["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 2 * cpus);
    for t in threads {
        let tid = t["tid"].as_u64().unwrap();
        let run_delay = t["run_delay_ns"].as_f64().unwrap();
        // Two spinners per CPU: each waits about as long as it runs.
        assert!(run_delay > 0.3e9, "thread {tid} waited only {run_delay} ns");
        let row = rows
            .iter()
            .find(|row| row["tid"].as_u64() == Some(tid))
            .unwrap_or_else(|| panic!("thread {tid} has no runq row"));
        let timed = row["delay_ns"].as_f64().unwrap();
        assert!(
            (timed - run_delay).abs() <= 0.05 * run_delay,
            "thread {tid}: vtrace {timed} ns, schedstat run_delay {run_delay} ns"
        );
        assert_eq!(row["comm"], "mix-spin");
        assert_eq!(row["role"], "app");
        assert!(row["waits"].as_u64().unwrap() > 10, "{row}");
        assert!(row["max_ns"].as_u64() >= row["min_ns"].as_u64(), "{row}");
        // The thread rows carry it too.
        let thread = r["threads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["tid"].as_u64() == Some(tid))
            .expect("its thread row");
        assert_eq!(thread["runq_delay_ns"], row["delay_ns"]);
        assert_eq!(thread["runq_waits"], row["waits"]);
        // Who ran on that CPU before its longest wait ended: another thread.
        assert_ne!(row["worst_prev_tid"].as_u64(), Some(tid), "{row}");
        assert_ne!(row["worst_prev_comm"], "", "{row}");
    }
}
