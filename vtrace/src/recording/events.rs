//! `net_events.parquet` (`record --events`): every packet at every hop. It
//! can hold tens of millions of rows, so it is never held whole: recording
//! appends it in row groups as the ring buffer drains, and readers go through
//! it in slices of [`CHUNK_ROWS`].

use std::{
    fs::File,
    path::{Path, PathBuf},
};

use polars_core::prelude::*;
use polars_io::{
    SerReader,
    parquet::{read::ParquetReader, write::ParquetWriter},
};
use vtrace_common::{NetEvent, hop};

use crate::{Error, Result};

pub const TABLE: &str = "net_events";
pub const FILE_NAME: &str = "net_events.parquet";

/// Rows per written row group and per slice read.
pub const CHUNK_ROWS: usize = 1 << 18;

fn table_error(e: impl std::fmt::Display) -> Error {
    Error::Table {
        table: "net_events",
        reason: e.to_string(),
    }
}

/// Columns: `ts_ns` (since the recording started), `skb` (kernel address:
/// the same value across hops is the same packet), `netns`, `ifindex`, `hop`
/// (name), `len` (bytes with link-layer header).
fn frame(events: &[NetEvent], start_mono: u64) -> PolarsResult<DataFrame> {
    DataFrame::new(
        events.len(),
        vec![
            Column::new(
                "ts_ns".into(),
                events
                    .iter()
                    .map(|e| e.ts.saturating_sub(start_mono))
                    .collect::<Vec<u64>>(),
            ),
            Column::new("skb".into(), events.iter().map(|e| e.skb).collect::<Vec<u64>>()),
            Column::new(
                "netns".into(),
                events.iter().map(|e| (e.dev >> 32) as u32).collect::<Vec<u32>>(),
            ),
            Column::new(
                "ifindex".into(),
                events.iter().map(|e| e.dev as u32).collect::<Vec<u32>>(),
            ),
            Column::new(
                "hop".into(),
                events.iter().map(|e| hop::name(e.hop)).collect::<Vec<&str>>(),
            ),
            Column::new("len".into(), events.iter().map(|e| e.len).collect::<Vec<u32>>()),
        ],
    )
}

/// Appends events to `net_events.parquet` in a recording's staging
/// directory, one row group of [`CHUNK_ROWS`] at a time.
pub struct NetEventWriter {
    writer: polars_io::parquet::write::BatchedWriter<File>,
    start_mono: u64,
    pending: Vec<NetEvent>,
    rows: u64,
}

impl NetEventWriter {
    pub fn create(dir: &Path, start_mono: u64) -> Result<Self> {
        let path = dir.join(FILE_NAME);
        let file = File::create(&path).map_err(crate::error::io(format!("create {}", path.display())))?;
        let schema = frame(&[], 0).map_err(table_error)?.schema().as_ref().clone();
        let writer = ParquetWriter::new(file)
            .with_row_group_size(Some(CHUNK_ROWS))
            .batched(&schema)
            .map_err(table_error)?;
        Ok(NetEventWriter {
            writer,
            start_mono,
            pending: Vec::with_capacity(CHUNK_ROWS),
            rows: 0,
        })
    }

    pub fn push(&mut self, event: NetEvent) -> Result<()> {
        self.pending.push(event);
        if self.pending.len() == CHUNK_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let df = frame(&self.pending, self.start_mono).map_err(table_error)?;
        self.writer.write_batch(&df).map_err(table_error)?;
        self.rows += self.pending.len() as u64;
        self.pending.clear();
        Ok(())
    }

    /// Writes what is pending and the footer; returns the rows written.
    pub fn finish(mut self) -> Result<u64> {
        self.flush()?;
        self.writer.finish().map_err(table_error)?;
        Ok(self.rows)
    }
}

/// One event as read back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventRow<'a> {
    pub ts_ns: u64,
    pub skb: u64,
    pub netns: u32,
    pub ifindex: u32,
    pub hop: &'a str,
    pub len: u32,
}

/// The per-packet events of a recording read from disk, if it has them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NetEvents {
    pub path: Option<PathBuf>,
    pub rows: u64,
}

impl NetEvents {
    /// Finds `net_events.parquet` in a recording and reads its row count.
    pub fn open(dir: &Path) -> std::result::Result<Self, String> {
        let path = dir.join(FILE_NAME);
        if !path.exists() {
            return Ok(NetEvents::default());
        }
        let file = File::open(&path).map_err(|e| format!("{FILE_NAME}: {e}"))?;
        let mut reader = ParquetReader::new(file);
        let rows = reader.num_rows().map_err(|e| format!("{FILE_NAME}: {e}"))? as u64;
        let schema = reader.schema().map_err(|e| format!("{FILE_NAME}: {e}"))?;
        for column in ["ts_ns", "skb", "netns", "ifindex", "hop", "len"] {
            if !schema.contains(column) {
                return Err(format!("{FILE_NAME}: column '{column}' missing"));
            }
        }
        Ok(NetEvents { path: Some(path), rows })
    }

    /// Calls `f` on every event in file order (the order the kernel handed
    /// them over: the same skb's hops in the order they happened), one slice
    /// of [`CHUNK_ROWS`] in memory at a time.
    pub fn for_each(&self, mut f: impl FnMut(EventRow<'_>)) -> std::result::Result<(), String> {
        let Some(path) = &self.path else { return Ok(()) };
        let err = |e: PolarsError| format!("{FILE_NAME}: {e}");
        let mut offset = 0usize;
        while (offset as u64) < self.rows {
            let file = File::open(path).map_err(|e| format!("{FILE_NAME}: {e}"))?;
            let df = ParquetReader::new(file)
                .with_slice(Some((offset, CHUNK_ROWS)))
                .finish()
                .map_err(err)?;
            if df.height() == 0 {
                break;
            }
            let ts = df.column("ts_ns").and_then(|c| c.u64()).map_err(err)?;
            let skb = df.column("skb").and_then(|c| c.u64()).map_err(err)?;
            let netns = df.column("netns").and_then(|c| c.u32()).map_err(err)?;
            let ifindex = df.column("ifindex").and_then(|c| c.u32()).map_err(err)?;
            let hop = df.column("hop").and_then(|c| c.str()).map_err(err)?;
            let len = df.column("len").and_then(|c| c.u32()).map_err(err)?;
            let rows = ts
                .iter()
                .zip(skb.iter())
                .zip(netns.iter())
                .zip(ifindex.iter())
                .zip(hop.iter())
                .zip(len.iter());
            for (((((ts_ns, skb), netns), ifindex), hop), len) in rows {
                let (Some(ts_ns), Some(skb), Some(netns), Some(ifindex), Some(hop), Some(len)) =
                    (ts_ns, skb, netns, ifindex, hop, len)
                else {
                    return Err(format!("{FILE_NAME}: null values"));
                };
                f(EventRow {
                    ts_ns,
                    skb,
                    netns,
                    ifindex,
                    hop,
                    len,
                });
            }
            offset += df.height();
        }
        Ok(())
    }
}
