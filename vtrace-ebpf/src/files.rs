//! File syscalls (the fs layer): each call of the read/write/open/stat/
//! getdents/fsync/close families from entry to exit, counted per process,
//! syscall and the filesystem it went to, with bytes, errors and a latency
//! histogram in the kernel.
//!
//! The filesystem is resolved in the kernel as the call enters: from its fd
//! (task -> files -> fdtable -> file -> inode -> superblock -> `s_magic`),
//! or for a path, from the directory it starts at (its dirfd, the working
//! directory, or the root for an absolute path); an open that succeeds is
//! resolved again from the fd it returns. Userspace names the magic numbers.
//!
//! These hooks see every syscall of every process (a raw tracepoint on
//! sys_enter/sys_exit), so a call not followed costs one compare at entry and
//! one pt_regs read at exit, before any map is touched.

use crate::runs::{count_run, hook_programs};
use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_get_current_task, bpf_probe_read_user},
    macros::{fentry, kprobe, map},
    maps::{Array, HashMap, PerCpuArray, PerCpuHashMap},
    programs::{FEntryContext, ProbeContext},
};
use vtrace_common::{
    FsKey, FsPending, FsStats,
    fs_op::{self, Target},
};

use crate::{
    account,
    config::conf,
    hist,
    kmem::{KernelMem, ProbeRead},
};

/// Threads inside a followed call, by thread id.
#[map]
pub static FS_PENDING: HashMap<u32, FsPending> = HashMap::with_max_entries(16384, 0);

#[map]
pub static FS_STATS: PerCpuHashMap<FsKey, FsStats> = PerCpuHashMap::with_max_entries(2048, 0);

/// The template of new FS_STATS entries (too large for the eBPF stack).
#[map]
pub static ZERO_FS: Array<FsStats> = Array::with_max_entries(1, 0);

/// Calls not counted: FS_PENDING or FS_STATS full.
#[map]
pub static FS_DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// Overlayfs credential switches per process: [override, revert] calls.
#[map]
pub static OVL_CREDS: PerCpuHashMap<u32, [u64; 2]> = PerCpuHashMap::with_max_entries(1024, 0);

#[inline(always)]
fn count_creds(which: usize) {
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    if let Some(c) = account::entry(&OVL_CREDS, &tgid)
        && which < 2
    {
        c[which] += 1;
    }
}

const AT_FDCWD: i64 = -100;

#[inline(always)]
fn dropped() {
    if let Some(d) = FS_DROPS.get_ptr_mut(0) {
        unsafe { *d += 1 };
    }
}

/// `s_magic` of the superblock behind the current task's `fd` (0: none).
#[inline(always)]
fn fd_magic(fd: i64) -> u64 {
    if fd < 0 {
        return 0;
    }
    let task = unsafe { bpf_get_current_task() };
    let walk = || -> Option<u64> {
        let files: u64 = ProbeRead::read(task, conf!(fs.task_files))?;
        let fdt: u64 = ProbeRead::read(files, conf!(fs.files_fdt))?;
        let max: u32 = ProbeRead::read(fdt, conf!(fs.fdtable_max_fds))?;
        if fd as u64 >= max as u64 {
            return None;
        }
        let fds: u64 = ProbeRead::read(fdt, conf!(fs.fdtable_fd))?;
        let file: u64 = ProbeRead::read(fds, (fd as u32) * 8)?;
        let inode: u64 = ProbeRead::read(file, conf!(fs.file_inode))?;
        let sb: u64 = ProbeRead::read(inode, conf!(fs.inode_sb))?;
        ProbeRead::read(sb, conf!(fs.sb_magic))
    };
    walk().unwrap_or(0)
}

/// `s_magic` of the working directory's (`root`: the root's) filesystem.
#[inline(always)]
fn dir_magic(root: bool) -> u64 {
    let task = unsafe { bpf_get_current_task() };
    let walk = || -> Option<u64> {
        let fs: u64 = ProbeRead::read(task, conf!(fs.task_fs))?;
        let at = if root {
            conf!(fs.fs_root_dentry)
        } else {
            conf!(fs.fs_pwd_dentry)
        };
        let dentry: u64 = ProbeRead::read(fs, at)?;
        let sb: u64 = ProbeRead::read(dentry, conf!(fs.dentry_sb))?;
        ProbeRead::read(sb, conf!(fs.sb_magic))
    };
    walk().unwrap_or(0)
}

/// Where a path starts: the root for an absolute path, else its dirfd's
/// directory (`AT_FDCWD`: the working directory).
#[inline(always)]
fn path_magic(dirfd: i64, path: u64) -> u64 {
    let first: u8 = unsafe { bpf_probe_read_user(path as *const u8) }.unwrap_or(0);
    if first == b'/' {
        dir_magic(true)
    } else if dirfd == AT_FDCWD {
        dir_magic(false)
    } else {
        fd_magic(dirfd)
    }
}

