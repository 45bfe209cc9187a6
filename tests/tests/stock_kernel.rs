//! Probes this machine's kernel refuses (kprobes, vhost-net, SVM exits),
//! attached for real one level down: Debian's stock kernel booted under
//! QEMU TCG (vtrace::lab::guest) runs the release vtrace around test
//! programs with known counts, and each figure is checked there against the
//! guest kernel's own counters or the program's count.
//!
//! One guest boot serves every test in this file (they run in one process,
//! one at a time); its files come back through a 9p share.

use std::{
    path::PathBuf,
    sync::OnceLock,
    time::{Duration, Instant},
};

use serde_json::Value;
use vtrace_tests::{GuestFiles, TempDir, bin};

const WRITES: u64 = 100;
const TX: u64 = 300;
const RX: u64 = 200;
const FRAME: u64 = 256;
/// The vnet header before each frame written to a tap with IFF_VNET_HDR.
const VNET_HDR: u64 = 10;
const READS: [u64; 2] = [1000, 3000];
const PIO: u64 = 40;
const MMIO: u64 = 25;
const HALTS: u64 = 15;
const VSOCK_CONNECTIONS: u64 = 20;
const VSOCK_BYTES: u64 = 10_000;

/// Every scenario, one after the other, in the guest's /out.
fn script() -> String {
    let [r1, r2] = READS;
    format!(
        "set -e\n\
         vtrace probes --json > probes.json\n\
         vtrace record -o tun.vtrace -- vhost-net --write {WRITES} --tx {TX} --rx {RX} --size {FRAME} > tun.out\n\
         vtrace report tun.vtrace --format json -o tun.json\n\
         mount -t tmpfs tmpfs /mnt\n\
         mkdir /mnt/lower /mnt/upper /mnt/work /mnt/merged\n\
         file-reader --dir /mnt/lower --reads 1 > /dev/null\n\
         mount -t overlay overlay -o lowerdir=/mnt/lower,upperdir=/mnt/upper,workdir=/mnt/work /mnt/merged\n\
         for n in {r1} {r2}; do\n\
           vtrace record --layers cpu,fs -o ovl$n.vtrace -- file-reader --dir /mnt/merged --reads $n > ovl$n.out\n\
           vtrace report ovl$n.vtrace --format json -o ovl$n.json\n\
         done\n\
         vtrace record --layers cpu,kvm --kvm-run -o kvm.vtrace -- \
           kvm-vmm --pio {PIO} --mmio {MMIO} --halts {HALTS} --sleep-us 2000 > kvm.out\n\
         vtrace report kvm.vtrace --format json -o kvm.json\n\
         vtrace record --layers cpu,vsock -o vsock.vtrace -- \
           vsock-echo --connections {VSOCK_CONNECTIONS} --bytes {VSOCK_BYTES} > vsock.out\n\
         vtrace report vsock.vtrace --format json -o vsock.json\n\
         for split in ticks syscalls; do for i in 1 2; do\n\
           vtrace record --layers cpu --cpu-split $split -o sleep-$split-$i.vtrace -- \
             cpu-mix --seconds 2 --only spin,syscall,sleep --out sleep-$split-$i.out > /dev/null\n\
           vtrace report sleep-$split-$i.vtrace --format json -o sleep-$split-$i.json\n\
         done; done\n"
    )
}

/// The JSON the guest's script wrote, read back before its share is removed
/// (a static is never dropped, so it holds no directory).
struct Guest {
    out: GuestFiles,
    wall: Duration,
}

