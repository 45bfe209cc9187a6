//! `linuxvm`: a Linux guest under QEMU with virtio-net on a tap device
//! (vhost=off: this machine has no vhost-net). The guest is Debian's kernel
//! plus a busybox initramfs that brings up eth0 and runs redis and iperf3.
//! KVM is used when it can boot a Linux guest, TCG otherwise, and the
//! ledger says which.
//!
//! The same kernel and initramfs serve every Linux guest of the lab (the
//! QEMU/KVM platforms and Firecracker, vms.rs): the guest takes its address
//! from the kernel command line ([`address_arg`]), and the initramfs loads
//! both virtio transports (PCI for QEMU, MMIO for Firecracker).

use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use super::{
    common::{DATA_DIR, HTTP_PORT, LabPlatform, Runtime},
    ledger::{Ledger, Resource},
    net::{self, address},
};
use crate::{Error, Result, workload::netns::sh};

pub const TAP: &str = "vtl-vm0";
/// What the Linux guests serve: redis, iperf3, HTTP.
pub(super) const LINUX_GUEST_PORTS: &[u16] = &[6379, 5201, HTTP_PORT];
/// What the Linux guests run (with their shared libraries).
const GUEST_BINARIES: &[&str] = &["busybox", "redis-server", "iperf3"];
/// The 9p share that carries vtrace into a QEMU lab VM as /agent, where
/// /init starts `vtrace agent` from it (vsock port 1025); a Firecracker VM's
/// initramfs carries it there instead ([`initramfs_with_agent`]).
pub(super) const AGENT_TAG: &str = "vtrace";
/// Bumped when the initramfs contents change.
const INITRD_VERSION: &str = "12";

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

/// `tree` as a cpio archive at `out`, gzipped or not: a big archive for a
/// TCG guest goes uncompressed, as inflating it there takes many seconds
/// where copying it takes few.
pub(super) fn pack(tree: &Path, out: &Path, gzip: bool) -> Result<()> {
    let cmd = format!(
        "cd '{}' && find . | cpio -o -H newc --quiet {} > '{}'",
        tree.display(),
        if gzip { "| gzip -1" } else { "" },
        out.display()
    );
    sh(&["sh", "-c", &cmd])
}

/// The kernel command-line word that gives a lab guest its address (/24;
/// the host's side is .1).
pub(super) fn address_arg(guest_addr: &str) -> String {
    format!("vtrace.addr={guest_addr}")
}

/// Where the initramfs is cached; [`initramfs`] makes it.
pub(super) fn initramfs_path() -> PathBuf {
    dir().join("initrd.gz")
}

