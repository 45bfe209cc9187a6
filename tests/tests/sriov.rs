//! SR-IOV for real, one level down: the stock-kernel guest boots on
//! QEMU >= 8 with an emulated SR-IOV NIC (igb, behind an emulated IOMMU:
//! vtrace::lab::guest::Board::SriovNic), where `vtrace lab up sriov` makes
//! a VF, binds it to vfio-pci and passes it through to a KVM guest as on a
//! real host, and `vtrace record --platform sriov` records pings into that
//! guest. Each figure is checked against ground truth read there while the
//! VM runs: the PF's own counters, /proc/interrupts for the vfio vectors,
//! KVM's own statistics, ping's own count.
//!
//! QEMU 10 comes from scripts/setup.sh (bookworm-backports, unpacked into a
//! private prefix) or $VTRACE_SRIOV_QEMU. One guest boot serves every test.

use std::{collections::HashMap, path::PathBuf, sync::OnceLock, time::Duration};

use serde_json::Value;
use vtrace::lab::guest::Board;
use vtrace_tests::{
    GUEST_STEPS, GuestRun, TempDir, USER_VM_TRUTH, bin, check_user_vm, path_stages, run_guest, system_tool,
};

/// The lab's address of the SR-IOV guest.
const ADDR: &str = "10.99.27.2";
const PINGS: u64 = 50;
const LAYERS: &str = "cpu,net,kvm,path";
/// Seed 003's bench: pings per cell and the CPU stress levels (none, and
/// more busy loops than CPUs: a level between checks nothing these do not).
const BENCH_PINGS: u32 = 50;
const BENCH_STRESS: &str = "0,2";

/// Ground truth read inside the recorded command, before and after the
/// pings: /proc/interrupts, KVM's injections, the PF's counters. Before
/// it, `arp_settled ADDR`: one ARP exchange with the guest, so that neither
/// side's neighbour entry probes inside the pings' 2.5 s (the host's is
/// confirmed for 15 s at least; the guest's, refreshed by the request,
/// probes 5 s after its first reply). A probe and its answer on either side
/// of a truth reading made the PF's frames one more than the pings'.
const TRUTH: &str = r#"arp_settled() {
  pf=$(ls /sys/class/net | while read d; do [ -e /sys/class/net/$d/device/sriov_totalvfs ] && echo $d; done | head -1)
  arping -c 1 -w 2 -I $pf $1 > /dev/null 2>&1
}
truth() {
  cat /proc/interrupts > irq-$1.txt
  cat /sys/kernel/debug/kvm/*-*/irq_injections > inj-$1.txt 2>/dev/null
  pf=$(ls /sys/class/net | while read d; do [ -e /sys/class/net/$d/device/sriov_totalvfs ] && echo $d; done | head -1)
  echo "$pf $(cat /sys/class/net/$pf/statistics/tx_packets) $(cat /sys/class/net/$pf/statistics/rx_packets)" > pf-$1.txt
}
"#;

/// An SR-IOV VM as a user starts one by hand: a VF made and bound to
/// vfio-pci with sysfs and `ip`, then a plain QEMU/KVM command line (no
/// thread names) with the lab's Linux kernel and initramfs, pinged, its
/// threads' stat and KVM's vCPU threads read before it stops.
const USER_VM: &str = r#"pf=$(ls /sys/class/net | while read d; do [ -e /sys/class/net/$d/device/sriov_totalvfs ] && echo $d; done | head -1)
dev=/sys/class/net/$pf/device
modprobe vfio-pci
echo 0 > $dev/sriov_drivers_autoprobe
[ "$(cat $dev/sriov_numvfs)" != 0 ] || echo 1 > $dev/sriov_numvfs
vf=$(basename $(readlink $dev/virtfn0))
ip link set $pf vf 0 mac 52:54:00:77:00:02
echo vfio-pci > /sys/bus/pci/devices/$vf/driver_override
[ -e /sys/bus/pci/devices/$vf/driver ] && echo $vf > /sys/bus/pci/devices/$vf/driver/unbind
echo $vf > /sys/bus/pci/drivers_probe
ip addr add 10.77.0.1/24 dev $pf; ip link set $pf up
qemu-system-x86_64 -accel kvm -cpu host -m 256 -kernel /var/lib/vtrace-lab/linuxvm/kernel/boot/vmlinuz-* \
  -initrd /var/lib/vtrace-lab/linuxvm/initrd.gz -append "console=ttyS0 quiet panic=-1 vtrace.addr=10.77.0.2" \
  -device vfio-pci,host=$vf -nodefaults -display none -monitor none -serial file:/tmp/usersriov.log -no-reboot &
