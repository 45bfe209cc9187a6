//! The journal of a recording in progress, written into its staging
//! directory as it goes: the metadata known once probes are attached, then
//! every interval's per-thread CPU time and each thread's identity, appended
//! line by line. A vtrace killed mid-run (SIGKILL, the OOM killer, a CI
//! timeout) leaves everything up to its last completed interval readable:
//! `vtrace report` reads such a directory as an incomplete recording and
//! `vtrace recover` turns it into a normal one. A finished recording holds
//! no journal (its tables say more).
//!
//! Lines are appended without fsync: what a killed process wrote is in the
//! page cache and survives it; a crash of the machine is not covered.

use std::{
    collections::BTreeMap,
    fs::{self, File, OpenOptions},
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};
use vtrace_common::state;

use super::{Incomplete, META, Metadata, Recording, TableSet};
use crate::{
    Error, Result,
    layers::cpu::{IntervalRow, ThreadRow},
};

pub const DIR: &str = "journal";
const META_FILE: &str = "meta.json";
const INTERVALS: &str = "intervals.jsonl";
const THREADS: &str = "threads.jsonl";

/// A thread as the journal names it (the last line for a tid wins).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ThreadIdentity {
    pub tid: u32,
    pub pid: u32,
    pub comm: String,
    pub kthread: bool,
}

/// The line that closes an interval.
#[derive(Serialize, Deserialize)]
struct IntervalEnd {
    end_ns: u64,
    owed: Vec<(u32, [u64; state::REPORTED])>,
}

/// One line of the intervals journal.
#[derive(Deserialize)]
#[serde(untagged)]
enum IntervalLine {
    End(IntervalEnd),
    Row(IntervalRow),
}

/// The journal being written.
pub struct Journal {
    intervals: File,
    threads: File,
    named: BTreeMap<u32, String>,
    /// Why journaling stopped (a full disk): the recording goes on without it.
    pub failed: Option<String>,
}

fn io(what: &str) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |e| Error::Io {
        context: format!("journal: {what}"),
        source: e,
    }
}

impl Journal {
    /// Creates `staging`/journal.
    pub fn create(staging: &Path) -> Result<Journal> {
        let dir = staging.join(DIR);
        fs::create_dir_all(&dir).map_err(io("create its directory"))?;
        let open = |name: &str| {
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join(name))
                .map_err(io(name))
        };
        Ok(Journal {
            intervals: open(INTERVALS)?,
            threads: open(THREADS)?,
            named: BTreeMap::new(),
            failed: None,
        })
    }

    /// Appends one interval's rows and the identity of threads not named yet
    /// (or renamed), identities first so that every row's thread is known;
    /// then the interval's end with what the threads' snapshots still owe
    /// (a snapshot charges time a later one can take back: rows sum to the
    /// last snapshot only once it is settled, layers::cpu::rows::settle).
    /// Rows after the last end line are of an interval the kill cut short.
    pub fn append(
        &mut self,
        threads: impl IntoIterator<Item = ThreadIdentity>,
        rows: &[IntervalRow],
        end_ns: u64,
        owed: &[(u32, [u64; state::REPORTED])],
    ) {
        if self.failed.is_some() {
            return;
        }
        if let Err(e) = self.try_append(threads, rows, end_ns, owed) {
            self.failed = Some(e.to_string());
        }
    }

    fn try_append(
        &mut self,
        threads: impl IntoIterator<Item = ThreadIdentity>,
        rows: &[IntervalRow],
        end_ns: u64,
        owed: &[(u32, [u64; state::REPORTED])],
    ) -> Result<()> {
        let mut out = Vec::new();
        for t in threads {
            if self.named.get(&t.tid) != Some(&t.comm) {
                self.named.insert(t.tid, t.comm.clone());
                serde_json::to_writer(&mut out, &t).expect("identity serializes");
                out.push(b'\n');
            }
        }
        self.threads.write_all(&out).map_err(io(THREADS))?;
        let mut out = Vec::new();
        for r in rows {
            serde_json::to_writer(&mut out, r).expect("row serializes");
            out.push(b'\n');
        }
        serde_json::to_writer(
            &mut out,
            &IntervalEnd {
                end_ns,
                owed: owed.to_vec(),
            },
        )
        .expect("end serializes");
        out.push(b'\n');
        // One write per interval: a kill leaves at most its last line torn.
        self.intervals.write_all(&out).map_err(io(INTERVALS))
    }
}

