//! `vtrace bench`: a matrix of platforms x workloads x parameters x
//! repetitions, each cell recorded against a lab instance (started and
//! stopped by the bench, or one already up), every run kept with its
//! workload's output. `report.rs` draws the studies' figures from it.
//!
//! On disk (`-o DIR`): `bench.json` (the matrix), and per cell
//! `cells/<platform>/<workload>-<param>/rep<N>.vtrace` (a recording) or
//! `rep<N>.error` (why it failed; the recording of a workload that failed
//! is kept as `rep<N>.failed`). A cell with a recording is done: running
//! the same command again resumes with the cells not yet done (failed ones
//! are tried again). Ctrl-C discards only the cell being recorded.

pub mod report;

use std::{
    path::{Path, PathBuf},
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use serde::{Deserialize, Serialize};

use crate::{
    Error, Result, lab,
    record::{RecordOptions, Recorder},
};

/// The matrix, as given on the command line (`bench.json`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, clap::Args)]
pub struct Matrix {
    /// Lab platforms (see `vtrace lab status`).
    #[arg(long, value_delimiter = ',', default_value = "host,runc")]
    pub platforms: Vec<String>,
    #[arg(long = "workload", value_enum, value_delimiter = ',', default_value = "redis")]
    pub workloads: Vec<Workload>,
    /// redis-benchmark value sizes (bytes).
    #[arg(long, value_delimiter = ',', default_value = "32,64,1024,4096,16384")]
    pub sizes: Vec<u32>,
    /// iperf3 TCP window sizes (its -w: 64K, 1M, ...).
    #[arg(long, value_delimiter = ',', default_value = "64K,256K,1M")]
    pub windows: Vec<String>,
    /// CPU stressors (busy loops) beside the workload, one cell per count (e.g. 0,2).
    #[arg(long, value_delimiter = ',', default_value = "0")]
    pub stress: Vec<u32>,
    /// Runs per cell.
    #[arg(long, default_value_t = 3)]
    pub repeat: u32,
    /// redis-benchmark requests per test (GET, SET).
    #[arg(long, default_value_t = 100_000)]
    pub requests: u32,
    /// iperf3 seconds per run.
    #[arg(long, default_value_t = 5)]
    pub seconds: u32,
    /// ping echo requests per run (10 ms apart).
    #[arg(long, default_value_t = 200)]
    pub pings: u32,
    /// Packages the module-load workload requires (one cell per count).
    #[arg(long, value_delimiter = ',', default_value = "500")]
    #[serde(default = "default_modules")]
    pub modules: Vec<u32>,
    /// fio cells also run beside a noisy neighbour: direct 1 MiB writes to
    /// a large file on the same disk from a cgroup of their own.
    #[arg(long)]
    #[serde(default)]
    pub neighbour: bool,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    Redis,
    Iperf3,
    Ping,
    /// Direct random 4 KiB reads inside the instance (`vtrace lab exec`).
    Fio,
    /// Node.js requiring a tree of small packages from the lab volume.
    Modules,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::Redis => "redis",
            Workload::Iperf3 => "iperf3",
            Workload::Ping => "ping",
            Workload::Fio => "fio",
            Workload::Modules => "modules",
        }
    }
}

/// One configuration of the matrix; its repetitions are its runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Cell {
    pub platform: String,
    pub workload: Workload,
    /// The value size, the window, or "rtt".
    pub param: String,
    pub stress: u32,
    /// Beside a noisy neighbour (`--neighbour`, fio cells).
    pub neighbour: bool,
}

impl Cell {
    /// `redis-64`, `iperf3-64K+stress2`, `fio-randread-4k+neighbour`.
    pub fn name(&self) -> String {
        let stress = if self.stress > 0 {
            format!("+stress{}", self.stress)
        } else {
            String::new()
        };
        let neighbour = if self.neighbour { "+neighbour" } else { "" };
        format!("{}-{}{stress}{neighbour}", self.workload.name(), self.param)
    }

    pub fn dir(&self, root: &Path) -> PathBuf {
        root.join("cells").join(&self.platform).join(self.name())
    }

