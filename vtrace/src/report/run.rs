//! Sections every recording has, whatever its layers: the run's header,
//! the probes and how they attached, vtrace's own cost, and the notes.

use serde_json::{Value, json};

use super::{
    cost::{calibrated_ns_per_event, ns_per_event, whole_run_time_ns},
    model::{Figure, FigureKind, Section, Series, Table, col, left, secs, us},
};
use crate::recording::{ProgramRow, Recording};

/// vtrace, kernel, CPUs, platform, wall time, why it stopped, the workload.
pub fn header(rec: &Recording) -> Section {
    let m = &rec.meta;
    let cap = m.wall_ns * m.host.cpus as u64;
    let mut s = Section::new("run", "Run");
    let mut second = format!(
        "wall {} s (capacity {} CPU-s) | stopped by: {}",
        secs(m.wall_ns),
        secs(cap),
        m.stopped_by
    );
    if let Some(w) = &m.workload {
        let status = match (w.exit_code, w.signal) {
            (Some(c), _) => format!("exit {c}"),
            (None, Some(s)) => format!("killed by signal {s}"),
            _ => "status unknown".into(),
        };
        second.push_str(&format!(
            " | workload `{}` (pid {}, {status})",
            w.command.join(" "),
            w.pid
        ));
        if let Some(ops) = rec.ops() {
            let rate = ops.per_second.map_or(String::new(), |r| format!(", {r:.0}/s"));
            // Operations the workload itself counted as failed are not in the count: said beside it.
            let failed = ops
                .failed
                .filter(|f| *f > 0.0)
                .map_or(String::new(), |f| format!("; {f:.0} more failed"));
            second.push_str(&format!(
                " | work: {:.0} {} ({}{rate}{failed})",
                ops.count,
                ops.units(),
                ops.source
            ));
        }
    }
    let mut lines = vec![
        format!(
            "vtrace {} | kernel {} | {} CPUs | platform {}",
            m.vtrace_version, m.host.kernel, m.host.cpus, m.selectors.platform
        ),
        second,
    ];
    if let Some(i) = &m.incomplete {
        lines.push(format!(
            "INCOMPLETE: vtrace ended before writing this recording; recovered from its journal: {} intervals, \
             the first {} s of the run (CPU time per thread and CPU), {}",
            i.intervals,
            secs(i.covered_ns),
            match i.checkpoint_ns {
                Some(at) => format!("every other table as of its last checkpoint, at {} s", secs(at)),
                None => "and nothing else (it ended before its first checkpoint)".into(),
            }
        ));
    }
    // What was recorded and how (recordings before schema 6 do not say).
    if !m.layers.is_empty() {
        let split = match m.cpu_split.as_str() {
            "ticks" => "ticks (tick-sampled, no syscall hooks)",
            "syscalls" => "syscalls (exact)",
            other => other,
        };
        let mode = if m.mode.is_empty() {
            String::new()
        } else {
            format!(" | mode {}", m.mode)
        };
        lines.push(format!(
            "layers {}{mode} | user/system split: {split}",
            m.layers.join(",")
        ));
    }
    let ov = &m.overhead;
    let vtrace_pct = ov.vtrace_cpu_ns() as f64 * 100.0 / cap.max(1) as f64;
    if ov.self_cost_fraction > 0.0 && ov.bpf_stats_coverage > 0.0 {
        lines.push(format!(
            "tracing cost {:.2}% of capacity (eBPF {:.2}%, vtrace {vtrace_pct:.2}%) | expected slowdown of the workload {:.1}%",
            ov.self_cost_fraction * 100.0,
            ov.bpf_cpu_fraction * 100.0,
            ov.expected_slowdown * 100.0
        ));
    } else if ov.self_cost_fraction > 0.0 {
        lines.push(format!(
            "tracing cost: eBPF not measured (--self-stats off); vtrace {vtrace_pct:.2}% of capacity"
        ));
    }
    lines.push(String::new());
    s.lines(lines);
    if let Some(w) = m.workload.as_ref().filter(|w| !w.fio.is_empty()) {
        let mut t = Table::new(
            "fio's own figures (its JSON output), per job and direction",
            vec![
                left("job", 16),
                left("op", 6),
                col("I/Os", 10),
                col("MiB", 9),
                col("IOPS", 10),
                col("lat mean(us)", 13),
                col("clat p50(us)", 13),
                col("clat p99(us)", 13),
            ],
        );
        for j in &w.fio {
            t.row(vec![
                j.name.clone(),
                j.op.clone(),
                j.ios.to_string(),
                format!("{:.2}", j.bytes as f64 / (1 << 20) as f64),
                format!("{:.0}", j.iops),
                format!("{:.2}", j.lat_mean_ns / 1e3),
                us(j.clat_p50_ns),
                us(j.clat_p99_ns),
            ]);
        }
        s.table(t);
    }
    s.json("layers", &m.layers);
    s.json("schema_version", m.schema_version);
    s.json("wall_ns", m.wall_ns);
    // Where the recording's clock (every *_ns since its start) meets the
    // wall clock of other logs.
    s.json("start_unix_ns", m.start_unix_ns);
    s.json("cpus", m.host.cpus);
    s.json("platform", &m.selectors.platform);
    s.json("workload", &m.workload);
    s.json("stopped_by", &m.stopped_by);
    s.json("incomplete", &m.incomplete);
    s.json("cpu_split", &m.cpu_split);
    s.json("mode", &m.mode);
    s.json("self_cost_fraction", m.overhead.self_cost_fraction);
    s.json("expected_slowdown", m.overhead.expected_slowdown);
    s
}

