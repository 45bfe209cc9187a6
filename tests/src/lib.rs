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

/// Run time (ns) of every thread of process `pid` now, from
/// /proc/<pid>/task/*/schedstat; None once the process is gone.
pub fn schedstat_ns(pid: u32) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    Some(
        tasks
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
            .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .sum(),
    )
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

/// The one guest a host recording's report has (its `guests` table),
/// reached at an address starting `reached_by`: its recording whole, its
/// clock mapped with every exchange (at least `min_exchanges`) in causal
/// order within the stated bound (half the fastest round trip), and its
/// CPU 0 beside the host thread that ran that vCPU. `context` is shown
/// with a failure (a console log). The guest's row.
pub fn assert_one_guest_reached<'a>(
    report: &'a serde_json::Value,
    label: &str,
    reached_by: &str,
    min_exchanges: u64,
    context: &str,
) -> &'a serde_json::Value {
    let rows = |v: &'a serde_json::Value, table: &str| v[table].as_array().map_or(&[][..], |a| a.as_slice());
    let guests = rows(report, "guests");
    assert_eq!(guests.len(), 1, "{label}: {guests:?}\n{context}");
    let guest = &guests[0];
    let mut shown = guest.clone();
    shown["threads"] = serde_json::Value::from(rows(guest, "threads").len());
    eprintln!("{label}'s guest: {shown}");
    assert_eq!(guest["state"], "complete", "{label}: {shown}\n{context}");
    assert!(
        guest["address"].as_str().is_some_and(|a| a.starts_with(reached_by)),
        "{label}: {shown}"
    );
    let clock = &guest["clock"];
    let exchanges = num(clock, "exchanges");
    assert!(exchanges >= min_exchanges, "{label}: {clock}");
    assert_eq!(
        num(clock, "causal"),
        exchanges,
        "{label}: every exchange in causal order after mapping: {clock}"
    );
    let bound = clock["bound_ns"].as_f64().unwrap_or(0.0);
    assert!(
        bound > 0.0 && bound <= num(clock, "min_round_trip_ns") as f64 / 2.0 + 1.0,
        "{label}: {clock}"
    );
    let cpu = rows(guest, "cpus")
        .first()
        .unwrap_or_else(|| panic!("{label}: no guest CPU: {shown}"));
    assert!(
        cpu["host_tid"].is_u64() && num(cpu, "host_guest_ns") + num(cpu, "host_exits_ns") > 0,
        "{label}: the vCPU thread beside guest CPU 0: {cpu}"
    );
    guest
}

/// What a busy loop run in a guest through `vtrace lab exec` during a
/// recording runs there (SPINS rounds, [`guest_spin_scripts`]): the loop
/// names itself [`SPIN_COMM`] (a container's pid namespace numbers it apart
/// from the guest's, which the guest's recording keeps), and its own
/// schedstat and stat are read once it has exited, whole (its exit too:
/// milliseconds under nested TCG), as a zombie its parent (`sleep`, which
/// never reaps) keeps until then. It prints the loop's pid there, its
/// schedstat's three numbers, then its stat's fields. Shell builtins, cat
/// and sleep only: a Kata container's root has no more.
pub const GUEST_SPIN_INSIDE: &str = r#"sh -c 'sh -c "printf vtspin > /proc/self/comm; i=0; while [ \$i -lt SPINS ]; do i=\$((i+1)); done" & echo $! > /tmp/spin.pid; exec sleep 600' &
holder=$!
while [ ! -s /tmp/spin.pid ]; do sleep 0.1; done
p=$(cat /tmp/spin.pid)
while :; do set -- $(cat /proc/$p/stat); [ "$3" = Z ] && break; sleep 0.2; done
echo $p $(cat /proc/$p/schedstat) $(cat /proc/$p/stat)
kill $holder
"#;

/// The name the busy loop gives itself.
pub const SPIN_COMM: &str = "vtspin";

