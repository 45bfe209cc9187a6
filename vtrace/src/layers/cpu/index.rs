//! How every layer names what it counted after the threads table: one
//! lookup by thread, process or cgroup.

use std::collections::HashMap;

use super::ThreadRow;
use crate::recording::Owner;

/// Where a thread the threads table may not know sits: as the table
/// says, else on the host, in no instance, with role `other`.
fn place(row: Option<&ThreadRow>, pid: u32, comm: String) -> Owner {
    match row {
        Some(t) => Owner {
            pid,
            comm,
            ..t.owner.clone()
        },
        None => Owner {
            pid,
            comm,
            platform: crate::platforms::HOST.to_string(),
            instance: String::new(),
            role: "other".to_string(),
        },
    }
}

/// The recorded threads by tid, by process and by cgroup: how every layer's
/// rows name what they counted (pid, comm, platform, instance, role) the way
/// the threads table does, with one lookup. The cgroup index serves work
/// the kernel does on a task's behalf and charges to its cgroup (block I/O
/// submitted by a container, say).
pub struct ThreadIndex<'a> {
    by_tid: HashMap<u32, &'a ThreadRow>,
    /// By tid and fork: each thread of a tid reused while recording.
    by_incarnation: HashMap<(u32, u64), &'a ThreadRow>,
    by_pid: HashMap<u32, &'a ThreadRow>,
    by_cgroup: HashMap<u64, &'a ThreadRow>,
}

impl<'a> ThreadIndex<'a> {
    pub fn new(threads: &'a [ThreadRow]) -> Self {
        let mut by_pid: HashMap<u32, &'a ThreadRow> = HashMap::new();
        for t in threads {
            let e = by_pid.entry(t.owner.pid).or_insert(t);
            if t.tid == t.owner.pid {
                *e = t;
            }
        }
        // A cgroup is named after a process in it: one a platform instance
        // claims first, then the lowest pid (stable across reports). One
        // whose processes sit in different instances (or some in none) is
        // no instance's: a VM started from a shell shares the shell's
        // cgroup with every other process of the session.
        let mut by_cgroup: HashMap<u64, &'a ThreadRow> = HashMap::new();
        let mut shared: Vec<u64> = Vec::new();
        for t in by_pid.values().filter(|t| t.cgroup_id != 0) {
            let e = by_cgroup.entry(t.cgroup_id).or_insert(t);
            if e.owner.instance != t.owner.instance {
                shared.push(t.cgroup_id);
            }
            if (t.owner.instance.is_empty(), t.owner.pid) < (e.owner.instance.is_empty(), e.owner.pid) {
                *e = t;
            }
        }
        for id in shared {
            by_cgroup.remove(&id);
        }
        ThreadIndex {
            by_tid: threads.iter().map(|t| (t.tid, t)).collect(),
            by_incarnation: threads.iter().map(|t| ((t.tid, t.born_ns), t)).collect(),
            by_pid,
            by_cgroup,
        }
    }