qemu=$!
i=0; until ping -c 1 -W 1 10.77.0.2 > /dev/null 2>&1; do i=$((i+1)); [ $i -lt 60 ] || { echo "no answer from 10.77.0.2 after 60 tries"; cat /tmp/usersriov.log; kill $qemu; exit 1; }; done
ping -c 20 -i 0.05 10.77.0.2
user_vm_truth $qemu usersriov
kill $qemu; wait $qemu
exit 0
"#;

/// The VF guest up, pinged inside a recording with its agent (ground
/// truth read around the pings), reported, down; then seed 003's bench:
/// virtio (qemu-kvm, vhost-net) against SR-IOV under ping with 0 and 2
/// busy loops, each platform brought up and down by the bench, its VMs
/// without agents (VTRACE_LAB_AGENT=0: as their users run them). A boot after a freeze goes on
/// after the VF guest's part or the bench, whichever was finished.
fn script() -> String {
    format!(
        "{GUEST_STEPS}cat > /tmp/truth.sh <<'EOF'\n{TRUTH}EOF\n{}\
         if once sriov; then\n\
         if step 150 sriov.failed 'up sriov' vtrace lab up sriov > up.out 2>&1; then\n\
           ip link show >> up.out 2>&1\n\
           step 150 sriov.failed 'record pings' vtrace record --platform sriov --layers {LAYERS} --events --hops \
             --guest auto --guest-layers cpu,net,path -o sriov.vtrace \
             -- sh -c '. /tmp/truth.sh; arp_settled {ADDR}; truth before; ping -c {PINGS} -i 0.05 {ADDR}; rc=$?; truth after; sh /tmp/guest-spin.sh sriov > spin.out 2>&1; exit $rc' \
             > record.out 2>&1\n\
           cp -r sriov.vtrace/guests/*-* sriov-inner.vtrace\n\
           step 90 sriov.failed 'report' vtrace report sriov.vtrace --format json -o sriov.json\n\
           step 90 sriov.failed 'text report' vtrace report sriov.vtrace > sriov.txt 2>&1\n\
         else cat /var/lib/vtrace-lab/run/sriov/console.log >> up.out; fi\n\
         step 60 sriov.failed 'down sriov' vtrace lab down sriov >> up.out 2>&1\n\
         finished sriov; fi\n\
         if once bench; then\n\
         step 400 bench.failed 'bench' env VTRACE_LAB_AGENT=0 vtrace bench --platforms qemu-kvm,sriov --workload ping --pings {BENCH_PINGS} \
           --stress {BENCH_STRESS} --repeat 1 --layers cpu,net,kvm,path,runq -o bench > bench.out 2>&1\n\
         step 90 bench.failed 'report bench' vtrace report bench --format json -o bench.json\n\
         step 90 bench.failed 'text report bench' vtrace report bench > bench.txt 2>&1\n\
         finished bench; fi\n\
         cat > /tmp/usersriov.sh <<'EOF'\n{USER_VM_TRUTH}{USER_VM}EOF\n\
         step 150 usersriov.failed 'record usersriov' vtrace record --platform sriov --layers cpu,net,kvm \
           -o usersriov.vtrace -- sh /tmp/usersriov.sh > usersriov.out 2>&1\n\
         step 90 usersriov.failed 'report usersriov' vtrace report usersriov.vtrace --format json -o usersriov.json\n\
         step 90 usersriov.failed 'text report usersriov' vtrace report usersriov.vtrace > usersriov.txt 2>&1\n\
         mark done\n",
        vtrace_tests::guest_spin_scripts("", 24000)
    )
}

fn guest() -> &'static GuestRun {
    static GUEST: OnceLock<Result<GuestRun, String>> = OnceLock::new();
    match GUEST.get_or_init(boot) {
        Ok(g) => g,
        Err(why) => panic!("{why}"),
    }
}