/// The script lines that write the busy loop's scripts: run `sh
/// /tmp/guest-spin.sh PLATFORM` for one, `pin` the command put before its
/// shell there (`taskset -c 0 `, or nothing), `spins` its rounds (24 000:
/// about a second of CPU in a lab VM one level down; a Kata sandbox's
/// guest ran them for 8.7 s, and 3 000 for 2.0 s, 15 s after they were
/// due: its one vCPU still busy with the agent's start).
pub fn guest_spin_scripts(pin: &str, spins: u32) -> String {
    let inside = GUEST_SPIN_INSIDE.replace("SPINS", &spins.to_string());
    format!(
        "cat > /tmp/guest-spin-inside.sh <<'EOF'\n{inside}EOF\n\
         cat > /tmp/guest-spin.sh <<'EOF'\nexec vtrace lab exec \"$1\" -- {pin}sh -c \"$(cat /tmp/guest-spin-inside.sh)\"\nEOF\n"
    )
}

/// The busy loop (`spin_out`, what it printed) against the guest's own
/// recording of it (`inner`, its report): the recorded thread's CPU within
/// 2 % of its schedstat. Its total ns and schedstat's.
pub fn assert_guest_spin_matches_schedstat(inner: &serde_json::Value, spin_out: &str, label: &str) -> (u64, u64) {
    let words: Vec<&str> = spin_out.split_whitespace().collect();
    let schedstat_ns: u64 = words
        .get(1)
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("{label}: the guest's busy loop: {spin_out}"));
    // /proc/PID/stat after the pid and the schedstat's three numbers:
    // utime and stime are its 14th and 15th fields, in USER_HZ (100) ticks.
    let ticks = |field: usize| words.get(3 + field).and_then(|w| w.parse::<u64>().ok()).unwrap_or(0) * 10_000_000;
    let thread = inner["threads"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["comm"] == SPIN_COMM)
        .unwrap_or_else(|| panic!("{label}: no {SPIN_COMM} thread in the guest's recording: {spin_out}"));
    let total = num(thread, "total_ns");
    let err = total.abs_diff(schedstat_ns) as f64 / schedstat_ns as f64;
    eprintln!(
        "{label}'s guest busy loop (guest tid {}): vtrace {total} ns (user {}, system {}, softirq {}, hardirq {}), \
         schedstat {schedstat_ns} ns ({:.2} %); stat utime {} ns, stime {} ns",
        thread["tid"],
        thread["user_ns"],
        thread["system_ns"],
        thread["softirq_ns"],
        thread["hardirq_ns"],
        err * 100.0,
        ticks(14),
        ticks(15)
    );
    assert!(schedstat_ns > 0 && err <= 0.02, "{label}: {thread} against {spin_out}");
    (total, schedstat_ns)
}

/// A guest's own recording (its report): the frames its programs saw
/// eth0 send and receive equal eth0's own counters over the same window,
/// both ways. The frames sent, and received.
pub fn assert_guest_eth0_matches_its_counters(inner: &serde_json::Value, label: &str) -> (u64, u64) {
    let table = |name: &str| inner[name].as_array().cloned().unwrap_or_default();
    let eth0 = table("device_counters")
        .into_iter()
        .find(|d| d["name"] == "eth0")
        .unwrap_or_else(|| panic!("{label}: the guest's eth0"));
    let seen = |hop: &str| -> u64 {
        table("devices")
            .iter()
            .filter(|d| d["name"] == "eth0" && d["hop"] == hop)
            .map(|d| d["packets"].as_u64().unwrap_or(0))
            .sum()
    };
    let counted = |field: &str| eth0[field].as_u64().unwrap_or(u64::MAX);
    eprintln!(
        "{label} guest eth0: xmit {} (tx_packets {}), receive {} (rx_packets {})",
        seen("xmit"),
        counted("tx_packets"),
        seen("receive"),
        counted("rx_packets")
    );
    assert_eq!(seen("xmit"), counted("tx_packets"), "{label}: frames the guest sent");
    assert_eq!(
        seen("receive"),
        counted("rx_packets"),
        "{label}: frames the guest received"
    );
    (seen("xmit"), seen("receive"))
}

