//! `vtrace record --guest` against a real `vtrace agent`. Here the "guest"
//! is a network namespace of this machine reached over TCP through its
//! veth: its agent loads its own programs and records as it would in a VM,
//! and its clock is the host's, so the true offset is 0, ground truth for
//! the clock mapping and its stated bound. Hostile agents are this test's
//! own, speaking the wire format wrongly on purpose. (Agents in VMs, over
//! vsock, run one level down.)

use std::{
    io::{Read, Write},
    net::TcpListener,
    path::Path,
    time::{Duration, Instant},
};

use serde_json::Value;
use vtrace::{
    layers::guest::wire::{self, Chunk, Message, Target},
    workload::netns::Netns,
};
use vtrace_tests::{TempDir, assert_threads_match_schedstat, bin, is_root, report_json, stderr, vtrace};

const NS: &str = "vtt-agent";
const HOST_ADDR: &str = "10.201.0.1";
const GUEST_ADDR: &str = "10.201.0.2";
const PORT: u16 = 1025;

/// A namespace with an agent listening in it (once), and the agent's pid.
fn agent_in_netns(dir: &TempDir) -> (Netns, u32) {
    let mut ns = Netns::create(NS, "vtt-agh", "vtt-agg", HOST_ADDR, GUEST_ADDR, 24).expect("netns");
    let listen = format!("tcp:{GUEST_ADDR}:{PORT}");
    let agent_dir = dir.join("agent");
    let pid = ns
        .spawn(&[
            bin("vtrace").to_str().unwrap(),
            "agent",
            "--listen",
            &listen,
            "--once",
            "--dir",
            agent_dir.to_str().unwrap(),
        ])
        .expect("start the agent");
    // Listening, seen from inside (a probe connection would be taken for the host).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ss = std::process::Command::new("ip")
            .args(["netns", "exec", NS, "ss", "-Hltn", &format!("sport = :{PORT}")])
            .output()
            .expect("ss");
        if !ss.stdout.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "the agent did not listen within 20 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    (ns, pid)
}

/// A directory of its own and an agent in the namespace (dropped after the
/// test, as the namespace goes); None, the test skipped, without root.
fn with_an_agent(tag: &str) -> Option<(TempDir, Netns, u32)> {
    if !is_root() {
        eprintln!("skipped: needs root");
        return None;
    }
    let dir = TempDir::new(tag);
    let (ns, agent) = agent_in_netns(&dir);
    Some((dir, ns, agent))
}

/// `vtrace record`'s arguments for `command` recorded into `out` with the
/// namespace's agent (the CPU layer on both sides).
fn recording_args(out: &Path, command: &[&str]) -> Vec<String> {
    let guest = format!("tcp:{GUEST_ADDR}:{PORT}");
    let mut args: Vec<String> = [
        "record",
        "--guest",
        &guest,
        "--guest-layers",
        "cpu",
        "--layers",
        "cpu",
        "-o",
    ]
    .map(String::from)
    .to_vec();
    args.push(out.to_str().unwrap().into());
    args.push("--".into());
    args.extend(command.iter().map(|c| c.to_string()));
    args
}

