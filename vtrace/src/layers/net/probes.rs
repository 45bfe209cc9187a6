//! The net layer's probes: device hops, drops, NAPI (vtrace-ebpf/src/net/) and the tun/vhost
//! kernel functions (vtrace-ebpf/src/tun.rs).

use crate::probes::catalog::{ProbeSpec, Strategy, tracepoint_probe};

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
        "net",
        "packet handed to a device's queue (transmit)",
        "net"
    ),
    ProbeSpec {
        id: "net_dev_start_xmit",
        layer: "net",
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
        "net",
        "driver took the packet (or refused it)",
        "net"
    ),
    tracepoint_probe!(
        tp_btf "netif_rx",
        "net",
        "packet queued for receive (veth, tun/tap, backlog)",
        "net"
    ),
    tracepoint_probe!(
        tp_btf "netif_receive_skb",
        "net",
        "packet enters the protocol stack; NET_RX time per device",
        "net"
    ),
    ProbeSpec {
        id: "napi_gro_receive_entry",
        layer: "net",
        what: "NAPI driver receive, before GRO",
        strategies: &[Strategy::RawTracepoint {
            program: "raw_napi_gro_receive_entry",
            tracepoint: "napi_gro_receive_entry",
        }],
    },
    tracepoint_probe!(
        "kfree_skb",
        "net",
        "packet dropped, with the kernel's drop reason",
        "skb"
    ),
    ProbeSpec {
        id: "napi_poll",
        layer: "net",
        what: "NAPI poll of a device: packets per poll, budget exhaustion",
        strategies: &[Strategy::RawTracepoint {
            program: "raw_napi_poll",
            tracepoint: "napi_poll",
        }],
    },
    tracepoint_probe!("consume_skb", "net", "packet freed after use: ends its journey", "skb"),
];
