//! The guest layer's tables: each guest's link, and its clock exchanges.
//! The guest's own recording is a directory beside them
//! (`guests/<guest>/`, a recording of its own: docs/recording-schema.md).

use crate::recording::table::table;

table! {
    /// One guest's agent, as the host reached it.
    GuestLinkRow = "guest_links" {
        /// Its directory under `guests/`.
        guest: String,
        /// How it was reached: `cid:3:1025`, `uds:/run/fc.vsock:1025`, `tcp:10.0.0.2:1025`.
        address: String,
        /// The VMM process whose guest it is (0 when not known: the one VM of the recording, if one).
        vmm_pid: u32,
        /// `complete` (its recording came), `silent` (the agent went quiet
        /// mid-recording: its journal holds what it sent), `failed`
        /// (nothing recorded), `refused` (its stream broke a rule).
        state: String,
        /// Why, for any state but `complete`.
        error: String,
        hostname: String,
        kernel: String,
        cpus: u32,
        /// Host ns from the recording's start: the agent's probes attached,
        /// and the last frame heard from it.
        attached_ns: u64,
        last_heard_ns: u64,
        /// What it sent: file bytes and files.
        bytes: u64,
        files: u64,
    }
}

table! {
    /// One clock exchange: the host's CLOCK_MONOTONIC when it asked and
    /// when the answer came, and the guest's when the question came.
    GuestClockRow = "guest_clock" {
        guest: String,
        seq: u64,
        host_send_ns: u64,
        guest_ns: u64,
        host_recv_ns: u64,
    }
}