/// `command` recorded into `out` with the namespace's agent; its report.
fn record_with_the_agent(out: &Path, command: &[&str]) -> Value {
    let args = recording_args(out, command);
    let o = vtrace(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(o.status.success(), "record failed: {}", stderr(&o));
    report_json(out)
}

fn guest_of(report: &Value) -> &Value {
    let guests = report["guests"].as_array().expect("the report's guests");
    assert_eq!(guests.len(), 1, "{guests:?}");
    &guests[0]
}

fn host_tables_are_whole(report: &Value, what: &str) {
    let threads = report["threads"].as_array().expect("threads");
    assert!(
        threads.iter().any(|t| t["comm"] == "vtrace"),
        "{what}: the host's thread table lost its rows"
    );
    assert!(
        report["per_cpu"].as_array().is_some_and(|c| !c.is_empty()),
        "{what}: no CPU table"
    );
}

/// The guest's recording comes whole, its threads' CPU matches their own
/// schedstat, and its clock maps onto the host's within the stated bound
/// (here the truth is offset 0).
#[test]
fn the_guests_recording_comes_whole_on_one_clock_and_its_threads_match_their_schedstat() {
    let Some((dir, _ns, _agent)) = with_an_agent("guest-agent") else {
        return;
    };
    let out = dir.join("run.vtrace");
    let truth = dir.join("truth.json");
    let report = record_with_the_agent(
        &out,
        &[
            "ip",
            "netns",
            "exec",
            NS,
            "taskset",
            "-c",
            "1",
            bin("cpu-mix").to_str().unwrap(),
            "--seconds",
            "1.5",
            "--only",
            "spin,syscall",
            "--out",
            truth.to_str().unwrap(),
        ],
    );
    host_tables_are_whole(&report, "with an agent");
    let guest = guest_of(&report);
    assert_eq!(guest["state"], "complete", "{guest}");
    assert!(guest["unreadable"].is_null(), "{guest}");
    // The guest's own recording holds the workload's threads, each within
    // 2 % of its own schedstat.
    assert_threads_match_schedstat(guest, &truth, "guest");
    let truth_json: Value = serde_json::from_slice(&std::fs::read(&truth).unwrap()).unwrap();
    // And per CPU (an agent records `thread_cpus`, for each vCPU's split):
    // the workload ran pinned to CPU 1, so each of its threads' time is
    // there, within 2 % of its schedstat, and none is on CPU 0.
    let per_cpu = thread_cpus(&out);
    for t in truth_json["threads"].as_array().unwrap() {
        let tid = t["tid"].as_u64().unwrap() as u32;
        let on = |cpu: u32| {
            per_cpu
                .iter()
                .filter(|r| r.0 == tid && r.1 == cpu)
                .map(|r| r.2)
                .sum::<u64>()
        };
        let expected = t["schedstat_ns"].as_u64().unwrap();
        let err = (on(1) as f64 - expected as f64).abs() / expected as f64;
        eprintln!(
            "guest {} on CPU 1: {} ns, CPU 0: {} ns, schedstat {expected} ns ({:.2} %)",
            t["name"],
            on(1),
            on(0),
            err * 100.0
        );
        assert!(err <= 0.02 && on(0) == 0, "{}: {per_cpu:?}", t["name"]);
    }
    // The guest's CPU by part (what `bench --guest` sets per request): each
    // of the workload's programs, its states summed, within 2 % of its
    // threads' own schedstat.
    let mut by_part: std::collections::BTreeMap<String, u64> = Default::default();
    for t in truth_json["threads"].as_array().unwrap() {
        let comm = guest["threads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["tid"] == t["tid"])
            .and_then(|x| x["comm"].as_str())
            .unwrap_or_else(|| panic!("thread {t} in the guest's table"));
        *by_part.entry(comm.split('/').next().unwrap().to_string()).or_default() += t["schedstat_ns"].as_u64().unwrap();
    }
    for (part, expected) in by_part {
        let got: f64 = report["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["key"] == "guest_cpu_ns" && m["dims"]["part"] == part.as_str())
            .map(|m| m["value"].as_f64().unwrap())
            .sum();
        let err = (got - expected as f64).abs() / expected as f64;
        eprintln!(
            "guest part {part}: vtrace {got} ns, schedstat {expected} ns ({:.2} %)",
            err * 100.0
        );
        assert!(err <= 0.02, "part {part}: {got} ns vs schedstat {expected} ns");
    }
    let clock = &guest["clock"];
    let (offset, bound) = (
        clock["offset_ns"].as_f64().unwrap(),
        clock["bound_ns"].as_f64().unwrap(),
    );
    let exchanges = clock["exchanges"].as_u64().unwrap();
    eprintln!("clock: {clock}");
    assert!(exchanges >= 16, "two bursts of 8 at least: {clock}");
    assert_eq!(
        clock["causal"].as_u64().unwrap(),
        exchanges,
        "every exchange in causal order: {clock}"
    );
    assert!(
        offset.abs() <= bound,
        "one clock: offset {offset} ns outside ±{bound} ns"
    );
    assert!(
        bound <= clock["min_round_trip_ns"].as_f64().unwrap() / 2.0 + 1.0,
        "the bound is no wider than half the fastest round trip: {clock}"
    );
    let text = String::from_utf8_lossy(&vtrace(&["report", out.to_str().unwrap()]).stdout).into_owned();
    assert!(text.contains("the agent's recording cost the guest"), "{text}");
}

/// The guest's `thread_cpus` rows, as (tid, CPU, busy ns): its recording
/// is the one the host's holds under guests/.
fn thread_cpus(out: &Path) -> Vec<(u32, u32, u64)> {
    let guests = out.join("guests");
    let inner = std::fs::read_dir(&guests)
        .unwrap_or_else(|e| panic!("{}: {e}", guests.display()))
        .flatten()
        .map(|e| e.path())
        .find(|p| p.is_dir())
        .expect("the guest's recording");
    let o = vtrace(&[
        "report",
        inner.to_str().unwrap(),
        "--format",
        "csv",
        "--table",
        "thread_cpus",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let csv = String::from_utf8_lossy(&o.stdout).into_owned();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
    let at = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("{name} in {header:?}"))
    };
    let (tid, cpu) = (at("tid"), at("cpu"));
    let busy = ["user_ns", "system_ns", "softirq_ns", "hardirq_ns"].map(at);
    lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let n = |i: usize| f[i].parse::<u64>().unwrap_or_else(|_| panic!("{l}"));
            (n(tid) as u32, n(cpu) as u32, busy.iter().map(|&i| n(i)).sum())
        })
        .collect()
}

/// An agent killed mid-recording: the host's recording is whole, the
/// guest's holds what its journal sent, and the report says when it went silent.
#[test]
fn an_agent_killed_mid_recording_leaves_the_host_recording_whole_and_names_when_it_went_silent() {
    let Some((dir, _ns, agent)) = with_an_agent("guest-agent-killed") else {
        return;
    };
    let out = dir.join("run.vtrace");
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(2600));
        unsafe { libc::kill(agent as i32, libc::SIGKILL) };
    });
    let report = record_with_the_agent(&out, &["sleep", "4"]);
    killer.join().unwrap();
    host_tables_are_whole(&report, "agent killed");
    let guest = guest_of(&report);
    assert_eq!(guest["state"], "silent", "{guest}");
    let heard = guest["last_heard_s"].as_f64().unwrap();
    assert!(
        (1.5..4.0).contains(&heard),
        "last heard {heard} s into a 4 s recording, killed at about 2.6 s"
    );
    // What its journal sent reads as an incomplete recording of the guest.
    assert!(guest["unreadable"].is_null(), "{guest}");
    assert!(!guest["threads"].as_array().unwrap().is_empty(), "{guest}");
    let text = String::from_utf8_lossy(&vtrace(&["report", out.to_str().unwrap()]).stdout).into_owned();
    assert!(text.contains("went silent") && text.contains("last heard"), "{text}");
}

