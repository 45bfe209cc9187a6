//! Kata Containers for real, one level down: inside the stock-kernel guest
//! (vtrace::lab::guest), where KVM boots nested guests, `vtrace lab up kata`
//! has the lab's containerd start a Kata sandbox (QEMU/KVM, vhost-net on a
//! tap tc mirrors to the netns's eth0, virtio-fs, vsock to the agent), and
//! `vtrace record --platform kata` records it: once around the command that
//! starts it, once with it running. Each figure is checked against ground
//! truth there: the devices' own counters, KVM's own exit statistics, the
//! workload's own count.
//!
//! Kata comes from ../shared/vmm/kata (or $VTRACE_VMM_DIR/kata), built from
//! upstream (its PROVENANCE.md); containerd and QEMU from this machine.
//! One guest boot serves every test in this file.

use std::{
    path::{Path, PathBuf},
    sync::OnceLock,
    time::Duration,
};

use serde_json::Value;
use vtrace::lab::guest::Board;
use vtrace_tests::{GUEST_STEPS, GuestFiles, TempDir, bin, draw_report, run_guest, system_tool, vmm_dir};

/// The lab's address of the sandbox, and the host's end of its veth.
const ADDR: &str = "10.99.25.2";
const HOST_ADDR: &str = "10.99.25.1";
const PINGS: usize = 30;
/// redis-benchmark requests per test of the study: its pilot's count is
/// never more than this, nor less.
const REDIS_REQUESTS: u64 = 200;
/// The study's value sizes: one below the MTU, one above.
const SMALL: u32 = 64;
const LARGE: u32 = 16384;
/// The study's platforms (its default), in its order.
const STUDY_PLATFORMS: &[&str] = &[
    "kata",
    "unikraft-vhost",
    "unikraft-virtio",
    "firecracker",
    "qemu-kvm-novhost",
];
/// Packages each module-load run requires (seed 002's study), and the
/// loaders of its concurrent cell.
const MODULES: u32 = 25;
const LOADERS: u32 = 4;
const LAYERS: &str = "cpu,net,tun,kvm,vsock";

/// The sandbox started inside a recording and pinged both ways, then taken
/// down; then a bench of runc through the same containerd against Kata
/// (Node.js loading modules from the shared volume, one loader and four at
/// once: seed 002's), and seed 000's study over its five platforms (Kata,
/// both Unikraft platforms serving Redis, Firecracker, a QEMU Linux VM) at
/// one size below the MTU and one above, GET and SET apart, each platform
/// brought up and down by the bench, so none runs beside another. The
/// study's Kata 64 B GET run is the recording of a sandbox running when it
/// began. A boot after a freeze (vtrace::lab::guest) goes on after the
/// parts finished, and the bench and the study resume where the frozen boot
/// left them (each kept, and run again with the same options: only the
/// cells not yet done are recorded). The benches' VMs
/// go without vtrace's agent (VTRACE_LAB_AGENT=0): they measure the
/// platforms as their users run them, and boot smaller guests. Each step's limit
/// is a few times what it takes (the bench about 80 s, the study about
/// 180 s): one that hangs (a bench's Kata cell once did, for the guest's
/// whole 900 s) fails its own tests, with what was running, and the rest go on.
fn script() -> String {
    let ping_in = format!("ping -c {PINGS} -i 0.05 {ADDR}");
    // One request at a time, each followed on its own (a round trip's tail
    // here is tens of ms): into the sandbox alone, so that each request the
    // tap queues has its reply next.
    let ping_both = format!("ping -c {PINGS} -i 0.1 {ADDR}");
    let ping_out = format!("vtrace lab exec kata -- busybox ping -c {PINGS} -i 0.05 {HOST_ADDR}");
    // A busy loop in the sandbox's container, through kata-agent.
    let spin = vtrace_tests::guest_spin_scripts("", 1000);
    let mut s = format!(
        "{GUEST_STEPS}export VTRACE_KATA_DIR=/vmm/kata VTRACE_UNIKRAFT_IMAGE=/vmm/redis_qemu-x86_64\n\
         vtrace lab status > status.out 2>&1\n\
         {spin}\
         if once sandbox; then\n\
         step 400 start.failed 'record the sandbox starting' vtrace record --platform kata --layers {LAYERS} --interval 250ms -o start.vtrace \
           -- sh -c 'vtrace lab up kata > up.out 2>&1 && {ping_in} && {ping_out}' > start.out 2>&1\n"
    );
    s.push_str(&format!(
        "step 120 hops.failed 'record every ping hop by hop' vtrace record --platform kata --layers {LAYERS} --events \
           --guest auto --guest-layers cpu,net -o hops.vtrace -- sh -c '{ping_in} && {ping_out}; sh /tmp/guest-spin.sh kata > spin.out 2>&1; sleep 1' > hops.out 2>&1\n\
         cp -r hops.vtrace/guests/*-* hops-inner.vtrace\n\
         step 120 both.failed 'record pings on both sides' vtrace record --platform kata --layers cpu,net,path --events \
           --guest auto --guest-layers path -o both.vtrace -- {ping_both} > both.out 2>&1\n\
         ip -n vtl-kata -s link > netns-links.out 2>&1\n\
         step 120 down.failed 'down kata' vtrace lab down kata > down.out 2>&1\n\
         cp /var/log/messages syslog.log\n\
         finished sandbox; fi\n\
         if once bench; then\n\
         resumes bench\n\
         step 300 bench.failed bench env VTRACE_LAB_AGENT=0 vtrace bench --platforms containerd-runc,kata --workload modules \
           --modules {MODULES} --loaders 1,{LOADERS} --repeat 1 --layers {LAYERS} -o bench > bench.out 2>&1\n\
         finished bench; fi\n\
         if once study; then\n\
         resumes study\n\
         step 450 study.failed study env VTRACE_LAB_AGENT=0 vtrace bench --study redis-sizes --sizes {SMALL},{LARGE} --redis-ops get \
           --requests {REDIS_REQUESTS} --request-seconds 1 --repeat 1 --layers {LAYERS} -o study > study.out 2>&1\n\
         finished study; fi\n\
         (ls /run/netns; ls /run/vtrace-lab; ps -o pid,comm,args) > after-down.out 2>&1\n\
         mark done\n",
    ));
    s
}

