//! Maps recorded threads to platform instances and roles: threads seen by
//! detection directly, and threads born during the run through their process
//! or its parent chain (the kernel records each new process's parent).

use std::collections::HashMap;

use super::{Instance, Profile, snapshot::ProcInfo, thread_role};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attributed {
    pub platform: String,
    pub instance: String,
    pub role: String,
}

pub struct Attribution {
    profiles: Vec<Profile>,
    instances: Vec<Instance>,
    /// tid -> (instance index, role) from detection.
    by_tid: HashMap<u32, (usize, String)>,
    /// tid -> its name as detection read it in /proc (whole, where the
    /// kernel's events cut it to 15 bytes).
    comm_by_tid: HashMap<u32, String>,
    /// tid -> the id of the vCPU KVM said it runs, at detection.
    vcpu_by_tid: HashMap<u32, u32>,
    /// pid -> instance index.
    by_pid: HashMap<u32, usize>,
}

impl Attribution {
    /// `snapshots` of instances, oldest first (e.g. at the start and end of a recording).
    pub fn new(profiles: Vec<Profile>, snapshots: Vec<Vec<Instance>>) -> Self {
        let mut instances: Vec<Instance> = Vec::new();
        let mut by_tid = HashMap::new();
        let mut comm_by_tid = HashMap::new();
        let mut vcpu_by_tid = HashMap::new();
        let mut by_pid = HashMap::new();
        for snap in snapshots {
            for inst in snap {
                let idx = match instances.iter().position(|i| i.id == inst.id) {
                    Some(i) => {
                        merge(&mut instances[i], &inst);
                        i
                    }
                    None => {
                        instances.push(inst.clone());
                        instances.len() - 1
                    }
                };
                for t in &inst.threads {
                    by_tid.insert(t.tid, (idx, t.role.clone()));
                    comm_by_tid.insert(t.tid, t.comm.clone());
                    if let Some(id) = t.vcpu {
                        vcpu_by_tid.insert(t.tid, id);
                    }
                }
                for p in &inst.processes {
                    by_pid.insert(*p, idx);
                }
            }
        }
        Attribution {
            profiles,
            instances,
            by_tid,
            comm_by_tid,
            vcpu_by_tid,
            by_pid,
        }
    }

    /// The id of the vCPU KVM said thread `tid` runs, when detection looked.
    pub fn detected_vcpu(&self, tid: u32) -> Option<u32> {
        self.vcpu_by_tid.get(&tid).copied()
    }

    /// The name detection read for thread `tid` of an instance.
    pub fn detected_comm(&self, tid: u32) -> Option<&str> {
        self.comm_by_tid.get(&tid).map(String::as_str)
    }

    pub fn instances(&self) -> &[Instance] {
        &self.instances
    }

    /// Instance and role of a thread, or None when no instance claims it.
    /// `parent` gives a process's parent pid (None when unknown).
    pub fn classify(
        &self,
        tid: u32,
        pid: u32,
        comm: &str,
        process_comm: &str,
        parent: &dyn Fn(u32) -> Option<u32>,
    ) -> Option<Attributed> {
        let make = |idx: usize, role: String| {
            let i = &self.instances[idx];
            Some(Attributed {
                platform: i.platform.clone(),
                instance: i.id.clone(),
                role,
            })
        };
        if let Some((idx, role)) = self.by_tid.get(&tid) {
            return make(*idx, role.clone());
        }
        let mut cur = pid;
        for _ in 0..64 {
            if let Some(&idx) = self.by_pid.get(&cur) {
                let profile = self.profiles.iter().find(|p| p.name == self.instances[idx].platform)?;
                let proc_info = ProcInfo {
                    pid,
                    comm: process_comm.into(),
                    ..Default::default()
                };
                let is_root = pid == self.instances[idx].root_pid;
                return make(idx, thread_role(profile, is_root, &proc_info, comm));
            }
            match parent(cur) {
                Some(p) if p > 1 && p != cur => cur = p,
                _ => return None,
            }
        }
        None
    }
}

/// A later sighting of `known` adds what had not appeared yet: processes,
/// threads, devices and passed-through functions (a VM's tap and vhost worker come after its VMM
/// starts); its variant is the later one's, which saw more (vhost in use).
fn merge(known: &mut Instance, later: &Instance) {
    for p in &later.processes {
        if !known.processes.contains(p) {
            known.processes.push(*p);
        }
    }
    for t in &later.threads {
        if !known.threads.iter().any(|k| k.tid == t.tid) {
            known.threads.push(t.clone());
        }
    }
    for d in &later.devices {
        if !known
            .devices
            .iter()
            .any(|k| k.netns == d.netns && k.ifindex == d.ifindex)
        {
            known.devices.push(d.clone());
        }
    }
    for d in &later.passthrough {
        if !known.passthrough.iter().any(|k| k.pci == d.pci) {
            known.passthrough.push(d.clone());
        }
    }
    known.variant = later.variant.clone();
}
