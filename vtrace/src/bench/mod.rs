//! `vtrace bench`: a matrix of platforms x workloads x parameters x
//! repetitions, each cell recorded against a lab instance (started and
//! stopped by the bench, or one already up), every run kept with its
//! workload's output. `report/` (one file per workload) draws the studies' figures from it.
//!
//! On disk (`-o DIR`): `bench.json` (the matrix), `runs.parquet` (every
//! run with its cell's platform, workload and parameters, for SQL engines
//! to join to the recordings' tables: runs.rs), and per cell
//! `cells/<platform>/<workload>-<param>/rep<N>.vtrace` (a recording) or
//! `rep<N>.error` (why it failed; the recording of a workload that failed
//! is kept as `rep<N>.failed`). A cell with a recording is done: running
//! the same command again resumes with the cells not yet done (failed ones
//! are tried again). Ctrl-C discards only the cell being recorded.

mod load;
mod matrix;
pub mod pilot;
pub mod report;
pub mod runs;

pub use load::NEIGHBOUR_CGROUP;
use load::{Neighbour, Stressors};
pub use matrix::{Cell, MATRIX_FILE, Matrix, Study, Workload, error_path, redis_param, run_path};

use std::{
    path::Path,
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use crate::{
    Error, Result, lab,
    record::{RecordOptions, Recorder},
};

/// The layers a bench records by default: a plain record's, and the run
/// queue (the RTT-under-stress figures need it).
pub fn default_layers() -> Vec<String> {
    let mut layers = crate::layers::default_names();
    layers.push("runq".into());
    layers
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

/// `vtrace bench`'s options: the matrix, and how each run is recorded.
#[derive(Clone, Debug, clap::Args)]
pub struct BenchOptions {
    #[command(flatten)]
    pub matrix: Matrix,
    /// Layers recorded in each run (as `record --layers`; the run queue too by default: how long the
    /// workload's threads waited for a CPU, under `--stress` above all).
    #[arg(long, value_delimiter = ',', default_values_t = default_layers())]
    pub layers: Vec<String>,
    /// Each layer's own switches, as `record` takes them.
    #[command(flatten)]
    pub switches: crate::layers::Switches,
    #[arg(short, long, default_value = "bench")]
    pub output: std::path::PathBuf,
}

/// Runs every run of the matrix not done yet under `--output`.
pub fn run(bench: &BenchOptions) -> Result<Outcome> {
    let (m, root) = (&bench.matrix, bench.output.as_path());
    let opts = &RecordOptions {
        switches: bench.switches.clone(),
        ..RecordOptions::default()
    }
    .layers(bench.layers.clone());
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
        // Its redis cells' requests per test (a pilot's, under --request-seconds).
        let requests = match &instance {
            Ok(ledger) if mine.iter().any(|&(c, _)| cells[c].workload == Workload::Redis) => {
                bar.set_message(format!("{platform}: sizing its requests"));
                pilot::requests(m, root, platform, &ledger.address)
            }
            _ => Ok(m.requests),
        };
        for (c, rep) in mine {
            if INTERRUPTED.load(Ordering::SeqCst) {
                break;
            }
            let cell = &cells[c];
            let dir = cell.dir(root);
            bar.set_message(format!("{platform} {} rep {rep}", cell.name()));
            let result = match (&instance, &requests) {
                (Err(e), _) => Err(format!("the {platform} lab instance did not start: {e}")),
                (Ok(_), Err(e)) if cell.workload == Workload::Redis => Err(e.clone()),
                (Ok(ledger), requests) => {
                    let requests = *requests.as_ref().unwrap_or(&m.requests);
                    record_run(m, cell, ledger, &dir, rep, opts, requests)
                }
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
    runs::write(m, root)?;
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

/// How long a run may take before the bench stops it as hung: a redis
/// cell sized by a pilot gets ten times its expected length and two
/// minutes (an instance that stopped answering); others run to their end.
fn run_limit(m: &Matrix, cell: &Cell) -> Option<Duration> {
    let seconds = m.request_seconds.filter(|_| cell.workload == Workload::Redis)?;
    Some(Duration::from_secs(u64::from(seconds) * 10 + 120))
}

/// One run: stressors up, the workload recorded, stressors down.
fn record_run(
    m: &Matrix,
    cell: &Cell,
    ledger: &lab::Ledger,
    dir: &Path,
    rep: u32,
    opts: &RecordOptions,
    requests: u32,
) -> std::result::Result<(), String> {
    let port = match cell.workload {
        Workload::Redis => Some(6379),
        Workload::Iperf3 => Some(5201),
        Workload::Http => Some(lab::HTTP_PORT),
        _ => None,
    };
    if let Some(port) = port.filter(|&port| !lab::serves_port(&cell.platform, port)) {
        return Err(format!(
            "the {} instance serves {} only (nothing on port {port} for {})",
            cell.platform,
            lab::serves(&cell.platform, &ledger.address),
            cell.workload.name()
        ));
    }
    // fio runs inside the instance: a container's root filesystem, or a
    // lab VM's tools disk against its data disk (lab/disks.rs); the modules'
    // tree is a volume only containers mount.
    let exec = lab::exec_command(&cell.platform, &["true".into()]);
    let runs_inside = match cell.workload {
        Workload::Fio => matches!(exec, Ok(lab::Exec::Here(_))) || lab::data_disk_in(&cell.platform).is_some(),
        Workload::Modules => matches!(exec, Ok(lab::Exec::Here(_))),
        _ => true,
    };
    if !runs_inside {
        let why = match exec {
            Err(e) => e.to_string(),
            Ok(_) => "its VM has no data disk for it".into(),
        };
        return Err(format!(
            "{} runs inside the instance, and {} cannot run it: {why}",
            cell.workload.name(),
            cell.platform
        ));
    }
    if cell.workload == Workload::Redis
        && let (size, Some("get")) = redis_param(&cell.param)
    {
        // The key a GET reads (redis-benchmark's one key without -r),
        // holding a value of the cell's size: unrecorded.
        let set = pilot::redis_benchmark(&ledger.address, &format!("-t set -d {size} -n 1 -c 1 -q"));
        pilot::run_bounded(&set, Duration::from_secs(60)).map_err(|e| format!("setting the key to read: {e}"))?;
    }
    if cell.workload == Workload::Modules {
        let (n, _) = matrix::modules_param(&cell.param);
        crate::workload::modules::ensure_tree(Path::new(lab::VOLUME_DIR), n).map_err(|e| e.to_string())?;
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let mut o = opts.clone();
    o.output = run_path(dir, rep);
    let command = cell.command(m, &ledger.address, requests);
    o.command = command.clone();
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
    o.platform = lab::recorded_as(&cell.platform).to_string();
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
    let limit = run_limit(m, cell);
    let started = std::time::Instant::now();
    let mut hung = false;
    let outcome = Recorder::start_in_vtrace(o).and_then(|r| {
        while !r.is_finished() {
            hung = limit.is_some_and(|l| started.elapsed() > l);
            if INTERRUPTED.load(Ordering::SeqCst) || hung {
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
        0 if !hung => Ok(()),
        code => {
            let out = std::fs::read_to_string(outcome.path.join("workload.out")).unwrap_or_default();
            let last = out.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
            // Kept for a look, under a name that is not a result.
            let kept = dir.join(format!("rep{rep}.failed"));
            let _ = std::fs::remove_dir_all(&kept);
            let _ = std::fs::rename(&outcome.path, &kept);
            Err(match hung {
                true => format!(
                    "`{}` had not ended after {} s, and was stopped: the instance stopped answering",
                    command.join(" "),
                    limit.unwrap_or_default().as_secs()
                ),
                false => format!("`{}` exited with {code}: {last}", command.join(" ")),
            })
        }
    }
}
