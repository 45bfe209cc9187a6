//! Reads the fs layer's maps (vtrace-ebpf/src/files.rs) and makes its rows,
//! attributed through the CPU layer's threads.

use std::collections::BTreeMap;

use aya::{
    Ebpf,
    maps::{MapData, PerCpuArray, PerCpuHashMap},
};
use vtrace_common::{FINE_BUCKETS, FsKey, FsStats, fine_bucket_range, fs_op};

use super::tables::{FsHistRow, FsRow, OverlayCredsRow};
use crate::{
    Result,
    collectors::maps::{Counters, EndedProcesses, delta, sum_per_cpu, take},
    layers::cpu::ThreadIndex,
    layers::cpu::ThreadRow,
};

impl Counters for FsStats {
    fn add(&mut self, o: &Self) {
        self.bytes += o.bytes;
        self.errors += o.errors;
        self.latency.add(&o.latency);
    }
    fn sub(&mut self, o: &Self) {
        self.bytes -= o.bytes.min(self.bytes);
        self.errors -= o.errors.min(self.errors);
        self.latency.sub(&o.latency);
    }
}

pub struct FsMaps {
    stats: PerCpuHashMap<MapData, FsKey, FsStats>,
    drops: PerCpuArray<MapData, u64>,
    creds: PerCpuHashMap<MapData, u32, [u64; 2]>,
    ended_calls: EndedProcesses,
    ended_creds: EndedProcesses,
}

impl FsMaps {
    pub fn new(ebpf: &mut Ebpf) -> Result<Self> {
        Ok(FsMaps {
            stats: take(ebpf, "FS_STATS")?,
            drops: take(ebpf, "FS_DROPS")?,
            creds: take(ebpf, "OVL_CREDS")?,
            ended_calls: EndedProcesses::default(),
            ended_creds: EndedProcesses::default(),
        })
    }

    /// Notes the processes that ended before this read (see [`EndedProcesses`]).
    pub fn note_ended(&mut self) {
        let none = Default::default();
        self.ended_calls.note(&self.stats, |k| k.tgid, &none);
        self.ended_creds.note(&self.creds, |&tgid| tgid, &none);
    }

    /// `vtrace serve`, after a read: drops the counts of the processes
    /// noted before it; returns their call keys and credential keys.
    pub fn forget_ended(&mut self) -> (Vec<FsKey>, Vec<u32>) {
        (
            self.ended_calls.forget(&mut self.stats, |k| k.tgid),
            self.ended_creds.forget(&mut self.creds, |&tgid| tgid),
        )
    }

    pub fn snapshot(&self) -> Result<BTreeMap<FsKey, FsStats>> {
        sum_per_cpu(&self.stats)
    }

    /// Credential switches per process: [override, revert] calls.
    pub fn creds(&self) -> BTreeMap<u32, [u64; 2]> {
        self.creds
            .iter()
            .flatten()
            .map(|(tgid, per_cpu)| {
                let sum = per_cpu.iter().fold([0, 0], |a, c| [a[0] + c[0], a[1] + c[1]]);
                (tgid, sum)
            })
            .collect()
    }

    pub fn drops(&self) -> u64 {
        self.drops.get(&0, 0).map(|v| v.iter().sum()).unwrap_or(0)
    }
}

/// A filesystem type's name from its superblock's magic number
/// (include/uapi/linux/magic.h); "magic 0x..." for one not listed.
pub fn fs_name(magic: u64) -> String {
    let name = match magic {
        0 => "unknown",
        0x794c_7630 => "overlay",
        0xef53 => "ext4",
        0x5846_5342 => "xfs",
        0x9123_683e => "btrfs",
        0x0102_1994 => "tmpfs",
        0x8584_58f6 => "ramfs",
        0x9fa0 => "proc",
        0x6265_6572 => "sysfs",
        0x0102_1997 => "9p",
        0x6573_5546 => "fuse",
        0x1cd1 => "devpts",
        0x7371_7368 => "squashfs",
        0x534f_434b => "sockfs",
        0x5049_5045 => "pipefs",
        0x0904_1934 => "anon_inode",
        0x6e73_6673 => "nsfs",
        0x6367_7270 => "cgroup2",
        0x0027_e0eb => "cgroup",
        0x6462_6720 => "debugfs",
        0x7472_6163 => "tracefs",
        0xcafe_4a11 => "bpf",
        0x6969 => "nfs",
        0xff53_4d42 => "cifs",
        0x4d44 => "vfat",
        0x2011_bab0 => "exfat",
        0x9584_58f6 => "hugetlbfs",
        0x6264_6576 => "bdev",
        0x7363_6673 => "securityfs",
        0x4249_4e4d => "binfmt_misc",
        0x6165_676c => "pstore",
        0x0000_4244 => "hfs",
        0x2fc1_2fc1 => "zfs",
        0x5049_4446 => "pidfs",
        _ => return format!("magic {magic:#x}"),
    };
    name.to_string()
}

/// The files and files_hists rows of the window (`end` less `start`),
/// each process named as the threads table names it.
pub fn rows(
    start: &BTreeMap<FsKey, FsStats>,
    end: &BTreeMap<FsKey, FsStats>,
    threads: &[ThreadRow],
) -> (Vec<FsRow>, Vec<FsHistRow>) {
    let index = ThreadIndex::new(threads);
    let window = delta(end, start, |s: &FsStats| s.latency.count > 0);
    let mut rows = Vec::new();
    let mut hists = Vec::new();
    for (k, s) in &window {
        if s.latency.count == 0 {
            continue;
        }
        let op = fs_op::name(k.nr).to_string();
        rows.push(FsRow {
            owner: index.process_owner(k.tgid),
            fs: fs_name(k.magic),
            magic: k.magic,
            op: op.clone(),
            count: s.latency.count,
            bytes: s.bytes,
            errors: s.errors,
            total_ns: s.latency.sum_ns,
            min_ns: s.latency.min_ns,
            max_ns: s.latency.max_ns,
        });
        for (i, &count) in s.latency.buckets.iter().enumerate().take(FINE_BUCKETS) {
            if count > 0 {
                let (lo_ns, hi_ns) = fine_bucket_range(i);
                hists.push(FsHistRow {
                    pid: k.tgid,
                    magic: k.magic,
                    op: op.clone(),
                    lo_ns,
                    hi_ns,
                    count,
                });
            }
        }
    }
    (rows, hists)
}

/// The overlay_creds rows of the window (`end` less `start`).
pub fn creds_rows(
    start: &BTreeMap<u32, [u64; 2]>,
    end: &BTreeMap<u32, [u64; 2]>,
    threads: &[ThreadRow],
) -> Vec<OverlayCredsRow> {
    let index = ThreadIndex::new(threads);
    end.iter()
        .filter_map(|(&tgid, c)| {
            let before = start.get(&tgid).copied().unwrap_or_default();
            let (overrides, reverts) = (c[0].saturating_sub(before[0]), c[1].saturating_sub(before[1]));
            if overrides + reverts == 0 {
                return None;
            }
            Some(OverlayCredsRow {
                owner: index.process_owner(tgid),
                override_calls: overrides,
                revert_calls: reverts,
            })
        })
        .collect()
}
