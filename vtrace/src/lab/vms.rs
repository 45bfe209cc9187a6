//! The VM platforms that need a KVM able to boot a guest OS: QEMU/KVM Linux
//! guests with vhost-net on and off (`qemu-kvm`, `qemu-kvm-novhost`),
//! Firecracker (`firecracker`), and a Unikraft lwIP unikernel on QEMU/KVM
//! with vhost on and off (`unikraft-vhost`, `unikraft-virtio`): the VM
//! configurations of the seed studies. Each has virtio-net on a tap of its
//! own. The Linux guests are linuxvm.rs's kernel and initramfs (redis and
//! iperf3 on the address of their command line); the unikernel is the
//! user's image, serving HTTP (app-httpreply) or Redis (lib-redis): what
//! it serves is read from the image.
//!
//! Where KVM cannot boot guests (a PVM host like this repository's CI), they
//! run one level down, inside the stock-kernel guest (guest.rs), whose
//! emulated SVM gives KVM real nested guests.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use super::{
    common::{DATA_DIR, HTTP_PORT, LabPlatform, Runtime, find_binary},
    disks,
    ledger::{Ledger, Resource},
    linuxvm::{self, start_daemon},
    net::{self, address},
};
use crate::{Error, Result};

/// Names the Firecracker binary when it is not `firecracker` on PATH.
pub const FIRECRACKER_ENV: &str = "VTRACE_FIRECRACKER";
/// `0`: the lab's Linux guests go without `vtrace agent` (they carry it by
/// default: [`agent_binary`]).
pub const AGENT_ENV: &str = "VTRACE_LAB_AGENT";
/// Names the Unikraft image the unikraft platforms boot.
pub const UNIKRAFT_IMAGE_ENV: &str = "VTRACE_UNIKRAFT_IMAGE";
/// vCPUs of the lab's QEMU and Firecracker Linux guests (1 by default;
/// Firecracker takes 1 or an even count). Their /init pins redis-server
/// to the last vCPU.
pub const VCPUS_ENV: &str = "VTRACE_LAB_VCPUS";

/// The vCPUs a Linux guest gets ([`VCPUS_ENV`]).
fn vcpus(platform: &str) -> Result<u32> {
    let Some(v) = std::env::var_os(VCPUS_ENV) else {
        return Ok(1);
    };
    let v = v.to_string_lossy();
    match v.parse::<u32>() {
        Ok(n @ 1..=32) => Ok(n),
        _ => Err(unavailable(
            platform,
            format!("{VCPUS_ENV}={v} is no vCPU count (1 to 32)"),
        )),
    }
}

fn unavailable(platform: &str, reason: String) -> Error {
    Error::LabUnavailable {
        platform: platform.into(),
        reason,
    }
}

/// Why KVM here cannot boot a guest OS, if it cannot: no /dev/kvm, or a KVM
/// without hardware virtualization (PVM runs only tiny guests; Linux does
/// not boot on it).
pub fn kvm_cannot_boot_guests() -> Option<String> {
    const ONE_LEVEL_DOWN: &str = "it runs one level down, in the stock-kernel guest \
         (vtrace::lab::guest, as tests/tests/vm_platforms.rs and kata.rs do)";
    if !Path::new("/dev/kvm").exists() {
        return Some(format!("no /dev/kvm on this machine; {ONE_LEVEL_DOWN}"));
    }
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let hardware = cpuinfo
        .lines()
        .filter(|l| l.starts_with("flags"))
        .flat_map(|l| l.split_whitespace())
        .any(|f| f == "vmx" || f == "svm");
    if Path::new("/sys/module/kvm_pvm").exists() || !hardware {
        return Some(format!(
            "this machine's KVM cannot boot a guest OS (/dev/kvm is {}, the CPU shows no vmx/svm); {ONE_LEVEL_DOWN}",
            if Path::new("/sys/module/kvm_pvm").exists() {
                "PVM"
            } else {
                "there"
            }
        ));
    }
    None
}

