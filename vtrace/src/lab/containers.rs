//! Lab instances on the host itself: `host` (redis and iperf3 in a network
//! namespace) and OCI containers run by `runc` or `crun` on an overlayfs
//! root, in a network namespace joined to the host by a veth pair.

use std::{
    fs,
    path::Path,
    process::{Command, Stdio},
    time::Duration,
};

use serde_json::json;

use super::{
    common::{ContainerRuntime, LabPlatform, Runtime},
    ledger::{Ledger, RemoveContainer, Resource},
    net::veth_netns,
    rootfs,
};
use crate::{
    Result,
    workload::netns::{quiet, sh},
};

pub const CONTAINER_ID: &str = "vtrace-lab";
pub const SERVE: &str =
    "iperf3 -s -D && exec redis-server --bind 0.0.0.0 --port 6379 --protected-mode no --save '' --appendonly no";

fn names(p: &LabPlatform) -> (String, String, String) {
    (
        format!("vtl-{}", p.name),
        format!("vtl-{}0", p.name),
        format!("vtl-{}1", p.name),
    )
}

/// Starts `args` in netns `ns` in its own session, so it outlives vtrace.
fn spawn_in(ledger: &mut Ledger, ns: &str, args: &[&str]) -> Result<()> {
    let child = Command::new("ip")
        .args(["netns", "exec", ns, "setsid"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(crate::error::io(format!("start {}", args[0])))?;
    let comm: String = args[0].chars().take(15).collect();
    ledger.add(Resource::Process { pid: child.id(), comm })
}

/// The `host` platform: redis and iperf3 in a network namespace.
pub struct Host;

impl Runtime for Host {
    fn up(&self, p: &LabPlatform, ledger: &mut Ledger) -> Result<()> {
        up_host(p, ledger)
    }

    fn exec(&self, ledger: &Ledger) -> Option<Vec<String>> {
        ledger.resources.iter().find_map(|r| match r {
            Resource::Netns { name } => Some(vec!["ip".into(), "netns".into(), "exec".into(), name.clone()]),
            _ => None,
        })
    }
}

/// OCI containers: `runc`, `crun` and `gvisor` (runsc).
pub struct Oci;

impl Runtime for Oci {
    fn up(&self, p: &LabPlatform, ledger: &mut Ledger) -> Result<()> {
        up_oci(p, ledger)
    }
}

impl RemoveContainer for Oci {
    fn remove(&self, runtime: &str, id: &str, root: &str) {
        // A `run` still under way (its `up` was killed, not it) makes the
        // container after a kill and delete: waited for first.
        let run = format!("{runtime} --root {root} run ");
        let start = std::time::Instant::now();
        while !super::ledger::processes_matching(&run).is_empty() && start.elapsed() < Duration::from_secs(15) {
            std::thread::sleep(Duration::from_millis(20));
        }
        quiet(&[runtime, "--root", root, "kill", id, "KILL"]);
        std::thread::sleep(Duration::from_millis(200));
        quiet(&[runtime, "--root", root, "delete", "--force", id]);
    }
}

impl ContainerRuntime for Oci {
    fn exec(&self, runtime: &str, id: &str, root: &str) -> Vec<String> {
        vec![
            runtime.to_string(),
            "--root".into(),
            root.to_string(),
            "exec".into(),
            id.to_string(),
        ]
    }
}

fn up_host(p: &LabPlatform, ledger: &mut Ledger) -> Result<()> {
    let (ns, host_if, ns_if) = names(p);
    veth_netns(ledger, p, &ns, &host_if, &ns_if)?;
    spawn_in(
        ledger,
        &ns,
        &[
            "redis-server",
            "--bind",
            "0.0.0.0",
            "--port",
            "6379",
            "--protected-mode",
            "no",
            "--save",
            "",
            "--appendonly",
            "no",
        ],
    )?;
    spawn_in(ledger, &ns, &["iperf3", "-s"])
}

/// The OCI runtime's state directory (its default, so detection finds it like any other).
pub fn state_root(runtime: &str) -> String {
    format!("/run/{runtime}")
}

fn config(ns: &str, cgroup: &str) -> serde_json::Value {
    json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": {"uid": 0, "gid": 0},
            "args": ["/bin/sh", "-c", SERVE],
            "env": ["PATH=/bin:/usr/bin", "HOME=/root"],
            "cwd": "/data",
            "noNewPrivileges": true
        },
        "root": {"path": "rootfs", "readonly": false},
        "hostname": "vtrace-lab",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777"]},
            {"destination": super::VOLUME_MOUNT, "type": "bind", "source": super::VOLUME_DIR, "options": ["rbind", "rw"]}
        ],
        "linux": {
            "cgroupsPath": cgroup,
            "namespaces": [
                {"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"},
                {"type": "network", "path": format!("/var/run/netns/{ns}")}
            ]
        }
    })
}

