//! Platform instances that appear while recording: a VM the recorded
//! command starts (`vtrace record --platform firecracker -- firecracker
//! ...`), or one of the chosen platform started beside it. Detection at the
//! start cannot see them, and at the end they have exited.
//!
//! Each tick lists /proc and reads the name of every process not seen under
//! that name before (an exec renames a forked child, so it is looked at
//! again). Only when a new name could root an instance (a root rule's
//! `comm`) or serve a VM (KVM's `kvm-nx-lpage-recovery-<pid>`, gone with
//! its VM before the end), or KVM lists other vCPUs (a VMM no name
//! announces), or a found instance's root gained or lost threads (vCPUs and
//! vhost workers come after the VMM starts), is the whole system
//! snapshotted and detected again: a few times per recording.

use std::collections::HashMap;

use crate::platforms::{self, Instance, Profile, SystemSnapshot, profile::glob};

pub(super) struct InstanceWatch {
    profiles: Vec<Profile>,
    /// `--platform` and `--instance`: instances they choose are kept
    /// wherever they run.
    platform: String,
    instance: Option<String>,
    /// The recorded command's pid: instances rooted in its tree are kept,
    /// whatever their platform.
    command: Option<u32>,
    /// pid -> the name it had when last looked at.
    seen: HashMap<u32, String>,
    /// Root pid of each instance found -> its thread count then.
    roots: HashMap<u32, usize>,
    /// The vCPU threads KVM listed at the last look: a VMM that
    /// no name announces (crosvm, a renamed QEMU) shows by its vCPUs.
    vcpus: usize,
    /// Each detection's kept instances, oldest first.
    pub sightings: Vec<Vec<Instance>>,
}

fn comm(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|c| c.trim_end().to_string())
}

/// Whether its arguments are there yet: a process in the middle of exec
/// has its new name first (see `SystemSnapshot::live`).
fn has_args(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|a| !a.is_empty())
}

fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count())
}

impl InstanceWatch {
    /// Starts watching; what runs now was seen by the detection at the start.
    pub(super) fn new(profiles: Vec<Profile>, platform: &str, instance: Option<&str>, at_start: &[Instance]) -> Self {
        let mut watch = InstanceWatch {
            profiles,
            platform: platform.to_string(),
            instance: instance.map(str::to_string),
            command: None,
            seen: HashMap::new(),
            roots: at_start.iter().map(|i| (i.root_pid, threads(i.root_pid))).collect(),
            vcpus: platforms::snapshot::all_vcpu_threads().len(),
            sightings: Vec::new(),
        };
        for (pid, name) in watch.processes() {
            watch.seen.insert(pid, name);
        }
        watch
    }

    /// The recorded command, once started.
    pub(super) fn command(&mut self, pid: Option<u32>) {
        self.command = pid;
    }

    fn processes(&self) -> Vec<(u32, String)> {
        std::fs::read_dir("/proc")
            .map(|d| {
                d.flatten()
                    .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                    .filter_map(|pid| Some((pid, comm(pid)?)))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn could_root(&self, name: &str) -> bool {
        self.profiles
            .iter()
            .flat_map(|p| &p.root)
            .flat_map(|r| &r.comm)
            .any(|pattern| glob(pattern, name))
    }

    /// One look; detects again when something new could be an instance.
    pub(super) fn tick(&mut self) {
        let mut due = false;
        for (pid, name) in self.processes() {
            if self.seen.get(&pid) != Some(&name) {
                let could_root = self.could_root(&name);
                if could_root && !has_args(pid) {
                    continue; // mid-exec: looked at again next tick
                }
                // KVM's per-VM kernel threads too: their whole names (cut
                // to 15 bytes in the kernel's events) say whose VM they serve.
                due |= could_root || platforms::detect::serves_pid(&name).is_some();
                self.seen.insert(pid, name);
            }
        }
        due |= self.roots.iter().any(|(&root, &n)| threads(root) != n);
        let vcpus = platforms::snapshot::all_vcpu_threads().len();
        due |= vcpus != self.vcpus;
        self.vcpus = vcpus;
        if due {
            self.detect();
        }
    }

    fn detect(&mut self) {
        let system = SystemSnapshot::live();
        let parent: HashMap<u32, u32> = system.processes.iter().map(|p| (p.pid, p.ppid)).collect();
        let in_command = |mut pid: u32| {
            for _ in 0..64 {
                if Some(pid) == self.command {
                    return true;
                }
                match parent.get(&pid) {
                    Some(&p) if p > 1 && p != pid => pid = p,
                    _ => return false,
                }
            }
            false
        };
        let kept: Vec<Instance> = platforms::detect(&self.profiles, &system)
            .into_iter()
            .filter(|i| platforms::chooses(i, &self.platform, self.instance.as_deref()) || in_command(i.root_pid))
            .collect();
        for i in &kept {
            self.roots.insert(i.root_pid, threads(i.root_pid));
        }
        self.roots.retain(|&root, _| parent.contains_key(&root));
        if !kept.is_empty() {
            self.sightings.push(kept);
        }
    }
}
