//! The faults layer against the kernel's own count: cpu-mix's `mix-faults`
//! thread touches N fresh pages (N faults in user mode) and read(2)s
//! /dev/zero into N more (N faults the kernel takes on the thread's behalf);
//! the thread's minflt+majflt from /proc/self/task/<tid>/stat is the ground
//! truth.

use serde_json::Value;
use vtrace_tests::{TempDir, bin, num, report_json, stderr, vtrace};

const PAGES: u64 = 3000;

#[test]
fn page_faults_per_thread_match_the_kernels_count() {
    let dir = TempDir::new("faults");
    let rec = dir.join("run.vtrace");
    let truth_path = dir.join("truth.json");
    let mix = bin("cpu-mix");
    let pages = PAGES.to_string();
    let o = vtrace(&[
        "record",
        "--layers",
        "cpu,faults",
        "-o",
        rec.to_str().unwrap(),
        "--",
        mix.to_str().unwrap(),
        "--only",
        "faults",
        "--pages",
        &pages,
        "--out",
        truth_path.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "record failed: {}", stderr(&o));
    let truth: Value = serde_json::from_slice(&std::fs::read(&truth_path).unwrap()).unwrap();
    let t = &truth["threads"][0];
    assert_eq!(t["name"], "mix-faults");
    let kernel_count = num(t, "minflt") + num(t, "majflt");
    let r = report_json(&rec);
    let row = r["faults"]
        .as_array()
        .expect("faults rows")
        .iter()
        .find(|f| f["tid"] == t["tid"])
        .unwrap_or_else(|| panic!("no faults row for mix-faults: {}", r["faults"]));
    let (user, kernel) = (num(row, "user"), num(row, "kernel"));
    eprintln!("mix-faults: user {user}, kernel {kernel}; the kernel's minflt+majflt {kernel_count}");
    // The read(2) into fresh pages: one kernel-mode fault a page, exactly.
    assert_eq!(kernel, PAGES, "kernel-mode faults");
    assert!(user >= PAGES, "user-mode faults {user} < {PAGES} pages touched");
    // Every fault the kernel counted for the thread is seen; the few more
    // are taken after the count was read (the thread parks, then exits).
    let seen = user + kernel;
    assert!(
        seen >= kernel_count && seen <= kernel_count + 16,
        "vtrace {seen} faults vs the kernel's {kernel_count}"
    );
    assert_eq!(row["role"], "app");
    // Beside the thread's CPU time, and no loss.
    let thread = r["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["tid"] == t["tid"])
        .unwrap();
    assert_eq!(
        (num(thread, "faults_user"), num(thread, "faults_kernel")),
        (user, kernel)
    );
    assert_eq!(r["overhead"]["losses"]["faults.drops"], 0);
    let probes = r["probes"].as_array().unwrap();
    for id in ["page_fault_user", "page_fault_kernel"] {
        let p = probes.iter().find(|p| p["id"] == id).unwrap();
        assert_eq!(p["available"], true, "{p}");
    }
}
