//! Who owns a thread: the one place that decides each row of the threads
//! table's platform, instance, role and selection. Every other layer's rows
//! are charged to a platform and role through these.
//!
//! The rules, in the order they apply:
//!
//! 1. Detection ([`owner`]): a thread a platform instance claims
//!    (`platforms::attribute::Attribution::classify`: a thread detection saw,
//!    or one of an instance's processes or their descendants) takes that
//!    instance, the role its profile gives, and is selected; but a thread
//!    that ran a guest is `vcpu` whatever its name (QEMU names its vCPU
//!    threads only with `debug-threads=on`: the profile's names are a
//!    hint for threads that have not run yet). The idle task and
//!    kernel threads belong to no instance, except vhost workers (kernel
//!    threads before Linux 6.4). Detection comes first: it is the platform's
//!    own word (its state files and process tree).
//! 2. The host's roles ([`role_of`]): a thread no instance claims stays on the
//!    host, with the first role that fits of idle, overflow, kernel, vtrace,
//!    stress, vcpu, vmm, app (selected) and other: what a thread is (the idle
//!    task, the map's overflow slot, a kernel thread, vtrace itself, a bench's
//!    stressor) before what it does (runs a guest, shares a process with one
//!    that does), before whether the selectors picked it.
//! 3. Cgroups ([`claim_by_cgroup`]): a process exec'd into a container
//!    descends from the exec command on the host, so rules 1 and 2 left it
//!    on the host; its cgroup gives it to the instance. This needs every
//!    thread of the table (who else is in the cgroup), so it runs once all
//!    rows are made, and only moves host rows.
//! 4. A VM's kernel threads ([`claim_vm_kernel_threads`]): a vhost worker
//!    (`vhost-<owner pid>`) or KVM's `kvm-pit/<pid>` and
//!    `kvm-nx-lpage-recovery-<pid>` that no instance claimed follow the
//!    process they serve. Last, so that an owner rule 3 moved passes its
//!    instance on.

use std::collections::HashMap;

use vtrace_common::OVERFLOW_TID;

use super::tables::ThreadRow;
use crate::platforms::{self, attribute::Attribution};

/// What a thread's owner is decided from, besides the platform instances.
pub(super) struct Thread<'a> {
    pub tid: u32,
    pub pid: u32,
    pub kthread: bool,
    pub comm: &'a str,
    /// The comm of its process's main thread.
    pub process_comm: &'a str,
    /// The recording's selectors (or the command's process tree) picked it.
    pub selected: bool,
    /// It ran a guest (guest time, or KVM exits).
    pub vcpu: bool,
    /// A thread of its process ran a guest: it is part of a VMM.
    pub in_vmm: bool,
    /// vtrace's own thread.
    pub vtrace: bool,
}

/// Where a thread sits: the threads table's platform, instance, role and selected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Place {
    pub platform: String,
    pub instance: String,
    pub role: String,
    pub selected: bool,
}

/// Rules 1 and 2, one thread at a time. `parent` gives a process's parent
/// pid (None when unknown).
pub(super) fn place(t: &Thread, attribution: &Attribution, parent: &dyn Fn(u32) -> Option<u32>) -> Place {
    // Kernel threads belong to no instance, except those that serve a VM's
    // process (vhost workers before Linux 6.4, KVM's per-VM threads).
    let claimable = t.tid != 0 && (!t.kthread || platforms::detect::serves_pid(t.comm).is_some());
    let claimed = claimable
        .then(|| attribution.classify(t.tid, t.pid, t.comm, t.process_comm, parent))
        .flatten();
    let selected = t.selected || claimed.is_some();
    match claimed {
        Some(a) => Place {
            platform: a.platform,
            instance: a.instance,
            // What it does before what it is called.
            role: if t.vcpu && !t.kthread { "vcpu".into() } else { a.role },
            selected,
        },
        None => Place {
            platform: platforms::HOST.to_string(),
            instance: String::new(),
            role: role_of(t, selected).to_string(),
            selected,
        },
    }
}

/// Rules 3 and 4, over the whole table once every row is made.
pub(super) fn claim_by_table(rows: &mut [ThreadRow]) {
    claim_by_cgroup(rows);
    claim_vm_kernel_threads(rows);
}