/// At entry of syscall `nr` with its first two arguments.
#[inline(always)]
fn on_enter(nr: u64, arg0: u64, arg1: u64) {
    let Some(target) = fs_op::target(nr as u32) else {
        return;
    };
    let magic = match target {
        Target::Fd => fd_magic(arg0 as i64),
        Target::DirfdPath => path_magic(arg0 as i32 as i64, arg1),
        Target::Path => path_magic(AT_FDCWD, arg0),
    };
    let pending = FsPending {
        start_ns: account::now(),
        magic,
        nr: nr as u32,
        _pad: 0,
    };
    let tid = bpf_get_current_pid_tgid() as u32;
    if FS_PENDING.insert(&tid, &pending, 0).is_err() {
        dropped();
    }
}

/// At exit of syscall `nr` with its return value.
#[inline(always)]
fn on_exit(nr: u64, ret: i64) {
    if fs_op::target(nr as u32).is_none() {
        return;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    let Some(p) = (unsafe { FS_PENDING.get(&tid) }).copied() else {
        return;
    };
    let _ = FS_PENDING.remove(&tid);
    if p.nr as u64 != nr {
        return; // entered before the exit hook was attached, or lost
    }
    let ns = account::now().saturating_sub(p.start_ns);
    // A new fd is resolved itself: its path may cross into another mount.
    let magic = if fs_op::opens(p.nr) && ret >= 0 {
        fd_magic(ret)
    } else {
        p.magic
    };
    let key = FsKey {
        tgid: (pid_tgid >> 32) as u32,
        nr: p.nr,
        magic,
    };
    let Some(s) = account::entry_from(&FS_STATS, &ZERO_FS, &key) else {
        return dropped();
    };
    hist::add(&mut s.latency, ns);
    if ret < 0 {
        s.errors += 1;
    } else if fs_op::moves_bytes(p.nr) {
        s.bytes += ret as u64;
    }
}

// TP_PROTO(struct pt_regs *regs, long id): arguments from the saved registers.
hook_programs! {
    "sys_enter", "raw_syscalls", counted "fs_sys_enter";
    raw raw_fs_sys_enter(ctx) => {
        let nr: u64 = ctx.arg(1);
        if fs_op::target(nr as u32).is_none() {
            return 0;
        }
        let regs: u64 = ctx.arg(0);
        let arg0: u64 = ProbeRead::read(regs, conf!(syscall_args.pt_regs_di)).unwrap_or(u64::MAX);
        let arg1: u64 = ProbeRead::read(regs, conf!(syscall_args.pt_regs_si)).unwrap_or(0);
        on_enter(nr, arg0, arg1);
    }
    tp tp_fs_sys_enter(ctx) => {
        let nr: u64 = unsafe { ctx.read_at(8) }.unwrap_or(u64::MAX);
        if fs_op::target(nr as u32).is_none() {
            return 0;
        }
        let arg0: u64 = unsafe { ctx.read_at(16) }.unwrap_or(u64::MAX);
        let arg1: u64 = unsafe { ctx.read_at(24) }.unwrap_or(0);
        on_enter(nr, arg0, arg1);
    }
}

// TP_PROTO(struct pt_regs *regs, long ret): the number from `orig_ax`.
hook_programs! {
    "sys_exit", "raw_syscalls", counted "fs_sys_exit";
    raw raw_fs_sys_exit(ctx) => {
        let regs: u64 = ctx.arg(0);
        let nr: u64 = ProbeRead::read(regs, conf!(syscall_args.pt_regs_orig_ax)).unwrap_or(u64::MAX);
        let ret: u64 = ctx.arg(1);
        on_exit(nr, ret as i64);
    }
    tp tp_fs_sys_exit(ctx) => {
        let nr: u64 = unsafe { ctx.read_at(conf!(syscall_args.tp_sys_exit_id) as usize) }.unwrap_or(u64::MAX);
        let ret: i64 = unsafe { ctx.read_at(16) }.unwrap_or(0);
        on_exit(nr, ret);
    }
}

// Record: id at 8, args[6] at 16.

// Record: id and ret (offsets from the format file for id; ret at 16).

/// Overlayfs switching to its mounter's credentials around every operation
/// on the lower layers, and back: calls counted per function and process
/// (fentry, else kprobe). Kernels since 6.14 inline the pair into override_creds /
/// revert_creds, probed under the same names' catalog entries.
macro_rules! creds_probe {
    ($kprobe:ident, $fentry:ident, $hook:literal, $function:literal, $which:literal) => {
        #[kprobe]
        pub fn $kprobe(_ctx: ProbeContext) -> u32 {
            count_run!($hook);
            count_creds($which);
            0
        }
        #[fentry(function = $function)]
        pub fn $fentry(_ctx: FEntryContext) -> i32 {
            count_run!($hook);
            count_creds($which);
            0
        }
    };
}

creds_probe!(
    kprobe_ovl_override_creds,
    fentry_ovl_override_creds,
    "ovl_override_creds",
    "ovl_override_creds",
    0
);
creds_probe!(
    kprobe_ovl_revert_creds,
    fentry_ovl_revert_creds,
    "ovl_revert_creds",
    "ovl_revert_creds",
    1
);
