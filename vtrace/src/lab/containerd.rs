//! Containers started the way users start them, by a containerd (the lab's
//! own: its root, state and socket, CRI off) running the lab rootfs under a
//! private overlay with `ctr run`, in a netns with a veth as a CNI plugin
//! leaves it (the host's end `vtl-…0`, the netns's `eth0`), through a shim:
//!
//! - `kata`: Kata Containers (`io.containerd.kata.v2`): a QEMU/KVM sandbox;
//!   Kata mirrors eth0 and its tap (`tap0_kata`) into each other with tc,
//!   vhost-net serves the tap, virtiofsd shares the rootfs and the lab
//!   volume into the VM. What Kata itself needs is in kata.rs.
//! - `containerd-runc`: runc's shim (`io.containerd.runc.v2`) on the same
//!   containerd and kernel: the plain container Kata is compared with.
//!   Recorded as `runc` (its shim roots a runc instance).
//!
//! redis and iperf3 answer at the lab address inside.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use super::{
    common::{ContainerRuntime, LabPlatform, Runtime, stdout_of},
    containers::SERVE,
    kata,
    ledger::{LEDGER_DIR, Ledger, RemoveContainer, Resource},
    net, rootfs, vms,
};
use crate::{
    Error, Result,
    workload::netns::{quiet, sh},
};

/// The shim a containerd platform runs its container with.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Shim {
    Kata,
    Runc,
}

impl Shim {
    fn runtime(self) -> &'static str {
        match self {
            Shim::Kata => "io.containerd.kata.v2",
            Shim::Runc => "io.containerd.runc.v2",
        }
    }

    /// A short name for its netns, link, state directory and container id
    /// (Kata names the sandbox, its QEMU and virtiofsd by the id).
    fn short(self) -> &'static str {
        match self {
            Shim::Kata => "kata",
            Shim::Runc => "ctrd",
        }
    }

    fn container_id(self) -> String {
        format!("vtrace-lab-{}", self.short())
    }
}

/// A containerd platform: `kata` or `containerd-runc`.
pub struct Containerd {
    pub shim: Shim,
}

fn unavailable(platform: &str, reason: String) -> Error {
    Error::LabUnavailable {
        platform: platform.into(),
        reason,
    }
}

/// The state directory of the lab's containerd for `shim`; its socket is in it.
fn state_dir(shim: Shim) -> PathBuf {
    Path::new(LEDGER_DIR).join(format!("containerd-{}", shim.short()))
}

fn socket(shim: Shim) -> String {
    state_dir(shim).join("containerd.sock").display().to_string()
}

/// Runs `ctr` against the containerd at `socket`.
fn ctr(socket: &str, args: &[&str]) -> Result<String> {
    stdout_of("ctr", &[&["--address", socket], args].concat())
}

impl Runtime for Containerd {
    fn up(&self, p: &LabPlatform, ledger: &mut Ledger) -> Result<()> {
        up(self.shim, p, ledger)
    }

    /// Under nested TCG a Kata sandbox takes tens of seconds (the shim,
    /// QEMU, the guest kernel, 7 modules, the agent, the container).
    fn boot(&self) -> Duration {
        match self.shim {
            Shim::Kata => Duration::from_secs(300),
            Shim::Runc => Duration::from_secs(30),
        }
    }

    fn missing(&self) -> Option<String> {
        if self.shim == Shim::Kata {
            if let Some(why) = vms::kvm_cannot_boot_guests() {
                return Some(why);
            }
            if let Err(why) = kata::install_dir() {
                return Some(why);
            }
            if !Path::new("/dev/shm").is_dir() {
                return Some("Kata puts the sandbox's memory in /dev/shm, which is missing".into());
            }
            if !Path::new("/dev/log").exists() {
                return Some(
                    "Kata's shim logs to syslog and fails without it: no /dev/log (start a syslog daemon)".into(),
                );
            }
            if !Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
                return Some("Kata's shim needs cgroup2 mounted at /sys/fs/cgroup".into());
            }
        }
        None
    }

    fn recorded_as(&self) -> Option<&'static str> {
        match self.shim {
            Shim::Kata => None,
            Shim::Runc => Some("runc"),
        }
    }
}

impl RemoveContainer for Containerd {
    /// `root` is the containerd's socket.
    fn remove(&self, _runtime: &str, id: &str, root: &str) {
        quiet(&["ctr", "--address", root, "task", "kill", "--signal", "SIGKILL", id]);
        let start = Instant::now();
        // A Kata sandbox goes down with its task; delete waits for that.
        while !quiet(&["ctr", "--address", root, "task", "delete", id]) && start.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(300));
        }
        quiet(&["ctr", "--address", root, "container", "delete", id]);
    }

    fn left(&self, _runtime: &str, _id: &str, _root: &str) -> Option<String> {
        None // gone with its containerd; what its shim started is checked by name
    }
}

impl ContainerRuntime for Containerd {
    fn exec(&self, _runtime: &str, id: &str, root: &str) -> Vec<String> {
        let exec_id = format!("vtrace-{}", std::process::id());
        ["ctr", "--address", root, "task", "exec", "--exec-id", &exec_id, id]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }
}

