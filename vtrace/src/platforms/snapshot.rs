//! What platform detection looks at: processes with their threads, command
//! lines and tun/vhost file descriptors, network devices and their relations,
//! and runtime state files. Read live from /proc and the kernel, or loaded
//! from a JSON capture (the unit tests use captures of platforms this machine
//! cannot run).

use std::{collections::HashMap, fs, path::Path, process::Command};

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ThreadInfo {
    pub tid: u32,
    pub comm: String,
    /// The index of the vCPU it runs, as KVM tells it ([`vcpu_threads`]).
    #[serde(default)]
    pub vcpu: Option<u32>,
}

/// KVM's debugfs: a directory per VM, `<pid>-<fd>`.
pub const KVM_DEBUGFS: &str = "/sys/kernel/debug/kvm";

/// Which thread runs each vCPU of the VM at `dir` (in [`KVM_DEBUGFS`]):
/// KVM's own word (`vcpuN/pid`, the thread that last called KVM_RUN on
/// vCPU N; 0 before the first), as (tid, N). A VMM names its vCPU threads
/// as it likes, or not at all (QEMU without `debug-threads=on`).
pub fn vcpu_threads(dir: &Path) -> Vec<(u32, u32)> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let index = e.file_name().to_str()?.strip_prefix("vcpu")?.parse().ok()?;
            let tid: u32 = fs::read_to_string(e.path().join("pid")).ok()?.trim().parse().ok()?;
            (tid != 0).then_some((tid, index))
        })
        .collect()
}

/// [`vcpu_threads`] of every VM: tid -> vCPU index.
pub fn all_vcpu_threads() -> HashMap<u32, u32> {
    fs::read_dir(KVM_DEBUGFS)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|vm| vm.file_name().to_string_lossy().contains('-'))
        .flat_map(|vm| vcpu_threads(&vm.path()))
        .collect()
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcInfo {
    pub pid: u32,
    pub ppid: u32,
    pub comm: String,
    /// File name of /proc/<pid>/exe.
    #[serde(default)]
    pub exe: String,
    /// NUL-separated arguments joined with spaces.
    #[serde(default)]
    pub cmdline: String,
    #[serde(default)]
    pub threads: Vec<ThreadInfo>,
    /// Interfaces of /dev/net/tun fds (fdinfo `iff:`).
    #[serde(default)]
    pub tun_ifaces: Vec<String>,
    /// (fd, interface) of those fds.
    #[serde(default)]
    pub tun_fds: Vec<(u32, String)>,
    /// Holds a /dev/vhost-net fd: vhost-net serves its network queues.
    #[serde(default)]
    pub vhost_fds: bool,
    /// Holds a /dev/vhost-vsock fd (a vsock device, e.g. to vtrace's
    /// agent): its `vhost-PID` worker serves vsock, not the network.
    #[serde(default)]
    pub vhost_vsock: bool,
    /// Holds a KVM vCPU fd (`anon_inode:kvm-vcpu:N`): runs a virtual machine.
    #[serde(default)]
    pub kvm_vcpus: bool,
    /// IOMMU groups of its /dev/vfio/N fds: the devices it passes through.
    #[serde(default)]
    pub vfio_groups: Vec<u32>,
    /// Network namespace inode.
    #[serde(default)]
    pub netns: u64,
    /// cgroup path (v2 line of /proc/<pid>/cgroup, or the first one).
    #[serde(default)]
    pub cgroup: String,
    /// Marks of the guest kernel image it was given (`super::image`:
    /// `unikraft`, or `unread` when no image could be read).
    #[serde(default)]
    pub kernel_marks: Vec<String>,
    /// Its arguments are not there yet (in the middle of exec, or its main
    /// thread gone): it roots no instance by what it is called.
    #[serde(default)]
    pub args_pending: bool,
}

