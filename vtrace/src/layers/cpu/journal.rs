//! The CPU layer's journal: every interval's per-thread CPU time, each
//! CPU's, and each thread's identity, appended line by line into the
//! recording's staging directory (`recording::journal` holds what every
//! journal shares), and their replay when a killed recording is recovered
//! (`recording::recover`).

use std::{
    collections::BTreeMap,
    fs::{self, File, OpenOptions},
    io::Write,
    path::Path,
};

use serde::{Deserialize, Serialize};
use vtrace_common::state;

use super::{CpuRow, IntervalRow, ThreadRow, analysis::StateTimes, series::ThreadKey};
use crate::recording::Owner;
use crate::{
    Result,
    recording::{
        Recording, Replayed,
        journal::{DIR, io, lines},
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

/// Replays the intervals journal into `rec` (what a killed recording's
/// checkpoint held, or its start's metadata alone): the intervals to the
/// last completed one (rows after the last end line were cut short), each
/// CPU's time to the same point, and per-thread CPU time summed from them,
/// so that the two agree. Threads the checkpoint did not know (or all,
/// without one) get their roles from what the journal says.
pub fn replay(dir: &Path, rec: &mut Recording) -> Result<Replayed> {
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
    let mut threads: BTreeMap<ThreadKey, ThreadRow> = rec
        .tables
        .rows::<ThreadRow>()
        .iter()
        .map(|t| ((t.tid, t.born_ns), t.clone()))
        .collect();
    let names: BTreeMap<u32, ThreadIdentity> = lines::<ThreadIdentity>(&dir.join(DIR).join(THREADS))?
        .into_iter()
        .map(|t| (t.tid, t))
        .collect();
    let vtrace_pid = dir
        .file_name()
        .and_then(|n| n.to_str()?.rsplit('.').next()?.parse::<u32>().ok());
    let workload_pid = rec.meta.workload.as_ref().map(|w| w.pid);
    let mut times: BTreeMap<ThreadKey, StateTimes> = BTreeMap::new();
    for r in &intervals {
        times
            .entry((r.tid, r.born_ns))
            .or_default()
            .add(&StateTimes::of_interval(r));
        threads
            .entry((r.tid, r.born_ns))
            .or_insert_with(|| journal_thread(r, names.get(&r.tid), vtrace_pid, workload_pid));
    }
    for t in threads.values_mut() {
        times.get(&(t.tid, t.born_ns)).copied().unwrap_or_default().put_into(t);
    }
    rec.tables.put(threads.into_values().collect::<Vec<_>>());
    rec.tables.put(intervals);
    // Each CPU's time to the same point (journals before it lack it: the checkpoint's then).
    if !cpus.is_empty() {
        rec.tables.put(cpus);
    }
    Ok(Replayed {
        intervals: ends,
        covered_ns,
    })
}

/// A thread only the journal knows: its role from what the journal says.
fn journal_thread(
    r: &IntervalRow,
    who: Option<&ThreadIdentity>,
    vtrace_pid: Option<u32>,
    workload_pid: Option<u32>,
) -> ThreadRow {
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
        owner: Owner {
            pid: r.pid,
            comm: who.map(|w| w.comm.clone()).unwrap_or_default(),
            platform: crate::platforms::HOST.into(),
            instance: String::new(),
            role: role.into(),
        },
        selected: Some(r.pid) == workload_pid,
        kthread,
        guest_source: "none".into(),
        born_ns: r.born_ns,
        ..Default::default()
    }
}