/// The benches' reports, drawn here from what the guest left in its share
/// (reading the study under TCG took the guest 40 s): the module-load
/// bench's and each of its runs'; the study's (JSON, text, HTML), the 64 B
/// and 16 KiB GET runs' of each platform, and the Kata 64 B GET run's as
/// `redis`, a sandbox running when it began.
fn report_the_benches_here(out: &Path, files: &mut GuestFiles) {
    if !files.files.contains_key("bench.failed") {
        let bench = out.join("bench");
        draw_report(out, files, "bench", &bench, "json");
        draw_report(out, files, "bench", &bench, "text");
        for p in ["containerd-runc", "kata"] {
            for c in [MODULES.to_string(), format!("{MODULES}x{LOADERS}")] {
                let run = bench.join(format!("cells/{p}/modules-{c}/rep1.vtrace"));
                draw_report(out, files, &format!("modules-{p}-{c}"), &run, "json");
            }
        }
    }
    if files.files.contains_key("study.failed") {
        return;
    }
    let study = out.join("study");
    for format in ["json", "text", "html"] {
        draw_report(out, files, "study", &study, format);
    }
    for p in STUDY_PLATFORMS {
        for cell in [format!("{SMALL}-get"), format!("{LARGE}-get")] {
            let run = study.join(format!("cells/{p}/redis-{cell}/rep1.vtrace"));
            draw_report(out, files, &format!("study-{p}-{cell}"), &run, "json");
        }
        let sized = std::fs::read_to_string(study.join(format!("cells/{p}/redis-requests"))).unwrap_or_default();
        files.files.insert(format!("requests-{p}.json"), sized);
    }
    let kata = study.join(format!("cells/kata/redis-{SMALL}-get/rep1.vtrace"));
    draw_report(out, files, "redis", &kata, "json");
    draw_report(out, files, "redis", &kata, "text");
}

/// The files the guest's script wrote.
struct Guest(GuestFiles);

impl Guest {
    fn text(&self, name: &str) -> &str {
        self.0.text(name)
    }

    /// The report of recording `name`; a failed step fails with what it said.
    fn report(&self, name: &str) -> Value {
        self.0.report(name, "up.out")
    }
}

fn guest() -> &'static Guest {
    static GUEST: OnceLock<Result<Guest, String>> = OnceLock::new();
    match GUEST.get_or_init(boot) {
        Ok(g) => g,
        Err(why) => panic!("{why}"),
    }
}

fn boot() -> Result<Guest, String> {
    let out = TempDir::new("kata");
    let mut files = run_in_guest(&script(), &out.0, Duration::from_secs(900))?;
    report_the_benches_here(&out.0, &mut files);
    Ok(Guest(files))
}