fn boot() -> Result<GuestRun, String> {
    if !vtrace_tests::is_root() {
        return Err("run as root".into());
    }
    vtrace::lab::guest::can_run().map_err(|why| format!("the stock-kernel guest cannot run here: {why}"))?;
    // A missing QEMU >= 8 fails here, naming what is missing.
    vtrace::lab::guest::sriov_qemu().map_err(|why| format!("the SR-IOV guest cannot run here: {why}"))?;
    let out = TempDir::new("sriov");
    let mut binaries: Vec<PathBuf> = vec![bin("vtrace")];
    for tool in ["qemu-system-x86_64", "ip"] {
        binaries.push(system_tool(tool)?);
    }
    let files = vtrace::lab::guest::vm_platform_files().map_err(|e| format!("preparing the VM files: {e}"))?;
    run_guest(
        "SR-IOV",
        Board::SriovNic,
        &binaries,
        &files,
        &script(),
        &out.0,
        Duration::from_secs(900),
    )
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn rows<'a>(r: &'a Value, table: &str) -> &'a [Value] {
    r[table].as_array().map_or(&[], Vec::as_slice)
}

/// The vfio IRQs of `/proc/interrupts` as read into `file`: number -> (count, name).
fn vfio_irqs(text: &str) -> HashMap<u64, (u64, String)> {
    text.lines()
        .filter(|l| l.contains("vfio-"))
        .filter_map(|l| {
            let (num, rest) = l.trim_start().split_once(':')?;
            let mut words = rest.split_whitespace();
            let count = words.next()?.parse().ok()?;
            Some((
                num.trim().parse().ok()?,
                (count, rest.split_whitespace().last()?.to_string()),
            ))
        })
        .collect()
}

/// The numbers in `file` (one per line, or words on one line).
fn numbers(text: &str) -> Vec<u64> {
    text.split_whitespace().filter_map(|w| w.parse().ok()).collect()
}

/// The instance's note: "instance ID (sriov): ... passes through VF ...".
fn instance_note(r: &Value) -> String {
    rows(r, "notes")
        .iter()
        .filter_map(Value::as_str)
        .find(|n| n.starts_with("instance sriov:"))
        .unwrap_or_else(|| panic!("no sriov instance in the notes: {}", r["notes"]))
        .to_string()
}

#[test]
fn the_vf_guest_comes_up_and_goes_without_leftovers() {
    let g = guest();
    eprintln!("the guest's whole run: {:.1} s", g.wall.as_secs_f64());
    g.out.report("sriov", "up.out");
    let up = g.out.text("up.out");
    eprintln!("{up}");
    let ready: f64 = up
        .split("ready in ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no boot time in {up}"));
    eprintln!("sriov: ready in {ready} s");
    assert!(up.contains(ADDR) && up.contains("passed through by vfio-pci"), "{up}");
    assert!(up.contains("sriov down: nothing left behind"), "{up}");
}

#[test]
fn a_vf_passed_through_is_one_sriov_instance_with_its_vf_pf_and_roles() {
    let g = guest();
    let r = g.out.report("sriov", "up.out");
    let note = instance_note(&r);
    eprintln!("{note}");
    let id = note
        .strip_prefix("instance ")
        .and_then(|n| n.split_whitespace().next())
        .unwrap()
        .to_string();
    let pf = g
        .out
        .text("pf-before.txt")
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    // The VF: its PCI address, the PF it belongs to, its index, the MAC the lab gave it.
    assert!(
        note.contains(&format!("vf 0 of {pf}, MAC 52:54:00:99:1b:02")) && note.contains("passes through VF 0000:"),
        "{note}"
    );
    assert!(note.contains(&format!("devices: {pf} (pf)")), "{note}");
    for (name, role) in [("CPU 0/KVM", "vcpu"), ("qemu-system-x86", "vmm")] {
        let t = rows(&r, "threads")
            .iter()
            .find(|t| t["comm"] == name)
            .unwrap_or_else(|| panic!("no {name} thread"));
        assert_eq!(
            (t["platform"].as_str(), t["instance"].as_str(), t["role"].as_str()),
            (Some("sriov"), Some(id.as_str()), Some(role)),
            "{t}"
        );
    }
    // The PF is the instance's device on the host.
    let dev = rows(&r, "device_counters")
        .iter()
        .find(|d| d["name"] == pf.as_str())
        .unwrap_or_else(|| panic!("no {pf} in device_counters"));
    assert_eq!(
        (dev["instance"].as_str(), dev["role"].as_str()),
        (Some(id.as_str()), Some("pf")),
        "{dev}"
    );
}