/// Pings into a VM recorded with its guest (`--guest auto --events`, the
/// guest's path layer), `report` and ping's output: every vCPU entry that
/// delivered a request's interrupt is paired with the guest's
/// vring_interrupt, every kick with the guest's notify, the pairs narrow
/// the clock's bound and all of them are in causal order after it; at
/// least nine in ten pings' round trips at the tap are host and guest
/// stages with no `guest` residual, summing to it exactly, their median
/// inside ping's own. The boundary row and its joined round trips.
pub fn assert_pings_joined_across_the_boundary(
    report: &serde_json::Value,
    ping_out: &str,
    pings: usize,
    label: &str,
) -> (serde_json::Value, Vec<serde_json::Value>) {
    use serde_json::Value;
    let n = |v: &Value| v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"));
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let b = report["boundary"]
        .as_array()
        .and_then(|rows| rows.first())
        .cloned()
        .unwrap_or_else(|| panic!("{label}: no boundary section: {ping_out}"));
    let platform = label;
    let mut shown = b.clone();
    shown["round_trips"] = Value::from(b["round_trips"].as_array().map_or(0, |t| t.len()));
    eprintln!("{platform} across the boundary: {shown}");
    assert!(b["unjoined"].is_null(), "{shown}");
    let clock = &b["clock"];
    assert_eq!(clock["agrees"], true, "the pairs agree with the exchanges: {clock}");
    let pairs = n(&clock["rx_pairs"]) + n(&clock["tx_pairs"]);
    assert_eq!(n(&clock["causal"]), pairs, "every pair in causal order: {clock}");
    let bound = clock["bound_ns"].as_f64().unwrap();
    assert!(
        bound > 0.0 && bound <= clock["exchange_bound_ns"].as_f64().unwrap(),
        "{clock}"
    );
    // Two interrupts before one poll (or two kicks served as one) leave
    // one side a packet short: counted as unmatched, not joined.
    for dir in ["rx", "tx"] {
        assert!(n(&b[dir]["matched"]) >= pings as u64 * 9 / 10, "{dir}: {shown}");
    }
    let joined = b["round_trips"].as_array().unwrap().clone();
    assert!(
        joined.len() >= pings * 9 / 10,
        "{} of {pings} pings joined: {shown}",
        joined.len()
    );
    let mut totals = Vec::new();
    for trip in &joined {
        let parts = trip["parts"].as_array().unwrap();
        let names: Vec<&str> = parts.iter().map(|p| p[0].as_str().unwrap()).collect();
        assert!(!names.contains(&"guest"), "a residual left: {trip}");
        for part in vtrace::views::boundary::guest_parts_of(b["passthrough"] == true) {
            assert!(names.contains(part), "{part} missing: {trip}");
        }
        let sum: u64 = parts.iter().map(|p| n(&p[1])).sum();
        assert_eq!(sum, n(&trip["total_ns"]), "parts sum to the trip: {trip}");
        totals.push(n(&trip["total_ns"]) as f64);
    }
    let rtts = vtrace::workload::ops::ping_rtts_ms(ping_out);
    let (trip_p50, ping_p50) = (median(totals), median(rtts) * 1e6);
    eprintln!("joined round trips p50 {trip_p50} ns, ping's own p50 {ping_p50} ns");
    assert!(trip_p50 > 0.0 && trip_p50 <= ping_p50);
    (b, joined)
}

/// Each path stage's (count, frames, sum_ns) over a report's `path` rows
/// (every process that ended it).
pub fn path_stages(report: &serde_json::Value) -> std::collections::BTreeMap<String, (u64, u64, u64)> {
    let mut out = std::collections::BTreeMap::new();
    for row in report["path"].as_array().map_or(&[][..], |a| a.as_slice()) {
        let e = out
            .entry(row["stage"].as_str().unwrap_or_default().to_string())
            .or_insert((0, 0, 0));
        e.0 += num(row, "count");
        e.1 += num(row, "frames");
        e.2 += num(row, "sum_ns");
    }
    out
}

/// `v[field]` as a number; a missing or non-numeric field fails the test, naming it.
pub fn num(v: &serde_json::Value, field: &str) -> u64 {
    v[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} missing or not a number in {v}"))
}

/// Shell functions for a script run in the stock-kernel guest: `mark`,
/// `step`, `once` and `finished` ([`vtrace::lab::guest::STEPS`]).
pub const GUEST_STEPS: &str = ::vtrace::lab::guest::STEPS;

// The block layer's ground truth: what a lab container's blkio cgroup read.

