//! The recording: what `vtrace record` writes and `vtrace report` reads.
//!
//! A recording is a directory (`run.vtrace/`) holding `meta.json` and one
//! Parquet file per table, so polars, pandas and duckdb open the tables
//! directly. The schema is documented in docs/recording-schema.md and
//! versioned by [`SCHEMA_VERSION`]. It is written to a temporary directory
//! beside the target and renamed into place, so a reader never sees half of one.

mod events;
mod io;
mod schema;
mod table;

pub use events::{CHUNK_ROWS, EventRow, NetEventWriter, NetEvents};
pub use io::{OutputSlot, read, write};
pub use schema::*;
pub use table::Table;

/// Bumped on any incompatible change to meta.json or a table.
pub const SCHEMA_VERSION: u32 = 5;
/// `meta.json`'s `format` field, which tells a recording from other directories.
pub const FORMAT_NAME: &str = "vtrace-recording";
