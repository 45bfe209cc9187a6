//! Which threads the recording's selectors cover: `--pid` and the
//! command's process tree, `--comm`, `--cgroup`; and which are vtrace's own.

use std::{
    collections::{HashMap, HashSet},
    path::Path,
};

use vtrace_common::{ThreadTimes, thread_flag};

use super::collector::CpuSnapshot;
use crate::{
    collectors::procfs::{self, TaskStat},
    layers::Request,
    recording::Workload,
};

/// Which processes the selectors (and the command's process tree) cover.
pub struct Selection {
    /// Parent of each process (from /proc at start, from fork events after).
    pub(super) parent: HashMap<u32, u32>,
    tgids: HashSet<u32>,
    comms: Vec<String>,
    cgroup_ids: HashSet<u64>,
    own_tgid: u32,
    /// Embedded in another program: only threads of this name are vtrace's.
    own_comm: Option<&'static str>,
}

impl Selection {
    pub fn new(
        asked: &Request,
        own_comm: Option<&'static str>,
        workload: Option<&Workload>,
        at_start: &HashMap<(u32, u32), TaskStat>,
        snap: &CpuSnapshot,
    ) -> Self {
        // Parent of each process: from /proc for processes that predate the
        // run, from the fork tracepoint for the ones born during it.
        let mut parent: HashMap<u32, u32> = at_start.iter().map(|((tgid, _), s)| (*tgid, s.ppid)).collect();
        for (_, t) in &snap.threads {
            if t.flags & thread_flag::BORN_DURING_RUN != 0 && t.parent_tgid != t.tgid && t.tgid != 0 {
                parent.insert(t.tgid, t.parent_tgid);
            }
        }
        let roots: HashSet<u32> = asked.pids.iter().copied().chain(workload.map(|w| w.pid)).collect();
        let mut tgids = HashSet::new();
        for &tgid in parent.keys().chain(roots.iter()) {
            let mut cur = tgid;
            for _ in 0..64 {
                if roots.contains(&cur) {
                    tgids.insert(tgid);
                    break;
                }
                match parent.get(&cur) {
                    Some(&p) if p != 0 && p != cur => cur = p,
                    _ => break,
                }
            }
        }
        let cgroup_ids = match procfs::cgroup2_root() {
            Some(root) => asked
                .cgroups
                .iter()
                .flat_map(|c| {
                    let p = if c.is_absolute() && c.exists() {
                        c.clone()
                    } else {
                        Path::new(&root).join(c.strip_prefix("/").unwrap_or(c))
                    };
                    procfs::cgroup_ids_under(&p)
                })
                .collect(),
            None => HashSet::new(),
        };
        Selection {
            parent,
            tgids,
            comms: asked.comms.clone(),
            cgroup_ids,
            own_tgid: std::process::id(),
            own_comm,
        }
    }

    /// vtrace's own thread: any of its process on the command line, only
    /// its recorder's when embedded in the program it measures.
    /// vtrace's own threads, and the helpers it runs (`ip` reading a
    /// namespace's devices): children of vtrace that are not the workload.
    pub(super) fn is_vtrace(&self, t: &ThreadTimes, comm: &str) -> bool {
        let own = t.tgid == self.own_tgid && self.own_comm.is_none_or(|c| comm == c);
        let helper =
            self.own_comm.is_none() && self.parent.get(&t.tgid) == Some(&self.own_tgid) && !self.selects(t, comm);
        own || helper
    }

    pub(super) fn selects(&self, t: &ThreadTimes, comm: &str) -> bool {
        self.tgids.contains(&t.tgid) || self.comms.iter().any(|c| c == comm) || self.cgroup_ids.contains(&t.cgroup_id)
    }
}
