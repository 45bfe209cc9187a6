//! Cost per operation, `compare` and `explain` on real recordings: the same
//! redis-benchmark run twice against the host lab instance, the second with
//! a CPU-burning sidecar in the same process tree (so the same role). The
//! sidecar's own schedstat is the ground truth of the cost it adds.

use serde_json::Value;
use vtrace_tests::{LabDown, TempDir, bin, report_json, stderr, vtrace};

const REQUESTS: u32 = 20_000;

fn record(dir: &TempDir, name: &str, script: &str) -> std::path::PathBuf {
    let rec = dir.join(name);
    let o = vtrace(&["record", "-o", rec.to_str().unwrap(), "--", "sh", "-c", script]);
    assert!(o.status.success(), "record {name}: {}", stderr(&o));
    rec
}

fn json_of(args: &[&str]) -> Value {
    let o = vtrace(args);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("JSON parses")
}

#[test]
fn explain_puts_a_sidecars_cpu_first_and_its_terms_sum_to_the_difference() {
    let dir = TempDir::new("explain");
    let _lab = LabDown::new(&["host"]);
    let o = vtrace(&["lab", "up", "host"]);
    assert!(o.status.success(), "lab up host: {}", stderr(&o));
    let addr = String::from_utf8_lossy(&o.stdout)
        .split("redis ")
        .nth(1)
        .and_then(|s| s.split(':').next())
        .expect("address printed")
        .to_string();
    let bench = format!("redis-benchmark -h {addr} -t get,set -d 64 -n {REQUESTS} -c 20 -q");
    let a = record(&dir, "a.vtrace", &format!("{bench}; wait"));
    let spin_json = dir.join("spin.json");
    let b = record(
        &dir,
        "b.vtrace",
        &format!(
            "{} --seconds 0.6 --only spin --out {} & {bench}; wait",
            bin("cpu-mix").display(),
            spin_json.display()
        ),
    );

    // The work, from redis-benchmark's own output (kept in workload.out).
    let ops = 2.0 * REQUESTS as f64;
    for rec in [&a, &b] {
        let report = report_json(rec);
        let w = &report["workload"]["ops"];
        assert_eq!(
            (w["count"].as_f64(), w["unit"].as_str()),
            (Some(ops), Some("request")),
            "{w}"
        );
        assert!(
            std::fs::read_to_string(rec.join("workload.out"))
                .unwrap()
                .contains("requests per second")
        );
        // Every metric per operation is its value over the work.
        for m in report["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["unit"] == "ns")
        {
            let per_op = m["per_op"].as_f64().expect("ns metrics carry per_op");
            assert!((per_op - m["value"].as_f64().unwrap() / ops).abs() < 1e-6, "{m}");
        }
    }

    let spin: Value = serde_json::from_slice(&std::fs::read(&spin_json).unwrap()).unwrap();
    let spin_thread = &spin["threads"][0];
    let spin_ns = spin_thread["schedstat_ns"].as_f64().unwrap();
    let spin_tid = spin_thread["tid"].as_u64().unwrap();
    let b_report = report_json(&b);
    let spin_role = b_report["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tid"].as_u64() == Some(spin_tid))
        .expect("the sidecar thread is recorded")["role"]
        .as_str()
        .unwrap()
        .to_string();

    let ex = json_of(&["explain", a.to_str().unwrap(), b.to_str().unwrap(), "--format", "json"]);
    let ex = &ex["explain"];
    assert_eq!(ex["per_op_unit"], "request");
    let terms = ex["terms"].as_array().unwrap();
    let first = &terms[0];
    let truth = spin_ns / ops;
    eprintln!("first term {first}; sidecar {truth:.0} ns per request");
    assert_eq!(
        (first["role"].as_str().unwrap(), first["state"].as_str().unwrap()),
        (spin_role.as_str(), "user")
    );
    let added = first["diff_ns"].as_f64().unwrap();
    assert!(
        (added - truth).abs() < 0.15 * truth,
        "added {added:.0} ns/request, the sidecar burnt {truth:.0}"
    );

    // The terms sum to the difference, and each total is the recording's own
    // CPU per request (its report's per-op metrics, vtrace's role left out).
    let sum: f64 = terms.iter().map(|t| t["diff_ns"].as_f64().unwrap()).sum();
    let total = ex["total_diff_ns"].as_f64().unwrap();
    assert!(
        (sum - total).abs() < 1e-6 * total.abs().max(1.0),
        "terms {sum} vs total {total}"
    );
    for (rec, key) in [(&a, "total_a_ns"), (&b, "total_b_ns")] {
        let own: f64 = report_json(rec)["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["key"] == "cpu_ns" && m["dims"]["role"] != "vtrace")
            .map(|m| m["per_op"].as_f64().unwrap())
            .sum();
        let said = ex[key].as_f64().unwrap();
        assert!((own - said).abs() < 1e-6 * own, "{key}: {said} vs the report's {own}");
    }

    // Text: the headline and the first term as a person reads them.
    let o = vtrace(&["explain", a.to_str().unwrap(), b.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("CPU per request more than A"), "{text}");
    let first_row = text
        .lines()
        .skip_while(|l| !l.contains("largest first"))
        .nth(2)
        .unwrap_or_default();
    assert!(first_row.contains(&spin_role) && first_row.contains("user"), "{text}");

    // compare: the same per-request figures side by side.
    let cmp = json_of(&["compare", a.to_str().unwrap(), b.to_str().unwrap(), "--format", "json"]);
    assert_eq!(cmp["per_op_unit"], "request");
    let row = cmp["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == "cpu_ns" && r["dims"]["role"] == spin_role.as_str() && r["dims"]["state"] == "user")
        .expect("the sidecar's role and state are compared");
    let values: Vec<f64> = row["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert!((values[1] - values[0] - added).abs() < 1e-6 * added, "{row}");
}

#[test]
fn ops_given_on_the_command_line_replace_what_the_output_says() {
    let dir = TempDir::new("ops-flag");
    let rec = dir.join("r.vtrace");
    let o = vtrace(&[
        "record",
        "--layers",
        "cpu",
        "--ops",
        "500",
        "-o",
        rec.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "echo hello",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "hello\n",
        "the workload's output is passed on"
    );
    let report = report_json(&rec);
    assert_eq!(report["workload"]["ops"]["count"].as_f64(), Some(500.0));
    assert_eq!(report["workload"]["ops"]["source"], "--ops");
    let o = vtrace(&["report", rec.to_str().unwrap(), "--ops", "1000"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("Per op: 1000 ops done (from --ops)"), "{text}");
    // Unknown output and no --ops: no per-operation figures, and nothing invented.
    let plain = dir.join("p.vtrace");
    let o = vtrace(&["record", "--layers", "cpu", "-o", plain.to_str().unwrap(), "--", "true"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report = report_json(&plain);
    assert!(report["workload"]["ops"].is_null(), "{}", report["workload"]);
    assert!(
        report["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m.get("per_op").is_none())
    );
}
