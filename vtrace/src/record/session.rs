//! Session plumbing: the workload child, signals, external stop requests
//! ([`Control`]: how any recording is told to stop, and tells that its
//! probes are attached), a live session's reads, and why a recording stopped.

use std::{
    io::Write,
    path::Path,
    process::Stdio,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncReadExt},
    process::Child,
    signal::unix::{Signal, SignalKind, signal},
    task::JoinHandle,
};

use crate::{
    Result,
    recording::{Overhead, TableSet, Workload},
};

pub(super) fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(crate::error::io("start the async runtime"))
}

/// How a recording is told to stop, besides its command and duration, and
/// whom it tells that its probes are attached.
pub(super) struct Control {
    pub(super) signals: Option<Signals>,
    pub(super) stop: Option<tokio::sync::oneshot::Receiver<()>>,
    pub(super) attached: Option<std::sync::mpsc::Sender<()>>,
    /// `vtrace serve`: the exporter's reads of a live session.
    pub(super) scrapes: Option<tokio::sync::mpsc::Receiver<Scrape>>,
    /// Embedded: the name of the recorder's threads (see [`Emit::own_threads`]).
    pub(super) own_threads: Option<&'static str>,
}

impl Control {
    pub(super) fn command_line() -> Result<Control> {
        Ok(Control {
            signals: Some(Signals::install()?),
            stop: None,
            attached: None,
            scrapes: None,
            own_threads: None,
        })
    }
}

/// `vtrace serve` asks a live session ([`super::RecordOptions::live`]) for its
/// readings: every layer read now, its tables emitted as for a recording.
pub struct Scrape {
    pub reply: tokio::sync::oneshot::Sender<Result<Scraped>>,
}

/// What one read of a live session gave.
pub struct Scraped {
    /// Every layer's tables, cumulative since the probes attached; threads
    /// that exited since the last read are in them once more, then forgotten.
    pub tables: TableSet,
    /// The platform instances running now, each with its threads and devices.
    pub instances: Vec<crate::platforms::Instance>,
    /// vtrace's own CPU since the probes attached, and the BPF programs' cost.
    pub overhead: Overhead,
    pub notes: Vec<String>,
}

/// Why recording stopped.
pub enum Stop {
    WorkloadExited(std::process::ExitStatus),
    WorkloadFailedToStart(String),
    Duration,
    Signal(&'static str),
    /// [`super::Recorder::stop`] was called.
    Requested,
}

impl Stop {
    pub fn describe(&self) -> String {
        match self {
            Stop::WorkloadExited(_) => "workload exited".to_string(),
            Stop::WorkloadFailedToStart(m) => format!("workload failed to start: {m}"),
            Stop::Duration => "duration elapsed".to_string(),
            Stop::Signal(s) => s.to_string(),
            Stop::Requested => "stop requested".to_string(),
        }
    }
}

/// SIGINT, SIGTERM and SIGHUP (a closed terminal or SSH session), when this
/// process owns them (the command line); an embedding program keeps its own
/// handlers. Each stops the recording, which is then written.
pub struct Signals {
    int: Signal,
    term: Signal,
    hup: Signal,
}

impl Signals {
    pub fn install() -> Result<Signals> {
        Ok(Signals {
            int: signal(SignalKind::interrupt()).map_err(crate::error::io("install SIGINT handler"))?,
            term: signal(SignalKind::terminate()).map_err(crate::error::io("install SIGTERM handler"))?,
            hup: signal(SignalKind::hangup()).map_err(crate::error::io("install SIGHUP handler"))?,
        })
    }

    /// The next signal's name.
    pub async fn next(signals: &mut Option<Signals>) -> &'static str {
        match signals {
            Some(s) => tokio::select! {
                _ = s.int.recv() => "SIGINT",
                _ = s.term.recv() => "SIGTERM",
                _ = s.hup.recv() => "SIGHUP",
            },
            None => std::future::pending().await,
        }
    }
}

pub use crate::recording::OUTPUT_FILE;

/// The `-- CMD` child, if any.
#[derive(Default)]
pub struct WorkloadChild {
    pub child: Option<Child>,
    pub workload: Option<Workload>,
    /// Copies of its stdout and stderr into [`OUTPUT_FILE`], passed on as they come.
    copies: Vec<JoinHandle<()>>,
}

