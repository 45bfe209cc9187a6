//! One `vtrace lab up` or `down` at a time per platform.

use std::{
    fs,
    path::{Path, PathBuf},
};

use super::ledger::LEDGER_DIR;
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
