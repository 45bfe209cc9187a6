//! Reads the block layer's maps (vtrace-ebpf/src/block.rs) and the devices'
//! own counters, and makes its rows.

use std::collections::{BTreeMap, HashMap};

use aya::{
    Ebpf,
    maps::{HashMap as BpfHashMap, MapData, PerCpuArray, PerCpuHashMap},
};
use vtrace_common::{BLOCK_BUCKETS, BlockInflight, BlockKey, BlockPending, BlockStats, block_op, log2_index};

use super::tables::{BlockDeviceRow, BlockHistRow, BlockRow};
use crate::recording::Owner;
use crate::{
    Result,
    collectors::maps::{Counters, EndedProcesses, counters, delta, sum_per_cpu, take},
    layers::cpu::ThreadIndex,
    layers::cpu::ThreadRow,
};

counters!(BlockStats { requests, bytes, queued, queue_ns, device_ns } [queue_hist, device_hist, size_hist]);

pub struct BlockMaps {
    stats: PerCpuHashMap<MapData, BlockKey, BlockStats>,
    pending: BpfHashMap<MapData, u64, BlockPending>,
    drops: PerCpuArray<MapData, u64>,
    inflight: BpfHashMap<MapData, u32, BlockInflight>,
    /// Pending entries whose completion went unseen, by address and issue
    /// time, while they stay (see [`BlockMaps::recover_unseen`]).
    unseen: HashMap<(u64, u64), BlockPending>,
    /// `block.unseen_completions` as last reported (it never falls).
    unseen_reported: u64,
    /// Each key's counts as last read, so that no read is below the one
    /// before (see [`BlockMaps::snapshot`]).
    reported: BTreeMap<BlockKey, BlockStats>,
    ended: EndedProcesses,
}

/// How long an entry must stay, unchanged, after its device read 0 in
/// flight before it counts as unseen: a completion raised in an interrupt
/// may wait for its softirq (or ksoftirqd) to run the program.
const UNSEEN_SETTLE: std::time::Duration = std::time::Duration::from_millis(50);

impl BlockMaps {
    pub fn new(ebpf: &mut Ebpf) -> Result<Self> {
        Ok(BlockMaps {
            stats: take(ebpf, "BLOCK_STATS")?,
            pending: take(ebpf, "BLOCK_PENDING")?,
            drops: take(ebpf, "BLOCK_DROPS")?,
            inflight: take(ebpf, "BLOCK_INFLIGHT")?,
            unseen: HashMap::new(),
            unseen_reported: 0,
            reported: BTreeMap::new(),
            ended: EndedProcesses::default(),
        })
    }

    /// Notes the processes that ended before this read (see
    /// [`EndedProcesses`]). A process with a request still pending is kept:
    /// the kernel may count it later.
    pub fn note_ended(&mut self) {
        let held = self.pending.iter().flatten().map(|(_, p)| p.pid).collect();
        self.ended.note(&self.stats, |k| k.pid, &held);
    }

    /// `vtrace serve`, after a read: drops the counts of the processes
    /// noted before it; returns their keys.
    pub fn forget_ended(&mut self) -> Vec<BlockKey> {
        let removed = self.ended.forget(&mut self.stats, |k| k.pid);
        for k in &removed {
            self.reported.remove(k);
        }
        removed
    }

    /// Every request counted so far: the kernel's, and those pending whose
    /// completion went unseen. The kernel's counts are read first, the
    /// pending entries after: an unseen request the kernel counts between
    /// the two reads (a later request took its address) is in neither, one
    /// short for this read only. Each key's counts are kept at their
    /// highest, field by field, and a key read before is read again (its
    /// only count may be between the two reads), so a counter never falls
    /// or vanishes (serve would take it back as a new one, and add all of
    /// it again).
    pub fn snapshot(&mut self) -> Result<BTreeMap<BlockKey, BlockStats>> {
        let unseen_by_kernel = self.drops_at(1);
        let mut all = sum_per_cpu(&self.stats)?;
        self.recover_unseen();
        for p in self.unseen.values() {
            let s = all.entry(key_of(p)).or_default();
            s.requests += 1;
            s.bytes += p.bytes as u64;
            s.size_hist[size_bucket(p.bytes as u64)] += 1;
        }
        for (k, r) in &self.reported {
            all.entry(*k).or_insert(*r);
        }
        for (k, s) in all.iter_mut() {
            let r = self.reported.entry(*k).or_default();
            keep_highest(r, s);
            *s = *r;
        }
        self.unseen_reported = self.unseen_reported.max(unseen_by_kernel + self.unseen.len() as u64);
        Ok(all)
    }