/// Roles on the host platform; platform profiles refine these.
/// The role of a thread no platform instance claims (`selected`: by the
/// selectors, or claimed).
fn role_of(t: &Thread, selected: bool) -> &'static str {
    if t.tid == 0 {
        "idle"
    } else if t.tid == OVERFLOW_TID {
        "overflow"
    } else if t.kthread {
        "kernel"
    } else if t.comm == platforms::STRESSOR_COMM {
        // Before `vtrace`: the bench forks them, yet they are load, not its cost.
        "stress"
    } else if t.vtrace {
        "vtrace"
    } else if t.vcpu {
        "vcpu"
    } else if t.in_vmm {
        "vmm"
    } else if selected {
        "app"
    } else {
        "other"
    }
}

/// A thread that serves a process's VM ([`platforms::detect::serves_pid`]:
/// a vhost worker, a kernel thread before Linux 6.4 and a thread of the
/// owner after; KVM's in-kernel PIT and NX recovery threads) that no
/// platform instance claimed works for that process: it takes the owner's
/// platform, instance and selection, with the role `vhost` (a vhost
/// worker) or `vmm` (KVM's, which emulate for the VMM in the kernel).
fn claim_vm_kernel_threads(rows: &mut [ThreadRow]) {
    // By any thread's id: KVM names its threads after the thread that made
    // the VM, which need not be the main one.
    let owners: HashMap<u32, (String, String, bool)> = rows
        .iter()
        .filter(|r| !r.kthread)
        .map(|r| (r.tid, (r.owner.platform.clone(), r.owner.instance.clone(), r.selected)))
        .collect();
    for r in rows
        .iter_mut()
        .filter(|r| r.owner.platform == platforms::HOST && r.owner.instance.is_empty())
    {
        let Some(owner) = platforms::detect::serves_pid(&r.owner.comm) else {
            continue;
        };
        if let Some((platform, instance, selected)) = owners.get(&owner) {
            r.owner.platform = platform.clone();
            r.owner.instance = instance.clone();
            r.selected |= *selected;
            r.owner.role = if r.owner.comm.starts_with("vhost-") {
                "vhost"
            } else {
                "vmm"
            }
            .into();
        }
    }
}

