//! `vtrace lab`: starts and stops real instances of the platforms this
//! machine can run, each serving redis (6379) and an iperf3 server (5201) on a
//! known address reachable from the host.
//!
//! Every resource `up` creates is written to a ledger
//! (/run/vtrace-lab/<platform>.json) *before* the next step, so `down` undoes
//! exactly what was made, also after a failed or interrupted `up`.

mod containers;
mod docker;
pub mod guest;
mod linuxvm;
mod lwip;
mod lxc;
mod rootfs;

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde::{Deserialize, Serialize};

use crate::{Error, Result, workload::netns::sh};

pub const LEDGER_DIR: &str = "/run/vtrace-lab";
/// Where lab root filesystems and bundles live.
pub const DATA_DIR: &str = "/var/lib/vtrace-lab";

/// A host directory every container instance sees at [`VOLUME_MOUNT`]
/// (bind-mounted; the host platform uses it in place): where the
/// module-load workload's tree lives, as the studies' host volume did.
pub const VOLUME_DIR: &str = "/var/lib/vtrace-lab/volume";
pub const VOLUME_MOUNT: &str = "/volume";

/// Where the lab volume is inside an instance of `platform`.
pub fn volume_in(platform: &str) -> &'static str {
    if platform == crate::platforms::HOST {
        VOLUME_DIR
    } else {
        VOLUME_MOUNT
    }
}

/// Platforms `lab` can start here, and what each needs.
pub struct LabPlatform {
    pub name: &'static str,
    /// Third octet of the 10.99.X.0/24 network between host and instance.
    pub net: u8,
    pub binaries: &'static [&'static str],
}

pub const RUNNABLE: &[LabPlatform] = &[
    LabPlatform {
        name: "host",
        net: 11,
        binaries: &["redis-server", "iperf3", "ip"],
    },
    LabPlatform {
        name: "runc",
        net: 12,
        binaries: &["runc", "busybox", "redis-server", "iperf3", "ip"],
    },
    LabPlatform {
        name: "crun",
        net: 13,
        binaries: &["crun", "busybox", "redis-server", "iperf3", "ip"],
    },
    LabPlatform {
        name: "gvisor",
        net: 17,
        binaries: &["runsc", "busybox", "redis-server", "iperf3", "ip"],
    },
    LabPlatform {
        name: "lxc",
        net: 15,
        binaries: &["lxc-start", "lxc-create", "busybox", "redis-server", "iperf3"],
    },
    LabPlatform {
        name: "docker",
        net: 16,
        binaries: &[
            "dockerd",
            "docker",
            "containerd",
            "runc",
            "busybox",
            "redis-server",
            "iperf3",
        ],
    },
    LabPlatform {
        name: "lwip",
        net: 18,
        binaries: &["cc", "ip"],
    },
    LabPlatform {
        name: "linuxvm",
        net: 14,
        binaries: &[
            "qemu-system-x86_64",
            "busybox",
            "redis-server",
            "iperf3",
            "cpio",
            "gzip",
            "dpkg",
        ],
    },
];

/// Platforms this lab cannot start, and how their absence is detected.
pub const NOT_RUNNABLE: &[(&str, &[&str], &str)] = &[
    (
        "firecracker",
        &["firecracker"],
        "needs the firecracker binary and a KVM that boots Linux guests",
    ),
    (
        "kata",
        &["containerd-shim-kata-v2", "kata-runtime"],
        "needs Kata Containers (shim, runtime, guest image) and containerd",
    ),
    (
        "unikraft",
        &["kraft"],
        "needs kraft and a Unikraft image, and a KVM that boots guests",
    ),
    (
        "sriov",
        &[],
        "needs an SR-IOV capable NIC (no /sys/class/net/*/device/sriov_totalvfs here) and vfio-pci",
    ),
];

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Resource {
    Netns {
        name: String,
    },
    Link {
        name: String,
    },
    Process {
        pid: u32,
        comm: String,
    },
    /// Every process whose command line contains `pattern` (helpers a daemon starts).
    Processes {
        pattern: String,
    },
    Container {
        runtime: String,
        id: String,
        root: String,
    },
    Mount {
        path: String,
    },
    Dir {
        path: String,
    },
    /// /run/netns made a mount point by the first `ip netns add`: unmounted
    /// again once no named namespace is left in it.
    NetnsMount,
}

use crate::workload::netns::{NETNS_DIR, is_mount_point, netns_dir_unused};

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Ledger {
    pub platform: String,
    pub address: String,
    pub resources: Vec<Resource>,
    /// Set once `up` finished.
    pub ready: bool,
    /// What a user should know about the instance (e.g. the accelerator).
    #[serde(default)]
    pub note: String,
}

