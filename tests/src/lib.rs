//! Helpers for the integration tests. The tests run the release binaries
//! (`vtrace`, `cpu-mix`) as a user would; build them first with
//! `cargo build --release` (scripts/test.sh does).

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

/// target/<profile>/ of the running test binary.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/<test binary>
    exe.parent()
        .and_then(Path::parent)
        .expect("test binary lives in target/<profile>/deps")
        .to_path_buf()
}

/// Path of a workspace binary, built beforehand.
pub fn bin(name: &str) -> PathBuf {
    let p = target_dir().join(name);
    assert!(
        p.is_file(),
        "{} missing: run `cargo build --release` first (scripts/test.sh does)",
        p.display()
    );
    p
}

pub fn vtrace(args: &[&str]) -> Output {
    vtrace_env(args, &[])
}

/// Runs vtrace with extra environment variables (e.g. VTRACE_SKIP_METHODS).
pub fn vtrace_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(bin("vtrace"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run vtrace")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `vtrace report --format json` of a recording.
pub fn report_json(recording: &Path) -> serde_json::Value {
    let o = vtrace(&["report", "--format", "json", recording.to_str().unwrap()]);
    assert!(o.status.success(), "report failed: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("report JSON parses")
}

/// Every thread cpu-mix reports in its ground truth (`--out FILE`: each
/// thread's own /proc schedstat run time) has a total in `report` within 2 %
/// of it. `label` names the recording in failures.
pub fn assert_threads_match_schedstat(report: &serde_json::Value, truth_file: &Path, label: &str) {
    let truth: serde_json::Value =
        serde_json::from_slice(&std::fs::read(truth_file).expect("cpu-mix's truth")).expect("truth parses");
    for t in truth["threads"].as_array().expect("truth threads") {
        let expected = t["schedstat_ns"].as_u64().unwrap();
        let got = report["threads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["tid"] == t["tid"])
            .and_then(|x| x["total_ns"].as_u64())
            .unwrap_or_else(|| panic!("{label}: thread {} missing", t["tid"]));
        let err = (got as f64 - expected as f64).abs() / expected as f64;
        eprintln!(
            "{label} {}: vtrace {got} ns, schedstat {expected} ns ({:.2} %)",
            t["name"],
            err * 100.0
        );
        assert!(
            err <= 0.02,
            "{label}: {} {got} ns vs schedstat {expected} ns",
            t["name"]
        );
    }
}

/// A directory removed when dropped, even when the test fails.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("vtrace-test-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

/// `vtrace lab down` of each platform when dropped, also when a test fails
/// or panics.
pub struct LabDown(pub Vec<&'static str>);

impl LabDown {
    pub fn new(platforms: &[&'static str]) -> Self {
        LabDown(platforms.to_vec())
    }
}

impl Drop for LabDown {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = vtrace(&["lab", "down", p]);
        }
    }
}

/// The schema-5 recording kept readable in tests/fixtures.
pub fn schema5_fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/schema5.vtrace")
}

/// Copies the files of a directory (a recording: no subdirectories) into `to`.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// `v[field]` as a number; a missing or non-numeric field fails the test, naming it.
pub fn num(v: &serde_json::Value, field: &str) -> u64 {
    v[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} missing or not a number in {v}"))
}

/// Shell functions for a script run in the stock-kernel guest
/// (vtrace::lab::guest): `mark` notes a step in steps.log and on the
/// console (so a guest that runs out of time says where it was); `step
/// LIMIT FAILFILE WHAT CMD...` runs CMD under a deadline, SIGINT first as
/// Ctrl-C would (a recording stops and keeps what it has), and notes a
/// failure in FAILFILE.
pub const GUEST_STEPS: &str = r#"mark() { m="[$(cut -d' ' -f1 /proc/uptime) s] $*"; echo "$m" >> /out/steps.log; echo "$m" > /dev/console; }
step() {
  limit=$1 fail=$2 what=$3; shift 3
  mark "$what"
  timeout -s INT -k 15 "$limit" "$@"; rc=$?
  [ $rc = 0 ] || { echo "$what failed (exit $rc)" >> "$fail"; mark "$what failed (exit $rc)"; }
  return $rc
}
"#;

/// ../shared/vmm (or `$VTRACE_VMM_DIR`): Firecracker, the Unikraft image
/// and Kata, built from upstream (each folder's PROVENANCE.md).
pub fn vmm_dir() -> PathBuf {
    std::env::var_os("VTRACE_VMM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/vmm")))
}

/// A system tool's path, for copying into the stock-kernel guest.
pub fn system_tool(tool: &str) -> Result<PathBuf, String> {
    ["/usr/bin", "/usr/sbin", "/bin", "/sbin"]
        .iter()
        .map(|d| PathBuf::from(d).join(tool))
        .find(|p| p.is_file())
        .ok_or_else(|| format!("{tool} not found (scripts/setup.sh installs it)"))
}

/// What a guest script wrote into its share, read back before the share
/// goes: the text files by name; first copied to `$VTRACE_KEEP_GUEST_OUT`
/// when set (a guest that failed or ran out of time too: steps.log says
/// when each step began and how it ended).
pub struct GuestFiles {
    pub files: std::collections::HashMap<String, String>,
}

impl GuestFiles {
    pub fn read(out: &Path) -> Result<Self, String> {
        if let Some(keep) = std::env::var_os("VTRACE_KEEP_GUEST_OUT") {
            let _ = Command::new("cp").arg("-a").arg(out).arg(keep).status();
        }
        let files = std::fs::read_dir(out)
            .map_err(|e| e.to_string())?
            .flatten()
            .filter(|e| {
                e.path()
                    .extension()
                    .is_some_and(|x| ["json", "out", "txt", "failed", "csv", "log"].iter().any(|k| x == *k))
            })
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                Some((name, std::fs::read_to_string(e.path()).ok()?))
            })
            .collect();
        Ok(GuestFiles { files })
    }

    pub fn text(&self, name: &str) -> &str {
        self.files
            .get(name)
            .unwrap_or_else(|| panic!("the guest wrote no {name}"))
    }

    /// The JSON report `NAME.json`; a failed step (`NAME.failed`) fails
    /// with what it said, `NAME.out` and `up` (what bringing it up said).
    pub fn report(&self, name: &str, up: &str) -> serde_json::Value {
        if let Some(why) = self.files.get(&format!("{name}.failed")) {
            panic!(
                "{name}: {why}\nlab up said:\n{}\nthe recording said:\n{}",
                self.files.get(up).map_or("", |s| s),
                self.files.get(&format!("{name}.out")).map_or("", |s| s)
            );
        }
        serde_json::from_str(self.text(&format!("{name}.json"))).unwrap_or_else(|e| panic!("{name}: {e}"))
    }
}
