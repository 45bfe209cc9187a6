//! `report --format html`: one self-contained file with every section and
//! its figures, checked as text and in a real browser (headless Chromium):
//! it renders, loads nothing and logs nothing.

use std::process::Command;

use vtrace_tests::{TempDir, bin, stderr, vtrace};

/// The HTML of the section `id`, from its opening tag to its end.
fn section<'a>(html: &'a str, id: &str) -> &'a str {
    let start = html
        .find(&format!("<section id=\"{id}\""))
        .unwrap_or_else(|| panic!("no section {id}"));
    let end = html[start..].find("</section>").expect("sections end") + start;
    &html[start..end]
}

#[test]
fn html_report_is_self_contained_has_figures_and_renders_in_chromium() {
    assert!(vtrace_tests::is_root(), "run as root");
    let dir = TempDir::new("report-html");
    let rec = dir.join("run.vtrace");
    let mix = bin("cpu-mix");
    // Three seconds of CPU and loopback traffic: every default layer with
    // something to draw, and three intervals for the time series.
    let o = vtrace(&[
        "record",
        "-o",
        rec.to_str().unwrap(),
        "--",
        mix.to_str().unwrap(),
        "--seconds",
        "3",
    ]);
    assert!(o.status.success(), "record failed: {}", stderr(&o));
    let page = dir.join("report.html");
    let o = vtrace(&[
        "report",
        rec.to_str().unwrap(),
        "--format",
        "html",
        "-o",
        page.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "report failed: {}", stderr(&o));
    let html = std::fs::read_to_string(&page).unwrap();

    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains("Content-Security-Policy"), "the page forbids loads");
    for external in ["<script", "<link", "<img", " src=", "url(", "@import"] {
        assert!(
            !html.contains(external),
            "the page refers to something outside it: {external}"
        );
    }
    // Every section with data has its figures: CPU by role and over time,
    // packet sizes, the programs' cost.
    let svgs = |id: &str| section(&html, id).matches("<svg").count();
    assert!(section(&html, "run").contains("tracing cost"));
    assert!(svgs("cpu") >= 2, "CPU figures: {}", svgs("cpu"));
    assert!(svgs("net") >= 1, "no packet-size figure");
    assert!(svgs("overhead") >= 1, "no cost figure");
    let cpu = section(&html, "cpu");
    for title in ["CPU time by platform, role and state", "CPU over time by role"] {
        assert!(cpu.contains(title), "missing figure {title}");
    }
    // The states keep their colours (report/plot.rs): user is blue.
    assert!(cpu.contains("#4C72B0"), "user time not in its colour");
    // The tables are there too, with the thread the workload named.
    assert!(cpu.contains("mix-spin"));
    assert!(!html.contains("not drawn"), "a figure failed to draw");

    // A real browser: it renders the page to a screenshot and logs no
    // console message (a refused load would be one).
    let shot = dir.join("report.png");
    let profile = dir.join("chromium-profile");
    let o = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1200,2400",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs (scripts/setup.sh installs it)");
    let log = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "chromium failed: {log}");
    let console: Vec<&str> = log.lines().filter(|l| l.contains(":CONSOLE")).collect();
    assert!(console.is_empty(), "console messages: {console:#?}");
    let png = std::fs::read(&shot).expect("a screenshot");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 20_000,
        "screenshot of {} bytes",
        png.len()
    );
}
