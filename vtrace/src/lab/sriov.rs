//! `sriov`: a KVM guest with an SR-IOV virtual function passed through
//! (vfio-pci), the configuration of seed 003. On a host with an SR-IOV NIC
//! (a PF: any `/sys/class/net/*/device/sriov_totalvfs`), `up` creates a VF
//! where none exists, gives it the instance's MAC, binds it to vfio-pci and
//! starts QEMU/KVM with it (linuxvm.rs's Linux guest, whose initramfs loads
//! igbvf, and vtrace's agent on vsock as the lab's other Linux guests);
//! the host reaches the guest through the PF, which gets the host's
//! address (the NIC switches frames between its PF and its VFs). `down`
//! puts back the VF count and the VF driver probing it found.
//!
//! Where KVM cannot boot guests it runs one level down (tests/tests/sriov.rs):
//! in the stock-kernel guest on [`super::guest::Board::SriovNic`], QEMU's
//! emulated igb NIC behind an emulated IOMMU.

use std::{fs, path::Path, process::Command, time::Duration};

use super::{
    common::{LabPlatform, Runtime},
    ledger::{Ledger, Resource},
    linuxvm,
    net::{self, address},
    vms,
};
use crate::{
    Error, Result,
    workload::netns::{quiet, sh},
};

/// Names the PF to take VFs from when the host has several.
pub const SRIOV_PF_ENV: &str = "VTRACE_SRIOV_PF";

pub struct Sriov;

fn unavailable(reason: String) -> Error {
    Error::LabUnavailable {
        platform: "sriov".into(),
        reason,
    }
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_default().trim().to_string()
}

fn write(path: &Path, value: &str) -> Result<()> {
    fs::write(path, value).map_err(crate::error::io(format!("write {value} to {}", path.display())))
}

/// The PF: `$VTRACE_SRIOV_PF`, else the first network device that can
/// have VFs.
pub fn physical_function() -> std::result::Result<String, String> {
    if let Ok(pf) = std::env::var(SRIOV_PF_ENV) {
        let total = Path::new("/sys/class/net").join(&pf).join("device/sriov_totalvfs");
        return match read(&total).parse::<u32>() {
            Ok(n) if n > 0 => Ok(pf),
            _ => Err(format!(
                "{SRIOV_PF_ENV}={pf} is no SR-IOV NIC (no VFs in {})",
                total.display()
            )),
        };
    }
    let mut pfs: Vec<String> = fs::read_dir("/sys/class/net")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            read(&e.path().join("device/sriov_totalvfs"))
                .parse::<u32>()
                .is_ok_and(|n| n > 0)
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    pfs.sort();
    pfs.into_iter().next().ok_or_else(|| {
        "needs an SR-IOV capable NIC (no /sys/class/net/*/device/sriov_totalvfs here); one level down, \
         tests/tests/sriov.rs gives its guest one (QEMU >= 8's igb)"
            .to_string()
    })
}

/// The PCI address of VF `index` of `pf`.
fn virtual_function(pf: &str, index: u32) -> Result<String> {
    let link = Path::new("/sys/class/net")
        .join(pf)
        .join(format!("device/virtfn{index}"));
    fs::read_link(&link)
        .ok()
        .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()))
        .ok_or_else(|| unavailable(format!("{pf} has no VF {index} ({} is missing)", link.display())))
}

/// The driver bound to PCI device `pci`, if any.
fn driver_of(pci: &str) -> Option<String> {
    fs::read_link(Path::new("/sys/bus/pci/devices").join(pci).join("driver"))
        .ok()
        .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()))
}

