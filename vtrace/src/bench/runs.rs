//! The bench's runs table, `runs.parquet` at its root: one row per run of
//! every cell, with where its recording lies and what the cell is (platform,
//! workload, parameter, stressors) and what its workload did, so that a SQL
//! engine joins it to the recordings' own tables by the `run` column
//! (docs/sql.md: DuckDB over `cells/*/*/*.vtrace/threads.parquet`).

use std::path::Path;

use polars_io::parquet::write::ParquetWriter;

use super::matrix::{Matrix, error_path, run_path};
use crate::{
    Error, Result,
    recording::{META, Metadata, Table, table},
};

pub const RUNS_FILE: &str = "runs.parquet";

table! {
    /// A run of a cell. `run`: its recording's path under the bench
    /// directory (`cells/runc/redis-64/rep1.vtrace`), which a table's
    /// file name read with its path contains. `error`: why a run that was
    /// not recorded failed ("" when recorded; a run not made yet has
    /// neither). `ops`, `ops_failed`, `ops_per_s`: as its workload counted
    /// them, 0 where it did not say.
    RunRow = "runs" {
        run: String,
        platform: String,
        workload: String,
        param: String,
        cell: String,
        stress: u32,
        neighbour: bool,
        rep: u32,
        recorded: bool,
        error: String,
        ops: f64,
        ops_failed: f64,
        ops_unit: String,
        ops_per_s: f64,
        wall_ns: u64,
    }
}

/// Every run of `m` as it stands under `root`.
pub fn rows(m: &Matrix, root: &Path) -> Vec<RunRow> {
    let mut rows = Vec::new();
    for cell in m.cells() {
        let dir = cell.dir(root);
        for rep in 1..=m.repeat {
            let path = run_path(&dir, rep);
            let meta: Option<Metadata> = std::fs::read(path.join(META))
                .ok()
                .and_then(|bytes| serde_json::from_slice(&bytes).ok());
            let ops = meta.as_ref().and_then(|m| m.workload.as_ref()?.ops.clone());
            rows.push(RunRow {
                run: path.strip_prefix(root).unwrap_or(&path).display().to_string(),
                platform: cell.platform.clone(),
                workload: cell.workload.name().into(),
                param: cell.param.clone(),
                cell: cell.name(),
                stress: cell.stress,
                neighbour: cell.neighbour,
                rep,
                recorded: meta.is_some(),
                error: std::fs::read_to_string(error_path(&dir, rep))
                    .map(|e| e.trim().to_string())
                    .unwrap_or_default(),
                ops: ops.as_ref().map_or(0.0, |o| o.count),
                ops_failed: ops.as_ref().and_then(|o| o.failed).unwrap_or(0.0),
                ops_unit: ops.as_ref().map_or(String::new(), |o| o.unit.clone()),
                ops_per_s: ops.as_ref().and_then(|o| o.per_second).unwrap_or(0.0),
                wall_ns: meta.as_ref().map_or(0, |m| m.wall_ns),
            });
        }
    }
    rows
}

/// Writes `runs.parquet` under `root` (replacing it: a resumed bench's
/// table holds every run).
pub fn write(m: &Matrix, root: &Path) -> Result<()> {
    let path = root.join(RUNS_FILE);
    let failed = |e: &dyn std::fmt::Display| Error::Table {
        table: RunRow::NAME,
        reason: e.to_string(),
    };
    let mut df = RunRow::to_frame(&rows(m, root)).map_err(|e| failed(&e))?;
    let file = std::fs::File::create(&path).map_err(crate::error::io(format!("create {}", path.display())))?;
    // Buffered, as a recording's tables are (recording/io.rs).
    let mut out = std::io::BufWriter::new(file);
    ParquetWriter::new(&mut out).finish(&mut df).map_err(|e| failed(&e))?;
    std::io::Write::flush(&mut out).map_err(crate::error::io(format!("write {}", path.display())))?;
    Ok(())
}
