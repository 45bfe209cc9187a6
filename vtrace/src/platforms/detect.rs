//! Profiles applied to a system snapshot: which instances of which platforms
//! run, and the role of each of their threads and devices.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use super::{
    profile::{Profile, RoleRule, RootRule, any_glob, glob},
    snapshot::{ProcInfo, SystemSnapshot, VfioDevice},
};

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ThreadRole {
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub role: String,
    /// The id of the vCPU it runs, as KVM's debugfs told detection.
    pub vcpu: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DeviceRole {
    pub name: String,
    pub ifindex: u32,
    pub netns: u64,
    pub kind: String,
    /// tap, veth, veth-peer, bridge, vf, pf.
    pub role: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Instance {
    pub platform: String,
    /// Platform variant (uk-vhost / uk-virtio, linuxvm-vhost / linuxvm-virtio), or the platform.
    pub variant: String,
    /// `<platform>:<root pid>`.
    pub id: String,
    pub root_pid: u32,
    pub processes: Vec<u32>,
    pub threads: Vec<ThreadRole>,
    pub devices: Vec<DeviceRole>,
    /// The PCI functions its processes pass through (vfio): SR-IOV VFs.
    pub passthrough: Vec<VfioDevice>,
}

impl Instance {
    pub fn role_of(&self, tid: u32) -> Option<&str> {
        self.threads.iter().find(|t| t.tid == tid).map(|t| t.role.as_str())
    }
}

fn state_file_pids(snap: &SystemSnapshot, pattern: &str) -> Vec<u32> {
    snap.state_files
        .iter()
        .filter(|(path, _)| glob(pattern, path))
        .filter_map(|(_, content)| {
            match serde_json::from_str::<serde_json::Value>(content) {
                Ok(v) => ["init_process_pid", "pid"].iter().find_map(|k| v[*k].as_u64()),
                Err(_) => content
                    .split(|c: char| !c.is_ascii_digit())
                    .find(|s| !s.is_empty())?
                    .parse()
                    .ok(),
            }
            .map(|p| p as u32)
        })
        .filter(|&p| p > 0)
        .collect()
}

fn root_matches(rule: &RootRule, p: &ProcInfo, parent_comm: &str) -> bool {
    !p.args_pending
        && (rule.comm.is_empty() || any_glob(&rule.comm, &p.comm))
        && (rule.exe.is_empty() || any_glob(&rule.exe, &p.exe))
        && (rule.cmdline_any.is_empty() || rule.cmdline_any.iter().any(|s| p.cmdline.contains(s.as_str())))
        && !rule.cmdline_none.iter().any(|s| p.cmdline.contains(s.as_str()))
        && (rule.parent_comm.is_empty() || any_glob(&rule.parent_comm, parent_comm))
        && (rule.cgroup.is_empty() || any_glob(&rule.cgroup, &p.cgroup))
        && (rule.kernel_marks.is_empty() || rule.kernel_marks.iter().any(|m| p.kernel_marks.contains(m)))
        && (rule.thread_any.is_empty() || p.threads.iter().any(|t| any_glob(&rule.thread_any, &t.comm)))
        && rule.kvm_vcpus.is_none_or(|v| v == p.kvm_vcpus)
        && rule.state_file.is_none()
}

fn role_matches(rule: &RoleRule, is_root: bool, p: &ProcInfo, thread_comm: &str) -> bool {
    rule.root.is_none_or(|r| r == is_root)
        && (rule.process.is_empty() || any_glob(&rule.process, &p.comm))
        && (rule.thread.is_empty() || any_glob(&rule.thread, thread_comm))
        && (rule.cmdline_any.is_empty() || rule.cmdline_any.iter().any(|s| p.cmdline.contains(s.as_str())))
}

/// The process a kernel thread works for, from the name the kernel gives
/// it: vhost workers (`vhost-<owner pid>`, kernel threads before Linux
/// 6.4), and KVM's per-VM threads, the in-kernel PIT's (`kvm-pit/<pid>`)
/// and the NX huge page recovery's (`kvm-nx-lpage-recovery-<pid>`), named
/// after the VMM that created the VM.
pub fn serves_pid(comm: &str) -> Option<u32> {
    ["vhost-", "kvm-pit/", "kvm-nx-lpage-recovery-"]
        .iter()
        .find_map(|prefix| comm.strip_prefix(prefix)?.parse().ok())
}

/// The role a profile gives a thread.
pub fn thread_role(profile: &Profile, is_root: bool, p: &ProcInfo, thread_comm: &str) -> String {
    profile
        .role
        .iter()
        .find(|r| role_matches(r, is_root, p, thread_comm))
        .map(|r| r.role.clone())
        .unwrap_or_else(|| profile.default_role.clone())
}

/// Every instance of every profile in `snap`, highest-priority platform first.
pub fn detect(profiles: &[Profile], snap: &SystemSnapshot) -> Vec<Instance> {
    let by_pid: HashMap<u32, &ProcInfo> = snap.processes.iter().map(|p| (p.pid, p)).collect();
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for p in &snap.processes {
        children.entry(p.ppid).or_default().push(p.pid);
    }
    let mut claimed: HashSet<u32> = HashSet::new();
    let mut instances = Vec::new();
    for profile in profiles {
        let mut roots: Vec<u32> = Vec::new();
        for rule in &profile.root {
            if let Some(pattern) = &rule.state_file {
                roots.extend(
                    state_file_pids(snap, pattern)
                        .into_iter()
                        .filter(|p| by_pid.contains_key(p)),
                );
            } else {
                for p in &snap.processes {
                    let parent = by_pid.get(&p.ppid).map(|q| q.comm.as_str()).unwrap_or("");
                    if root_matches(rule, p, parent) {
                        roots.push(p.pid);
                    }
                }
            }
        }
        roots.sort_unstable();
        roots.dedup();
        // A root inside another root's tree of the same profile is part of it.
        let root_set: HashSet<u32> = roots.iter().copied().collect();
        roots.retain(|&r| {
            let mut cur = by_pid.get(&r).map(|p| p.ppid).unwrap_or(0);
            for _ in 0..64 {
                if cur <= 1 {
                    return true;
                }
                if root_set.contains(&cur) {
                    return false;
                }
                cur = by_pid.get(&cur).map(|p| p.ppid).unwrap_or(0);
            }
            true
        });
        // Roots that name the same instance (`instance_arg`) are one.
        let mut groups: Vec<(String, Vec<u32>)> = Vec::new();
        for root in roots {
            let key = profile
                .instance_arg
                .as_deref()
                .and_then(|arg| arg_value(&by_pid[&root].cmdline, arg))
                .unwrap_or_else(|| root.to_string());
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, members)) => members.push(root),
                None => groups.push((key, vec![root])),
            }
        }
        for (key, members) in groups {
            let root = members[0];
            if claimed.contains(&root) {
                continue;
            }
            // The roots and their descendants not claimed by an earlier instance.
            let mut procs = Vec::new();
            let mut stack = members;
            while let Some(pid) = stack.pop() {
                if !claimed.insert(pid) {
                    continue;
                }
                procs.push(pid);
                stack.extend(children.get(&pid).into_iter().flatten().copied());
            }
            // Kernel threads that serve one of its processes' VMs (named
            // after the thread that created the VM).
            let owners: HashSet<u32> = procs
                .iter()
                .flat_map(|pid| by_pid[pid].threads.iter().map(|t| t.tid).chain([*pid]))
                .collect();
            for p in &snap.processes {
                if let Some(owner) = serves_pid(&p.comm)
                    && owners.contains(&owner)
                    && claimed.insert(p.pid)
                {
                    procs.push(p.pid);
                }
            }
            procs.sort_unstable();
            let mut threads = Vec::new();
            let mut uses_vhost = false;
            // A vhost-vsock worker is named as a vhost-net one: an instance
            // with a vsock device is told by its vhost-net fd alone.
            let has_vsock = procs.iter().any(|pid| by_pid[pid].vhost_vsock);
            for pid in &procs {
                let p = by_pid[pid];
                uses_vhost |= p.vhost_fds;
                for t in &p.threads {
                    uses_vhost |= t.comm.starts_with("vhost-") && !has_vsock;
                    // KVM's word that it runs a vCPU before the name's.
                    let role = match t.vcpu {
                        Some(_) => "vcpu".to_string(),
                        None => thread_role(profile, *pid == root, p, &t.comm),
                    };
                    threads.push(ThreadRole {
                        pid: *pid,
                        tid: t.tid,
                        comm: t.comm.clone(),
                        role,
                        vcpu: t.vcpu,
                    });
                }
            }
            let variant = match (&profile.vhost_variant, &profile.virtio_variant) {
                (Some(v), _) if uses_vhost => v.clone(),
                (_, Some(v)) if !uses_vhost => v.clone(),
                _ => profile.name.clone(),
            };
            let devices = devices_of(snap, &procs, &by_pid);
            let passthrough: Vec<VfioDevice> = snap
                .vfio_devices
                .iter()
                .filter(|d| procs.iter().any(|p| by_pid[p].vfio_groups.contains(&d.group)))
                .cloned()
                .collect();
            instances.push(Instance {
                id: format!("{}:{key}", profile.name),
                platform: profile.name.clone(),
                variant,
                root_pid: root,
                processes: procs,
                threads,
                devices,
                passthrough,
            });
        }
    }
    instances
}

