//! `vtrace bench` on a small real matrix: two lab platforms runnable here
//! (host, runc) and one that is not (firecracker: its runs fail with their
//! error and the matrix goes on) x two redis value sizes x two repetitions.
//! The bench report's JSON, CSV and HTML must carry the numbers of the
//! cells' own recordings and of redis-benchmark's own output; running the
//! same command again resumes without redoing a finished run.

use std::path::{Path, PathBuf};

use serde_json::Value;
use vtrace_tests::{LabDown, TempDir, report_json, stderr, vtrace};

const REQUESTS: u32 = 4000;

fn bench(out: &Path) -> std::process::Output {
    vtrace(&[
        "bench",
        "--platforms",
        "host,runc,firecracker",
        "--sizes",
        "64,16384",
        "--repeat",
        "2",
        "--requests",
        &REQUESTS.to_string(),
        "--layers",
        "cpu,net",
        "-o",
        out.to_str().unwrap(),
    ])
}

fn run_dir(out: &Path, platform: &str, size: u32, rep: u32) -> PathBuf {
    out.join(format!("cells/{platform}/redis-{size}/rep{rep}.vtrace"))
}

/// requests/s as redis-benchmark printed it (-q: one rate per test): all
/// its requests over the time the tests took.
fn rate_from_output(run: &Path) -> f64 {
    let out = std::fs::read_to_string(run.join("workload.out")).unwrap();
    let rates: Vec<f64> = out
        .split(['\n', '\r'])
        .filter_map(|l| l.split_once(" requests per second")?.0.rsplit(' ').next()?.parse().ok())
        .collect();
    assert_eq!(rates.len(), 2, "GET and SET in {out}");
    let seconds: f64 = rates.iter().map(|r| REQUESTS as f64 / r).sum();
    2.0 * REQUESTS as f64 / seconds
}

