//! Reads the run-queue layer's maps (vtrace-ebpf/src/runq.rs) and makes its
//! rows, attributed through the CPU layer's threads.

use std::collections::BTreeMap;

use aya::{
    Ebpf,
    maps::{HashMap, MapData, PerCpuArray},
};
use vtrace_common::{FINE_BUCKETS, RunqStats, fine_bucket_range};

use super::tables::{RunqHistRow, RunqRow};
use crate::{
    Result,
    collectors::{batch::BatchReader, maps::take},
    layers::cpu::{ThreadIndex, ThreadRow},
};

/// The waits of every thread, with the longest of each.
#[derive(Default)]
pub struct RunqSnapshot {
    pub threads: BTreeMap<u32, RunqStats>,
    pub drops: u64,
}

pub struct RunqMaps {
    stats: HashMap<MapData, u32, RunqStats>,
    /// The same, read whole at each snapshot (a few calls, not two a thread).
    stats_whole: BatchReader<u32, RunqStats>,
    drops: PerCpuArray<MapData, u64>,
}

impl RunqMaps {
    pub fn new(ebpf: &mut Ebpf) -> Result<Self> {
        Ok(RunqMaps {
            stats_whole: BatchReader::of(ebpf, "RUNQ_STATS")?,
            stats: take(ebpf, "RUNQ_STATS")?,
            drops: take(ebpf, "RUNQ_DROPS")?,
        })
    }

    pub fn snapshot(&self) -> Result<RunqSnapshot> {
        let mut snap = RunqSnapshot::default();
        for (tid, s) in self.stats_whole.read()? {
            snap.threads.insert(tid, s[0]);
        }
        snap.drops = self.drops.get(&0, 0).map(|v| v.iter().sum()).unwrap_or(0);
        Ok(snap)
    }

    /// `vtrace serve`, once `seen` was read: the entries of threads that
    /// have exited since, and not waited after `seen` (a dead thread waits
    /// no more), leave the kernel's map and `seen`. Their waits are in the
    /// series already; kept, a host's short-lived processes would fill the
    /// map (8192 threads) and every later thread's waits would be dropped.
    pub fn forget_exited(&mut self, seen: &mut RunqSnapshot) {
        let exited: Vec<u32> = seen
            .threads
            .keys()
            .copied()
            .filter(|tid| !std::path::Path::new(&format!("/proc/{tid}")).exists())
            .collect();
        for tid in exited {
            let read = seen.threads[&tid].hist.count;
            match self.stats.get(&tid, 0) {
                // (its last waits, after `seen`: the next read takes them)
                Ok(now) if now.hist.count != read => continue,
                Ok(_) => {
                    let _ = self.stats.remove(&tid);
                }
                Err(_) => {}
            }
            seen.threads.remove(&tid);
        }
    }
}

/// The runq and runq_hists rows of the final snapshot.
pub fn rows(snap: &RunqSnapshot, threads: &[ThreadRow], start_mono: u64) -> (Vec<RunqRow>, Vec<RunqHistRow>) {
    let index = ThreadIndex::new(threads);
    let mut rows = Vec::new();
    let mut hists = Vec::new();
    for (&tid, stats) in &snap.threads {
        let (h, worst) = (&stats.hist, stats.worst);
        if h.count == 0 {
            continue;
        }
        rows.push(RunqRow {
            tid,
            // A thread the CPU layer has no row for is named from /proc, owned by no instance.
            owner: index.thread_owner(tid),
            waits: h.count,
            delay_ns: h.sum_ns,
            min_ns: h.min_ns,
            max_ns: h.max_ns,
            worst_cpu: worst.cpu,
            worst_at_ns: worst.at_ns.saturating_sub(start_mono),
            worst_prev_tid: worst.prev_tid,
            worst_prev_comm: match worst.prev_tid {
                0 => "idle".into(),
                prev => index.identity(prev).1,
            },
        });
        for (i, &count) in h.buckets.iter().enumerate().take(FINE_BUCKETS) {
            if count > 0 {
                let (lo_ns, hi_ns) = fine_bucket_range(i);
                hists.push(RunqHistRow {
                    tid,
                    lo_ns,
                    hi_ns,
                    count,
                });
            }
        }
    }
    (rows, hists)
}
