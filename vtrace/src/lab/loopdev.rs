//! Loop devices, by the kernel's own ioctls (linux/loop.h): a file made a
//! block device for a lab VM's data disk (disks.rs), detached by the
//! ledger. No util-linux needed: busybox's losetup, where a guest has
//! only that, takes other options.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

// linux/loop.h
const LOOP_SET_FD: libc::c_ulong = 0x4C00;
const LOOP_CLR_FD: libc::c_ulong = 0x4C01;
const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;

/// Attaches `backing` to a free loop device (the loop module loaded where
/// it is one): its path. No util-linux needed (busybox's losetup differs).
pub(super) fn attach(backing: &fs::File) -> std::result::Result<PathBuf, String> {
    use std::os::fd::AsRawFd;
    if !Path::new("/dev/loop-control").exists() {
        let _ = Command::new("modprobe").arg("loop").output();
    }
    let control = fs::File::open("/dev/loop-control").map_err(|e| format!("/dev/loop-control: {e} (modprobe loop)"))?;
    // Another process may take the free device first: try again.
    for _ in 0..8 {
        let n = unsafe { libc::ioctl(control.as_raw_fd(), LOOP_CTL_GET_FREE) };
        if n < 0 {
            return Err(format!("no free loop device: {}", std::io::Error::last_os_error()));
        }
        let dev = PathBuf::from(format!("/dev/loop{n}"));
        // devtmpfs makes the node as the device appears.
        for _ in 0..50 {
            if dev.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let loop_dev = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&dev)
            .map_err(|e| format!("{}: {e}", dev.display()))?;
        if unsafe { libc::ioctl(loop_dev.as_raw_fd(), LOOP_SET_FD, backing.as_raw_fd()) } == 0 {
            return Ok(dev);
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EBUSY) {
            return Err(format!("{}: {e}", dev.display()));
        }
    }
    Err("every free loop device was taken first".into())
}

/// Detaches loop device `dev`.
pub(super) fn detach(dev: &str) {
    use std::os::fd::AsRawFd;
    if let Ok(f) = fs::File::open(dev) {
        unsafe { libc::ioctl(f.as_raw_fd(), LOOP_CLR_FD) };
    }
}

/// The file loop device `dev` is attached to (its sysfs `backing_file`).
pub(super) fn backing(dev: &str) -> Option<String> {
    let name = Path::new(dev).file_name()?.to_str()?;
    let b = fs::read_to_string(format!("/sys/block/{name}/loop/backing_file")).ok()?;
    Some(b.trim_end().to_string())
}
