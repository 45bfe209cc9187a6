//! Hostile input never panics: a seeded mutation fuzzer over real
//! recordings (one recorded here, schema 7, and tests/fixtures/schema5.vtrace:
//! every Parquet table and meta.json truncated, bit-flipped, swapped for
//! another table of other column types, removed, or with meta.json's values
//! replaced by wrong types and huge numbers) and over the platform profiles
//! (`--platform-file`), and over the journal a killed vtrace leaves (its
//! metadata, interval and thread lines, and its checkpoint). Schema 7 recordings carry a checksum of every table:
//! a damaged table is refused before Parquet's decoder sees it (a flipped
//! length in a page header made polars ask for 2^61 bytes and abort). A
//! schema 5 or 6 recording has none, so its tables are damaged here only
//! as a whole (swapped, removed, torn meta.json).
//! Each input is read and, when it reads, reported as text and JSON; a panic
//! anywhere fails the test with the mutation that caused it, and every
//! error is one line. The runs are bounded (inputs and seconds) and print
//! how many inputs each target tried.

use std::{
    panic::{AssertUnwindSafe, catch_unwind},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use vtrace_tests::{TempDir, copy_dir, schema5_fixture};

/// xorshift64*: deterministic, so a failure names a seed that reproduces it.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut f: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()).collect();
    f.sort();
    f
}

/// A JSON value of another kind than most fields hold.
fn wrong_value(rng: &mut Rng) -> serde_json::Value {
    match rng.below(7) {
        0 => serde_json::json!("not a number"),
        1 => serde_json::json!(-1),
        2 => serde_json::json!(u64::MAX),
        3 => serde_json::json!(1e308),
        4 => serde_json::json!([1, 2, 3]),
        5 => serde_json::json!({"x": null}),
        _ => serde_json::Value::Null,
    }
}

/// Replaces a random value somewhere in `v` (depth-first walk).
fn mutate_json(v: &mut serde_json::Value, rng: &mut Rng, depth: usize) -> String {
    match v {
        serde_json::Value::Object(map) if !map.is_empty() => {
            let keys: Vec<String> = map.keys().cloned().collect();
            let key = keys[rng.below(keys.len())].clone();
            if depth < 3 && rng.below(2) == 0 {
                return format!("{key}.{}", mutate_json(map.get_mut(&key).unwrap(), rng, depth + 1));
            }
            if rng.below(4) == 0 {
                map.remove(&key);
                return format!("{key} removed");
            }
            map.insert(key.clone(), wrong_value(rng));
            format!("{key} replaced")
        }
        serde_json::Value::Array(a) if !a.is_empty() => {
            let i = rng.below(a.len());
            format!("[{i}].{}", mutate_json(&mut a[i], rng, depth + 1))
        }
        other => {
            *other = wrong_value(rng);
            "value replaced".into()
        }
    }
}

