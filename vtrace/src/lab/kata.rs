//! What the `kata` platform (containerd.rs) needs of Kata Containers: where
//! it is installed, and for a bare build its guest and configuration.
//!
//! Kata comes from `$VTRACE_KATA_DIR`, else the directory of
//! `containerd-shim-kata-v2` on PATH, else /opt/kata/bin. A directory laid
//! out like ../shared/vmm/kata (the shim beside `kata-agent`, `virtiofsd`
//! and `configuration-qemu.toml`) gets its guest made here: the lab's
//! stock kernel and an initrd of kata-agent and the modules it needs
//! ([`guest_initrd`]). Any other install runs with its own configuration,
//! or the one `$VTRACE_KATA_CONFIG` names (given to the shim as the task's
//! ConfigPath option, as Kubernetes' RuntimeClass options do).
//!
//! Like the other VM platforms it needs a KVM that boots guests; on a PVM
//! host it runs one level down (tests/tests/kata.rs).

use std::{
    fs,
    path::{Path, PathBuf},
};

use super::{common::DATA_DIR, linuxvm, rootfs};
use crate::{Error, Result};

/// Names the directory of the Kata install.
pub const KATA_DIR_ENV: &str = "VTRACE_KATA_DIR";
/// Names the Kata configuration file (else the lab's own or the install's).
pub const KATA_CONFIG_ENV: &str = "VTRACE_KATA_CONFIG";
const SHIM: &str = "containerd-shim-kata-v2";
/// Modules the Kata guest loads before its agent can talk (virtio-pci,
/// vsock, virtio-net, virtio-fs, the console, virtio-blk, overlayfs).
const GUEST_MODULES: &[&str] = &[
    "virtio_pci",
    "virtio_net",
    "vmw_vsock_virtio_transport",
    "virtiofs",
    "virtio_console",
    "virtio_blk",
    "overlay",
];
/// Bumped when the guest initrd's contents change.
const INITRD_VERSION: &str = "1";

pub(super) fn unavailable(reason: String) -> Error {
    Error::LabUnavailable {
        platform: "kata".into(),
        reason,
    }
}

fn dir() -> PathBuf {
    Path::new(DATA_DIR).join("kata")
}

/// Where the Kata install is: the shim's directory.
pub fn install_dir() -> std::result::Result<PathBuf, String> {
    if let Some(d) = std::env::var_os(KATA_DIR_ENV) {
        let d = PathBuf::from(d);
        return if d.join(SHIM).is_file() {
            Ok(d)
        } else {
            Err(format!("{KATA_DIR_ENV}={} holds no {SHIM}", d.display()))
        };
    }
    super::common::find_binary(SHIM, &["/opt/kata/bin"])
        .and_then(|shim| shim.parent().map(Path::to_path_buf))
        .ok_or_else(|| {
            format!("no {SHIM}: install Kata Containers (on PATH or in /opt/kata/bin) or name its directory with {KATA_DIR_ENV}=DIR")
        })
}

/// Whether `dir` is a bare build like ../shared/vmm/kata, whose guest the
/// lab makes (no Kata image or guest kernel comes with it).
fn is_bare_build(dir: &Path) -> bool {
    dir.join("kata-agent").is_file() && dir.join("configuration-qemu.toml").is_file()
}

/// What marks a vtrace binary the guest carries: its GNU build id (a copy
/// keeps it where it loses the file's time), else its size.
fn build_id(exe: &Path) -> String {
    use object::Object;
    let data = fs::read(exe).unwrap_or_default();
    match object::File::parse(&*data)
        .ok()
        .and_then(|f| f.build_id().ok().flatten().map(<[u8]>::to_vec))
    {
        Some(id) => id.iter().map(|b| format!("{b:02x}")).collect(),
        None => format!("size {}", data.len()),
    }
}

