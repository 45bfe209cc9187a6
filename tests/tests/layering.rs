//! The layering check (scripts/check-layering.py) on the real tree, and on
//! copies of it with one back-reference of each kind planted: each must
//! fail, naming what it found.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use vtrace_tests::TempDir;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repository root")
        .to_path_buf()
}

/// The check's exit code and what it printed, on the tree at `root`.
fn check(root: &Path) -> (i32, String) {
    let out = Command::new("python3")
        .arg(repo().join("scripts/check-layering.py"))
        .arg("--root")
        .arg(root)
        .output()
        .expect("python3 runs scripts/check-layering.py");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

/// A copy of vtrace/src with `line` put first in each of `files` (created
/// when missing), checked.
fn planted(tag: &str, plants: &[(&str, &str)]) -> (i32, String) {
    let dir = TempDir::new(&format!("layering-{tag}"));
    let src = dir.join("src");
    let copied = Command::new("cp")
        .arg("-a")
        .arg(repo().join("vtrace/src"))
        .arg(&src)
        .status()
        .expect("cp runs");
    assert!(copied.success(), "copy vtrace/src");
    for (file, line) in plants {
        let path = src.join(file);
        let old = std::fs::read_to_string(&path).unwrap_or_default();
        std::fs::write(&path, format!("{line}\n{old}")).expect("plant a reference");
    }
    check(&src)
}

fn assert_fails(tag: &str, plants: &[(&str, &str)], says: &str) {
    let (code, text) = planted(tag, plants);
    assert_eq!(code, 1, "{tag}: the check should fail on {plants:?}; it said:\n{text}");
    assert!(text.contains(says), "{tag}: expected '{says}' in:\n{text}");
}

#[test]
fn the_tree_as_it_is_keeps_the_layering() {
    let (code, text) = check(&repo().join("vtrace/src"));
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("level 7: cli"), "the binary's commands on top:\n{text}");
}

#[test]
fn a_module_using_one_above_it_fails() {
    assert_fails(
        "up",
        &[("recording/schema.rs", "use crate::record::RecordOptions;")],
        "'recording' (level 1) uses 'record' (level 5), above it",
    );
    // A layer reaching for the command that runs it.
    assert_fails(
        "layer-up",
        &[("layers/cpu/mod.rs", "use crate::record::RecordOptions;")],
        "'layers' (level 2) uses 'record' (level 5), above it",
    );
}

#[test]
fn a_report_naming_a_layer_fails() {
    assert_fails(
        "report",
        &[("report/mod.rs", "use crate::layers::cpu::ThreadRow;")],
        "'report' names layer 'cpu'",
    );
}

#[test]
fn a_cycle_between_two_modules_of_one_level_fails() {
    assert_fails(
        "between",
        &[
            ("compare/mod.rs", "use crate::report::render;"),
            ("report/mod.rs", "use crate::compare::Subject;"),
        ],
        "between modules: cycle of 2",
    );
}

#[test]
fn a_cycle_inside_a_module_fails() {
    // run.rs uses options.rs; options.rs using run.rs closes a circle.
    assert_fails(
        "inside",
        &[("record/options.rs", "use super::run::RecordOutcome;")],
        "inside 'record': cycle of",
    );
    // Through a re-export: the file that defines the item is the one used.
    assert_fails(
        "inside-reexport",
        &[("record/preflight.rs", "use super::Recorder;")],
        "inside 'record': cycle of",
    );
}

#[test]
fn a_layer_using_another_layer_fails() {
    assert_fails(
        "layer",
        &[("layers/net/mod.rs", "use crate::layers::kvm::KvmOptions;")],
        "layer 'net' uses layer 'kvm'",
    );
}

#[test]
fn a_layer_using_the_registry_or_the_frame_using_a_layer_fails() {
    // `layers::find` is re-exported by the frame but lives in the registry.
    assert_fails(
        "registry",
        &[("layers/block/mod.rs", "use crate::layers::find;")],
        "layer 'block' uses the registry",
    );
    assert_fails(
        "frame",
        &[("layers/switches.rs", "use super::cpu::CpuOptions;")],
        "the frame (layers/switches.rs) uses layer 'cpu'",
    );
    // Through the frame's own re-export of a registry item, used bare.
    assert_fails(
        "frame-reexport",
        &[("layers/mod.rs", "pub fn layer_count() -> usize { REGISTRY.len() }")],
        "the frame uses the registry",
    );
}

#[test]
fn a_file_under_layers_that_is_no_layers_fails() {
    assert_fails(
        "stray",
        &[("layers/options.rs", "pub struct Everything;")],
        "layers/options.rs: a file under layers/ belongs to a layer",
    );
}
