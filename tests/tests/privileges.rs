//! Least privilege: a process of an unprivileged user holding only
//! CAP_BPF, CAP_PERFMON and CAP_DAC_READ_SEARCH (ambient, via setpriv)
//! records the accuracy workload as exactly as root does; with fewer, the
//! error names what is missing; `vtrace lab` says it needs root.

use std::{path::Path, process::Command};

use vtrace_tests::{TempDir, bin, report_json};

/// The nobody user, with exactly `caps` (setpriv names: "bpf,perfmon").
fn as_nobody(caps: &str, program: &Path, args: &[&str]) -> std::process::Output {
    let set = if caps.is_empty() {
        "-all".to_string()
    } else {
        format!(
            "-all,{}",
            caps.split(',').map(|c| format!("+{c}")).collect::<Vec<_>>().join(",")
        )
    };
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(format!("--inh-caps={set}"))
        .arg(format!("--ambient-caps={set}"))
        .arg("--")
        .arg(program)
        .args(args)
        .output()
        .expect("setpriv (util-linux)")
}

/// Copies of the binaries a user without access to the build tree can run.
fn public_copies(dir: &TempDir) -> (std::path::PathBuf, std::path::PathBuf) {
    let copy = |name: &str| {
        let to = dir.join(name);
        std::fs::copy(bin(name), &to).unwrap();
        to
    };
    (copy("vtrace"), copy("cpu-mix"))
}

fn world_writable(dir: &TempDir) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o777)).unwrap();
}

#[test]
fn the_documented_capabilities_are_enough_and_fewer_are_named() {
    assert!(vtrace_tests::is_root(), "run as root (to drop to nobody)");
    let dir = TempDir::new("least-privilege");
    world_writable(&dir);
    let (vtrace, mix) = public_copies(&dir);
    let rec = dir.join("run.vtrace");
    let truth = dir.join("truth.json");
    let o = as_nobody(
        "bpf,perfmon,dac_read_search",
        &vtrace,
        &[
            "record",
            "--layers",
            "cpu",
            "-o",
            rec.to_str().unwrap(),
            "--",
            mix.to_str().unwrap(),
            "--seconds",
            "2",
            "--only",
            "spin,syscall",
            "--out",
            truth.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    vtrace_tests::assert_threads_match_schedstat(&report_json(&rec), &truth, "as nobody");
    // Fewer: the error names each missing capability, and nothing runs.
    for (caps, missing) in [
        ("", "CAP_BPF, CAP_PERFMON, CAP_DAC_READ_SEARCH"),
        ("bpf,perfmon", "CAP_DAC_READ_SEARCH"),
        ("perfmon,dac_read_search", "CAP_BPF"),
    ] {
        let marker = dir.join("ran");
        let o = as_nobody(
            caps,
            &vtrace,
            &[
                "record",
                "-o",
                dir.join("x.vtrace").to_str().unwrap(),
                "--",
                "touch",
                marker.to_str().unwrap(),
            ],
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{caps}: recorded without {missing}");
        assert!(err.contains(&format!("lacks {missing}:")), "{caps}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(!marker.exists(), "{caps}: the workload ran");
    }
    // The lab changes the machine: root only, and it says so.
    let o = as_nobody("bpf,perfmon,dac_read_search", &vtrace, &["lab", "up", "host"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("vtrace lab needs root"));
}
