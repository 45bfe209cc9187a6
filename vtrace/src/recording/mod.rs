//! The recording: what `vtrace record` writes and `vtrace report` reads.
//!
//! A recording is a directory (`run.vtrace/`) holding `meta.json` and one
//! Parquet file per table, so polars, pandas and duckdb open the tables
//! directly. The schema is documented in docs/recording-schema.md and
//! versioned by [`SCHEMA_VERSION`]. It is written to a temporary directory
//! beside the target and renamed into place, so a reader never sees half of one.

mod events;
mod io;
pub mod journal;
mod owner;
mod read;
mod recover;
mod schema;
pub mod table;

pub use events::{CHUNK_ROWS, EventRow, EventsWritten, NetEventWriter, NetEvents};
pub use io::{OUTPUT_FILE, OutputSlot, move_aside_if_named_for_this_pid, write};
pub use owner::Owner;
pub use read::read;
pub use recover::{Replay, Replayed, recover_into};
pub use schema::*;
pub(crate) use table::table;
pub use table::{StoredTable, Table, TableKind, TableSet};

/// Bumped on any change to meta.json's layout. Tables carry versions of
/// their own (the manifest, `meta.tables`), so adding a table needs no bump.
/// 6: the table manifest and `meta.layers`. 7: a checksum of every table
/// file (`meta.checksums`), verified before a table is decoded.
pub const SCHEMA_VERSION: u32 = 7;
/// The oldest schema this vtrace reads (tests/fixtures/schema5.vtrace).
pub const OLDEST_READABLE_SCHEMA: u32 = 5;
/// `meta.json`'s `format` field, which tells a recording from other directories.
pub const FORMAT_NAME: &str = "vtrace-recording";