impl WorkloadChild {
    /// Starts `command` with its stdout and stderr passed through and also
    /// kept in `dir`/[`OUTPUT_FILE`] (its count of operations is read from
    /// there); a command that cannot start stops the recording at once.
    pub fn spawn(command: &[String], dir: &Path, pass_on_output: bool) -> (WorkloadChild, Option<Stop>) {
        let Some((program, args)) = command.split_first() else {
            return (WorkloadChild::default(), None);
        };
        let kept = match std::fs::File::create(dir.join(OUTPUT_FILE)) {
            Ok(f) => Arc::new(Mutex::new(f)),
            Err(e) => {
                return (
                    WorkloadChild::default(),
                    Some(Stop::WorkloadFailedToStart(format!("cannot keep its output: {e}"))),
                );
            }
        };
        let mut child_command = tokio::process::Command::new(program);
        child_command.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
        // If vtrace dies (SIGKILL, the OOM killer), its command gets SIGTERM
        // rather than running on unrecorded. (The signal follows the thread
        // that started it: the runtime's, which lives as long as the recording.)
        unsafe {
            child_command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let spawned = child_command.spawn();
        match spawned {
            Ok(mut c) => (
                WorkloadChild {
                    workload: Some(Workload {
                        command: command.to_vec(),
                        pid: c.id().unwrap_or(0),
                        ..Default::default()
                    }),
                    copies: vec![
                        tokio::spawn(pass_on(
                            c.stdout.take(),
                            pass_on_output.then_some(std::io::stdout),
                            kept.clone(),
                        )),
                        tokio::spawn(pass_on(
                            c.stderr.take(),
                            pass_on_output.then_some(std::io::stderr),
                            kept,
                        )),
                    ],
                    child: Some(c),
                },
                None,
            ),
            Err(e) => (
                WorkloadChild::default(),
                Some(Stop::WorkloadFailedToStart(format!("cannot start {program}: {e}"))),
            ),
        }
    }

    /// Waits for the child to exit; never returns without one.
    pub async fn wait(&mut self) -> Stop {
        match self.child.as_mut() {
            Some(c) => match c.wait().await {
                Ok(s) => Stop::WorkloadExited(s),
                Err(e) => Stop::WorkloadFailedToStart(e.to_string()),
            },
            None => std::future::pending().await,
        }
    }

    /// The output kept once the child has exited: what it wrote until its
    /// pipes closed, or for at most 2 s more (a daemon it started may hold them).
    pub async fn output(&mut self, dir: &Path) -> String {
        for copy in self.copies.drain(..) {
            let _ = tokio::time::timeout(Duration::from_secs(2), copy).await;
        }
        std::fs::read(dir.join(OUTPUT_FILE))
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// After the stop: interrupted while a command runs, the signal is passed
    /// on (SIGHUP as SIGTERM) and the command gets 5 s to finish, so its exit
    /// status and its last CPU time are recorded; a second signal meanwhile
    /// kills it at once. Returns vtrace's exit code.
    pub async fn finish(&mut self, stop: &Stop, signals: &mut Option<Signals>) -> i32 {
        let mut exit_status = match stop {
            Stop::WorkloadExited(s) => Some(*s),
            _ => None,
        };
        if let (Some(c), Stop::Signal(_) | Stop::Requested) = (self.child.as_mut(), stop) {
            if let Some(pid) = c.id() {
                let sig = if matches!(stop, Stop::Signal("SIGINT")) {
                    libc::SIGINT
                } else {
                    libc::SIGTERM
                };
                unsafe { libc::kill(pid as i32, sig) };
            }
            let waited = tokio::select! {
                r = tokio::time::timeout(Duration::from_secs(5), c.wait()) => r.ok().and_then(|r| r.ok()),
                _ = Signals::next(signals) => None,
            };
            exit_status = match waited {
                Some(s) => Some(s),
                None => {
                    let _ = c.kill().await;
                    c.wait().await.ok()
                }
            };
        }
        if let (Some(w), Some(s)) = (self.workload.as_mut(), exit_status) {
            use std::os::unix::process::ExitStatusExt;
            w.exit_code = s.code();
            w.signal = s.signal();
        }
        match (stop, exit_status) {
            (Stop::WorkloadFailedToStart(msg), _) => {
                eprintln!("vtrace: {msg}");
                127
            }
            (_, Some(s)) => exit_code_of(s),
            (_, None) => 0,
        }
    }
}

/// Copies `from` to `kept` and, when given, to this process's `to` (stdout or stderr), as it comes.
async fn pass_on<R: AsyncRead + Unpin, W: Write>(
    from: Option<R>,
    to: Option<fn() -> W>,
    kept: Arc<Mutex<std::fs::File>>,
) {
    let Some(mut from) = from else { return };
    let mut buf = vec![0u8; 16 * 1024];
    while let Ok(n) = from.read(&mut buf).await {
        if n == 0 {
            break;
        }
        if let Some(to) = to {
            let mut out = to();
            let _ = out.write_all(&buf[..n]);
            let _ = out.flush();
        }
        if let Ok(mut f) = kept.lock() {
            let _ = f.write_all(&buf[..n]);
        }
    }
}

fn exit_code_of(s: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))
}