/// cgroup v1's blkio counts a cgroup's bios only while it has a throttle
/// limit: an unreachable one on the lab's disk, removed when dropped. A
/// million reads a second: fio does some thousands. (At a billion,
/// blk-throttle's allowance, a signed int of limit x slice, overflows once
/// a slice of steady I/O passes about 2 s, 1e9 x 2.15 s > 2^31: it starts
/// queueing the cgroup's bios for its own worker, which submits them as the
/// host's. CI's fio under a writer ran that long.)
pub struct BlkioCounting(std::path::PathBuf, String);

impl BlkioCounting {
    pub fn on(platform: &str) -> BlkioCounting {
        let (major, minor) = lab_disk_dev();
        let path = std::path::Path::new(&blkio_root())
            .join(format!("vtrace-lab-{platform}"))
            .join("blkio.throttle.read_iops_device");
        std::fs::write(&path, format!("{major}:{minor} 1000000")).unwrap();
        BlkioCounting(path, format!("{major}:{minor} 0"))
    }
}

impl Drop for BlkioCounting {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.0, &self.1);
    }
}

pub fn blkio_root() -> String {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(4).is_some_and(|m| m.ends_with("/blkio"))).then(|| f[4].to_string())
        })
        .expect("a cgroup v1 blkio hierarchy (this test's ground truth)")
}

/// (major, minor) of the disk under the lab's directory.
pub fn lab_disk_dev() -> (u32, u32) {
    let dev = std::os::unix::fs::MetadataExt::dev(&std::fs::metadata("/var/lib/vtrace-lab").unwrap());
    (libc::major(dev), libc::minor(dev))
}

/// (the lab's disk, e.g. "vda"; bytes its container's blkio cgroup had
/// read from it so far), from cgroup v1's blkio.throttle.io_service_bytes.
pub fn cgroup_reads(platform: &str) -> (String, u64) {
    let root = blkio_root();
    let (major, minor) = lab_disk_dev();
    let disk = std::fs::read_dir("/sys/block")
        .unwrap()
        .flatten()
        .find(|e| std::fs::read_to_string(e.path().join("dev")).is_ok_and(|d| d.trim() == format!("{major}:{minor}")))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .expect("the lab's disk in /sys/block");
    let stat =
        std::fs::read_to_string(format!("{root}/vtrace-lab-{platform}/blkio.throttle.io_service_bytes")).unwrap();
    let reads = stat
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[0] == format!("{major}:{minor}") && f[1] == "Read").then(|| f[2].parse().unwrap())
        })
        .unwrap_or(0);
    (disk, reads)
}

/// fio's 512 direct random 4 KiB reads of a lab instance's /fio.dat (laid
/// out beforehand), as `lab exec` runs them; the output format follows.
pub const FIO_DIRECT_READS: [&str; 8] = [
    "fio",
    "--name=in-container",
    "--filename=/fio.dat",
    "--rw=randread",
    "--bs=4k",
    "--size=8M",
    "--io_size=2M",
    "--direct=1",
];