    /// Finds the pending requests that completed without block_rq_complete's
    /// program running for them. The kernel runs no BPF program in some
    /// contexts: on this repository's machine, none while the sandbox's own
    /// threads (pid 1's) are current, so a completion in a softirq on top of
    /// one goes unseen (2 of fio's 532 reads in one run beside a writer;
    /// ftrace saw all 532, and the 2 it saw over `tokio-rt-worker` were the
    /// 2 missing). Such a request's entry stays, issued, until a later
    /// request takes its address and the kernel counts it. Once the kernel
    /// has nothing of its direction in flight on its device
    /// (/sys/class/block/<dev>/inflight), every entry issued before is
    /// done: one still there, unchanged, [`UNSEEN_SETTLE`] after that read
    /// was never seen to complete. Entries with no device (the flush
    /// machinery's own request, which the in-flight counts leave out) and
    /// requeued ones are not read so.
    fn recover_unseen(&mut self) {
        let issued: HashMap<(u64, u64), (u64, BlockPending)> = self
            .pending
            .iter()
            .flatten()
            .filter(|(_, p)| p.issue_ns != 0 && p.requeued == 0 && p.dev != 0)
            .map(|(rq, p)| ((rq, p.issue_ns), (rq, p)))
            .collect();
        self.unseen
            .retain(|id, p| issued.get(id).is_some_and(|(_, now)| now == p));
        if issued.len() == self.unseen.len() {
            return;
        }
        let in_flight = device_in_flight();
        let candidates: Vec<((u64, u64), (u64, BlockPending))> = issued
            .into_iter()
            .filter(|(id, (_, p))| {
                // The kernel's data direction: the operation's low bit (reads and flushes 0).
                let direction = (p.op & 1) as usize;
                !self.unseen.contains_key(id) && in_flight.get(&p.dev).is_some_and(|n| n[direction] == 0)
            })
            .collect();
        if candidates.is_empty() {
            return;
        }
        std::thread::sleep(UNSEEN_SETTLE);
        for (id, (rq, p)) in candidates {
            // Still there, unchanged: no program took it.
            if self.pending.get(&rq, 0).ok() == Some(p) {
                self.unseen.insert(id, p);
            }
        }
    }

    /// Each device's in-flight peak since the layer started.
    pub fn inflight_peaks(&self) -> HashMap<u32, u64> {
        self.inflight.iter().flatten().map(|(dev, v)| (dev, v.peak)).collect()
    }

    /// Completions not counted (`block.unpaired`).
    pub fn drops(&self) -> u64 {
        self.drops_at(0)
    }

    /// Requests counted whose completion went unseen: by the kernel, and
    /// those pending here (`block.unseen_completions`), as of the last read.
    pub fn unseen(&self) -> u64 {
        self.unseen_reported
    }

    fn drops_at(&self, index: u32) -> u64 {
        self.drops.get(&index, 0).map(|v| v.iter().sum()).unwrap_or(0)
    }
}

/// `highest` raised to `now`, field by field, and histogram bucket by bucket.
fn keep_highest(highest: &mut BlockStats, now: &BlockStats) {
    let h = highest;
    for (a, b) in [
        (&mut h.requests, now.requests),
        (&mut h.bytes, now.bytes),
        (&mut h.queued, now.queued),
        (&mut h.queue_ns, now.queue_ns),
        (&mut h.device_ns, now.device_ns),
    ] {
        *a = (*a).max(b);
    }
    for (hist, now) in [
        (&mut h.queue_hist, &now.queue_hist),
        (&mut h.device_hist, &now.device_hist),
        (&mut h.size_hist, &now.size_hist),
    ] {
        for (a, b) in hist.iter_mut().zip(now) {
            *a = (*a).max(*b);
        }
    }
}

fn key_of(p: &BlockPending) -> BlockKey {
    BlockKey {
        dev: p.dev,
        op: p.op,
        cgroup_id: p.cgroup_id,
        pid: p.pid,
        _pad: 0,
    }
}

/// The size histogram's bucket of `bytes`, as the kernel's (vtrace-ebpf/src/hist.rs's log2_bucket).
fn size_bucket(bytes: u64) -> usize {
    log2_index(bytes).min(BLOCK_BUCKETS - 1)
}

/// Requests each device has started and not yet completed, reads and
/// writes (/sys/class/block/<dev>/inflight), by dev_t as the maps key it.
fn device_in_flight() -> HashMap<u32, [u64; 2]> {
    let mut out = HashMap::new();
    for (_, dir, dev) in block_devices() {
        if let [reads, writes] = numbers(&dir.join("inflight"))[..] {
            out.insert(dev, [reads, writes]);
        }
    }
    out
}

/// Each block device (partitions included) in /sys/class/block: its name,
/// folder and dev_t.
fn block_devices() -> impl Iterator<Item = (String, std::path::PathBuf, u32)> {
    std::fs::read_dir("/sys/class/block")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let dir = entry.path();
            let dev = std::fs::read_to_string(dir.join("dev")).ok().and_then(|d| dev_t(&d))?;
            Some((entry.file_name().to_string_lossy().into_owned(), dir, dev))
        })
}