#[test]
fn a_small_matrix_records_every_cell_reports_their_numbers_and_resumes() {
    let dir = TempDir::new("bench");
    let out = dir.join("bench");
    let _down = LabDown::new(&["host", "runc"]);
    let o = bench(&out);
    assert!(o.status.success(), "bench: {}", stderr(&o));
    let said = stderr(&o);
    assert!(said.contains("8 runs recorded, 0 done before, 4 failed"), "{said}");
    for size in [64, 16384] {
        for rep in [1, 2] {
            let why =
                std::fs::read_to_string(out.join(format!("cells/firecracker/redis-{size}/rep{rep}.error"))).unwrap();
            assert!(why.contains("firecracker"), "{why}");
        }
    }
    // The lab instances the bench started are down again.
    assert!(!Path::new("/run/vtrace-lab/host.json").exists() && !Path::new("/run/vtrace-lab/runc.json").exists());

    let o = vtrace(&["report", out.to_str().unwrap(), "--format", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    let cells = report["bench"]["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 6);
    let csv = String::from_utf8(vtrace(&["report", out.to_str().unwrap(), "--format", "csv"]).stdout).unwrap();
    let html = String::from_utf8(vtrace(&["report", out.to_str().unwrap(), "--format", "html"]).stdout).unwrap();
    assert!(html.matches("<svg").count() >= 2, "throughput and CPU figures drawn");
    let mut bytes_per_packet = std::collections::HashMap::new();
    for c in cells.iter().filter(|c| c["platform"] != "firecracker") {
        let (platform, size) = (
            c["platform"].as_str().unwrap(),
            c["param"].as_str().unwrap().parse::<u32>().unwrap(),
        );
        assert_eq!(c["runs"], 2, "{c}");
        let runs = [run_dir(&out, platform, size, 1), run_dir(&out, platform, size, 2)];
        // Throughput: redis-benchmark's own rates, the mean and range of the two runs.
        let rates = runs.each_ref().map(|r| rate_from_output(r));
        let spread = &c["ops_per_s"];
        let mean = (rates[0] + rates[1]) / 2.0;
        assert!(
            (spread["mean"].as_f64().unwrap() - mean).abs() < 1e-6 * mean,
            "{c} vs {rates:?}"
        );
        assert!(
            (spread["min"].as_f64().unwrap() - rates[0].min(rates[1])).abs() < 1e-6 * mean,
            "{c}"
        );
        assert!(
            (spread["max"].as_f64().unwrap() - rates[0].max(rates[1])).abs() < 1e-6 * mean,
            "{c}"
        );
        // CPU per request: the cells' own recordings, summed over both runs.
        let reports = runs.each_ref().map(|r| report_json(r));
        let cpu: f64 = reports
            .iter()
            .flat_map(|r| r["metrics"].as_array().unwrap().iter())
            .filter(|m| m["key"] == "cpu_ns" && m["dims"]["role"] != "vtrace")
            .map(|m| m["value"].as_f64().unwrap())
            .sum();
        let requests: f64 = reports
            .iter()
            .map(|r| r["workload"]["ops"]["count"].as_f64().unwrap())
            .sum();
        assert_eq!(requests, 4.0 * REQUESTS as f64);
        let per_op = c["cpu_ns_per_op_total"].as_f64().unwrap();
        assert!(
            (per_op - cpu / requests).abs() < 1e-6 * per_op,
            "{per_op} vs {}",
            cpu / requests
        );
        // The same numbers in CSV and HTML (as numbers: serde_json may read
        // a float back one unit in the last place off).
        let prefix = format!("{platform},redis,{size},0,2,request,");
        let csv_mean: f64 = csv
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|rest| rest.split(',').next()?.parse().ok())
            .unwrap_or_else(|| panic!("{prefix} in {csv}"));
        let mean = spread["mean"].as_f64().unwrap();
        assert!((csv_mean - mean).abs() <= 1e-9 * mean, "{csv_mean} vs {mean}");
        assert!(
            html.contains(&format!("<td class=\"r\">{:.0}</td>", spread["mean"].as_f64().unwrap())),
            "mean in the HTML"
        );
        let busiest = &c["hops"][0];
        bytes_per_packet.insert(
            (platform.to_string(), size),
            busiest["bytes_per_packet"].as_f64().unwrap(),
        );
    }
    // 16 KB values travel in larger packets than 64 B ones, on every platform.
    for p in ["host", "runc"] {
        assert!(
            bytes_per_packet[&(p.to_string(), 16384)] > 4.0 * bytes_per_packet[&(p.to_string(), 64)],
            "{bytes_per_packet:?}"
        );
    }

    // The same figure from SQL alone: the bench's runs table joined to its
    // cells' thread tables, by docs/sql.md's query as written, in DuckDB.
    let runs = vtrace_tests::duckdb(
        out.parent().unwrap(),
        "SELECT platform, recorded, error, ops FROM 'bench/runs.parquet' ORDER BY ALL",
    );
    assert_eq!(runs.len(), 12, "{runs:?}");
    for r in &runs {
        let recorded = r["platform"] != "firecracker";
        assert_eq!(r["recorded"], recorded, "{r}");
        assert_eq!(r["error"].as_str().unwrap().contains("firecracker"), !recorded, "{r}");
        assert_eq!(
            r["ops"].as_f64().unwrap(),
            if recorded { 2.0 * REQUESTS as f64 } else { 0.0 },
            "{r}"
        );
    }
    let query = vtrace_tests::documented_sql("sql.md", "CPU µs per request by platform and role");
    let by_sql = vtrace_tests::duckdb(out.parent().unwrap(), &query);
    for c in cells.iter().filter(|c| c["platform"] != "firecracker") {
        let mine: Vec<&Value> = by_sql
            .iter()
            .filter(|r| r["platform"] == c["platform"] && r["param"] == c["param"])
            .collect();
        let roles = c["cpu_ns_per_op"].as_array().unwrap();
        eprintln!("{} {}: report {roles:?}, DuckDB {mine:?}", c["platform"], c["param"]);
        assert_eq!(
            mine.len(),
            roles.len(),
            "{} {}: {mine:?} vs {roles:?}",
            c["platform"],
            c["param"]
        );
        for pair in roles {
            let (role, ns) = (pair[0].as_str().unwrap(), pair[1].as_f64().unwrap());
            let us = mine
                .iter()
                .find(|r| r["role"] == role)
                .unwrap_or_else(|| panic!("{role} not in {mine:?}"))["cpu_us_per_op"]
                .as_f64()
                .unwrap();
            assert!((us * 1e3 - ns).abs() <= 1e-9 * ns, "{role}: {us} µs vs {ns} ns");
        }
    }

    // Again: nothing done twice, the failed runs tried again.
    let before = std::fs::metadata(run_dir(&out, "host", 64, 1).join("meta.json"))
        .unwrap()
        .modified()
        .unwrap();
    let o = bench(&out);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("0 runs recorded, 8 done before, 4 failed"),
        "{}",
        stderr(&o)
    );
    let after = std::fs::metadata(run_dir(&out, "host", 64, 1).join("meta.json"))
        .unwrap()
        .modified()
        .unwrap();
    assert_eq!(before, after, "a finished run is not redone");
}

/// `--stress 1` beside ping: the busy loop runs the whole recording under
/// the role `stress` (its own thread, named vtrace-stress), and the cost per
/// reply leaves it out, as it leaves vtrace's own CPU out.
#[test]
fn stressors_run_beside_the_workload_under_their_own_role_left_out_of_the_cost() {
    let _down = LabDown::new(&["host", "runc"]);
    let dir = TempDir::new("bench-stress");
    let out = dir.join("bench");
    let o = vtrace(&[
        "bench",
        "--platforms",
        "host",
        "--workload",
        "ping",
        "--pings",
        "50",
        "--stress",
        "1",
        "--repeat",
        "1",
        "--layers",
        "cpu,runq",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let run = out.join("cells/host/ping-rtt+stress1/rep1.vtrace");
    let report = report_json(&run);
    let wall = report["wall_ns"].as_f64().unwrap();
    let threads = report["threads"].as_array().unwrap();
    let stress: Vec<&Value> = threads.iter().filter(|t| t["role"] == "stress").collect();
    assert_eq!(stress.len(), 1, "one stressor thread");
    assert_eq!(stress[0]["comm"], "vtrace-stress");
    // A busy loop on one of two CPUs beside a ping every 10 ms.
    let busy = stress[0]["total_ns"].as_f64().unwrap();
    assert!(
        busy > 0.6 * wall && busy <= 1.01 * wall,
        "stressor busy {busy} ns of {wall}"
    );

    let o = vtrace(&["report", "--format", "json", out.to_str().unwrap()]);
    let bench: Value = serde_json::from_slice(&o.stdout).unwrap();
    let cell = &bench["bench"]["cells"][0];
    let roles: Vec<&str> = cell["cpu_ns_per_op"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r[0].as_str().unwrap())
        .collect();
    assert!(!roles.contains(&"stress") && !roles.contains(&"vtrace"), "{roles:?}");
    let counted: f64 = threads
        .iter()
        .filter(|t| t["role"] != "stress" && t["role"] != "vtrace")
        .map(|t| t["total_ns"].as_f64().unwrap())
        .sum();
    let replies = report["workload"]["ops"]["count"].as_f64().unwrap();
    let per_op = cell["cpu_ns_per_op_total"].as_f64().unwrap();
    assert!(
        (per_op - counted / replies).abs() < 1e-6 * per_op,
        "{per_op} vs {}",
        counted / replies
    );
    // Waiting for a CPU per reply, by role: the recording's run-queue rows,
    // the stressor's own waits left out.
    let runq = report["runq"].as_array().expect("the runq rows");
    let waited = |role: &str| -> f64 {
        runq.iter()
            .filter(|r| r["role"] == role)
            .map(|r| r["delay_ns"].as_f64().unwrap())
            .sum()
    };
    let per_role: Vec<(&str, f64)> = cell["runq_ns_per_op"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r[0].as_str().unwrap(), r[1].as_f64().unwrap()))
        .collect();
    assert!(waited("stress") > 0.0, "the stressor waited too, sharing a CPU");
    assert!(
        per_role.iter().all(|(r, _)| *r != "stress" && *r != "vtrace"),
        "{per_role:?}"
    );
    for (role, ns) in &per_role {
        assert!(
            (ns - waited(role) / replies).abs() < 1e-6 * ns,
            "{role}: {ns} vs {}",
            waited(role) / replies
        );
    }
}

/// `bench --workload fio --neighbour`: fio inside a runc container, alone
/// and beside a neighbour writing from its own cgroup. The victim's reads
/// are requests on the disk from the instance (vtrace's block rows); with
/// the neighbour, its writes are named on that disk; the neighbour is gone
/// afterwards (its cgroup removed).
#[test]
fn a_noisy_neighbours_writes_are_named_beside_the_victims_reads() {
    let _down = LabDown::new(&["host", "runc"]);
    let dir = TempDir::new("bench-neighbour");
    let out = dir.join("bench");
    let o = vtrace(&[
        "bench",
        "--platforms",
        "runc",
        "--workload",
        "fio",
        "--neighbour",
        "--seconds",
        "2",
        "--repeat",
        "1",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = vtrace(&["report", "--format", "json", out.to_str().unwrap()]);
    let bench: Value = serde_json::from_slice(&o.stdout).unwrap();
    let cells = bench["bench"]["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 2, "alone and beside the neighbour");
    for cell in cells {
        let neighbour = cell["neighbour"].as_bool().unwrap();
        let name = if neighbour {
            "fio-randread-4k+neighbour"
        } else {
            "fio-randread-4k"
        };
        let run = report_json(&out.join(format!("cells/runc/{name}/rep1.vtrace")));
        let ios = run["workload"]["fio"][0]["ios"].as_u64().unwrap();
        let reads: u64 = run["block"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|b| b["platform"] == "runc" && b["op"] == "read")
            .map(|b| b["count"].as_u64().unwrap())
            .sum();
        // The victim's reads are seen on the disk, from its instance.
        // (Exactly fio's count is block.rs's test, with its file laid out
        // and synced first; here fio lays out a fresh file and reads it at
        // once, and a direct read of a block not yet written back costs no
        // request.)
        assert!(
            reads > 0 && ios > 0,
            "{name}: the victim's reads on the disk ({reads}), fio's {ios}"
        );
        let victim = &cell["victim"];
        let others = victim["others"].as_array().unwrap();
        let neighbour_writes: u64 = others
            .iter()
            .filter(|o| o[0] == "neighbour write")
            .map(|o| o[1].as_u64().unwrap())
            .sum();
        eprintln!(
            "{name}: p50 {} us, p99 {} us, others {others:?}",
            victim["clat_p50_us"], victim["clat_p99_us"]
        );
        if neighbour {
            assert!(
                neighbour_writes > 100,
                "{name}: the neighbour's writes named: {others:?}"
            );
        } else {
            assert_eq!(neighbour_writes, 0, "{name}");
        }
    }
    let left = std::fs::read_dir("/sys/fs/cgroup/unified")
        .into_iter()
        .chain(std::fs::read_dir("/sys/fs/cgroup"))
        .flatten()
        .flatten()
        .any(|e| e.file_name() == "vtrace-neighbour");
    assert!(!left, "the neighbour's cgroup was removed");
}

/// `bench --workload modules`: real Node.js inside a runc container requires
/// 50 generated packages from the lab volume (a host directory bind-mounted
/// in). The operations are node's own count (its entry script's line); the
/// node process is the instance's (claimed by its cgroup, although it
/// descends from `runc exec`); and every package's three files
/// (package.json, index.js, lib.js) are opened: at least 3 openat per module,
/// counted by the fs layer on the instance's processes. Three loaders at
/// once are three node processes, each counting its own 50.
#[test]
fn node_loads_the_generated_modules_and_their_file_calls_are_the_instances() {
    let _down = LabDown::new(&["host", "runc"]);
    let dir = TempDir::new("bench-modules");
    let out = dir.join("bench");
    let o = vtrace(&[
        "bench",
        "--platforms",
        "runc",
        "--workload",
        "modules",
        "--modules",
        "50",
        "--loaders",
        "1,3",
        "--repeat",
        "1",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let run = report_json(&out.join("cells/runc/modules-50/rep1.vtrace"));
    assert_eq!(
        run["workload"]["ops"]["count"].as_f64(),
        Some(50.0),
        "{}",
        run["workload"]
    );
    assert_eq!(run["workload"]["ops"]["unit"], "module");
    let node: Vec<&Value> = run["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["comm"] == "node")
        .collect();
    assert!(
        !node.is_empty() && node.iter().all(|t| t["platform"] == "runc"),
        "{node:?}"
    );
    let o = vtrace(&["report", "--format", "json", out.to_str().unwrap()]);
    let bench: Value = serde_json::from_slice(&o.stdout).unwrap();
    let cells = bench["bench"]["cells"].as_array().unwrap();
    for (param, loaders) in [("50", 1), ("50x3", 3)] {
        let cell = cells
            .iter()
            .find(|c| c["param"] == param)
            .unwrap_or_else(|| panic!("no cell {param}: {cells:?}"));
        let calls = cell["file_calls_per_op"].as_array().unwrap();
        let per_module = |op: &str| {
            calls
                .iter()
                .find(|c| c[0] == op)
                .and_then(|c| c[1].as_f64())
                .unwrap_or(0.0)
        };
        eprintln!("{param}: file calls per module: {calls:?}");
        assert!(per_module("app:openat") >= 3.0, "{param}: openat per module: {calls:?}");
        let run = report_json(&out.join(format!("cells/runc/modules-{param}/rep1.vtrace")));
        let node_processes: std::collections::BTreeSet<u64> = run["threads"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["comm"] == "node")
            .map(|t| t["pid"].as_u64().unwrap())
            .collect();
        assert_eq!(
            node_processes.len(),
            loaders,
            "{param}: node processes {node_processes:?}"
        );
        assert_eq!(
            run["workload"]["ops"]["count"].as_f64(),
            Some(50.0 * loaders as f64),
            "{param}: {}",
            run["workload"]
        );
    }
}
