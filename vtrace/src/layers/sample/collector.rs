//! Stack sampler (`record --sample HZ`, `vtrace-ebpf/src/sample.rs`): counts
//! per (thread, kernel stack, user stack), symbolized into folded stacks
//! (root;...;leaf) that flamegraph tools read. Kernel frames are named from
//! /proc/kallsyms; user frames from each executable mapping's ELF symbols,
//! read while the process lives (each interval), so processes that live less
//! than one interval keep raw addresses.

use std::collections::{BTreeMap, HashMap, HashSet};

use aya::{
    Ebpf,
    maps::{MapData, PerCpuArray, PerCpuHashMap, StackTraceMap},
    programs::{
        PerfEvent,
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
    },
};
use vtrace_common::SampleKey;

use super::tables::SampleRow;
use crate::{Error, Result, collectors::maps::take, layers::cpu::ThreadRow};

/// Symbols of one ELF file: load segments and function symbols.
struct ElfSymbols {
    /// (file offset, virtual address, size)
    segments: Vec<(u64, u64, u64)>,
    /// (address, size, name), sorted by address.
    symbols: Vec<(u64, u64, String)>,
}

impl ElfSymbols {
    fn read(path: &str) -> Option<Self> {
        use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};
        let data = std::fs::read(path).ok()?;
        let file = object::File::parse(&*data).ok()?;
        let segments = file
            .segments()
            .filter_map(|s| {
                let (off, size) = s.file_range();
                (size > 0).then_some((off, s.address(), size))
            })
            .collect();
        let mut symbols: Vec<(u64, u64, String)> = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
            .filter_map(|s| Some((s.address(), s.size(), frame_name(s.name().ok()?))))
            .collect();
        symbols.sort();
        symbols.dedup_by_key(|s| s.0);
        Some(ElfSymbols { segments, symbols })
    }

    fn name(&self, file_offset: u64) -> Option<&str> {
        let &(off, vaddr, _) = self
            .segments
            .iter()
            .find(|(off, _, size)| (*off..off + size).contains(&file_offset))?;
        let addr = file_offset - off + vaddr;
        let i = self.symbols.partition_point(|s| s.0 <= addr).checked_sub(1)?;
        let (start, size, name) = &self.symbols[i];
        // Symbols without a size (hand-written assembly) cover up to the next one.
        (size == &0 || addr < start + size).then_some(name.as_str())
    }
}

/// A symbol as a flamegraph frame: Rust names demangled without their hash
/// (others pass through unchanged), and no ';', the folded format's frame
/// separator (Rust array types have one: `[u8; 4]`).
fn frame_name(symbol: &str) -> String {
    format!("{:#}", rustc_demangle::demangle(symbol)).replace(';', ",")
}

/// One executable mapping of a process.
struct Mapping {
    start: u64,
    end: u64,
    offset: u64,
    /// (dev, inode) of the file: the key of its symbols.
    file: (String, u64),
    name: String,
}

/// The eBPF program behind `--sample` (outside the probe catalog: it
/// attaches to perf events, not to a probe point).
pub const PROGRAM: &str = "sample_cpu";

/// (pid, tid, folded stack, samples)
pub type FoldedStack = (u32, u32, String, u64);

pub struct Sampler {
    samples: PerCpuHashMap<MapData, SampleKey, u64>,
    drops: PerCpuArray<MapData, u64>,
    stacks: StackTraceMap<MapData>,
    maps: HashMap<u32, Vec<Mapping>>,
    elves: HashMap<(String, u64), Option<ElfSymbols>>,
    pub hz: u64,
}

impl Sampler {
    /// Attaches the sampler to every online CPU at `hz`.
    pub fn start(ebpf: &mut Ebpf, hz: u64) -> Result<Self> {
        let err = |e: &dyn std::fmt::Display| Error::Ebpf(format!("stack sampler: {e}"));
        let program: &mut PerfEvent = ebpf
            .program_mut(PROGRAM)
            .ok_or_else(|| Error::Ebpf(format!("program {PROGRAM} missing")))?
            .try_into()
            .map_err(|e| err(&e))?;
        program.load().map_err(|e| err(&e))?;
        let cpus = aya::util::online_cpus().map_err(|(what, e)| err(&format!("{what}: {e}")))?;
        for cpu in cpus {
            program
                .attach(
                    PerfEventConfig::Software(SoftwareEvent::CpuClock),
                    PerfEventScope::AllProcessesOneCpu { cpu },
                    SamplePolicy::Frequency(hz),
                    false,
                )
                .map_err(|e| err(&e))?;
        }
        Ok(Sampler {
            samples: take(ebpf, "SAMPLES")?,
            drops: take(ebpf, "SAMPLE_DROPS")?,
            stacks: take(ebpf, "STACKS")?,
            maps: HashMap::new(),
            elves: HashMap::new(),
            hz,
        })
    }