/// Runs `script` in the stock-kernel guest with Kata, containerd, QEMU,
/// Firecracker and the Redis unikernel, its files left in `out`.
fn run_in_guest(script: &str, out: &Path, timeout: Duration) -> Result<GuestFiles, String> {
    if !vtrace_tests::is_root() {
        return Err("run as root".into());
    }
    vtrace::lab::guest::can_run().map_err(|why| format!("the stock-kernel guest cannot run here: {why}"))?;
    let kata = vmm_dir().join("kata");
    for needed in [
        "containerd-shim-kata-v2",
        "kata-agent",
        "virtiofsd",
        "configuration-qemu.toml",
    ] {
        if !kata.join(needed).is_file() {
            return Err(format!(
                "{} is missing: the Kata tests take Kata from ../shared/vmm/kata (or $VTRACE_VMM_DIR/kata; \
                 its PROVENANCE.md says how it is built)",
                kata.join(needed).display()
            ));
        }
    }
    // The study's other platforms: Firecracker and the Redis unikernel.
    let firecracker = vmm_dir().join("firecracker/firecracker");
    let unikraft_redis = vmm_dir().join("unikraft/redis_qemu-x86_64");
    for needed in [&firecracker, &unikraft_redis] {
        if !needed.is_file() {
            return Err(format!(
                "{} is missing: the study takes Firecracker and the Redis unikernel from ../shared/vmm \
                 (or $VTRACE_VMM_DIR; see its PROVENANCE.md files for how they are built)",
                needed.display()
            ));
        }
    }
    // virtiofsd goes to /usr/bin too, for its libraries to come along.
    let mut binaries: Vec<PathBuf> = vec![bin("vtrace"), kata.join("virtiofsd"), firecracker];
    for tool in [
        "qemu-system-x86_64",
        "redis-benchmark",
        "ip",
        "containerd",
        "ctr",
        "containerd-shim-runc-v2",
        "runc",
    ] {
        binaries.push(system_tool(tool)?);
    }
    let mut files = vtrace::lab::guest::vm_platform_files().map_err(|e| format!("preparing the VM files: {e}"))?;
    // Its guest with vtrace's agent, as `lab up kata` there makes it, and
    // without, for the benches (VTRACE_LAB_AGENT=0).
    for vtrace in [Some(bin("vtrace")), None] {
        files.extend(
            vtrace::lab::kata::guest_files(&kata, vtrace.as_deref())
                .map_err(|e| format!("making the Kata guest: {e}"))?,
        );
    }
    let rootfs = vtrace::lab::rootfs::ensure().map_err(|e| format!("the lab rootfs: {e}"))?;
    files.push((rootfs.clone(), rootfs));
    files.push((kata, "/vmm/kata".into()));
    files.push((unikraft_redis, "/vmm/redis_qemu-x86_64".into()));
    Ok(run_guest("Kata", Board::Plain, &binaries, &files, script, out, timeout)?.out)
}

fn rows<'a>(r: &'a Value, table: &str) -> &'a [Value] {
    r[table].as_array().map_or(&[], Vec::as_slice)
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn the_sandbox_is_one_kata_instance_with_its_roles() {
    let g = guest();
    for name in ["start", "redis"] {
        let r = g.report(name);
        eprintln!("{}", g.text(&format!("{name}.txt")));
        let threads = rows(&r, "threads");
        let roles: std::collections::BTreeSet<&str> = threads
            .iter()
            .filter(|t| t["platform"] == "kata")
            .filter_map(|t| t["role"].as_str())
            .collect();
        eprintln!("{name}: roles {roles:?}");
        for role in ["shim", "vmm", "vcpu", "vhost", "virtiofsd"] {
            assert!(roles.contains(role), "{name}: no {role} among {roles:?}");
        }
        let instances: std::collections::BTreeSet<&str> = threads
            .iter()
            .filter(|t| t["platform"] == "kata")
            .filter_map(|t| t["instance"].as_str())
            .collect();
        assert_eq!(instances.len(), 1, "{name}: {instances:?}");
    }
}

/// Packets vtrace counted at `hop` of device `name`.
fn hop_packets(r: &Value, name: &str, hop: &str) -> u64 {
    rows(r, "devices")
        .iter()
        .filter(|d| d["name"] == name && d["hop"] == hop)
        .map(|d| n(&d["packets"]))
        .sum()
}

