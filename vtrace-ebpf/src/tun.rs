//! tun/tap and vhost-net kernel functions: calls per function, for kernels
//! where they can be probed (fentry, else kprobe). Where neither can attach
//! (this project's CI kernel: no CONFIG_KPROBES, fentry refused), the tap's
//! hops come from the net tracepoints on the tap device instead (net.rs).

use aya_ebpf::{
    macros::{fentry, kprobe, map},
    maps::PerCpuArray,
    programs::{FEntryContext, ProbeContext},
};

/// Calls per function, indexed as in `FUNCTIONS` (userspace: probes/catalog.rs).
#[map]
pub static KFUNC_CALLS: PerCpuArray<u64> = PerCpuArray::with_max_entries(16, 0);

#[inline(always)]
fn called(index: u32) {
    if let Some(c) = KFUNC_CALLS.get_ptr_mut(index) {
        unsafe { *c += 1 };
    }
}

macro_rules! kfunc {
    ($index:expr, $kprobe:ident, $fentry:ident, $function:literal) => {
        #[kprobe]
        pub fn $kprobe(_ctx: ProbeContext) -> u32 {
            called($index);
            0
        }
        #[fentry(function = $function)]
        pub fn $fentry(_ctx: FEntryContext) -> i32 {
            called($index);
            0
        }
    };
}

kfunc!(0, kprobe_tun_get_user, fentry_tun_get_user, "tun_get_user");
kfunc!(1, kprobe_tun_sendmsg, fentry_tun_sendmsg, "tun_sendmsg");
kfunc!(2, kprobe_tun_recvmsg, fentry_tun_recvmsg, "tun_recvmsg");
kfunc!(3, kprobe_tun_net_xmit, fentry_tun_net_xmit, "tun_net_xmit");
kfunc!(4, kprobe_handle_tx, fentry_handle_tx, "handle_tx");
kfunc!(5, kprobe_handle_rx, fentry_handle_rx, "handle_rx");
kfunc!(6, kprobe_handle_tx_kick, fentry_handle_tx_kick, "handle_tx_kick");
kfunc!(7, kprobe_handle_rx_kick, fentry_handle_rx_kick, "handle_rx_kick");
