//! The vsock layer's table.

use crate::recording::{Owner, table};

table! {
    /// vsock packets per thread, peer, port, direction and kind
    /// (`--layers vsock`).
    VsockRow = "vsock" {
        tid: u32,
        #[serde(flatten)]
        owner: Owner,
        /// The other end's context id (a guest's, seen from its host).
        peer_cid: u32,
        /// The lower of the two ports: the listening service's.
        port: u32,
        /// `received` (from the peer) or `sent`.
        direction: String,
        /// request, response (a connection accepted), rst, shutdown, rw
        /// (data), credit_update, credit_request.
        op: String,
        packets: u64,
        bytes: u64,
        /// ns since the recording started of the first and last such
        /// packet; first 0: such packets flowed before the window began.
        first_ns: u64,
        last_ns: u64,
    }
}
