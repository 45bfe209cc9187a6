//! The fs layer (`--layers fs`): file syscalls (read/write, open, stat,
//! getdents, fsync, close families) per process, call and filesystem type,
//! with bytes, errors and latency; and overlayfs's credential switches
//! where fentry or kprobes attach (vtrace-ebpf/src/files.rs). The overlay
//! cost row combines them with the stack sampler (summary.rs).

pub mod collector;
pub mod metrics;
pub mod probes;
pub mod summary;
pub mod tables;

use std::collections::BTreeMap;

use aya::Ebpf;
use vtrace_common::{Config, FsKey, FsStats};

pub use tables::{FsHistRow, FsRow, OverlayCredsRow};

use self::collector::FsMaps;
use super::{Attached, Collector, Emit, End, Layer, LayerOutput, Setup, cpu::ThreadRow};
use crate::probes::offsets::{self, KernelLayout};
use crate::{
    Result,
    probes::ProbeSpec,
    recording::{Overhead, TableKind},
};

pub struct FsLayer;

impl Layer for FsLayer {
    fn name(&self) -> &'static str {
        "fs"
    }
    /// Its syscall hooks put every syscall on the kernel's slow path.
    fn on_by_default(&self) -> bool {
        false
    }
    fn catalog(&self) -> &'static [ProbeSpec] {
        probes::FS
    }
    fn offsets(&self, k: &KernelLayout, o: &mut Config) {
        offsets::syscall_args(k, o);
        o.fs.task_files = k.member("task_struct", "files");
        o.fs.task_fs = k.member("task_struct", "fs");
        o.fs.files_fdt = k.member("files_struct", "fdt");
        o.fs.fdtable_max_fds = k.member("fdtable", "max_fds");
        o.fs.fdtable_fd = k.member("fdtable", "fd");
        o.fs.file_inode = k.member("file", "f_inode");
        o.fs.inode_sb = k.member("inode", "i_sb");
        o.fs.sb_magic = k.member("super_block", "s_magic");
        o.fs.fs_pwd_dentry = k.nested("fs_struct", "pwd", "path", "dentry");
        o.fs.fs_root_dentry = k.nested("fs_struct", "root", "path", "dentry");
        o.fs.dentry_sb = k.member("dentry", "d_sb");
    }
    fn tables(&self) -> Vec<TableKind> {
        vec![
            TableKind::of::<FsRow>(),
            TableKind::of::<FsHistRow>(),
            TableKind::of::<OverlayCredsRow>(),
        ]
    }
    fn losses(&self) -> &'static [super::Loss] {
        &[super::Loss {
            key: "fs.dropped",
            meaning: "file syscalls not counted: a fs map was full",
        }]
    }
    fn summarize(&self, rec: &crate::recording::Recording, top: usize) -> crate::report_model::Section {
        summary::section(rec, top)
    }
    fn metrics(&self, tables: &crate::recording::TableSet, out: &mut crate::exposition::Samples) {
        metrics::metrics(tables, out);
    }
    fn start(&self, ebpf: &mut Ebpf, _setup: &Setup, _config: &Config) -> Result<Box<dyn Collector>> {
        Ok(Box::new(FsRecorder {
            maps: FsMaps::new(ebpf)?,
            start: BTreeMap::new(),
            end: BTreeMap::new(),
            creds_start: BTreeMap::new(),
            creds_end: BTreeMap::new(),
        }))
    }
}

struct FsRecorder {
    maps: FsMaps,
    start: BTreeMap<FsKey, FsStats>,
    end: BTreeMap<FsKey, FsStats>,
    creds_start: BTreeMap<u32, [u64; 2]>,
    creds_end: BTreeMap<u32, [u64; 2]>,
}

impl Collector for FsRecorder {
    fn baseline(&mut self, _attached: &Attached) -> Result<()> {
        self.start = self.maps.snapshot()?;
        self.creds_start = self.maps.creds();
        Ok(())
    }

    fn checkpoint(&mut self, _now: &End) -> Result<bool> {
        self.maps.note_ended();
        self.end = self.maps.snapshot()?;
        self.creds_end = self.maps.creds();
        Ok(true)
    }

    fn forget(&mut self) -> Result<()> {
        let (calls, creds) = self.maps.forget_ended();
        for k in calls {
            self.start.remove(&k);
        }
        for tgid in creds {
            self.creds_start.remove(&tgid);
        }
        Ok(())
    }

    fn emit(&self, ctx: &Emit, out: &mut LayerOutput, _overhead: &mut Overhead) -> Result<()> {
        let threads = ctx.tables.rows::<ThreadRow>();
        let (rows, hists) = collector::rows(&self.start, &self.end, threads);
        out.tables
            .put(collector::creds_rows(&self.creds_start, &self.creds_end, threads));
        out.losses.push(("fs.dropped", self.maps.drops()));
        out.tables.put(rows);
        out.tables.put(hists);
        Ok(())
    }
}
