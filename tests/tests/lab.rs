//! `vtrace lab` on the platforms this machine runs: start a real instance,
//! detect it with the right roles and devices, record redis-benchmark against
//! it, and check that `lab down` leaves the machine as it was.

use std::process::Command;

use serde_json::Value;
use vtrace_tests::{LabDown, TempDir, report_json, stderr, vtrace};

/// What `lab down` must restore: namespaces, links, mounts, runtime state.
fn machine_state() -> Vec<String> {
    let run = |args: &[&str]| {
        let o = Command::new(args[0]).args(&args[1..]).output().unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let mut lines: Vec<String> = Vec::new();
    lines.extend(run(&["ip", "netns", "list"]).lines().map(|l| format!("netns {l}")));
    lines.extend(
        run(&["ip", "-o", "link", "show"])
            .lines()
            .map(|l| format!("link {}", l.split(':').nth(1).unwrap_or("").trim())),
    );
    lines.extend(
        std::fs::read_to_string("/proc/mounts")
            .unwrap()
            .lines()
            .map(|l| format!("mount {l}")),
    );
    for dir in ["/run/runc", "/run/crun", "/run/runsc", "/run/vtrace-lab"] {
        if let Ok(d) = std::fs::read_dir(dir) {
            lines.extend(d.flatten().map(|e| format!("state {}", e.path().display())));
        }
    }
    for ctl in ["cpu", "memory", "pids", "unified"] {
        if let Ok(d) = std::fs::read_dir(format!("/sys/fs/cgroup/{ctl}")) {
            lines.extend(
                d.flatten()
                    .filter(|e| {
                        let n = e.file_name().to_string_lossy().into_owned();
                        n.starts_with("vtrace") || n.starts_with("lxc")
                    })
                    .map(|e| format!("cgroup {}", e.path().display())),
            );
        }
    }
    lines.sort();
    lines
}

fn up(platform: &'static str) -> (LabDown, String) {
    let o = vtrace(&["lab", "up", platform]);
    let guard = LabDown::new(&[platform]);
    assert!(o.status.success(), "lab up {platform}: {}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let addr = out
        .split("redis ")
        .nth(1)
        .and_then(|s| s.split(':').next())
        .expect("address printed")
        .to_string();
    (guard, addr)
}

fn down(platform: &str) {
    let o = vtrace(&["lab", "down", platform]);
    assert!(o.status.success(), "lab down {platform}: {}", stderr(&o));
}

fn benchmark(args: &[&str], addr: &str, dir: &TempDir, requests: &str) -> Value {
    let rec = dir.join("run.vtrace");
    let mut full: Vec<&str> = vec!["record", "-o", rec.to_str().unwrap()];
    full.extend_from_slice(args);
    full.extend_from_slice(&[
        "--",
        "redis-benchmark",
        "-h",
        addr,
        "-t",
        "get,set",
        "-d",
        "64",
        "-n",
        requests,
        "-c",
        "20",
        "-q",
    ]);
    let o = vtrace(&full);
    assert!(o.status.success(), "record: {}", stderr(&o));
    report_json(&rec)
}

/// The CPU time of `instance`'s threads in `role`.
fn instance_role_total(report: &Value, instance: &str, role: &str) -> u64 {
    report["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["instance"] == instance && t["role"] == role)
        .map(|t| t["total_ns"].as_u64().unwrap())
        .sum()
}

/// `expect`: (thread name, role) pairs the instance must have; `device`: (name, role); `busy_role`: the role that must get a share.
fn lab_instance(
    platform: &'static str,
    expect: &[(&str, &str)],
    device: (&str, &str),
    busy_role: &str,
    requests: &str,
) {
    let before = machine_state();
    let dir = TempDir::new(platform);
    {
        let (_guard, addr) = up(platform);
        let o = vtrace(&["platforms", "--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let instances: Value = serde_json::from_slice(&o.stdout).unwrap();
        // Its instance is the one with the lab's device: another of the
        // platform may run on the machine (the suite's TCG guest is a linuxvm).
        let mine: Vec<&Value> = instances
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| {
                i["platform"] == platform
                    && i["devices"]
                        .as_array()
                        .is_some_and(|d| d.iter().any(|d| d["name"] == device.0))
            })
            .collect();
        assert_eq!(
            mine.len(),
            1,
            "exactly one {platform} instance with {}: {instances}",
            device.0
        );
        let inst = mine[0];
        let id = inst["id"].as_str().unwrap();
        // A --platform vtrace does not know is refused naming what runs: this instance.
        let o = vtrace(&["record", "--platform", "no-such-platform", "--", "true"]);
        assert!(
            stderr(&o).contains("running now: ") && stderr(&o).contains(inst["id"].as_str().unwrap()),
            "{}",
            stderr(&o)
        );
        let threads = inst["threads"].as_array().unwrap();
        for (comm, role) in expect {
            assert!(
                threads.iter().any(|t| t["comm"] == *comm && t["role"] == *role),
                "{comm} is {role}: {inst}"
            );
        }
        let devices = inst["devices"].as_array().unwrap();
        assert!(
            devices.iter().any(|d| d["name"] == device.0 && d["role"] == device.1),
            "{device:?} belongs to it: {inst}"
        );

        let report = benchmark(&["--platform", platform], &addr, &dir, requests);
        let busy = instance_role_total(&report, id, busy_role);
        let capacity = report["wall_ns"].as_u64().unwrap() * report["cpus"].as_u64().unwrap();
        eprintln!(
            "{platform}: {busy_role} role {:.3} s of {:.3} CPU-s",
            busy as f64 / 1e9,
            capacity as f64 / 1e9
        );
        assert!(
            busy * 20 > capacity,
            "{platform} {busy_role} role got only {busy} ns of {capacity}"
        );
        let (comm, role) = expect[0];
        let t = report["threads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["comm"] == comm && t["instance"] == id)
            .unwrap_or_else(|| panic!("{comm} of {id} in the recording"));
        assert_eq!(
            (t["platform"].as_str().unwrap(), t["role"].as_str().unwrap()),
            (platform, role)
        );
        down(platform);
    }
    assert_eq!(machine_state(), before, "lab down {platform} left the machine changed");
}

const CONTAINER_THREADS: &[(&str, &str)] = &[("redis-server", "app"), ("iperf3", "app")];

#[test]
fn runc_lab_instance() {
    lab_instance("runc", CONTAINER_THREADS, ("vtl-runc0", "veth"), "app", "30000");
}

#[test]
fn crun_lab_instance() {
    lab_instance("crun", CONTAINER_THREADS, ("vtl-crun0", "veth"), "app", "30000");
}

#[test]
fn gvisor_lab_instance() {
    let threads = &[("exe", "sandbox"), ("runsc", "runtime")];
    lab_instance("gvisor", threads, ("vtl-gvisor0", "veth"), "sandbox", "5000");
}

#[test]
fn lwip_lab_instance() {
    let threads = &[("lwip-redis", "app"), ("lwip-tcpip", "stack"), ("lwip-tapif", "stack")];
    lab_instance("lwip", threads, ("vtl-lwip0", "tap"), "stack", "20000");
}

#[test]
fn lxc_lab_instance() {
    let threads = &[("redis-server", "app"), ("lxc-start", "monitor")];
    lab_instance("lxc", threads, ("vtl-lxc0", "veth"), "app", "30000");
}

#[test]
fn docker_lab_instance() {
    let threads = &[("redis-server", "app"), ("containerd-shim", "shim")];
    lab_instance("docker", threads, ("vtl-docker0", "bridge"), "app", "30000");
}

#[test]
fn linuxvm_lab_instance() {
    // A TCG guest: few requests, they are slow.
    let threads = &[("CPU 0/TCG", "vcpu"), ("qemu-system-x86", "vmm")];
    lab_instance("linuxvm", threads, ("vtl-vm0", "tap"), "vcpu", "4000");
}

#[test]
fn host_lab_instance() {
    let before = machine_state();
    let dir = TempDir::new("host-lab");
    {
        let (_guard, addr) = up("host");
        let ledger: Value = serde_json::from_slice(&std::fs::read("/run/vtrace-lab/host.json").unwrap()).unwrap();
        let redis_pid = ledger["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["comm"] == "redis-server")
            .unwrap()["pid"]
            .as_u64()
            .unwrap()
            .to_string();
        let report = benchmark(&["--pid", &redis_pid], &addr, &dir, "30000");
        let redis = report["threads"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["pid"].as_u64().map(|p| p.to_string()).as_deref() == Some(redis_pid.as_str()))
            .unwrap();
        assert_eq!(redis["role"], "app");
        assert!(redis["total_ns"].as_u64().unwrap() > 50_000_000, "{redis}");
        down("host");
    }
    assert_eq!(machine_state(), before, "lab down host left the machine changed");
}

#[test]
fn platforms_the_lab_cannot_start_say_what_is_missing() {
    for p in ["firecracker", "qemu-kvm", "unikraft-vhost", "kata", "sriov"] {
        let o = vtrace(&["lab", "up", p]);
        assert_eq!(o.status.code(), Some(1));
        let msg = stderr(&o);
        assert!(
            msg.contains(&format!("vtrace lab cannot start {p} on this machine")),
            "{msg}"
        );
    }
    // This machine's KVM (PVM) cannot boot a guest OS: the VM platforms say
    // so, and where they run instead.
    let o = vtrace(&["lab", "status"]);
    let out = String::from_utf8_lossy(&o.stdout);
    for p in [
        "qemu-kvm",
        "qemu-kvm-novhost",
        "firecracker",
        "unikraft-vhost",
        "unikraft-virtio",
        "kata",
    ] {
        let line = out
            .lines()
            .find(|l| l.split_whitespace().next() == Some(p))
            .unwrap_or_else(|| panic!("no {p} line: {out}"));
        assert!(
            line.contains("cannot boot a guest OS") && line.contains("stock-kernel guest"),
            "{line}"
        );
    }
}

#[test]
fn a_failed_up_is_undone() {
    let before = machine_state();
    // A file where runc's bundle directory goes makes `up` fail half-way,
    // after the namespace and veth pair exist.
    let bundle = std::path::Path::new("/var/lib/vtrace-lab/runc");
    let _ = std::fs::remove_dir_all(bundle);
    std::fs::create_dir_all(bundle.parent().unwrap()).unwrap();
    std::fs::write(bundle, "in the way").unwrap();
    let o = vtrace(&["lab", "up", "runc"]);
    let _ = std::fs::remove_file(bundle);
    assert_eq!(o.status.code(), Some(1), "up must fail: {}", stderr(&o));
    assert!(
        std::fs::metadata("/run/vtrace-lab/runc.json").is_err(),
        "ledger of the failed up removed"
    );
    assert_eq!(machine_state(), before, "a failed lab up left the machine changed");
}

/// Processes whose command line (words joined by spaces) contains `part`.
fn processes_running(part: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let c = String::from_utf8_lossy(&std::fs::read(e.path().join("cmdline")).ok()?).replace('\0', " ");
            c.contains(part).then(|| e.file_name().to_str()?.parse().ok())?
        })
        .collect()
}

/// The first process seen running `part` (polled each ms, up to `limit_s`)
/// while `starter` runs.
fn first_process_running(part: &str, limit_s: u64, starter: &mut std::process::Child) -> i32 {
    let start = std::time::Instant::now();
    loop {
        if let Some(&pid) = processes_running(part).first() {
            return pid;
        }
        if let Some(status) = starter.try_wait().unwrap() {
            panic!("it ended ({status}) before anything ran `{part}`");
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(limit_s),
            "nothing ran `{part}` in {limit_s} s"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// A `lab up` of a VM killed while QEMU starts (its pid is known only once
/// it has daemonized): `lab down` ends that QEMU too.
#[test]
fn a_vm_up_killed_while_qemu_starts_is_undone() {
    let before = machine_state();
    let _cleanup = LabDown::new(&["linuxvm"]);
    let mut up = Command::new(vtrace_tests::bin("vtrace"))
        .args(["lab", "up", "linuxvm"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let qemu = "qemu-system-x86_64 -name vtrace-linuxvm,";
    // On a fresh machine the guest's kernel and initramfs are made first.
    first_process_running(qemu, 600, &mut up);
    up.kill().unwrap();
    up.wait().unwrap();
    let o = vtrace(&["lab", "down", "linuxvm"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(processes_running(qemu), Vec::<i32>::new(), "QEMU left running");
    assert_eq!(
        machine_state(),
        before,
        "lab down after a killed up left the machine changed"
    );
}

/// A `lab up` killed half-way leaves its ledger, so `lab down` removes what
/// it made; a second `lab up` of the same platform while one runs is
/// refused, naming the first; `up` of what is up and `down` of what is not
/// say so.
#[test]
fn lab_up_is_one_at_a_time_and_survives_a_crash_half_way() {
    let before = machine_state();
    let ledger = std::path::Path::new("/run/vtrace-lab/runc.json");
    // Dropped last: whatever happens, runc is brought down after `first` is killed.
    let _cleanup = LabDown::new(&["runc"]);
    struct KillOnDrop(std::process::Child);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut first = KillOnDrop(
        Command::new(vtrace_tests::bin("vtrace"))
            .args(["lab", "up", "runc"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Half-way, held: its `runc run` under way (100-400 ms; the namespace,
    // links, bundle and container are in the ledger by then).
    let run = first_process_running(
        "runc --root /run/runc run -d --bundle /var/lib/vtrace-lab/runc ",
        300,
        &mut first.0,
    );
    unsafe { libc::kill(run, libc::SIGSTOP) };
    // Found near its end, it may have ended first (a loaded machine): the
    // check that `down` waits for it is then left out, said so.
    let held = std::fs::read_to_string(format!("/proc/{run}/stat"))
        .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('T')));
    struct ContinueOnDrop(i32);
    impl Drop for ContinueOnDrop {
        fn drop(&mut self) {
            unsafe { libc::kill(self.0, libc::SIGCONT) };
        }
    }
    let _run_held = ContinueOnDrop(run);
    let second = vtrace(&["lab", "up", "runc"]);
    assert!(!second.status.success(), "a second lab up must be refused");
    let err = stderr(&second);
    assert!(
        err.contains("another `vtrace lab`") && err.contains(&first.0.id().to_string()),
        "{err}"
    );
    // SIGKILL half-way: its `runc run` runs on without it.
    first.0.kill().unwrap();
    first.0.wait().unwrap();
    assert_ne!(machine_state(), before, "the killed up had made something");
    // A kill between the ledger's write and its rename leaves the write,
    // newer than the ledger by a resource (CI's SIGKILL once landed there):
    // made here, with a link only it names, so each run covers it.
    let unfinished = ledger.with_extension("tmp");
    let mut newest: Value = serde_json::from_slice(&std::fs::read(ledger).unwrap()).unwrap();
    let link = serde_json::json!({"kind": "link", "name": "vtl-unsaved"});
    newest["resources"].as_array_mut().unwrap().push(link);
    let o = Command::new("ip")
        .args([
            "link",
            "add",
            "vtl-unsaved",
            "type",
            "veth",
            "peer",
            "name",
            "vtl-unsaved1",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "ip link add: {}", stderr(&o));
    std::fs::write(&unfinished, serde_json::to_vec(&newest).unwrap()).unwrap();
    let mut down = Command::new(vtrace_tests::bin("vtrace"))
        .args(["lab", "down", "runc"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // As a slow machine holds it: `down` waits for that `runc run` to end
    // before it removes the container (then it runs, and is removed).
    std::thread::sleep(std::time::Duration::from_millis(800));
    if held {
        assert!(
            down.try_wait().unwrap().is_none(),
            "lab down did not wait for the `runc run` under way"
        );
    } else {
        eprintln!("`runc run` ended before it was held: down's wait for it not checked this run");
    }
    unsafe { libc::kill(run, libc::SIGCONT) };
    let o = down.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        machine_state(),
        before,
        "lab down after a crashed up left the machine changed"
    );
    // Killed in its first write, `up` leaves no ledger but that write.
    std::fs::create_dir_all(ledger.parent().unwrap()).unwrap();
    std::fs::write(&unfinished, b"{").unwrap();
    let o = vtrace(&["lab", "down", "runc"]);
    assert!(o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("runc is not up"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert_eq!(machine_state(), before, "lab down left a crashed up's first write");
    // Up twice: the second says so and changes nothing.
    let (_guard, _addr) = up("runc");
    let o = vtrace(&["lab", "up", "runc"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("already up"));
}
