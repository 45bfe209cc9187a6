//! The faults layer's table.

use crate::recording::{Owner, table};

table! {
    /// Page faults per thread over the run (`--layers faults`), by the mode
    /// of the code that faulted.
    FaultRow = "faults" {
        tid: u32,
        #[serde(flatten)]
        owner: Owner,
        user: u64,
        kernel: u64,
    }
}
