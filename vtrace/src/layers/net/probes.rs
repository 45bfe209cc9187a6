//! The net layer's probes: device hops, drops, NAPI (vtrace-ebpf/src/net.rs) and the tun/vhost
//! kernel functions (vtrace-ebpf/src/tun.rs).

use crate::probes::catalog::{Layer, ProbeSpec, Strategy, kfunc_probe, tracepoint_probe};

/// The probes only `record --hops` attaches: the hops between a device's
/// queue and its driver or stack, NAPI polls, and the end of skb journeys.
pub const EVERY_HOP: &[&str] = &[
    "net_dev_queue",
    "net_dev_start_xmit",
    "netif_rx",
    "napi_gro_receive_entry",
    "napi_poll",
    "consume_skb",
];

/// In attach order.
pub const NET: &[ProbeSpec] = &[
    tracepoint_probe!(
        tp_btf "net_dev_queue",
        Layer::Net,
        "packet handed to a device's queue (transmit)",
        "net"
    ),
    ProbeSpec {
        id: "net_dev_start_xmit",
        layer: Layer::Net,
        what: "packet given to the driver",
        strategies: &[
            Strategy::BtfTracepoint {
                program: "btf_net_dev_start_xmit",
                tracepoint: "net_dev_start_xmit",
            },
            Strategy::RawTracepoint {
                program: "raw_net_dev_start_xmit",
                tracepoint: "net_dev_start_xmit",
            },
        ],
    },
    tracepoint_probe!(
        tp_btf "net_dev_xmit",
        Layer::Net,
        "driver took the packet (or refused it)",
        "net"
    ),
    tracepoint_probe!(
        tp_btf "netif_rx",
        Layer::Net,
        "packet queued for receive (veth, tun/tap, backlog)",
        "net"
    ),
    tracepoint_probe!(
        tp_btf "netif_receive_skb",
        Layer::Net,
        "packet enters the protocol stack; NET_RX time per device",
        "net"
    ),
    ProbeSpec {
        id: "napi_gro_receive_entry",
        layer: Layer::Net,
        what: "NAPI driver receive, before GRO",
        strategies: &[Strategy::RawTracepoint {
            program: "raw_napi_gro_receive_entry",
            tracepoint: "napi_gro_receive_entry",
        }],
    },
    tracepoint_probe!(
        "kfree_skb",
        Layer::Net,
        "packet dropped, with the kernel's drop reason",
        "skb"
    ),
    ProbeSpec {
        id: "napi_poll",
        layer: Layer::Net,
        what: "NAPI poll of a device: packets per poll, budget exhaustion",
        strategies: &[Strategy::RawTracepoint {
            program: "raw_napi_poll",
            tracepoint: "napi_poll",
        }],
    },
    tracepoint_probe!(
        "consume_skb",
        Layer::Net,
        "packet freed after use: ends its journey",
        "skb"
    ),
    kfunc_probe!(
        "tun:tun_get_user",
        Layer::Tun,
        "packet written to a tap by its user (VMM tx); else the tap's rx hop",
        "tun_get_user",
        "fentry_tun_get_user",
        "kprobe_tun_get_user"
    ),
    kfunc_probe!(
        "tun:tun_sendmsg",
        Layer::Tun,
        "packet sent into a tap by vhost-net",
        "tun_sendmsg",
        "fentry_tun_sendmsg",
        "kprobe_tun_sendmsg"
    ),
    kfunc_probe!(
        "tun:tun_recvmsg",
        Layer::Tun,
        "packet taken from a tap by vhost-net",
        "tun_recvmsg",
        "fentry_tun_recvmsg",
        "kprobe_tun_recvmsg"
    ),
    kfunc_probe!(
        "tun:tun_net_xmit",
        Layer::Tun,
        "packet queued to a tap for its user; else the tap's xmit hop",
        "tun_net_xmit",
        "fentry_tun_net_xmit",
        "kprobe_tun_net_xmit"
    ),
    kfunc_probe!(
        "vhost:handle_tx",
        Layer::Vhost,
        "vhost-net worker transmits guest packets",
        "handle_tx",
        "fentry_handle_tx",
        "kprobe_handle_tx"
    ),
    kfunc_probe!(
        "vhost:handle_rx",
        Layer::Vhost,
        "vhost-net worker delivers packets to the guest",
        "handle_rx",
        "fentry_handle_rx",
        "kprobe_handle_rx"
    ),
    kfunc_probe!(
        "vhost:handle_tx_kick",
        Layer::Vhost,
        "guest kicked the vhost-net tx queue",
        "handle_tx_kick",
        "fentry_handle_tx_kick",
        "kprobe_handle_tx_kick"
    ),
    kfunc_probe!(
        "vhost:handle_rx_kick",
        Layer::Vhost,
        "guest kicked the vhost-net rx queue",
        "handle_rx_kick",
        "fentry_handle_rx_kick",
        "kprobe_handle_rx_kick"
    ),
];
