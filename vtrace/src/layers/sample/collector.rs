//! Stack sampler (`record --sample HZ`, `vtrace-ebpf/src/sample.rs`): counts
//! per (thread, kernel stack, user stack), symbolized (blazesym) into folded
//! stacks (root;...;leaf) that flamegraph tools read. Kernel frames are named
//! from /proc/kallsyms. User frames come from each executable mapping's file,
//! opened while the process lives (each interval) and held open, so a process
//! that has ended by the time stacks are read is still symbolized, and a
//! container's binaries are the ones it ran (through map_files). Where the
//! file has DWARF, frames carry their source line and inlined calls become
//! frames of their own; a process that lives less than one interval keeps raw
//! addresses.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    fs::File,
    os::fd::AsRawFd,
};

use aya::{
    Ebpf,
    maps::{MapData, PerCpuArray, PerCpuHashMap, StackTraceMap},
    programs::{
        PerfEvent,
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
    },
};
use blazesym::{
    MaybeDefault,
    symbolize::{
        CodeInfo, Input, Sym, Symbolizer,
        source::{Elf, Kernel, Source},
    },
};
use vtrace_common::SampleKey;

use super::tables::SampleRow;
use crate::recording::Owner;
use crate::{Error, Result, collectors::maps::take, layers::cpu::ThreadRow};

/// One executable mapping of a process.
struct Mapping {
    start: u64,
    end: u64,
    offset: u64,
    /// (dev, inode) of the file: the key of its open handle.
    file: FileKey,
    name: String,
}

