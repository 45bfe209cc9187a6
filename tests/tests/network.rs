//! Network path: per-device packet and byte counts against the devices' own
//! counters (netns + veth, netns + bridge + veth, tap + the lwIP server), and
//! the packet-size effect of a stack without TSO/GSO (lwIP) next to Linux's.

use std::process::Command;

use serde_json::Value;
use vtrace_tests::{LabDown, TempDir, num, report_json, stderr, vtrace, vtrace_env};

fn lab(platform: &'static str) -> LabDown {
    let o = vtrace(&["lab", "up", platform]);
    assert!(o.status.success(), "lab up {platform}: {}", stderr(&o));
    LabDown::new(&[platform])
}

fn record(dir: &TempDir, name: &str, cmd: &[&str]) -> Value {
    record_with(dir, name, &[], cmd)
}

/// `vtrace record FLAGS -o DIR/NAME -- CMD`, then its JSON report.
fn record_with(dir: &TempDir, name: &str, flags: &[&str], cmd: &[&str]) -> Value {
    record_env(dir, name, flags, &[], cmd)
}

/// As [`record_with`], vtrace run with extra environment variables.
fn record_env(dir: &TempDir, name: &str, flags: &[&str], env: &[(&str, &str)], cmd: &[&str]) -> Value {
    let rec = dir.join(name);
    let mut args = vec!["record"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["-o", rec.to_str().unwrap(), "--"]);
    args.extend_from_slice(cmd);
    let o = vtrace_env(&args, env);
    assert!(o.status.success(), "record {cmd:?}: {}", stderr(&o));
    report_json(&rec)
}

fn hop<'a>(r: &'a Value, dev: &str, hop: &str) -> Option<&'a Value> {
    r["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == dev && d["hop"] == hop)
}

