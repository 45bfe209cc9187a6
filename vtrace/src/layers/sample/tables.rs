//! The sample layer's table: folded stacks per thread.

use crate::recording::{Owner, table};

table! {
    /// Sampled stacks (`record --sample HZ`), folded root first: user frames,
    /// then kernel frames suffixed `_[k]`, then [`GUEST_MODE_FRAME`] where a
    /// vCPU thread was in its guest; `count` samples of this thread had it.
    SampleRow = "samples" {
        #[serde(flatten)]
        owner: Owner,
        tid: u32,
        stack: String,
        count: u64,
    }
}

/// The leaf frame of a sample that stopped a vCPU thread in its guest: the
/// frames above it are the host's, where the exit left it. The flamegraph
/// puts the guest's own stacks under it where the guest's agent sampled
/// them.
pub const GUEST_MODE_FRAME: &str = "[guest mode]";