/// (dev, inode) of a mapped file.
type FileKey = (String, u64);

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
    /// Every mapped executable file seen, open (None: it could not be opened).
    files: HashMap<FileKey, Option<File>>,
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
            files: HashMap::new(),
            hz,
        })
    }

    /// Reads the executable mappings of processes sampled for the first
    /// time, and opens their files, while they still exist.
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
                if !self.files.contains_key(&file) {
                    // Through map_files: the file as the process sees it (its own mount namespace).
                    let path = format!("/proc/{tgid}/map_files/{}", f[0]);
                    self.files.insert(file.clone(), File::open(path).ok());
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

    /// The mapping of `ip` in `tgid`, and its file offset there.
    fn mapping_of(&self, tgid: u32, ip: u64) -> Option<(&Mapping, u64)> {
        let m = self.maps.get(&tgid)?.iter().find(|m| (m.start..m.end).contains(&ip))?;
        Some((m, ip - m.start + m.offset))
    }

    /// Folded stacks with their sample counts, per thread, and the samples
    /// lost to a full map.
    pub fn finish(&mut self) -> Result<(Vec<FoldedStack>, u64)> {
        self.learn_processes();
        let mut counts: BTreeMap<SampleKey, u64> = BTreeMap::new();
        for entry in self.samples.iter() {
            let (k, per_cpu) = entry.map_err(|e| Error::Ebpf(e.to_string()))?;
            *counts.entry(k).or_default() += per_cpu.iter().sum::<u64>();
        }
        let drops = self.drops.get(&0, 0).map(|v| v.iter().sum::<u64>()).unwrap_or(0);
        // Stack maps hold leaf first; folded stacks read root first.
        let frames = |id: i32| -> Vec<u64> {
            if id < 0 {
                return Vec::new();
            }
            let mut ips: Vec<u64> = self
                .stacks
                .get(&(id as u32), 0)
                .map(|s| s.frames().iter().map(|f| f.ip).collect())
                .unwrap_or_default();
            ips.reverse();
            ips
        };
        let stacks: Vec<(SampleKey, u64, Vec<u64>, Vec<u64>)> = counts
            .into_iter()
            .map(|(k, n)| (k, n, frames(k.user_stack), frames(k.kernel_stack)))
            .collect();

        // Every address symbolized once, in one batch per file.
        let symbolizer = Symbolizer::builder()
            .enable_code_info(true)
            .enable_inlined_fns(true)
            .build();
        let mut offsets: HashMap<&FileKey, HashSet<u64>> = HashMap::new();
        let mut kernel_ips: HashSet<u64> = HashSet::new();
        for (k, _, user, kernel) in &stacks {
            for &ip in user {
                if let Some((m, offset)) = self.mapping_of(k.tgid, ip) {
                    offsets.entry(&m.file).or_default().insert(offset);
                }
            }
            kernel_ips.extend(kernel);
        }
        let mut user_names: HashMap<(&FileKey, u64), Vec<String>> = HashMap::new();
        for (file, offsets) in offsets {
            let Some(Some(handle)) = self.files.get(file) else {
                continue;
            };
            let offsets: Vec<u64> = offsets.into_iter().collect();
            for (offset, frames) in symbolize_file(&symbolizer, handle, &offsets) {
                user_names.insert((file, offset), frames);
            }
        }
        let kernel_ips: Vec<u64> = kernel_ips.into_iter().collect();
        let kernel = Source::Kernel(Kernel {
            vmlinux: MaybeDefault::None,
            debug_syms: false,
            ..Kernel::default()
        });
        let kernel_names: HashMap<u64, Vec<String>> = symbolizer
            .symbolize(&kernel, Input::AbsAddr(&kernel_ips))
            .map(|symbols| {
                kernel_ips
                    .iter()
                    .zip(symbols)
                    .filter_map(|(&ip, s)| Some((ip, frames_of(s.as_sym()?, "_[k]"))))
                    .collect()
            })
            .unwrap_or_default();

        let mut folded: BTreeMap<(u32, u32, String), u64> = BTreeMap::new();
        for (k, n, user, kernel) in stacks {
            let mut names: Vec<String> = Vec::new();
            for ip in user {
                match self.mapping_of(k.tgid, ip) {
                    Some((m, offset)) => match user_names.get(&(&m.file, offset)) {
                        Some(frames) => names.extend(frames.iter().cloned()),
                        None => names.push(format!("{}+{offset:#x}", m.name)),
                    },
                    None => names.push(format!("{ip:#x}")),
                }
            }
            for ip in kernel {
                match kernel_names.get(&ip) {
                    Some(frames) => names.extend(frames.iter().cloned()),
                    None => names.push("[unknown]_[k]".into()),
                }
            }
            if k.in_guest != 0 {
                names.push(super::tables::GUEST_MODE_FRAME.into());
            }
            if names.is_empty() {
                names.push("[no stack]".into());
            }
            *folded.entry((k.tgid, k.tid, names.join(";"))).or_default() += n;
        }
        Ok((folded.into_iter().map(|((p, t, s), n)| (p, t, s, n)).collect(), drops))
    }
}

/// The frames of each file offset of an open ELF file that symbolizes:
/// with its debug info (its own DWARF, or a detached file found by build
/// id) where that reads, else from its ELF symbols alone.
fn symbolize_file(symbolizer: &Symbolizer, file: &File, offsets: &[u64]) -> Vec<(u64, Vec<String>)> {
    // The open file itself: its process may be gone, or see another mount namespace.
    let mut elf = Elf::new(format!("/proc/self/fd/{}", file.as_raw_fd()));
    let mut found = Vec::with_capacity(offsets.len());
    let mut left: Vec<u64> = offsets.to_vec();
    for debug_syms in [true, false] {
        elf.debug_syms = debug_syms;
        let symbols = symbolizer
            .symbolize(&Source::Elf(elf.clone()), Input::FileOffset(&left))
            .unwrap_or_default();
        let mut unknown = Vec::new();
        for (i, offset) in left.iter().enumerate() {
            match symbols.get(i).and_then(|s| s.as_sym()) {
                Some(sym) => found.push((*offset, frames_of(sym, ""))),
                None => unknown.push(*offset),
            }
        }
        left = unknown;
        if left.is_empty() {
            break;
        }
    }
    found
}

