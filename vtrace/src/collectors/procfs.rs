//! What /proc knows and the kernel maps do not: parent processes of threads
//! that predate the run, and guest time of vCPU threads on kernels where the
//! kvm_entry/kvm_exit tracepoints do not fire (tick-sampled, USER_HZ).

use std::{collections::HashMap, fs, os::unix::fs::MetadataExt, path::Path};

/// Fields of /proc/<pid>/task/<tid>/stat that vtrace uses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskStat {
    pub comm: String,
    pub ppid: u32,
    pub flags: u64,
    /// guest_time, in clock ticks.
    pub guest_ticks: u64,
}

/// Parses a stat line; comm may hold spaces and parentheses, so split at the last ')'.
pub fn parse_stat(line: &str) -> Option<TaskStat> {
    let open = line.find('(')?;
    let close = line.rfind(')')?;
    let comm = line.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = line.get(close + 1..)?.split_whitespace().collect();
    // rest[0] is field 3 (state); field N is rest[N - 3].
    let field = |n: usize| rest.get(n - 3).and_then(|v| v.parse::<u64>().ok());
    Some(TaskStat {
        comm,
        ppid: field(4)? as u32,
        flags: field(9)?,
        guest_ticks: field(43).unwrap_or(0),
    })
}

/// Every task on the system: (tgid, tid) -> stat.
pub fn scan_tasks() -> HashMap<(u32, u32), TaskStat> {
    let mut out = HashMap::new();
    let Ok(procs) = fs::read_dir("/proc") else { return out };
    for p in procs.flatten() {
        let Some(tgid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(tasks) = fs::read_dir(p.path().join("task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if let Some(st) = fs::read_to_string(t.path().join("stat"))
                .ok()
                .as_deref()
                .and_then(parse_stat)
            {
                out.insert((tgid, tid), st);
            }
        }
    }
    out
}

pub fn clock_ticks() -> u64 {
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as u64 } else { 100 }
}

/// cgroup v2 ids (directory inode numbers) of `path` and every cgroup below it.
pub fn cgroup_ids_under(path: &Path) -> Vec<u64> {
    let mut ids = Vec::new();
    let mut stack = vec![path.to_path_buf()];
    while let Some(dir) = stack.pop() {
        if let Ok(m) = fs::metadata(&dir) {
            ids.push(m.ino());
        }
        if let Ok(entries) = fs::read_dir(&dir) {
            stack.extend(
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
    }
    ids
}

/// Whether process (or thread) `pid` exists now (a zombie still does).
pub fn exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// The cgroup v2 mount point (unified hierarchy), pure or hybrid setups.
pub fn cgroup2_root() -> Option<String> {
    let mounts = fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(2) == Some(&"cgroup2")).then(|| f[1].to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_odd_comm() {
        // 52 fields; guest_time (43) = 77.
        let mut fields: Vec<String> = (3..=52).map(|n| n.to_string()).collect();
        fields[0] = "R".into();
        fields[4 - 3] = "1".into();
        fields[9 - 3] = "2097152".into();
        fields[43 - 3] = "77".into();
        let line = format!("123 (a (b) c) {}", fields.join(" "));
        let st = parse_stat(&line).unwrap();
        assert_eq!(
            st,
            TaskStat {
                comm: "a (b) c".into(),
                ppid: 1,
                flags: 2097152,
                guest_ticks: 77
            }
        );
    }
}