/// Frames through the veth, the netns's eth0 and the tap equal their own
/// counters, both ways: with the sandbox started inside the recording (its
/// devices made during it count from zero) and with it running.
#[test]
fn frames_through_veth_netns_and_tap_equal_their_counters_both_ways() {
    let g = guest();
    eprintln!("{}", g.text("netns-links.out"));
    for name in ["start", "redis"] {
        let r = g.report(name);
        let counters = rows(&r, "device_counters");
        for dev in ["vtl-kata0", "eth0", "tap0_kata"] {
            let c = counters
                .iter()
                .find(|c| c["name"] == dev)
                .unwrap_or_else(|| panic!("{name}: no counters of {dev}: {counters:?}"));
            let (tx, rx) = (hop_packets(&r, dev, "xmit"), hop_packets(&r, dev, "receive"));
            eprintln!(
                "{name}: {dev}: xmit {tx} (tx_packets {}), receive {rx} (rx_packets {})",
                c["tx_packets"], c["rx_packets"]
            );
            // At least a packet per ping went out of each.
            assert!(n(&c["tx_packets"]) >= PINGS as u64, "{name}: {dev}: {c}");
            assert_eq!(tx, n(&c["tx_packets"]), "{name}: {dev} xmit");
            assert_eq!(rx, n(&c["rx_packets"]), "{name}: {dev} receive");
        }
        // The tap: what its readers took is what it sent the VM (vhost-net's
        // tun_recvmsg, and QEMU's own read before vhost took the queue at
        // boot), what they wrote what the VM sent (tun/tap count at the reader).
        let tap = counters.iter().find(|c| c["name"] == "tap0_kata").unwrap();
        // vhost-net's tun_get_user calls are inside its tun_sendmsg (a
        // frame too large to batch): QEMU's are its own writes.
        let frames = |functions: &[&str]| -> u64 {
            rows(&r, "tun")
                .iter()
                .filter(|t| t["device"] == "tap0_kata" && functions.iter().any(|f| t["function"] == *f))
                .filter(|t| t["function"] != "tun_get_user" || t["role"] != "vhost")
                .map(|t| n(&t["frames"]))
                .sum()
        };
        let to_vm = frames(&["tun_recvmsg", "tun_chr_read_iter"]);
        let from_vm = frames(&["tun_sendmsg", "tun_get_user"]);
        eprintln!(
            "{name}: tap0_kata: read {to_vm} (vhost {}), written {from_vm} (vhost {}); counters {tap}",
            frames(&["tun_recvmsg"]),
            frames(&["tun_sendmsg"])
        );
        assert_eq!(to_vm, n(&tap["tx_packets"]), "{name}: frames to the VM");
        assert_eq!(from_vm, n(&tap["rx_packets"]), "{name}: frames from the VM");
    }
}

#[test]
fn no_packet_is_reported_dropped_when_none_was_lost() {
    let g = guest();
    for name in ["start", "redis"] {
        let r = g.report(name);
        eprintln!("{name}: drops {}", r["drops"]);
        let lost: Vec<&Value> = rows(&r, "drops").iter().filter(|d| d["lost"] == true).collect();
        // IPv4 only, on every lab link and in the guest: a frame lost here
        // would be a real loss.
        assert!(lost.is_empty(), "{name}: {lost:?}");
    }
    // Ping's own count agrees: nothing lost either way.
    let out = g.text("start.out");
    assert_eq!(out.matches(" 0% packet loss").count(), 2, "{out}");
}

/// When Kata's shim logged `msg` first (its log lines carry the time to
/// the ns, on the clock vtrace's start_unix_ns reads), ns since the Unix epoch.
fn kata_logged(syslog: &str, msg: &str) -> u64 {
    let line = syslog
        .lines()
        .find(|l| l.contains(&format!("msg=\"{msg}")))
        .unwrap_or_else(|| panic!("Kata never logged {msg:?}:\n{syslog}"));
    let time = line.split("time=\"").nth(1).and_then(|t| t.split('"').next()).unwrap();
    humantime::parse_rfc3339(time)
        .unwrap()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

#[test]
fn the_sandbox_start_is_in_phases_bracketed_by_katas_own_log() {
    let g = guest();
    let r = g.report("start");
    let start = r["starts"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["platform"] == "kata"))
        .unwrap_or_else(|| panic!("no kata start: {}", r["starts"]));
    let milestones = start["milestones"].as_array().unwrap();
    let at = |what: &str| -> (u64, u64) {
        let m = milestones
            .iter()
            .find(|m| m["what"] == what)
            .unwrap_or_else(|| panic!("no milestone {what:?}: {milestones:?}"));
        (n(&m["earliest_ns"]), n(&m["at_ns"]))
    };
    eprintln!("{}", serde_json::to_string_pretty(start).unwrap());
    let (command, _) = at("command started");
    let (shim, _) = at("first shim thread");
    let (vmm, _) = at("first vmm thread");
    let (vcpu, _) = at("first vcpu thread");
    let (guest_from, guest_by) = at("guest first ran");
    let (agent, _) = at("guest accepted vsock port 1024: agent reachable");
    let (_, frame_by) = at("first frame received by tap0_kata");
    assert!(
        command < shim && shim < vmm && vmm < vcpu && vcpu <= guest_from && guest_from <= guest_by,
        "{milestones:?}"
    );
    // Kata's own log on the same clock: the shim forked QEMU after saying
    // "Starting VM" and before "Start logging QEMU"; QEMU made its vCPU
    // before QMP answered ("VM started"); the guest ran before the agent
    // was reached. 5 ms for where the two clocks were read at the start.
    let syslog = g.text("syslog.log");
    let t0 = n(&r["start_unix_ns"]);
    let logged = |msg: &str| kata_logged(syslog, msg).saturating_sub(t0);
    const SKEW: u64 = 5_000_000;
    assert!(shim <= logged("loaded configuration") + SKEW, "shim");
    assert!(
        logged("Starting VM") <= vmm + SKEW && vmm <= logged("Start logging QEMU") + SKEW,
        "QEMU forked at {vmm} ns, Kata: Starting VM {} ns, Start logging QEMU {} ns",
        logged("Starting VM"),
        logged("Start logging QEMU")
    );
    assert!(vcpu <= logged("VM started") + SKEW, "vCPU at {vcpu} ns");
    assert!(
        guest_from <= logged("Agent started in the sandbox"),
        "guest from {guest_from} ns"
    );
    // The shim made its agent client, then dialled until the agent
    // answered, then said the agent started.
    assert!(
        logged("New client") <= agent + SKEW && agent <= logged("Agent started in the sandbox") + SKEW,
        "agent reachable at {agent} ns, Kata: New client {} ns, Agent started {} ns",
        logged("New client"),
        logged("Agent started in the sandbox")
    );
    assert!(
        guest_from < agent,
        "the agent answered at {agent} ns before the guest ran"
    );
    assert!(frame_by > guest_from, "the VM's first frame by {frame_by} ns");
    // The phases run from the recording's start to its end and share out
    // every interval: each of the instance's roles sums to its total.
    let phases = start["phases"].as_array().unwrap();
    assert_eq!(n(&phases[0]["start_ns"]), 0);
    assert_eq!(n(&phases[phases.len() - 1]["end_ns"]), n(&r["wall_ns"]));
    for w in phases.windows(2) {
        assert_eq!(w[0]["end_ns"], w[1]["start_ns"]);
    }
    for role in rows(&r, "roles").iter().filter(|x| x["platform"] == "kata") {
        let name = role["role"].as_str().unwrap();
        let phased: u64 = phases.iter().map(|p| p["cpu_ns"][name].as_u64().unwrap_or(0)).sum();
        assert_eq!(phased, n(&role["total_ns"]), "{name}: every state but idle");
    }
    // A sandbox running when recording began did not start in it (its shim
    // makes new threads as it goes).
    let running = g.report("redis");
    assert!(
        rows(&running, "starts").is_empty(),
        "the running sandbox has a start: {}",
        running["starts"]
    );
}

