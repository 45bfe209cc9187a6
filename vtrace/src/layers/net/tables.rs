//! The net layer's tables: devices, hops, sizes, hop latency, tun fds, drops.

use crate::recording::table;

table! {
    /// One network device seen during the run: its owner, its NET_RX softirq
    /// time, and its own counters (/proc/net/dev) over the same window.
    NetDeviceRow = "net_devices" {
        netns: u32,
        ifindex: u32,
        name: String,
        /// veth, tun, tap, bridge, loopback, device, ...
        kind: String,
        platform: String,
        instance: String,
        /// tap, veth, veth-peer, bridge, vf, or empty.
        role: String,
        /// NET_RX softirq time spent on this device's received packets.
        softirq_ns: u64,
        /// NAPI polls of the device, packets they processed, and polls that used their whole budget.
        napi_polls: u64,
        napi_packets: u64,
        napi_budget_exhausted: u64,
        counter_rx_packets: u64,
        counter_rx_bytes: u64,
        counter_tx_packets: u64,
        counter_tx_bytes: u64,
    }
}

table! {
    /// Packets through one device at one hop.
    NetHopRow = "net_hops" version 2 {
        netns: u32,
        ifindex: u32,
        /// queue, start_xmit, xmit, rx, receive, gro.
        hop: String,
        /// tx or rx.
        direction: String,
        packets: u64,
        /// With the link-layer header, as device counters count.
        bytes: u64,
        gso_packets: u64,
        /// Segments on the wire (1 per non-GSO packet).
        gso_segs: u64,
        errors: u64,
        /// The largest packet (with its link-layer header) seen since the probes attached.
        max_bytes: u64 [since 2],
        /// The device's MTU plus its link-layer header: a full frame (0 when unknown).
        mtu_edge: u64 [since 2],
    }
}

table! {
    /// Size histograms per device and hop: `kind` "mtu" (bucket upper bounds 64 ... 65536 and,
    /// from version 2 on, the device's MTU edge among them; then 4294967295 for larger) or
    /// "log2" (`le` = 2^(i+1) - 1).
    NetSizeRow = "net_sizes" version 2 {
        netns: u32,
        ifindex: u32,
        hop: String,
        kind: String,
        le: u64,
        count: u64,
    }
}

table! {
    /// Latency from one hop to the next of the same packet (skb), in-kernel
    /// log2 histograms summarised: p50/p99 are bucket upper bounds.
    NetLatencyRow = "net_latency" {
        from_netns: u32,
        from_ifindex: u32,
        from_hop: String,
        to_netns: u32,
        to_ifindex: u32,
        to_hop: String,
        count: u64,
        sum_ns: u64,
        p50_ns: u64,
        p99_ns: u64,
    }
}

table! {
    /// read/write syscalls of a process on a tun/tap fd: the VMM (or other
    /// user-space backend) side of a tap. Their sizes are in net_sizes with
    /// hop `fd_read` / `fd_write`.
    TunIoRow = "tun_io" {
        pid: u32,
        comm: String,
        device: String,
        netns: u32,
        ifindex: u32,
        /// read (packets from the tap to the process) or write (into the tap).
        direction: String,
        calls: u64,
        bytes: u64,
    }
}

table! {
    /// skbs freed as dropped (kfree_skb), per kernel drop reason, what they
    /// carried, device and freeing function, and whether a packet was lost:
    /// an skb with no protocol (a vsock packet, a unix-socket message) freed
    /// this way is a message consumed, and some network frames are freed so
    /// after they were delivered (`fate`).
    NetDropRow = "net_drops" version 2 {
        reason: String,
        /// The frame's EtherType by name (IPv4, IPv6, ARP) or number
        /// (0x88cc); "none" for an skb that carries no network frame; empty
        /// in version 1, which counted every kind as a drop.
        protocol: String [since 2],
        /// A packet lost: a network frame no one received.
        lost: bool [since 2],
        /// "lost", or what became of it instead: "no network frame", "raw
        /// sockets took it" (ICMP), "unread at socket close".
        fate: String [since 2],
        /// The skb's device then (0/0: none).
        netns: u32 [since 2],
        ifindex: u32 [since 2],
        /// The kernel function that freed it (kallsyms; its address when unnamed).
        location: String [since 2],
        count: u64,
    }
}

table! {
    /// Packets and bytes per device and hop per snapshot interval (the time series).
    NetIntervalRow = "net_intervals" {
        /// Interval start and end, ns since the recording started.
        start_ns: u64,
        end_ns: u64,
        netns: u32,
        ifindex: u32,
        hop: String,
        packets: u64,
        bytes: u64,
    }
}