impl Guest {
    fn text(&self, name: &str) -> &str {
        self.out.text(name)
    }
    fn json(&self, name: &str) -> Value {
        serde_json::from_str(self.text(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    }
    /// The one JSON line a test program printed.
    fn truth(&self, name: &str) -> Value {
        let text = self.text(name);
        text.lines()
            .find_map(|l| serde_json::from_str(l).ok())
            .unwrap_or_else(|| panic!("{name}: no JSON line in {text}"))
    }
}

/// Boots the guest once for all tests.
fn guest() -> &'static Guest {
    static GUEST: OnceLock<Result<Guest, String>> = OnceLock::new();
    // A failed boot fails every test with its reason, without booting again.
    match GUEST.get_or_init(boot) {
        Ok(g) => g,
        Err(why) => panic!("{why}"),
    }
}

fn boot() -> Result<Guest, String> {
    if !vtrace_tests::is_root() {
        return Err("run as root".into());
    }
    vtrace::lab::guest::can_run().map_err(|why| format!("the stock-kernel guest cannot run here: {why}"))?;
    let out = TempDir::new("stock-kernel");
    let binaries: Vec<PathBuf> = ["vtrace", "vhost-net", "kvm-vmm", "file-reader", "cpu-mix", "vsock-echo"]
        .into_iter()
        .map(bin)
        .collect();
    let start = Instant::now();
    let run = vtrace::lab::guest::run(&binaries, &[], &script(), &out.0, Duration::from_secs(300))
        .map_err(|e| format!("guest: {e}"))?;
    if run.status != 0 {
        let log = std::fs::read_to_string(out.join("script.log")).unwrap_or_default();
        return Err(format!(
            "the guest's script failed ({}):\n{log}\nconsole:\n{}",
            run.status, run.console
        ));
    }
    eprintln!("stock-kernel guest: {:.1} s", start.elapsed().as_secs_f64());
    Ok(Guest {
        out: GuestFiles::read(&out.0)?,
        wall: run.wall,
    })
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// The tun row of `function` on `device`.
fn tun_row<'a>(report: &'a Value, device: &str, function: &str) -> &'a Value {
    report["tun"]
        .as_array()
        .expect("tun rows")
        .iter()
        .find(|r| r["device"] == device && r["function"] == function)
        .unwrap_or_else(|| panic!("no {function} row for {device} in {}", report["tun"]))
}

fn probe<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["id"] == id)
        .unwrap_or_else(|| panic!("no probe {id}"))
}

#[test]
fn tun_kprobes_count_each_frame_written_into_a_tap() {
    let g = guest();
    let (truth, r) = (g.truth("tun.out"), g.json("tun.json"));
    let tap = truth["tap"].as_str().unwrap();
    let row = tun_row(&r, tap, "tun_get_user");
    assert_eq!(row["method"], "kprobe");
    assert_eq!(row["pid"], truth["pid"], "written by the program itself: {row}");
    assert_eq!(n(&row["frames"]), WRITES, "{row}");
    assert_eq!(n(&row["bytes"]), WRITES * (FRAME + VNET_HDR), "{row}");
    assert_eq!(n(&probe(&r, "tun:tun_get_user")["events"]), WRITES);
    // The tap's own count of frames that came in from its user: the writes
    // and what vhost-net sent.
    let rx = n(&truth["after"]["rx_packets"]) - n(&truth["before"]["rx_packets"]);
    let sent = n(&tun_row(&r, tap, "tun_sendmsg")["frames"]);
    assert_eq!(n(&row["frames"]) + sent, rx, "tap rx_packets");
    // Frames the stack queued to the tap: its tx counter.
    let tx = n(&truth["after"]["tx_packets"]) - n(&truth["before"]["tx_packets"]);
    let xmit = tun_row(&r, tap, "tun_net_xmit");
    assert_eq!(n(&xmit["frames"]), tx, "tap tx_packets: {xmit}");
    assert_eq!(
        n(&xmit["bytes"]),
        n(&truth["after"]["tx_bytes"]) - n(&truth["before"]["tx_bytes"])
    );
}

