//! The faults layer's table.

use crate::recording::table;

table! {
    /// Page faults per thread over the run (`--layers faults`), by the mode
    /// of the code that faulted.
    FaultRow = "faults" {
        tid: u32,
        pid: u32,
        comm: String,
        platform: String,
        instance: String,
        role: String,
        user: u64,
        kernel: u64,
    }
}