/// One mutation of the recording in `dir`; says what it did. Without
/// `bytes`, Parquet files are not damaged inside.
fn mutate(dir: &Path, rng: &mut Rng, bytes: bool) -> String {
    let all = files(dir);
    let tables: Vec<&PathBuf> = all
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .collect();
    let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
    let kind = if bytes { rng.below(6) } else { 2 + rng.below(4) };
    match kind {
        0 => {
            let f = tables[rng.below(tables.len())];
            let mut bytes = std::fs::read(f).unwrap();
            if bytes.is_empty() {
                return format!("{} already empty", name(f));
            }
            let flips = 1 + rng.below(8);
            for _ in 0..flips {
                let i = rng.below(bytes.len());
                bytes[i] ^= 1 << rng.below(8);
            }
            std::fs::write(f, bytes).unwrap();
            format!("{flips} bits flipped in {}", name(f))
        }
        1 => {
            let f = all[rng.below(all.len())].clone();
            if !bytes && f.extension().is_some_and(|e| e == "parquet") {
                return format!("{} kept", name(&f));
            }
            let bytes = std::fs::read(&f).unwrap();
            let at = rng.below(bytes.len());
            std::fs::write(&f, &bytes[..at]).unwrap();
            format!("{} truncated at {at} of {} bytes", name(&f), bytes.len())
        }
        2 => {
            let (a, b) = (tables[rng.below(tables.len())], tables[rng.below(tables.len())]);
            std::fs::copy(b, a).unwrap();
            format!("{} holds {}", name(a), name(b))
        }
        3 => {
            let f = tables[rng.below(tables.len())];
            std::fs::remove_file(f).unwrap();
            format!("{} removed", name(f))
        }
        4 => {
            let path = dir.join("meta.json");
            let Some(mut meta) = std::fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            else {
                std::fs::write(&path, b"{\"format\": \"vtrace-recording\", \"schema_version\": 6").unwrap();
                return "meta.json: torn".into();
            };
            let what = mutate_json(&mut meta, rng, 0);
            std::fs::write(&path, serde_json::to_vec(&meta).unwrap()).unwrap();
            format!("meta.json: {what}")
        }
        _ => {
            let f = dir.join(format!("extra{}.parquet", rng.below(3)));
            let garbage: Vec<u8> = (0..rng.below(4096)).map(|_| rng.next() as u8).collect();
            std::fs::write(&f, garbage).unwrap();
            format!("garbage {}", name(&f))
        }
    }
}

/// `f` with panics caught and not printed (each is reported with its input).
fn quietly<T>(f: impl FnOnce() -> T) -> std::thread::Result<T> {
    std::panic::set_hook(Box::new(|_| {}));
    let outcome = catch_unwind(AssertUnwindSafe(f));
    let _ = std::panic::take_hook();
    outcome
}

/// Runs `case` for up to `inputs` inputs or `budget`; returns how many ran.
fn fuzz(target: &str, inputs: usize, budget: Duration, mut case: impl FnMut(u64) -> Result<(), String>) -> usize {
    let start = Instant::now();
    let mut failures = Vec::new();
    let mut ran = 0;
    for seed in 1..=inputs as u64 {
        if start.elapsed() > budget {
            break;
        }
        ran += 1;
        if let Err(e) = case(seed) {
            failures.push(format!("seed {seed}: {e}"));
        }
    }
    eprintln!(
        "fuzz {target}: {ran} inputs in {:.1} s, {} failures",
        start.elapsed().as_secs_f64(),
        failures.len()
    );
    assert!(failures.is_empty(), "{target}:\n{}", failures.join("\n"));
    ran
}

#[test]
fn corrupt_recordings_give_one_line_errors_and_never_panic() {
    assert!(vtrace_tests::is_root(), "run as root");
    let tmp = TempDir::new("fuzz-recording");
    // A current recording with several layers' tables and per-packet events.
    let current = tmp.join("current.vtrace");
    let o = vtrace_tests::vtrace(&[
        "record",
        "--events",
        "--sample",
        "99",
        "-o",
        current.to_str().unwrap(),
        "--",
        "ping",
        "-c",
        "3",
        "-i",
        "0.2",
        "127.0.0.1",
    ]);
    assert!(o.status.success(), "{}", vtrace_tests::stderr(&o));
    for (target, source, bytes, inputs) in [
        ("recording reader, schema 7", current.clone(), true, 3000),
        ("recording reader, schema 5", schema5_fixture(), false, 1000),
    ] {
        fuzz_recordings(target, &source, bytes, inputs, &tmp);
    }
}

fn fuzz_recordings(target: &str, source: &Path, bytes: bool, inputs: usize, tmp: &TempDir) {
    fuzz_reader(target, inputs, tmp, |dir, rng| {
        copy_dir(source, dir);
        (0..1 + rng.below(3)).map(|_| mutate(dir, rng, bytes)).collect()
    });
}