/// The value after `arg` in a command line (`-id X`, or `-id=X`).
fn arg_value(cmdline: &str, arg: &str) -> Option<String> {
    let mut words = cmdline.split_whitespace();
    while let Some(w) = words.next() {
        if w == arg {
            return words.next().map(str::to_string);
        }
        if let Some(v) = w.strip_prefix(arg).and_then(|v| v.strip_prefix('=')) {
            return Some(v.to_string());
        }
    }
    None
}

/// Devices an instance owns: taps its processes opened, the host end of veth
/// pairs into its network namespaces, the bridges these are enslaved to, and
/// the PFs of the VFs it passes through.
fn devices_of(snap: &SystemSnapshot, procs: &[u32], by_pid: &HashMap<u32, &ProcInfo>) -> Vec<DeviceRole> {
    let mut out: BTreeMap<(u64, u32), DeviceRole> = BTreeMap::new();
    let host = snap.host_netns;
    let mut add = |d: &super::snapshot::NetDev, role: &str| {
        out.entry((d.netns, d.ifindex)).or_insert_with(|| DeviceRole {
            name: d.name.clone(),
            ifindex: d.ifindex,
            netns: d.netns,
            kind: d.kind.clone(),
            role: role.into(),
        });
    };
    // (netns, name) of the tun/tap devices the instance's processes hold open.
    let taps: HashSet<(u64, &str)> = procs
        .iter()
        .flat_map(|p| by_pid[p].tun_ifaces.iter().map(move |i| (by_pid[p].netns, i.as_str())))
        .collect();
    let namespaces: HashSet<u64> = procs
        .iter()
        .map(|p| by_pid[p].netns)
        .filter(|&n| n != 0 && n != host)
        .collect();
    // The PF of each VF they pass through: the instance's device on the host.
    let pfs: HashSet<&str> = snap
        .vfio_devices
        .iter()
        .filter(|d| procs.iter().any(|p| by_pid[p].vfio_groups.contains(&d.group)))
        .filter_map(|d| d.pf.as_deref())
        .collect();
    let mut masters = HashSet::new();
    for d in &snap.netdevs {
        if d.netns == host && pfs.contains(d.name.as_str()) {
            add(d, "pf");
        }
        if taps.contains(&(d.netns, d.name.as_str())) || (d.netns == host && taps.contains(&(0, d.name.as_str()))) {
            add(d, "tap");
            masters.extend(d.master.clone());
        }
        if namespaces.contains(&d.netns) && d.kind == "veth" {
            add(d, "veth-peer");
            // The host end: the host device whose index this end's link names.
            if let Some(peer) = snap
                .netdevs
                .iter()
                .find(|h| h.netns == host && Some(h.ifindex) == d.peer_ifindex)
            {
                add(peer, "veth");
                masters.extend(peer.master.clone());
            }
        }
        if namespaces.contains(&d.netns) && d.kind == "vf" {
            add(d, "vf");
        }
    }
    for d in &snap.netdevs {
        if (d.netns == host || namespaces.contains(&d.netns)) && masters.contains(&d.name) {
            add(d, "bridge");
        }
    }
    out.into_values().collect()
}