/// Writes the metadata known at the start (probes, layers, selectors, the
/// workload's command and pid) where recovery finds it.
pub fn start(staging: &Path, meta: &Metadata) -> Result<()> {
    let bytes = serde_json::to_vec_pretty(meta).expect("metadata serializes");
    fs::create_dir_all(staging.join(DIR)).map_err(io("create its directory"))?;
    let tmp = staging.join(DIR).join("meta.json.tmp");
    fs::write(&tmp, bytes).map_err(io("write meta.json"))?;
    fs::rename(&tmp, staging.join(DIR).join(META_FILE)).map_err(io("write meta.json"))
}

/// A directory vtrace was writing when it stopped: a journal, no meta.json.
pub fn is_unfinished(path: &Path) -> bool {
    path.join(DIR).join(META_FILE).is_file() && !path.join(META).is_file()
}

/// Unfinished recordings of `target`: the staging directories beside it
/// (`.NAME.tmp.PID`) holding a journal.
pub fn unfinished_of(target: &Path) -> Vec<PathBuf> {
    let (Some(parent), Some(name)) = (target.parent(), target.file_name()) else {
        return Vec::new();
    };
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    let prefix = format!(".{}.tmp.", name.to_string_lossy());
    let mut found: Vec<PathBuf> = fs::read_dir(parent)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .filter(|p| is_unfinished(p))
        .collect();
    found.sort();
    found
}

/// Lines of a JSONL file that parse; a torn last line is dropped.
fn lines<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Vec<T>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io("read")(e)),
    };
    Ok(BufReader::new(file)
        .lines()
        .map_while(|l| l.ok())
        .filter_map(|l| serde_json::from_str(&l).ok())
        .collect())
}