/// An unfinished recording (what a killed vtrace leaves: its journal's
/// metadata, interval and thread lines, and a checkpoint of every table)
/// with its journal damaged: bits flipped, files truncated, JSON values of
/// the wrong type, huge, or removed, lines torn or mutated.
#[test]
fn corrupt_journals_give_one_line_errors_and_never_panic() {
    assert!(vtrace_tests::is_root(), "run as root");
    let tmp = TempDir::new("fuzz-journal");
    let out = tmp.join("killed.vtrace");
    let mut vt = std::process::Command::new(vtrace_tests::bin("vtrace"))
        .args([
            "record",
            "--interval",
            "100ms",
            "--checkpoint",
            "300ms",
            "--layers",
            "cpu,net,fs,runq",
        ])
        .args(["-o", out.to_str().unwrap(), "--", "ping", "-i", "0.05", "127.0.0.1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let staging = || {
        std::fs::read_dir(&tmp.0)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with(".killed.vtrace.tmp.")
            })
    };
    let start = Instant::now();
    while !staging().is_some_and(|s| s.join("journal/checkpoint.json").is_file()) {
        assert!(start.elapsed() < Duration::from_secs(30), "no checkpoint written");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    vt.kill().unwrap();
    vt.wait().unwrap();
    // The journal alone (the staging directory also holds 8 MiB set aside for the tables).
    let source = staging().unwrap().join("journal");
    let ran = fuzz_reader("journal reader", 2000, &tmp, |dir, rng| {
        let journal = dir.join("journal");
        copy_dir(&source, &journal);
        (0..1 + rng.below(3)).map(|_| mutate_journal(&journal, rng)).collect()
    });
    eprintln!("journal reader: {ran} inputs");
}

/// One mutation of a journal's files; says what it did.
fn mutate_journal(journal: &Path, rng: &mut Rng) -> String {
    let all = files(journal);
    let f = &all[rng.below(all.len())];
    let name = f.file_name().unwrap().to_string_lossy().into_owned();
    let mut bytes = std::fs::read(f).unwrap();
    match rng.below(4) {
        0 if !bytes.is_empty() => {
            let flips = 1 + rng.below(8);
            for _ in 0..flips {
                let i = rng.below(bytes.len());
                bytes[i] ^= 1 << rng.below(8);
            }
            std::fs::write(f, bytes).unwrap();
            format!("{flips} bits flipped in {name}")
        }
        1 => {
            let at = rng.below(bytes.len());
            std::fs::write(f, &bytes[..at]).unwrap();
            format!("{name} truncated at {at} of {} bytes", bytes.len())
        }
        _ => {
            // A JSON document, or one line of a JSONL file, with a value changed.
            let text = String::from_utf8_lossy(&bytes).into_owned();
            let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
            if lines.is_empty() {
                return format!("{name} empty");
            }
            let whole = name.ends_with(".json");
            let i = if whole { 0 } else { rng.below(lines.len()) };
            let doc = if whole { text.clone() } else { lines[i].clone() };
            let Ok(mut v) = serde_json::from_str::<serde_json::Value>(&doc) else {
                return format!("{name} unparsable already");
            };
            let what = mutate_json(&mut v, rng, 0);
            if whole {
                lines = vec![v.to_string()];
            } else {
                lines[i] = v.to_string();
            }
            std::fs::write(f, lines.join("\n")).unwrap();
            format!(
                "{name}{}: {what}",
                if whole { String::new() } else { format!(" line {i}") }
            )
        }
    }
}