#[test]
fn vhost_net_frames_are_counted_per_frame_and_its_worker_has_the_vhost_role() {
    let g = guest();
    let (truth, r) = (g.truth("tun.out"), g.json("tun.json"));
    let tap = truth["tap"].as_str().unwrap();
    let worker = n(&truth["vhost_worker"]);
    assert_eq!(
        (n(&truth["tx_used"]), n(&truth["rx_used"])),
        (TX, RX),
        "the program's own rings: {truth}"
    );
    // TX: the worker hands the tap batches of frames; counted per frame.
    let sent = tun_row(&r, tap, "tun_sendmsg");
    assert_eq!(n(&sent["pid"]), worker, "{sent}");
    assert_eq!(n(&sent["frames"]), TX, "{sent}");
    assert_eq!(n(&sent["bytes"]), TX * FRAME, "{sent}");
    assert!(n(&sent["calls"]) < TX, "vhost-net batches frames per call: {sent}");
    // RX: one tun_recvmsg per frame, as many as the tap sent to its user.
    let received = tun_row(&r, tap, "tun_recvmsg");
    assert_eq!(n(&received["pid"]), worker);
    assert_eq!(n(&received["frames"]), RX, "{received}");
    let tap_tx = n(&truth["after"]["tx_packets"]) - n(&truth["before"]["tx_packets"]);
    assert_eq!(n(&received["frames"]), tap_tx, "tap tx_packets");
    // The worker works for the program: its instance, role vhost.
    let program = tun_row(&r, tap, "tun_get_user");
    for row in [sent, received] {
        assert_eq!(row["role"], "vhost", "{row}");
        assert_eq!(
            (&row["platform"], &row["instance"]),
            (&program["platform"], &program["instance"])
        );
    }
    let thread = r["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| n(&t["tid"]) == worker)
        .expect("the worker's thread row");
    assert_eq!(thread["role"], "vhost", "{thread}");
    assert!(
        r["tun"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["function"] == "handle_tx" && n(&t["pid"]) == worker),
        "handle_tx calls by the worker"
    );
}

#[test]
fn overlay_credential_switches_are_counted_per_process_by_kprobe() {
    let g = guest();
    let mut per_read = Vec::new();
    for reads in READS {
        let (truth, r) = (g.truth(&format!("ovl{reads}.out")), g.json(&format!("ovl{reads}.json")));
        assert_eq!(n(&truth["preads"]), reads);
        let pid = n(&truth["processes"][0]["pid"]);
        assert_eq!(probe(&r, "ovl_override_creds")["method"], "kprobe");
        let row = r["overlay_creds"]
            .as_array()
            .expect("overlay_creds rows")
            .iter()
            .find(|c| n(&c["pid"]) == pid)
            .unwrap_or_else(|| panic!("no overlay_creds row for the reader {pid}: {}", r["overlay_creds"]));
        let preads = r["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| n(&f["pid"]) == pid && f["fs"] == "overlay" && f["op"] == "pread64")
            .expect("the reader's overlay preads");
        assert_eq!(n(&preads["count"]), reads);
        per_read.push(n(&row["override_calls"]));
    }
    // Each pread through the overlay switches credentials once; the rest
    // (open, close) is the same in both runs.
    assert_eq!(per_read[1] - per_read[0], READS[1] - READS[0], "{per_read:?}");
}

#[test]
fn svm_exits_are_counted_by_reason_and_timed_to_the_next_entry() {
    let g = guest();
    let (truth, r) = (g.truth("kvm.out"), g.json("kvm.json"));
    assert_eq!(
        (n(&truth["pio"]), n(&truth["mmio"]), n(&truth["hlt"])),
        (PIO, MMIO, HALTS),
        "the guest did not make the exits it should: {truth}"
    );
    let exits = r["kvm"]["exits"].as_array().expect("kvm exits");
    let count = |reason: &str| {
        exits
            .iter()
            .filter(|e| e["reason"] == reason && n(&e["tid"]) == n(&truth["vcpu_tid"]))
            .map(|e| n(&e["count"]))
            .sum::<u64>()
    };
    assert!(
        exits.iter().all(|e| e["isa"] == "svm" || e["isa"].is_null()),
        "{exits:?}"
    );
    assert_eq!(count("io"), PIO, "io exits: {exits:?}");
    assert_eq!(count("hlt"), HALTS, "hlt exits: {exits:?}");
    // MMIO to unmapped memory exits as a nested page fault, as does the
    // first touch of guest memory.
    assert!(count("npf") >= MMIO, "npf exits: {exits:?}");
    // KVM's own count of this vCPU's exits, read by the VMM.
    let total: u64 = exits.iter().map(|e| n(&e["count"])).sum();
    assert_eq!(total, n(&truth["kvm_stats"]["exits"]), "every exit: {exits:?}");
    assert_eq!(count("io"), n(&truth["kvm_stats"]["io_exits"]));
    // Every exit but the last HLT (the VMM stops there) re-entered the guest.
    let io = exits.iter().find(|e| e["reason"] == "io").unwrap();
    assert_eq!(n(&io["timed"]), PIO, "{io}");
    assert!(n(&io["p50_ns"]) > 0, "exit -> entry latency: {io}");
    // The user-space leg of each port exit: the VMM's handling, against its own clock.
    let uexit = r["kvm"]["userspace_exits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["reason"] == "IO")
        .expect("user-space IO exits");
    assert_eq!(n(&uexit["count"]), PIO);
    let mean = n(&uexit["mean_vmm_ns"]) as f64;
    let vmm_mean = n(&truth["handling_ns_mean"]) as f64;
    assert!(
        (mean - vmm_mean).abs() / vmm_mean < 0.2,
        "{mean} vs the VMM's {vmm_mean}"
    );
}

/// Issue #25's check where no switch goes unreported: a thread that sleeps
/// and wakes thousands of times, beside a spinner and a syscall thread on
/// the guest's one CPU, within 2 % of its own schedstat in both split modes.
#[test]
fn a_thread_that_sleeps_and_wakes_matches_schedstat_in_the_guest() {
    let g = guest();
    for split in ["ticks", "syscalls"] {
        for i in 1..=2 {
            let name = format!("sleep-{split}-{i}");
            let (truth, r) = (g.json(&format!("{name}.out")), g.json(&format!("{name}.json")));
            let untraced = n(&r["overhead"]["untraced_switches"]);
            for t in truth["threads"].as_array().unwrap() {
                let expected = n(&t["schedstat_ns"]);
                let row = r["threads"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|x| x["tid"] == t["tid"])
                    .unwrap_or_else(|| panic!("{name}: no row for {t}"));
                let total = n(&row["total_ns"]);
                let err = (total as f64 - expected as f64) / expected as f64;
                eprintln!(
                    "guest {name} {:<12} schedstat {expected:>11} vtrace {total:>11} err {:+.3} % unbounded {} \
                     untraced switches {untraced}",
                    t["name"].as_str().unwrap(),
                    err * 100.0,
                    n(&row["unbounded_ns"])
                );
                assert!(err.abs() <= 0.02, "{name}: {t} vs {total} ns ({:+.2} %)", err * 100.0);
            }
        }
    }
}

#[test]
fn probes_say_which_method_attaches_in_the_guest_and_why_fentry_does_not() {
    let g = guest();
    let probes = g.json("probes.json");
    let list = probes
        .as_array()
        .or_else(|| probes["probes"].as_array())
        .expect("probe list");
    for id in [
        "tun:tun_get_user",
        "tun:tun_sendmsg",
        "vhost:handle_tx",
        "ovl_override_creds",
    ] {
        let p = list.iter().find(|p| p["id"] == id).unwrap_or_else(|| panic!("no {id}"));
        assert_eq!(p["method"], "kprobe", "{p}");
        let reason = p["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains("is in module") && reason.contains("split BTF"),
            "fentry's skip reason names the module: {p}"
        );
    }
    // The guest's kernel loads fentry programs (on vmlinux functions).
    assert!(
        list.iter()
            .all(|p| !p["reason"].as_str().unwrap_or_default().contains("refuses fentry")),
        "fentry works in the guest"
    );
    let kvm_exit = list.iter().find(|p| p["id"] == "kvm_exit").unwrap();
    assert_eq!(kvm_exit["available"], true);
    assert!(kvm_exit["caveat"].is_null(), "kvm_exit fires under kvm_amd: {kvm_exit}");
    eprintln!("guest wall time {:.1} s", g.wall.as_secs_f64());
}

/// vsock through the loopback transport: every connection vsock-echo made
/// is a request and a response each way of the transport, and every byte
/// it sent and echoed is data sent and received, on its port.
#[test]
fn vsock_connections_and_bytes_are_the_programs_own() {
    let g = guest();
    let truth = g.truth("vsock.out");
    let r = g.json("vsock.json");
    let rows = r["vsock"].as_array().expect("vsock rows");
    let port = truth["port"].as_u64().unwrap();
    let sum = |direction: &str, op: &str, field: &str| -> u64 {
        rows.iter()
            .filter(|x| x["port"] == port && x["peer_cid"] == 1 && x["direction"] == direction && x["op"] == op)
            .map(|x| x[field].as_u64().unwrap())
            .sum()
    };
    eprintln!("{truth}\n{}", serde_json::to_string_pretty(rows).unwrap());
    let connections = truth["connections"].as_u64().unwrap();
    assert_eq!(connections, VSOCK_CONNECTIONS);
    for direction in ["sent", "received"] {
        for op in ["request", "response"] {
            assert_eq!(sum(direction, op, "packets"), connections, "{direction} {op}");
        }
        // Out and echoed back: both counted once as sent, once as received.
        let data = 2 * truth["bytes_each_way"].as_u64().unwrap();
        assert_eq!(sum(direction, "rw", "bytes"), data, "{direction} data");
    }
    // The connections' requests came from vsock-echo's own threads.
    let requests: Vec<&Value> = rows
        .iter()
        .filter(|x| x["direction"] == "sent" && x["op"] == "request")
        .collect();
    assert!(requests.iter().all(|x| x["comm"] == "vsock-echo"), "{requests:?}");
    assert!(
        requests.iter().all(|x| x["first_ns"].as_u64().unwrap() > 0),
        "{requests:?}"
    );
}
