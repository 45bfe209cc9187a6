//! Flamegraphs of the sampled stacks (inferno): each stack rooted at its
//! thread's `platform/role`, then its instance and thread, so one graph
//! shows who burns what; every frame coloured by the role it is under (the
//! role colours of every other figure, `report_model::palette::color_of`).

use std::collections::BTreeMap;

use super::{SampleRow, collector::frame_location_stripped};
use crate::recording::Recording;

/// The folded stacks, `platform/role;instance;comm;frame;...;leaf count`;
/// frames keep their source lines with `lines`, else frames of one function
/// merge (`collector::frame_location_stripped`).
pub fn folded_by_role(rec: &Recording, lines: bool) -> Vec<String> {
    let mut merged: BTreeMap<String, u64> = BTreeMap::new();
    for s in rec.rows::<SampleRow>() {
        *merged.entry(folded_stack(s, lines)).or_default() += s.count;
    }
    as_lines(merged)
}

/// One sample row's stack as [`folded_by_role`] folds it, without its count.
pub fn folded_stack(s: &SampleRow, lines: bool) -> String {
    let instance = if s.owner.instance.is_empty() {
        "host"
    } else {
        s.owner.instance.as_str()
    };
    format!(
        "{}/{};{instance};{};{}",
        s.owner.platform,
        s.owner.role,
        s.owner.comm.replace(';', ":"),
        frames(&s.stack, lines)
    )
}

/// Folded stacks with their counts as inferno reads them.
pub fn as_lines(merged: BTreeMap<String, u64>) -> Vec<String> {
    merged.into_iter().map(|(stack, n)| format!("{stack} {n}")).collect()
}

/// A thread's stack, one frame per function without `lines`.
pub fn frames(stack: &str, lines: bool) -> String {
    if lines {
        return stack.to_string();
    }
    let frames: Vec<&str> = stack.split(';').map(frame_location_stripped).collect();
    frames.join(";")
}

/// The interactive SVG (inferno's own script: zoom, search), or why none.
pub fn svg(rec: &Recording, title: &str, lines: bool) -> Result<String, String> {
    svg_of(&folded_by_role(rec, lines), title, "")
}

/// [`svg`] of folded stacks rooted as [`folded_by_role`] roots them;
/// `more` ends the subtitle.
pub fn svg_of(lines: &[String], title: &str, more: &str) -> Result<String, String> {
    if lines.is_empty() {
        return Err(NO_SAMPLES.into());
    }
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = format!("CPU samples: {title}");
    opts.subtitle = Some(format!(
        "stacks rooted at platform/role, instance, thread; frames coloured by role{more}"
    ));
    opts.count_name = "samples".into();
    let svg = draw(&mut opts, lines)?;
    Ok(color_by_role(&svg))
}

const NO_SAMPLES: &str = "the recording has no sampled stacks: record with --sample 99";

fn draw(opts: &mut inferno::flamegraph::Options, lines: &[String]) -> Result<String, String> {
    let mut out = Vec::new();
    inferno::flamegraph::from_lines(opts, lines.iter().map(String::as_str), &mut out)
        .map_err(|e| format!("flamegraph: {e}"))?;
    String::from_utf8(out).map_err(|e| format!("flamegraph: {e}"))
}

/// Samples per stack rooted at role (platforms, instances and threads
/// differ between the two sides of a comparison; roles are what they
/// share), summed over `recs`, and the work they did when all know it.
fn folded_by_role_only(recs: &[Recording]) -> (BTreeMap<String, u64>, Option<f64>) {
    let mut merged: BTreeMap<String, u64> = BTreeMap::new();
    for rec in recs {
        for s in rec.rows::<SampleRow>() {
            *merged
                .entry(format!("{};{}", s.owner.role, frames(&s.stack, false)))
                .or_default() += s.count;
        }
    }
    let ops: Option<Vec<f64>> = recs.iter().map(|r| r.ops().map(|o| o.count)).collect();
    (merged, ops.map(|o| o.iter().sum()))
}

/// A differential flamegraph of B against A (each one recording or the
/// repetitions of a bench cell): B's stacks as widths, each frame red where B
/// takes more samples than A for the same work and blue where fewer. A is
/// scaled to B's operations when both know their work (the fair comparison
/// when throughputs differ), else to B's total samples.
pub fn differential_svg(a: &[Recording], b: &[Recording], title: &str) -> Result<String, String> {
    let (before, ops_a) = folded_by_role_only(a);
    let (after, ops_b) = folded_by_role_only(b);
    if before.is_empty() || after.is_empty() {
        return Err(format!("both sides need sampled stacks: {NO_SAMPLES}"));
    }
    let (scale, per) = match (ops_a, ops_b) {
        (Some(oa), Some(ob)) if oa > 0.0 && ob > 0.0 => (ob / oa, "the same work (per operation)"),
        _ => (
            after.values().sum::<u64>() as f64 / before.values().sum::<u64>() as f64,
            "the same number of samples (the work is not known)",
        ),
    };
    let mut stacks: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for (stack, n) in &before {
        stacks.entry(stack).or_default().0 = (*n as f64 * scale).round() as u64;
    }
    for (stack, n) in &after {
        stacks.entry(stack).or_default().1 = *n;
    }
    let lines: Vec<String> = stacks
        .into_iter()
        .map(|(stack, (a, b))| format!("{stack} {a} {b}"))
        .collect();
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = format!("Differential CPU samples: {title}");
    opts.subtitle = Some(format!(
        "widths: B's samples; red: B takes more than A for {per}, blue: fewer; stacks rooted at role"
    ));
    opts.count_name = "samples".into();
    draw(&mut opts, &lines)
}

