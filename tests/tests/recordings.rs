//! Recordings that evolve: a recording written by an older vtrace stays
//! readable, a missing table reads as empty with a note, and only what this
//! vtrace cannot read is refused, naming the versions. Layers switch on and
//! off: `--layers` attaches no probe of a layer it does not name.

use std::path::Path;

use serde_json::Value;
use vtrace_tests::{TempDir, copy_dir, report_json, schema5_fixture, stderr, vtrace};

/// Paths where `now` lacks or changed a value of `then`.
fn same_or_more(then: &Value, now: &Value, path: &str, changed: &mut Vec<String>) {
    match (then, now) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                match b.get(k) {
                    Some(w) => same_or_more(v, w, &format!("{path}/{k}"), changed),
                    None => changed.push(format!("{path}/{k} missing")),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (v, w)) in a.iter().zip(b).enumerate() {
                same_or_more(v, w, &format!("{path}[{i}]"), changed);
            }
        }
        _ if then == now => {}
        _ => changed.push(format!("{path}: {then} -> {now}")),
    }
}

#[test]
fn schema5_recording_reports_as_it_did_when_written() {
    let golden: Value = serde_json::from_str(
        &std::fs::read_to_string(schema5_fixture().with_file_name("schema5.report.json")).unwrap(),
    )
    .unwrap();
    let now = report_json(&schema5_fixture());
    // Every figure the old vtrace reported, under its old name, unchanged
    // (new fields may be added beside them).
    let mut changed = Vec::new();
    same_or_more(&golden, &now, "", &mut changed);
    assert!(
        changed.is_empty(),
        "JSON report of the schema-5 fixture changed: {changed:#?}"
    );
    let o = vtrace(&["report", schema5_fixture().to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let golden_text = std::fs::read_to_string(schema5_fixture().with_file_name("schema5.report.txt")).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        golden_text,
        "text report of the schema-5 fixture changed"
    );
    // CSV covers every table: ping -c 5 -s 2000 on lo is 10 packets of 2042 B at each hop.
    let o = vtrace(&[
        "report",
        "--format",
        "csv",
        "--table",
        "net_hops",
        schema5_fixture().to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let csv = String::from_utf8_lossy(&o.stdout);
    assert!(csv.starts_with("netns,ifindex,hop,direction,packets,bytes,"), "{csv}");
    assert!(
        csv.contains(",queue,tx,10,20420,") && csv.contains(",receive,rx,10,20420,"),
        "{csv}"
    );
    let o = vtrace(&[
        "report",
        "--format",
        "csv",
        "--table",
        "nope",
        schema5_fixture().to_str().unwrap(),
    ]);
    assert!(!o.status.success() && stderr(&o).contains("no table 'nope': it has cpus, hardirqs"));
    for format in ["csv", "folded"] {
        let o = vtrace(&["report", "--format", format, schema5_fixture().to_str().unwrap()]);
        assert!(o.status.success(), "--format {format}: {}", stderr(&o));
        assert!(!o.stdout.is_empty(), "--format {format} printed nothing");
    }
}

#[test]
fn a_missing_table_reads_as_empty_with_a_note() {
    let dir = TempDir::new("missing-table");
    let rec = dir.join("run.vtrace");
    copy_dir(&schema5_fixture(), &rec);
    std::fs::remove_file(rec.join("kvm_events.parquet")).unwrap();
    let report = report_json(&rec);
    let notes: Vec<&str> = report["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        notes.iter().any(|n| n.contains("table kvm_events is missing")),
        "no note on the missing table: {notes:?}"
    );
    assert_eq!(report["kvm"]["userspace_exits"].as_array().unwrap().len(), 0);
    assert_eq!(report["kvm"]["pio"].as_array().unwrap().len(), 0);
    // Everything else is still there.
    assert!(!report["threads"].as_array().unwrap().is_empty());
    assert!(!report["devices"].as_array().unwrap().is_empty());
    let o = vtrace(&["report", rec.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("table kvm_events is missing"));
}

fn set_meta(rec: &Path, edit: impl FnOnce(&mut Value)) {
    let path = rec.join("meta.json");
    let mut meta: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut meta);
    std::fs::write(&path, serde_json::to_vec(&meta).unwrap()).unwrap();
}

#[test]
fn newer_schemas_and_tables_are_refused_naming_the_versions() {
    let dir = TempDir::new("newer-schema");
    let rec = dir.join("run.vtrace");
    copy_dir(&schema5_fixture(), &rec);
    set_meta(&rec, |m| m["schema_version"] = 99.into());
    let o = vtrace(&["report", rec.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("schema version 99") && err.contains("versions 5 to") && err.contains("upgrade vtrace"),
        "{err}"
    );

    set_meta(&rec, |m| {
        m["schema_version"] = 6.into();
        m["tables"] = serde_json::json!({"threads": 7, "cpus": 1});
    });
    let o = vtrace(&["report", rec.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("table threads") && err.contains("version 7"), "{err}");

    // A table this vtrace does not know is skipped with a note.
    set_meta(&rec, |m| {
        m["tables"] = serde_json::json!({"threads": 1, "from_the_future": 1})
    });
    let report = report_json(&rec);
    let notes = report["notes"].to_string();
    assert!(notes.contains("from_the_future is unknown"), "{notes}");
}

/// Which probe families a recording attached, from its probe statuses.
fn attached_layers(rec: &Path) -> Vec<String> {
    let meta: Value = serde_json::from_slice(&std::fs::read(rec.join("meta.json")).unwrap()).unwrap();
    let mut layers: Vec<String> = meta["probes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["available"] == true)
        .map(|p| p["layer"].as_str().unwrap().to_string())
        .collect();
    layers.sort();
    layers.dedup();
    layers
}

#[test]
fn layers_switch_on_and_off() {
    assert!(vtrace_tests::is_root(), "records: run as root");
    let dir = TempDir::new("layers");
    let cpu = dir.join("cpu.vtrace");
    let o = vtrace(&[
        "record",
        "--layers",
        "cpu",
        "-o",
        cpu.to_str().unwrap(),
        "--",
        "sleep",
        "0.2",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let attached = attached_layers(&cpu);
    assert!(
        attached
            .iter()
            .all(|l| ["sched", "irq", "softirq", "syscall"].contains(&l.as_str())),
        "--layers cpu attached {attached:?}"
    );
    let meta: Value = serde_json::from_slice(&std::fs::read(cpu.join("meta.json")).unwrap()).unwrap();
    assert_eq!(meta["layers"], serde_json::json!(["cpu"]));
    assert_eq!(report_json(&cpu)["layers"], serde_json::json!(["cpu"]));
    let text = vtrace(&["report", cpu.to_str().unwrap()]);
    let header = String::from_utf8_lossy(&text.stdout).to_string();
    assert!(
        header.contains("layers cpu | mode default | user/system split: ticks (tick-sampled, no syscall hooks)"),
        "{header}"
    );
    assert!(meta["tables"].get("net_hops").is_none() && meta["tables"].get("threads").is_some());

    let sampled = dir.join("sample.vtrace");
    let o = vtrace(&[
        "record",
        "--layers",
        "cpu,sample",
        "-o",
        sampled.to_str().unwrap(),
        "--",
        "sleep",
        "0.3",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(attached_layers(&sampled).contains(&"sample".to_string()));
    assert!(!attached_layers(&sampled).contains(&"net".to_string()));
    let meta: Value = serde_json::from_slice(&std::fs::read(sampled.join("meta.json")).unwrap()).unwrap();
    assert_eq!(meta["layers"], serde_json::json!(["cpu", "sample"]));

    let o = vtrace(&["record", "--layers", "cpu,nosuch", "--", "true"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("unknown layer 'nosuch': known layers are cpu, net"),
        "{}",
        stderr(&o)
    );
}

/// The library API: `examples/src/embed_record.rs` records a function of its
/// own process with a `Recorder`; the thread's total must match its own
/// schedstat within 2 %, and its split must show both of its halves.
#[test]
fn embedding_example_matches_schedstat() {
    assert!(vtrace_tests::is_root(), "records: run as root");
    let dir = TempDir::new("embed");
    let out = dir.join("embed.vtrace");
    let o = std::process::Command::new(vtrace_tests::bin("embed-record"))
        .arg(&out)
        .output()
        .expect("run embed-record");
    assert!(o.status.success(), "embed-record failed: {}", stderr(&o));
    let line: Value = serde_json::from_slice(&o.stdout).expect("one JSON line");
    let truth = line["schedstat_ns"].as_u64().unwrap();
    let total = line["total_ns"].as_u64().unwrap();
    let err = (total as f64 - truth as f64).abs() / truth as f64;
    eprintln!(
        "embed: schedstat {truth} ns, vtrace {total} ns, error {:.3} %",
        err * 100.0
    );
    assert!(truth > 1_000_000_000, "the worker ran only {truth} ns");
    assert!(
        err < 0.02,
        "vtrace {total} ns vs schedstat {truth} ns: {:.2} %",
        err * 100.0
    );
    let (user, system) = (line["user_ns"].as_u64().unwrap(), line["system_ns"].as_u64().unwrap());
    assert!(
        user > total / 10 && system > total / 10,
        "split user {user} / system {system} of {total}"
    );
    assert_eq!(line["stopped_by"], "stop requested");
    // In the program it measures, only the recorder's own threads are vtrace's.
    assert_ne!(line["role"], "vtrace", "the measured thread counted as vtrace's");
    assert_eq!(line["recorder_role"], "vtrace");
    assert!(out.join("meta.json").is_file());
}
