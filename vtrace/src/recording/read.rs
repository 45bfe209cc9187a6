//! Validated read of a recording directory, of any schema this vtrace
//! reads, or of an unfinished one (a journal) as it stands.

use std::{fs::File, path::Path};

use polars_io::{SerReader, parquet::read::ParquetReader};

use super::{
    FORMAT_NAME, META, Metadata, OLDEST_READABLE_SCHEMA, Recording, SCHEMA_VERSION, TableKind, TableSet,
    io::{checksum, holds_finished_recording},
    recover::{Replay, recover},
};
use crate::{Error, Result};

/// The tables every schema-5 recording has (it had no manifest).
const SCHEMA5_TABLES: &[&str] = &[
    "threads",
    "cpus",
    "softirqs",
    "hardirqs",
    "intervals",
    "programs",
    "net_devices",
    "net_hops",
    "net_sizes",
    "net_drops",
    "net_latency",
    "tun_io",
    "uprobes",
    "uprobe_hists",
    "kvm_latency",
    "kvm_latency_hists",
    "kvm_events",
    "kvm_stats",
    "samples",
];

/// Reads a recording of any schema from [`OLDEST_READABLE_SCHEMA`] to
/// [`SCHEMA_VERSION`]. Tables are read as `kinds` declare them (the layers'
/// tables, given from above: `layers::read`); a table that is missing reads
/// as empty with a note, one this vtrace does not know is skipped with a
/// note, and only a table or meta.json newer than this vtrace can read is
/// refused. An unfinished directory (a journal) is rebuilt from it, the CPU
/// layer's lines by `replay` ([`super::recover`]).
pub fn read(path: &Path, kinds: &[TableKind], replay: Replay) -> Result<Recording> {
    let not_rec = |reason: &str| Error::NotARecording {
        path: path.to_path_buf(),
        reason: reason.into(),
    };
    if !path.exists() {
        if let Some(unfinished) = super::journal::unfinished_of(path).first() {
            return Err(not_rec(&format!(
                "no such file or directory; vtrace ended before writing it and its journal is in {} \
                 (`vtrace recover {}` writes the recording, `vtrace report {}` reads it as it is)",
                unfinished.display(),
                path.display(),
                unfinished.display()
            )));
        }
        let stagings = super::journal::stagings_of(path);
        if let Some(finished) = stagings.iter().find(|s| holds_finished_recording(s)) {
            return Err(not_rec(&format!(
                "no such file or directory; a vtrace killed before moving its finished recording there left it in \
                 {} (`vtrace report {}` reads it; the next `vtrace record -o {}` moves it there)",
                finished.display(),
                finished.display(),
                path.display()
            )));
        }
        return Err(not_rec("no such file or directory"));
    }
    if !path.is_dir() {
        return Err(not_rec(
            "a recording is a directory holding meta.json and Parquet tables",
        ));
    }
    if super::journal::is_unfinished(path) {
        return recover(path, kinds, replay);
    }
    let meta_path = path.join(META);
    let meta_bytes = std::fs::read(&meta_path).map_err(|_| not_rec("meta.json missing"))?;
    let corrupt = |reason: String| Error::CorruptRecording {
        path: path.to_path_buf(),
        reason,
    };
    let value: serde_json::Value =
        serde_json::from_slice(&meta_bytes).map_err(|e| corrupt(format!("meta.json is not valid JSON: {e}")))?;
    if value.get("format").and_then(|f| f.as_str()) != Some(FORMAT_NAME) {
        return Err(not_rec("meta.json has no \"format\": \"vtrace-recording\""));
    }
    let writer = value
        .get("vtrace_version")
        .and_then(|v| v.as_str())
        .unwrap_or("(unknown)")
        .to_string();
    let found = value.get("schema_version").and_then(|v| v.as_u64()).unwrap_or(0) as u32;
    if !(OLDEST_READABLE_SCHEMA..=SCHEMA_VERSION).contains(&found) {
        return Err(Error::SchemaVersion {
            path: path.to_path_buf(),
            writer,
            found,
            oldest: OLDEST_READABLE_SCHEMA,
            newest: SCHEMA_VERSION,
        });
    }
    let meta: Metadata = serde_json::from_value(value).map_err(|e| corrupt(format!("meta.json: {e}")))?;
    // Schema 7 on: no table file is decoded unless it is as it was written.
    let verify = |file_name: &str| -> Result<()> {
        if meta.schema_version < 7 || !path.join(file_name).is_file() {
            return Ok(());
        }
        let Some(expected) = meta.checksums.get(file_name) else {
            return Err(corrupt(format!(
                "{file_name} has no checksum in meta.json (added after the recording was written?)"
            )));
        };
        if checksum(&path.join(file_name))? != *expected {
            return Err(corrupt(format!(
                "{file_name} is damaged: its checksum does not match the one written with it (truncated or altered \
                 since)"
            )));
        }
        Ok(())
    };
    // Before the manifest (schema 5) every table of that schema was written, at version 1.
    let expected = |name: &str| {
        if meta.tables.is_empty() {
            SCHEMA5_TABLES.contains(&name)
        } else {
            meta.tables.contains_key(name)
        }
    };
    let mut tables = TableSet::default();
    let mut read_notes = Vec::new();
    for kind in kinds {
        let version = meta.tables.get(kind.name).copied().unwrap_or(1);
        if version > kind.version {
            return Err(Error::TableVersion {
                path: path.to_path_buf(),
                table: kind.name.into(),
                writer: writer.clone(),
                found: version,
                supported: kind.version,
            });
        }
        let file_name = format!("{}.parquet", kind.name);
        verify(&file_name)?;
        let Ok(file) = File::open(path.join(&file_name)) else {
            if expected(kind.name) {
                read_notes.push(format!(
                    "table {} is missing from this recording: its figures read as empty",
                    kind.name
                ));
            }
            continue;
        };
        let df = ParquetReader::new(file)
            .finish()
            .map_err(|e| corrupt(format!("{file_name}: {e}")))?;
        tables.insert((kind.read)(&df, version).map_err(|e| corrupt(format!("{file_name}: {e}")))?);
    }
    for name in meta.tables.keys() {
        if name != super::events::TABLE && !kinds.iter().any(|k| k.name == name) {
            read_notes.push(format!(
                "table {name} is unknown to this vtrace ({}; written by vtrace {writer}) and was skipped",
                env!("CARGO_PKG_VERSION")
            ));
        }
    }
    verify(super::events::FILE_NAME)?;
    Ok(Recording {
        meta,
        tables,
        net_events: super::NetEvents::open(path).map_err(corrupt)?,
        read_notes,
        guests: Vec::new(),
    })
}
