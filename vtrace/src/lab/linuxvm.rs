//! `linuxvm`: a Linux guest under QEMU with virtio-net on a tap device
//! (vhost=off: this machine has no vhost-net). The guest is Debian's kernel
//! plus a busybox initramfs that brings up eth0 and runs redis and iperf3.
//! KVM is used when it can boot a Linux guest, TCG otherwise, and the
//! ledger says which.

use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use super::{DATA_DIR, LabPlatform, Ledger, Resource, Runtime, address, net};
use crate::{Error, Result, workload::netns::sh};

pub const TAP: &str = "vtl-vm0";
/// Bumped when the initramfs contents change.
const INITRD_VERSION: &str = "1";

fn dir() -> PathBuf {
    Path::new(DATA_DIR).join("linuxvm")
}

fn unavailable(reason: String) -> Error {
    Error::LabUnavailable {
        platform: "linuxvm".into(),
        reason,
    }
}

/// Debian's kernel package as scripts/setup.sh unpacked it: (vmlinuz, modules dir).
pub(super) fn kernel() -> Result<(PathBuf, PathBuf)> {
    let kdir = dir().join("kernel");
    let find = |kdir: &Path| -> Option<(PathBuf, PathBuf)> {
        let boot = fs::read_dir(kdir.join("boot")).ok()?;
        let vmlinuz = boot.flatten().map(|e| e.path()).find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("vmlinuz-"))
        })?;
        let version = vmlinuz
            .file_name()?
            .to_str()?
            .trim_start_matches("vmlinuz-")
            .to_string();
        Some((vmlinuz, kdir.join("lib/modules").join(version)))
    };
    find(&kdir).ok_or_else(|| {
        unavailable(format!(
            "no guest kernel in {} (scripts/setup.sh unpacks Debian's, pinned there)",
            kdir.display()
        ))
    })
}

/// `depends=` of a kernel module, read from its .modinfo strings.
fn module_depends(ko: &Path) -> Vec<String> {
    let bytes = fs::read(ko).unwrap_or_default();
    let key = b"depends=";
    bytes
        .windows(key.len())
        .position(|w| w == key)
        .map(|i| {
            let rest = &bytes[i + key.len()..];
            let end = rest.iter().position(|&b| b == 0).unwrap_or(0);
            String::from_utf8_lossy(&rest[..end])
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Module files for `names` and their dependencies, dependencies first.
fn modules_in_load_order(modules: &Path, names: &[&str]) -> Vec<PathBuf> {
    let mut index = std::collections::HashMap::new();
    let mut stack = vec![modules.join("kernel")];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Some(n) = p
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".ko"))
            {
                index.insert(n.replace('-', "_"), p.clone());
            }
        }
    }
    fn visit(
        name: &str,
        index: &std::collections::HashMap<String, PathBuf>,
        seen: &mut BTreeSet<String>,
        out: &mut Vec<PathBuf>,
    ) {
        let key = name.replace('-', "_");
        if !seen.insert(key.clone()) {
            return;
        }
        let Some(path) = index.get(&key) else { return };
        for dep in module_depends(path) {
            visit(&dep, index, seen, out);
        }
        out.push(path.clone());
    }
    let (mut seen, mut out) = (BTreeSet::new(), Vec::new());
    for n in names {
        visit(n, &index, &mut seen, &mut out);
    }
    out
}

/// Copies the module files of `names` (with their dependencies) into
/// `tree`/modules; returns the insmod lines that load them in order.
pub(super) fn install_modules(tree: &Path, modules: &Path, names: &[&str]) -> Result<String> {
    let mods = modules_in_load_order(modules, names);
    let missing: Vec<&&str> = names
        .iter()
        .filter(|n| {
            let n = n.replace('-', "_");
            !mods.iter().any(|m| {
                m.file_stem()
                    .is_some_and(|s| s.to_string_lossy().replace('-', "_") == n)
            })
        })
        .collect();
    if !missing.is_empty() {
        return Err(unavailable(format!("modules {missing:?} not in the kernel package")));
    }
    fs::create_dir_all(tree.join("modules")).map_err(crate::error::io("create modules dir"))?;
    let mut insmods = String::new();
    for m in &mods {
        let name = m.file_name().unwrap().to_string_lossy().into_owned();
        fs::copy(m, tree.join("modules").join(&name)).map_err(crate::error::io(format!("copy {name}")))?;
        insmods.push_str(&format!("insmod /modules/{name}\n"));
    }
    Ok(insmods)
}

/// `tree` as a gzipped cpio archive at `out`.
pub(super) fn pack(tree: &Path, out: &Path) -> Result<()> {
    let cmd = format!(
        "cd '{}' && find . | cpio -o -H newc --quiet | gzip -1 > '{}'",
        tree.display(),
        out.display()
    );
    sh(&["sh", "-c", &cmd])
}