#[test]
fn pf_frames_equal_the_pfs_counters_and_the_pings_are_the_ops() {
    let g = guest();
    let r = g.out.report("sriov", "up.out");
    let pf = g.out.text("pf-before.txt").split_whitespace().next().unwrap();
    let hop = |h: &str| -> u64 {
        rows(&r, "devices")
            .iter()
            .filter(|d| d["name"] == pf && d["hop"] == h)
            .map(|d| n(&d["packets"]))
            .sum()
    };
    let counters = rows(&r, "device_counters")
        .iter()
        .find(|d| d["name"] == pf)
        .unwrap_or_else(|| panic!("no {pf} counters"));
    eprintln!(
        "{pf}: xmit {} (tx_packets {}), receive {} (rx_packets {})",
        hop("xmit"),
        counters["tx_packets"],
        hop("receive"),
        counters["rx_packets"]
    );
    // The PF's own counters over the recording's window.
    assert_eq!(hop("xmit"), n(&counters["tx_packets"]), "{counters}");
    assert_eq!(hop("receive"), n(&counters["rx_packets"]), "{counters}");
    // And the pings' frames among them, read inside the recorded command.
    let (before, after) = (
        numbers(g.out.text("pf-before.txt")),
        numbers(g.out.text("pf-after.txt")),
    );
    assert_eq!((after[0] - before[0], after[1] - before[1]), (PINGS, PINGS));
    assert_eq!(
        r["workload"]["ops"]["count"].as_f64(),
        Some(PINGS as f64),
        "{}",
        r["workload"]
    );
}

#[test]
fn vfio_interrupts_are_counted_named_and_owned_and_their_injections_are_kvms() {
    let g = guest();
    let r = g.out.report("sriov", "up.out");
    let id = instance_note(&r)
        .strip_prefix("instance ")
        .and_then(|n| n.split_whitespace().next())
        .unwrap()
        .to_string();
    let (before, after) = (
        vfio_irqs(g.out.text("irq-before.txt")),
        vfio_irqs(g.out.text("irq-after.txt")),
    );
    assert!(!after.is_empty(), "no vfio IRQ in /proc/interrupts");
    let mut raised = 0;
    for (irq, (count, name)) in &after {
        let delta = count - before.get(irq).map_or(0, |b| b.0);
        raised += delta;
        let seen: Vec<&Value> = rows(&r, "hardirqs").iter().filter(|h| n(&h["irq"]) == *irq).collect();
        let counted: u64 = seen.iter().map(|h| n(&h["count"])).sum();
        eprintln!("irq {irq} {name}: /proc/interrupts +{delta} while pinging, vtrace {counted} over the recording");
        // /proc/interrupts was read inside the recorded command: the
        // recording's window holds those and the few before and after.
        assert!(counted >= delta, "irq {irq}: vtrace {counted} < the kernel's {delta}");
        if counted > 0 {
            assert!(
                seen.iter()
                    .all(|h| h["name"] == name.as_str() && h["instance"] == id.as_str()),
                "{seen:?}"
            );
        }
    }
    assert!(raised >= PINGS, "the pings' replies raised {raised} VF interrupts");
    // KVM's irq_injections beside vtrace's kvm_inj_virq, read together.
    let inj = rows(&r["kvm"], "kvm_stats")
        .iter()
        .find(|s| s["stat"] == "irq_injections")
        .unwrap_or_else(|| panic!("no irq_injections check: {}", r["kvm"]));
    eprintln!(
        "irq_injections: KVM {} vtrace {} ({})",
        inj["kvm"], inj["vtrace"], inj["vtrace_source"]
    );
    assert_eq!(inj["kvm"], inj["vtrace"], "{inj}");
}

/// The VF guest runs `vtrace agent` as the lab's other Linux guests (its
/// /init, from the lab's share), which `record --guest auto` finds by the
/// guest-cid on QEMU's command line and reaches over vsock: the guest's
/// recording comes whole, its clock is mapped with every exchange in
/// causal order within the stated bound, its CPU sits beside the host's
/// vCPU thread, and the frames its eth0 (the VF, igbvf's) sent and
/// received as its programs saw them equal eth0's own counters, the
/// pings' among them.
#[test]
fn the_vf_guests_agent_is_reached_over_vsock_and_its_vf_frames_equal_its_counters() {
    let g = guest();
    let r = g.out.report("sriov", "up.out");
    let guest = vtrace_tests::assert_one_guest_reached(&r, "sriov", "cid:127:", 16, g.out.text("record.out"));
    let cpu = &rows(guest, "cpus")[0];
    assert!(n(&cpu["host_guest_ns"]) > 0, "the vCPU ran the guest: {cpu}");
    let inner = g.out.report("sriov-inner", "up.out");
    let (sent, received) = vtrace_tests::assert_guest_eth0_matches_its_counters(&inner, "sriov");
    assert!(
        sent >= PINGS && received >= PINGS,
        "the pings' replies and requests: {sent} {received}"
    );
}