#[test]
fn kvm_exits_by_reason_add_up_to_kvms_own_count() {
    let g = guest();
    for name in ["start", "redis"] {
        let r = g.report(name);
        let exits = rows(&r["kvm"], "kvm_stats")
            .iter()
            .find(|s| s["stat"] == "exits")
            .unwrap_or_else(|| panic!("{name}: no exits statistic: {}", r["kvm"]));
        eprintln!("{name}: KVM {} exits, vtrace {}", exits["kvm"], exits["vtrace"]);
        assert_eq!(n(&exits["kvm"]), n(&exits["vtrace"]), "{name}: {exits}");
        assert!(n(&exits["kvm"]) > 0, "{name}");
    }
}

#[test]
fn redis_requests_are_the_recordings_operations() {
    let g = guest();
    let r = g.report("redis");
    let ops = &r["workload"]["ops"];
    assert_eq!(
        (ops["count"].as_f64(), ops["source"].as_str()),
        (Some(REDIS_REQUESTS as f64), Some("redis-benchmark")),
        "{}",
        r["workload"]
    );
}

#[test]
fn lab_down_leaves_no_sandbox_netns_or_containerd() {
    let g = guest();
    assert!(!g.0.files.contains_key("down.failed"), "{}", g.text("down.out"));
    let after = g.text("after-down.out");
    for left in ["vtl-kata", "containerd", "qemu-system", "virtiofsd", "containerd-shim"] {
        assert!(!after.contains(left), "{left} is left after lab down:\n{after}");
    }
}

/// The whole study one level down, for its figures: a bench the suite does
/// not run (`cargo test --release --test kata -- --ignored --nocapture
/// the_whole_study`). `VTRACE_STUDY_ARGS` is added to its command
/// (default `--repeat 1`); `VTRACE_KEEP_GUEST_OUT=DIR` keeps the bench in
/// `DIR/study` for `vtrace report`. Prints the report and how long it took.
#[test]
#[ignore = "a bench: the whole study one level down (about 10 minutes with --repeat 1)"]
fn the_whole_study_one_level_down() {
    let args = std::env::var("VTRACE_STUDY_ARGS").unwrap_or_else(|_| "--repeat 1".into());
    let script = format!(
        "{GUEST_STEPS}export VTRACE_KATA_DIR=/vmm/kata VTRACE_UNIKRAFT_IMAGE=/vmm/redis_qemu-x86_64\n\
         step 3300 study.failed study vtrace bench --study redis-sizes {args} -o study > study.out 2>&1\n\
         mark done\n"
    );
    let out = TempDir::new("study");
    let mut files = run_in_guest(&script, &out.0, Duration::from_secs(3600)).unwrap_or_else(|e| panic!("{e}"));
    report_the_benches_here(&out.0, &mut files);
    let g = Guest(files);
    let study = g.report("study");
    println!("{}\n{}", g.text("steps.log"), g.text("study.txt"));
    for c in study["bench"]["cells"].as_array().expect("bench cells") {
        assert!(
            c["runs"].as_u64() > Some(0) && c["errors"].as_array().is_some_and(Vec::is_empty),
            "{c}"
        );
    }
}