impl Ledger {
    fn path(platform: &str) -> PathBuf {
        Path::new(LEDGER_DIR).join(format!("{platform}.json"))
    }

    pub fn load(platform: &str) -> Option<Ledger> {
        fs::read(Self::path(platform))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
    }

    fn save(&self) -> Result<()> {
        fs::create_dir_all(LEDGER_DIR).map_err(crate::error::io(format!("create {LEDGER_DIR}")))?;
        let tmp = Self::path(&self.platform).with_extension("tmp");
        fs::write(&tmp, serde_json::to_vec_pretty(self).expect("ledger serializes"))
            .map_err(crate::error::io("write lab ledger"))?;
        fs::rename(&tmp, Self::path(&self.platform)).map_err(crate::error::io("write lab ledger"))
    }

    /// Records a resource (before relying on it), so `down` can undo it.
    pub fn add(&mut self, r: Resource) -> Result<()> {
        self.resources.push(r);
        self.save()
    }
}

fn quiet(args: &[&str]) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub fn which(binary: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
                .any(|d| d.join(binary).is_file())
        })
        .unwrap_or(false)
}

fn lab_platform(name: &str) -> Result<&'static LabPlatform> {
    if let Some(p) = RUNNABLE.iter().find(|p| p.name == name) {
        return Ok(p);
    }
    if let Some((_, _, why)) = NOT_RUNNABLE.iter().find(|(n, _, _)| *n == name) {
        return Err(Error::LabUnavailable {
            platform: name.into(),
            reason: availability(name).unwrap_or_else(|| why.to_string()),
        });
    }
    let known: Vec<&str> = RUNNABLE
        .iter()
        .map(|p| p.name)
        .chain(NOT_RUNNABLE.iter().map(|n| n.0))
        .collect();
    Err(Error::UnknownPlatform {
        name: name.into(),
        known: known.join(", "),
        running: None,
    })
}

/// What is missing for a platform the lab cannot start (None if nothing is).
pub fn availability(name: &str) -> Option<String> {
    if let Some(p) = RUNNABLE.iter().find(|p| p.name == name) {
        let missing: Vec<&str> = p.binaries.iter().copied().filter(|b| !which(b)).collect();
        return (!missing.is_empty()).then(|| format!("missing {} (run scripts/setup.sh)", missing.join(", ")));
    }
    let (_, bins, why) = NOT_RUNNABLE.iter().find(|(n, _, _)| *n == name)?;
    let missing: Vec<&str> = bins.iter().copied().filter(|b| !which(b)).collect();
    let has_vf = fs::read_dir("/sys/class/net")
        .map(|d| d.flatten().any(|e| e.path().join("device/sriov_totalvfs").exists()))
        .unwrap_or(false);
    Some(match name {
        "sriov" if has_vf => format!("{why}: SR-IOV NIC present, but the lab does not configure VFs"),
        _ if missing.is_empty() => why.to_string(),
        _ => format!("{why}: {} not found", missing.join(", ")),
    })
}

/// Address of a platform's instance.
pub fn address(p: &LabPlatform) -> (String, String) {
    (format!("10.99.{}.1", p.net), format!("10.99.{}.2", p.net))
}

/// Waits until `addr:port` accepts connections.
pub fn wait_listening(addr: &str, port: u16, timeout: Duration) -> Result<()> {
    use std::io::Read;
    let start = Instant::now();
    let sock = format!("{addr}:{port}").parse().expect("valid address");
    while start.elapsed() < timeout {
        if let Ok(mut probe) = std::net::TcpStream::connect_timeout(&sock, Duration::from_millis(200)) {
            // The probe is closed from both sides before `lab up` returns: a
            // recording started right after must not see its last packets
            // (lwIP sends its FIN up to seconds late), which the devices'
            // counters would count on one side of the window and vtrace not.
            let _ = probe.shutdown(std::net::Shutdown::Write);
            let _ = probe.set_read_timeout(Some(Duration::from_secs(5)));
            let mut buf = [0u8; 256];
            while matches!(probe.read(&mut buf), Ok(n) if n > 0) {}
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(Error::Io {
        context: format!("waiting for {addr}:{port}"),
        source: std::io::Error::other(format!("nothing listened within {} s", timeout.as_secs())),
    })
}

/// One `vtrace lab up` or `down` at a time per platform: a second one is
/// refused, naming the first (flock: released when its holder exits, however
/// it exits). The lock file goes with the lock, so nothing stays behind.
struct PlatformLock {
    path: PathBuf,
    _file: fs::File,
}

impl PlatformLock {
    fn take(platform: &str) -> Result<PlatformLock> {
        use std::{io::Write, os::fd::AsRawFd};
        fs::create_dir_all(LEDGER_DIR).map_err(crate::error::io(format!("create {LEDGER_DIR}")))?;
        let path = Path::new(LEDGER_DIR).join(format!("{platform}.lock"));
        let mut file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(crate::error::io(format!("open {}", path.display())))?;
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(Error::LabBusy {
                platform: platform.into(),
                holder: fs::read_to_string(&path).unwrap_or_default().trim().to_string(),
            });
        }
        let _ = file.set_len(0);
        let _ = write!(file, "{}", std::process::id());
        Ok(PlatformLock { path, _file: file })
    }
}

impl Drop for PlatformLock {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
        let _ = fs::remove_dir(LEDGER_DIR); // only when nothing else is left there
    }
}