/// crun needs every cgroup v1 controller it knows mounted; this machine's
/// hybrid hierarchy lacks hugetlb.
fn ensure_hugetlb(ledger: &mut Ledger) -> Result<()> {
    let v1_root = Path::new("/sys/fs/cgroup");
    let mounts = fs::read_to_string("/proc/mounts").unwrap_or_default();
    let hybrid = mounts.lines().any(|l| l.split_whitespace().nth(2) == Some("cgroup"));
    let has = mounts.lines().any(|l| l.contains(" cgroup ") && l.contains("hugetlb"));
    if !hybrid || has {
        return Ok(());
    }
    let dir = v1_root.join("hugetlb");
    if !dir.exists() {
        ledger.add(Resource::Dir {
            path: dir.display().to_string(),
        })?;
        fs::create_dir(&dir).map_err(crate::error::io(format!("create {}", dir.display())))?;
    }
    let d = dir.display().to_string();
    ledger.add(Resource::Mount { path: d.clone() })?;
    sh(&["mount", "-t", "cgroup", "-o", "hugetlb", "cgroup", &d])
}

/// OCI runtime binary of a lab platform.
fn runtime_of(platform: &str) -> &str {
    if platform == "gvisor" { "runsc" } else { platform }
}

fn up_oci(p: &LabPlatform, ledger: &mut Ledger) -> Result<()> {
    let runtime = runtime_of(p.name);
    let lower = rootfs::ensure()?;
    let (ns, host_if, ns_if) = names(p);
    veth_netns(ledger, p, &ns, &host_if, &ns_if)?;
    if runtime == "crun" {
        ensure_hugetlb(ledger)?;
    }
    let bundle = Path::new(super::DATA_DIR).join(p.name);
    ledger.add(Resource::Dir {
        path: bundle.display().to_string(),
    })?;
    let _ = fs::remove_dir_all(&bundle);
    for d in ["upper", "work", "rootfs"] {
        fs::create_dir_all(bundle.join(d)).map_err(crate::error::io(format!("create {}", bundle.join(d).display())))?;
    }
    let merged = bundle.join("rootfs").display().to_string();
    ledger.add(Resource::Mount { path: merged.clone() })?;
    let opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.display(),
        bundle.join("upper").display(),
        bundle.join("work").display()
    );
    sh(&["mount", "-t", "overlay", "overlay", "-o", &opts, &merged])?;
    let cgroup = format!("/vtrace-lab-{runtime}");
    fs::write(
        bundle.join("config.json"),
        serde_json::to_vec_pretty(&config(&ns, &cgroup)).expect("config serializes"),
    )
    .map_err(crate::error::io("write config.json"))?;
    let root = state_root(runtime);
    if !Path::new(&root).exists() {
        // Created by the runtime on first use: ours to remove.
        ledger.add(Resource::Dir { path: root.clone() })?;
    }
    ledger.add(Resource::Container {
        runtime: runtime.into(),
        id: CONTAINER_ID.into(),
        root: root.clone(),
    })?;
    // The detached container inherits stdio: a pipe would never reach EOF.
    let log_path = bundle.join("runtime.log");
    let log = fs::File::create(&log_path).map_err(crate::error::io("create runtime.log"))?;
    if runtime == "runsc" {
        // `runsc run` stays in the foreground as the parent of the sandbox and
        // gofer (detection roots the instance there): run it in its own session.
        let child = Command::new("setsid")
            .args(["runsc", "--root", &root, "--network", "sandbox", "run", "--bundle"])
            .arg(&bundle)
            .arg(CONTAINER_ID)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(crate::error::io("start runsc"))?;
        return ledger.add(Resource::Process {
            pid: child.id(),
            comm: "runsc".into(),
        });
    }
    let status = Command::new(runtime)
        .args([
            "--root",
            &root,
            "run",
            "-d",
            "--bundle",
            &bundle.display().to_string(),
            CONTAINER_ID,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .status()
        .map_err(crate::error::io(format!("run {runtime}")))?;
    if !status.success() {
        return Err(crate::Error::Io {
            context: format!("{runtime} run"),
            source: std::io::Error::other(fs::read_to_string(&log_path).unwrap_or_default().trim().to_string()),
        });
    }
    Ok(())
}