/// The initramfs: busybox, redis-server, iperf3 (with their libraries, and
/// vtrace's), the virtio network modules (PCI and MMIO transports), vsock,
/// 9p, virtio-blk and ext4, and an /init that mounts the tools disk where
/// the VM has one (lab/disks.rs), serves redis, iperf3 and HTTP (busybox httpd)
/// on the address of its kernel command line ([`address_arg`]), redis on
/// its last CPU (with several, the vCPU that serves it is known), and, where
/// the VM carries vtrace as /agent (shared as [`AGENT_TAG`], or in the
/// initramfs), runs `vtrace agent`.
pub(super) fn initramfs() -> Result<PathBuf> {
    let _maker = super::lock::CacheLock::take("linuxvm-initrd")?;
    let out = initramfs_path();
    let marker = dir().join("initrd.version");
    if out.exists() && fs::read_to_string(&marker).is_ok_and(|v| v == INITRD_VERSION) {
        return Ok(out);
    }
    let (_, modules) = kernel()?;
    let tree = dir().join("initrd-tree");
    let _ = fs::remove_dir_all(&tree);
    // Only what the guest runs: a lean archive boots in a second where the
    // containers' root filesystem (node, fio) took several, nested.
    for d in ["bin", "proc", "sys", "dev", "tmp", "etc"] {
        fs::create_dir_all(tree.join(d)).map_err(crate::error::io(format!("create {d}")))?;
    }
    for binary in GUEST_BINARIES {
        let bin = super::rootfs::find(binary)?;
        fs::copy(&bin, tree.join("bin").join(binary)).map_err(crate::error::io(format!("copy {binary}")))?;
        for lib in super::rootfs::libraries(&bin) {
            super::rootfs::copy_into(&tree, &lib)?;
        }
    }
    // vtrace's own libraries, for the agent a VM runs from its share (AGENT_TAG).
    if let Ok(exe) = std::env::current_exe() {
        for lib in super::rootfs::libraries(&exe) {
            super::rootfs::copy_into(&tree, &lib)?;
        }
    }
    let insmods = install_modules(
        &tree,
        &modules,
        &[
            "virtio_pci",
            "virtio_mmio",
            "virtio_net",
            "igbvf",
            "vmw_vsock_virtio_transport",
            "9pnet_virtio",
            "9p",
            // The data disk and the tools disk (lab/disks.rs).
            "virtio_blk",
            "ext4",
            // ext4 asks for it at every mount (no modprobe here to find it).
            "crc32c_generic",
        ],
    )?;
    let init = format!(
        "#!/bin/busybox sh\n/bin/busybox --install -s /bin\nmount -t proc proc /proc\nmount -t sysfs sys /sys\n\
         mount -t devtmpfs dev /dev\n{insmods}{disks}\
         addr=$(sed -n 's/.*vtrace.addr=\\([0-9.]*\\).*/\\1/p' /proc/cmdline)\n\
         ip link set lo up\nip link set eth0 up\nip addr add $addr/24 dev eth0\niperf3 -s -D\n\
         mkdir -p /www\necho 'It works!' > /www/index.html\nhttpd -p {http} -h /www\n\
         taskset -c $(( $(grep -c ^processor /proc/cpuinfo) - 1 )) redis-server --bind 0.0.0.0 --port 6379 --protected-mode no --save '' --appendonly no --daemonize yes\n\
         mount -t tracefs tracefs /sys/kernel/tracing\nmkdir -p /agent\n\
         mount -t 9p -o trans=virtio,version=9p2000.L,ro {tag} /agent 2>/dev/null\n\
         if [ -x /agent/vtrace ]; then /agent/vtrace agent --dir /tmp/vtrace-agent > /dev/console 2>&1 &\n\
           /agent/vtrace lab guest-shell > /dev/console 2>&1 & fi\n\
         echo vtrace-linuxvm-ready\nexec sleep 2147483647\n",
        http = HTTP_PORT,
        tag = AGENT_TAG,
        disks = super::disks::guest_init()
    );
    let init_path = tree.join("init");
    fs::write(&init_path, init).map_err(crate::error::io("write init"))?;
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&init_path, fs::Permissions::from_mode(0o755)).map_err(crate::error::io("chmod init"))?;
    pack(&tree, &out, true)?;
    let _ = fs::remove_dir_all(&tree);
    fs::write(&marker, INITRD_VERSION).map_err(crate::error::io("write initrd marker"))?;
    Ok(out)
}

/// `base` with vtrace's binary `exe` appended as /agent/vtrace, at `out`: a
/// second, uncompressed cpio archive after the gzipped one, which the
/// kernel unpacks over the first (it must start 4-byte aligned; the zeros
/// before it are skipped). Uncompressed, since inflating tens of MB under
/// nested TCG takes many seconds where copying them takes few.
pub(super) fn initramfs_with_agent(base: &Path, exe: &Path, out: &Path) -> Result<()> {
    use std::io::Write;
    let tree = out.with_extension("tree");
    let _ = fs::remove_dir_all(&tree);
    fs::create_dir_all(tree.join("agent")).map_err(crate::error::io("create the agent's tree"))?;
    let inside = tree.join("agent").join("vtrace");
    if fs::hard_link(exe, &inside).is_err() {
        fs::copy(exe, &inside).map_err(crate::error::io(format!("copy {}", exe.display())))?;
    }
    let archive = out.with_extension("cpio");
    pack(&tree, &archive, false)?;
    let _ = fs::remove_dir_all(&tree);
    let append = || -> std::io::Result<()> {
        let mut w = std::io::BufWriter::new(fs::File::create(out)?);
        let first = std::io::copy(&mut fs::File::open(base)?, &mut w)?;
        w.write_all(&vec![0u8; ((4 - first % 4) % 4) as usize])?;
        std::io::copy(&mut fs::File::open(&archive)?, &mut w)?;
        w.flush()
    };
    let done = append().map_err(crate::error::io(format!("write {}", out.display())));
    let _ = fs::remove_file(&archive);
    done
}