/// The frames of one symbolized address, root first: the function, then
/// each call inlined into it at that address (suffixed `_[i]`), each with
/// `suffix` (`_[k]` for kernel frames) and, where debug info has it, its
/// source line (`frame_location`).
fn frames_of(sym: &Sym, suffix: &str) -> Vec<String> {
    let located = |name: &str, suffix: &str, code: Option<&CodeInfo>| {
        let name = name.replace(';', ",");
        match code.and_then(|c| Some((c.file.to_string_lossy(), c.line?))) {
            Some((file, line)) => format!("{name}{suffix} ({file}:{line})"),
            None => format!("{name}{suffix}"),
        }
    };
    // blazesym gives each frame its own line: where it calls the next
    // (inlined) one, and for the last, the sampled instruction.
    let mut frames = vec![located(&sym.name, suffix, sym.code_info.as_deref())];
    let inlined_suffix = format!("_[i]{suffix}");
    for inlined in sym.inlined.iter() {
        frames.push(located(&inlined.name, &inlined_suffix, inlined.code_info.as_ref()));
    }
    frames
}

/// A frame without its source line: `name (file.rs:42)` is `name`.
pub fn frame_location_stripped(frame: &str) -> &str {
    match frame.rsplit_once(" (") {
        Some((name, loc))
            if loc.ends_with(')')
                && loc[..loc.len() - 1]
                    .rsplit_once(':')
                    .is_some_and(|(_, l)| l.parse::<u32>().is_ok()) =>
        {
            name
        }
        _ => frame,
    }
}

/// Rows of the samples table.
pub fn rows(folded: Vec<FoldedStack>, threads: &[ThreadRow]) -> Vec<SampleRow> {
    let index = crate::layers::cpu::ThreadIndex::new(threads);
    folded
        .into_iter()
        .map(|(pid, tid, stack, count)| {
            SampleRow {
                // A thread the threads table lacks is left unnamed.
                owner: Owner {
                    pid,
                    ..index.thread(tid).map(|t| t.owner.clone()).unwrap_or_default()
                },
                tid,
                stack,
                count,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file offset of `addr` in this process, and its file opened.
    fn file_offset_of(addr: u64) -> (File, u64) {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        for line in maps.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (start, end) = f[0].split_once('-').unwrap();
            let hex = |s: &str| u64::from_str_radix(s, 16).unwrap();
            if (hex(start)..hex(end)).contains(&addr) {
                let file = File::open(format!("/proc/self/map_files/{}", f[0])).unwrap();
                return (file, addr - hex(start) + hex(f[2]));
            }
        }
        panic!("{addr:#x} not mapped");
    }

    /// libc (stripped: dynamic symbols only) and this test binary (a Rust
    /// function, demangled) symbolize from an open file and a file offset.
    #[test]
    fn symbolizes_libc_and_rust_functions_by_file_offset() {
        let symbolizer = Symbolizer::builder()
            .enable_code_info(true)
            .enable_inlined_fns(true)
            .build();
        let (libc_file, offset) = file_offset_of(libc::getpid as *const () as u64);
        let frames = symbolize_file(&symbolizer, &libc_file, &[offset]);
        assert_eq!(frames.len(), 1, "libc's getpid symbolized");
        assert!(frames[0].1[0].contains("getpid"), "{frames:?}");
        let (me, offset) = file_offset_of(frame_location_stripped as *const () as u64);
        let frames = symbolize_file(&symbolizer, &me, &[offset]);
        assert!(
            frames[0].1.iter().any(|f| f.contains("frame_location_stripped")),
            "{frames:?}"
        );
    }

    #[test]
    fn a_frame_loses_only_its_source_line() {
        assert_eq!(frame_location_stripped("spin_hot (cpu_mix.rs:57)"), "spin_hot");
        assert_eq!(frame_location_stripped("f_[i] (a.rs:3)"), "f_[i]");
        assert_eq!(
            frame_location_stripped("(anonymous namespace)::f(int)"),
            "(anonymous namespace)::f(int)"
        );
        assert_eq!(frame_location_stripped("g (x)"), "g (x)");
    }
}