fn up(shim: Shim, p: &LabPlatform, ledger: &mut Ledger) -> Result<()> {
    let kata_dir = match shim {
        Shim::Kata => Some(kata::install_dir().map_err(kata::unavailable)?),
        Shim::Runc => None,
    };
    let netns = format!("vtl-{}", shim.short());
    net::veth_netns(ledger, p, &netns, &format!("{netns}0"), "eth0")?;
    let run = vms::run_dir(ledger, p.name)?;
    let config = match &kata_dir {
        Some(dir) => kata::config(dir, &run)?,
        None => None,
    };
    // The container's root: the lab rootfs under a private overlay.
    let lower = rootfs::ensure()?;
    let (upper, work, merged) = (run.join("upper"), run.join("work"), run.join("rootfs"));
    for d in [&upper, &work, &merged] {
        fs::create_dir_all(d).map_err(crate::error::io(format!("create {}", d.display())))?;
    }
    ledger.add(Resource::Mount {
        path: merged.display().to_string(),
    })?;
    let options = format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.display(),
        upper.display(),
        work.display()
    );
    let root = merged.display().to_string();
    sh(&["mount", "-t", "overlay", "overlay", "-o", &options, &root])?;

    // The lab's containerd; its shims, and what they start (named by the
    // container id: a Kata sandbox's QEMU and virtiofsd), go with it.
    let state = state_dir(shim);
    let sock = socket(shim);
    let id = shim.container_id();
    ledger.add(Resource::Dir {
        path: state.display().to_string(),
    })?;
    ledger.add(Resource::Processes { pattern: id.clone() })?;
    fs::create_dir_all(&state).map_err(crate::error::io(format!("create {}", state.display())))?;
    let containerd_config = run.join("containerd.toml");
    fs::write(
        &containerd_config,
        format!(
            "version = 2\nroot = \"{}\"\nstate = \"{}\"\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n\
             [grpc]\n  address = \"{sock}\"\n",
            run.join("containerd-root").display(),
            state.display(),
        ),
    )
    .map_err(crate::error::io("write containerd.toml"))?;
    let log = fs::File::create(run.join("containerd.log")).map_err(crate::error::io("create containerd.log"))?;
    // containerd finds a shim by its name on PATH: Kata's directory first.
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/sbin:/usr/bin:/sbin:/bin".into());
    let path = match &kata_dir {
        Some(dir) => format!("{}:{path}", dir.display()),
        None => path,
    };
    let child = Command::new("containerd")
        .arg("--config")
        .arg(&containerd_config)
        .env("PATH", path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(crate::error::io("start containerd"))?;
    ledger.add(Resource::Process {
        pid: child.id(),
        comm: "containerd".into(),
    })?;
    let start = Instant::now();
    while ctr(&sock, &["version"]).is_err() {
        if start.elapsed() > Duration::from_secs(60) {
            return Err(unavailable(
                p.name,
                format!(
                    "containerd did not answer within 60 s; its log ends:\n{}",
                    log_tail(&run)
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(200));
    }

    ledger.add(Resource::Container {
        runtime: p.name.into(),
        id: id.clone(),
        root: sock.clone(),
    })?;
    let volume = format!(
        "type=bind,src={},dst={},options=rbind:rw",
        super::VOLUME_DIR,
        super::VOLUME_MOUNT
    );
    let with_netns = format!("network:/run/netns/{netns}");
    // Kata's configuration goes as the task's ConfigPath option: Kata 4
    // takes KATA_CONF_FILE only when it names one of its shipped paths.
    let config_arg: Vec<String> = config
        .iter()
        .flat_map(|c| ["--runtime-config-path".to_string(), c.display().to_string()])
        .collect();
    let mut args: Vec<&str> = vec!["run", "-d", "--runtime", shim.runtime()];
    args.extend(config_arg.iter().map(String::as_str));
    if shim == Shim::Runc && root_is_initramfs() {
        // runc cannot pivot_root out of an initramfs (one level down).
        args.push("--no-pivot");
    }
    args.extend_from_slice(&[
        // A root of our own (not a snapshot), given where an image would be.
        "--rootfs",
        "--with-ns",
        &with_netns,
        "--mount",
        &volume,
        "--cwd",
        "/data",
        // `lab exec`'s commands by name: execs take the container's environment.
        "--env",
        "PATH=/bin:/usr/bin:/sbin:/usr/sbin",
        &root,
        &id,
        "/bin/sh",
        "-c",
        SERVE,
    ]);
    ctr(&sock, &args).map_err(|e| {
        unavailable(
            p.name,
            format!(
                "the container did not start: {e}; containerd's log ends:\n{}",
                log_tail(&run)
            ),
        )
    })?;
    ledger.note = match (&kata_dir, &config) {
        (Some(dir), config) => format!(
            "Kata Containers from {} ({}), QEMU/KVM sandbox {id}, tc-mirrored tap, vhost-net, virtio-fs",
            dir.display(),
            match config {
                Some(c) => format!("configuration {}", c.display()),
                None => "its own configuration".into(),
            }
        ),
        (None, _) => format!("runc container {id} through containerd's io.containerd.runc.v2 shim"),
    };
    Ok(())
}

/// Whether / is the kernel's initramfs (rootfs), which pivot_root cannot leave.
fn root_is_initramfs() -> bool {
    fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, at, kind) = (f.next()?, f.next()?, f.next()?);
            Some((at.to_string(), kind.to_string()))
        })
        .any(|(at, kind)| at == "/" && kind == "rootfs")
}

/// The end of containerd's log (the shim's lines among them): `down` removes
/// the run directory, so a failed `up` says it.
fn log_tail(run: &Path) -> String {
    let log = fs::read_to_string(run.join("containerd.log")).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
