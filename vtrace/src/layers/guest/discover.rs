//! `--guest`'s targets: each address named, and for `auto` every VM whose
//! VMM says where its vsock is: QEMU's `guest-cid=N` on its command line
//! (a vhost-vsock device), Firecracker's `vsock.uds_path` in its
//! `--config-file`. A VM without a vsock device is named, not guessed at.

use std::path::{Path, PathBuf};

use super::transport::{DEFAULT_PORT, GuestAddress};
use crate::{Error, Result, platforms::SystemSnapshot};

/// One agent to reach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Its directory under `guests/` (and its name in the report).
    pub name: String,
    pub address: GuestAddress,
    /// The VMM process (0 for an address named by hand).
    pub vmm_pid: u32,
}

/// The targets of `--guest` values, and notes on VMs `auto` could not reach.
pub fn targets(values: &[String], system: &SystemSnapshot) -> Result<(Vec<Target>, Vec<String>)> {
    let mut targets: Vec<Target> = Vec::new();
    let mut notes = Vec::new();
    for v in values {
        if v == "auto" {
            for p in &system.processes {
                let exe = Path::new(&p.exe).file_name().and_then(|n| n.to_str()).unwrap_or(&p.exe);
                let name = format!("{}-{}", if exe.is_empty() { &p.comm } else { exe }, p.pid);
                let vmm = p.kvm_vcpus || exe.starts_with("qemu-system") || exe == "firecracker";
                if !vmm {
                    continue;
                }
                match vsock_of(&p.cmdline) {
                    Some(address) => {
                        if !targets.iter().any(|t| t.address == address) {
                            targets.push(Target {
                                name,
                                address,
                                vmm_pid: p.pid,
                            });
                        }
                    }
                    // A unikernel runs no Linux, so no eBPF and no agent.
                    None if p.kernel_marks.iter().any(|m| m == crate::platforms::image::UNIKRAFT) => notes.push(format!(
                        "--guest auto: {name} boots a Unikraft unikernel (no Linux, no eBPF: no agent can run in it): \
                         its guest's time stays one figure, its vCPU's guest time"
                    )),
                    None => notes.push(format!(
                        "--guest auto: {name} has no vsock device (QEMU: -device vhost-vsock-pci,guest-cid=N; \
                         Firecracker: a vsock in its configuration): its guest is not recorded"
                    )),
                }
            }
            continue;
        }
        let address = GuestAddress::parse(v).map_err(Error::BadArgument)?;
        let name = match &address {
            GuestAddress::Vsock { cid, .. } => format!("cid-{cid}"),
            GuestAddress::Uds { path, .. } => format!(
                "uds-{}",
                path.file_name()
                    .map_or("guest".into(), |n| n.to_string_lossy().into_owned())
            ),
            GuestAddress::Tcp(a) => format!("tcp-{a}"),
        };
        let name: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "_.-".contains(c) {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        targets.push(Target {
            name,
            address,
            vmm_pid: 0,
        });
    }
    // One directory each: a name already taken (two Firecracker sockets of
    // one file name, one context id on two ports) gets its place in line.
    let mut taken = std::collections::HashSet::new();
    for t in &mut targets {
        let mut name = t.name.clone();
        for n in 2.. {
            if taken.insert(name.clone()) {
                break;
            }
            name = format!("{}-{n}", t.name);
        }
        t.name = name;
    }
    Ok((targets, notes))
}

/// Where a VMM's vsock is, read from its command line.
pub fn vsock_of(cmdline: &str) -> Option<GuestAddress> {
    if let Some(at) = cmdline.find("guest-cid=") {
        let digits: String = cmdline[at + "guest-cid=".len()..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        return digits.parse().ok().map(|cid| GuestAddress::Vsock {
            cid,
            port: DEFAULT_PORT,
        });
    }
    let words: Vec<&str> = cmdline.split_whitespace().collect();
    let config = words
        .windows(2)
        .find(|w| w[0] == "--config-file")
        .map(|w| PathBuf::from(w[1]))?;
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(config).ok()?).ok()?;
    let uds = json.get("vsock")?.get("uds_path")?.as_str()?;
    Some(GuestAddress::Uds {
        path: uds.into(),
        port: DEFAULT_PORT,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qemus_guest_cid_and_firecrackers_configuration_name_the_vsock() {
        let qemu = "qemu-system-x86_64 -accel kvm -device vhost-vsock-pci,id=v0,guest-cid=42 -m 256";
        assert_eq!(vsock_of(qemu), Some(GuestAddress::Vsock { cid: 42, port: 1025 }));
        let dir = std::env::temp_dir().join(format!("vtrace-discover-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("fc.json");
        std::fs::write(&config, r#"{"vsock": {"guest_cid": 3, "uds_path": "/run/fc/v.sock"}}"#).unwrap();
        let fc = format!("firecracker --no-api --config-file {}", config.display());
        assert_eq!(
            vsock_of(&fc),
            Some(GuestAddress::Uds {
                path: "/run/fc/v.sock".into(),
                port: 1025
            })
        );
        assert_eq!(vsock_of("qemu-system-x86_64 -m 256"), None);
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// Each guest its own directory, even where two addresses make one name.
    #[test]
    fn two_guests_never_share_a_name() {
        let values = [
            "uds:/run/a/v.sock",
            "uds:/run/b/v.sock",
            "cid:5",
            "cid:5:1026",
            "uds:/run/c/v.sock",
        ]
        .map(String::from);
        let (targets, _) = targets(&values, &SystemSnapshot::default()).unwrap();
        let names: Vec<&str> = targets.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            ["uds-v.sock", "uds-v.sock-2", "cid-5", "cid-5-2", "uds-v.sock-3"]
        );
    }

    /// `auto` names why each VM it found goes unrecorded: a Unikraft
    /// unikernel can run no agent; a Linux VM without a vsock device has none to reach.
    #[test]
    fn auto_names_a_unikernel_and_a_vm_without_vsock() {
        let vm = |pid: u32, marks: &[&str]| crate::platforms::snapshot::ProcInfo {
            pid,
            comm: "qemu-system-x86".into(),
            exe: "/usr/bin/qemu-system-x86_64".into(),
            cmdline: "qemu-system-x86_64 -accel kvm -m 64".into(),
            kvm_vcpus: true,
            kernel_marks: marks.iter().map(|m| m.to_string()).collect(),
            ..Default::default()
        };
        let system = SystemSnapshot {
            processes: vec![vm(10, &["unikraft"]), vm(11, &[])],
            ..Default::default()
        };
        let (targets, notes) = targets(&["auto".into()], &system).unwrap();
        assert!(targets.is_empty());
        assert!(
            notes[0].contains("qemu-system-x86_64-10 boots a Unikraft unikernel")
                && notes[1].contains("-11 has no vsock device"),
            "{notes:?}"
        );
    }
}