    /// A thread's process and name: as recorded, else from /proc while it
    /// lives (a thread the CPU engine has no row for: on this repository's
    /// PVM guest some threads' switch-outs are never reported); (0, "")
    /// once gone.
    pub fn identity(&self, tid: u32) -> (u32, String) {
        if let Some(t) = self.thread(tid) {
            return (t.owner.pid, t.owner.comm.clone());
        }
        let status = std::fs::read_to_string(format!("/proc/{tid}/status")).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_string())
        };
        (
            field("Tgid:").and_then(|v| v.parse().ok()).unwrap_or(0),
            field("Name:").unwrap_or_default(),
        )
    }

    /// Who a thread's rows belong to, as the threads table names it (see
    /// [`Self::identity`] for one it lacks).
    pub fn thread_owner(&self, tid: u32) -> Owner {
        let (pid, comm) = self.identity(tid);
        place(self.thread(tid), pid, comm)
    }

    /// Who a process's rows belong to: its pid and name, and where its main
    /// thread sits (see [`Self::process`]).
    pub fn process_owner(&self, pid: u32) -> Owner {
        place(self.process(pid), pid, self.process_comm(pid))
    }

    /// Who a cgroup's rows belong to: process `pid`'s own where it is
    /// recorded in that cgroup (it did the work itself); else process `pid`
    /// by name, placed where the process that names the cgroup sits (work
    /// the kernel charges to the cgroup, done on behalf of its tasks).
    pub fn cgroup_owner(&self, id: u64, pid: u32) -> Owner {
        match self.process(pid) {
            Some(p) if p.cgroup_id == id => self.process_owner(pid),
            _ => place(self.cgroup(id), pid, self.process_comm(pid)),
        }
    }

    /// The process that names cgroup `id` (see [`ThreadIndex`]).
    pub fn cgroup(&self, id: u64) -> Option<&'a ThreadRow> {
        self.by_cgroup.get(&id).copied()
    }

    pub fn thread(&self, tid: u32) -> Option<&'a ThreadRow> {
        self.by_tid.get(&tid).copied()
    }

    /// The thread an interval row is of (its tid and fork: a tid reused
    /// while recording is two threads); by tid alone for intervals written
    /// before they carried the fork.
    pub fn interval_thread(&self, tid: u32, born_ns: u64) -> Option<&'a ThreadRow> {
        self.by_incarnation
            .get(&(tid, born_ns))
            .copied()
            .or_else(|| self.thread(tid))
    }

    /// A process's main thread, or another of its threads when the main one was not recorded.
    pub fn process(&self, pid: u32) -> Option<&'a ThreadRow> {
        self.by_pid.get(&pid).copied()
    }

    /// A process's name: as recorded, else from /proc while it lives
    /// (a process that never ran on a CPU the engine saw); empty once gone.
    pub fn process_comm(&self, pid: u32) -> String {
        self.process(pid).map_or_else(
            || {
                std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .map(|c| c.trim().to_string())
                    .unwrap_or_default()
            },
            |t| t.owner.comm.clone(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread(tid: u32, pid: u32, cgroup_id: u64, instance: &str) -> ThreadRow {
        ThreadRow {
            tid,
            owner: Owner {
                pid,
                comm: format!("t{tid}"),
                instance: instance.into(),
                ..Default::default()
            },
            cgroup_id,
            ..Default::default()
        }
    }

    #[test]
    fn one_lookup_by_thread_process_and_cgroup() {
        let threads = vec![
            thread(10, 10, 7, ""),
            thread(11, 10, 7, ""),
            thread(30, 30, 7, "runc:30"),
            thread(31, 30, 7, "runc:30"),
            thread(20, 20, 8, ""),
            thread(5, 5, 0, ""),
            thread(41, 41, 6, "runc:40"),
            thread(40, 40, 6, "runc:40"),
        ];
        let index = ThreadIndex::new(&threads);
        assert_eq!(index.thread(31).map(|t| t.tid), Some(31));
        assert_eq!(
            index.process(10).map(|t| t.tid),
            Some(10),
            "the main thread names a process"
        );
        // A claimed process names its cgroup before a lower pid of the
        // same instance; a cgroup of an instance's and the host's processes
        // (a VM started from a shell) is no one's.
        assert_eq!(index.cgroup(6).map(|t| t.owner.pid), Some(40));
        assert_eq!(index.cgroup(8).map(|t| t.owner.pid), Some(20));
        assert!(index.cgroup(7).is_none() && index.cgroup(0).is_none() && index.cgroup(9).is_none());
        // A recorded process's own work is its own, whatever else shares
        // its cgroup; work charged to a cgroup by a process not recorded
        // is the cgroup's instance's, where it has one.
        assert_eq!(index.cgroup_owner(7, 10).instance, "");
        assert_eq!(index.cgroup_owner(7, 30).instance, "runc:30");
        assert_eq!(index.cgroup_owner(7, 99).instance, "");
        assert_eq!(index.cgroup_owner(6, 99).instance, "runc:40");
        assert_eq!(index.cgroup_owner(6, 99).pid, 99);
    }
}