/// Packets and bytes the driver took (the xmit hop, after software GSO split
/// aggregates for devices without TSO) equal the device's tx counters, and at
/// the receive hop its rx counters, over the same window.
fn assert_counters_agree(r: &Value, dev: &str) {
    let c = r["device_counters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == dev)
        .unwrap_or_else(|| panic!("{dev} not seen"));
    let tx = hop(r, dev, "xmit")
        .map(|h| (num(h, "packets"), num(h, "bytes")))
        .unwrap_or((0, 0));
    let rx = hop(r, dev, "receive")
        .map(|h| (num(h, "packets"), num(h, "bytes")))
        .unwrap_or((0, 0));
    eprintln!(
        "{dev:<12} tx vtrace {:>7} pkts {:>10} B | counters {:>7} pkts {:>10} B ; rx vtrace {:>7} pkts {:>10} B | counters {:>7} pkts {:>10} B",
        tx.0,
        tx.1,
        num(c, "tx_packets"),
        num(c, "tx_bytes"),
        rx.0,
        rx.1,
        num(c, "rx_packets"),
        num(c, "rx_bytes")
    );
    assert!(tx.0 + rx.0 > 0, "{dev}: no traffic seen");
    // The kernel skips a BPF program while that same program runs on the CPU
    // (a softirq transmitting from inside it); those skips are counted, and
    // the only events vtrace may lack.
    let misses = |probe: &str| {
        r["overhead"]["programs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["probe"] == probe)
            .map(|p| num(p, "recursion_misses"))
            .unwrap_or(0)
    };
    let (tx_missed, rx_missed) = (misses("net_dev_xmit"), misses("netif_receive_skb"));
    // (tun/tap count a packet as transmitted when the user-space side reads
    // it, not when the kernel hands it over; the workloads here leave no
    // packet in the ring at either edge of the window, so that is exact too.)
    if tx_missed == 0 {
        assert_eq!(tx, (num(c, "tx_packets"), num(c, "tx_bytes")), "{dev} tx");
    } else {
        assert!(
            tx.0 <= num(c, "tx_packets") && num(c, "tx_packets") <= tx.0 + tx_missed,
            "{dev} tx, {tx_missed} missed"
        );
    }
    assert_eq!(rx_missed, 0, "receive events skipped");
    // A bridge counts frames it passes up to the host without their Ethernet
    // header (br_pass_frame_up adds skb->len after eth_type_trans): the one
    // documented exception, 14 bytes per packet.
    let rx_bytes = if c["kind"] == "bridge" { rx.1 - 14 * rx.0 } else { rx.1 };
    assert_eq!((rx.0, rx_bytes), (num(c, "rx_packets"), num(c, "rx_bytes")), "{dev} rx");
}

#[test]
fn veth_counts_match_device_counters() {
    veth_counts_through(&[], "tp_btf");
}

/// The raw-tracepoint fallback reads the skb through helper calls rather
/// than typed loads: the same counts.
#[test]
fn veth_counts_match_device_counters_through_the_raw_tp_fallback() {
    veth_counts_through(&[("VTRACE_SKIP_METHODS", "tp_btf")], "raw_tp");
}

fn veth_counts_through(env: &[(&str, &str)], method: &str) {
    let dir = TempDir::new(&format!("net-veth-{method}"));
    let _lab = lab("host");
    let r = record_env(
        &dir,
        "veth.vtrace",
        &[],
        env,
        &[
            "redis-benchmark",
            "-h",
            "10.99.11.2",
            "-t",
            "get,set",
            "-d",
            "1024",
            "-n",
            "5000",
            "-c",
            "10",
            "-q",
        ],
    );
    let probe = |id: &str| r["probes"].as_array().unwrap().iter().find(|p| p["id"] == id);
    // The default: the two hops that match the devices' counters, no skb
    // correlation (every other hop and consume_skb come with --hops).
    for hop in ["net_dev_xmit", "netif_receive_skb"] {
        assert_eq!(probe(hop).unwrap()["method"], method, "{hop}");
    }
    for hop in ["net_dev_queue", "netif_rx", "consume_skb", "napi_poll"] {
        assert!(probe(hop).is_none(), "{hop} attached without --hops");
    }
    assert_eq!(
        r["hops"].as_array().map_or(0, |l| l.len()),
        0,
        "hop latency without --hops"
    );
    assert_counters_agree(&r, "vtl-host0");
    assert_counters_agree(&r, "vtl-host1");
    let dev = r["device_counters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "vtl-host1")
        .unwrap();
    assert!(
        num(dev, "softirq_ns") > 0,
        "NET_RX softirq time charged to the namespace's veth: {dev}"
    );
}

fn sh(args: &[&str]) {
    let o = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

/// Links made for a test by `ip`/`tc`/`sysctl` commands, torn down by its
/// teardown commands on drop, even if a step failed or the test panicked.
struct Wiring(&'static [&'static str]);

impl Wiring {
    fn up(setup: &[&str], teardown: &'static [&'static str]) -> Self {
        let w = Wiring(teardown);
        for cmd in setup {
            sh(&cmd.split(' ').collect::<Vec<_>>());
        }
        w
    }
}

impl Drop for Wiring {
    fn drop(&mut self) {
        for cmd in self.0 {
            let _ = Command::new("sh").arg("-c").arg(format!("{cmd} 2>/dev/null")).status();
        }
    }
}

/// A bridge with a veth port into a namespace, traffic from ping.
fn bridge() -> Wiring {
    Wiring::up(
        &[
            "ip netns add vtt-br",
            "ip link add vtt-br0 type bridge",
            "ip link add vtt-v0 type veth peer name vtt-v1",
            "ip link set vtt-v0 master vtt-br0",
            "ip link set vtt-v1 netns vtt-br",
            // Nothing sent from a timer: no IPv6 (router solicitations, MLD,
            // DAD) and no multicast (IGMP reports). On this project's machine
            // no BPF program runs while the sandbox's init (PID 1) is the
            // current task, and a timer's frame sent then is one the device
            // counts and vtrace cannot see: a fresh-clone run missed one
            // 54-byte frame on vtt-br0, an IGMPv3 report's size.
            "sysctl -qw net.ipv6.conf.vtt-br0.disable_ipv6=1",
            "sysctl -qw net.ipv6.conf.vtt-v0.disable_ipv6=1",
            "ip netns exec vtt-br sysctl -qw net.ipv6.conf.vtt-v1.disable_ipv6=1",
            "ip link set vtt-br0 multicast off",
            "ip link set vtt-v0 multicast off",
            "ip -n vtt-br link set vtt-v1 multicast off",
            "ip addr add 10.99.21.1/24 dev vtt-br0",
            "ip link set vtt-br0 up",
            "ip link set vtt-v0 up",
            "ip -n vtt-br addr add 10.99.21.2/24 dev vtt-v1",
            "ip -n vtt-br link set vtt-v1 up",
        ],
        &["ip link del vtt-br0", "ip link del vtt-v0", "ip netns del vtt-br"],
    )
}

#[test]
fn bridge_and_veth_counts_match_device_counters() {
    let dir = TempDir::new("net-bridge");
    let _bridge = bridge();
    let r = record(
        &dir,
        "bridge.vtrace",
        &["ping", "-c", "200", "-i", "0.002", "-s", "1200", "-q", "10.99.21.2"],
    );
    for dev in ["vtt-br0", "vtt-v0", "vtt-v1"] {
        assert_counters_agree(&r, dev);
    }
}

#[test]
fn tap_with_lwip_counts_match_device_counters() {
    let dir = TempDir::new("net-tap");
    let _lab = lab("lwip");
    // The host acknowledges lwIP's segments at once, not from its delayed-ACK
    // timer. That timer fires in a softirq on whatever thread is running,
    // and on this project's machine no BPF program runs while the
    // sandbox's init (process_api, PID 1) is the current task; tracefs still
    // sees those events. Bursts of ten such ACKs (one per connection) were
    // the only xmits vtrace lacked here, every one on a PID 1 thread.
    let route = String::from_utf8(
        Command::new("ip")
            .args(["route", "show", "dev", "vtl-lwip0"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let route: Vec<&str> = route
        .lines()
        .next()
        .expect("a route via vtl-lwip0")
        .split_whitespace()
        .collect();
    let mut change = vec!["route", "change"];
    change.extend_from_slice(&route[..1]);
    change.extend_from_slice(&["dev", "vtl-lwip0"]);
    change.extend_from_slice(&route[1..]);
    change.extend_from_slice(&["quickack", "1"]);
    assert!(
        Command::new("ip").args(&change).status().unwrap().success(),
        "ip {change:?}"
    );
    // The shell waits after the benchmark so that its connections have closed
    // (lwIP answers FINs slowly) before the device counters are read.
    let r = record(
        &dir,
        "tap.vtrace",
        &[
            "sh",
            "-c",
            "redis-benchmark -h 10.99.18.2 -t get,set -d 1024 -n 3000 -c 10 -q >/dev/null && sleep 1",
        ],
    );
    assert_counters_agree(&r, "vtl-lwip0");
    // The tun layer's frames queued to the tap (counted at net_dev_start_xmit
    // on a device that transmits with tun_net_xmit: no kprobe here) are what
    // lwIP's reads took, the tap's tx_packets; its bytes theirs.
    let c = r["device_counters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "vtl-lwip0")
        .unwrap();
    // A row per process the frames were queued from (the sender's, or the
    // one a softirq interrupted).
    let xmit: Vec<&Value> = r["tun"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["device"] == "vtl-lwip0" && t["function"] == "tun_net_xmit")
        .collect();
    assert!(
        !xmit.is_empty() && xmit.iter().all(|t| t["method"] == "tp_btf"),
        "tun_net_xmit rows for vtl-lwip0: {xmit:?}"
    );
    let sum = |field: &str| xmit.iter().map(|t| num(t, field)).sum::<u64>();
    assert_eq!(
        (sum("frames"), sum("bytes")),
        (num(c, "tx_packets"), num(c, "tx_bytes")),
        "{xmit:?} against {c}"
    );
}

/// Largest size-histogram bucket with packets at a device's hop.
fn largest_bucket(r: &Value, dev: &str, hop_name: &str) -> u64 {
    let h = hop(r, dev, hop_name).unwrap_or_else(|| panic!("{dev} {hop_name} not seen"));
    h["size_hist"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| num(b, "count") > 0)
        .map(|b| num(b, "le"))
        .max()
        .unwrap()
}

/// (full-frame edge, packets above it, largest packet) of a device's hop:
/// the edge is the device's MTU plus its link-layer header, read in the kernel.
fn against_mtu(r: &Value, dev: &str, hop_name: &str) -> (u64, u64, u64) {
    let h = hop(r, dev, hop_name).unwrap_or_else(|| panic!("{dev} {hop_name} not seen"));
    let edge = num(h, "mtu_edge");
    let above = h["size_hist"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| num(b, "le") > edge)
        .map(|b| num(b, "count"))
        .sum();
    (edge, above, num(h, "max_bytes"))
}

#[test]
fn lwip_sends_mtu_sized_segments_where_linux_sends_gso_aggregates() {
    let dir = TempDir::new("net-table2");
    let _host = lab("host");
    let _lwip = lab("lwip");
    let bench = |addr: &str, size: &str, name: &str| {
        record(
            &dir,
            name,
            &[
                "redis-benchmark",
                "-h",
                addr,
                "-t",
                "set,get",
                "-d",
                size,
                "-n",
                "2000",
                "-c",
                "10",
                "-q",
            ],
        )
    };
    // Server -> client: the Linux server's replies leave its namespace on vtl-host1
    // (xmit) and arrive on vtl-host0; lwIP's arrive from the tap (receive on vtl-lwip0).
    let mut table = Vec::new();
    for size in ["64", "16384"] {
        let linux = bench("10.99.11.2", size, &format!("linux-{size}.vtrace"));
        let lwip = bench("10.99.18.2", size, &format!("lwip-{size}.vtrace"));
        let l = largest_bucket(&linux, "vtl-host0", "receive");
        let w = largest_bucket(&lwip, "vtl-lwip0", "receive");
        let mean = |r: &Value, dev: &str| {
            let h = hop(r, dev, "receive").unwrap();
            num(h, "bytes") / num(h, "packets").max(1)
        };
        table.push(format!(
            "{size:>6} B GET | Linux veth: mean {:>6} B, largest bucket <= {l:>6} | lwIP tap: mean {:>5} B, largest bucket <= {w:>5}",
            mean(&linux, "vtl-host0"),
            mean(&lwip, "vtl-lwip0")
        ));
        let (l_edge, l_above, l_max) = against_mtu(&linux, "vtl-host0", "receive");
        let (w_edge, w_above, w_max) = against_mtu(&lwip, "vtl-lwip0", "receive");
        table.push(format!(
            "         against the MTU | Linux veth: edge {l_edge} B, {l_above} above, largest {l_max} B | lwIP tap: edge {w_edge} B, {w_above} above, largest {w_max} B"
        ));
        // The edges are the devices' own: 1500 + 14 on the veth, 576 + 14 on the tap.
        assert_eq!((l_edge, w_edge), (1514, 590));
        assert_eq!(w_above, 0, "lwIP never exceeds its MTU at the tap");
        assert!(w_max <= w_edge, "largest lwIP frame {w_max} B");
        if size == "64" {
            assert!(
                l <= 256 && w <= 256,
                "64 B values: small packets everywhere (linux {l}, lwip {w})"
            );
        } else {
            assert!(
                l > 1500,
                "Linux hands GSO aggregates above the MTU to the veth (largest bucket {l})"
            );
            assert!(
                w <= 1024,
                "lwIP's packets at the tap stay within its MTU of 576 + 14 (largest bucket {w})"
            );
            assert!(
                l_above > 0 && l_max > l_edge,
                "Linux's GSO aggregates exceed the veth's MTU edge"
            );
            assert_eq!(w_max, w_edge, "lwIP fills whole frames with 16 KB values");
        }
    }
    eprintln!("{}", table.join("\n"));
}

fn uprobe<'a>(r: &'a Value, probe: &str) -> Vec<&'a Value> {
    r["uprobes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["probe"] == probe)
        .collect()
}

#[test]
fn lwip_stack_functions_are_seen_with_their_sizes() {
    let dir = TempDir::new("uprobe-lwip");
    let _lwip = lab("lwip");
    let r = record_with(
        &dir,
        "lwip.vtrace",
        &["--platform", "lwip"],
        &[
            "redis-benchmark",
            "-h",
            "10.99.18.2",
            "-t",
            "set,get",
            "-d",
            "16384",
            "-n",
            "500",
            "-c",
            "5",
            "-q",
        ],
    );
    // The application writes 16 KB values; the stack sends them as frames within its MTU.
    let write = uprobe(&r, "lwip:tcp_write");
    assert_eq!(write.len(), 1, "{}", r["uprobes"]);
    assert_eq!(write[0]["platform"], "lwip", "attributed to the lwip instance");
    assert!(num(write[0], "calls") >= 500, "{}", write[0]);
    let frames = uprobe(&r, "lwip:ethernet_output");
    let biggest = frames[0]["size_hist"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| num(b, "count") > 0)
        .map(|b| num(b, "le"))
        .max()
        .unwrap();
    assert!(biggest <= 1024, "lwIP frames within MTU 576: largest bucket {biggest}");
    let mean = num(frames[0], "bytes") / num(frames[0], "calls");
    eprintln!(
        "lwIP: tcp_write mean {} B, ethernet_output mean {mean} B over {} frames",
        num(write[0], "bytes") / num(write[0], "calls"),
        num(frames[0], "calls")
    );
}

#[test]
fn a_user_uprobe_with_return_measures_latency() {
    let dir = TempDir::new("uprobe-ret");
    let r = record_with(
        &dir,
        "sleep.vtrace",
        &["--uprobe", "libc.so.6:clock_nanosleep:ret"],
        &["sleep", "0.3"],
    );
    let calls = uprobe(&r, "uprobe:libc.so.6:clock_nanosleep");
    let rets = uprobe(&r, "uretprobe:libc.so.6:clock_nanosleep");
    let call = calls
        .iter()
        .find(|u| u["comm"] == "sleep")
        .unwrap_or_else(|| panic!("sleep not seen: {}", r["uprobes"]));
    assert_eq!(num(call, "calls"), 1);
    let ret = rets
        .iter()
        .find(|u| u["comm"] == "sleep")
        .unwrap_or_else(|| panic!("sleep return not seen: {}", r["uprobes"]));
    assert_eq!(num(ret, "returns"), 1);
    let ms = num(ret, "latency_sum_ns") as f64 / 1e6;
    assert!(
        (ms - 300.0).abs() < 30.0,
        "clock_nanosleep took {ms} ms, the sleep was 300 ms"
    );
}

/// The host's recording (no platform chosen) attaches the catalog's uprobes
/// only where a process runs their binary at the start (each detach waits
/// for a grace period): QEMU's with a QEMU running, lwIP's left out, each
/// with why; with no QEMU, QEMU's are left out too.
#[test]
fn the_host_recording_attaches_the_catalogs_uprobes_only_where_their_binary_runs() {
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let dir = TempDir::new("uprobe-catalog");
    let probes = |r: &Value, family: &str| -> Vec<Value> {
        r["probes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["id"].as_str().unwrap().starts_with(family))
            .cloned()
            .collect()
    };
    let left_out = |p: &Value, binary: &str| {
        p["available"] == false
            && p["reason"]
                .as_str()
                .is_some_and(|r| r.contains(&format!("no process ran {binary} at the start")))
    };
    // A paused QEMU without a machine: its /proc/PID/exe is QEMU's binary
    // (spawn returns once the exec is done).
    let qemu = Killed(
        Command::new("qemu-system-x86_64")
            .args(["-machine", "none", "-nodefaults", "-display", "none", "-S"])
            .spawn()
            .expect("qemu-system-x86_64"),
    );
    let r = record_with(&dir, "with-qemu.vtrace", &[], &["true"]);
    let (qemus, lwips) = (probes(&r, "qemu:"), probes(&r, "lwip:"));
    assert_eq!(qemus.len(), 4, "{qemus:?}");
    assert!(qemus.iter().all(|p| p["available"] == true), "{qemus:?}");
    assert_eq!(lwips.len(), 6, "{lwips:?}");
    assert!(lwips.iter().all(|p| left_out(p, "liblwip.so.0")), "{lwips:?}");
    drop(qemu);
    let r = record_with(&dir, "without.vtrace", &[], &["true"]);
    let qemus = probes(&r, "qemu:");
    assert!(
        qemus.len() == 4 && qemus.iter().all(|p| left_out(p, "qemu-system-x86_64")),
        "{qemus:?}"
    );
}

#[test]
fn qemu_guest_traffic_is_seen_at_the_vmm_and_the_tap() {
    let dir = TempDir::new("qemu-path");
    let _vm = lab("linuxvm");
    let r = record_with(
        &dir,
        "vm.vtrace",
        &["--platform", "linuxvm"],
        &[
            "redis-benchmark",
            "-h",
            "10.99.14.2",
            "-t",
            "set,get",
            "-d",
            "64",
            "-n",
            "2000",
            "-c",
            "5",
            "-q",
        ],
    );
    // (virtio_queue_notify is attached too; QEMU's TCG guest kicks through another path.)
    for probe in ["qemu:qemu_sendv_packet_async", "qemu:virtio_notify"] {
        let u = uprobe(&r, probe);
        let vmm = u
            .iter()
            .find(|u| u["platform"] == "linuxvm")
            .unwrap_or_else(|| panic!("{probe} not seen for linuxvm: {}", r["uprobes"]));
        assert!(num(vmm, "calls") > 1000, "{probe}: {vmm}");
        eprintln!(
            "{probe}: {} calls by {} ({})",
            num(vmm, "calls"),
            vmm["comm"],
            vmm["instance"]
        );
    }
    // The packets the VMM's backend sent are the tap's received ones.
    let sent = num(
        uprobe(&r, "qemu:qemu_sendv_packet_async")
            .iter()
            .find(|u| u["platform"] == "linuxvm")
            .unwrap(),
        "calls",
    );
    let tap = hop(&r, "vtl-vm0", "receive").expect("tap receive hop");
    assert_eq!(tap["platform"], "linuxvm", "the tap belongs to the instance: {tap}");
    let received = num(tap, "packets");
    eprintln!("guest -> tap: {sent} qemu_sendv_packet_async calls, {received} packets received on vtl-vm0");
    assert!(
        received <= sent && received * 100 >= sent * 95,
        "sent {sent}, received {received}"
    );
    // The VMM's own syscalls on its tap fd: what it reads is what the tap
    // transmitted; what it writes is what the tap received. QEMU's tap fd
    // carries a 12-byte virtio-net header per packet.
    let io = r["tun_io"].as_array().unwrap();
    let dir = |d: &str| {
        io.iter()
            .find(|t| t["direction"] == d && t["device"] == "vtl-vm0")
            .unwrap_or_else(|| panic!("{d}: {io:?}"))
    };
    let xmit = hop(&r, "vtl-vm0", "xmit").expect("tap xmit hop");
    assert_eq!(num(dir("read"), "calls"), num(xmit, "packets"), "VMM reads vs tap xmit");
    assert_eq!(
        num(dir("read"), "bytes"),
        num(xmit, "bytes") + 12 * num(xmit, "packets"),
        "read bytes = frames + vnet headers"
    );
    // Exact: the tun fd counts are read right beside the hops at both ends
    // of the window (a fresh-clone run once read 4037 writes against 4034
    // receives when they were read milliseconds apart, with a baseline for
    // the hops only).
    let writes = num(dir("write"), "calls");
    assert_eq!(writes, received, "VMM writes vs tap receive");
    eprintln!(
        "VMM fd: {} reads = {} tap xmit; {writes} writes vs {received} tap receive",
        num(dir("read"), "calls"),
        num(xmit, "packets")
    );
}

/// `--hops`: every hop, NAPI polls and the skb correlation behind hop
/// latency, which the default leaves off.
#[test]
fn hops_option_attaches_every_hop_and_measures_hop_latency() {
    let dir = TempDir::new("net-hops");
    let _host = lab("host");
    let r = record_with(
        &dir,
        "hops.vtrace",
        &["--hops"],
        &[
            "redis-benchmark",
            "-h",
            "10.99.11.2",
            "-t",
            "set",
            "-n",
            "2000",
            "-c",
            "5",
            "-q",
        ],
    );
    for id in [
        "net_dev_queue",
        "net_dev_start_xmit",
        "netif_rx",
        "napi_poll",
        "consume_skb",
    ] {
        let p = r["probes"].as_array().unwrap().iter().find(|p| p["id"] == id);
        assert_eq!(p.map(|p| p["available"].clone()), Some(true.into()), "{id}");
    }
    assert_eq!(r["mode"], "default + hops");
    let queued = hop(&r, "vtl-host0", "queue").map_or(0, |h| num(h, "packets"));
    assert!(queued >= 2000, "vtl-host0 queue hop: {queued} packets for 2000 SETs");
    let hops = r["hops"].as_array().unwrap();
    let edge = hops
        .iter()
        .find(|h| h["from"] == "vtl-host0:queue" && h["to"] == "vtl-host0:start_xmit")
        .unwrap_or_else(|| panic!("queue -> start_xmit missing: {hops:?}"));
    assert!(num(edge, "count") > 1000 && num(edge, "mean_ns") > 0, "{edge}");
}

#[test]
fn hop_latency_and_per_packet_journeys() {
    let dir = TempDir::new("net-journeys");
    let _host = lab("host");
    let r = record_with(
        &dir,
        "events.vtrace",
        &["--events"],
        &[
            "redis-benchmark",
            "-h",
            "10.99.11.2",
            "-t",
            "set,get",
            "-d",
            "1024",
            "-n",
            "2000",
            "-c",
            "5",
            "-q",
        ],
    );
    let hops = r["hops"].as_array().unwrap();
    let edge = |from: &str, to: &str| {
        hops.iter()
            .find(|h| h["from"] == from && h["to"] == to)
            .unwrap_or_else(|| panic!("{from} -> {to} missing: {hops:?}"))
    };
    // One packet host -> namespace, hop by hop along the veth pair.
    let path = [
        "vtl-host0:queue",
        "vtl-host0:start_xmit",
        "vtl-host1:rx",
        "vtl-host0:xmit",
    ];
    let mut total = 0;
    for w in path.windows(2) {
        let e = edge(w[0], w[1]);
        assert!(num(e, "count") > 1000 && num(e, "mean_ns") > 0, "{e}");
        assert!(num(e, "p50_ns") <= num(e, "p99_ns"), "{e}");
        total += num(e, "mean_ns");
    }
    let rx = edge("vtl-host0:xmit", "vtl-host1:receive");
    assert!(num(rx, "count") > 1000, "{rx}");
    eprintln!(
        "host -> ns, queue to xmit: {total} ns mean; xmit to the peer's receive: {} ns mean",
        num(rx, "mean_ns")
    );
    // Per-packet events: the same skb followed across hops.
    let j = &r["journeys"];
    assert!(num(j, "events") > 10_000, "{j}");
    assert!(num(j, "multi_hop") > 1000, "{j}");
    let longest = j["longest"].as_array().unwrap();
    assert!(
        longest.len() >= 2 && longest.iter().all(|e| e["skb"] == longest[0]["skb"]),
        "{j}"
    );
    assert_eq!(r["overhead"]["net_event_drops"], 0, "no events lost at this load");
}

/// Kata's wiring without its VM: a pod namespace whose veth to the host
/// (vtt-me, Kata's eth0) and a veth to a "guest" namespace (vtt-mt, Kata's
/// tap0_kata) are joined by tc mirred both ways, as Kata's tcfilter model
/// joins eth0 and the tap.
fn mirred() -> Wiring {
    Wiring::up(
        &[
            "ip netns add vtt-mr",
            "ip netns add vtt-mg",
            "ip link add vtt-mh type veth peer name vtt-me netns vtt-mr",
            "ip -n vtt-mr link add vtt-mt type veth peer name vtt-mg0 netns vtt-mg",
            // IPv4 only and no multicast: nothing sent from a timer.
            "sysctl -qw net.ipv6.conf.vtt-mh.disable_ipv6=1",
            "ip netns exec vtt-mr sysctl -qw net.ipv6.conf.all.disable_ipv6=1",
            "ip netns exec vtt-mg sysctl -qw net.ipv6.conf.all.disable_ipv6=1",
            "ip link set vtt-mh multicast off",
            "ip -n vtt-mr link set vtt-me multicast off",
            "ip -n vtt-mr link set vtt-mt multicast off",
            "ip -n vtt-mg link set vtt-mg0 multicast off",
            "ip netns exec vtt-mr tc qdisc add dev vtt-me ingress",
            "ip netns exec vtt-mr tc filter add dev vtt-me parent ffff: protocol all u32 match u8 0 0 action mirred egress redirect dev vtt-mt",
            "ip netns exec vtt-mr tc qdisc add dev vtt-mt ingress",
            "ip netns exec vtt-mr tc filter add dev vtt-mt parent ffff: protocol all u32 match u8 0 0 action mirred egress redirect dev vtt-me",
            "ip addr add 10.99.23.1/24 dev vtt-mh",
            "ip -n vtt-mg addr add 10.99.23.2/24 dev vtt-mg0",
            "ip link set vtt-mh up",
            "ip -n vtt-mr link set vtt-me up",
            "ip -n vtt-mr link set vtt-mt up",
            "ip -n vtt-mg link set vtt-mg0 up",
        ],
        &["ip link del vtt-mh", "ip netns del vtt-mr", "ip netns del vtt-mg"],
    )
}

/// Every frame tc redirects is one packet from the device it came in on to
/// the one mirred sent it out of, both ways: the hop edges through tc count
/// exactly the frames the two devices received (their own counters), and
/// the per-packet events carry tc's redirect mark on those queues only.
#[test]
fn packets_redirected_by_tc_mirred_are_followed_both_ways() {
    let dir = TempDir::new("net-mirred");
    let _mirred = mirred();
    let r = record_with(
        &dir,
        "mirred.vtrace",
        &["--events"],
        &["ping", "-c", "100", "-i", "0.005", "-q", "10.99.23.2"],
    );
    let counter = |dev: &str| {
        r["device_counters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == dev)
            .unwrap_or_else(|| panic!("no counters of {dev}: {}", r["device_counters"]))
            .clone()
    };
    let edge = |from: &str, to: &str| {
        r["hops"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["from"] == from && h["to"] == to)
            .map_or(0, |h| num(h, "count"))
    };
    for (from, to) in [("vtt-me", "vtt-mt"), ("vtt-mt", "vtt-me")] {
        let received = num(&counter(from), "rx_packets");
        let through = edge(&format!("{from}:receive"), &format!("{to}:queue"));
        eprintln!("{from}:receive -> {to}:queue: {through} (rx_packets of {from}: {received})");
        assert!(received >= 100, "{from}: {}", counter(from));
        assert_eq!(through, received, "{from} -> {to}: {}", r["hops"]);
    }
    // The mark itself, per event: on the queues mirred fed, never on the
    // host's own veth (the host's stack queued those).
    let events = vtrace::recording::NetEvents::open(&dir.join("mirred.vtrace")).unwrap();
    type Key = ((u64, u64), String, bool);
    let mut marked: std::collections::BTreeMap<Key, u64> = Default::default();
    events
        .for_each(|e| {
            let dev = (e.netns as u64, e.ifindex as u64);
            *marked.entry((dev, e.hop.to_string(), e.redirected)).or_default() += 1
        })
        .unwrap();
    let count = |dev: &str, hop: &str, redirected: bool| {
        let c = counter(dev);
        let key = ((num(&c, "netns"), num(&c, "ifindex")), hop.to_string(), redirected);
        marked.get(&key).copied().unwrap_or(0)
    };
    eprintln!("events by ((netns, ifindex), hop, redirected): {marked:?}");
    for (from, to) in [("vtt-me", "vtt-mt"), ("vtt-mt", "vtt-me")] {
        assert_eq!(count(to, "queue", true), num(&counter(from), "rx_packets"), "{to}");
        assert_eq!(count(to, "queue", false), 0, "{to}");
    }
    assert_eq!(count("vtt-mh", "queue", true), 0);
    assert!(count("vtt-mh", "queue", false) >= 100);
}

/// Sends UDP datagrams to a port nothing listens on (each a network frame
/// the kernel drops: NO_SOCKET) and unix-socket messages nobody reads (each
/// an skb with no network frame, freed when the socket closes), in the host
/// platform's namespace, and TCP connections to a closed port (each SYN
/// dropped as NO_SOCKET and answered with a reset: not lost); prints the
/// namespace's Udp NoPorts and Tcp OutRsts over each part.
const DROPS_WORKLOAD: &str = r#"
import socket
def snmp(group, name):
    rows = [l.split() for l in open('/proc/net/snmp') if l.startswith(group + ':')]
    return int(rows[1][rows[0].index(name)])
def no_ports():
    return snmp('Udp', 'NoPorts')
def tcp(name):
    return snmp('Tcp', name)
before = no_ports()
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(40):
    s.sendto(b'x' * 32, ('127.0.0.1', 9))
rsts = tcp('OutRsts')
for i in range(30):
    c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        c.connect(('127.0.0.1', 10))
    except ConnectionRefusedError:
        pass
    c.close()
print('out_rsts', tcp('OutRsts') - rsts)
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
for i in range(25):
    a.send(b'y' * 16)
b.close()
a.close()
print('no_ports', no_ports() - before)
"#;

#[test]
fn lost_network_frames_are_drops_and_freed_messages_are_not() {
    let dir = TempDir::new("net-drops");
    let _lab = lab("host");
    let rec = dir.join("drops.vtrace");
    let o = vtrace(&[
        "record",
        "--layers",
        "net",
        "-o",
        rec.to_str().unwrap(),
        "--",
        "ip",
        "netns",
        "exec",
        "vtl-host",
        "python3",
        "-c",
        DROPS_WORKLOAD,
    ]);
    assert!(o.status.success(), "record: {}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    // The namespace's own counts: datagrams to no port, resets TCP sent.
    let count = |name: &str| -> u64 {
        out.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} count from the workload: {out}"))
    };
    let no_ports = count("no_ports");
    assert_eq!(no_ports, 40, "{out}");
    let out_rsts = count("out_rsts");
    assert_eq!(out_rsts, 30, "{out}");
    let r = report_json(&rec);
    let drops = r["drops"].as_array().unwrap();
    eprintln!("{}", serde_json::to_string_pretty(drops).unwrap());
    let udp: u64 = drops
        .iter()
        .filter(|d| d["lost"] == true && d["protocol"] == "IPv4" && d["device"] == "lo" && d["reason"] == "NO_SOCKET")
        .map(|d| num(d, "count"))
        .sum();
    assert_eq!(udp, no_ports, "IPv4 frames dropped for want of a socket");
    let udp_row = drops
        .iter()
        .find(|d| d["reason"] == "NO_SOCKET" && d["lost"] == true)
        .unwrap();
    assert!(
        udp_row["location"].as_str().unwrap().contains("udp"),
        "freed by UDP's receive path: {udp_row}"
    );
    // Segments for no connection: refused with TCP's resets, not lost.
    let refused: u64 = drops
        .iter()
        .filter(|d| d["lost"] == false && d["fate"] == "no connection: TCP answered with a reset")
        .filter(|d| d["location"] == "tcp_v4_rcv" && d["device"] == "lo")
        .map(|d| num(d, "count"))
        .sum();
    assert_eq!(
        refused, out_rsts,
        "segments refused for want of a connection = the namespace's resets"
    );
    // The unread unix messages: freed, not lost packets.
    let freed: u64 = drops
        .iter()
        .filter(|d| d["lost"] == false && d["fate"] == "no network frame")
        .map(|d| num(d, "count"))
        .sum();
    assert!(freed >= 25, "{freed} freed without a network frame, 25 unread messages");
    let text = String::from_utf8_lossy(&vtrace(&["report", rec.to_str().unwrap()]).stdout).into_owned();
    let dropped = text
        .lines()
        .find(|l| l.contains("packets lost:"))
        .unwrap_or_else(|| panic!("no drop line:\n{text}"));
    assert!(dropped.contains("40 IPv4 NO_SOCKET on lo"), "{dropped}");
    assert!(text.contains("no network frame (unix_release_sock)"), "{text}");
}