    /// Reads the executable mappings (and their symbols) of processes
    /// sampled for the first time, while they still exist.
    pub fn learn_processes(&mut self) {
        let tgids: HashSet<u32> = self.samples.keys().filter_map(|k| k.ok()).map(|k| k.tgid).collect();
        for tgid in tgids {
            if tgid == 0 || self.maps.contains_key(&tgid) {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(format!("/proc/{tgid}/maps")) else {
                continue;
            };
            let mut mappings = Vec::new();
            for line in text.lines() {
                let f: Vec<&str> = line.split_whitespace().collect();
                if f.len() < 6 || !f[1].contains('x') || !f[5].starts_with('/') {
                    continue;
                }
                let Some((start, end)) = f[0].split_once('-') else {
                    continue;
                };
                let hex = |s: &str| u64::from_str_radix(s, 16).unwrap_or(0);
                let file = (f[3].to_string(), f[4].parse().unwrap_or(0));
                if !self.elves.contains_key(&file) {
                    // Through map_files: the file as the process sees it (its own mount namespace).
                    let path = format!("/proc/{tgid}/map_files/{}", f[0]);
                    self.elves.insert(file.clone(), ElfSymbols::read(&path));
                }
                mappings.push(Mapping {
                    start: hex(start),
                    end: hex(end),
                    offset: hex(f[2]),
                    file,
                    name: f[5].rsplit('/').next().unwrap_or(f[5]).to_string(),
                });
            }
            self.maps.insert(tgid, mappings);
        }
    }

    fn user_frame(&self, tgid: u32, ip: u64) -> String {
        let Some(m) = self
            .maps
            .get(&tgid)
            .and_then(|ms| ms.iter().find(|m| (m.start..m.end).contains(&ip)))
        else {
            return format!("{ip:#x}");
        };
        let file_offset = ip - m.start + m.offset;
        match self
            .elves
            .get(&m.file)
            .and_then(|e| e.as_ref())
            .and_then(|e| e.name(file_offset))
        {
            Some(name) => name.to_string(),
            None => format!("{}+{file_offset:#x}", m.name),
        }
    }

    /// Folded stacks with their sample counts, per thread, and the samples
    /// lost to a full map.
    pub fn finish(&mut self) -> Result<(Vec<FoldedStack>, u64)> {
        self.learn_processes();
        let kallsyms = KernelSymbols::read();
        let mut counts: BTreeMap<SampleKey, u64> = BTreeMap::new();
        for entry in self.samples.iter() {
            let (k, per_cpu) = entry.map_err(|e| Error::Ebpf(e.to_string()))?;
            *counts.entry(k).or_default() += per_cpu.iter().sum::<u64>();
        }
        let drops = self.drops.get(&0, 0).map(|v| v.iter().sum::<u64>()).unwrap_or(0);
        let mut folded: BTreeMap<(u32, u32, String), u64> = BTreeMap::new();
        for (k, n) in counts {
            let frames = |id: i32| -> Vec<u64> {
                if id < 0 {
                    return Vec::new();
                }
                self.stacks
                    .get(&(id as u32), 0)
                    .map(|s| s.frames().iter().map(|f| f.ip).collect())
                    .unwrap_or_default()
            };
            // Stack maps hold leaf first; folded stacks read root first.
            let mut names: Vec<String> = frames(k.user_stack)
                .into_iter()
                .rev()
                .map(|ip| self.user_frame(k.tgid, ip))
                .collect();
            names.extend(
                frames(k.kernel_stack)
                    .into_iter()
                    .rev()
                    .map(|ip| format!("{}_[k]", kallsyms.name(ip))),
            );
            if names.is_empty() {
                names.push("[no stack]".into());
            }
            *folded.entry((k.tgid, k.tid, names.join(";"))).or_default() += n;
        }
        Ok((folded.into_iter().map(|((p, t, s), n)| (p, t, s, n)).collect(), drops))
    }
}

/// /proc/kallsyms, sorted.
struct KernelSymbols(Vec<(u64, String)>);

impl KernelSymbols {
    fn read() -> Self {
        let mut syms: Vec<(u64, String)> = std::fs::read_to_string("/proc/kallsyms")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let addr = u64::from_str_radix(f.next()?, 16).ok()?;
                let kind = f.next()?;
                let name = f.next()?;
                (addr != 0 && matches!(kind, "t" | "T" | "w" | "W")).then(|| (addr, name.to_string()))
            })
            .collect();
        syms.sort();
        KernelSymbols(syms)
    }

    fn name(&self, ip: u64) -> &str {
        match self.0.partition_point(|s| s.0 <= ip).checked_sub(1) {
            Some(i) => &self.0[i].1,
            None => "[unknown]",
        }
    }
}

/// Rows of the samples table.
pub fn rows(folded: Vec<FoldedStack>, threads: &[ThreadRow]) -> Vec<SampleRow> {
    let index = crate::platforms::attribute::ThreadIndex::new(threads);
    folded
        .into_iter()
        .map(|(pid, tid, stack, count)| {
            let t = index.thread(tid);
            SampleRow {
                pid,
                tid,
                comm: t.map(|t| t.comm.clone()).unwrap_or_default(),
                platform: t.map(|t| t.platform.clone()).unwrap_or_default(),
                instance: t.map(|t| t.instance.clone()).unwrap_or_default(),
                role: t.map(|t| t.role.clone()).unwrap_or_default(),
                stack,
                count,
            }
        })
        .collect()
}