/// Whether the platform's instance is up (its ledger says it became ready).
pub fn is_up(name: &str) -> bool {
    Ledger::load(name).is_some_and(|l| l.ready)
}

/// Starts the platform's instance; on failure everything made so far is
/// removed. An instance already up is returned as it is; one a crashed
/// `up` left half-made is removed first (its ledger was written as it went).
pub fn up(name: &str) -> Result<Ledger> {
    crate::privileges::check_root()?;
    let p = lab_platform(name)?;
    if let Some(missing) = availability(name) {
        return Err(Error::LabUnavailable {
            platform: name.into(),
            reason: missing,
        });
    }
    let _lock = PlatformLock::take(name)?;
    if let Some(l) = Ledger::load(name) {
        if l.ready {
            return Ok(l);
        }
        down_locked(name)?; // a half-made earlier attempt
    }
    let (_, guest) = address(p);
    // The volume outlives instances (a cache, like the root filesystem).
    fs::create_dir_all(VOLUME_DIR).map_err(crate::error::io(format!("create {VOLUME_DIR}")))?;
    let mut ledger = Ledger {
        platform: name.into(),
        address: guest,
        ..Default::default()
    };
    ledger.save()?;
    let made = match name {
        "host" => containers::up_host(p, &mut ledger),
        "runc" | "crun" | "gvisor" => containers::up_oci(p, &mut ledger),
        "linuxvm" => linuxvm::up(p, &mut ledger),
        "docker" => docker::up(p, &mut ledger),
        "lxc" => lxc::up(p, &mut ledger),
        "lwip" => lwip::up(p, &mut ledger),
        _ => unreachable!("checked by lab_platform"),
    };
    // The address may be the runtime's choice (docker); a TCG guest boots in seconds to tens of seconds.
    let addr = ledger.address.clone();
    let boot = Duration::from_secs(if name == "linuxvm" { 90 } else { 20 });
    let made = made
        .and_then(|()| wait_listening(&addr, 6379, boot))
        .and_then(|()| match name {
            "lwip" => Ok(()), // serves redis only
            _ => wait_listening(&addr, 5201, Duration::from_secs(10)),
        });
    if let Err(e) = made {
        let _ = down_locked(name);
        return Err(e);
    }
    ledger.ready = true;
    ledger.save()?;
    Ok(ledger)
}

/// Undoes everything in the platform's ledger, newest first; then checks.
/// False when nothing was up.
pub fn down(name: &str) -> Result<bool> {
    crate::privileges::check_root()?;
    if !NOT_RUNNABLE.iter().any(|(n, _, _)| *n == name) {
        lab_platform(name)?; // an unknown name is an error, not "nothing was up"
    }
    let _lock = PlatformLock::take(name)?;
    down_locked(name)
}

