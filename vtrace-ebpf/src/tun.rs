//! tun/tap and vhost-net kernel functions: calls per function, for kernels
//! where they can be probed (fentry, else kprobe). Where neither can attach
//! (this project's CI kernel: no CONFIG_KPROBES, fentry refused), the tap's
//! hops come from the net tracepoints on the tap device instead (net.rs).

use aya_ebpf::{
    macros::{fentry, kprobe},
    programs::{FEntryContext, ProbeContext},
};

use crate::runs::count_run;

/// Each program counts its calls in HOOK_RUNS (runs.rs), under the function's name.
macro_rules! kfunc {
    ($kprobe:ident, $fentry:ident, $function:literal) => {
        #[kprobe]
        pub fn $kprobe(_ctx: ProbeContext) -> u32 {
            count_run!($function);
            0
        }
        #[fentry(function = $function)]
        pub fn $fentry(_ctx: FEntryContext) -> i32 {
            count_run!($function);
            0
        }
    };
}

kfunc!(kprobe_tun_get_user, fentry_tun_get_user, "tun_get_user");
kfunc!(kprobe_tun_sendmsg, fentry_tun_sendmsg, "tun_sendmsg");
kfunc!(kprobe_tun_recvmsg, fentry_tun_recvmsg, "tun_recvmsg");
kfunc!(kprobe_tun_net_xmit, fentry_tun_net_xmit, "tun_net_xmit");
kfunc!(kprobe_handle_tx, fentry_handle_tx, "handle_tx");
kfunc!(kprobe_handle_rx, fentry_handle_rx, "handle_rx");
kfunc!(kprobe_handle_tx_kick, fentry_handle_tx_kick, "handle_tx_kick");
kfunc!(kprobe_handle_rx_kick, fentry_handle_rx_kick, "handle_rx_kick");
