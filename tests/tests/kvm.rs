//! KVM exits from a real VMM (examples/src/kvm_vmm.rs) on the real /dev/kvm:
//! counts against the exits the guest is known to make, the VMM's handling
//! time against the VMM's own clock, and KVM's own statistics.

use serde_json::Value;
use vtrace_tests::{TempDir, bin, num, report_json, stderr, vtrace};

const PIO: u64 = 40;
const MMIO: u64 = 25;
const HALTS: u64 = 15;
const SLEEP_US: u64 = 2000;

#[test]
fn test_vmm_exits_are_counted_timed_and_attributed() {
    assert!(vtrace_tests::is_root(), "run as root");
    assert!(
        std::path::Path::new("/dev/kvm").exists(),
        "/dev/kvm missing: this test needs KVM (load kvm_intel, kvm_amd or kvm_pvm)"
    );
    let dir = TempDir::new("kvm");
    let rec = dir.join("vmm.vtrace");
    let vmm = bin("kvm-vmm");
    let counts = [PIO, MMIO, HALTS, SLEEP_US].map(|v| v.to_string());
    let o = vtrace(&[
        "record",
        // The VMM is the command: no vCPU exists when recording starts.
        "--kvm-run",
        "--interval",
        "100ms",
        "-o",
        rec.to_str().unwrap(),
        "--",
        vmm.to_str().unwrap(),
        "--pio",
        &counts[0],
        "--mmio",
        &counts[1],
        "--halts",
        &counts[2],
        "--sleep-us",
        &counts[3],
    ]);
    assert!(o.status.success(), "record failed: {}", stderr(&o));
    // The VMM's own account: what it saw and how long it took per exit.
    let truth: Value = String::from_utf8_lossy(&o.stdout)
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .expect("the VMM prints one JSON line");
    assert_eq!(
        (num(&truth, "pio"), num(&truth, "mmio"), num(&truth, "hlt")),
        (PIO, MMIO, HALTS),
        "the guest did not make the exits it should: {truth}"
    );
    let tid = num(&truth, "vcpu_tid");
    let r = report_json(&rec);
    // The HTML report draws the latency of the busiest user-space exits.
    let o = vtrace(&["report", rec.to_str().unwrap(), "--format", "html"]);
    let html = String::from_utf8_lossy(&o.stdout);
    for reason in ["IO", "MMIO"] {
        assert!(
            html.contains(&format!("Latency of userspace_exit {reason}, all vCPUs")),
            "{reason} histogram"
        );
    }
    let kvm = &r["kvm"];
    let of_vcpu = |list: &str| -> Vec<&Value> {
        kvm[list]
            .as_array()
            .unwrap_or_else(|| panic!("kvm.{list} missing"))
            .iter()
            .filter(|e| e["tid"].as_u64() == Some(tid))
            .collect()
    };
    eprintln!(
        "vmm: {truth}\nkvm report: {}",
        serde_json::to_string_pretty(kvm).unwrap()
    );

    // Exactly N port writes and M MMIO writes, at the guest's addresses.
    let pio = of_vcpu("pio");
    assert_eq!(pio.len(), 1, "one port: {pio:?}");
    assert_eq!(
        (num(pio[0], "port"), pio[0]["direction"].as_str()),
        (0x10, Some("write"))
    );
    assert_eq!(num(pio[0], "count"), PIO);
    let mmio = of_vcpu("mmio");
    assert_eq!(mmio.len(), 1, "one address: {mmio:?}");
    assert_eq!((num(mmio[0], "gpa"), mmio[0]["type"].as_str()), (0x8000, Some("write")));
    assert_eq!(num(mmio[0], "count"), MMIO);

    // N+M+K user-space exits by reason, the vCPU thread attributed as such.
    let exits = of_vcpu("userspace_exits");
    let count = |reason: &str| {
        exits
            .iter()
            .filter(|e| e["reason"] == reason)
            .map(|e| num(e, "count"))
            .sum::<u64>()
    };
    assert_eq!(
        (count("IO"), count("MMIO"), count("HLT")),
        (PIO, MMIO, HALTS),
        "{exits:?}"
    );
    assert_eq!(exits.iter().map(|e| num(e, "count")).sum::<u64>(), PIO + MMIO + HALTS);
    for e in &exits {
        assert_eq!(
            (e["role"].as_str(), e["comm"].as_str()),
            (Some("vcpu"), Some("vcpu0")),
            "{e}"
        );
    }
    let threads = r["threads"].as_array().unwrap();
    let role = |t: u64| {
        threads
            .iter()
            .find(|x| x["tid"].as_u64() == Some(t))
            .map(|x| x["role"].clone())
    };
    assert_eq!(role(tid), Some("vcpu".into()));
    assert_eq!(role(num(&truth, "pid")), Some("vmm".into()), "the VMM's main thread");

    // The VMM's handling time per exit, within 10 % of its own measure. The
    // last halt ends the run without another KVM_RUN, so it is not timed.
    let want = num(&truth, "handling_ns_mean") as f64;
    assert!(
        want >= SLEEP_US as f64 * 1000.0,
        "the VMM slept less than asked: {want}"
    );
    let timed: u64 = exits.iter().map(|e| num(e, "timed")).sum();
    assert_eq!(timed, PIO + MMIO + HALTS - 1);

    // The KVM layer's time series: every timed exit falls in some interval,
    // spread over the run (the VMM's exits take longer than one interval).
    let o = vtrace(&[
        "report",
        "--format",
        "csv",
        "--table",
        "kvm_intervals",
        rec.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let csv = String::from_utf8_lossy(&o.stdout);
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("start_ns,end_ns,tid,kind,reason_name,count,sum_ns"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    let of_vcpu = |reason: &str| -> u64 {
        rows.iter()
            .filter(|r| r[2] == tid.to_string() && r[3] == "userspace_exit" && r[4] == reason)
            .map(|r| r[5].parse::<u64>().unwrap())
            .sum()
    };
    assert_eq!(
        (of_vcpu("IO"), of_vcpu("MMIO"), of_vcpu("HLT")),
        (PIO, MMIO, HALTS - 1),
        "interval counts: {csv}"
    );
    let intervals: std::collections::BTreeSet<&str> = rows.iter().map(|r| r[0]).collect();
    assert!(intervals.len() > 1, "exits in one interval only: {csv}");
    for e in &exits {
        let mean = num(e, "mean_vmm_ns") as f64;
        assert!(
            (mean - want).abs() / want < 0.10,
            "{}: {mean} ns vs the VMM's {want} ns",
            e["reason"]
        );
        let (p50, p99) = (num(e, "p50_vmm_ns") as f64, num(e, "p99_vmm_ns") as f64);
        assert!(
            num(e, "min_vmm_ns") as f64 <= p50 && p50 <= p99 && p99 <= num(e, "max_vmm_ns") as f64,
            "{e}"
        );
        assert!((p50 - want).abs() / want < 0.15, "{}: p50 {p50} vs {want}", e["reason"]);
    }

    // KVM's own statistics for the vCPU, as the VMM read them, agree.
    let stats = &truth["kvm_stats"];
    if let (Some(mmio_exits), Some(halt_exits)) = (stats["mmio_exits"].as_u64(), stats["halt_exits"].as_u64()) {
        assert_eq!((mmio_exits, halt_exits), (MMIO, HALTS), "KVM's own counts: {stats}");
        assert!(num(stats, "exits") >= PIO + MMIO + HALTS, "{stats}");
    }
}

/// The path layer on this machine: where kprobes exist, it attaches (its
/// figures are checked on real VMs in vm_platforms.rs); where they do not
/// (this repository's CI kernel), it runs only if a virtio-net receive
/// queue has an interrupt of its own (this machine is itself a guest: its
/// receive side is timed at tracepoints, below), else it is skipped with
/// that reason; either way the recording completes, and `vtrace probes`
/// says why each kprobe-only probe is unavailable.
#[test]
fn the_path_layer_runs_or_says_why_it_cannot() {
    assert!(vtrace_tests::is_root(), "run as root");
    let dir = TempDir::new("kvm-path");
    let rec = dir.join("path.vtrace");
    let o = record_path(&rec, &["true"]);
    assert!(o.status.success(), "record failed: {}", stderr(&o));
    let r = report_json(&rec);
    let notes: Vec<&str> = r["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let skipped = notes.iter().find(|n| n.starts_with("layer path skipped"));
    let caps = vtrace::probes::Capabilities::detect();
    let probes = vtrace(&["probes"]);
    let listing = String::from_utf8_lossy(&probes.stdout);
    let path_lines: Vec<&str> = listing.lines().filter(|l| l.contains("path:")).collect();
    assert!(path_lines.len() >= 10, "{listing}");
    if caps.kprobe_pmu {
        assert!(skipped.is_none(), "{notes:?}");
        let attached = rows_named(&r["probes"], "path:tun_recvmsg");
        assert!(attached.contains("kprobe"), "{attached}");
        return;
    }
    // Each of its kprobes says it cannot attach, and why.
    let kprobe_only = path_lines.iter().find(|l| l.contains("path:tun_recvmsg")).unwrap();
    assert!(kprobe_only.contains("unavailable"), "{kprobe_only}");
    if vtrace::layers::path::virtio_net_rx_irqs().is_empty() {
        let why = skipped.unwrap_or_else(|| panic!("no skip note: {notes:?}"));
        assert!(why.contains("kprobes unavailable"), "{why}");
        assert_eq!(r["path"], Value::Null, "nothing recorded for a skipped layer");
    } else {
        assert!(skipped.is_none(), "{notes:?}");
        let attached = rows_named(&r["probes"], "path:tun_recvmsg");
        assert!(attached.contains("unavailable"), "{attached}");
    }
}

/// Frames received on this machine's virtio-net device (eth0: this machine
/// is a guest of its own hypervisor) through the path layer's guest
/// receive stages: where kprobes are missing (this repository's CI
/// kernel) the receive interrupt is its queue's own MSI-X IRQ and the
/// poll's start the NET_RX softirq (tracepoints), elsewhere vring_interrupt
/// and virtnet_poll. Pings to the default gateway: the frames the stages
/// counted are at least the replies ping counted and at most what the
/// device counted over a span holding the recording, and each interrupt
/// paired with a poll is one the kernel counted for those IRQs.
#[test]
fn a_virtio_net_devices_receive_side_is_timed_against_its_counters() {
    assert!(vtrace_tests::is_root(), "run as root");
    let irqs = vtrace::layers::path::virtio_net_rx_irqs();
    assert!(
        !irqs.is_empty(),
        "no virtio-net receive queue with an interrupt of its own (virtioN-input.M in /proc/interrupts): \
         this test needs a machine that is a virtio-net guest, as this repository's CI machine is"
    );
    let routes = std::fs::read_to_string("/proc/net/route").unwrap();
    // The default route's device and gateway (little-endian hex).
    let (dev, gateway) = routes
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() > 2 && f[1] == "00000000")
        .map(|f| {
            let g = u32::from_str_radix(f[2], 16).unwrap();
            (f[0].to_string(), std::net::Ipv4Addr::from(g.swap_bytes()).to_string())
        })
        .expect("no default route: the pings go to the default gateway");
    let driver = std::fs::read_link(format!("/sys/class/net/{dev}/device/driver")).unwrap_or_default();
    assert!(
        driver.ends_with("virtio_net"),
        "{dev} is no virtio-net device ({driver:?})"
    );
    let counter = |name: &str| -> u64 {
        std::fs::read_to_string(format!("/sys/class/net/{dev}/statistics/{name}"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let interrupts = || -> u64 {
        let text = std::fs::read_to_string("/proc/interrupts").unwrap();
        text.lines()
            .filter_map(|l| {
                let (irq, rest) = l.trim_start().split_once(':')?;
                irqs.contains(&irq.parse().ok()?).then(|| {
                    rest.split_whitespace()
                        .map_while(|w| w.parse::<u64>().ok())
                        .sum::<u64>()
                })
            })
            .sum()
    };
    let dir = TempDir::new("kvm-guest-rx");
    let rec = dir.join("rx.vtrace");
    let (rx_before, drop_before, irq_before) = (counter("rx_packets"), counter("rx_dropped"), interrupts());
    let o = record_path(&rec, &["ping", "-c", "50", "-i", "0.05", &gateway]);
    let (rx, dropped, irq) = (
        counter("rx_packets") - rx_before,
        counter("rx_dropped") - drop_before,
        interrupts() - irq_before,
    );
    assert!(
        o.status.success(),
        "record failed (the gateway {gateway} answers no ping?): {}",
        stderr(&o)
    );
    let out = String::from_utf8_lossy(&o.stdout);
    let replies: u64 = out
        .lines()
        .find_map(|l| l.split(", ").nth(1)?.strip_suffix(" received")?.parse().ok())
        .unwrap_or_else(|| panic!("no ping summary: {out}"));
    let r = report_json(&rec);
    let stage = |name: &str| -> (u64, u64) {
        r["path"].as_array().map_or((0, 0), |rows| {
            rows.iter()
                .filter(|row| row["stage"] == name)
                .fold((0, 0), |(c, f), row| (c + num(row, "count"), f + num(row, "frames")))
        })
    };
    let (_, stack_frames) = stage("guest_rx_stack");
    let (polls, _) = stage("guest_rx_poll");
    assert!(replies >= 45, "ping counted {replies} replies of 50: {out}");
    assert!(
        (replies..=rx + dropped).contains(&stack_frames),
        "guest_rx_stack frames {stack_frames}: ping's replies {replies}, {dev}'s rx_packets + rx_dropped {}",
        rx + dropped
    );
    assert!(
        (1..=irq).contains(&polls),
        "guest_rx_poll {polls}: the kernel counted {irq} interrupts"
    );
    let caps = vtrace::probes::Capabilities::detect();
    let method = rows_named(&r["probes"], "path:vring_interrupt");
    assert_eq!(method.contains("\"raw_tp\""), !caps.kprobe_pmu, "{method}");
}

/// `vtrace record --layers cpu,path -o rec -- command...`.
fn record_path(rec: &std::path::Path, command: &[&str]) -> std::process::Output {
    let mut args = vec!["record", "--layers", "cpu,path", "-o", rec.to_str().unwrap(), "--"];
    args.extend_from_slice(command);
    vtrace(&args)
}

/// The report's row of probe `id`, as JSON text.
fn rows_named(probes: &Value, id: &str) -> String {
    probes
        .as_array()
        .and_then(|a| a.iter().find(|p| p["id"] == id))
        .map_or_else(|| format!("no probe {id}"), Value::to_string)
}
