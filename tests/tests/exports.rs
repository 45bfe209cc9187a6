//! Exports of one recording for other tools: the flamegraph (inferno SVG)
//! and the Chrome/Perfetto trace. cpu-mix's spinning thread spends its time
//! in one function of its own (`spin_hot`), the known hot function.

use serde_json::Value;
use vtrace_tests::{TempDir, bin, stderr, vtrace};

fn record(dir: &TempDir, args: &[&str]) -> std::path::PathBuf {
    record_mix(dir, "run.vtrace", args, &[])
}

/// Records `cpu-mix --seconds 2 MIX_ARGS` into DIR/NAME.
fn record_mix(dir: &TempDir, name: &str, args: &[&str], mix_args: &[&str]) -> std::path::PathBuf {
    let rec = dir.join(name);
    let cpu_mix = bin("cpu-mix");
    let mut full = vec!["record", "-o", rec.to_str().unwrap()];
    full.extend_from_slice(args);
    full.extend_from_slice(&["--", cpu_mix.to_str().unwrap(), "--seconds", "2"]);
    full.extend_from_slice(mix_args);
    let o = vtrace(&full);
    assert!(o.status.success(), "record: {}", stderr(&o));
    rec
}

/// (title, fg:x, fg:w, fill) of every frame in an inferno SVG.
fn frames(svg: &str) -> Vec<(String, u64, u64, String)> {
    let attr = |e: &str, n: &str| {
        let at = e.find(&format!(" {n}=\""))? + n.len() + 3;
        Some(e[at..at + e[at..].find('"')?].to_string())
    };
    svg.split("<g><title>")
        .skip(1)
        .filter_map(|g| {
            let title = g[..g.find("</title>")?].to_string();
            let rect = &g[g.find("<rect")?..];
            Some((
                title,
                attr(rect, "fg:x")?.parse().ok()?,
                attr(rect, "fg:w")?.parse().ok()?,
                attr(rect, "fill")?,
            ))
        })
        .collect()
}

fn samples_of(title: &str) -> u64 {
    let n = title.rsplit_once(" (").unwrap().1.split(' ').next().unwrap();
    n.replace(',', "").parse().unwrap()
}

