//! Reads the block layer's maps (vtrace-ebpf/src/block.rs) and the devices'
//! own counters, and makes its rows.

use std::collections::{BTreeMap, HashMap};

use aya::{
    Ebpf,
    maps::{HashMap as BpfHashMap, MapData, PerCpuArray, PerCpuHashMap},
};
use vtrace_common::{BLOCK_BUCKETS, BlockInflight, BlockKey, BlockStats, block_op};

use super::tables::{BlockDeviceRow, BlockHistRow, BlockRow};
use crate::platforms::attribute::Attributed;
use crate::{
    Result,
    collectors::maps::{Counters, counters, delta, sum_per_cpu, take},
    layers::cpu::ThreadRow,
    layers::cpu::{ThreadIndex, row_owner},
};

counters!(BlockStats { requests, bytes, queued, queue_ns, device_ns } [queue_hist, device_hist, size_hist]);

pub struct BlockMaps {
    stats: PerCpuHashMap<MapData, BlockKey, BlockStats>,
    drops: PerCpuArray<MapData, u64>,
    inflight: BpfHashMap<MapData, u32, BlockInflight>,
}

impl BlockMaps {
    pub fn new(ebpf: &mut Ebpf) -> Result<Self> {
        Ok(BlockMaps {
            stats: take(ebpf, "BLOCK_STATS")?,
            drops: take(ebpf, "BLOCK_DROPS")?,
            inflight: take(ebpf, "BLOCK_INFLIGHT")?,
        })
    }

    pub fn snapshot(&self) -> Result<BTreeMap<BlockKey, BlockStats>> {
        sum_per_cpu(&self.stats)
    }

    /// Each device's in-flight peak since the layer started.
    pub fn inflight_peaks(&self) -> HashMap<u32, u64> {
        self.inflight.iter().flatten().map(|(dev, v)| (dev, v.peak)).collect()
    }

    pub fn drops(&self) -> u64 {
        self.drops.get(&0, 0).map(|v| v.iter().sum()).unwrap_or(0)
    }
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
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/sys/class/block").into_iter().flatten().flatten() {
        let dir = entry.path();
        let Some((major, minor)) = std::fs::read_to_string(dir.join("dev")).ok().and_then(|d| {
            let (a, b) = d.trim().split_once(':')?;
            Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?))
        }) else {
            continue;
        };
        let fields = std::fs::read_to_string(dir.join("stat"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|v| v.parse().ok())
            .collect();
        out.push(DeviceStat {
            name: entry.file_name().to_string_lossy().into_owned(),
            dev: major << 20 | minor,
            fields,
        });
    }
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
        let Attributed { platform, instance, .. } = row_owner(index.cgroup(k.cgroup_id));
        let op = op_name(k.op);
        rows.push(BlockRow {
            pid: k.pid,
            comm: index.process_comm(k.pid),
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
