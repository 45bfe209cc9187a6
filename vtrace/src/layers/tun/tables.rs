//! The tun layer's table: tun/tap and vhost-net functions per device and process.

use crate::recording::{Owner, table};

table! {
    /// Calls of a tun/vhost-net kernel function per device and calling
    /// process, the frames they moved (a vhost-net batch is many frames in
    /// one tun_sendmsg), bytes (tun_get_user's include the vnet header of a
    /// tap opened with IFF_VNET_HDR), and frame sizes (`sizes`: frames up to
    /// 64 B, 128 B, ... 4096 B, larger). `method`: fentry or kprobe.
    TunRow = "tun" {
        device: String,
        netns: u32,
        ifindex: u32,
        function: String,
        #[serde(flatten)]
        owner: Owner,
        method: String,
        calls: u64,
        frames: u64,
        bytes: u64,
        sizes: String,
    }
}