/// The whitespace-separated numbers of a sysfs file (none if unreadable).
fn numbers(path: &std::path::Path) -> Vec<u64> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect()
}

/// "major:minor" as the kernel's dev_t (major << 20 | minor).
fn dev_t(text: &str) -> Option<u32> {
    let (a, b) = text.trim().split_once(':')?;
    Some(a.parse::<u32>().ok()? << 20 | b.parse::<u32>().ok()?)
}

/// One block device (partitions included) as /sys/class/block shows it.
#[derive(Clone, Debug, Default)]
pub struct DeviceStat {
    pub name: String,
    pub dev: u32,
    /// The fields of its `stat` file (Documentation/block/stat.rst).
    pub fields: Vec<u64>,
}

/// Every block device's counters now.
pub fn device_stats() -> Vec<DeviceStat> {
    let mut out: Vec<DeviceStat> = block_devices()
        .map(|(name, dir, dev)| DeviceStat {
            name,
            dev,
            fields: numbers(&dir.join("stat")),
        })
        .collect();
    out.sort_by_key(|d| d.dev);
    out
}

pub fn op_name(op: u32) -> String {
    block_op::NAMES
        .get(op as usize)
        .map_or_else(|| format!("op{op}"), |n| n.to_string())
}

/// The block, block_hists and block_devices rows: the window's requests
/// (`end` less `start`), owners from the threads' cgroups, and the devices'
/// counters over the same window for every device that saw requests.
pub fn rows(
    start: &BTreeMap<BlockKey, BlockStats>,
    end: &BTreeMap<BlockKey, BlockStats>,
    devices_start: &[DeviceStat],
    devices_end: &[DeviceStat],
    inflight_peaks: &HashMap<u32, u64>,
    threads: &[ThreadRow],
) -> (Vec<BlockRow>, Vec<BlockHistRow>, Vec<BlockDeviceRow>) {
    let index = ThreadIndex::new(threads);
    let names: HashMap<u32, &str> = devices_end.iter().map(|d| (d.dev, d.name.as_str())).collect();
    let name = |dev: u32| {
        names
            .get(&dev)
            .map_or_else(|| format!("{}:{}", dev >> 20, dev & 0xfffff), |n| n.to_string())
    };
    let window = delta(end, start, |s: &BlockStats| s.requests > 0);
    let mut rows = Vec::new();
    let mut hists = Vec::new();
    for (k, s) in &window {
        if s.requests == 0 {
            continue;
        }
        let Owner {
            pid,
            comm,
            platform,
            instance,
            ..
        } = index.cgroup_owner(k.cgroup_id, k.pid);
        let op = op_name(k.op);
        rows.push(BlockRow {
            pid,
            comm,
            device: name(k.dev),
            dev: k.dev,
            op: op.clone(),
            cgroup_id: k.cgroup_id,
            platform,
            instance,
            requests: s.requests,
            bytes: s.bytes,
            queued: s.queued,
            queue_ns: s.queue_ns,
            device_ns: s.device_ns,
        });
        for (kind, hist) in [
            ("queue", &s.queue_hist),
            ("device", &s.device_hist),
            ("size", &s.size_hist),
        ] {
            for (i, &count) in hist.iter().enumerate().take(BLOCK_BUCKETS) {
                if count > 0 {
                    let lo = if i == 0 { 0 } else { 1u64 << i };
                    hists.push(BlockHistRow {
                        pid: k.pid,
                        dev: k.dev,
                        op: op.clone(),
                        cgroup_id: k.cgroup_id,
                        kind: kind.into(),
                        lo,
                        hi: 1u64 << (i + 1),
                        count,
                    });
                }
            }
        }
    }
    let seen: std::collections::BTreeSet<u32> = rows.iter().map(|r| r.dev).collect();
    let devices = devices_end
        .iter()
        .filter(|d| seen.contains(&d.dev))
        .map(|d| {
            let before = devices_start.iter().find(|b| b.dev == d.dev);
            let field = |i: usize| {
                let now = d.fields.get(i).copied().unwrap_or(0);
                now - before.and_then(|b| b.fields.get(i).copied()).unwrap_or(0).min(now)
            };
            BlockDeviceRow {
                device: d.name.clone(),
                dev: d.dev,
                reads: field(0),
                read_sectors: field(2),
                writes: field(4),
                write_sectors: field(6),
                discards: field(11),
                flushes: field(15),
                inflight_peak: inflight_peaks.get(&d.dev).copied().unwrap_or(0),
            }
        })
        .collect();
    (rows, hists, devices)
}