/// Runs `sql` in DuckDB from PyPI, in the tests' own virtual environment
/// (target/<profile>/duckdb-venv, made with Debian's python3-venv and kept
/// for the next run), in the directory `cwd`: its rows as JSON objects.
pub fn duckdb(cwd: &Path, sql: &str) -> Vec<serde_json::Value> {
    let venv = target_dir().join("duckdb-venv");
    let python = venv.join("bin/python3");
    let has_duckdb = |p: &Path| {
        Command::new(p)
            .args(["-c", "import duckdb"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !has_duckdb(&python) {
        let made = Command::new("/usr/bin/python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .output()
            .expect("run python3");
        assert!(
            made.status.success(),
            "python3 -m venv (scripts/setup.sh installs python3-venv): {}",
            stderr(&made)
        );
        let pip = Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "duckdb"])
            .output()
            .expect("run pip");
        assert!(pip.status.success(), "pip install duckdb (from PyPI): {}", stderr(&pip));
    }
    const RUN: &str = "import duckdb, json, sys\n\
        cur = duckdb.connect().execute(sys.stdin.read())\n\
        names = [d[0] for d in cur.description]\n\
        print(json.dumps([dict(zip(names, row)) for row in cur.fetchall()], default=str))\n";
    let mut child = Command::new(&python)
        .args(["-c", RUN])
        .current_dir(cwd)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run DuckDB's python");
    use std::io::Write;
    child.stdin.take().unwrap().write_all(sql.as_bytes()).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "DuckDB: {}\n{sql}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("DuckDB's rows as JSON")
}

/// The first ```sql block after the heading `heading` in docs/`file`: the
/// documented query, run as it is written.
pub fn documented_sql(file: &str, heading: &str) -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/").to_string() + file;
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let (_, after) = text
        .split_once(&format!("\n## {heading}\n"))
        .unwrap_or_else(|| panic!("{path}: no ## {heading}"));
    let (_, block) = after
        .split_once("```sql\n")
        .unwrap_or_else(|| panic!("{path}: no sql block under {heading}"));
    block.split_once("```").expect("the block ends").0.to_string()
}

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

/// A guest run's files and its wall time.
pub struct GuestRun {
    pub out: GuestFiles,
    pub wall: std::time::Duration,
}

/// Boots the stock-kernel guest (`name` in what it prints) on `board`,
/// runs `script` with `binaries` and `files` there, and reads back what the
/// script wrote; prints how long it took and its steps. Err: a guest that
/// could not run or whose script failed, with its console.
pub fn run_guest(
    name: &str,
    board: ::vtrace::lab::guest::Board,
    binaries: &[PathBuf],
    files: &[(PathBuf, PathBuf)],
    script: &str,
    out: &Path,
    timeout: std::time::Duration,
) -> Result<GuestRun, String> {
    let start = std::time::Instant::now();
    let run = ::vtrace::lab::guest::run_on(board, binaries, files, script, out, timeout);
    let mut files = GuestFiles::read(out)?;
    report_recordings_here(out, &mut files);
    let summary = match &run {
        Ok(r) => format!(
            "{name} guest: {:.1} s over {} boot(s), its first heartbeat after {:.0} s, then still for {:.0} s at most",
            start.elapsed().as_secs_f64(),
            r.boots,
            r.first_beat.as_secs_f64(),
            r.longest_silence.as_secs_f64()
        ),
        Err(e) => format!(
            "{name} guest: {:.1} s, failed: {}",
            start.elapsed().as_secs_f64(),
            e.to_string().lines().next().unwrap_or("")
        ),
    };
    // The test command prints these at its end: a file's time is its guest's.
    if let Ok(log) = std::env::var("VTRACE_GUEST_RUNS") {
        let steps = files
            .files
            .get("steps.log")
            .map_or(String::new(), |s| s.replace('\n', "\n    "));
        let _ = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(log)
            .and_then(|mut f| std::io::Write::write_all(&mut f, format!("{summary}\n    {steps}\n").as_bytes()));
    }
    let run = run.map_err(|e| format!("guest: {e}"))?;
    eprintln!(
        "{summary}; its steps:\n{}",
        files.files.get("steps.log").map_or("", |s| s)
    );
    if run.status != 0 {
        return Err(format!(
            "the guest's script failed ({}); console:\n{}",
            run.status, run.console
        ));
    }
    Ok(GuestRun {
        out: files,
        wall: run.wall,
    })
}

/// Draws here the report of the recording or bench at `from` as `NAME.EXT`
/// in `out` and among `files` (`format` text gives `NAME.txt`); one that
/// fails leaves `NAME.failed` with why, unless a step already did.
pub fn draw_report(out: &Path, files: &mut GuestFiles, name: &str, from: &Path, format: &str) {
    let ext = if format == "text" { "txt" } else { format };
    let to = out.join(format!("{name}.{ext}"));
    let o = vtrace(&[
        "report",
        from.to_str().unwrap(),
        "--format",
        format,
        "-o",
        to.to_str().unwrap(),
    ]);
    match std::fs::read_to_string(&to) {
        Ok(text) if o.status.success() && !text.is_empty() => {
            files.files.insert(format!("{name}.{ext}"), text);
        }
        _ => {
            files
                .files
                .entry(format!("{name}.failed"))
                .or_insert_with(|| format!("report {}: {}", from.display(), stderr(&o)));
        }
    }
}

/// The JSON and text reports of every recording a guest left in `out`
/// (`NAME.vtrace`) that it did not report itself, drawn here: reading
/// recordings under TCG took a guest's script half a minute, here each
/// takes a fraction of a second. Reports are offline: the same binary
/// draws the same report on either kernel.
fn report_recordings_here(out: &Path, files: &mut GuestFiles) {
    let Ok(entries) = std::fs::read_dir(out) else {
        return;
    };
    let mut names: Vec<String> = entries
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| Some(e.file_name().to_str()?.strip_suffix(".vtrace")?.to_string()))
        .collect();
    names.sort();
    for name in names {
        let from = out.join(format!("{name}.vtrace"));
        for (format, ext) in [("json", "json"), ("text", "txt")] {
            if !files.files.contains_key(&format!("{name}.{ext}")) {
                draw_report(out, files, &name, &from, format);
            }
        }
    }
}