/// A busy loop run in the VF guest through `vtrace lab exec` after the
/// pings: the guest's recording of its thread equals its own schedstat.
#[test]
fn a_busy_loop_in_the_vf_guest_matches_its_own_schedstat() {
    let g = guest();
    let inner = g.out.report("sriov-inner", "up.out");
    vtrace_tests::assert_guest_spin_matches_schedstat(&inner, g.out.text("spin.out"), "sriov");
}

/// The VF's side inside its guest (the agent's path layer, tracepoints
/// only): every frame its polls received and every frame its driver sent
/// equal the guest's eth0 counters; each receive interrupt is timed to its
/// poll and through the stack, each transmit with its doorbell; no more
/// receive interrupts than the host's vfio interrupts delivered; and those
/// deliveries (a vCPU's entry after each VF interrupt) are joined to the
/// guest's receive interrupts on one clock (nine in ten at least, as the
/// VM platforms' pings), every pair in causal order.
#[test]
fn the_vfs_stages_inside_its_guest_equal_its_counters_and_join_the_hosts_interrupts() {
    let g = guest();
    let inner = g.out.report("sriov-inner", "up.out");
    let eth0 = rows(&inner, "device_counters")
        .iter()
        .find(|d| d["name"] == "eth0")
        .expect("the guest's eth0");
    let st = path_stages(&inner);
    eprintln!("the VF guest's path stages (count, frames, sum_ns): {st:?}; its eth0: {eth0}");
    let stage = |name: &str| st.get(name).copied().unwrap_or_default();
    assert_eq!(
        stage("guest_rx_stack").1,
        n(&eth0["rx_packets"]),
        "frames the VF's polls received"
    );
    assert_eq!(
        stage("guest_tx_xmit").1,
        n(&eth0["tx_packets"]),
        "frames the VF's driver sent"
    );
    assert_eq!(
        stage("guest_tx_xmit").0,
        stage("guest_tx_xmit").1,
        "each transmit timed"
    );
    for name in ["guest_rx_poll", "guest_rx_stack", "guest_tx_xmit"] {
        let (count, _, sum_ns) = stage(name);
        assert!(count > 0 && sum_ns > 0, "{name} timed in the guest: {st:?}");
    }
    let r = g.out.report("sriov", "up.out");
    let host = path_stages(&r);
    assert!(
        stage("guest_rx_poll").0 <= host.get("pt_entry").map_or(0, |s| s.0),
        "the guest's receive interrupts were delivered by the host's: {host:?}"
    );
    let b = rows(&r, "boundary")
        .first()
        .unwrap_or_else(|| panic!("no boundary section: {}", g.out.text("record.out")));
    eprintln!("the VF guest across the boundary: {b}");
    assert!(b["unjoined"].is_null(), "{b}");
    // Two interrupts before one poll leave the guest an interrupt short,
    // and one a poll found no frame for has none: counted unmatched.
    let (matched, followed) = (n(&b["rx"]["matched"]), n(&b["rx"]["guest"]));
    assert!(
        followed > 0 && matched * 10 >= followed * 9,
        "the guest's interrupts joined to the host's deliveries: {b}"
    );
    let clock = &b["clock"];
    assert_eq!(n(&clock["rx_pairs"]), matched, "{clock}");
    assert_eq!(
        n(&clock["causal"]),
        matched + n(&clock["tx_pairs"]),
        "every pair in causal order: {clock}"
    );
}

