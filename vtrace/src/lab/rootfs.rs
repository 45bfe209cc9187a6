//! A minimal root filesystem for lab containers: busybox, redis-server,
//! iperf3, fio and (where installed) Node.js with the shared libraries
//! `ldd` names. Built once and shared
//! read-only (the lower layer of each container's overlayfs).

use std::{
    fs,
    os::unix::fs::{PermissionsExt, symlink},
    path::{Path, PathBuf},
    process::Command,
};

use super::common::DATA_DIR;
use crate::{Error, Result};

const BINARIES: &[&str] = &["busybox", "redis-server", "iperf3", "fio"];
/// Copied when the host has them (the module-load workload needs node).
const OPTIONAL: &[&str] = &["node"];
/// Bumped when the contents change, so an old cached tree is rebuilt.
const VERSION: &str = "3";

pub fn path() -> PathBuf {
    Path::new(DATA_DIR).join("rootfs")
}

pub(super) fn find(binary: &str) -> Result<PathBuf> {
    ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
        .iter()
        .map(|d| Path::new(d).join(binary))
        .find(|p| p.is_file())
        .ok_or_else(|| Error::LabUnavailable {
            platform: "rootfs".into(),
            reason: format!("{binary} not found (run scripts/setup.sh)"),
        })
}

/// Shared libraries a binary loads, from `ldd`.
pub(super) fn libraries(binary: &Path) -> Vec<PathBuf> {
    let out = Command::new("ldd")
        .arg(binary)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    out.lines()
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with('/')).map(PathBuf::from))
        .collect()
}

pub(super) fn copy_into(root: &Path, file: &Path) -> Result<()> {
    let dest = root.join(file.strip_prefix("/").unwrap_or(file));
    if let Some(dir) = dest.parent() {
        fs::create_dir_all(dir).map_err(crate::error::io(format!("create {}", dir.display())))?;
    }
    fs::copy(file, &dest).map_err(crate::error::io(format!("copy {}", file.display())))?;
    Ok(())
}

/// Builds the tree if it is missing or stale; returns its path.
pub fn ensure() -> Result<PathBuf> {
    let _maker = super::lock::CacheLock::take("rootfs")?;
    let root = path();
    let marker = root.join(".vtrace-rootfs");
    if fs::read_to_string(&marker).is_ok_and(|v| v == VERSION) {
        return Ok(root);
    }
    let _ = fs::remove_dir_all(&root);
    for dir in ["bin", "usr/bin", "etc", "proc", "sys", "dev", "tmp", "data", "root"] {
        fs::create_dir_all(root.join(dir)).map_err(crate::error::io(format!("create {}", root.join(dir).display())))?;
    }
    let optional = OPTIONAL.iter().filter_map(|b| find(b).ok().map(|p| (*b, p)));
    let required = BINARIES.iter().map(|b| find(b).map(|p| (*b, p)));
    for found in required.chain(optional.map(Ok)) {
        let (b, bin) = found?;
        fs::copy(&bin, root.join("bin").join(b)).map_err(crate::error::io(format!("copy {}", bin.display())))?;
        for lib in libraries(&bin) {
            copy_into(&root, &lib)?;
        }
    }
    for applet in ["sh", "ls", "cat", "ps", "sleep", "ip", "ifconfig", "hostname"] {
        let _ = symlink("busybox", root.join("bin").join(applet));
    }
    fs::write(root.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n").map_err(crate::error::io("write passwd"))?;
    fs::write(root.join("etc/group"), "root:x:0:\n").map_err(crate::error::io("write group"))?;
    fs::set_permissions(root.join("tmp"), fs::Permissions::from_mode(0o1777)).map_err(crate::error::io("chmod tmp"))?;
    fs::write(&marker, VERSION).map_err(crate::error::io("write rootfs marker"))?;
    Ok(root)
}