/// The initramfs: busybox, redis-server, iperf3 (with their libraries), the
/// virtio network modules and an /init that serves on `guest_addr`.
fn initramfs(modules: &Path, guest_addr: &str) -> Result<PathBuf> {
    let out = dir().join(format!("initrd-{guest_addr}.gz"));
    let marker = dir().join("initrd.version");
    if out.exists() && fs::read_to_string(&marker).is_ok_and(|v| v == INITRD_VERSION) {
        return Ok(out);
    }
    let root = super::rootfs::ensure()?;
    let tree = dir().join("initrd-tree");
    let _ = fs::remove_dir_all(&tree);
    sh(&["cp", "-a", &root.display().to_string(), &tree.display().to_string()])?;
    let insmods = install_modules(&tree, modules, &["virtio_pci", "virtio_net"])?;
    let init = format!(
        "#!/bin/busybox sh\n/bin/busybox --install -s /bin\nmount -t proc proc /proc\nmount -t sysfs sys /sys\n\
         mount -t devtmpfs dev /dev\n{insmods}ip link set lo up\nip link set eth0 up\n\
         ip addr add {guest_addr}/24 dev eth0\niperf3 -s -D\n\
         redis-server --bind 0.0.0.0 --port 6379 --protected-mode no --save '' --appendonly no --daemonize yes\n\
         echo vtrace-linuxvm-ready\nexec sleep 2147483647\n"
    );
    let init_path = tree.join("init");
    fs::write(&init_path, init).map_err(crate::error::io("write init"))?;
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&init_path, fs::Permissions::from_mode(0o755)).map_err(crate::error::io("chmod init"))?;
    pack(&tree, &out)?;
    let _ = fs::remove_dir_all(&tree);
    fs::write(&marker, INITRD_VERSION).map_err(crate::error::io("write initrd marker"))?;
    Ok(out)
}

/// TCG by default: this machine's KVM (PVM) cannot boot a Linux guest.
/// `VTRACE_LAB_ACCEL=kvm` asks for KVM where it can.
fn accelerator() -> &'static str {
    match std::env::var("VTRACE_LAB_ACCEL").as_deref() {
        Ok("kvm") => "kvm",
        _ => "tcg",
    }
}

/// The `linuxvm` platform.
pub struct LinuxVm;

impl Runtime for LinuxVm {
    fn up(&self, p: &LabPlatform, ledger: &mut Ledger) -> Result<()> {
        up(p, ledger)
    }

    fn boot(&self) -> Duration {
        Duration::from_secs(90) // a TCG guest boots in seconds to tens of seconds
    }
}

fn up(p: &LabPlatform, ledger: &mut Ledger) -> Result<()> {
    let (_, guest_addr) = address(p);
    fs::create_dir_all(dir()).map_err(crate::error::io(format!("create {}", dir().display())))?;
    let (vmlinuz, modules) = kernel()?;
    let initrd = initramfs(&modules, &guest_addr)?;
    net::tap(ledger, p, TAP, None)?;
    let run = dir().join("run");
    ledger.add(Resource::Dir {
        path: run.display().to_string(),
    })?;
    fs::create_dir_all(&run).map_err(crate::error::io("create run dir"))?;
    let pidfile = run.join("qemu.pid");
    let accel = accelerator();
    let status = Command::new("qemu-system-x86_64")
        .args([
            "-name",
            "vtrace-linuxvm,debug-threads=on",
            "-machine",
            "q35",
            "-accel",
            accel,
            "-m",
            "512",
            "-smp",
            "1",
        ])
        .args([
            "-kernel",
            &vmlinuz.display().to_string(),
            "-initrd",
            &initrd.display().to_string(),
        ])
        .args(["-append", "console=ttyS0 quiet panic=-1"])
        .args([
            "-netdev",
            &format!("tap,id=n0,ifname={TAP},script=no,downscript=no,vhost=off"),
        ])
        .args(["-device", "virtio-net-pci,netdev=n0"])
        .args(["-display", "none", "-monitor", "none", "-no-reboot"])
        .args(["-serial", &format!("file:{}", run.join("console.log").display())])
        .args(["-daemonize", "-pidfile", &pidfile.display().to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(crate::error::io("start qemu-system-x86_64"))?;
    let pid: Option<u32> = fs::read_to_string(&pidfile).ok().and_then(|s| s.trim().parse().ok());
    if let Some(pid) = pid {
        ledger.add(Resource::Process {
            pid,
            comm: "qemu-system-x86".into(),
        })?;
    }
    if !status.success() || pid.is_none() {
        return Err(Error::Io {
            context: "qemu-system-x86_64".into(),
            source: std::io::Error::other("did not start"),
        });
    }
    ledger.note = format!(
        "accelerator: {accel}{}",
        if accel == "tcg" {
            " (KVM on this machine cannot boot a Linux guest)"
        } else {
            ""
        }
    );
    Ok(())
}