/// The kernel as an ELF vmlinux (what Firecracker loads), unpacked once from
/// the bzImage's compressed payload the way the kernel's
/// scripts/extract-vmlinux does: at each offset a compressor's magic
/// appears, the payload is handed to that compressor's own tool (the
/// kernel's xz stream uses the x86 BCJ filter, which only liblzma's tools
/// unpack), and the first output that is an ELF image wins.
pub(super) fn vmlinux() -> Result<PathBuf> {
    let _maker = super::lock::CacheLock::take("linuxvm-vmlinux")?;
    let (vmlinuz, _) = kernel()?;
    let out = dir().join("vmlinux");
    if out.exists() {
        return Ok(out);
    }
    let image = fs::read(&vmlinuz).map_err(crate::error::io(format!("read {}", vmlinuz.display())))?;
    const PAYLOADS: &[(&[u8], &str)] = &[
        (b"\xfd7zXZ\x00", "xz"),
        (b"\x02\x21\x4c\x18", "lz4"),
        (b"\x1f\x8b\x08", "gzip"),
        (b"\x28\xb5\x2f\xfd", "zstd"),
    ];
    let elf = PAYLOADS
        .iter()
        .flat_map(|(magic, tool)| {
            image
                .windows(magic.len())
                .enumerate()
                .filter(move |(_, w)| w == magic)
                .map(move |(at, _)| (at, *tool))
        })
        .find_map(|(at, tool)| unpack(tool, &image[at..]).filter(|b| b.starts_with(b"\x7fELF")))
        .ok_or_else(|| {
            unavailable(format!(
                "no ELF kernel found in {} (tried its xz, lz4, gzip and zstd payloads with those tools)",
                vmlinuz.display()
            ))
        })?;
    let tmp = out.with_extension("tmp");
    fs::write(&tmp, elf).map_err(crate::error::io(format!("write {}", tmp.display())))?;
    fs::rename(&tmp, &out).map_err(crate::error::io(format!("rename {}", tmp.display())))?;
    Ok(out)
}

/// `tool -dc` over `data`: what it wrote, whatever it said of the bytes
/// after the stream (the rest of the bzImage).
fn unpack(tool: &str, data: &[u8]) -> Option<Vec<u8>> {
    use std::io::Write;
    let mut child = Command::new(tool)
        .arg("-dc")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut stdin = child.stdin.take()?;
    let out = std::thread::scope(|s| {
        s.spawn(move || {
            let _ = stdin.write_all(data);
        });
        child.wait_with_output()
    })
    .ok()?;
    Some(out.stdout)
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

    fn ports(&self) -> &'static [u16] {
        LINUX_GUEST_PORTS
    }
}

fn up(p: &LabPlatform, ledger: &mut Ledger) -> Result<()> {
    let (_, guest_addr) = address(p);
    fs::create_dir_all(dir()).map_err(crate::error::io(format!("create {}", dir().display())))?;
    let (vmlinuz, _) = kernel()?;
    let initrd = initramfs()?;
    net::tap(ledger, p, TAP, None)?;
    let run = dir().join("run");
    ledger.add(Resource::Dir {
        path: run.display().to_string(),
    })?;
    fs::create_dir_all(&run).map_err(crate::error::io("create run dir"))?;
    let accel = accelerator();
    let mut qemu = Command::new("qemu-system-x86_64");
    qemu.args([
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
    .args([
        "-append",
        &format!("console=ttyS0 quiet panic=-1 {}", address_arg(&guest_addr)),
    ])
    .args([
        "-netdev",
        &format!("tap,id=n0,ifname={TAP},script=no,downscript=no,vhost=off"),
    ])
    .args(["-device", "virtio-net-pci,netdev=n0"]);
    start_daemon(qemu, &run, ledger).map_err(unavailable)?;
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

/// Starts `qemu` (its machine and devices given) as a daemon with its
/// console in `run`/console.log, recording its process in the ledger; Err:
/// why it did not start (its own words), or a ledger error.
pub(super) fn start_daemon(mut qemu: Command, run: &Path, ledger: &mut Ledger) -> std::result::Result<(), String> {
    let pidfile = run.join("qemu.pid");
    // Its pid is known only once it has daemonized: an `up` killed before
    // that leaves it running, found by its own pidfile argument.
    let pidfile_arg = format!("-pidfile {}", pidfile.display());
    ledger
        .add(Resource::Processes {
            pattern: pidfile_arg.clone(),
        })
        .map_err(|e| e.to_string())?;
    let status = qemu
        .args(["-display", "none", "-monitor", "none", "-no-reboot"])
        .args(["-serial", &format!("file:{}", run.join("console.log").display())])
        .args(["-daemonize", "-pidfile", &pidfile.display().to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot run qemu-system-x86_64: {e}"))?;
    let pid: Option<u32> = fs::read_to_string(&pidfile).ok().and_then(|s| s.trim().parse().ok());
    if let Some(pid) = pid {
        ledger
            .add(Resource::Process {
                pid,
                comm: "qemu-system-x86".into(),
            })
            .map_err(|e| e.to_string())?;
    }
    if !status.status.success() || pid.is_none() {
        return Err(format!(
            "qemu-system-x86_64 did not start: {}",
            String::from_utf8_lossy(&status.stderr).trim()
        ));
    }
    Ok(())
}