/// `PF_KTHREAD` in /proc/<pid>/stat's flags.
const PF_KTHREAD: u64 = 0x0020_0000;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NetDev {
    pub name: String,
    pub ifindex: u32,
    /// Namespace inode the device lives in.
    #[serde(default)]
    pub netns: u64,
    /// tun, tap, veth, bridge, macvtap, vf, loopback, device, ...
    pub kind: String,
    #[serde(default)]
    pub master: Option<String>,
    /// Index of the other end (veth peer), in `peer_netns`.
    #[serde(default)]
    pub peer_ifindex: Option<u32>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SystemSnapshot {
    pub processes: Vec<ProcInfo>,
    #[serde(default)]
    pub netdevs: Vec<NetDev>,
    /// (path, content) of runtime state files (runc, crun).
    #[serde(default)]
    pub state_files: Vec<(String, String)>,
    /// Network namespace of the host (the reader's).
    #[serde(default)]
    pub host_netns: u64,
    /// The PCI functions in the IOMMU groups processes hold (vfio).
    #[serde(default)]
    pub vfio_devices: Vec<VfioDevice>,
}

/// A PCI function a process holds through vfio, and where it is an SR-IOV
/// VF, its PF's network device, its index there and its MAC.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VfioDevice {
    pub group: u32,
    /// `0000:00:12.0`.
    pub pci: String,
    #[serde(default)]
    pub pf: Option<String>,
    #[serde(default)]
    pub vf_index: Option<u32>,
    #[serde(default)]
    pub mac: Option<String>,
}

/// The PCI functions of IOMMU group `group`, with what SR-IOV says of each.
fn read_vfio_group(group: u32) -> Vec<VfioDevice> {
    let devices = fs::read_dir(format!("/sys/kernel/iommu_groups/{group}/devices"));
    let mut out: Vec<VfioDevice> = devices
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| {
            let pci = e.file_name().to_string_lossy().into_owned();
            let mut dev = VfioDevice {
                group,
                pci: pci.clone(),
                ..Default::default()
            };
            let physfn = Path::new("/sys/bus/pci/devices").join(&pci).join("physfn");
            if let Ok(pf_dir) = fs::canonicalize(&physfn) {
                dev.pf = fs::read_dir(pf_dir.join("net"))
                    .ok()
                    .and_then(|mut d| d.next())
                    .and_then(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned());
                dev.vf_index = fs::read_dir(&pf_dir).into_iter().flatten().flatten().find_map(|e| {
                    let index = e.file_name().to_str()?.strip_prefix("virtfn")?.parse().ok()?;
                    (fs::read_link(e.path()).ok()?.file_name()?.to_str()? == pci).then_some(index)
                });
                if let (Some(pf), Some(index)) = (&dev.pf, dev.vf_index) {
                    dev.mac = vf_mac(pf, index);
                }
            }
            dev
        })
        .collect();
    out.sort_by(|a, b| a.pci.cmp(&b.pci));
    out
}

/// The MAC of VF `index` of `pf`, as `ip link show` lists it
/// ("vf 0     link/ether 52:54:00:99:1b:02 ...").
fn vf_mac(pf: &str, index: u32) -> Option<String> {
    let out = Command::new("ip").args(["link", "show", "dev", pf]).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().find_map(|l| {
        let mut words = l.split_whitespace();
        (words.next() == Some("vf") && words.next()?.parse::<u32>().ok()? == index)
            .then(|| words.skip_while(|w| *w != "link/ether").nth(1).map(str::to_string))?
    })
}

fn netns_of(pid: &str) -> u64 {
    fs::read_link(format!("/proc/{pid}/ns/net"))
        .ok()
        .and_then(|l| {
            l.to_str()
                .and_then(|s| s.trim_start_matches("net:[").trim_end_matches(']').parse().ok())
        })
        .unwrap_or(0)
}