fn down_locked(name: &str) -> Result<bool> {
    let Some(ledger) = Ledger::load(name) else {
        return Ok(false);
    };
    for r in ledger.resources.iter().rev() {
        match r {
            Resource::Process { pid, comm } => {
                // Only if the pid still belongs to what we started.
                let current = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                if current.trim_end() == comm {
                    unsafe { libc::kill(*pid as i32, libc::SIGTERM) };
                    let start = Instant::now();
                    while is_alive(*pid) && start.elapsed() < Duration::from_secs(15) {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
                }
            }
            Resource::Container { runtime, id, root } if runtime == "docker" => {
                quiet(&["docker", "-H", root, "rm", "-f", id]);
            }
            Resource::Container { runtime, id, root } if runtime == "lxc" => {
                quiet(&["lxc-stop", "-P", root, "-n", id, "-k"]);
                quiet(&["lxc-destroy", "-P", root, "-n", id]);
                // lxc-start leaves an empty `lxc.pivot` cgroup behind on cgroup v1.
                for ctl in fs::read_dir("/sys/fs/cgroup").into_iter().flatten().flatten() {
                    let _ = fs::remove_dir(ctl.path().join("lxc.pivot"));
                }
            }
            Resource::Container { runtime, id, root } => {
                quiet(&[runtime, "--root", root, "kill", id, "KILL"]);
                std::thread::sleep(Duration::from_millis(200));
                quiet(&[runtime, "--root", root, "delete", "--force", id]);
            }
            Resource::Processes { pattern } => {
                for pid in processes_matching(pattern) {
                    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                }
            }
            Resource::Mount { path } => {
                quiet(&["umount", "-l", path]);
            }
            Resource::NetnsMount => {
                if netns_dir_unused() {
                    quiet(&["umount", NETNS_DIR]);
                }
            }
            Resource::Link { name } => {
                quiet(&["ip", "link", "del", name]);
            }
            Resource::Netns { name } => {
                quiet(&["ip", "netns", "del", name]);
            }
            Resource::Dir { path } => {
                // Runtimes leave mounts under their directories (runsc's null-netns).
                let mounts = fs::read_to_string("/proc/mounts").unwrap_or_default();
                for m in mounts.lines().filter_map(|l| l.split_whitespace().nth(1)) {
                    if Path::new(m).starts_with(path) {
                        quiet(&["umount", "-l", m]);
                    }
                }
                let _ = fs::remove_dir_all(path);
            }
        }
    }
    let _ = fs::remove_file(Ledger::path(name));
    let _ = fs::remove_dir(LEDGER_DIR); // only when no other platform's ledger is left
    let left = leftovers(&ledger);
    if left.is_empty() {
        Ok(true)
    } else {
        Err(Error::LabLeftovers {
            platform: name.into(),
            what: left.join(", "),
        })
    }
}

/// Whether `pid` still runs. A process this vtrace started (`vtrace bench`
/// brings instances up and down in one process) is reaped here; a zombie
/// whose parent has not reaped it yet has ended all the same.
fn is_alive(pid: u32) -> bool {
    unsafe { libc::waitpid(pid as i32, std::ptr::null_mut(), libc::WNOHANG) };
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| !rest.starts_with(['Z', 'X'])))
        .unwrap_or(false)
}

/// Processes whose command line contains `pattern`.
fn processes_matching(pattern: &str) -> Vec<u32> {
    fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).replace('\0', " ").contains(pattern))
                .unwrap_or(false)
        })
        .collect()
}

/// Resources of a ledger that still exist.
pub fn leftovers(ledger: &Ledger) -> Vec<String> {
    let mounts = fs::read_to_string("/proc/mounts").unwrap_or_default();
    ledger
        .resources
        .iter()
        .filter_map(|r| match r {
            Resource::Netns { name } => Path::new("/run/netns")
                .join(name)
                .exists()
                .then(|| format!("netns {name}")),
            Resource::Link { name } => Path::new("/sys/class/net")
                .join(name)
                .exists()
                .then(|| format!("link {name}")),
            Resource::Process { pid, comm } => fs::read_to_string(format!("/proc/{pid}/comm"))
                .ok()
                .filter(|c| c.trim_end() == comm && is_alive(*pid))
                .map(|_| format!("process {pid} ({comm})")),
            Resource::Container { runtime, .. } if runtime == "docker" => None, // gone with its daemon
            Resource::Container { runtime, id, root } => Path::new(root)
                .join(id)
                .exists()
                .then(|| format!("{runtime} container {id}")),
            Resource::Processes { pattern } => {
                let left = processes_matching(pattern);
                (!left.is_empty()).then(|| format!("processes {left:?} matching {pattern}"))
            }
            Resource::Mount { path } => mounts
                .lines()
                .any(|l| l.split_whitespace().nth(1) == Some(path))
                .then(|| format!("mount {path}")),
            Resource::Dir { path } => Path::new(path).exists().then(|| format!("dir {path}")),
            Resource::NetnsMount => {
                (netns_dir_unused() && is_mount_point(NETNS_DIR)).then(|| format!("mount {NETNS_DIR}"))
            }
        })
        .collect()
}