/// Binds PCI device `pci` to vfio-pci.
fn bind_vfio(pci: &str) -> Result<()> {
    let dev = Path::new("/sys/bus/pci/devices").join(pci);
    if !Path::new("/sys/bus/pci/drivers/vfio-pci").exists() {
        quiet(&["modprobe", "vfio-pci"]);
    }
    if !Path::new("/sys/bus/pci/drivers/vfio-pci").exists() {
        return Err(unavailable(
            "no vfio-pci driver (modprobe vfio-pci failed; the kernel needs CONFIG_VFIO_PCI and an IOMMU)".into(),
        ));
    }
    write(&dev.join("driver_override"), "vfio-pci")?;
    if let Some(driver) = driver_of(pci)
        && driver != "vfio-pci"
    {
        write(&dev.join("driver/unbind"), pci)?;
    }
    if driver_of(pci).is_none() {
        write(Path::new("/sys/bus/pci/drivers_probe"), pci)?;
    }
    match driver_of(pci).as_deref() {
        Some("vfio-pci") => Ok(()),
        other => Err(unavailable(format!(
            "VF {pci} did not bind to vfio-pci (its driver: {}); is the IOMMU on (intel_iommu=on / amd_iommu=on)?",
            other.unwrap_or("none")
        ))),
    }
}

/// The MAC the lab gives the VF of platform network `net`.
fn vf_mac(net: u8) -> String {
    format!("52:54:00:99:{net:02x}:02")
}

impl Runtime for Sriov {
    fn up(&self, p: &LabPlatform, ledger: &mut Ledger) -> Result<()> {
        let (host_addr, guest_addr) = address(p);
        let pf = physical_function().map_err(unavailable)?;
        let (vmlinuz, _) = linuxvm::kernel()?;
        let initrd = linuxvm::initramfs()?;
        let device = Path::new("/sys/class/net").join(&pf).join("device");
        // The VFs as found, put back by `down` (VFs made here go with it).
        let numvfs: u32 = read(&device.join("sriov_numvfs")).parse().unwrap_or(0);
        let autoprobe = read(&device.join("sriov_drivers_autoprobe")) != "0";
        ledger.add(Resource::SriovVfs {
            pf: pf.clone(),
            numvfs,
            autoprobe,
        })?;
        ledger.add(Resource::Address {
            dev: pf.clone(),
            addr: format!("{host_addr}/24"),
        })?;
        net::ipv4_only(&pf, None)?;
        net::host_link_up(&pf, &host_addr)?;
        if numvfs == 0 {
            // A new VF goes to vfio-pci, not to the host's VF driver first.
            write(&device.join("sriov_drivers_autoprobe"), "0")?;
            write(&device.join("sriov_numvfs"), "1")?;
        }
        let vf = virtual_function(&pf, 0)?;
        let mac = vf_mac(p.net);
        sh(&["ip", "link", "set", &pf, "vf", "0", "mac", &mac])?;
        // The guest's frames carry its own MAC; it may change it.
        quiet(&["ip", "link", "set", &pf, "vf", "0", "spoofchk", "off"]);
        quiet(&["ip", "link", "set", &pf, "vf", "0", "trust", "on"]);
        bind_vfio(&vf)?;
        let run = vms::run_dir(ledger, p.name)?;
        let append = format!("console=ttyS0 quiet panic=-1 {}", linuxvm::address_arg(&guest_addr));
        let mut qemu = Command::new("qemu-system-x86_64");
        qemu.args(["-name", &format!("vtrace-{},debug-threads=on", p.name)])
            // As the lab's other Linux guests: room for the agent beside the kernel.
            .args(["-accel", "kvm", "-cpu", "host", "-smp", "1", "-m", "512"])
            .arg("-kernel")
            .arg(&vmlinuz)
            .arg("-initrd")
            .arg(&initrd)
            .args(["-append", &append])
            .args(["-device", &format!("vfio-pci,host={vf}")])
            .arg("-nodefaults");
        let agent = vms::agent_devices(&mut qemu, &guest_addr, ledger);
        linuxvm::start_daemon(qemu, &run, ledger).map_err(unavailable)?;
        ledger.note =
            format!("QEMU/KVM with VF {vf} of {pf} (MAC {mac}) passed through by vfio-pci; Linux guest; {agent}");
        Ok(())
    }

    fn boot(&self) -> Duration {
        Duration::from_secs(60)
    }

    fn ports(&self) -> &'static [u16] {
        linuxvm::LINUX_GUEST_PORTS
    }

    fn missing(&self) -> Option<String> {
        physical_function()
            .err()
            .or_else(vms::kvm_cannot_boot_guests)
            .or_else(|| linuxvm::kernel().err().map(|e| e.to_string()))
    }
}