/// The SVG without its script and event handlers: a static picture an HTML
/// page whose content security policy forbids scripts shows without errors.
pub fn without_script(svg: &str) -> String {
    let mut out = String::with_capacity(svg.len());
    let mut rest = svg;
    while let Some(at) = rest.find("<script") {
        out.push_str(&rest[..at]);
        match rest[at..].find("</script>") {
            Some(end) => rest = &rest[at + end + "</script>".len()..],
            None => {
                rest = "";
            }
        }
    }
    out.push_str(rest);
    // Inline handlers (onload="init(evt)") run as script too.
    let mut clean = String::with_capacity(out.len());
    let mut rest = out.as_str();
    while let Some(at) = rest.find(" on") {
        let attr = &rest[at + 1..];
        let name_end = attr.find('=').unwrap_or(0);
        let is_handler = name_end > 2
            && attr[..name_end].chars().all(|c| c.is_ascii_lowercase())
            && attr[name_end..].starts_with("=\"");
        if is_handler && let Some(close) = attr[name_end + 2..].find('"') {
            clean.push_str(&rest[..at]);
            rest = &attr[name_end + 2 + close + 1..];
        } else {
            clean.push_str(&rest[..at + 3]);
            rest = &rest[at + 3..];
        }
    }
    clean.push_str(rest);
    clean
}

/// Value of `name="..."` in an element's text.
fn attr<'a>(element: &'a str, name: &str) -> Option<&'a str> {
    let at = element.find(&format!(" {name}=\""))? + name.len() + 3;
    Some(&element[at..at + element[at..].find('"')?])
}

/// Every frame's fill: the colour of the role frame it stands on, lighter
/// with height so neighbouring frames stay apart.
fn color_by_role(svg: &str) -> String {
    // Role frames are the ones directly above "all": the second-lowest row.
    let frames: Vec<(usize, &str, &str)> = svg
        .match_indices("<g><title>")
        .filter_map(|(at, _)| {
            let g = &svg[at..at + svg[at..].find("</g>")?];
            let title = &g["<g><title>".len()..g.find("</title>")?];
            let name = title.rsplit_once(" (").map_or(title, |(n, _)| n);
            let rect = &g[g.find("<rect")?..];
            Some((attr(rect, "y")?.parse::<usize>().ok()?, name, rect))
        })
        .collect();
    let mut rows: Vec<usize> = frames.iter().map(|f| f.0).collect();
    rows.sort_unstable();
    rows.dedup();
    let Some(&role_row) = rows.iter().rev().nth(1) else {
        return svg.to_string();
    };
    let samples = |rect: &str, a: &str| attr(rect, a).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let roles: Vec<(u64, u64, &str)> = frames
        .iter()
        .filter(|f| f.0 == role_row)
        .map(|f| (samples(f.2, "fg:x"), samples(f.2, "fg:w"), f.1))
        .collect();
    let mut out = String::with_capacity(svg.len());
    let mut rest = svg;
    while let Some(at) = rest.find("<rect") {
        out.push_str(&rest[..at]);
        let end = rest[at..].find("/>").map_or(rest.len() - at, |e| e + 2);
        let rect = &rest[at..at + end];
        let x = samples(rect, "fg:x");
        // Only frames carry fg:x; the background does not.
        let role = roles
            .iter()
            .find(|(rx, rw, _)| x >= *rx && x < rx + rw)
            .filter(|_| attr(rect, "fg:x").is_some());
        match (
            role,
            attr(rect, "fill"),
            attr(rect, "y").and_then(|y| y.parse::<usize>().ok()),
        ) {
            (Some((_, _, name)), Some(fill), Some(y)) if y <= role_row => {
                let c = crate::report_model::palette::color_of(name);
                // Up to 45 % lighter towards the top of the graph.
                let lift = ((role_row - y) as f64 / role_row.max(1) as f64 * 0.45).min(0.45);
                let mix = |v: u8| (v as f64 + (255.0 - v as f64) * lift).round() as u8;
                let rgb = format!("rgb({},{},{})", mix(c.0), mix(c.1), mix(c.2));
                out.push_str(&rect.replacen(&format!("fill=\"{fill}\""), &format!("fill=\"{rgb}\""), 1));
            }
            _ => out.push_str(rect),
        }
        rest = &rest[at + end..];
    }
    out.push_str(rest);
    out
}