fn read_proc(pid: u32, vcpus: &HashMap<u32, u32>) -> Option<ProcInfo> {
    let dir = format!("/proc/{pid}");
    let stat = fs::read_to_string(format!("{dir}/stat")).ok()?;
    let st = crate::collectors::procfs::parse_stat(&stat)?;
    let args: Vec<String> = fs::read(format!("{dir}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default();
    // A process in the middle of exec has its new name before its new
    // arguments: matched now, it would be by name alone (a QEMU/KVM VM as
    // the catch-all `linuxvm`). It roots no instance until they are there.
    let kernel_thread = st.flags & PF_KTHREAD != 0;
    let args_pending = args.is_empty() && !kernel_thread;
    let cmdline = args.join(" ");
    let kernel_marks = if kernel_thread || args_pending {
        Vec::new()
    } else {
        super::image::marks_of_process(pid, &args)
    };
    let exe = fs::read_link(format!("{dir}/exe"))
        .ok()
        .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let mut threads = Vec::new();
    if let Ok(tasks) = fs::read_dir(format!("{dir}/task")) {
        for t in tasks.flatten() {
            if let Some(tid) = t.file_name().to_str().and_then(|s| s.parse().ok()) {
                let comm = fs::read_to_string(t.path().join("comm"))
                    .map(|c| c.trim_end().to_string())
                    .unwrap_or_default();
                threads.push(ThreadInfo {
                    tid,
                    comm,
                    vcpu: vcpus.get(&tid).copied(),
                });
            }
        }
    }
    threads.sort_by_key(|t| t.tid);
    let (mut tun_ifaces, mut tun_fds, mut vhost_fds, mut vhost_vsock, mut kvm_vcpus) =
        (Vec::new(), Vec::new(), false, false, false);
    let mut vfio_groups = Vec::new();
    if let Ok(fds) = fs::read_dir(format!("{dir}/fd")) {
        for fd in fds.flatten() {
            let Ok(target) = fs::read_link(fd.path()) else { continue };
            let target = target.to_string_lossy();
            if target == "/dev/net/tun" {
                let info = fs::read_to_string(format!("{dir}/fdinfo/{}", fd.file_name().to_string_lossy()))
                    .unwrap_or_default();
                if let Some(iff) = info.lines().find_map(|l| l.strip_prefix("iff:")) {
                    tun_ifaces.push(iff.trim().to_string());
                    if let Some(fd) = fd.file_name().to_str().and_then(|f| f.parse().ok()) {
                        tun_fds.push((fd, iff.trim().to_string()));
                    }
                }
            } else if target == "/dev/vhost-net" {
                vhost_fds = true;
            } else if target == "/dev/vhost-vsock" {
                vhost_vsock = true;
            } else if target.starts_with("anon_inode:kvm-vcpu") {
                kvm_vcpus = true;
            } else if let Some(group) = target.strip_prefix("/dev/vfio/").and_then(|g| g.parse().ok()) {
                vfio_groups.push(group);
            }
        }
    }
    let cgroup = fs::read_to_string(format!("{dir}/cgroup"))
        .ok()
        .and_then(|c| {
            let lines: Vec<&str> = c.lines().collect();
            let pick = lines.iter().find(|l| l.starts_with("0::")).or(lines.first()).copied()?;
            pick.splitn(3, ':').nth(2).map(str::to_string)
        })
        .unwrap_or_default();
    Some(ProcInfo {
        pid,
        ppid: st.ppid,
        comm: st.comm,
        exe,
        cmdline,
        threads,
        tun_ifaces,
        tun_fds,
        vhost_fds,
        vhost_vsock,
        kvm_vcpus,
        vfio_groups,
        netns: netns_of(&pid.to_string()),
        cgroup,
        kernel_marks,
        args_pending,
    })
}

/// Every network namespace in sight (the host's, the named ones under
/// /run/netns, those of running processes), each held open so that a thread
/// can enter it.
pub struct NetNamespaces(Vec<(u64, fs::File)>);

impl NetNamespaces {
    pub fn open() -> Self {
        let mut files = vec!["/proc/thread-self/ns/net".to_string()];
        if let Ok(d) = fs::read_dir("/run/netns") {
            files.extend(d.flatten().map(|e| e.path().display().to_string()));
        }
        if let Ok(d) = fs::read_dir("/proc") {
            for e in d.flatten() {
                if let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) {
                    files.push(format!("/proc/{pid}/ns/net"));
                }
            }
        }
        let mut namespaces: Vec<(u64, fs::File)> = Vec::new();
        for f in files {
            use std::os::unix::fs::MetadataExt;
            // The namespace file's inode is the namespace's id (net:[ino]).
            let Ok(file) = fs::File::open(&f) else { continue };
            let Ok(ns) = file.metadata().map(|m| m.ino()) else {
                continue;
            };
            if !namespaces.iter().any(|(n, _)| *n == ns) {
                namespaces.push((ns, file));
            }
        }
        NetNamespaces(namespaces)
    }

    /// Runs `f(netns)` inside each namespace in turn, on a thread of its own
    /// (a thread's network namespace is its own to change: new sockets,
    /// /proc/thread-self/net and child processes follow it).
    pub fn in_each<T: Send>(&self, f: impl Fn(u64) -> T + Sync) -> Vec<T> {
        use std::os::fd::AsRawFd;
        std::thread::scope(|s| {
            s.spawn(|| {
                self.0
                    .iter()
                    .filter(|(_, file)| unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } == 0)
                    .map(|(ns, _)| f(*ns))
                    .collect()
            })
            .join()
            .unwrap_or_default()
        })
    }
}

