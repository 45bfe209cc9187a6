//! One `vtrace lab up` or `down` at a time per platform, and one maker at a
//! time of each cache the lab builds.

use std::{
    fs,
    path::{Path, PathBuf},
};

use super::{common::DATA_DIR, ledger::LEDGER_DIR};
use crate::{Error, Result};

/// One `vtrace lab up` or `down` at a time per platform: a second one is
/// refused, naming the first (flock: released when its holder exits, however
/// it exits). The lock file goes with the lock, so nothing stays behind.
pub(super) struct PlatformLock {
    path: PathBuf,
    _file: fs::File,
}

impl PlatformLock {
    pub(super) fn take(platform: &str) -> Result<PlatformLock> {
        use std::{
            io::Write,
            os::{fd::AsRawFd, unix::fs::MetadataExt},
        };
        let path = Path::new(LEDGER_DIR).join(format!("{platform}.lock"));
        loop {
            fs::create_dir_all(LEDGER_DIR).map_err(crate::error::io(format!("create {LEDGER_DIR}")))?;
            let mut file = match fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .open(&path)
            {
                Ok(f) => f,
                // Another platform's holder removed the directory meanwhile.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(crate::error::io(format!("open {}", path.display()))(e)),
            };
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
                return Err(Error::LabBusy {
                    platform: platform.into(),
                    holder: fs::read_to_string(&path).unwrap_or_default().trim().to_string(),
                });
            }
            // Opened just before its holder removed it: that file locks
            // nothing any more (a newcomer creates another), so again.
            let same_file = |m: fs::Metadata| file.metadata().is_ok_and(|f| f.ino() == m.ino() && f.dev() == m.dev());
            if !fs::metadata(&path).is_ok_and(same_file) {
                continue;
            }
            let _ = file.set_len(0);
            let _ = write!(file, "{}", std::process::id());
            return Ok(PlatformLock { path, _file: file });
        }
    }
}

impl Drop for PlatformLock {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
        let _ = fs::remove_dir(LEDGER_DIR); // only when nothing else is left there
    }
}

/// One maker at a time of a cache the lab builds in place under its data
/// directory (the Linux guests' initramfs and vmlinux, Kata's guest initrd,
/// the containers' rootfs): two test files run side by side, or two `lab
/// up`s, would otherwise build the same tree at once. A second maker waits
/// for the first (flock, released when its holder exits however it exits),
/// then finds the cache made. Take it before reading the cache's marker.
/// The lock file stays: it is empty, and removing it would let a newcomer
/// lock a new file while a waiter holds the old one.
pub(super) struct CacheLock {
    _file: fs::File,
}

impl CacheLock {
    pub(super) fn take(cache: &str) -> Result<CacheLock> {
        use std::os::fd::AsRawFd;
        fs::create_dir_all(DATA_DIR).map_err(crate::error::io(format!("create {DATA_DIR}")))?;
        let path = Path::new(DATA_DIR).join(format!(".{cache}.lock"));
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(crate::error::io(format!("open {}", path.display())))?;
        while unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(crate::error::io(format!("lock {}", path.display()))(e));
            }
        }
        Ok(CacheLock { _file: file })
    }
}