/// The bench's runc cells are a runc instance (recorded as `runc`), its
/// container's node the app; Kata's cells the sandbox's roles.
#[test]
fn a_bench_of_kata_against_runc_records_every_cell() {
    let g = guest();
    let bench = g.report("bench");
    eprintln!("{}", g.text("bench.txt"));
    let cells = bench["bench"]["cells"].as_array().expect("bench cells");
    // The module-load study's two cells, per platform.
    assert_eq!(cells.len(), 4, "{cells:?}");
    for c in cells {
        assert_eq!(c["runs"], 1, "{c}");
        let roles: Vec<&str> = c["cpu_ns_per_op"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|r| r[0].as_str())
            .collect();
        // Kata's cost sits in its vCPU and virtio-fs; runc's container is the app.
        let expected: &[&str] = if c["platform"] == "kata" {
            &["vcpu", "virtiofsd", "shim"]
        } else {
            &["app"]
        };
        for role in expected {
            assert!(roles.contains(role), "{}: no {role} in {roles:?}", c["platform"]);
        }
    }
    let runc = g.report(&format!("modules-containerd-runc-{MODULES}"));
    assert_eq!(runc["platform"], "runc", "{}", runc["platform"]);
    let app = rows(&runc, "threads")
        .iter()
        .find(|t| t["comm"] == "node")
        .unwrap_or_else(|| panic!("no node thread"));
    assert_eq!(
        (app["platform"].as_str(), app["role"].as_str()),
        (Some("runc"), Some("app")),
        "{app}"
    );
}

/// Seed 000 in one command: every cell of its five platforms recorded,
/// each run sending its pilot's count of requests (redis-benchmark's own
/// count is the recording's), and the report drawing the study's table,
/// CPU split and Table 2 with a verdict on each of its findings.
#[test]
fn the_study_records_every_cell_of_its_five_platforms() {
    let g = guest();
    let study = g.report("study");
    eprintln!("{}\n{}", g.text("study.out"), g.text("study.txt"));
    let cells = study["bench"]["cells"].as_array().expect("bench cells");
    // Two sizes, GET alone (the study's SET cells measure the same path,
    // and cost this file 100 s under TCG).
    assert_eq!(cells.len(), STUDY_PLATFORMS.len() * 2, "{cells:?}");
    for c in cells {
        assert_eq!(
            (c["runs"].as_u64(), c["errors"].as_array().map(Vec::len)),
            (Some(1), Some(0)),
            "{c}"
        );
        assert!(c["ops_per_s"]["mean"].as_f64().unwrap() > 0.0, "{c}");
        // The serving side: the guest ran (guest time), the client is apart.
        let guest_ns = c["serving"]["ns_per_op"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s[0] == "guest")
            .unwrap()[1]
            .as_f64()
            .unwrap();
        assert!(guest_ns > 0.0, "{c}");
        assert!(c["serving"]["client_ns_per_op"].as_f64().unwrap() > 0.0, "{c}");
    }
    for p in STUDY_PLATFORMS {
        // The pilot's count: within --requests, and no fewer than it allows.
        let sized: Value = serde_json::from_str(g.text(&format!("requests-{p}.json"))).unwrap();
        assert_eq!(sized["requests"].as_u64(), Some(REDIS_REQUESTS), "{p}: {sized}");
        assert!(sized["pilot_per_s"].as_f64().unwrap() > 0.0, "{p}: {sized}");
        for cell in [format!("{SMALL}-get"), format!("{LARGE}-get")] {
            let r = g.report(&format!("study-{p}-{cell}"));
            let ops = &r["workload"]["ops"];
            assert_eq!(
                (ops["count"].as_f64(), ops["source"].as_str()),
                (Some(REDIS_REQUESTS as f64), Some("redis-benchmark")),
                "{p} {cell}"
            );
            assert!(
                rows(&r, "notes").iter().any(|n| n
                    .as_str()
                    .is_some_and(|n| n.starts_with("instance ") && n.contains(&format!("({p})")))),
                "{p} {cell}: not recorded as a {p} instance: {:?}",
                r["notes"]
            );
        }
    }
    let findings = study["study"]["findings"].as_array().expect("the study's findings");
    assert_eq!(findings.len(), 7, "{findings:?}");
    for f in findings {
        assert!(["agrees", "disagrees"].contains(&f["verdict"].as_str().unwrap()), "{f}");
    }
    let html = g.text("study.html");
    assert!(
        html.contains("Study redis-sizes") && html.contains("<svg"),
        "the HTML report lacks the study"
    );
}