/// Devices of the calling thread's namespace (`netns`), from `ip`.
fn read_netdevs(netns: u64) -> Vec<NetDev> {
    let out = Command::new("ip").args(["-j", "-d", "link", "show"]).output();
    let Ok(out) = out else { return Vec::new() };
    let Ok(links) = serde_json::from_slice::<Vec<serde_json::Value>>(&out.stdout) else {
        return Vec::new();
    };
    links
        .iter()
        .filter_map(|l| {
            let name = l["ifname"].as_str()?.to_string();
            let info_kind = l["linkinfo"]["info_kind"].as_str().unwrap_or("");
            let kind = match info_kind {
                "tun" => l["linkinfo"]["info_data"]["type"].as_str().unwrap_or("tun").to_string(),
                "" if l["link_type"] == "loopback" => "loopback".into(),
                "" if Path::new(&format!("/sys/class/net/{name}/device/physfn")).exists() => "vf".into(),
                "" => "device".into(),
                k => k.to_string(),
            };
            Some(NetDev {
                ifindex: l["ifindex"].as_u64()? as u32,
                netns,
                kind,
                master: l["master"].as_str().map(str::to_string),
                peer_ifindex: l["link_index"].as_u64().map(|v| v as u32),
                name,
            })
        })
        .collect()
}

fn read_state_files() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (dir, file) in [("/run/runc", "state.json"), ("/run/crun", "status")] {
        let Ok(entries) = fs::read_dir(dir) else { continue };
        for e in entries.flatten() {
            let p = e.path().join(file);
            if let Ok(content) = fs::read_to_string(&p) {
                out.push((p.display().to_string(), content));
            }
        }
    }
    out
}

impl SystemSnapshot {
    /// Reads the running system.
    pub fn live() -> Self {
        let vcpus = all_vcpu_threads();
        let mut processes: Vec<ProcInfo> = fs::read_dir("/proc")
            .map(|d| {
                d.flatten()
                    .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                    .filter_map(|pid| read_proc(pid, &vcpus))
                    .collect()
            })
            .unwrap_or_default();
        processes.sort_by_key(|p| p.pid);
        let host_netns = netns_of("self");
        let netdevs = NetNamespaces::open().in_each(read_netdevs).concat();
        let mut groups: Vec<u32> = processes.iter().flat_map(|p| p.vfio_groups.iter().copied()).collect();
        groups.sort_unstable();
        groups.dedup();
        SystemSnapshot {
            processes,
            netdevs,
            state_files: read_state_files(),
            host_netns,
            vfio_devices: groups.into_iter().flat_map(read_vfio_group).collect(),
        }
    }
}
