//! File syscalls.

use crate::*;

/// File syscalls counted per process, syscall and filesystem (the fs layer).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FsKey {
    pub tgid: u32,
    /// The x86-64 syscall number ([`fs_op`]).
    pub nr: u32,
    /// `s_magic` of the superblock the call went to (0: not resolved).
    pub magic: u64,
}

/// Calls of one [`FsKey`]: bytes moved (read/write family), failed calls,
/// and the entry -> exit latency of every call.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsStats {
    pub bytes: u64,
    pub errors: u64,
    pub latency: LatencyHist,
}

/// A thread inside a file syscall: when it entered, which call, and the
/// superblock resolved at entry (from its fd, or where its path starts).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsPending {
    pub start_ns: u64,
    pub magic: u64,
    pub nr: u32,
    pub _pad: u32,
}

/// The file syscalls the fs layer follows (x86-64 numbers) and how each
/// finds its filesystem.
pub mod fs_op {
    pub const READ: u32 = 0;
    pub const WRITE: u32 = 1;
    pub const OPEN: u32 = 2;
    pub const CLOSE: u32 = 3;
    pub const STAT: u32 = 4;
    pub const FSTAT: u32 = 5;
    pub const LSTAT: u32 = 6;
    pub const PREAD64: u32 = 17;
    pub const PWRITE64: u32 = 18;
    pub const READV: u32 = 19;
    pub const WRITEV: u32 = 20;
    pub const FSYNC: u32 = 74;
    pub const FDATASYNC: u32 = 75;
    pub const GETDENTS64: u32 = 217;
    pub const OPENAT: u32 = 257;
    pub const NEWFSTATAT: u32 = 262;
    pub const PREADV: u32 = 295;
    pub const PWRITEV: u32 = 296;
    pub const PREADV2: u32 = 327;
    pub const PWRITEV2: u32 = 328;
    pub const STATX: u32 = 332;
    pub const OPENAT2: u32 = 437;

    /// How a followed call finds its filesystem.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Target {
        /// Its first argument is a file descriptor.
        Fd,
        /// `(dirfd, path, ...)`: the directory the path starts from.
        DirfdPath,
        /// `(path, ...)`: the working or root directory.
        Path,
    }

    /// How `nr` finds its filesystem; `None` for a call not followed.
    #[inline(always)]
    pub const fn target(nr: u32) -> Option<Target> {
        match nr {
            READ | WRITE | CLOSE | FSTAT | PREAD64 | PWRITE64 | READV | WRITEV | FSYNC | FDATASYNC | GETDENTS64
            | PREADV | PWRITEV | PREADV2 | PWRITEV2 => Some(Target::Fd),
            OPENAT | NEWFSTATAT | STATX | OPENAT2 => Some(Target::DirfdPath),
            OPEN | STAT | LSTAT => Some(Target::Path),
            _ => None,
        }
    }

    /// Calls whose return value is a byte count.
    pub const fn moves_bytes(nr: u32) -> bool {
        matches!(
            nr,
            READ | WRITE | PREAD64 | PWRITE64 | READV | WRITEV | PREADV | PWRITEV | PREADV2 | PWRITEV2
        )
    }

    /// Calls whose return value is a new file descriptor.
    pub const fn opens(nr: u32) -> bool {
        matches!(nr, OPEN | OPENAT | OPENAT2)
    }

    /// The call's name as strace writes it.
    pub const fn name(nr: u32) -> &'static str {
        match nr {
            READ => "read",
            WRITE => "write",
            OPEN => "open",
            CLOSE => "close",
            STAT => "stat",
            FSTAT => "fstat",
            LSTAT => "lstat",
            PREAD64 => "pread64",
            PWRITE64 => "pwrite64",
            READV => "readv",
            WRITEV => "writev",
            FSYNC => "fsync",
            FDATASYNC => "fdatasync",
            GETDENTS64 => "getdents64",
            OPENAT => "openat",
            NEWFSTATAT => "newfstatat",
            PREADV => "preadv",
            PWRITEV => "pwritev",
            PREADV2 => "preadv2",
            PWRITEV2 => "pwritev2",
            STATX => "statx",
            OPENAT2 => "openat2",
            _ => "other",
        }
    }
}

/// The fs layer's offsets.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsConfig {
    /// The fs layer's walk from the current task to a superblock:
    /// task_struct `files`, `fs`; files_struct `fdt`; fdtable `max_fds`,
    /// `fd`; file `f_inode`; inode `i_sb`; super_block `s_magic`;
    /// fs_struct `pwd.dentry`, `root.dentry`; dentry `d_sb`; pt_regs `si`
    /// (a syscall's second argument), `orig_ax` (its number at exit).
    pub task_files: u32,
    pub task_fs: u32,
    pub files_fdt: u32,
    pub fdtable_max_fds: u32,
    pub fdtable_fd: u32,
    pub file_inode: u32,
    pub inode_sb: u32,
    pub sb_magic: u32,
    pub fs_pwd_dentry: u32,
    pub fs_root_dentry: u32,
    pub dentry_sb: u32,
}