/// The study's Table 2 against the taps' own counters: at 16 KiB GET the
/// Unikraft unikernels (lwIP, no TSO) hand their tap frames no larger than
/// a full frame, where Firecracker's and Kata's Linux guests hand it TSO
/// aggregates. On every platform the frames vtrace counted at the tap are
/// the tap's own counts, both ways, and through the function that moved
/// them (vhost-net's or the VMM's).
#[test]
fn at_16_kib_get_unikrafts_frames_never_exceed_a_full_frame_and_firecrackers_and_katas_do() {
    let g = guest();
    for p in STUDY_PLATFORMS {
        let r = g.report(&format!("study-{p}-{LARGE}-get"));
        let counters = rows(&r, "device_counters");
        let tap = counters
            .iter()
            .find(|d| d["role"] == "tap")
            .unwrap_or_else(|| panic!("{p}: no tap: {counters:?}"));
        let name = tap["name"].as_str().unwrap();
        let receive = rows(&r, "devices")
            .iter()
            .find(|d| d["name"] == name && d["hop"] == "receive")
            .unwrap_or_else(|| panic!("{p}: no receive hop of {name}"));
        let (packets, bytes) = (n(&tap["rx_packets"]), n(&tap["rx_bytes"]));
        let (largest, full) = (n(&receive["max_bytes"]), n(&receive["mtu_edge"]));
        eprintln!(
            "{p}: {name} from the guest: {packets} frames, {bytes} B (mean {} B), vtrace {} frames {} B, largest {largest} B, full frame {full} B",
            bytes / packets.max(1),
            receive["packets"],
            receive["bytes"]
        );
        assert_eq!(
            (n(&receive["packets"]), n(&receive["bytes"])),
            (packets, bytes),
            "{p}: {receive}"
        );
        assert_eq!(full, 1514, "{p}");
        if p.starts_with("unikraft") {
            assert!(largest <= full, "{p}: a frame of {largest} B from lwIP");
            assert!(
                bytes <= packets * full,
                "{p}: the tap's own counters average above a full frame"
            );
        } else if ["kata", "firecracker"].contains(p) {
            assert!(
                largest > full,
                "{p}: no TSO aggregate from the guest (largest {largest} B)"
            );
            // The tap's own counters: on average above a full frame, so some were.
            assert!(bytes > packets * full, "{p}: mean {} B", bytes / packets.max(1));
        }
        // Frames moved by the tap's user equal its counters both ways
        // (vhost-net's tun_sendmsg hands a frame too large to batch to
        // tun_get_user, counted under both: the VMM's own are its writes).
        let frames = |functions: &[&str], by_vhost: bool| -> u64 {
            rows(&r, "tun")
                .iter()
                .filter(|t| t["device"] == name && functions.iter().any(|f| t["function"] == *f))
                .filter(|t| by_vhost || t["role"] != "vhost")
                .map(|t| n(&t["frames"]))
                .sum()
        };
        assert_eq!(
            frames(&["tun_sendmsg"], true) + frames(&["tun_get_user"], false),
            packets,
            "{p}: frames from the VM"
        );
        assert_eq!(
            frames(&["tun_recvmsg", "tun_chr_read_iter"], true),
            n(&tap["tx_packets"]),
            "{p}: frames to the VM"
        );
    }
}

/// The sandbox's guest runs `vtrace agent` beside kata-agent (the lab's
/// guest initrd starts it, on vsock port 1025 where kata-agent has 1024),
/// and `record --guest auto` finds it by the guest-cid on the command line
/// of the QEMU Kata's shim started: the guest's recording comes whole, its
/// clock mapped with every exchange in causal order within the stated
/// bound, its CPU beside the vCPU thread, kata-agent among its threads, and
/// its eth0 frames as its programs saw them equal eth0's own counters.
#[test]
fn the_sandboxs_guest_is_recorded_by_an_agent_beside_kata_agent() {
    let g = guest();
    let r = g.report("hops");
    let guest = vtrace_tests::assert_one_guest_reached(&r, "kata", "cid:", 4, "");
    assert!(
        rows(guest, "threads").iter().any(|t| t["comm"] == "kata-agent"),
        "kata-agent among the guest's threads"
    );
    let inner = g.report("hops-inner");
    let (sent, _) = vtrace_tests::assert_guest_eth0_matches_its_counters(&inner, "kata");
    assert!(sent >= 2 * PINGS as u64, "both pings' frames: {sent}");
}

/// A busy loop run in the sandbox's container (through kata-agent) during
/// the hops recording: the guest's recording of its thread equals the
/// loop's own schedstat, read inside the container once it exited.
#[test]
fn a_busy_loop_in_the_sandbox_matches_its_own_schedstat_in_the_guests_recording() {
    let g = guest();
    vtrace_tests::assert_guest_spin_matches_schedstat(&g.report("hops-inner"), g.text("spin.out"), "kata");
}

/// The sandbox's pings followed on both sides of the boundary (Kata's
/// QEMU, vhost-net on the tap tc mirrors to): every round trip at the tap
/// is host and guest stages with no residual, on the clock the pairs
/// anchor.
#[test]
fn the_sandboxs_pings_are_followed_across_the_boundary_with_no_residual() {
    let g = guest();
    vtrace_tests::assert_pings_joined_across_the_boundary(&g.report("both"), g.text("both.out"), PINGS, "kata");
}

