//! The lab Linux VMs' disks: a data disk each, for the storage path (fio
//! against it in the guest), and one read-only tools disk they share,
//! which carries fio with its libraries (about 85 MB of them on Debian:
//! the initramfs stays lean, and Firecracker has no shared folder).
//!
//! The data disk is a loop device over a sparse file in the instance's run
//! directory: a real block device on the host, so the host's block layer
//! sees each request the VMM issues for it and `/sys/block/loopN/stat`
//! counts them (a user's own disk or file works the same way, without a
//! device where it is a plain file). The guest's /init finds the tools
//! disk by its label, mounts it at /tools and runs fio from it (`fio` on
//! its PATH), and links the other disk as [`GUEST_DATA_DISK`].

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use super::{
    common::DATA_DIR,
    ledger::{Ledger, Resource},
    rootfs,
};
use crate::{Error, Result};

/// The data disk inside a lab Linux guest (a link its /init makes).
pub const GUEST_DATA_DISK: &str = "/dev/vtrace-data";
/// The tools disk's ext4 label, by which the guest finds it.
pub const TOOLS_LABEL: &str = "vtrace-tools";
/// The data disk's size: room for fio's files (64 MiB by default).
const DATA_DISK_MIB: u64 = 256;
/// What the tools disk carries, with each one's libraries.
const TOOLS: &[&str] = &["fio"];
/// Bumped when the tools disk's contents change.
const TOOLS_VERSION: &str = "1";

fn unavailable(reason: String) -> Error {
    Error::LabUnavailable {
        platform: "linuxvm".into(),
        reason,
    }
}

/// The tools disk image, made once (ext4, `mkfs.ext4 -d`, no mount).
pub(super) fn tools_image() -> Result<PathBuf> {
    let _maker = super::lock::CacheLock::take("linuxvm-tools")?;
    let dir = Path::new(DATA_DIR).join("linuxvm");
    let image = dir.join("tools.ext4");
    let marker = tools_marker(&image);
    if image.exists() && fs::read_to_string(&marker).is_ok_and(|v| v == TOOLS_VERSION) {
        return Ok(image);
    }
    let tree = dir.join("tools-tree");
    let _ = fs::remove_dir_all(&tree);
    // The mount points fio needs inside its chroot.
    for d in ["bin", "dev", "proc", "sys", "tmp"] {
        fs::create_dir_all(tree.join(d)).map_err(crate::error::io(format!("create {d}")))?;
    }
    let mut bytes = 0u64;
    for tool in TOOLS {
        let bin = rootfs::find(tool)?;
        let files = std::iter::once(bin.clone()).chain(rootfs::libraries(&bin));
        for (i, file) in files.enumerate() {
            bytes += fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
            if i == 0 {
                fs::copy(&file, tree.join("bin").join(tool)).map_err(crate::error::io(format!("copy {tool}")))?;
            } else {
                rootfs::copy_into(&tree, &file)?;
            }
        }
    }
    // ext4's own room (inodes, journal) beside the files.
    let mib = bytes / (1 << 20) * 11 / 10 + 16;
    let _ = fs::remove_file(&image);
    let out = Command::new("mkfs.ext4")
        // Read-only, and mounted by a guest whose initramfs has no crc32c
        // module: no journal, no metadata checksums.
        .args(["-q", "-F", "-L", TOOLS_LABEL, "-O", "^has_journal,^metadata_csum", "-d"])
        .arg(&tree)
        .arg(&image)
        .arg(format!("{mib}M"))
        .output()
        .map_err(|e| unavailable(format!("mkfs.ext4 (e2fsprogs) could not run: {e}")))?;
    let _ = fs::remove_dir_all(&tree);
    if !out.status.success() {
        return Err(unavailable(format!(
            "mkfs.ext4 could not make the tools disk: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    fs::write(&marker, TOOLS_VERSION).map_err(crate::error::io("write tools marker"))?;
    Ok(image)
}

/// The tools disk's version marker beside it.
pub(super) fn tools_marker(image: &Path) -> PathBuf {
    image.with_file_name("tools.version")
}

/// A data disk for the instance whose run directory is `run`: a sparse
/// file there behind a loop device (detached by `down`); the device.
pub(super) fn data_disk(run: &Path, ledger: &mut Ledger) -> Result<PathBuf> {
    let file = run.join("disk.img");
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&file)
        .map_err(crate::error::io(format!("create {}", file.display())))?;
    f.set_len(DATA_DISK_MIB << 20)
        .map_err(crate::error::io(format!("size {}", file.display())))?;
    let dev = super::loopdev::attach(&f)
        .map_err(|why| unavailable(format!("no loop device for {}: {why}", file.display())))?;
    ledger.add(Resource::LoopDevice {
        dev: dev.display().to_string(),
        file: file.display().to_string(),
    })?;
    Ok(dev)
}

/// How QEMU's asynchronous I/O serves a disk: io_uring where its build
/// has it (linked with liburing) and the kernel allows it, else its
/// thread pool.
pub(super) fn qemu_aio() -> &'static str {
    let disabled = fs::read_to_string("/proc/sys/kernel/io_uring_disabled").is_ok_and(|v| v.trim() != "0");
    let linked = Command::new("sh")
        .args(["-c", "ldd \"$(command -v qemu-system-x86_64)\""])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("liburing"));
    if linked && !disabled { "io_uring" } else { "threads" }
}

/// The guest /init's lines that mount the tools disk and name the data
/// disk. Busybox here has no blkid: the label is read where ext4 keeps it
/// (the superblock at 1024, its volume name 0x78 into it).
pub(super) fn guest_init() -> String {
    let len = TOOLS_LABEL.len();
    format!(
        "tools=\nfor d in /dev/vd?; do [ \"$(dd if=$d bs=1 skip=1144 count={len} 2>/dev/null)\" = {TOOLS_LABEL} ] && tools=$d; done\n\
         if [ -n \"$tools\" ]; then mkdir -p /tools && mount -t ext4 -o ro $tools /tools && \
         for d in dev proc sys; do mount --bind /$d /tools/$d; done; mount -t tmpfs tmpfs /tools/tmp\n\
           printf '#!/bin/sh\\nexec chroot /tools /bin/fio \"$@\"\\n' > /bin/fio; chmod +x /bin/fio\n\
           for d in /dev/vd?; do [ $d = $tools ] || {{ ln -sf $d {GUEST_DATA_DISK}; break; }}; done\n\
         fi\n"
    )
}
