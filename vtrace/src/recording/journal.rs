//! The journal of a recording in progress, written into its staging
//! directory as it goes: the metadata known once probes are attached, then
//! every interval's per-thread CPU time, each CPU's, and each thread's
//! identity, appended line by line; and every `--checkpoint` (10 s) every
//! layer's tables as they stand (`checkpoint.json`). A vtrace killed mid-run (SIGKILL, the OOM killer, a CI
//! timeout) leaves its CPU time up to its last completed interval and every
//! other table up to its last checkpoint readable: `vtrace report` reads
//! such a directory as an incomplete recording and `vtrace recover` turns
//! it into a normal one. A finished recording holds no journal (its tables
//! say more).
//!
//! Here: what every journal shares (its directory, the metadata at the
//! start, checkpoints of every table, finding unfinished recordings); the
//! CPU layer's interval lines are in `layers::cpu::journal`, and the
//! recovery built on both in `recording::recover`.
//!
//! Lines are appended without fsync: what a killed process wrote is in the
//! page cache and survives it; a crash of the machine is not covered.

use std::{
    collections::BTreeMap,
    fs::{self, File},
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

use super::{META, Metadata, Recording, TableKind, TableSet};
use crate::{Error, Result};

pub const DIR: &str = "journal";
pub const META_FILE: &str = "meta.json";
const CHECKPOINT: &str = "checkpoint.json";

pub fn io(what: &str) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |e| Error::Io {
        context: format!("journal: {what}"),
        source: e,
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
    let mut found = stagings_of(target);
    found.retain(|p| is_unfinished(p));
    found
}

/// The staging directories beside `target` (`.NAME.tmp.*`), sorted.
pub fn stagings_of(target: &Path) -> Vec<PathBuf> {
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
        .collect();
    found.sort();
    found
}

/// Lines of a JSONL file that parse; a torn last line is dropped.
pub fn lines<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Vec<T>> {
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

/// A checkpoint: the recording as it stood mid-run.
#[derive(Serialize, Deserialize)]
struct Checkpoint {
    meta: Metadata,
    /// Rows per table name, as JSON (a few ms for all, where Parquet files
    /// took ten times that).
    tables: BTreeMap<String, serde_json::Value>,
}

/// Writes the recording as it stands mid-run into journal/checkpoint.json:
/// every layer's tables (the CPU layer's series aside: the lines hold it).
/// Written beside and renamed over the previous one, so that a kill at any
/// point leaves one whole checkpoint. Not synced, like the lines.
pub fn checkpoint(staging: &Path, rec: &mut Recording) -> Result<()> {
    rec.meta.tables.clear();
    let mut tables = BTreeMap::new();
    for table in rec.tables.iter() {
        rec.meta.tables.insert(table.name().to_string(), table.version());
        tables.insert(table.name().to_string(), table.json());
    }
    let checkpoint = Checkpoint {
        meta: rec.meta.clone(),
        tables,
    };
    let bytes = serde_json::to_vec(&checkpoint).expect("checkpoint serializes");
    let dir = staging.join(DIR);
    let tmp = dir.join(format!("{CHECKPOINT}.tmp"));
    let written = fs::write(&tmp, bytes)
        .map_err(io("write the checkpoint"))
        .and_then(|()| fs::rename(&tmp, dir.join(CHECKPOINT)).map_err(io("put the checkpoint in place")));
    if written.is_err() {
        // A full disk: the last whole checkpoint stays, the torn one goes.
        let _ = fs::remove_file(&tmp);
    }
    written
}

/// The last checkpoint of an unfinished recording, if it wrote one.
pub fn read_checkpoint(dir: &Path, kinds: &[TableKind]) -> Option<std::result::Result<Recording, String>> {
    let bytes = fs::read(dir.join(DIR).join(CHECKPOINT)).ok()?;
    let parse = || -> std::result::Result<Recording, String> {
        let mut checkpoint: Checkpoint = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
        let mut tables = TableSet::default();
        for kind in kinds {
            if let Some(rows) = checkpoint.tables.remove(kind.name) {
                tables.insert((kind.read_json)(rows).map_err(|e| format!("table {}: {e}", kind.name))?);
            }
        }
        Ok(Recording {
            meta: checkpoint.meta,
            tables,
            net_events: Default::default(),
            read_notes: Vec::new(),
            guests: Vec::new(),
        })
    };
    Some(parse())
}