#[test]
fn flamegraph_shows_the_hot_function_under_its_role() {
    let dir = TempDir::new("flamegraph");
    let rec = record(&dir, &["--sample", "99", "--layers", "cpu,sample"]);
    let svg_path = dir.join("fg.svg");
    let o = vtrace(&[
        "report",
        rec.to_str().unwrap(),
        "--format",
        "flamegraph",
        "-o",
        svg_path.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    assert!(svg.contains("<script"), "interactive: inferno's own script");
    let frames = frames(&svg);
    let role = frames
        .iter()
        .find(|f| f.0.starts_with("host/app ("))
        .expect("a host/app root frame");
    let thread = frames
        .iter()
        .find(|f| f.0.starts_with("mix-spin ("))
        .expect("the spinning thread's frame");
    let hot: Vec<_> = frames.iter().filter(|f| f.0.contains("spin_hot")).collect();
    assert!(!hot.is_empty(), "spin_hot in the graph");
    let in_thread: u64 = hot
        .iter()
        .filter(|f| f.1 >= thread.1 && f.1 < thread.1 + thread.2)
        .map(|f| samples_of(&f.0))
        .sum();
    assert!(
        thread.1 >= role.1 && thread.1 + thread.2 <= role.1 + role.2,
        "mix-spin stands on host/app"
    );
    assert!(
        in_thread * 2 >= samples_of(&thread.0),
        "spin_hot has {in_thread} of mix-spin's {} samples",
        samples_of(&thread.0)
    );
    // Coloured by role: the thread's frame and its hot function share the role's hue.
    assert_eq!(role.3, "rgb(31,119,180)", "host/app in the app colour");
    assert_ne!(hot[0].3, "", "{:?}", hot[0]);
    // Frames are functions: spin_hot's lines merged into one frame per stack.
    assert!(hot.iter().all(|f| !f.0.contains("cpu_mix.rs:")), "{hot:?}");
    // The HTML report embeds it without script (its policy forbids scripts).
    let o = vtrace(&["report", rec.to_str().unwrap(), "--format", "html"]);
    let html = String::from_utf8_lossy(&o.stdout);
    assert!(html.contains("spin_hot") && !html.contains("<script") && !html.contains(" onload="));

    // With --lines, spin_hot's frames carry source lines (cpu-mix has line
    // tables), and every one lies inside spin_hot in cpu_mix.rs.
    let o = vtrace(&["report", rec.to_str().unwrap(), "--format", "flamegraph", "--lines"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let svg = String::from_utf8_lossy(&o.stdout);
    let source = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/src/cpu_mix.rs")).unwrap();
    let first = source.lines().position(|l| l.starts_with("fn spin_hot(")).unwrap() + 1;
    let last = first + source.lines().skip(first).position(|l| l == "}").unwrap() + 1;
    let lines: Vec<u32> = crate::frames(&svg)
        .iter()
        .filter_map(|f| {
            let rest = &f.0[f.0.find("spin_hot (")? + "spin_hot (".len()..];
            let at = rest.find("cpu_mix.rs:")? + "cpu_mix.rs:".len();
            rest[at..].split(')').next()?.parse().ok()
        })
        .collect();
    assert!(!lines.is_empty(), "spin_hot with a line of cpu_mix.rs");
    assert!(
        lines.iter().all(|l| (first as u32..=last as u32).contains(l)),
        "spin_hot's lines {lines:?} within {first}..={last}"
    );
}

/// The differential flamegraph of B (cpu-mix with its spinning thread)
/// against A (without it), scaled to the same number of samples. As in
/// every differential flamegraph, a stack's change is drawn on its leaf
/// frame (self time). spin_hot exists only in B: every change within it is
/// growth (red) and the changes add up to all of its samples; the syscall
/// thread's share shrinks as much (its leaves blue).
#[test]
fn differential_flamegraph_marks_what_b_adds() {
    let dir = TempDir::new("flamegraph-diff");
    let args = ["--sample", "99", "--layers", "cpu,sample"];
    let a = record_mix(&dir, "a.vtrace", &args, &["--only", "syscall"]);
    let b = record_mix(&dir, "b.vtrace", &args, &["--only", "syscall,spin"]);
    let o = vtrace(&[
        "compare",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--format",
        "flamegraph",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let svg = String::from_utf8_lossy(&o.stdout);
    let frames = frames(&svg);
    // title: "name (N samples, P%; +D%)"
    let pct_delta = |title: &str| -> (f64, f64) {
        let inner = title.rsplit_once(" (").unwrap().1.trim_end_matches(')');
        let (left, delta) = inner.split_once("; ").expect("a differential title");
        let pct = left.rsplit_once(", ").unwrap().1.trim_end_matches('%');
        (pct.parse().unwrap(), delta.trim_end_matches('%').parse().unwrap())
    };
    let within = |outer: &(String, u64, u64, String)| {
        let (x, w) = (outer.1, outer.2);
        frames.iter().filter(move |f| f.1 >= x && f.1 + f.2 <= x + w)
    };
    let hot = frames
        .iter()
        .find(|f| f.0.starts_with("spin_hot ("))
        .expect("spin_hot in B");
    let (hot_pct, _) = pct_delta(&hot.0);
    let mut grown = 0.0;
    let mut changed = 0;
    for f in within(hot) {
        let (_, delta) = pct_delta(&f.0);
        assert!(delta >= 0.0, "nothing in spin_hot shrinks: {f:?}");
        if delta > 0.0 {
            assert!(f.3.starts_with("rgb(255,"), "growth is red: {f:?}");
            changed += 1;
        }
        grown += delta;
    }
    assert!(
        (grown - hot_pct).abs() <= 0.005 * changed as f64 + 0.01,
        "spin_hot's growth {grown}% is all of its {hot_pct}%"
    );
    // Both sides have as many samples: what spin_hot gained, the rest (the
    // syscall thread) lost, on its leaves, drawn blue. (A frame that is a
    // leaf in one stack and a parent in others shows one stack's change
    // only: the sum over frames is what is exact.)
    let outside: Vec<_> = frames
        .iter()
        // "all" has no difference in its title.
        .filter(|f| !(f.0.starts_with("all (") || f.1 >= hot.1 && f.1 + f.2 <= hot.1 + hot.2))
        .collect();
    let shrunk: f64 = outside.iter().map(|f| pct_delta(&f.0).1).sum();
    assert!(
        shrunk < -0.5 * grown,
        "the rest shrinks by {shrunk}% as spin_hot grows by {grown}%"
    );
    assert!(
        outside
            .iter()
            .any(|f| pct_delta(&f.0).1 < 0.0 && f.3.ends_with(",255)")),
        "a smaller share is blue"
    );
    // One side only is a clear error.
    let o = vtrace(&["compare", a.to_str().unwrap(), "--format", "flamegraph"]);
    assert!(!o.status.success());
}

#[test]
fn trace_export_parses_and_its_counters_sum_to_the_recording() {
    let dir = TempDir::new("trace");
    let rec = record(&dir, &["--layers", "cpu,net", "--events"]);
    let o = vtrace(&["report", rec.to_str().unwrap(), "--format", "trace"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let trace: Value = serde_json::from_slice(&o.stdout).expect("the trace is JSON");
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    for e in events {
        assert!(["M", "C", "X", "i"].contains(&e["ph"].as_str().unwrap()), "{e}");
        assert!(e["pid"].is_u64(), "{e}");
        if e["ph"] != "M" {
            assert!(e["ts"].as_f64().unwrap() >= 0.0, "{e}");
        }
    }
    // Counters per role track sum to the threads table's totals of that role,
    // in every state (a running thread's pending time that a snapshot
    // over-estimated comes off its later intervals).
    let o = vtrace(&["report", rec.to_str().unwrap(), "--format", "csv", "--table", "threads"]);
    let csv = String::from_utf8(o.stdout).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let column = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let tracks: std::collections::HashMap<u64, String> = events
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| {
            (
                e["pid"].as_u64().unwrap(),
                e["args"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mut roles_checked = 0;
    for role in tracks.values().filter(|r| !r.starts_with("packets")) {
        for state in ["user", "system", "softirq", "hardirq", "guest"] {
            let truth: u64 = csv
                .lines()
                .skip(1)
                .map(|l| l.split(',').collect::<Vec<_>>())
                .filter(|c| format!("{}/{}", c[column("platform")], c[column("role")]) == *role)
                .map(|c| {
                    state
                        .split('+')
                        .map(|s| c[column(&format!("{s}_ns"))].parse::<u64>().unwrap())
                        .sum::<u64>()
                })
                .sum();
            let counted: u64 = events
                .iter()
                .filter(|e| e["ph"] == "C" && tracks.get(&e["pid"].as_u64().unwrap()) == Some(role))
                .map(|e| state.split('+').map(|s| e["args"][s].as_u64().unwrap()).sum::<u64>())
                .sum();
            assert_eq!(counted, truth, "{role} {state}");
        }
        roles_checked += 1;
    }
    assert!(roles_checked >= 3, "app, kernel, idle at least: {tracks:?}");
    // Hop latency (timed per packet with --events) is drawn in the HTML report.
    let o = vtrace(&["report", rec.to_str().unwrap(), "--format", "html"]);
    let html = String::from_utf8_lossy(&o.stdout);
    assert!(html.contains("Hop latency (bar: median, whisker: to p99)") && !html.contains("not drawn"));
    // Tracks are named by role, threads by comm; packets hop to hop on loopback.
    let names: Vec<&str> = events
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"host/app") && names.contains(&"packets (hop to hop)"),
        "{names:?}"
    );
    let spans: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    assert!(spans.len() > 1000, "{} packet spans", spans.len());
    assert!(
        spans
            .iter()
            .all(|s| s["dur"].as_f64().unwrap() >= 0.0 && s["name"].as_str().unwrap().contains("lo"))
    );
}