/// A process started inside a container after its instance was detected
/// (`runc exec`, `docker exec`, `vtrace lab exec`) descends from the exec
/// command on the host, not from the instance's root: it is claimed by its
/// cgroup when one instance alone has threads there and every other thread
/// in it was born during the run. (A cgroup with a host thread older than
/// the run is shared, as a host-platform instance shares the host's.)
fn claim_by_cgroup(rows: &mut [ThreadRow]) {
    // cgroup -> its one instance, or None once it is shared.
    let mut owners: HashMap<u64, Option<(String, String)>> = HashMap::new();
    for r in rows.iter().filter(|r| r.cgroup_id != 0 && !r.kthread) {
        let claim = if r.owner.platform != platforms::HOST {
            Some((r.owner.platform.clone(), r.owner.instance.clone()))
        } else if r.born_during_run {
            continue; // says nothing either way
        } else {
            None
        };
        match owners.get(&r.cgroup_id) {
            Some(o) if *o != claim => {
                owners.insert(r.cgroup_id, None);
            }
            Some(_) => {}
            None => {
                owners.insert(r.cgroup_id, claim);
            }
        }
    }
    for r in rows
        .iter_mut()
        .filter(|r| r.owner.platform == platforms::HOST && r.born_during_run && !r.kthread)
    {
        if let Some(Some((platform, instance))) = owners.get(&r.cgroup_id) {
            r.owner.platform = platform.clone();
            r.owner.instance = instance.clone();
            r.owner.role = "app".into();
            // Claimed like a thread detection finds in the instance: selected.
            r.selected = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        platforms::{Instance, Profile, detect::ThreadRole},
        recording::Owner,
    };

    /// A docker instance `docker:100`: process 100 (its root), thread 101 seen by detection as `worker`.
    fn attribution() -> Attribution {
        let instance = Instance {
            platform: "docker".into(),
            variant: "docker".into(),
            id: "docker:100".into(),
            root_pid: 100,
            processes: vec![100],
            threads: vec![ThreadRole {
                pid: 100,
                tid: 101,
                comm: "worker".into(),
                role: "worker".into(),
                vcpu: None,
            }],
            devices: vec![],
            passthrough: vec![],
        };
        let profile = Profile {
            name: "docker".into(),
            default_role: "app".into(),
            ..Default::default()
        };
        Attribution::new(vec![profile], vec![vec![instance]])
    }

    fn thread(tid: u32, pid: u32, comm: &str) -> Thread<'_> {
        Thread {
            tid,
            pid,
            kthread: false,
            comm,
            process_comm: comm,
            selected: false,
            vcpu: false,
            in_vmm: false,
            vtrace: false,
        }
    }

    /// Rule 2 alone: no instance.
    fn host_role(t: &Thread) -> String {
        let o = place(t, &Attribution::new(vec![], vec![]), &|_| None);
        assert_eq!((o.platform.as_str(), o.instance.as_str()), (platforms::HOST, ""));
        o.role
    }

    fn on_host(role: &str, selected: bool) -> Place {
        Place {
            platform: platforms::HOST.into(),
            instance: String::new(),
            role: role.into(),
            selected,
        }
    }

    #[test]
    fn detected_thread_takes_its_instance_and_is_selected() {
        let o = place(&thread(101, 100, "worker"), &attribution(), &|_| None);
        assert_eq!(
            o,
            Place {
                platform: "docker".into(),
                instance: "docker:100".into(),
                role: "worker".into(),
                selected: true,
            }
        );
    }

    /// A thread that ran a guest is its instance's vCPU whatever its name
    /// (QEMU without `debug-threads=on` names them all after itself); a
    /// kernel thread is not.
    #[test]
    fn a_thread_that_ran_a_guest_is_a_vcpu_whatever_its_name() {
        let vcpu = Thread {
            vcpu: true,
            in_vmm: true,
            ..thread(101, 100, "qemu-system-x86")
        };
        let o = place(&vcpu, &attribution(), &|_| None);
        assert_eq!(
            (o.instance.as_str(), o.role.as_str(), o.selected),
            ("docker:100", "vcpu", true)
        );
        // Its sibling that did not: the profile's role.
        let o = place(
            &Thread {
                in_vmm: true,
                ..thread(101, 100, "qemu-system-x86")
            },
            &attribution(),
            &|_| None,
        );
        assert_eq!(o.role, "worker");
        let o = place(&Thread { kthread: true, ..vcpu }, &attribution(), &|_| None);
        assert_eq!((o.platform.as_str(), o.role.as_str()), (platforms::HOST, "kernel"));
    }

    #[test]
    fn descendant_of_an_instance_process_is_claimed() {
        // Process 300, born during the run, child of 200, child of the instance's 100.
        let parent = |pid: u32| match pid {
            300 => Some(200),
            200 => Some(100),
            _ => None,
        };
        let o = place(&thread(301, 300, "sh"), &attribution(), &parent);
        assert_eq!((o.platform.as_str(), o.instance.as_str()), ("docker", "docker:100"));
        assert_eq!(o.role, "app"); // the profile's default role
        assert!(o.selected);
        // Not a descendant: the host's.
        let o = place(&thread(401, 400, "sh"), &attribution(), &|_| Some(1));
        assert_eq!(
            (o.platform.as_str(), o.role.as_str(), o.selected),
            (platforms::HOST, "other", false)
        );
    }

    #[test]
    fn idle_and_kernel_threads_are_never_claimed_but_vhost_kthreads_are() {
        let attribution = attribution();
        // The idle task, even in an instance's process.
        let o = place(&thread(0, 100, "swapper"), &attribution, &|_| None);
        assert_eq!((o.platform.as_str(), o.role.as_str()), (platforms::HOST, "idle"));
        // A kernel thread detection listed.
        let o = place(
            &Thread {
                kthread: true,
                ..thread(101, 100, "kworker/0:1")
            },
            &attribution,
            &|_| None,
        );
        assert_eq!((o.platform.as_str(), o.role.as_str()), (platforms::HOST, "kernel"));
        // A vhost worker kernel thread (before Linux 6.4) detection listed.
        let o = place(
            &Thread {
                kthread: true,
                ..thread(101, 100, "vhost-100")
            },
            &attribution,
            &|_| None,
        );
        assert_eq!((o.platform.as_str(), o.instance.as_str()), ("docker", "docker:100"));
    }

    /// The host's roles, first match wins: each step turns off the property
    /// that decided the one before.
    #[test]
    fn host_roles_in_order() {
        let mut t = Thread {
            kthread: true,
            selected: true,
            vcpu: true,
            in_vmm: true,
            vtrace: true,
            ..thread(0, 0, platforms::STRESSOR_COMM)
        };
        assert_eq!(host_role(&t), "idle");
        t.tid = OVERFLOW_TID;
        assert_eq!(host_role(&t), "overflow");
        t.tid = 7;
        assert_eq!(host_role(&t), "kernel");
        t.kthread = false;
        assert_eq!(host_role(&t), "stress");
        t.comm = "qemu-system-x86";
        assert_eq!(host_role(&t), "vtrace");
        t.vtrace = false;
        assert_eq!(host_role(&t), "vcpu");
        t.vcpu = false;
        assert_eq!(host_role(&t), "vmm");
        t.in_vmm = false;
        assert_eq!(host_role(&t), "app");
        t.selected = false;
        assert_eq!(host_role(&t), "other");
    }

    /// A threads-table row on the host, as rules 1 and 2 leave it.
    fn row(tid: u32, pid: u32, comm: &str, cgroup_id: u64, born_during_run: bool) -> ThreadRow {
        ThreadRow {
            tid,
            owner: Owner {
                pid,
                comm: comm.into(),
                platform: platforms::HOST.into(),
                instance: String::new(),
                role: "other".into(),
            },
            cgroup_id,
            born_during_run,
            ..Default::default()
        }
    }

    fn kernel(mut r: ThreadRow) -> ThreadRow {
        r.kthread = true;
        r
    }

    fn claimed(mut r: ThreadRow, instance: &str, role: &str) -> ThreadRow {
        r.owner.platform = instance.split(':').next().unwrap().into();
        r.owner.instance = instance.into();
        r.owner.role = role.into();
        r.selected = true;
        r
    }

    fn owners(rows: &[ThreadRow]) -> Vec<(u32, Place)> {
        rows.iter()
            .map(|r| {
                (
                    r.tid,
                    Place {
                        platform: r.owner.platform.clone(),
                        instance: r.owner.instance.clone(),
                        role: r.owner.role.clone(),
                        selected: r.selected,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn cgroup_gives_an_exec_d_process_to_its_instance() {
        let mut rows = vec![
            claimed(row(100, 100, "nginx", 9, false), "docker:100", "app"),
            // `docker exec` born during the run in the instance's cgroup.
            row(200, 200, "sh", 9, true),
            row(201, 200, "sh", 9, true),
        ];
        claim_by_cgroup(&mut rows);
        for r in &rows[1..] {
            assert_eq!(
                (
                    r.owner.platform.as_str(),
                    r.owner.instance.as_str(),
                    r.owner.role.as_str()
                ),
                ("docker", "docker:100", "app")
            );
            // Claimed like a thread detection finds in the instance: selected.
            assert!(r.selected);
        }
        // Kernel threads are not moved.
        let mut rows = vec![
            claimed(row(100, 100, "nginx", 9, false), "docker:100", "app"),
            kernel(row(2, 2, "kworker", 9, true)),
        ];
        let before = rows.clone();
        claim_by_cgroup(&mut rows);
        assert_eq!(rows, before);
    }

    #[test]
    fn cgroup_without_one_instance_claims_nothing() {
        let cases = [
            // No instance in the cgroup.
            vec![row(10, 10, "a", 9, false), row(20, 20, "b", 9, true)],
            // Only threads born during the run there.
            vec![row(20, 20, "b", 9, true), row(21, 21, "c", 9, true)],
            // Shared with a host thread older than the run (either order).
            vec![
                claimed(row(100, 100, "nginx", 9, false), "docker:100", "app"),
                row(10, 10, "a", 9, false),
                row(20, 20, "b", 9, true),
            ],
            vec![
                row(10, 10, "a", 9, false),
                claimed(row(100, 100, "nginx", 9, false), "docker:100", "app"),
                row(20, 20, "b", 9, true),
            ],
            // Two instances.
            vec![
                claimed(row(100, 100, "nginx", 9, false), "docker:100", "app"),
                claimed(row(300, 300, "redis", 9, false), "docker:300", "app"),
                row(20, 20, "b", 9, true),
            ],
            // Another cgroup's instance, or no cgroup (0).
            vec![
                claimed(row(100, 100, "nginx", 8, false), "docker:100", "app"),
                row(20, 20, "b", 9, true),
            ],
            vec![
                claimed(row(100, 100, "nginx", 0, false), "docker:100", "app"),
                row(20, 20, "b", 0, true),
            ],
        ];
        for rows in cases {
            let mut after = rows.clone();
            claim_by_cgroup(&mut after);
            assert_eq!(after, rows);
        }
    }

    #[test]
    fn vhost_worker_follows_its_owner() {
        let mut rows = vec![
            claimed(row(100, 100, "qemu", 0, false), "qemu:100", "vmm"),
            kernel(row(500, 500, "vhost-100", 0, false)),
            // After Linux 6.4: a thread of its owner.
            row(105, 100, "vhost-100", 0, false),
        ];
        claim_vm_kernel_threads(&mut rows);
        let worker = Place {
            platform: "qemu".into(),
            instance: "qemu:100".into(),
            role: "vhost".into(),
            selected: true,
        };
        assert_eq!(owners(&rows)[1..], [(500, worker.clone()), (105, worker)]);
    }

    #[test]
    fn kvms_threads_for_a_vm_follow_its_vmm() {
        let mut rows = vec![
            claimed(row(100, 100, "qemu", 0, false), "qemu:100", "vcpu"),
            kernel(row(510, 510, "kvm-pit/100", 0, false)),
            kernel(row(511, 511, "kvm-nx-lpage-recovery-100", 0, false)),
            kernel(row(512, 512, "kvm-pit/999", 0, false)),
        ];
        claim_vm_kernel_threads(&mut rows);
        let vmm = Place {
            platform: "qemu".into(),
            instance: "qemu:100".into(),
            role: "vmm".into(),
            selected: true,
        };
        let owners = owners(&rows);
        assert_eq!(owners[1..3], [(510, vmm.clone()), (511, vmm)]);
        assert_eq!(owners[3].1.instance, "");
    }

    #[test]
    fn vhost_worker_of_an_unclaimed_owner_stays_on_the_host() {
        let mut owner_row = row(100, 100, "qemu", 0, false);
        owner_row.selected = true;
        let mut rows = vec![
            owner_row,
            row(500, 500, "vhost-100", 0, false),
            // Place not in the table: unchanged.
            row(501, 501, "vhost-999", 0, false),
        ];
        claim_vm_kernel_threads(&mut rows);
        let owners = owners(&rows);
        // On the host still, but with the role vhost and its owner's selection.
        assert_eq!(owners[1].1, on_host("vhost", true));
        assert_eq!(owners[2].1, on_host("other", false));
    }

    #[test]
    fn vhost_suffix_must_be_a_pid() {
        let mut rows = vec![
            claimed(row(100, 100, "qemu", 0, false), "qemu:100", "vmm"),
            row(500, 500, "vhost-net", 0, false),
            row(501, 501, "vhost-100x", 0, false),
            row(502, 502, "vhost-", 0, false),
            row(503, 503, "xvhost-100", 0, false),
        ];
        let before = rows.clone();
        claim_vm_kernel_threads(&mut rows);
        assert_eq!(rows, before);
    }

    #[test]
    fn vhost_worker_an_instance_claimed_keeps_its_role() {
        let mut rows = vec![
            claimed(row(100, 100, "qemu", 0, false), "qemu:100", "vmm"),
            claimed(row(500, 500, "vhost-100", 0, false), "qemu:100", "io"),
        ];
        let before = rows.clone();
        claim_vm_kernel_threads(&mut rows);
        assert_eq!(rows, before);
    }

    /// Rule 4 after rule 3: the vhost worker of a process exec'd into a
    /// container follows it into the instance.
    #[test]
    fn vhost_worker_follows_an_owner_its_cgroup_claimed() {
        let mut rows = vec![
            claimed(row(100, 100, "init", 9, false), "docker:100", "app"),
            row(200, 200, "qemu", 9, true),
            kernel(row(500, 500, "vhost-200", 0, true)),
        ];
        claim_by_table(&mut rows);
        let owners = owners(&rows);
        assert_eq!(
            (owners[1].1.instance.as_str(), owners[1].1.role.as_str()),
            ("docker:100", "app")
        );
        assert_eq!(
            (owners[2].1.instance.as_str(), owners[2].1.role.as_str()),
            ("docker:100", "vhost")
        );
    }
}
