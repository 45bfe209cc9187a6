//! A killed recording rebuilt from its journal (`recording::journal`): every
//! layer's tables as of the last checkpoint, and the CPU layer's intervals
//! to the last completed one, which that layer replays itself ([`Replay`]);
//! marked incomplete. `vtrace report` reads an unfinished directory this
//! way, and `vtrace recover` writes it as a normal recording.

use std::{
    fs,
    path::{Path, PathBuf},
};

use super::{
    Incomplete, Metadata, OUTPUT_FILE, OutputSlot, Recording, TableKind, TableSet,
    io::{move_aside_if_named_for_this_pid, write},
    journal::{DIR, META_FILE, io, is_unfinished, read_checkpoint, unfinished_of},
};
use crate::{Error, Result};

/// What a layer's own journal lines covered when replayed into a recording.
pub struct Replayed {
    /// Completed intervals.
    pub intervals: u64,
    /// ns from the start to the end of the last of them.
    pub covered_ns: u64,
}

/// Replays a journal's interval lines into `rec` (the checkpoint's
/// recording, or the metadata at the start with no table): the CPU
/// layer's, given from above (`layers::read`).
pub type Replay = fn(dir: &Path, rec: &mut Recording) -> Result<Replayed>;

/// The recording a journal holds, marked incomplete: every layer's tables
/// as of the last checkpoint, and what `replay` rebuilds from the interval
/// lines (the CPU layer's intervals to the last completed one, with
/// per-thread CPU time summed from them, so that the two agree). Without a
/// checkpoint (killed within the first, or a damaged one), the replayed
/// tables alone, with approximate roles.
pub fn recover(dir: &Path, kinds: &[TableKind], replay: Replay) -> Result<Recording> {
    let corrupt = |reason: String| Error::CorruptRecording {
        path: dir.to_path_buf(),
        reason,
    };
    let meta_bytes = fs::read(dir.join(DIR).join(META_FILE)).map_err(|e| corrupt(format!("journal/meta.json: {e}")))?;
    let started: Metadata =
        serde_json::from_slice(&meta_bytes).map_err(|e| corrupt(format!("journal/meta.json: {e}")))?;
    let mut unreadable = None;
    let mut rec = match read_checkpoint(dir, kinds) {
        Some(Ok(rec)) => rec,
        Some(Err(e)) => {
            unreadable = Some(e);
            empty(started)
        }
        None => empty(started),
    };
    let checkpoint_ns = (!rec.meta.tables.is_empty()).then_some(rec.meta.wall_ns);
    let Replayed { intervals, covered_ns } = replay(dir, &mut rec)?;
    let meta = &mut rec.meta;
    meta.wall_ns = covered_ns;
    meta.end_unix_ns = meta.start_unix_ns + covered_ns;
    meta.stopped_by = "vtrace ended before writing the recording (killed or crashed)".into();
    meta.incomplete = Some(Incomplete {
        intervals,
        covered_ns,
        checkpoint_ns,
    });
    meta.notes.push(match checkpoint_ns {
        Some(at) => format!(
            "incomplete recording, recovered from its journal: vtrace ended before writing it. CPU time per \
             thread and interval covers {} intervals ({:.1} s); every other table is as of the last checkpoint, \
             at {:.1} s",
            intervals,
            covered_ns as f64 / 1e9,
            at as f64 / 1e9
        ),
        None => format!(
            "incomplete recording, recovered from its journal: vtrace ended before writing it; {} intervals \
             ({:.1} s) survive, with per-thread CPU time summed from them. Roles are approximate (kernel \
             threads, the workload's process, vtrace, other) and no other layer's tables survive: {}",
            intervals,
            covered_ns as f64 / 1e9,
            unreadable
                .map(|e| format!("the checkpoint is unreadable ({e})"))
                .unwrap_or_else(|| "it ended before the first checkpoint".into())
        ),
    });
    meta.tables.clear();
    for table in rec.tables.iter() {
        rec.meta.tables.insert(table.name().to_string(), table.version());
    }
    Ok(rec)
}

/// The metadata known at the start, with no table.
fn empty(meta: Metadata) -> Recording {
    Recording {
        meta,
        tables: TableSet::default(),
        net_events: Default::default(),
        read_notes: Vec::new(),
        guests: Vec::new(),
    }
}

/// Writes the recording an unfinished directory holds as a normal one and
/// removes the directory. `path`: the staging directory, or the recording's
/// name (its only unfinished staging directory is taken). The output
/// defaults to that name; an existing recording there is refused.
pub fn recover_into(path: &Path, output: Option<&Path>, kinds: &[TableKind], replay: Replay) -> Result<PathBuf> {
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
    let staging = move_aside_if_named_for_this_pid(&staging);
    let mut rec = recover(&staging, kinds, replay)?;
    let slot = OutputSlot::claim(&target, false)?;
    // The workload's output, if it kept any, and the directories a layer
    // kept beside the tables (the guest layer's guests' recordings, each
    // whole or its own journal): carried over as they are.
    let out = OUTPUT_FILE;
    if staging.join(out).is_file() {
        let _ = fs::copy(staging.join(out), slot.staging().join(out));
    }
    for entry in fs::read_dir(&staging)
        .map_err(io("read the unfinished directory"))?
        .flatten()
    {
        if entry.path().is_dir() && entry.file_name() != DIR {
            fs::rename(entry.path(), slot.staging().join(entry.file_name())).map_err(crate::error::io(format!(
                "carry {} over",
                entry.file_name().to_string_lossy()
            )))?;
        }
    }
    let written = write(&slot, &mut rec)?;
    fs::remove_dir_all(&staging).map_err(io("remove the unfinished directory"))?;
    Ok(written)
}