/// The Firecracker binary: `$VTRACE_FIRECRACKER`, else `firecracker` on PATH.
pub fn firecracker_binary() -> std::result::Result<PathBuf, String> {
    if let Some(path) = std::env::var_os(FIRECRACKER_ENV) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!("{FIRECRACKER_ENV}={} is no file", path.display()))
        };
    }
    find_binary("firecracker", &[])
        .ok_or_else(|| format!("no firecracker binary: put it on PATH or name it with {FIRECRACKER_ENV}=PATH"))
}

/// The Unikraft image: `$VTRACE_UNIKRAFT_IMAGE`.
pub fn unikraft_image() -> std::result::Result<PathBuf, String> {
    let Some(path) = std::env::var_os(UNIKRAFT_IMAGE_ENV) else {
        return Err(format!(
            "no Unikraft image: name one with {UNIKRAFT_IMAGE_ENV}=PATH (a QEMU/KVM x86_64 image with lwIP, \
             its address from `netdev.ip=`, serving HTTP on port {HTTP_PORT} like app-httpreply, or Redis \
             on {REDIS_PORT} like lib-redis)"
        ));
    };
    let path = PathBuf::from(path);
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!("{UNIKRAFT_IMAGE_ENV}={} is no file", path.display()))
    }
}

/// The port a Redis unikernel serves on.
const REDIS_PORT: u16 = 6379;

/// What a Unikraft image serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnikraftApp {
    /// An HTTP reply on [`HTTP_PORT`] (app-httpreply).
    Http,
    /// Redis on 6379 (lib-redis): its settings after `--` on the command line.
    Redis,
}

impl UnikraftApp {
    /// What `image` serves: Redis where it holds Redis's INFO field names,
    /// else HTTP.
    pub fn of(image: &Path) -> UnikraftApp {
        let holds_redis = fs::read(image)
            .map(|bytes| bytes.windows(REDIS_MARK.len()).any(|w| w == REDIS_MARK))
            .unwrap_or(false);
        if holds_redis {
            UnikraftApp::Redis
        } else {
            UnikraftApp::Http
        }
    }

    /// The configured image's app, read once a process (HTTP when none is
    /// named: `missing` says so): `up`, its note and `ports` share the read.
    fn configured() -> UnikraftApp {
        static APP: std::sync::OnceLock<UnikraftApp> = std::sync::OnceLock::new();
        *APP.get_or_init(|| unikraft_image().map_or(UnikraftApp::Http, |image| UnikraftApp::of(&image)))
    }

    fn ports(self) -> &'static [u16] {
        match self {
            UnikraftApp::Http => &[HTTP_PORT],
            UnikraftApp::Redis => &[REDIS_PORT],
        }
    }

    /// The app's part of the command line (after `--`), and the guest's
    /// memory in MiB (Redis: 128, the least that holds 50 clients).
    fn command_line(self) -> (&'static str, &'static str) {
        match self {
            UnikraftApp::Http => ("", "64"),
            UnikraftApp::Redis => (
                " --bind 0.0.0.0 --port 6379 --protected-mode no --save '' --appendonly no",
                "128",
            ),
        }
    }
}

/// Bytes only a Redis server holds: a field name of its INFO reply.
const REDIS_MARK: &[u8] = b"redis_version:";

/// What a VM platform boots.
#[derive(Clone, Copy)]
pub enum Guest {
    /// The lab's Linux guest (linuxvm.rs), serving redis and iperf3.
    Linux,
    /// The user's Unikraft image, serving HTTP or Redis ([`UnikraftApp`]).
    Unikraft,
}

/// A VM under QEMU/KVM with virtio-net-pci on a tap, vhost-net on or off.
pub struct QemuKvm {
    pub guest: Guest,
    pub vhost: bool,
    pub tap: &'static str,
}

/// A Firecracker microVM running the lab's Linux guest, its virtio-net
/// (virtio-mmio) served by the VMM's own thread from a tap.
pub struct Firecracker {
    pub tap: &'static str,
}