/// The guest initrd for a bare build: busybox, kata-agent with its
/// libraries and [`GUEST_MODULES`] of the lab's kernel; /init loads them,
/// sends its output to the console the shim reads (/dev/hvc0) and execs
/// the agent as PID 1. With `vtrace` (the lab's Linux guests carry it by
/// default: vms::agent_binary) it also starts `vtrace agent` on vsock port
/// 1025, beside kata-agent's 1024, once kata-agent has mounted /proc and
/// /sys. Made once per pair of agents (kata-agent's size and time and
/// vtrace's build id mark it).
pub fn guest_initrd(kata_dir: &Path, vtrace: Option<&Path>) -> Result<PathBuf> {
    let agent = kata_dir.join("kata-agent");
    let meta = fs::metadata(&agent).map_err(crate::error::io(format!("read {}", agent.display())))?;
    // Whole seconds: a copy through cpio (one level down) keeps no more.
    let stamp = format!(
        "{INITRD_VERSION} {} {} {}",
        meta.len(),
        meta.modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs()),
        vtrace.map_or("no vtrace".into(), build_id)
    );
    // One file each way: a bench that leaves the agent out (VTRACE_LAB_AGENT=0)
    // boots the smaller one.
    let out = dir().join(if vtrace.is_some() {
        "kata-initrd-agent.cpio"
    } else {
        "kata-initrd.cpio"
    });
    // Both files are made in one tree.
    let _maker = super::lock::CacheLock::take("kata-initrd")?;
    let marker = out.with_extension("version");
    if out.exists() && fs::read_to_string(&marker).is_ok_and(|v| v == stamp) {
        return Ok(out);
    }
    let (_, modules) = linuxvm::kernel()?;
    let tree = dir().join("initrd-tree");
    let _ = fs::remove_dir_all(&tree);
    for d in ["bin", "usr/bin", "proc", "sys", "dev", "run", "tmp", "etc"] {
        fs::create_dir_all(tree.join(d)).map_err(crate::error::io(format!("create {d}")))?;
    }
    let busybox = rootfs::find("busybox")?;
    let mut binaries = vec![
        (busybox.as_path(), "bin/busybox"),
        (agent.as_path(), "usr/bin/kata-agent"),
    ];
    binaries.extend(vtrace.map(|v| (v, "usr/bin/vtrace")));
    for (bin, dest) in binaries {
        fs::copy(bin, tree.join(dest)).map_err(crate::error::io(format!("copy {}", bin.display())))?;
        for lib in rootfs::libraries(bin) {
            rootfs::copy_into(&tree, &lib)?;
        }
    }
    for applet in ["sh", "insmod", "mount", "umount", "cat", "sleep"] {
        std::os::unix::fs::symlink("busybox", tree.join("bin").join(applet))
            .map_err(crate::error::io(format!("link {applet}")))?;
    }
    fs::write(tree.join("etc/hostname"), "kata\n").map_err(crate::error::io("write hostname"))?;
    let insmods = linuxvm::install_modules(&tree, &modules, GUEST_MODULES)?;
    let init = format!(
        "#!/bin/sh\nmount -t proc proc /proc\n{insmods}umount /proc\n\
         mount -t devtmpfs dev /dev 2>/dev/null; [ -c /dev/hvc0 ] && exec >/dev/hvc0 2>&1\n\
         {vtrace_agent}echo 'init: modules loaded, starting kata-agent'\nexec /usr/bin/kata-agent\n",
        vtrace_agent = if vtrace.is_some() {
            "(while [ ! -d /sys/kernel/tracing ]; do sleep 1; done; mount -t tracefs tracefs /sys/kernel/tracing; \
             exec /usr/bin/vtrace agent --dir /tmp/vtrace-agent) &\n"
        } else {
            ""
        }
    );
    let init_path = tree.join("init");
    fs::write(&init_path, init).map_err(crate::error::io("write init"))?;
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&init_path, fs::Permissions::from_mode(0o755)).map_err(crate::error::io("chmod init"))?;
    linuxvm::pack(&tree, &out, false)?;
    let _ = fs::remove_dir_all(&tree);
    fs::write(&marker, stamp).map_err(crate::error::io("write initrd marker"))?;
    Ok(out)
}

/// What a bare build needs copied to run one level down: the guest initrd
/// (carrying `vtrace` as its agent, the binary that will run `lab up` there)
/// and its marker, at the same paths (made here, where `ldd` is).
pub fn guest_files(kata_dir: &Path, vtrace: Option<&Path>) -> Result<Vec<(PathBuf, PathBuf)>> {
    let initrd = guest_initrd(kata_dir, vtrace)?;
    let marker = initrd.with_extension("version");
    Ok([initrd, marker].into_iter().map(|p| (p.clone(), p)).collect())
}

/// The configuration a bare build runs with: its configuration-qemu.toml
/// with the lab's kernel, the guest initrd, the build's virtiofsd and IPv6
/// off in the guest.
fn bare_config(kata_dir: &Path, run: &Path) -> Result<PathBuf> {
    let (vmlinuz, _) = linuxvm::kernel()?;
    let initrd = guest_initrd(kata_dir, super::vms::agent_binary().ok().as_deref())?;
    let virtiofsd = [kata_dir.join("virtiofsd"), PathBuf::from("/usr/libexec/virtiofsd")]
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| unavailable(format!("no virtiofsd in {} or /usr/libexec", kata_dir.display())))?;
    let source = kata_dir.join("configuration-qemu.toml");
    let text = fs::read_to_string(&source).map_err(crate::error::io(format!("read {}", source.display())))?;
    let set = |line: &str| -> Option<String> {
        let key = line.split('=').next()?.trim();
        Some(match key {
            "kernel" => format!("kernel = \"{}\"", vmlinuz.display()),
            "initrd" => format!("initrd = \"{}\"", initrd.display()),
            "image" => String::new(),
            "virtio_fs_daemon" => format!("virtio_fs_daemon = \"{}\"", virtiofsd.display()),
            "valid_virtio_fs_daemon_paths" => format!("valid_virtio_fs_daemon_paths = [\"{}\"]", virtiofsd.display()),
            // IPv4 only, as every lab link: the guest's router solicitations
            // and MLD reports would be frames the lab's veth drops.
            "kernel_params" => {
                let value = line.split_once('=')?.1.trim().trim_matches('"');
                format!("kernel_params = \"{value} ipv6.disable_ipv6=1\"")
            }
            _ => return None,
        })
    };
    let config: Vec<String> = text
        .lines()
        .map(|l| if l.starts_with('#') { None } else { set(l) }.unwrap_or_else(|| l.to_string()))
        .collect();
    let out = run.join("configuration.toml");
    fs::write(&out, config.join("\n")).map_err(crate::error::io(format!("write {}", out.display())))?;
    Ok(out)
}

/// The configuration the shim is given, if any: `$VTRACE_KATA_CONFIG`, or
/// a bare build's (written to `run`); None: the install's own.
pub(super) fn config(kata_dir: &Path, run: &Path) -> Result<Option<PathBuf>> {
    Ok(match std::env::var_os(KATA_CONFIG_ENV) {
        Some(c) => Some(PathBuf::from(c)),
        None if is_bare_build(kata_dir) => Some(bare_config(kata_dir, run)?),
        None => None,
    })
}
