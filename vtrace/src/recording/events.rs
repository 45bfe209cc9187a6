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
/// (name), `len` (bytes with link-layer header), `redirected` (the skb
/// carried tc's redirect mark, read where the hop rule asks: a queue, rx or
/// receive hop right after a receive on another device; absent in
/// recordings made before it: read as false).
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
                events.iter().map(|e| hop::name(e.hop as u32)).collect::<Vec<&str>>(),
            ),
            Column::new("len".into(), events.iter().map(|e| e.len).collect::<Vec<u32>>()),
            Column::new(
                "redirected".into(),
                events.iter().map(|e| e.redirected != 0).collect::<Vec<bool>>(),
            ),
        ],
    )
}

/// Free space a row group may not eat into: what is left is for the
/// recording's aggregate tables.
const SPACE_MARGIN: u64 = 16 << 20;

/// Appends events to `net_events.parquet` in a recording's staging
/// directory, one row group of [`CHUNK_ROWS`] at a time. When the disk runs
/// low (less than [`SPACE_MARGIN`] free) it stops, keeps what it wrote
/// readable, and counts every event after as dropped: the aggregate tables
/// must still fit, and the workload is never stopped for space.
pub struct NetEventWriter {
    writer: polars_io::parquet::write::BatchedWriter<File>,
    path: PathBuf,
    start_mono: u64,
    pending: Vec<NetEvent>,
    rows: u64,
    /// Why writing stopped, once it did.
    stopped: Option<String>,
    /// The file cannot be finished (a write failed): it is removed at the end.
    broken: bool,
    dropped: u64,
}

/// What the event writer left.
#[derive(Debug, Default)]
pub struct EventsWritten {
    pub rows: u64,
    /// Events not written (the disk ran low, or a write failed).
    pub dropped: u64,
    pub stopped: Option<String>,
}

/// Bytes free for an unprivileged writer on the filesystem of `path`.
pub fn free_space(path: &Path) -> Option<u64> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    (unsafe { libc::statvfs(c.as_ptr(), &mut st) } == 0).then(|| st.f_bavail as u64 * st.f_frsize as u64)
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
            path,
            start_mono,
            pending: Vec::with_capacity(CHUNK_ROWS),
            rows: 0,
            stopped: None,
            broken: false,
            dropped: 0,
        })
    }

    pub fn push(&mut self, event: NetEvent) -> Result<()> {
        if self.stopped.is_some() {
            self.dropped += 1;
            return Ok(());
        }
        self.pending.push(event);
        if self.pending.len() == CHUNK_ROWS {
            self.flush();
        }
        Ok(())
    }

    fn flush(&mut self) {
        if self.pending.is_empty() || self.stopped.is_some() {
            return;
        }
        if let Some(free) = self.path.parent().and_then(free_space)
            && free < SPACE_MARGIN
        {
            self.stopped = Some(format!(
                "{} MiB left on the recording's disk (kept for the aggregate tables)",
                free >> 20
            ));
            self.dropped += self.pending.len() as u64;
            self.pending.clear();
            return;
        }
        let written = frame(&self.pending, self.start_mono)
            .map_err(table_error)
            .and_then(|df| self.writer.write_batch(&df).map_err(table_error));
        match written {
            Ok(()) => self.rows += self.pending.len() as u64,
            Err(e) => {
                self.stopped = Some(e.to_string());
                self.broken = true;
                self.dropped += self.pending.len() as u64;
            }
        }
        self.pending.clear();
    }

    /// Writes what is pending and the footer.
    pub fn finish(mut self) -> Result<EventsWritten> {
        self.flush();
        if !self.broken && self.writer.finish().is_err() {
            self.broken = true;
        }
        if self.broken {
            // A file that cannot be finished cannot be read: its events are lost, and counted.
            let _ = std::fs::remove_file(&self.path);
            self.dropped += std::mem::take(&mut self.rows);
            self.stopped
                .get_or_insert_with(|| "the file could not be finished".into());
        }
        Ok(EventsWritten {
            rows: self.rows,
            dropped: self.dropped,
            stopped: self.stopped,
        })
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
    pub redirected: bool,
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
            let redirected = match df.column("redirected") {
                Ok(c) => Some(c.bool().map_err(err)?),
                Err(_) => None,
            };
            let rows = ts
                .iter()
                .zip(skb.iter())
                .zip(netns.iter())
                .zip(ifindex.iter())
                .zip(hop.iter())
                .zip(len.iter());
            for (i, (((((ts_ns, skb), netns), ifindex), hop), len)) in rows.enumerate() {
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
                    redirected: redirected.and_then(|r| r.get(i)).unwrap_or(false),
                });
            }
            offset += df.height();
        }
        Ok(())
    }
}