/// Runs the reader and both renderers on `inputs` inputs that `make` builds
/// in a fresh directory (returning what it did to them).
fn fuzz_reader(
    target: &str,
    inputs: usize,
    tmp: &TempDir,
    mut make: impl FnMut(&Path, &mut Rng) -> Vec<String>,
) -> usize {
    let ran = fuzz(target, inputs, Duration::from_secs(40), |seed| {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let dir = tmp.join(&format!("case{seed}.vtrace"));
        let mutations = make(&dir, &mut rng);
        let outcome = quietly(|| match vtrace::layers::read(&dir) {
            Ok(rec) => {
                for format in [vtrace::report::Format::Text, vtrace::report::Format::Json] {
                    let opts = vtrace::report::ReportOptions { format, top: 15 };
                    let _ = vtrace::report::render(&rec, &opts);
                }
                Ok(())
            }
            Err(e) => {
                let msg = e.to_string();
                if msg.contains('\n') {
                    Err(format!("a multi-line error: {msg}"))
                } else {
                    Ok(())
                }
            }
        });
        let _ = std::fs::remove_dir_all(&dir);
        match outcome {
            Ok(r) => r.map_err(|e| format!("{mutations:?}: {e}")),
            Err(panic) => {
                let what = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                Err(format!("{mutations:?}: panicked: {what}"))
            }
        }
    });
    assert!(ran >= 50, "only {ran} inputs in the time given");
    ran
}

#[test]
fn corrupt_platform_files_give_one_line_errors_and_never_panic() {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../vtrace/src/platforms/profiles.toml"))
            .unwrap();
    let snippets = [
        "[[platform]]",
        "name = ",
        "priority = -99999999999",
        "= [",
        "\"",
        "]]",
        "\u{0}",
        "role = 7",
    ];
    fuzz("platform profiles", 20000, Duration::from_secs(20), |seed| {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let mut bytes = text.clone().into_bytes();
        for _ in 0..1 + rng.below(4) {
            match rng.below(3) {
                0 => {
                    let at = rng.below(bytes.len());
                    bytes.truncate(at);
                }
                1 => {
                    let at = rng.below(bytes.len());
                    let s = snippets[rng.below(snippets.len())];
                    bytes.splice(at..at, s.bytes());
                }
                _ => {
                    let at = rng.below(bytes.len());
                    let len = rng.below(64).min(bytes.len() - at);
                    bytes.drain(at..at + len);
                }
            }
        }
        let input = String::from_utf8_lossy(&bytes).into_owned();
        let outcome = quietly(|| match vtrace::platforms::profile::load(Some(&input)) {
            Ok(profiles) => {
                let _ = vtrace::platforms::known(&profiles);
                Ok(())
            }
            Err(e) if e.to_string().lines().count() > 1 && !e.to_string().contains("--platform-file") => {
                Err(format!("an error that does not name the file: {e}"))
            }
            Err(_) => Ok(()),
        });
        match outcome {
            Ok(r) => r,
            Err(_) => Err(format!("panicked on {:?}", input.chars().take(200).collect::<String>())),
        }
    });
}

/// Every bad command-line input: a non-zero exit, an error naming the bad
/// value (one line, clap's two-line usage hint aside), and no recording.
#[test]
fn bad_command_line_inputs_get_one_line_errors() {
    assert!(vtrace_tests::is_root(), "run as root");
    let dir = TempDir::new("bad-cli");
    let out = dir.join("run.vtrace");
    let out = out.to_str().unwrap();
    let no_pid = (400_000..4_000_000)
        .find(|p| !Path::new(&format!("/proc/{p}")).exists())
        .unwrap()
        .to_string();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["record", "--duration", "10x", "-o", out], "10x"),
        (vec!["record", "--interval", "abc", "-o", out], "abc"),
        (vec!["record", "--pid", &no_pid, "-o", out], "no such process"),
        (
            vec!["record", "--cgroup", "/no/such/cgroup", "-o", out],
            "no such cgroup",
        ),
        (
            vec!["record", "--uprobe", "/no/such/binary:main", "-o", out],
            "/no/such/binary not found",
        ),
        (
            vec!["record", "--uprobe", "/bin/true:no_such_symbol_here", "-o", out],
            "no_such_symbol_here",
        ),
        (vec!["record", "--uprobe", "justonepart", "-o", out], "BINARY:SYMBOL"),
        (vec!["record", "--platform", "kata2", "-o", out], "known platforms are"),
        (
            vec!["record", "--layers", "cpu,bogus", "-o", out],
            "unknown layer 'bogus'",
        ),
        (vec!["report", "/no/such.vtrace"], "not a vtrace recording"),
        (vec!["lab", "up", "nosuchplatform"], "nosuchplatform"),
    ];
    for (args, expected) in cases {
        let o = vtrace_tests::vtrace(&args);
        let err = vtrace_tests::stderr(&o);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(err.contains(expected), "{args:?}: {err}");
        let lines = err
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.contains("--help"))
            .count();
        assert_eq!(lines, 1, "{args:?}: not one line: {err}");
        assert!(!Path::new(out).exists(), "{args:?} wrote a recording");
    }
}