// VMs started as users start them (tests/tests/vm_platforms.rs, sriov.rs):
// a plain command line, no thread names, an image under a name of their own.

/// A shell function for the command that runs such a VM: `user_vm_truth
/// PID NAME` writes each of the VMM's threads' /proc stat
/// (`NAME-stat.txt`, `TID <stat>` lines) and schedstat
/// (`NAME-schedstat.txt`, `TID <run ns> <wait ns> <slices>`), and KVM's
/// word on which thread runs each vCPU of its VM (`NAME-vcpus.txt`, `TID
/// ID` lines; the VM's debugfs directory is named after the VMM's pid),
/// just before the VM is stopped.
pub const USER_VM_TRUTH: &str = r#"user_vm_truth() {
  for t in /proc/$1/task/*; do echo "${t##*/} $(cat $t/stat)"; done > $2-stat.txt
  for t in /proc/$1/task/*; do echo "${t##*/} $(cat $t/schedstat)"; done > $2-schedstat.txt
  for v in /sys/kernel/debug/kvm/$1-*/vcpu*; do echo "$(cat $v/pid) ${v##*/vcpu}"; done > $2-vcpus.txt
}
"#;

/// Guest time (ns) of each thread in a [`USER_VM_TRUTH`] stat dump:
/// guest_time, field 43, in clock ticks (USER_HZ 100).
pub fn stat_guest_ns(text: &str) -> std::collections::HashMap<u64, u64> {
    const TICK_NS: u64 = 10_000_000;
    text.lines()
        .filter_map(|l| {
            let (tid, stat) = l.split_once(' ')?;
            let after_comm = &stat[stat.rfind(')')? + 2..];
            let ticks: u64 = after_comm.split_whitespace().nth(43 - 3)?.parse().ok()?;
            Some((tid.parse().ok()?, ticks * TICK_NS))
        })
        .collect()
}

/// Where 1 % of a vCPU's CPU time is less than this, it bounds the check
/// instead: what the vCPU may run between the truth's reading and its end.
pub const AFTER_TRUTH_NS: u64 = 20_000_000;