/// Every probe: the method it attached with, or why it could not.
pub fn probes(rec: &Recording) -> Section {
    let mut s = Section::new("probes", "Probes");
    let runs = |id: &str| rec.rows::<ProgramRow>().iter().find(|r| r.probe == id);
    let mut t = Table::new(
        "Probes",
        vec![
            left("probe", 28),
            left("layer", 9),
            left("method", 12),
            col("events", 12),
            left("note", 0).gap(2),
        ],
    );
    for p in &rec.meta.probes {
        t.row(vec![
            p.id.clone(),
            p.layer.clone(),
            p.method.clone().unwrap_or_else(|| "unavailable".into()),
            // Every run, counted by the program itself (the kernel's own
            // run count covers only the windows its statistics were on).
            runs(&p.id).map_or_else(|| "-".into(), |r| r.events.to_string()),
            p.note(),
        ]);
    }
    s.table(t);
    let probes: Vec<Value> = rec
        .meta
        .probes
        .iter()
        .map(|p| {
            json!({"id": p.id, "layer": p.layer, "method": p.method, "available": p.available,
                   "reason": p.reason, "caveat": p.caveat, "events": runs(&p.id).map_or(0, |r| r.events)})
        })
        .collect();
    s.json("probes", probes);
    s
}

/// vtrace's own cost: eBPF run time per program, its process, its losses.
pub fn overhead(rec: &Recording) -> Section {
    let ov = &rec.meta.overhead;
    let mut s = Section::new("overhead", "vtrace's own cost");
    // Recordings before the calibration have no floor: their table stays as it was.
    let floor = ov.bpf_stats_floor_ns;
    let calibrated = floor > 0.0;
    let coverage = if ov.bpf_stats_coverage >= 1.0 {
        String::new()
    } else {
        format!(
            " (BPF statistics on for {:.1}% of the run: run time = runs x ns per run measured then)",
            ov.bpf_stats_coverage * 100.0
        )
    };
    s.lines([
        String::new(),
        format!("vtrace's own cost{coverage}"),
        format!(
            "  eBPF programs: {} s over {} events ({:.4}% of capacity); vtrace process: user {} s, system {} s, peak RSS {} MiB; per-thread map overflows: {}; interrupt state repairs: {}; untraced context switches: {}{}",
            secs(ov.bpf_run_time_ns),
            ov.bpf_run_count,
            ov.bpf_cpu_fraction * 100.0,
            secs(ov.vtrace_user_ns),
            secs(ov.vtrace_system_ns),
            ov.vtrace_peak_rss_kib / 1024,
            ov.lost("cpu.thread_map_overflows"),
            ov.lost("cpu.state_repairs"),
            ov.lost("cpu.untraced_switches"),
            // Recordings before each slice was bounded by the scheduler's clock have none.
            if ov.untraced_trimmed_ns > 0 {
                format!(
                    " ({} s they would have over-charged, taken back by each thread's scheduler clock)",
                    secs(ov.untraced_trimmed_ns)
                )
            } else {
                String::new()
            }
        ),
    ]);
    let lost: Vec<String> = ov
        .losses
        .iter()
        // The CPU engine's are on the line above.
        .filter(|(key, n)| **n > 0 && !key.starts_with("cpu."))
        .map(|(key, n)| {
            let meaning = crate::layers::loss_meaning(key).unwrap_or("(a counter this vtrace does not know)");
            format!("  lost: {key} {n}: {meaning}")
        })
        .collect();
    s.lines(lost);
    if ov.checkpoints > 0 {
        s.lines([format!(
            "  checkpoints of every table into the journal (what a killed vtrace leaves): {} written, {} ms each on \
             average",
            ov.checkpoints,
            ov.checkpoint_ns / ov.checkpoints / 1_000_000
        )]);
    }
    if calibrated {
        s.lines([format!(
            "  ns/event: as the kernel's statistics measured it, less the {floor:.0} ns they add to every run \
             themselves (an empty program's measured run time), plus the {:.0} ns an empty program really costs a \
             hook, dispatch included (docs/overhead.md); vtrace's set-up before the window: {} s of CPU",
            ov.bpf_hook_ns,
            secs(ov.vtrace_setup_ns)
        )]);
    }
    if !ov.setup_steps_ns.is_empty() {
        let steps: Vec<String> = ov
            .setup_steps_ns
            .iter()
            .map(|(step, ns)| format!("{step} {:.2}", *ns as f64 / 1e9))
            .collect();
        s.lines([format!("  vtrace's own steps (wall s): {}", steps.join(", "))]);
    }
    // Programs that ran only while the sampled statistics were off have no
    // ns per run: their cost is unknown, not zero.
    let unmeasured: Vec<&str> = rec
        .rows::<ProgramRow>()
        .iter()
        .filter(|p| p.events > 0 && p.run_count == 0 && ov.bpf_stats_coverage > 0.0)
        .map(|p| p.program.as_str())
        .collect();
    if !unmeasured.is_empty() {
        s.lines([format!(
            "  not measured: {} programs ran only while the BPF statistics were off, so their run time is unknown and not in the totals above (rare or bursty; --self-stats always measures every run): {}",
            unmeasured.len(),
            unmeasured.join(", ")
        )]);
    }
    let mut columns = vec![
        left("program", 28),
        col("events", 12),
        col("run time(s)", 14),
        col("ns/event", 12),
    ];
    if calibrated {
        columns.push(col("measured", 10));
    }
    let mut t = Table::untitled(columns);
    let mut progs = rec.rows::<ProgramRow>().to_vec();
    progs.sort_by_key(|p| std::cmp::Reverse(whole_run_time_ns(p, ov)));
    for p in &progs {
        let known = !unmeasured.contains(&p.program.as_str());
        let or_unknown = |v: String| if known { v } else { "-".into() };
        let mut row = vec![
            p.program.clone(),
            p.events.to_string(),
            or_unknown(secs(whole_run_time_ns(p, ov))),
            or_unknown(format!("{:.0}", calibrated_ns_per_event(p, ov))),
        ];
        if calibrated {
            row.push(or_unknown(format!("{:.0}", ns_per_event(p.run_time_ns, p.run_count))));
        }
        t.row(row);
        s.metric(
            "bpf_run_ns",
            whole_run_time_ns(p, ov) as f64,
            "ns",
            &[("program", &p.program)],
        );
    }
    s.table(t);
    const SHOWN: usize = 12;
    let shown: Vec<&ProgramRow> = progs.iter().filter(|p| p.events > 0).take(SHOWN).collect();
    if !shown.is_empty() {
        s.figure(Figure {
            title: format!("eBPF run time of the {} costliest programs", shown.len()),
            value_label: "run time over the recording (ms)".into(),
            kind: FigureKind::StackedBars {
                categories: shown.iter().map(|p| p.program.clone()).collect(),
                series: vec![Series {
                    name: "eBPF run time".into(),
                    values: shown.iter().map(|p| whole_run_time_ns(p, ov) as f64 / 1e6).collect(),
                }],
            },
        });
    }
    s.metric("bpf_cpu_fraction", ov.bpf_cpu_fraction, "fraction", &[]);
    let programs: Vec<Value> = rec
        .rows::<ProgramRow>()
        .iter()
        .map(|p| {
            json!({"probe": p.probe, "program": p.program, "method": p.method, "events": p.events,
                   "run_count": p.run_count, "run_time_ns": p.run_time_ns, "recursion_misses": p.recursion_misses,
                   "whole_run_time_ns": whole_run_time_ns(p, ov),
                   "ns_per_event": calibrated_ns_per_event(p, ov),
                   "measured_ns_per_event": ns_per_event(p.run_time_ns, p.run_count)})
        })
        .collect();
    s.json(
        "overhead",
        json!({
            "bpf_run_time_ns": ov.bpf_run_time_ns,
            "bpf_run_count": ov.bpf_run_count,
            "bpf_stats_coverage": ov.bpf_stats_coverage,
            "bpf_cpu_fraction": ov.bpf_cpu_fraction,
            "bpf_stats_floor_ns": ov.bpf_stats_floor_ns,
            "bpf_hook_ns": ov.bpf_hook_ns,
            "vtrace_user_ns": ov.vtrace_user_ns,
            "vtrace_system_ns": ov.vtrace_system_ns,
            "vtrace_peak_rss_kib": ov.vtrace_peak_rss_kib,
            // The CPU engine's and the net layer's counters also under their
            // names of before `losses`.
            "thread_map_overflows": ov.lost("cpu.thread_map_overflows"),
            "state_repairs": ov.lost("cpu.state_repairs"),
            "untraced_switches": ov.lost("cpu.untraced_switches"),
            "untraced_trimmed_ns": ov.untraced_trimmed_ns,
            "net_event_drops": ov.lost("net.event_drops"),
            "skb_marks_displaced": ov.lost("net.skb_marks_displaced"),
            "checkpoints": ov.checkpoints,
            "checkpoint_ns": ov.checkpoint_ns,
            "unmeasured_programs": &unmeasured,
            "losses": &ov.losses,
            "programs": programs,
        }),
    );
    s
}

/// Caveats of the recording and of reading it.
pub fn notes(rec: &Recording) -> Section {
    let mut s = Section::new("notes", "Notes");
    let notes: Vec<&String> = rec.meta.notes.iter().chain(&rec.read_notes).collect();
    s.lines(notes.iter().flat_map(|n| [String::new(), format!("note: {n}")]));
    s.json("notes", notes);
    s
}
