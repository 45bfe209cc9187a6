//! Atomic write and validated read of a recording directory.

use std::{
    fs::{self, File},
    path::{Path, PathBuf},
};

use polars_io::parquet::write::ParquetWriter;

use super::{META, Recording, StoredTable};
use crate::{Error, Result};

/// The file of a recording that keeps its workload's output.
pub const OUTPUT_FILE: &str = "workload.out";
/// Space held in the staging directory until the tables are written.
const RESERVE: &str = ".reserve";
const RESERVE_BYTES: usize = 8 << 20;

/// The place a recording will be written, claimed before recording starts so
/// that an unwritable path fails at once, not after the workload ran.
pub struct OutputSlot {
    pub target: PathBuf,
    staging: PathBuf,
    /// Replace a recording at the target; else it is kept as `NAME.old`.
    replace: bool,
}

impl OutputSlot {
    pub fn claim(target: &Path, replace: bool) -> Result<Self> {
        let not_writable = |reason: String| Error::OutputNotWritable {
            path: target.to_path_buf(),
            reason,
        };
        if target.exists() && !target.join(META).is_file() {
            return Err(not_writable(
                "it exists and is not a vtrace recording (refusing to replace it)".into(),
            ));
        }
        let name = target
            .file_name()
            .ok_or_else(|| not_writable("not a file name".into()))?
            .to_string_lossy()
            .into_owned();
        let parent = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        remove_dead_stagings(&parent, &name, replace);
        let staging = parent.join(format!(".{name}.tmp.{}", std::process::id()));
        let _ = fs::remove_dir_all(&staging);
        fs::create_dir(&staging).map_err(|e| not_writable(e.to_string()))?;
        // Room for the aggregate tables, held from the start: a disk that
        // fills during the run (per-packet events) cannot take it.
        if let Err(e) = fs::write(staging.join(RESERVE), vec![0u8; RESERVE_BYTES]) {
            let _ = fs::remove_dir_all(&staging);
            return Err(not_writable(format!(
                "cannot set aside {} MiB for the recording's tables there: {e}",
                RESERVE_BYTES >> 20
            )));
        }
        Ok(OutputSlot {
            target: target.to_path_buf(),
            staging,
            replace,
        })
    }

    /// Where the recording is written before it is renamed into place
    /// (tables streamed while recording go straight there).
    pub fn staging(&self) -> &Path {
        &self.staging
    }
}

/// Staging directories of `name` whose vtrace is gone (`.NAME.tmp.PID`, no
/// process PID but this one, or moved aside): removed when they hold nothing
/// recorded (killed before its probes were attached), named when they hold a
/// journal, moved into place when they hold a finished recording (unless this
/// recording is to replace it: `replace`).
fn remove_dead_stagings(parent: &Path, name: &str, replace: bool) {
    let prefix = format!(".{name}.tmp.");
    for entry in fs::read_dir(parent).into_iter().flatten().flatten() {
        let file_name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = file_name.strip_prefix(&prefix) else {
            continue;
        };
        // `PID`, or `PID.NANOS` once moved aside (its vtrace gone).
        let (pid, moved_aside) = rest.split_once('.').map_or((rest, false), |(pid, _)| (pid, true));
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        if !moved_aside && pid != std::process::id() && crate::collectors::procfs::exists(pid) {
            continue;
        }
        let path = move_aside_if_named_for_this_pid(&entry.path());
        if holds_finished_recording(&path) {
            finish_killed_write(&path, &parent.join(name), replace);
        } else if super::journal::is_unfinished(&path) {
            eprintln!(
                "vtrace: {} holds an unfinished recording of a vtrace that was killed (`vtrace recover {}` writes it)",
                path.display(),
                path.display()
            );
        } else {
            let _ = fs::remove_dir_all(&path);
        }
    }
}