/// Regression: the fuzzer's crash. One flipped byte in a Parquet table made
/// polars ask for 2^61 bytes and abort; the checksum refuses the table first.
#[test]
fn a_flipped_byte_in_a_table_is_refused_by_name() {
    assert!(vtrace_tests::is_root(), "run as root");
    let tmp = TempDir::new("flipped-byte");
    let rec = tmp.join("run.vtrace");
    let o = vtrace_tests::vtrace(&["record", "--layers", "cpu", "-o", rec.to_str().unwrap(), "--", "true"]);
    assert!(o.status.success(), "{}", vtrace_tests::stderr(&o));
    let table = rec.join("threads.parquet");
    let mut bytes = std::fs::read(&table).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&table, bytes).unwrap();
    let o = vtrace_tests::vtrace(&["report", rec.to_str().unwrap()]);
    let err = vtrace_tests::stderr(&o);
    assert!(!o.status.success());
    assert!(err.contains("threads.parquet is damaged"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// What a guest's agent sends, damaged: a real recording as an agent would
/// stream it (its hello, clock answers, the journal's lines, every file of
/// the finished recording in chunks, done), with bytes flipped, the stream
/// cut, slices repeated or dropped, random bytes put in, lengths and names
/// rewritten. The host's reading of it (the guest link's, `replay`) never
/// panics, writes nothing outside the guest's directory, and what it kept
/// reads as a recording or gives a one-line error.
#[test]
fn hostile_agent_streams_never_panic_or_escape_the_guests_directory() {
    use vtrace::layers::guest::{
        link,
        wire::{self, Chunk, Message, Target},
    };
    assert!(vtrace_tests::is_root(), "run as root");
    let tmp = TempDir::new("fuzz-agent-stream");
    let source = tmp.join("guest.vtrace");
    let o = vtrace_tests::vtrace(&[
        "record",
        "--layers",
        "cpu,net",
        "-o",
        source.to_str().unwrap(),
        "--",
        "ping",
        "-c",
        "2",
        "-i",
        "0.2",
        "127.0.0.1",
    ]);
    assert!(o.status.success(), "{}", vtrace_tests::stderr(&o));
    let mut stream = wire::encode_message(&Message::Hello {
        vtrace_version: "x".into(),
        hostname: "guest".into(),
        kernel: "6.1".into(),
        cpus: 1,
        mono_ns: 5,
    });
    stream.extend(wire::encode_message(&Message::Attached {
        mono_ns: 6,
        error: None,
    }));
    for seq in 1..4 {
        stream.extend(wire::encode_message(&Message::SyncReply {
            seq,
            host_ns: seq,
            guest_ns: seq * 7,
        }));
    }
    let lines = b"{\"not\": \"a line\"}\n".repeat(3);
    for (offset, part) in [(0u64, &lines[..20]), (20, &lines[20..])] {
        stream.extend(wire::encode_chunk(&Chunk {
            target: Target::Journal,
            name: "journal/intervals.jsonl".into(),
            offset,
            data: part.to_vec(),
        }));
    }
    for file in files(&source) {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let bytes = std::fs::read(&file).unwrap();
        let half = bytes.len() / 2;
        for (offset, part) in [(0, &bytes[..half]), (half as u64, &bytes[half..])] {
            stream.extend(wire::encode_chunk(&Chunk {
                target: Target::Final,
                name: name.clone(),
                offset,
                data: part.to_vec(),
            }));
        }
    }
    stream.extend(wire::encode_message(&Message::Done {
        files: 1,
        bytes: 1,
        error: None,
    }));
    // Undamaged, it is the recording.
    let whole = tmp.join("whole");
    let row = link::replay(&stream[..], &whole, "g");
    assert_eq!(row.state, "complete", "{row:?}");
    assert!(vtrace::layers::read(&whole.join("g")).is_ok());
    let ran = fuzz("agent stream", 3000, Duration::from_secs(30), |seed| {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let mut s = stream.clone();
        let mut did = Vec::new();
        for _ in 0..1 + rng.below(3) {
            let at = rng.below(s.len());
            match rng.below(6) {
                0 => {
                    s[at] ^= 1 << rng.below(8);
                    did.push(format!("flip {at}"));
                }
                1 => {
                    s.truncate(at);
                    did.push(format!("cut at {at}"));
                }
                2 => {
                    let len = rng.below(4096).min(s.len() - at);
                    let slice = s[at..at + len].to_vec();
                    let to = rng.below(s.len());
                    s.splice(to..to, slice);
                    did.push(format!("repeat {len} bytes of {at} at {to}"));
                }
                3 => {
                    let len = rng.below(4096).min(s.len() - at);
                    s.drain(at..at + len);
                    did.push(format!("drop {len} bytes at {at}"));
                }
                4 => {
                    let junk: Vec<u8> = (0..1 + rng.below(64)).map(|_| rng.next() as u8).collect();
                    s.splice(at..at, junk);
                    did.push(format!("junk at {at}"));
                }
                _ => {
                    // A frame's length or a chunk's name, rewritten.
                    if let Some(frame) = s.windows(4).skip(at).position(|w| w == b"VTRG").map(|p| p + at)
                        && frame + 16 < s.len()
                    {
                        if rng.below(2) == 0 {
                            let len = [0u32, 1, 16, 1 << 20, (1 << 20) + 1, u32::MAX][rng.below(6)];
                            s[frame + 6..frame + 10].copy_from_slice(&len.to_le_bytes());
                            did.push(format!("length {len} at {frame}"));
                        } else {
                            let name =
                                [&b"../x"[..], b"/etc", b"a/b/c", b".x", b"journal/..", b"\xff\xfe"][rng.below(6)];
                            s[frame + 11] = name.len() as u8;
                            s.splice(frame + 12..frame + 12, name.iter().copied());
                            did.push(format!("name {name:?} at {frame}"));
                        }
                    }
                }
            }
        }
        let dir = tmp.join(&format!("case{seed}"));
        let outcome = quietly(|| {
            let row = link::replay(&s[..], &dir, "g");
            if let Ok(rec) = vtrace::layers::read(&dir.join("g")) {
                for format in [vtrace::report::Format::Text, vtrace::report::Format::Json] {
                    let _ = vtrace::report::render(&rec, &vtrace::report::ReportOptions { format, top: 15 });
                }
            } else if let Err(e) = vtrace::layers::read(&dir.join("g")) {
                let msg = e.to_string();
                if msg.contains('\n') {
                    return Err(format!("a multi-line error: {msg}"));
                }
            }
            if row.error.contains('\n') {
                return Err(format!("a multi-line link error: {}", row.error));
            }
            // Only the guest's own directory and its staging names.
            let stray: Vec<String> = std::fs::read_dir(&dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !["g", ".g.final", ".g.old"].contains(&n.as_str()))
                .collect();
            if stray.is_empty() {
                Ok(())
            } else {
                Err(format!("wrote {stray:?}"))
            }
        });
        let _ = std::fs::remove_dir_all(&dir);
        match outcome {
            Ok(r) => r.map_err(|e| format!("{did:?}: {e}")),
            Err(_) => Err(format!("{did:?}: panicked")),
        }
    });
    assert!(ran >= 50, "only {ran} inputs in the time given");
    assert!(!tmp.join("x").exists() && !tmp.join("etc").exists());
}