    /// The command that drives the instance at `addr`.
    fn command(&self, m: &Matrix, addr: &str) -> Vec<String> {
        let vtrace = || std::env::current_exe().map_or_else(|_| "vtrace".into(), |p| p.display().to_string());
        let words = match self.workload {
            Workload::Redis => format!(
                "redis-benchmark -h {addr} -t get,set -d {} -n {} -q",
                self.param, m.requests
            ),
            Workload::Iperf3 => format!("iperf3 -c {addr} -t {} -w {}", m.seconds, self.param),
            Workload::Ping => format!("ping -c {} -i 0.01 {addr}", m.pings),
            Workload::Fio => {
                // Inside the instance: a file in its own root (the host
                // platform's processes share the host's: the lab's directory).
                let file = if self.platform == crate::platforms::HOST {
                    format!("{}/fio-victim.dat", lab::DATA_DIR)
                } else {
                    "/fio-victim.dat".into()
                };
                format!(
                    "{} lab exec {} -- fio --name=victim --filename={file} --rw=randread --bs=4k \
                     --size=64M --direct=1 --time_based --runtime={} --output-format=json",
                    vtrace(),
                    self.platform,
                    m.seconds
                )
            }
            Workload::Modules => format!(
                "{} lab exec {} -- node {}/modules-{}/index.js",
                vtrace(),
                self.platform,
                lab::volume_in(&self.platform),
                self.param
            ),
        };
        words.split_whitespace().map(String::from).collect()
    }
}

impl Matrix {
    pub fn cells(&self) -> Vec<Cell> {
        let mut cells = Vec::new();
        for platform in &self.platforms {
            for &workload in &self.workloads {
                let params: Vec<String> = match workload {
                    Workload::Redis => self.sizes.iter().map(u32::to_string).collect(),
                    Workload::Iperf3 => self.windows.clone(),
                    Workload::Ping => vec!["rtt".into()],
                    Workload::Fio => vec!["randread-4k".into()],
                    Workload::Modules => self.modules.iter().map(u32::to_string).collect(),
                };
                let neighbours: &[bool] = if workload == Workload::Fio && self.neighbour {
                    &[false, true]
                } else {
                    &[false]
                };
                for param in params {
                    for &stress in &self.stress {
                        for &neighbour in neighbours {
                            cells.push(Cell {
                                platform: platform.clone(),
                                workload,
                                param: param.clone(),
                                stress,
                                neighbour,
                            });
                        }
                    }
                }
            }
        }
        cells
    }

    pub fn load(root: &Path) -> Result<Matrix> {
        let path = root.join(MATRIX_FILE);
        let bytes = std::fs::read(&path).map_err(|e| Error::NotARecording {
            path: root.to_path_buf(),
            reason: format!("not a bench directory ({MATRIX_FILE}: {e})"),
        })?;
        serde_json::from_slice(&bytes).map_err(|e| Error::NotARecording {
            path: path.clone(),
            reason: format!("unreadable bench matrix: {e}"),
        })
    }
}

pub const MATRIX_FILE: &str = "bench.json";

fn default_modules() -> Vec<u32> {
    vec![500]
}

/// The layers a bench records by default: a plain record's, and the run
/// queue (the RTT-under-stress figures need it).
pub fn default_layers() -> Vec<String> {
    let mut layers = crate::layers::default_names();
    layers.push("runq".into());
    layers
}

/// A run of a cell: its recording, or the error that stopped it.
pub fn run_path(cell_dir: &Path, rep: u32) -> PathBuf {
    cell_dir.join(format!("rep{rep}.vtrace"))
}

pub fn error_path(cell_dir: &Path, rep: u32) -> PathBuf {
    cell_dir.join(format!("rep{rep}.error"))
}

/// Set by SIGINT/SIGTERM while a bench runs.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// What a bench did.
#[derive(Debug, Default)]
pub struct Outcome {
    pub done_before: usize,
    pub recorded: usize,
    pub failed: Vec<String>,
    pub interrupted: bool,
}

