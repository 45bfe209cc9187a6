//! The sample layer's table: folded stacks per thread.

use crate::recording::table;

table! {
    /// Sampled stacks (`record --sample HZ`), folded root first: user frames,
    /// then kernel frames suffixed `_[k]`; `count` samples of this thread had it.
    SampleRow = "samples" {
        pid: u32,
        tid: u32,
        comm: String,
        platform: String,
        instance: String,
        role: String,
        stack: String,
        count: u64,
    }
}
