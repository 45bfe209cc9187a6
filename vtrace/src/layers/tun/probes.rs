//! The tun layer's probes (vtrace-ebpf/src/tun.rs): tun/tap and vhost-net
//! kernel functions. They live in modules, so fentry needs the module's
//! split BTF, which aya cannot load: kprobes are what attaches. Frames
//! queued to a tap are counted at a tracepoint instead.

use crate::probes::catalog::{ProbeSpec, Strategy, kfunc_probe};

/// tun_net_xmit's frames: attached where tun's devices were found.
pub const NET_XMIT: &str = "tun:tun_net_xmit";

pub const TUN: &[ProbeSpec] = &[
    kfunc_probe!(
        "tun:tun_get_user",
        "tun",
        "packet written to a tap by its user (VMM tx); else the tap's rx hop",
        "tun_get_user",
        "fentry_tun_get_user",
        "kprobe_tun_get_user"
    ),
    kfunc_probe!(
        "tun:tun_sendmsg",
        "tun",
        "packet sent into a tap by vhost-net",
        "tun_sendmsg",
        "fentry_tun_sendmsg",
        "kprobe_tun_sendmsg"
    ),
    kfunc_probe!(
        "tun:tun_recvmsg",
        "tun",
        "packet taken from a tap by vhost-net",
        "tun_recvmsg",
        "fentry_tun_recvmsg",
        "kprobe_tun_recvmsg"
    ),
    // A VMM's read/readv on its tap (Firecracker, QEMU without vhost): the
    // other caller of tun_do_read. Entry finds the tap, return the frame's
    // size: kprobe + kretprobe (no fexit strategy; module functions get no
    // fentry anyway). The return probe must follow the entry probe.
    ProbeSpec {
        id: "tun:tun_chr_read_iter",
        layer: "tun",
        what: "packet read from a tap by its user (VMM rx: read/readv)",
        strategies: &[Strategy::KProbe {
            program: "kprobe_tun_chr_read_iter",
            function: "tun_chr_read_iter",
        }],
    },
    ProbeSpec {
        id: "tun:tun_chr_read_iter.ret",
        layer: "tun",
        what: "its return: the frame's size (with the vnet header)",
        strategies: &[Strategy::KProbe {
            program: "kretprobe_tun_chr_read_iter",
            function: "tun_chr_read_iter",
        }],
    },
    // Its calls counted where the stack starts each (net_dev_start_xmit,
    // on tun's devices): a tracepoint misses none, where a kprobe in the
    // forwarding softirq misses those that interrupted another kprobe.
    ProbeSpec {
        id: NET_XMIT,
        layer: "tun",
        what: "packet queued to a tap for its user (tun_net_xmit, counted at net_dev_start_xmit on tun's devices)",
        strategies: &[
            Strategy::BtfTracepoint {
                program: "btf_tun_net_dev_start_xmit",
                tracepoint: "net_dev_start_xmit",
            },
            Strategy::RawTracepoint {
                program: "raw_tun_net_dev_start_xmit",
                tracepoint: "net_dev_start_xmit",
            },
        ],
    },
    kfunc_probe!(
        "vhost:handle_tx",
        "vhost",
        "vhost-net worker transmits guest packets",
        "handle_tx",
        "fentry_handle_tx",
        "kprobe_handle_tx"
    ),
    kfunc_probe!(
        "vhost:handle_rx",
        "vhost",
        "vhost-net worker delivers packets to the guest",
        "handle_rx",
        "fentry_handle_rx",
        "kprobe_handle_rx"
    ),
    kfunc_probe!(
        "vhost:handle_tx_kick",
        "vhost",
        "guest kicked the vhost-net tx queue",
        "handle_tx_kick",
        "fentry_handle_tx_kick",
        "kprobe_handle_tx_kick"
    ),
    kfunc_probe!(
        "vhost:handle_rx_kick",
        "vhost",
        "guest kicked the vhost-net rx queue",
        "handle_rx_kick",
        "fentry_handle_rx_kick",
        "kprobe_handle_rx_kick"
    ),
];