/// Each ping into the VF guest followed on both sides, at the PF: the
/// request given to the PF's driver -> the VF's interrupt on the host
/// (`pf_to_vf`), the passthrough stages to the vCPU's entry, the guest's
/// interrupt, poll and reply, then the VF driver's transmit -> the PF's
/// receive (`vf_to_pf`). Each VF transmit's start pairs with the PF's
/// receive after it (the clock's other side: a VF's doorbell has no exit);
/// every pair in causal order, and each trip's parts sum to it exactly,
/// its median inside ping's own.
#[test]
fn the_vf_guests_pings_are_followed_across_the_boundary_with_no_residual() {
    let g = guest();
    let r = g.out.report("sriov", "up.out");
    let (b, joined) =
        vtrace_tests::assert_pings_joined_across_the_boundary(&r, g.out.text("record.out"), PINGS as usize, "sriov");
    assert_eq!(b["passthrough"], true, "{b}");
    for trip in &joined {
        let first = &trip["parts"][0];
        assert_eq!(first[0], "pf_to_vf", "{trip}");
    }
    eprintln!(
        "{}",
        g.out
            .text("sriov.txt")
            .lines()
            .skip_while(|l| !l.starts_with("guest "))
            .take(20)
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn each_vf_interrupt_is_followed_from_the_host_irq_to_the_guest_entry() {
    let g = guest();
    let r = g.out.report("sriov", "up.out");
    let pt = rows(&r, "path_passthrough");
    eprintln!(
        "{}",
        g.out
            .text("sriov.txt")
            .lines()
            .skip_while(|l| !l.starts_with("Passthrough"))
            .take(12)
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(!pt.is_empty(), "no passthrough stages: {}", r["path"]);
    for stage in ["pt_signal", "pt_inject", "pt_entry", "pt_hardirq"] {
        let count: u64 = pt.iter().filter(|x| x["stage"] == stage).map(|x| n(&x["count"])).sum();
        assert!(count >= PINGS, "{stage}: {count}");
    }
    for x in pt {
        assert!(x["name"].as_str().is_some_and(|n| n.starts_with("vfio-msix")), "{x}");
        // Each interrupt is counted once in its chain: no more than the host took.
        assert!(n(&x["count"]) <= n(&x["host_irqs"]), "{x}");
    }
    // Followed one by one: the stages of each sum to its span.
    let packets: Vec<&Value> = rows(&r, "path_slowest").iter().filter(|p| p["dir"] == "pt").collect();
    assert!(!packets.is_empty(), "no followed VF interrupt");
    for p in packets {
        let sum: u64 = p["stages"].as_array().unwrap().iter().map(|s| n(&s[1])).sum();
        assert_eq!(sum, n(&p["total_ns"]), "{p}");
    }
}

#[test]
fn seed_003_virtio_against_sriov_under_stress_with_the_stages_that_explain_it() {
    let g = guest();
    if let Some(why) = g.out.files.get("bench.failed") {
        panic!("{why}\n{}", g.out.files.get("bench.out").map_or("", |s| s));
    }
    let text = g.out.text("bench.txt");
    eprintln!("{text}");
    let b: Value = serde_json::from_str(g.out.text("bench.json")).unwrap();
    let cells = b["bench"]["cells"]
        .as_array()
        .unwrap_or_else(|| panic!("no cells: {b}"));
    for platform in ["qemu-kvm", "sriov"] {
        for stress in [0, 2] {
            let c = cells
                .iter()
                .find(|c| c["platform"] == platform && c["stress"] == stress)
                .unwrap_or_else(|| panic!("no {platform} stress {stress} cell"));
            // Every reply of ping's own count.
            assert_eq!(c["rtt_us"]["replies"].as_u64(), Some(BENCH_PINGS as u64), "{c}");
            let stages: Vec<&str> = c["path_stage_mean_us"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|s| s[0].as_str())
                .collect();
            // Each platform's own path explains its replies, and only its own.
            let (own, other): (&[&str], &str) = if platform == "sriov" {
                (&["pt_signal", "pt_inject", "pt_entry", "pt_hardirq"], "rx_")
            } else {
                (
                    &[
                        "rx_tap_queue",
                        "rx_signal",
                        "rx_inject",
                        "rx_entry",
                        "tx_kick",
                        "tx_tap",
                    ],
                    "pt_",
                )
            };
            for st in own {
                assert!(stages.contains(st), "{platform} stress {stress}: no {st}: {c}");
            }
            assert!(!stages.iter().any(|s| s.starts_with(other)), "{platform}: {stages:?}");
            // The vCPU waited for a CPU: the runq layer's share per reply.
            assert!(
                c["runq_ns_per_op"].as_array().unwrap().iter().any(|r| r[0] == "vcpu"),
                "{c}"
            );
        }
    }
    assert!(text.contains("Where the replies' time went"), "{text}");
}

/// An SR-IOV VM a user started by hand is an `sriov` instance with `vcpu`
/// and `vmm` roles from what its threads do, its vCPU's guest time its
/// thread's own ([`vtrace_tests::check_user_vm`]).
#[test]
fn a_vf_vm_a_user_starts_has_its_roles_from_what_its_threads_do() {
    check_user_vm(&guest().out, "usersriov", "sriov", "sriov", &["vcpu", "vmm"]);
}
