//! The record of what `lab up` made (/run/vtrace-lab/<platform>.json),
//! written before each step relies on what it adds, so `down` undoes exactly
//! what was made, also after a failed or interrupted `up`; and the check of
//! what is left after. A generic undo log: it knows resources (namespaces,
//! links, processes, mounts, directories, addresses, VF counts, containers)
//! and names no platform. A container is removed by its runtime, which the
//! caller looks up for it ([`Runtimes`]): the lab's platforms depend on the
//! ledger, never the reverse.

use std::{
    fs,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use serde::{Deserialize, Serialize};

use crate::{
    Result,
    workload::netns::{NETNS_DIR, is_mount_point, netns_dir_unused, quiet},
};

pub const LEDGER_DIR: &str = "/run/vtrace-lab";

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
    /// An address added to a host device the lab did not make (an SR-IOV PF).
    Address {
        dev: String,
        addr: String,
    },
    /// The VFs of an SR-IOV PF as `up` found them: their count, and whether
    /// new VFs were probed by the host's drivers.
    SriovVfs {
        pf: String,
        numvfs: u32,
        autoprobe: bool,
    },
    /// A loop device over `file` (a VM's data disk): detached, the file removed.
    LoopDevice {
        dev: String,
        file: String,
    },
}

/// Removes and checks a container of one runtime (docker, LXC, an OCI
/// runtime): a ledger's [`Resource::Container`] names its runtime, and the
/// caller of [`Ledger::undo`] and [`leftovers`] looks it up.
pub trait RemoveContainer: Sync {
    /// Stops and removes it.
    fn remove(&self, runtime: &str, id: &str, root: &str);

    /// What is left of it after `remove`, if anything.
    fn left(&self, runtime: &str, id: &str, root: &str) -> Option<String> {
        Path::new(root)
            .join(id)
            .exists()
            .then(|| format!("{runtime} container {id}"))
    }
}

/// The runtime that removes a container of the runtime so named.
pub type Runtimes = fn(&str) -> &'static dyn RemoveContainer;

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
    /// A lab Linux VM's command channel (lab/shell.rs), as a guest
    /// address (`cid:N:PORT`, `uds:PATH:PORT`); empty: none.
    #[serde(default)]
    pub shell: String,
}

impl Ledger {
    fn path(platform: &str) -> PathBuf {
        Path::new(LEDGER_DIR).join(format!("{platform}.json"))
    }

    /// Where `save` writes before its rename: left behind when `up` is killed
    /// between the two.
    fn unfinished_path(platform: &str) -> PathBuf {
        Self::path(platform).with_extension("tmp")
    }

    /// The platform's ledger; its unfinished write instead when that is
    /// whole: a kill before its rename leaves the newest ledger there (a
    /// resource made just before, e.g. a spawned daemon's pid).
    pub fn load(platform: &str) -> Option<Ledger> {
        let read = |path: PathBuf| {
            fs::read(path)
                .ok()
                .and_then(|b| serde_json::from_slice::<Ledger>(&b).ok())
        };
        read(Self::unfinished_path(platform)).or_else(|| read(Self::path(platform)))
    }

    pub(super) fn save(&self) -> Result<()> {
        fs::create_dir_all(LEDGER_DIR).map_err(crate::error::io(format!("create {LEDGER_DIR}")))?;
        let tmp = Self::unfinished_path(&self.platform);
        fs::write(&tmp, serde_json::to_vec_pretty(self).expect("ledger serializes"))
            .map_err(crate::error::io("write lab ledger"))?;
        fs::rename(&tmp, Self::path(&self.platform)).map_err(crate::error::io("write lab ledger"))
    }

    /// Records a resource (before relying on it), so `down` can undo it.
    pub fn add(&mut self, r: Resource) -> Result<()> {
        self.resources.push(r);
        self.save()
    }

    /// Removes an unfinished write of platform `name`'s ledger, which a
    /// crashed `up` may leave with or without a ledger.
    pub(super) fn discard_unfinished_write(name: &str) {
        let _ = fs::remove_file(Self::unfinished_path(name));
        let _ = fs::remove_dir(LEDGER_DIR); // only when no ledger is left
    }