/// Runs every run of `m` not done yet under `root`.
pub fn run(m: &Matrix, root: &Path, opts: &RecordOptions) -> Result<Outcome> {
    crate::privileges::check()?;
    std::fs::create_dir_all(root).map_err(crate::error::io(format!("create {}", root.display())))?;
    if let Ok(earlier) = Matrix::load(root)
        && earlier != *m
    {
        return Err(Error::BadArgument(format!(
            "{} holds a bench of another matrix ({}): give another -o, or the same options to resume",
            root.display(),
            MATRIX_FILE
        )));
    }
    let json = serde_json::to_vec_pretty(m).expect("matrix serializes");
    std::fs::write(root.join(MATRIX_FILE), json).map_err(crate::error::io("write bench.json"))?;
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
    let cells = m.cells();
    let runs: Vec<(usize, u32)> = (0..cells.len())
        .flat_map(|c| (1..=m.repeat).map(move |r| (c, r)))
        .collect();
    let mut out = Outcome::default();
    let todo: Vec<(usize, u32)> = runs
        .iter()
        .copied()
        .filter(|&(c, r)| !run_path(&cells[c].dir(root), r).join(crate::recording::META).is_file())
        .collect();
    out.done_before = runs.len() - todo.len();
    let bar = progress(todo.len() as u64);
    bar.suspend(|| {
        eprintln!(
            "vtrace bench: {} runs ({} cells x {} repetitions), {} done before, {} to run",
            runs.len(),
            cells.len(),
            m.repeat,
            out.done_before,
            todo.len()
        )
    });
    for platform in &m.platforms {
        let mine: Vec<(usize, u32)> = todo
            .iter()
            .copied()
            .filter(|&(c, _)| &cells[c].platform == platform)
            .collect();
        if mine.is_empty() || INTERRUPTED.load(Ordering::SeqCst) {
            continue;
        }
        // An instance already up is used and left up; one started here is stopped here.
        let was_up = lab::Ledger::load(platform).is_some_and(|l| l.ready);
        bar.set_message(format!("{platform}: starting the lab instance"));
        let instance = lab::up(platform);
        for (c, rep) in mine {
            if INTERRUPTED.load(Ordering::SeqCst) {
                break;
            }
            let cell = &cells[c];
            let dir = cell.dir(root);
            bar.set_message(format!("{platform} {} rep {rep}", cell.name()));
            let result = match &instance {
                Ok(ledger) => record_run(m, cell, ledger, &dir, rep, opts),
                Err(e) => Err(format!("the {platform} lab instance did not start: {e}")),
            };
            let _ = std::fs::remove_file(error_path(&dir, rep));
            match result {
                _ if INTERRUPTED.load(Ordering::SeqCst) => {
                    // The run was cut short: not a result, redone on resume.
                    let _ = std::fs::remove_dir_all(run_path(&dir, rep));
                }
                Ok(()) => out.recorded += 1,
                Err(why) => {
                    let _ = std::fs::create_dir_all(&dir);
                    let _ = std::fs::write(error_path(&dir, rep), format!("{why}\n"));
                    bar.suspend(|| eprintln!("vtrace bench: {platform} {} rep {rep} failed: {why}", cell.name()));
                    out.failed.push(format!("{platform} {} rep {rep}: {why}", cell.name()));
                }
            }
            bar.inc(1);
        }
        if instance.is_ok() && !was_up {
            bar.set_message(format!("{platform}: stopping the lab instance"));
            if let Err(e) = lab::down(platform) {
                bar.suspend(|| eprintln!("vtrace bench: lab down {platform}: {e}"));
            }
        }
    }
    bar.finish_and_clear();
    out.interrupted = INTERRUPTED.load(Ordering::SeqCst);
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_DFL);
        libc::signal(libc::SIGTERM, libc::SIG_DFL);
    }
    Ok(out)
}

fn progress(len: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} runs, {elapsed} gone, ETA {eta} | {msg}")
            .expect("valid template"),
    );
    bar.enable_steady_tick(Duration::from_millis(500));
    bar
}

