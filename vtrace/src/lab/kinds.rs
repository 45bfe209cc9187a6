//! The lab's platforms: one table (name, network, what it needs, and the
//! file that implements it). What a platform's runtime
//! does sits in its own file (containers.rs, docker.rs, lxc.rs, linuxvm.rs,
//! lwip.rs, vms.rs, containerd.rs, sriov.rs), behind [`Runtime`] and, for what a ledger's containers need,
//! [`ContainerRuntime`].

use super::{
    common::{ContainerRuntime, LabPlatform, find_binary},
    containerd::{Containerd, Shim},
    containers, docker,
    ledger::RemoveContainer,
    linuxvm, lwip, lxc, sriov, vms,
};
use crate::{Error, Result};

/// [`container_runtime`], as the ledger removes it ([`super::ledger::Runtimes`]).
pub fn remover(runtime: &str) -> &'static dyn RemoveContainer {
    container_runtime(runtime)
}

/// The file that handles a container of `runtime` (a ledger's
/// `Resource::Container`): docker's, LXC's, or an OCI runtime's (runc,
/// crun, runsc).
pub fn container_runtime(runtime: &str) -> &'static dyn ContainerRuntime {
    match runtime {
        "docker" => &docker::Docker,
        "lxc" => &lxc::Lxc,
        "kata" => &Containerd { shim: Shim::Kata },
        "containerd-runc" => &Containerd { shim: Shim::Runc },
        _ => &containers::Oci,
    }
}

pub const RUNNABLE: &[LabPlatform] = &[
    LabPlatform {
        name: "host",
        net: 11,
        binaries: &["redis-server", "iperf3", "ip"],
        runtime: &containers::Host,
    },
    LabPlatform {
        name: "runc",
        net: 12,
        binaries: &["runc", "busybox", "redis-server", "iperf3", "ip"],
        runtime: &containers::Oci,
    },
    LabPlatform {
        name: "crun",
        net: 13,
        binaries: &["crun", "busybox", "redis-server", "iperf3", "ip"],
        runtime: &containers::Oci,
    },
    LabPlatform {
        name: "gvisor",
        net: 17,
        binaries: &["runsc", "busybox", "redis-server", "iperf3", "ip"],
        runtime: &containers::Oci,
    },
    LabPlatform {
        name: "lxc",
        net: 15,
        binaries: &["lxc-start", "lxc-create", "busybox", "redis-server", "iperf3"],
        runtime: &lxc::Lxc,
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
        runtime: &docker::Docker,
    },
    LabPlatform {
        name: "lwip",
        net: 18,
        binaries: &["cc", "ip"],
        runtime: &lwip::Lwip,
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
        runtime: &linuxvm::LinuxVm,
    },
    LabPlatform {
        name: "qemu-kvm",
        net: 20,
        binaries: &["qemu-system-x86_64"],
        runtime: &vms::QemuKvm {
            guest: vms::Guest::Linux,
            vhost: true,
            tap: "vtl-qk0",
        },
    },
    LabPlatform {
        name: "qemu-kvm-novhost",
        net: 21,
        binaries: &["qemu-system-x86_64"],
        runtime: &vms::QemuKvm {
            guest: vms::Guest::Linux,
            vhost: false,
            tap: "vtl-qkn0",
        },
    },
    LabPlatform {
        name: "firecracker",
        net: 22,
        binaries: &[],
        runtime: &vms::Firecracker { tap: "vtl-fc0" },
    },
    LabPlatform {
        name: "unikraft-vhost",
        net: 23,
        binaries: &["qemu-system-x86_64"],
        runtime: &vms::QemuKvm {
            guest: vms::Guest::Unikraft,
            vhost: true,
            tap: "vtl-ukv0",
        },
    },
    LabPlatform {
        name: "unikraft-virtio",
        net: 24,
        binaries: &["qemu-system-x86_64"],
        runtime: &vms::QemuKvm {
            guest: vms::Guest::Unikraft,
            vhost: false,
            tap: "vtl-uk0",
        },
    },
    LabPlatform {
        name: "kata",
        net: 25,
        binaries: &["containerd", "ctr", "qemu-system-x86_64"],
        runtime: &Containerd { shim: Shim::Kata },
    },
    LabPlatform {
        name: "containerd-runc",
        net: 26,
        // The rootfs says what it lacks (it is made once, where its binaries are).
        binaries: &["containerd", "ctr", "containerd-shim-runc-v2", "runc"],
        runtime: &Containerd { shim: Shim::Runc },
    },
    LabPlatform {
        name: "sriov",
        net: 27,
        binaries: &["qemu-system-x86_64"],
        runtime: &sriov::Sriov,
    },
];

pub fn which(binary: &str) -> bool {
    find_binary(binary, &["/usr/sbin", "/sbin"]).is_some()
}

pub(super) fn lab_platform(name: &str) -> Result<&'static LabPlatform> {
    if let Some(p) = RUNNABLE.iter().find(|p| p.name == name) {
        return Ok(p);
    }
    let known: Vec<&str> = RUNNABLE.iter().map(|p| p.name).collect();
    Err(Error::UnknownPlatform {
        name: name.into(),
        known: known.join(", "),
        running: None,
    })
}

/// What is missing for a platform the lab cannot start (None if nothing is).
pub fn availability(name: &str) -> Option<String> {
    let p = RUNNABLE.iter().find(|p| p.name == name)?;
    let missing: Vec<&str> = p.binaries.iter().copied().filter(|b| !which(b)).collect();
    if !missing.is_empty() {
        return Some(format!("missing {} (run scripts/setup.sh)", missing.join(", ")));
    }
    p.runtime.missing()
}
