//! The fs layer's tables: file syscalls per process, call and filesystem,
//! and their latency histograms.

use crate::recording::{Owner, table};

table! {
    /// File syscalls per process, call and filesystem type (from the
    /// superblock's magic number, resolved in the kernel as the call
    /// entered): calls, bytes moved, failed calls and latency (entry -> exit).
    FsRow = "files" {
        #[serde(flatten)]
        owner: Owner,
        fs: String,
        magic: u64,
        op: String,
        count: u64,
        bytes: u64,
        errors: u64,
        total_ns: u64,
        min_ns: u64,
        max_ns: u64,
    }
}

table! {
    /// Latency histograms of the files rows: buckets `[lo_ns, hi_ns)`, 8 per power of two.
    FsHistRow = "files_hists" {
        pid: u32,
        magic: u64,
        op: String,
        lo_ns: u64,
        hi_ns: u64,
        count: u64,
    }
}

table! {
    /// Overlayfs credential switches per process (fentry or kprobe on
    /// ovl_override_creds / ovl_revert_creds; absent where neither attaches).
    OverlayCredsRow = "overlay_creds" {
        #[serde(flatten)]
        owner: Owner,
        override_calls: u64,
        revert_calls: u64,
    }
}