/// One run: stressors up, the workload recorded, stressors down.
fn record_run(
    m: &Matrix,
    cell: &Cell,
    ledger: &lab::Ledger,
    dir: &Path,
    rep: u32,
    opts: &RecordOptions,
) -> std::result::Result<(), String> {
    if cell.workload == Workload::Iperf3 && cell.platform == "lwip" {
        return Err("the lwip instance serves redis only (no iperf3 server)".into());
    }
    if [Workload::Fio, Workload::Modules].contains(&cell.workload)
        && ["lwip", "linuxvm"].contains(&cell.platform.as_str())
    {
        return Err(format!(
            "{} runs inside the instance, and {} has no shell to exec in",
            cell.workload.name(),
            cell.platform
        ));
    }
    if cell.workload == Workload::Modules {
        let n = cell.param.parse().map_err(|_| format!("module count {}", cell.param))?;
        crate::workload::modules::ensure_tree(Path::new(lab::VOLUME_DIR), n).map_err(|e| e.to_string())?;
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let mut o = opts.clone();
    o.output = run_path(dir, rep);
    o.command = cell.command(m, &ledger.address);
    o.duration = None;
    o.pass_output = false;
    if cell.platform == crate::platforms::HOST {
        // The host instance is its processes: select them.
        o.pids = ledger
            .resources
            .iter()
            .filter_map(|r| match r {
                lab::Resource::Process { pid, .. } => Some(*pid),
                _ => None,
            })
            .collect();
    }
    o.platform = cell.platform.clone();
    // The layer each disk workload is about.
    let layer = match cell.workload {
        Workload::Fio => Some("block"),
        Workload::Modules => Some("fs"),
        _ => None,
    };
    if let Some(layer) = layer.filter(|l| !o.layers.iter().any(|x| x == l)) {
        o.layers.push(layer.into());
    }
    let neighbour = if cell.neighbour {
        Some(Neighbour::start(m.seconds, dir).map_err(|e| format!("start the noisy neighbour: {e}"))?)
    } else {
        None
    };
    let stressors = Stressors::start(cell.stress).map_err(|e| format!("start the CPU stressors: {e}"))?;
    let outcome = Recorder::start(o).and_then(|r| {
        while !r.is_finished() {
            if INTERRUPTED.load(Ordering::SeqCst) {
                return r.stop();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        r.wait()
    });
    drop(stressors);
    drop(neighbour);
    let outcome = outcome.map_err(|e| e.to_string())?;
    match outcome.exit_code {
        0 => Ok(()),
        code => {
            let out = std::fs::read_to_string(outcome.path.join("workload.out")).unwrap_or_default();
            let last = out.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
            // Kept for a look, under a name that is not a result.
            let kept = dir.join(format!("rep{rep}.failed"));
            let _ = std::fs::remove_dir_all(&kept);
            let _ = std::fs::rename(&outcome.path, &kept);
            Err(format!(
                "`{}` exited with {code}: {last}",
                cell.command(m, &ledger.address).join(" ")
            ))
        }
    }
}

/// Busy loops beside the workload (`--stress N`), stopped when dropped:
/// forked processes named `platforms::STRESSOR_COMM`, so their CPU shows
/// under the role `stress` and stays out of the cost per operation.
struct Stressors(Vec<libc::pid_t>);

impl Stressors {
    fn start(n: u32) -> std::io::Result<Stressors> {
        let name = std::ffi::CString::new(crate::platforms::STRESSOR_COMM).expect("no NUL");
        let mut pids = Stressors(Vec::new());
        for _ in 0..n {
            match unsafe { libc::fork() } {
                -1 => return Err(std::io::Error::last_os_error()),
                0 => {
                    // The child: only async-signal-safe calls after a fork.
                    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
                    loop {
                        std::hint::spin_loop();
                    }
                }
                pid => pids.0.push(pid),
            }
        }
        Ok(pids)
    }
}

impl Drop for Stressors {
    fn drop(&mut self) {
        for &pid in &self.0 {
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
        }
    }
}

/// The file in a `+neighbour` cell's directory that holds its neighbours'
/// cgroup ids, one line per run (a new cgroup each time).
pub const NEIGHBOUR_CGROUP: &str = "neighbour.cgroup";

/// A noisy neighbour (`--neighbour`): fio writing a large file on the lab's
/// disk with direct 1 MiB writes, from a cgroup of its own (so its requests
/// are told apart from the instance's), stopped and removed when dropped.
struct Neighbour {
    child: std::process::Child,
    cgroup: PathBuf,
    file: PathBuf,
}

impl Neighbour {
    const NAME: &str = "vtrace-neighbour";

    /// Starts it; its cgroup's id (what block rows name it by) is added to
    /// `cell_dir/NEIGHBOUR_CGROUP` for the report.
    fn start(seconds: u32, cell_dir: &Path) -> std::io::Result<Neighbour> {
        // The cgroup v2 hierarchy (block requests carry its ids): on its
        // own, or beside v1 controllers as `unified`.
        let unified = Path::new("/sys/fs/cgroup/unified");
        let root = if unified.join("cgroup.procs").is_file() {
            unified
        } else {
            Path::new("/sys/fs/cgroup")
        };
        let cgroup = root.join(Self::NAME);
        std::fs::create_dir_all(&cgroup)?;
        // A cgroup v2 id is its directory's inode number.
        let id = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&cgroup)?);
        let mut ids = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(cell_dir.join(NEIGHBOUR_CGROUP))?;
        std::io::Write::write_all(&mut ids, format!("{id}\n").as_bytes())?;
        std::fs::create_dir_all(lab::DATA_DIR)?;
        let file = Path::new(lab::DATA_DIR).join("fio-neighbour.dat");
        let child = std::process::Command::new("fio")
            .args([
                "--name=neighbour",
                "--rw=write",
                "--bs=1M",
                "--size=512M",
                "--direct=1",
                "--time_based",
            ])
            .arg(format!("--runtime={}", seconds * 4 + 30))
            .arg(format!("--filename={}", file.display()))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()?;
        // Into its cgroup at once: it lays its file out before it writes.
        std::fs::write(cgroup.join("cgroup.procs"), child.id().to_string())?;
        // fio lays the file out first: let the writes begin.
        std::thread::sleep(Duration::from_secs(2));
        Ok(Neighbour { child, cgroup, file })
    }
}

impl Drop for Neighbour {
    fn drop(&mut self) {
        // fio runs its job in a process of its own: every process of the
        // cgroup goes (cgroup.kill where the kernel has it).
        if std::fs::write(self.cgroup.join("cgroup.kill"), "1").is_err() {
            for pid in std::fs::read_to_string(self.cgroup.join("cgroup.procs"))
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.trim().parse::<i32>().ok())
            {
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::fs::read_to_string(self.cgroup.join("cgroup.procs")).is_ok_and(|p| !p.trim().is_empty())
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = std::fs::remove_file(&self.file);
        let _ = std::fs::remove_dir(&self.cgroup);
    }
}
