//! Atomic write and validated read of a recording directory.

use std::{
    fs::{self, File},
    path::{Path, PathBuf},
};

use polars::prelude::{ParquetReader, ParquetWriter, SerReader};

use super::{FORMAT_NAME, Metadata, Recording, SCHEMA_VERSION, Table};
use crate::{Error, Result};

const META: &str = "meta.json";

/// The place a recording will be written, claimed before recording starts so
/// that an unwritable path fails at once, not after the workload ran.
pub struct OutputSlot {
    pub target: PathBuf,
    staging: PathBuf,
}

impl OutputSlot {
    pub fn claim(target: &Path) -> Result<Self> {
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
        let staging = parent.join(format!(".{name}.tmp.{}", std::process::id()));
        let _ = fs::remove_dir_all(&staging);
        fs::create_dir(&staging).map_err(|e| not_writable(e.to_string()))?;
        Ok(OutputSlot {
            target: target.to_path_buf(),
            staging,
        })
    }

    /// Where the recording is written before it is renamed into place
    /// (tables streamed while recording go straight there).
    pub fn staging(&self) -> &Path {
        &self.staging
    }
}

impl Drop for OutputSlot {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.staging);
    }
}

fn write_table<T: Table>(dir: &Path, rows: &[T]) -> Result<()> {
    let path = dir.join(T::file_name());
    let mut df = T::to_frame(rows).map_err(|e| Error::Table {
        table: T::NAME,
        reason: e.to_string(),
    })?;
    let file = File::create(&path).map_err(crate::error::io(format!("create {}", path.display())))?;
    ParquetWriter::new(file).finish(&mut df).map_err(|e| Error::Table {
        table: T::NAME,
        reason: e.to_string(),
    })?;
    Ok(())
}

/// Writes `rec` into the slot's staging directory, syncs it, and renames it
/// over the target in one step.
pub fn write(slot: &OutputSlot, rec: &Recording) -> Result<PathBuf> {
    let dir = &slot.staging;
    write_table(dir, &rec.threads)?;
    write_table(dir, &rec.cpus)?;
    write_table(dir, &rec.softirqs)?;
    write_table(dir, &rec.hardirqs)?;
    write_table(dir, &rec.intervals)?;
    write_table(dir, &rec.programs)?;
    write_table(dir, &rec.net_devices)?;
    write_table(dir, &rec.net_hops)?;
    write_table(dir, &rec.net_sizes)?;
    write_table(dir, &rec.net_drops)?;
    write_table(dir, &rec.net_latency)?;
    // net_events.parquet, when recorded, was written there as events came.
    write_table(dir, &rec.tun_io)?;
    write_table(dir, &rec.uprobes)?;
    write_table(dir, &rec.uprobe_hists)?;
    write_table(dir, &rec.kvm_latency)?;
    write_table(dir, &rec.kvm_latency_hists)?;
    write_table(dir, &rec.kvm_events)?;
    write_table(dir, &rec.kvm_stats)?;
    write_table(dir, &rec.samples)?;
    // meta.json last: its presence marks a complete recording.
    let meta = serde_json::to_vec_pretty(&rec.meta).expect("metadata serializes");
    fs::write(dir.join(META), meta).map_err(crate::error::io("write meta.json"))?;
    for entry in fs::read_dir(dir)
        .map_err(crate::error::io("list staging dir"))?
        .flatten()
    {
        if let Ok(f) = File::open(entry.path()) {
            let _ = f.sync_all();
        }
    }
    // Replacing an older recording: move it aside first (rename cannot replace
    // a non-empty directory), then remove it once the new one is in place.
    let old = slot.staging.with_extension("old");
    let had_old = slot.target.exists();
    if had_old {
        fs::rename(&slot.target, &old)
            .map_err(crate::error::io(format!("move old {} aside", slot.target.display())))?;
    }
    fs::rename(dir, &slot.target).map_err(crate::error::io(format!("rename into {}", slot.target.display())))?;
    if had_old {
        let _ = fs::remove_dir_all(&old);
    }
    Ok(slot.target.clone())
}

fn read_table<T: Table>(dir: &Path, corrupt: &dyn Fn(String) -> Error) -> Result<Vec<T>> {
    let path = dir.join(T::file_name());
    let file = File::open(&path).map_err(|e| corrupt(format!("{}: {e}", T::file_name())))?;
    let df = ParquetReader::new(file)
        .finish()
        .map_err(|e| corrupt(format!("{}: {e}", T::file_name())))?;
    T::from_frame(&df).map_err(|e| corrupt(format!("{}: {e}", T::file_name())))
}

/// Reads and validates a recording.
pub fn read(path: &Path) -> Result<Recording> {
    let not_rec = |reason: &str| Error::NotARecording {
        path: path.to_path_buf(),
        reason: reason.into(),
    };
    if !path.exists() {
        return Err(not_rec("no such file or directory"));
    }
    if !path.is_dir() {
        return Err(not_rec(
            "a recording is a directory holding meta.json and Parquet tables",
        ));
    }
    let meta_path = path.join(META);
    let meta_bytes = fs::read(&meta_path).map_err(|_| not_rec("meta.json missing"))?;
    let corrupt = |reason: String| Error::CorruptRecording {
        path: path.to_path_buf(),
        reason,
    };
    let value: serde_json::Value =
        serde_json::from_slice(&meta_bytes).map_err(|e| corrupt(format!("meta.json is not valid JSON: {e}")))?;
    if value.get("format").and_then(|f| f.as_str()) != Some(FORMAT_NAME) {
        return Err(not_rec("meta.json has no \"format\": \"vtrace-recording\""));
    }
    let found = value.get("schema_version").and_then(|v| v.as_u64()).unwrap_or(0) as u32;
    if found != SCHEMA_VERSION {
        return Err(Error::SchemaVersion {
            path: path.to_path_buf(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    let meta: Metadata = serde_json::from_value(value).map_err(|e| corrupt(format!("meta.json: {e}")))?;
    Ok(Recording {
        meta,
        threads: read_table(path, &corrupt)?,
        cpus: read_table(path, &corrupt)?,
        softirqs: read_table(path, &corrupt)?,
        hardirqs: read_table(path, &corrupt)?,
        intervals: read_table(path, &corrupt)?,
        programs: read_table(path, &corrupt)?,
        net_devices: read_table(path, &corrupt)?,
        net_hops: read_table(path, &corrupt)?,
        net_sizes: read_table(path, &corrupt)?,
        net_drops: read_table(path, &corrupt)?,
        net_latency: read_table(path, &corrupt)?,
        net_events: super::NetEvents::open(path).map_err(corrupt)?,
        tun_io: read_table(path, &corrupt)?,
        uprobes: read_table(path, &corrupt)?,
        uprobe_hists: read_table(path, &corrupt)?,
        kvm_latency: read_table(path, &corrupt)?,
        kvm_latency_hists: read_table(path, &corrupt)?,
        kvm_events: read_table(path, &corrupt)?,
        kvm_stats: read_table(path, &corrupt)?,
        samples: read_table(path, &corrupt)?,
    })
}