/// The command line that runs `command` inside the running instance of
/// `platform` (`vtrace lab exec`): the runtime's own exec (runc, crun, runsc,
/// docker, lxc-attach), or `ip netns exec` for the host platform.
pub fn exec_command(platform: &str, command: &[String]) -> Result<Vec<String>> {
    let ledger = Ledger::load(platform)
        .filter(|l| l.ready)
        .ok_or_else(|| Error::LabUnavailable {
            platform: platform.into(),
            reason: format!("no instance is up: `vtrace lab up {platform}` first"),
        })?;
    let mut argv: Vec<String> = ledger
        .resources
        .iter()
        .find_map(|r| match r {
            Resource::Container { runtime, id, root } => Some(match runtime.as_str() {
                "docker" => vec!["docker".into(), "-H".into(), root.clone(), "exec".into(), id.clone()],
                "lxc" => vec![
                    "lxc-attach".into(),
                    "-P".into(),
                    root.clone(),
                    "-n".into(),
                    id.clone(),
                    "--".into(),
                ],
                _ => vec![
                    runtime.clone(),
                    "--root".into(),
                    root.clone(),
                    "exec".into(),
                    id.clone(),
                ],
            }),
            _ => None,
        })
        .or_else(|| {
            (platform == crate::platforms::HOST).then(|| {
                ledger.resources.iter().find_map(|r| match r {
                    Resource::Netns { name } => Some(vec!["ip".into(), "netns".into(), "exec".into(), name.clone()]),
                    _ => None,
                })
            })?
        })
        .ok_or_else(|| Error::LabUnavailable {
            platform: platform.into(),
            reason: "its instance runs no shell to exec in (a VM or a user-space stack): \
                     run the workload from the host against its address"
                .into(),
        })?;
    argv.extend(command.iter().cloned());
    Ok(argv)
}

/// One line per platform: running (address), or startable, or why not.
pub fn status() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in RUNNABLE {
        let state = match Ledger::load(p.name) {
            Some(l) if l.ready => format!("up: redis {0}:6379, iperf3 {0}:5201 {1}", l.address, l.note),
            Some(_) => "half-made (run `vtrace lab down` to clean up)".into(),
            None => match availability(p.name) {
                Some(why) => format!("cannot start: {why}"),
                None => "down (can start here)".into(),
            },
        };
        out.push((p.name.to_string(), state));
    }
    for (name, _, _) in NOT_RUNNABLE {
        out.push((
            name.to_string(),
            format!("not runnable here: {}", availability(name).unwrap_or_default()),
        ));
    }
    out
}

/// Turns IPv6 off on a lab link before it comes up. The labs measure IPv4
/// workloads; IPv6 autoconfiguration would add its own packets (duplicate
/// address detection, router solicitations every 4 s, MLD reports) at random
/// moments, landing in per-hop counts and straddling the window's edges.
pub fn ipv4_only(dev: &str, netns: Option<&str>) -> Result<()> {
    if !Path::new("/proc/sys/net/ipv6").exists() {
        return Ok(()); // the kernel has no IPv6 at all
    }
    let key = format!("net.ipv6.conf.{dev}.disable_ipv6=1");
    match netns {
        Some(ns) => sh(&["ip", "netns", "exec", ns, "sysctl", "-qw", &key]),
        None => sh(&["sysctl", "-qw", &key]),
    }
}

/// Creates netns `ns` joined to the host by a veth pair `host_if`/`ns_if`,
/// recording each piece in the ledger.
pub fn veth_netns(ledger: &mut Ledger, p: &LabPlatform, ns: &str, host_if: &str, ns_if: &str) -> Result<()> {
    let (host_addr, guest_addr) = address(p);
    if !is_mount_point(NETNS_DIR) {
        ledger.add(Resource::NetnsMount)?;
    }
    ledger.add(Resource::Netns { name: ns.into() })?;
    sh(&["ip", "netns", "add", ns])?;
    ledger.add(Resource::Link { name: host_if.into() })?;
    sh(&["ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if])?;
    sh(&["ip", "link", "set", ns_if, "netns", ns])?;
    ipv4_only(host_if, None)?;
    ipv4_only(ns_if, Some(ns))?;
    sh(&["ip", "addr", "add", &format!("{host_addr}/24"), "dev", host_if])?;
    sh(&["ip", "link", "set", host_if, "up"])?;
    sh(&["ip", "-n", ns, "addr", "add", &format!("{guest_addr}/24"), "dev", ns_if])?;
    sh(&["ip", "-n", ns, "link", "set", ns_if, "up"])?;
    sh(&["ip", "-n", ns, "link", "set", "lo", "up"])
}