/// Every frame through the pod's namespace is followed hop by hop both
/// ways, through tc's mirred between eth0 and the tap (Kata's tcfilter
/// model): the edges through tc count exactly the frames each device
/// received (its own counters), however long tc took under nested KVM.
#[test]
fn every_frame_is_followed_through_tc_mirred_both_ways() {
    let g = guest();
    let r = g.report("hops");
    let counters = rows(&r, "device_counters");
    let received = |dev: &str| {
        let c = counters
            .iter()
            .find(|c| c["name"] == dev)
            .unwrap_or_else(|| panic!("no counters of {dev}: {counters:?}"));
        n(&c["rx_packets"])
    };
    let edge = |from: &str, to: &str| {
        rows(&r, "hops")
            .iter()
            .find(|h| h["from"] == from && h["to"] == to)
            .unwrap_or_else(|| panic!("{from} -> {to} missing: {}", r["hops"]))
    };
    // Host -> guest: the host's veth, eth0 in the pod's namespace, tc, the
    // tap vhost-net reads; guest -> host the other way round. Each way
    // carries one ping's requests and the other's replies.
    let ways = [
        (
            "host -> guest",
            &[
                "vtl-kata0:queue",
                "vtl-kata0:start_xmit",
                "eth0:rx",
                "vtl-kata0:xmit",
                "eth0:receive",
                "tap0_kata:queue",
                "tap0_kata:start_xmit",
                "tap0_kata:xmit",
            ][..],
        ),
        (
            "guest -> host",
            &[
                "tap0_kata:receive",
                "eth0:queue",
                "eth0:start_xmit",
                "vtl-kata0:rx",
                "eth0:xmit",
                "vtl-kata0:receive",
            ][..],
        ),
    ];
    for (way, path) in ways {
        let mut line = String::new();
        for w in path.windows(2) {
            let e = edge(w[0], w[1]);
            line.push_str(&format!(
                " -> {} {:.1} µs ({})",
                w[1],
                n(&e["mean_ns"]) as f64 / 1e3,
                e["count"]
            ));
            assert!(n(&e["count"]) >= 2 * PINGS as u64, "{way}: {e}");
        }
        eprintln!("{way}: {}{line}", path[0]);
    }
    for (from, to) in [("eth0", "tap0_kata"), ("tap0_kata", "eth0")] {
        let e = edge(&format!("{from}:receive"), &format!("{to}:queue"));
        assert_eq!(n(&e["count"]), received(from), "through tc from {from} to {to}: {e}");
    }
}

/// Seed 002's study, runc against Kata through the same containerd: node
/// requires MODULES packages from the lab volume (for Kata shared into the
/// VM by virtio-fs), one loader and LOADERS at once. Every cell counts
/// node's own loads; every package's three files (package.json, index.js,
/// lib.js) are opened at least once per load: by node itself under runc,
/// by virtiofsd on the host for the guest's FUSE requests under Kata; and
/// virtiofsd's CPU is part of Kata's cost per module.
#[test]
fn the_module_load_study_counts_each_load_and_what_virtio_fs_did_for_it() {
    let g = guest();
    let bench = g.report("bench");
    let cells = bench["bench"]["cells"].as_array().expect("bench cells");
    for (platform, opener) in [("containerd-runc", "app:openat"), ("kata", "virtiofsd:openat2")] {
        for loaders in [1, LOADERS] {
            let param = if loaders == 1 {
                MODULES.to_string()
            } else {
                format!("{MODULES}x{loaders}")
            };
            let cell = cells
                .iter()
                .find(|c| c["platform"] == platform && c["param"] == param)
                .unwrap_or_else(|| panic!("no cell {platform} {param}: {cells:?}"));
            assert_eq!(cell["runs"], 1, "{cell}");
            assert!(cell["errors"].as_array().unwrap().is_empty(), "{cell}");
            let run = g.report(&format!("modules-{platform}-{param}"));
            assert_eq!(
                run["workload"]["ops"]["count"].as_f64(),
                Some((MODULES * loaders) as f64),
                "{platform} {param}: {}",
                run["workload"]
            );
            let calls = cell["file_calls_per_op"].as_array().unwrap();
            let opened = calls
                .iter()
                .find(|c| c[0] == opener)
                .and_then(|c| c[1].as_f64())
                .unwrap_or(0.0);
            assert!(
                opened >= 3.0,
                "{platform} {param}: {opener} per module {opened}: {calls:?}"
            );
            let cpu = |role: &str| {
                cell["cpu_ns_per_op"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|r| r[0] == role)
                    .and_then(|r| r[1].as_f64())
                    .unwrap_or(0.0)
            };
            if platform == "kata" {
                assert!(cpu("virtiofsd") > 0.0 && cpu("vcpu") > 0.0, "{cell}");
            }
        }
    }
}