/// A staging directory a killed vtrace left under this process's pid (PID 1
/// in a container, each run), moved aside (`.NAME.tmp.PID.NANOS`): this
/// process's own staging takes that name. Where it is now.
pub fn move_aside_if_named_for_this_pid(staging: &Path) -> PathBuf {
    let name = staging.file_name().unwrap_or_default().to_string_lossy().into_owned();
    if !name.ends_with(&format!(".tmp.{}", std::process::id())) {
        return staging.to_path_buf();
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let aside = staging.with_file_name(format!("{name}.{nanos}"));
    if fs::rename(staging, &aside).is_ok() {
        aside
    } else {
        staging.to_path_buf()
    }
}

/// Whether `staging` holds a whole recording (its meta.json is written
/// last, before the journal goes and the directory is renamed).
pub(super) fn holds_finished_recording(staging: &Path) -> bool {
    staging.join(META).is_file()
}

/// Does the rename a vtrace killed after finishing `staging` did not get to;
/// kept where it is, and named, when a recording is at `target` or the one
/// starting is to replace it (`replace`).
fn finish_killed_write(staging: &Path, target: &Path, replace: bool) {
    let _ = fs::remove_dir_all(staging.join(super::journal::DIR));
    if !replace && !target.exists() && fs::rename(staging, target).is_ok() {
        eprintln!(
            "vtrace: {} held the finished recording of a vtrace killed before moving it into place; moved to {}",
            staging.display(),
            target.display()
        );
    } else {
        eprintln!(
            "vtrace: {} holds the finished recording of a vtrace killed before moving it into place \
             (`vtrace report {}` reads it)",
            staging.display(),
            staging.display()
        );
    }
}

impl Drop for OutputSlot {
    /// A recording that did not finish keeps its staging directory when it
    /// journaled something: nothing recorded is lost (`vtrace recover`);
    /// nor does a finished one that could not be moved into place.
    fn drop(&mut self) {
        if holds_finished_recording(&self.staging) {
            eprintln!(
                "vtrace: the recording is whole in {} but was not moved to {} (`vtrace report {}` reads it)",
                self.staging.display(),
                self.target.display(),
                self.staging.display()
            );
        } else if super::journal::is_unfinished(&self.staging) {
            eprintln!(
                "vtrace: the recording was not written; what it journaled is kept in {} (`vtrace recover {}` \
                 makes a recording of it)",
                self.staging.display(),
                self.staging.display()
            );
        } else {
            let _ = fs::remove_dir_all(&self.staging);
        }
    }
}

/// Bytes per write of a table and per read of its checksum.
const IO_CHUNK: usize = 1 << 20;

fn write_table(dir: &Path, table: &dyn StoredTable) -> Result<()> {
    let path = dir.join(format!("{}.parquet", table.name()));
    let failed = |e: &dyn std::fmt::Display| Error::Table {
        table: table.name(),
        reason: e.to_string(),
    };
    let mut df = table.frame().map_err(|e| failed(&e))?;
    let file = File::create(&path).map_err(crate::error::io(format!("create {}", path.display())))?;
    // Buffered: the writer writes a byte or two at a time (24 000 write
    // calls for a short recording's tables, each costly in an emulated
    // guest), and largely: over 9p each write is a round trip to the host.
    let mut out = std::io::BufWriter::with_capacity(IO_CHUNK, file);
    ParquetWriter::new(&mut out).finish(&mut df).map_err(|e| failed(&e))?;
    std::io::Write::flush(&mut out).map_err(crate::error::io(format!("write {}", path.display())))?;
    Ok(())
}

/// Writes `rec` into the slot's staging directory (with the manifest of its
/// tables in meta.json), syncs it, and renames it over the target in one step.
pub fn write(slot: &OutputSlot, rec: &mut Recording) -> Result<PathBuf> {
    let dir = &slot.staging;
    let _ = fs::remove_file(dir.join(RESERVE));
    rec.meta.tables.clear();
    for table in rec.tables.iter() {
        write_table(dir, table)?;
        rec.meta.tables.insert(table.name().to_string(), table.version());
    }
    // net_events.parquet, when recorded, was written there as events came.
    if dir.join(super::events::FILE_NAME).is_file() {
        rec.meta.tables.insert(super::events::TABLE.into(), 1);
    }
    // Every table file's checksum: read back refuses a damaged one before
    // its decoder sees it (a flipped length in a Parquet page can make the
    // decoder ask for exabytes).
    rec.meta.checksums.clear();
    for entry in fs::read_dir(dir)
        .map_err(crate::error::io("list staging dir"))?
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".parquet") {
            rec.meta.checksums.insert(name, checksum(&entry.path())?);
        }
    }
    // meta.json last, whole (renamed into place) and after the tables are
    // synced: its presence marks a complete recording. The journal goes only
    // then, so a vtrace killed at any point leaves one or the other.
    let meta = serde_json::to_vec_pretty(&rec.meta).expect("metadata serializes");
    let meta_tmp = dir.join(format!("{META}.tmp"));
    fs::write(&meta_tmp, meta).map_err(crate::error::io("write meta.json"))?;
    for entry in fs::read_dir(dir)
        .map_err(crate::error::io("list staging dir"))?
        .flatten()
    {
        if let Ok(f) = File::open(entry.path()) {
            let _ = f.sync_all();
        }
    }
    fs::rename(&meta_tmp, dir.join(META)).map_err(crate::error::io("write meta.json"))?;
    // The journal only matters while the recording is unfinished.
    let _ = fs::remove_dir_all(dir.join(super::journal::DIR));
    // An older recording there is moved aside first (rename cannot replace a
    // non-empty directory): kept as NAME.old, or removed with --force once
    // the new one is in place.
    let aside = if slot.replace {
        slot.staging.with_extension("old")
    } else {
        let mut name = slot.target.as_os_str().to_owned();
        name.push(".old");
        PathBuf::from(name)
    };
    let had_old = slot.target.exists();
    if had_old {
        let _ = fs::remove_dir_all(&aside);
        fs::rename(&slot.target, &aside)
            .map_err(crate::error::io(format!("move old {} aside", slot.target.display())))?;
    }
    fs::rename(dir, &slot.target).map_err(crate::error::io(format!("rename into {}", slot.target.display())))?;
    if had_old {
        if slot.replace {
            let _ = fs::remove_dir_all(&aside);
        } else {
            eprintln!(
                "vtrace: the previous {} is kept as {}",
                slot.target.display(),
                aside.display()
            );
        }
    }
    Ok(slot.target.clone())
}

/// FNV-1a 64 of a file, in hex.
pub fn checksum(path: &Path) -> Result<String> {
    use std::io::Read;
    let mut file = File::open(path).map_err(crate::error::io(format!("open {}", path.display())))?;
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut buf = vec![0u8; IO_CHUNK];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(crate::error::io(format!("read {}", path.display())))?;
        if n == 0 {
            break;
        }
        for &b in &buf[..n] {
            hash = (hash ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
    }
    Ok(format!("{hash:016x}"))
}