    /// Undoes every resource of the ledger, newest first, then removes the
    /// ledger of platform `name` (and its unfinished write); a container by
    /// its runtime from `runtimes`.
    pub(super) fn undo(&self, name: &str, runtimes: Runtimes) {
        for r in self.resources.iter().rev() {
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
                Resource::Container { runtime, id, root } => runtimes(runtime).remove(runtime, id, root),
                Resource::Processes { pattern } => {
                    // Again until none is left: one may fork meanwhile (a
                    // daemonizing QEMU), and a killed one keeps its command
                    // line until its memory is gone.
                    let start = Instant::now();
                    loop {
                        let left = processes_matching(pattern);
                        if left.is_empty() || start.elapsed() > Duration::from_secs(10) {
                            break;
                        }
                        for pid in left {
                            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                            is_alive(pid); // reaps one this vtrace started
                        }
                        std::thread::sleep(Duration::from_millis(20));
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
                Resource::Address { dev, addr } => {
                    quiet(&["ip", "addr", "del", addr, "dev", dev]);
                }
                Resource::SriovVfs { pf, numvfs, autoprobe } => restore_vfs(pf, *numvfs, *autoprobe),
                Resource::LoopDevice { dev, file } => {
                    if super::loopdev::backing(dev).as_deref() == Some(file.as_str()) {
                        super::loopdev::detach(dev);
                    }
                    let _ = fs::remove_file(file);
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
        let _ = fs::remove_file(Self::path(name));
        Self::discard_unfinished_write(name);
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

/// Processes whose command line (its words joined by spaces) contains `pattern`.
pub(super) fn processes_matching(pattern: &str) -> Vec<u32> {
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

fn pf_device(pf: &str) -> PathBuf {
    Path::new("/sys/class/net").join(pf).join("device")
}

fn read_trimmed(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_default().trim().to_string()
}

/// A loop device still attached to `file`.
fn loop_left(dev: &str, file: &str) -> Option<String> {
    (super::loopdev::backing(dev).as_deref() == Some(file)).then(|| format!("loop device {dev} on {file}"))
}

/// Puts back the VFs of `pf` as `up` found them.
fn restore_vfs(pf: &str, numvfs: u32, autoprobe: bool) {
    let device = pf_device(pf);
    if read_trimmed(&device.join("sriov_numvfs")).parse::<u32>().ok() != Some(numvfs) {
        let _ = fs::write(device.join("sriov_numvfs"), "0");
        if numvfs > 0 {
            let _ = fs::write(device.join("sriov_numvfs"), numvfs.to_string());
        }
    }
    let _ = fs::write(
        device.join("sriov_drivers_autoprobe"),
        if autoprobe { "1" } else { "0" },
    );
}

/// What differs from how `up` found the VFs of `pf`.
fn vfs_left(pf: &str, numvfs: u32) -> Option<String> {
    let now: u32 = read_trimmed(&pf_device(pf).join("sriov_numvfs")).parse().ok()?;
    (now != numvfs).then(|| format!("{now} VFs on {pf} (found {numvfs})"))
}

/// Resources of a ledger that still exist; a container as its runtime
/// from `runtimes` sees it.
pub fn leftovers(ledger: &Ledger, runtimes: Runtimes) -> Vec<String> {
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
            Resource::Container { runtime, id, root } => runtimes(runtime).left(runtime, id, root),
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
            Resource::Address { dev, addr } => std::process::Command::new("ip")
                .args(["-o", "addr", "show", "dev", dev])
                .output()
                .ok()
                .filter(|o| String::from_utf8_lossy(&o.stdout).contains(&format!(" {addr} ")))
                .map(|_| format!("address {addr} on {dev}")),
            Resource::SriovVfs { pf, numvfs, .. } => vfs_left(pf, *numvfs),
            Resource::LoopDevice { dev, file } => loop_left(dev, file),
        })
        .collect()
}
