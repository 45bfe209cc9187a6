//! Load beside a bench's workload: busy loops (`--stress N`) and a noisy
//! neighbour writing to the same disk from a cgroup of its own (`--neighbour`).

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use crate::lab;

/// Busy loops beside the workload (`--stress N`), stopped when dropped:
/// forked processes named `platforms::STRESSOR_COMM`, so their CPU shows
/// under the role `stress` and stays out of the cost per operation.
pub(super) struct Stressors(Vec<libc::pid_t>);

impl Stressors {
    pub(super) fn start(n: u32) -> std::io::Result<Stressors> {
        let name = std::ffi::CString::new(crate::platforms::STRESSOR_COMM).expect("no NUL");
        let mut pids = Stressors(Vec::new());
        for _ in 0..n {
            match unsafe { libc::fork() } {
                -1 => return Err(std::io::Error::last_os_error()),
                0 => {
                    // The child: only async-signal-safe calls after a fork.
                    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
                    loop {
                        std::hint::spin_loop();
                    }
                }
                pid => pids.0.push(pid),
            }
        }
        Ok(pids)
    }
}

impl Drop for Stressors {
    fn drop(&mut self) {
        for &pid in &self.0 {
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
        }
    }
}

/// The file in a `+neighbour` cell's directory that holds its neighbours'
/// cgroup ids, one line per run (a new cgroup each time).
pub const NEIGHBOUR_CGROUP: &str = "neighbour.cgroup";

/// A noisy neighbour (`--neighbour`): fio writing a large file on the lab's
/// disk with direct 1 MiB writes, from a cgroup of its own (so its requests
/// are told apart from the instance's), stopped and removed when dropped.
pub(super) struct Neighbour {
    child: std::process::Child,
    cgroup: PathBuf,
    file: PathBuf,
}

impl Neighbour {
    const NAME: &str = "vtrace-neighbour";

    /// Starts it; its cgroup's id (what block rows name it by) is added to
    /// `cell_dir/NEIGHBOUR_CGROUP` for the report.
    pub(super) fn start(seconds: u32, cell_dir: &Path) -> std::io::Result<Neighbour> {
        // The cgroup v2 hierarchy (block requests carry its ids): on its
        // own, or beside v1 controllers as `unified`.
        let unified = Path::new("/sys/fs/cgroup/unified");
        let root = if unified.join("cgroup.procs").is_file() {
            unified
        } else {
            Path::new("/sys/fs/cgroup")
        };
        let cgroup = root.join(Self::NAME);
        std::fs::create_dir_all(&cgroup)?;
        // A cgroup v2 id is its directory's inode number.
        let id = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&cgroup)?);
        let mut ids = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(cell_dir.join(NEIGHBOUR_CGROUP))?;
        std::io::Write::write_all(&mut ids, format!("{id}\n").as_bytes())?;
        std::fs::create_dir_all(lab::DATA_DIR)?;
        let file = Path::new(lab::DATA_DIR).join("fio-neighbour.dat");
        let child = std::process::Command::new("fio")
            .args([
                "--name=neighbour",
                "--rw=write",
                "--bs=1M",
                "--size=512M",
                "--direct=1",
                "--time_based",
            ])
            .arg(format!("--runtime={}", seconds * 4 + 30))
            .arg(format!("--filename={}", file.display()))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()?;
        // Into its cgroup at once: it lays its file out before it writes.
        std::fs::write(cgroup.join("cgroup.procs"), child.id().to_string())?;
        // fio lays the file out first: let the writes begin.
        std::thread::sleep(Duration::from_secs(2));
        Ok(Neighbour { child, cgroup, file })
    }
}

impl Drop for Neighbour {
    fn drop(&mut self) {
        // fio runs its job in a process of its own: every process of the
        // cgroup goes (cgroup.kill where the kernel has it).
        if std::fs::write(self.cgroup.join("cgroup.kill"), "1").is_err() {
            for pid in std::fs::read_to_string(self.cgroup.join("cgroup.procs"))
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.trim().parse::<i32>().ok())
            {
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::fs::read_to_string(self.cgroup.join("cgroup.procs")).is_ok_and(|p| !p.trim().is_empty())
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = std::fs::remove_file(&self.file);
        let _ = std::fs::remove_dir(&self.cgroup);
    }
}