/// A QEMU Linux guest's disks (lab/disks.rs): its data disk on virtio-blk
/// served by an iothread of its own (`IO disk-io`), O_DIRECT on the host,
/// and the shared tools disk, read-only. What it did, in words.
fn qemu_disks(qemu: &mut Command, run: &Path, ledger: &mut Ledger) -> Result<String> {
    let data = disks::data_disk(run, ledger)?;
    let aio = disks::qemu_aio();
    qemu.args(["-object", "iothread,id=disk-io"])
        .args([
            "-drive",
            &format!(
                "file={},if=none,id=data,format=raw,cache=none,aio={aio}",
                data.display()
            ),
        ])
        .args(["-device", "virtio-blk-pci,drive=data,iothread=disk-io"]);
    let tools = match disks::tools_image() {
        Ok(tools) => {
            qemu.args([
                "-drive",
                &format!("file={},if=none,id=tools,format=raw,readonly=on", tools.display()),
            ])
            .args(["-device", "virtio-blk-pci,drive=tools"]);
            "fio on its tools disk".to_string()
        }
        Err(why) => format!("no tools disk ({why})"),
    };
    Ok(format!(
        "virtio-blk data disk on {} (iothread disk-io, aio={aio}, cache=none), {tools}",
        data.display()
    ))
}

pub(super) fn run_dir(ledger: &mut Ledger, platform: &str) -> Result<PathBuf> {
    let run = Path::new(DATA_DIR).join("run").join(platform);
    ledger.add(Resource::Dir {
        path: run.display().to_string(),
    })?;
    let _ = fs::remove_dir_all(&run);
    fs::create_dir_all(&run).map_err(crate::error::io(format!("create {}", run.display())))?;
    Ok(run)
}

impl Runtime for QemuKvm {
    fn up(&self, p: &LabPlatform, ledger: &mut Ledger) -> Result<()> {
        let (host_addr, guest_addr) = address(p);
        let smp = match self.guest {
            Guest::Linux => vcpus(p.name)?,
            Guest::Unikraft => 1,
        }
        .to_string();
        let (kernel, initrd, append, memory) = match self.guest {
            Guest::Linux => {
                let (vmlinuz, _) = linuxvm::kernel()?;
                let initrd = linuxvm::initramfs()?;
                let append = format!("console=ttyS0 quiet panic=-1 {}", linuxvm::address_arg(&guest_addr));
                (vmlinuz, Some(initrd), append, "512")
            }
            Guest::Unikraft => {
                let image = unikraft_image().map_err(|why| unavailable(p.name, why))?;
                let (args, memory) = UnikraftApp::configured().command_line();
                (
                    image,
                    None,
                    format!("netdev.ip={guest_addr}/24:{host_addr} --{args}"),
                    memory,
                )
            }
        };
        net::tap(ledger, p, self.tap, None)?;
        let run = run_dir(ledger, p.name)?;
        let mut qemu = Command::new("qemu-system-x86_64");
        qemu.args(["-name", &format!("vtrace-{},debug-threads=on", p.name)])
            .args(["-accel", "kvm", "-cpu", "host", "-smp", &smp, "-m", memory])
            .arg("-kernel")
            .arg(&kernel);
        if let Some(initrd) = &initrd {
            qemu.arg("-initrd").arg(initrd);
        }
        let vhost = if self.vhost { "on" } else { "off" };
        qemu.args(["-append", &append])
            .args([
                "-netdev",
                &format!("tap,id=n0,ifname={},script=no,downscript=no,vhost={vhost}", self.tap),
            ])
            // No option ROM: the guests boot from -kernel, not the network.
            .args(["-device", "virtio-net-pci,netdev=n0,romfile="])
            .arg("-nodefaults");
        let (agent, disks) = match self.guest {
            Guest::Linux => (
                Some(agent_devices(&mut qemu, &guest_addr, ledger)),
                qemu_disks(&mut qemu, &run, ledger)?,
            ),
            Guest::Unikraft => (None, String::new()),
        };
        start_daemon(qemu, &run, ledger).map_err(|why| unavailable(p.name, why))?;
        ledger.note = format!(
            "QEMU/KVM, virtio-net-pci on tap {}, vhost-net {vhost}; {}",
            self.tap,
            match self.guest {
                Guest::Linux => format!("Linux guest; {disks}; {}", agent.unwrap_or_default()),
                Guest::Unikraft => format!("Unikraft image {} ({:?})", kernel.display(), UnikraftApp::configured()),
            }
        );
        Ok(())
    }

