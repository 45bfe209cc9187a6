//! The CPU layer's journal: every interval's per-thread CPU time, each
//! CPU's, and each thread's identity, appended line by line into the
//! recording's staging directory (`recording::journal` holds what every
//! journal shares), and the recovery of a killed recording from it and the
//! last checkpoint.

use std::{
    collections::BTreeMap,
    fs::{self, File, OpenOptions},
    io::Write,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};
use vtrace_common::state;

use super::{CpuRow, IntervalRow, ThreadRow, analysis::StateTimes, series::ThreadKey};
use crate::{
    Error, Result,
    recording::{
        self, Incomplete, Metadata, Recording, TableKind, TableSet,
        journal::{DIR, META_FILE, io, is_unfinished, lines, read_checkpoint, unfinished_of},
    },
};

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
    /// What threads' snapshots owe, where it changed since the last end
    /// line (zeros: paid off). Only changes: a thread that exited owing
    /// something would otherwise be repeated on every line after.
    owed: Vec<(ThreadKey, [u64; state::REPORTED])>,
    /// Each CPU's time from the start to here.
    #[serde(default)]
    cpus: Vec<CpuRow>,
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
    /// What the last end line left owed, per thread.
    owed: BTreeMap<ThreadKey, [u64; state::REPORTED]>,
    /// Why journaling stopped (a full disk): the recording goes on without it.
    pub failed: Option<String>,
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
            owed: BTreeMap::new(),
            failed: None,
        })
    }

    /// Appends one interval's rows and the identity of threads not named yet
    /// (or renamed), identities first so that every row's thread is known;
    /// then the interval's end with what the threads' snapshots still owe
    /// (a snapshot charges time a later one can take back: rows sum to the
    /// last snapshot only once it is settled, layers::cpu::series::settle).
    /// Rows after the last end line are of an interval the kill cut short.
    pub fn append(
        &mut self,
        threads: impl IntoIterator<Item = ThreadIdentity>,
        rows: &[IntervalRow],
        end_ns: u64,
        owed: &[(ThreadKey, [u64; state::REPORTED])],
        cpus: Vec<CpuRow>,
    ) {
        if self.failed.is_some() {
            return;
        }
        if let Err(e) = self.try_append(threads, rows, end_ns, owed, cpus) {
            self.failed = Some(e.to_string());
        }
    }

    fn try_append(
        &mut self,
        threads: impl IntoIterator<Item = ThreadIdentity>,
        rows: &[IntervalRow],
        end_ns: u64,
        owed: &[(ThreadKey, [u64; state::REPORTED])],
        cpus: Vec<CpuRow>,
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
        let owed: BTreeMap<ThreadKey, [u64; state::REPORTED]> = owed.iter().copied().collect();
        let mut changed: Vec<(ThreadKey, [u64; state::REPORTED])> = owed
            .iter()
            .filter(|(tid, o)| self.owed.get(tid) != Some(o))
            .map(|(tid, o)| (*tid, *o))
            .collect();
        changed.extend(
            self.owed
                .keys()
                .filter(|tid| !owed.contains_key(tid))
                .map(|tid| (*tid, [0; state::REPORTED])),
        );
        serde_json::to_writer(
            &mut out,
            &IntervalEnd {
                end_ns,
                owed: changed,
                cpus,
            },
        )
        .expect("end serializes");
        out.push(b'\n');
        // One write per interval: a kill leaves at most its last line torn.
        self.intervals.write_all(&out).map_err(io(INTERVALS))?;
        self.owed = owed;
        Ok(())
    }
}

