//! The sample layer's table: folded stacks per thread.

use crate::recording::{Owner, table};

table! {
    /// Sampled stacks (`record --sample HZ`), folded root first: user frames,
    /// then kernel frames suffixed `_[k]`; `count` samples of this thread had it.
    SampleRow = "samples" {
        #[serde(flatten)]
        owner: Owner,
        tid: u32,
        stack: String,
        count: u64,
    }
}