    fn boot(&self) -> Duration {
        Duration::from_secs(60)
    }

    fn ports(&self) -> &'static [u16] {
        match self.guest {
            Guest::Linux => linuxvm::LINUX_GUEST_PORTS,
            Guest::Unikraft => UnikraftApp::configured().ports(),
        }
    }

    fn missing(&self) -> Option<String> {
        kvm_cannot_boot_guests().or_else(|| match self.guest {
            Guest::Unikraft => unikraft_image().err(),
            Guest::Linux => linuxvm::kernel().err().map(|e| e.to_string()),
        })
    }
}

impl Runtime for Firecracker {
    fn ports(&self) -> &'static [u16] {
        linuxvm::LINUX_GUEST_PORTS
    }

    fn up(&self, p: &LabPlatform, ledger: &mut Ledger) -> Result<()> {
        let (_, guest_addr) = address(p);
        let binary = firecracker_binary().map_err(|why| unavailable(p.name, why))?;
        let vmlinux = linuxvm::vmlinux()?;
        let initrd = linuxvm::initramfs()?;
        net::tap(ledger, p, self.tap, None)?;
        let run = run_dir(ledger, p.name)?;
        // Firecracker has no shared folder: the agent rides in the
        // initramfs, and its vsock is Firecracker's own (hybrid: the host
        // end a Unix socket, `record --guest auto` finds it in the config).
        let (initrd, memory, agent) = match agent_binary() {
            Ok(exe) => {
                let with_agent = run.join("initrd-agent");
                linuxvm::initramfs_with_agent(&initrd, &exe, &with_agent)?;
                let uds = run.join("vsock.sock");
                let note = format!("vtrace agent on vsock port {AGENT_PORT} (host end {})", uds.display());
                // Room for the unpacked binary beside the guest's own.
                (with_agent, 512, Ok((uds, note)))
            }
            Err(why) => (initrd, 256, Err(why)),
        };
        // Its disks (lab/disks.rs): the data disk served by its VMM thread.
        let data = disks::data_disk(&run, ledger)?;
        let tools = disks::tools_image();
        // Its virtio-mmio devices are declared in ACPI; `pci=off` spares the
        // guest a bus scan that finds nothing.
        let mut config = serde_json::json!({
            "boot-source": {
                "kernel_image_path": vmlinux,
                "initrd_path": initrd,
                "boot_args": format!(
                    "console=ttyS0 reboot=k panic=1 pci=off quiet {}",
                    linuxvm::address_arg(&guest_addr)
                ),
            },
            "drives": [
                { "drive_id": "data", "path_on_host": data, "is_root_device": false, "is_read_only": false },
            ],
            "machine-config": { "vcpu_count": vcpus(p.name)?, "mem_size_mib": memory },
            "network-interfaces": [{ "iface_id": "eth0", "host_dev_name": self.tap }],
        });
        let tools = match tools {
            Ok(tools) => {
                config["drives"].as_array_mut().expect("drives").push(serde_json::json!(
                    { "drive_id": "tools", "path_on_host": tools, "is_root_device": false, "is_read_only": true }
                ));
                "fio on its tools disk".to_string()
            }
            Err(why) => format!("no tools disk ({why})"),
        };
        if let Ok((uds, _)) = &agent {
            config["vsock"] = serde_json::json!({ "guest_cid": 3, "uds_path": uds });
            ledger.shell = format!("uds:{}:{}", uds.display(), super::shell::SHELL_PORT);
        }
        let config_path = run.join("config.json");
        fs::write(&config_path, config.to_string()).map_err(crate::error::io("write firecracker config"))?;
        let console = fs::File::create(run.join("console.log")).map_err(crate::error::io("create console log"))?;
        let child = Command::new("setsid")
            .arg(&binary)
            .arg("--api-sock")
            .arg(run.join("api.sock"))
            .arg("--config-file")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(console.try_clone().map_err(crate::error::io("console log"))?)
            .stderr(console)
            .spawn()
            .map_err(crate::error::io(format!("start {}", binary.display())))?;
        ledger.add(Resource::Process {
            pid: child.id(),
            comm: "firecracker".into(),
        })?;
        ledger.note = format!(
            "Firecracker ({}), virtio-net (mmio) on tap {}, served by the VMM's thread; virtio-blk data disk on {}, \
             {tools}; Linux guest; {}",
            binary.display(),
            self.tap,
            data.display(),
            agent.map_or_else(|why| why, |(_, note)| note)
        );
        Ok(())
    }

    fn boot(&self) -> Duration {
        Duration::from_secs(60)
    }

    fn missing(&self) -> Option<String> {
        kvm_cannot_boot_guests()
            .or_else(|| firecracker_binary().err())
            .or_else(|| linuxvm::kernel().err().map(|e| e.to_string()))
    }
}