/// The recording a journal holds, marked incomplete: every layer's tables
/// as of the last checkpoint, and the CPU layer's intervals to the last
/// completed one with per-thread CPU time summed from them (so that the
/// two agree). Without a checkpoint (killed within the first, or a
/// damaged one), the CPU layer's alone, with approximate roles.
pub fn recover(dir: &Path, kinds: &[TableKind]) -> Result<Recording> {
    let corrupt = |reason: String| Error::CorruptRecording {
        path: dir.to_path_buf(),
        reason,
    };
    let meta_bytes = fs::read(dir.join(DIR).join(META_FILE)).map_err(|e| corrupt(format!("journal/meta.json: {e}")))?;
    let started: Metadata =
        serde_json::from_slice(&meta_bytes).map_err(|e| corrupt(format!("journal/meta.json: {e}")))?;
    // Whole intervals only: rows after the last end line were cut short.
    let mut intervals: Vec<IntervalRow> = Vec::new();
    let mut pending: Vec<IntervalRow> = Vec::new();
    let mut ends = 0u64;
    let mut covered_ns = 0;
    let mut owed: BTreeMap<ThreadKey, [u64; state::REPORTED]> = BTreeMap::new();
    let mut cpus = Vec::new();
    for line in lines::<IntervalLine>(&dir.join(DIR).join(INTERVALS))? {
        match line {
            IntervalLine::Row(r) => pending.push(r),
            IntervalLine::End(e) => {
                intervals.append(&mut pending);
                ends += 1;
                covered_ns = e.end_ns;
                owed.extend(e.owed);
                cpus = e.cpus;
            }
        }
    }
    let intervals = super::series::settle(intervals, owed);
    let mut unreadable = None;
    let checkpoint = match read_checkpoint(dir, kinds) {
        Some(Ok(rec)) => Some(rec),
        Some(Err(e)) => {
            unreadable = Some(e);
            None
        }
        None => None,
    };
    let (mut meta, mut tables, mut threads) = match checkpoint {
        Some(rec) => {
            let threads: BTreeMap<ThreadKey, ThreadRow> = rec
                .tables
                .rows::<ThreadRow>()
                .iter()
                .map(|t| ((t.tid, t.born_ns), t.clone()))
                .collect();
            (rec.meta, rec.tables, threads)
        }
        None => (started, TableSet::default(), BTreeMap::new()),
    };
    let checkpoint_ns = (!meta.tables.is_empty()).then_some(meta.wall_ns);
    let names: BTreeMap<u32, ThreadIdentity> = lines::<ThreadIdentity>(&dir.join(DIR).join(THREADS))?
        .into_iter()
        .map(|t| (t.tid, t))
        .collect();
    let vtrace_pid = dir
        .file_name()
        .and_then(|n| n.to_str()?.rsplit('.').next()?.parse::<u32>().ok());
    let workload_pid = meta.workload.as_ref().map(|w| w.pid);
    let mut times: BTreeMap<ThreadKey, StateTimes> = BTreeMap::new();
    for r in &intervals {
        times
            .entry((r.tid, r.born_ns))
            .or_default()
            .add(&StateTimes::of_interval(r));
        // Threads the checkpoint did not know (or all, without one): roles from what the journal says.
        threads.entry((r.tid, r.born_ns)).or_insert_with(|| {
            let who = names.get(&r.tid);
            let kthread = who.is_some_and(|w| w.kthread);
            let role = if r.tid == 0 {
                "idle"
            } else if kthread {
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
                role: role.into(),
                selected: Some(r.pid) == workload_pid,
                kthread,
                guest_source: "none".into(),
                born_ns: r.born_ns,
                ..Default::default()
            }
        });
    }
    for t in threads.values_mut() {
        times.get(&(t.tid, t.born_ns)).copied().unwrap_or_default().put_into(t);
    }
    meta.wall_ns = covered_ns;
    meta.end_unix_ns = meta.start_unix_ns + covered_ns;
    meta.stopped_by = "vtrace ended before writing the recording (killed or crashed)".into();
    meta.incomplete = Some(Incomplete {
        intervals: ends,
        covered_ns,
        checkpoint_ns,
    });
    meta.notes.push(match checkpoint_ns {
        Some(at) => format!(
            "incomplete recording, recovered from its journal: vtrace ended before writing it. CPU time per \
             thread and interval covers {} intervals ({:.1} s); every other table is as of the last checkpoint, \
             at {:.1} s",
            ends,
            covered_ns as f64 / 1e9,
            at as f64 / 1e9
        ),
        None => format!(
            "incomplete recording, recovered from its journal: vtrace ended before writing it; {} intervals \
             ({:.1} s) survive, with per-thread CPU time summed from them. Roles are approximate (kernel \
             threads, the workload's process, vtrace, other) and no other layer's tables survive: {}",
            ends,
            covered_ns as f64 / 1e9,
            unreadable
                .map(|e| format!("the checkpoint is unreadable ({e})"))
                .unwrap_or_else(|| "it ended before the first checkpoint".into())
        ),
    });
    tables.put(threads.into_values().collect::<Vec<_>>());
    tables.put(intervals);
    // Each CPU's time to the same point (journals before it lack it: the checkpoint's then).
    if !cpus.is_empty() {
        tables.put(cpus);
    }
    meta.tables.clear();
    for table in tables.iter() {
        meta.tables.insert(table.name().to_string(), table.version());
    }
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
pub fn recover_into(path: &Path, output: Option<&Path>, kinds: &[TableKind]) -> Result<PathBuf> {
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
    // Its name is taken by the claim below if it is this pid's (PID 1).
    let staging = recording::move_aside_if_named_for_this_pid(&staging);
    let mut rec = recover(&staging, kinds)?;
    let slot = recording::OutputSlot::claim(&target, false)?;
    // The workload's output, if it kept any.
    let out = recording::OUTPUT_FILE;
    if staging.join(out).is_file() {
        let _ = fs::copy(staging.join(out), slot.staging().join(out));
    }
    let written = recording::write(&slot, &mut rec)?;
    fs::remove_dir_all(&staging).map_err(io("remove the unfinished directory"))?;
    Ok(written)
}