/// The recording a journal holds: its metadata, the intervals it completed
/// and per-thread totals summed from them, marked incomplete.
pub fn recover(dir: &Path) -> Result<Recording> {
    let corrupt = |reason: String| Error::CorruptRecording {
        path: dir.to_path_buf(),
        reason,
    };
    let meta_bytes = fs::read(dir.join(DIR).join(META_FILE)).map_err(|e| corrupt(format!("journal/meta.json: {e}")))?;
    let mut meta: Metadata =
        serde_json::from_slice(&meta_bytes).map_err(|e| corrupt(format!("journal/meta.json: {e}")))?;
    // Whole intervals only: rows after the last end line were cut short.
    let mut intervals: Vec<IntervalRow> = Vec::new();
    let mut pending: Vec<IntervalRow> = Vec::new();
    let mut ends = 0u64;
    let mut covered_ns = 0;
    let mut owed = Vec::new();
    for line in lines::<IntervalLine>(&dir.join(DIR).join(INTERVALS))? {
        match line {
            IntervalLine::Row(r) => pending.push(r),
            IntervalLine::End(e) => {
                intervals.append(&mut pending);
                ends += 1;
                covered_ns = e.end_ns;
                owed = e.owed;
            }
        }
    }
    let intervals = crate::layers::cpu::rows::settle(intervals, owed);
    let names: BTreeMap<u32, ThreadIdentity> = lines::<ThreadIdentity>(&dir.join(DIR).join(THREADS))?
        .into_iter()
        .map(|t| (t.tid, t))
        .collect();
    let vtrace_pid = dir
        .file_name()
        .and_then(|n| n.to_str()?.rsplit('.').next()?.parse::<u32>().ok());
    let workload_pid = meta.workload.as_ref().map(|w| w.pid);
    let mut threads: BTreeMap<u32, ThreadRow> = BTreeMap::new();
    for r in &intervals {
        let who = names.get(&r.tid);
        let t = threads.entry(r.tid).or_insert_with(|| {
            let kthread = who.is_some_and(|w| w.kthread);
            let role = if kthread {
                "kernel"
            } else if Some(r.pid) == vtrace_pid {
                "vtrace"
            } else if Some(r.pid) == workload_pid {
                "app"
            } else {
                "other"
            };
            ThreadRow {
                tid: r.tid,
                pid: r.pid,
                comm: who.map(|w| w.comm.clone()).unwrap_or_default(),
                platform: crate::platforms::HOST.into(),
                role: if r.tid == 0 { "idle" } else { role }.into(),
                selected: Some(r.pid) == workload_pid,
                kthread,
                guest_source: "none".into(),
                ..Default::default()
            }
        });
        t.user_ns += r.user_ns;
        t.system_ns += r.system_ns;
        t.softirq_ns += r.softirq_ns;
        t.hardirq_ns += r.hardirq_ns;
        t.guest_ns += r.guest_ns;
        t.idle_ns += r.idle_ns;
    }
    meta.wall_ns = covered_ns;
    meta.end_unix_ns = meta.start_unix_ns + covered_ns;
    meta.stopped_by = "vtrace ended before writing the recording (killed or crashed)".into();
    meta.incomplete = Some(Incomplete {
        intervals: ends,
        covered_ns,
    });
    meta.notes.push(format!(
        "incomplete recording, recovered from its journal: vtrace ended before writing it; {} intervals \
         ({:.1} s) survive, with per-thread CPU time summed from them. Roles are approximate (kernel \
         threads, the workload's process, vtrace, other) and only the CPU layer's time series was journaled",
        ends,
        covered_ns as f64 / 1e9
    ));
    let mut tables = TableSet::default();
    meta.tables.clear();
    meta.tables
        .insert("threads".into(), <ThreadRow as super::Table>::VERSION);
    meta.tables
        .insert("intervals".into(), <IntervalRow as super::Table>::VERSION);
    tables.put(threads.into_values().collect::<Vec<_>>());
    tables.put(intervals);
    Ok(Recording {
        meta,
        tables,
        net_events: Default::default(),
        read_notes: Vec::new(),
    })
}

/// Writes the recording an unfinished directory holds as a normal one and
/// removes the directory. `path`: the staging directory, or the recording's
/// name (its only unfinished staging directory is taken). The output
/// defaults to that name; an existing recording there is refused.
pub fn recover_into(path: &Path, output: Option<&Path>) -> Result<PathBuf> {
    let not_unfinished = |reason: String| Error::NotARecording {
        path: path.to_path_buf(),
        reason,
    };
    let staging = if is_unfinished(path) {
        path.to_path_buf()
    } else {
        match unfinished_of(path).as_slice() {
            [one] => one.clone(),
            [] => {
                return Err(not_unfinished(
                    "no unfinished recording there (a staging directory `.NAME.tmp.PID` with a journal)".into(),
                ));
            }
            many => {
                return Err(not_unfinished(format!(
                    "several unfinished recordings of it: {}; name one",
                    many.iter()
                        .map(|p| p.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        }
    };
    let target = match output {
        Some(o) => o.to_path_buf(),
        None => {
            let name = staging.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            let original = name
                .strip_prefix('.')
                .and_then(|n| n.rsplit_once(".tmp."))
                .map(|(n, _)| n.to_string())
                .ok_or_else(|| not_unfinished("not named .NAME.tmp.PID: give -o".into()))?;
            staging.with_file_name(original)
        }
    };
    if target.exists() {
        return Err(Error::OutputNotWritable {
            path: target,
            reason: "it exists (give -o another path)".into(),
        });
    }
    let mut rec = recover(&staging)?;
    let slot = super::OutputSlot::claim(&target, false)?;
    // The workload's output, if it kept any.
    let out = crate::record::OUTPUT_FILE;
    if staging.join(out).is_file() {
        let _ = fs::copy(staging.join(out), slot.staging().join(out));
    }
    let written = super::write(&slot, &mut rec)?;
    fs::remove_dir_all(&staging).map_err(io("remove the unfinished directory"))?;
    Ok(written)
}