/// The vtrace binary a lab Linux guest runs as its agent (this one), or
/// why it goes without: [`AGENT_ENV`]`=0` (one level down the agent's
/// start-up, its binary paged in under nested TCG, costs every boot).
pub(super) fn agent_binary() -> std::result::Result<PathBuf, String> {
    if std::env::var_os(AGENT_ENV).is_some_and(|v| v == "0") {
        return Err(format!("no agent ({AGENT_ENV}=0)"));
    }
    std::env::current_exe().map_err(|e| format!("no agent: vtrace's own binary not found ({e})"))
}

/// The vsock port the lab's agents listen on (the agent's default).
const AGENT_PORT: u32 = 1025;

/// A QEMU Linux guest's vsock device and the share that carries vtrace into
/// it (its /init starts `vtrace agent`: `record --guest auto` finds it by the
/// guest-cid; and the command channel `vtrace lab exec` reaches, which the
/// ledger keeps): its context id is 100 + the third part of its address,
/// one per lab platform. What it did, in words.
pub(super) fn agent_devices(qemu: &mut Command, guest_addr: &str, ledger: &mut Ledger) -> String {
    let exe = match agent_binary() {
        Ok(exe) => exe,
        Err(why) => return why,
    };
    if !Path::new("/dev/vhost-vsock").exists() {
        return "no agent: no vsock here (no /dev/vhost-vsock; modprobe vhost_vsock)".into();
    }
    let (Some(dir), Some(cid)) = (
        exe.parent(),
        guest_addr.split('.').nth(2).and_then(|n| n.parse::<u32>().ok()),
    ) else {
        return format!("no agent: no context id from the address {guest_addr}");
    };
    let cid = 100 + cid;
    ledger.shell = format!("cid:{cid}:{}", super::shell::SHELL_PORT);
    qemu.args(["-device", &format!("vhost-vsock-pci,guest-cid={cid},romfile=")])
        .args([
            "-virtfs",
            &format!(
                "local,path={},mount_tag={},security_model=none,readonly=on",
                dir.display(),
                linuxvm::AGENT_TAG
            ),
        ]);
    format!(
        "vtrace agent on vsock cid {cid} port {AGENT_PORT} (from {})",
        dir.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An image holding Redis's INFO field names serves Redis; any other, HTTP.
    #[test]
    fn what_a_unikraft_image_serves_is_read_from_it() {
        let dir = std::env::temp_dir().join(format!("vtrace-uk-app-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let redis = dir.join("redis");
        fs::write(&redis, b"\x7fELF...# Server\r\nredis_version:7.0.11\r\n...").unwrap();
        let http = dir.join("http");
        fs::write(&http, b"\x7fELF...HTTP/1.1 200 OK\r\n...").unwrap();
        assert_eq!(UnikraftApp::of(&redis), UnikraftApp::Redis);
        assert_eq!(UnikraftApp::of(&http), UnikraftApp::Http);
        assert_eq!(UnikraftApp::of(&dir.join("none")), UnikraftApp::Http);
        assert_eq!(UnikraftApp::Redis.ports(), &[6379]);
        let _ = fs::remove_dir_all(&dir);
    }
}