/// No agent where one was named: the host records as always, with a note.
/// A host recording killed mid-way (SIGKILL: nothing written) is
/// recovered with its guest: the guest's recording, mirrored beside the
/// host's journal as it came, is carried into the recovered one and read
/// as the guest's.
#[test]
fn a_host_recording_killed_mid_way_is_recovered_with_its_guests() {
    let Some((dir, _ns, _agent)) = with_an_agent("guest-agent-recovered") else {
        return;
    };
    let out = dir.join("run.vtrace");
    let mut record = std::process::Command::new(bin("vtrace"))
        .args(recording_args(&out, &["sleep", "30"]))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start vtrace record");
    // Killed once the host journaled a checkpoint (the guest's link is in
    // it) and the guest's part has come.
    let staging = || {
        std::fs::read_dir(out.parent()?)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(".run.vtrace.tmp."))
            })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let ready = |s: &Path| {
        s.join("journal/checkpoint.json").is_file()
            && std::fs::read_dir(s.join("guests")).is_ok_and(|mut d| d.next().is_some())
    };
    while !staging().is_some_and(|s| ready(&s)) {
        assert!(Instant::now() < deadline, "no checkpoint and guest part within 30 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(1));
    record.kill().unwrap();
    record.wait().unwrap();
    let o = vtrace(&["recover", out.to_str().unwrap()]);
    assert!(o.status.success(), "recover: {}", stderr(&o));
    let report = report_json(&out);
    assert!(report["incomplete"].is_object(), "recovered, so incomplete");
    let guest = guest_of(&report);
    assert!(guest["unreadable"].is_null(), "{guest}");
    assert!(
        !guest["threads"].as_array().unwrap().is_empty(),
        "the guest's threads came along: {guest}"
    );
}

#[test]
fn without_an_agent_the_host_recording_is_as_always_with_a_note() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let dir = TempDir::new("guest-agent-absent");
    let unused = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let out = dir.join("run.vtrace");
    let o = vtrace(&[
        "record",
        "--guest",
        &format!("tcp:127.0.0.1:{unused}"),
        "--layers",
        "cpu",
        "-o",
        out.to_str().unwrap(),
        "--",
        "true",
    ]);
    assert!(o.status.success(), "record failed: {}", stderr(&o));
    let report = report_json(&out);
    host_tables_are_whole(&report, "no agent");
    assert_eq!(guest_of(&report)["state"], "failed");
    let notes: Vec<&str> = report["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n.as_str())
        .collect();
    assert!(notes.iter().any(|n| n.contains("no agent reached")), "{notes:?}");
}

/// Agents of this test's own that break the wire's rules, each as a
/// script of bytes: the guest's error names the rule, the host keeps every table.
#[test]
fn a_hostile_stream_gets_its_error_and_every_host_table_is_kept() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let hello = wire::encode_message(&Message::Hello {
        vtrace_version: "0".into(),
        hostname: "evil".into(),
        kernel: "0".into(),
        cpus: 1,
        mono_ns: 1,
    });
    let attached = wire::encode_message(&Message::Attached {
        mono_ns: 1,
        error: None,
    });
    let done = wire::encode_message(&Message::Done {
        files: 1,
        bytes: 1,
        error: None,
    });
    let chunk = |target, name: &str, offset, data: &[u8]| {
        // Built by hand where the name is one the encoder would not check.
        let mut body = vec![if target == Target::Final { 1 } else { 0 }, name.len() as u8];
        body.extend_from_slice(name.as_bytes());
        body.extend_from_slice(&u64::to_le_bytes(offset));
        body.extend_from_slice(data);
        let mut f = b"VTRG\x01\x02".to_vec();
        f.extend_from_slice(&(body.len() as u32).to_le_bytes());
        f.extend(body);
        f
    };
    let mut too_long = wire::encode_message(&Message::Stop);
    too_long[6..10].copy_from_slice(&u32::MAX.to_le_bytes());
    let mut other_version = hello.clone();
    other_version[4] = 2;
    let torn = [&hello[..], &attached[..], &attached[..5]].concat();
    let cases: Vec<(&str, Vec<u8>, &str, &str)> = vec![
        (
            "garbage",
            b"HTTP/1.1 400 Bad Request\r\n\r\n".to_vec(),
            "refused",
            "not a vtrace agent",
        ),
        ("another version", other_version, "refused", "wire version 2"),
        (
            "an oversized frame",
            [&hello[..], &too_long[..]].concat(),
            "refused",
            "over the limit",
        ),
        (
            "a path out of its directory",
            [&hello[..], &attached[..], &chunk(Target::Final, "../x", 0, b"x")[..]].concat(),
            "refused",
            "each part is",
        ),
        (
            "a chunk past its file's end",
            [
                &hello[..],
                &attached[..],
                &chunk(Target::Journal, "journal/a.lines", 0, b"1\n")[..],
                &chunk(Target::Journal, "journal/a.lines", 99, b"2\n")[..],
            ]
            .concat(),
            "refused",
            "at offset 99",
        ),
        ("a torn frame", torn, "silent", "went silent"),
        (
            "a damaged recording",
            [
                &hello[..],
                &attached[..],
                &wire::encode_chunk(&Chunk {
                    target: Target::Final,
                    name: "meta.json".into(),
                    offset: 0,
                    data: b"{\"format\": ".to_vec(),
                })[..],
                &done[..],
            ]
            .concat(),
            "complete",
            "",
        ),
    ];
    let dir = TempDir::new("guest-agent-hostile");
    for (what, script, state, words) in cases {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let fake = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut start = [0u8; 512];
            let _ = s.read(&mut start);
            let _ = s.write_all(&script);
            std::thread::sleep(Duration::from_millis(300));
        });
        let out = dir.join(&format!("{}.vtrace", what.replace(' ', "-")));
        let o = vtrace(&[
            "record",
            "--guest",
            &format!("tcp:127.0.0.1:{port}"),
            "--guest-wait",
            "5s",
            "--layers",
            "cpu",
            "-o",
            out.to_str().unwrap(),
            "--",
            "sleep",
            "0.5",
        ]);
        fake.join().unwrap();
        assert!(o.status.success(), "{what}: record failed: {}", stderr(&o));
        let report = report_json(&out);
        host_tables_are_whole(&report, what);
        let guest = guest_of(&report);
        assert_eq!(guest["state"], state, "{what}: {guest}");
        assert!(
            guest["error"].as_str().unwrap().contains(words),
            "{what}: the error should say {words:?}: {guest}"
        );
        if what == "a damaged recording" {
            assert!(
                guest["unreadable"].as_str().is_some_and(|e| e.contains("meta.json")),
                "{what}: {guest}"
            );
        }
        eprintln!("{what}: {} ({})", guest["state"], guest["error"]);
        assert!(!Path::new(&dir.join("etc")).exists());
    }
}