/// Checks recording `name` of a VM a user started (with
/// [`USER_VM_TRUTH`]'s files): it is an instance of `platform` as
/// `variant`, holding `roles`; its one vCPU is named after QEMU itself
/// and found by what it did, with the index KVM gives it; nothing with
/// guest time is outside a `vcpu` role; KVM's kernel threads for the VM
/// are its `vmm`. The vCPU's CPU time equals its thread's schedstat run
/// time within 1 % (or [`AFTER_TRUTH_NS`]), its guest time (KVM's entries
/// and exits) is within it, and the VMM's other threads ran no guest by
/// their stat. The stat's own guest time is printed beside it: it is
/// tick-sampled, and one level down under TCG it strays from the exact
/// figure by a few per cent (see the note of issue 41).
pub fn check_user_vm(out: &GuestFiles, name: &str, platform: &str, variant: &str, roles: &[&str]) {
    use serde_json::Value;
    let r = out.report(name, &format!("{name}.out"));
    let rows = |table: &str| r[table].as_array().cloned().unwrap_or_default();
    let n = |v: &Value| v.as_u64().unwrap_or_else(|| panic!("{name}: not a number: {v}"));
    let prefix = format!("instance {platform}:");
    let id = rows("notes")
        .iter()
        .filter_map(Value::as_str)
        .find(|note| note.starts_with(&prefix) && note.contains(&format!("({variant})")))
        .and_then(|note| note.strip_prefix("instance ")?.split(' ').next())
        .unwrap_or_else(|| panic!("{name}: no {variant} instance in the notes: {}", r["notes"]))
        .to_string();
    let threads = rows("threads");
    let ours: Vec<&Value> = threads.iter().filter(|t| t["instance"] == id.as_str()).collect();
    let table: Vec<String> = ours
        .iter()
        .map(|t| {
            format!(
                "{:>6} {:<26} {:<8} vcpu {:>2} guest {} ns",
                t["tid"], t["comm"], t["role"], t["vcpu"], t["guest_ns"]
            )
        })
        .collect();
    eprintln!("{name}: {id}\n  {}", table.join("\n  "));
    let found: std::collections::BTreeSet<&str> = ours.iter().filter_map(|t| t["role"].as_str()).collect();
    for role in roles {
        assert!(found.contains(role), "{name}: no {role} in {found:?}");
    }
    let vcpus: Vec<&&Value> = ours.iter().filter(|t| t["role"] == "vcpu").collect();
    assert_eq!(vcpus.len(), 1, "{name}: {table:#?}");
    let vcpu = vcpus[0];
    assert_eq!(vcpu["comm"], "qemu-system-x86", "{name}: named for its role");
    let kvm_says: Vec<(u64, i64)> = out
        .text(&format!("{name}-vcpus.txt"))
        .lines()
        .filter_map(|l| {
            let (tid, index) = l.split_once(' ')?;
            Some((tid.parse().ok()?, index.trim().parse().ok()?))
        })
        .collect();
    assert_eq!(
        kvm_says,
        vec![(n(&vcpu["tid"]), vcpu["vcpu"].as_i64().unwrap())],
        "{name}: the vCPU's index"
    );
    for t in threads.iter().filter(|t| n(&t["guest_ns"]) > 0) {
        assert_eq!(t["role"], "vcpu", "{name}: {t}");
    }
    for t in threads.iter().filter(|t| {
        t["comm"]
            .as_str()
            .is_some_and(|c| c.starts_with("kvm-pit/") || c.starts_with("kvm-nx-lpage-re"))
    }) {
        assert_eq!(
            (t["instance"].as_str(), t["role"].as_str()),
            (Some(id.as_str()), Some("vmm")),
            "{name}: {t}"
        );
    }
    let tid = n(&vcpu["tid"]);
    let stat = stat_guest_ns(out.text(&format!("{name}-stat.txt")));
    let run_ns: u64 = out
        .text(&format!("{name}-schedstat.txt"))
        .lines()
        .find_map(|l| {
            let mut words = l.split_whitespace();
            (words.next()?.parse::<u64>().ok()? == tid).then(|| words.next()?.parse().ok())?
        })
        .unwrap_or_else(|| panic!("{name}: no schedstat for the vCPU {tid}"));
    let guest = n(&vcpu["guest_ns"]);
    let total: u64 = ["user_ns", "system_ns", "softirq_ns", "hardirq_ns", "guest_ns"]
        .iter()
        .map(|k| n(&vcpu[*k]))
        .sum();
    let pct = |a: u64, b: u64| (a as f64 - b as f64) / b.max(1) as f64 * 100.0;
    eprintln!(
        "{name}: vCPU {tid} CPU {total} ns, schedstat {run_ns} ns ({:+.2} %); guest {guest} ns ({}), its stat's \
         tick-sampled guest {} ns ({:+.2} %)",
        pct(total, run_ns),
        vcpu["guest_source"],
        stat[&tid],
        pct(guest, stat[&tid])
    );
    let diff = total.abs_diff(run_ns);
    assert!(
        diff * 100 <= run_ns || diff <= AFTER_TRUTH_NS,
        "{name}: vCPU CPU {total} ns against its schedstat's {run_ns} ns"
    );
    assert!(guest > 0 && guest <= total, "{name}: guest {guest} of {total} ns");
    assert_eq!(vcpu["guest_source"], "kvm_tracepoints", "{name}");
    for (other, ns) in stat.iter().filter(|(t, _)| **t != tid) {
        assert_eq!(*ns, 0, "{name}: thread {other} has guest time in its stat");
    }
}
