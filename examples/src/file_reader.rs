//! file-reader: processes that pread blocks of their own files, with their
//! own counts as ground truth (FxMark's DRBL pattern: no sharing, so any
//! loss of scaling is the filesystem's).
//!
//! Usage: file-reader --dir D [--procs P] [--block B] [--blocks N]
//!        (--reads R | --seconds S) [--out FILE]
//!
//! Each of P forked processes opens `D/file-<i>` (made with N blocks of B
//! bytes when missing, before any timing), then preads block after block
//! from it: R preads in all, or as many as fit in S seconds. The parent
//! prints (and writes to FILE) one JSON object: every process's pid,
//! preads and bytes, and the preads per second of all together.

mod args;

use args::Args;
use std::{
    ffi::CString,
    io::Write,
    time::{Duration, Instant},
};

fn main() {
    let args = Args::from_env();
    let dir = args.value("--dir").expect("--dir DIR");
    let procs: u64 = args.num("--procs", 1);
    let block: usize = args.num("--block", 4096);
    let blocks: u64 = args.num("--blocks", 64);
    let reads: Option<u64> = args.num_opt("--reads");
    let seconds: Option<f64> = args.num_opt("--seconds");
    assert!(
        reads.is_some() != seconds.is_some(),
        "give one of --reads and --seconds"
    );

    // Files first, outside the timed part.
    for i in 0..procs {
        let path = format!("{dir}/file-{i}");
        if std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0) < block as u64 * blocks {
            std::fs::write(&path, vec![0x5au8; block * blocks as usize]).expect("file written");
        }
    }
    // Results come back through a pipe, one line per child.
    let mut fds = [0i32; 2];
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let start = Instant::now();
    let mut children = Vec::new();
    for i in 0..procs {
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            unsafe { libc::close(fds[0]) };
            let path = CString::new(format!("{dir}/file-{i}")).unwrap();
            let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY) };
            assert!(fd >= 0, "open {dir}/file-{i}");
            let mut buf = vec![0u8; block];
            let (mut done, mut bytes) = (0u64, 0u64);
            let until = seconds.map(|s| Instant::now() + Duration::from_secs_f64(s));
            loop {
                if reads.is_some_and(|r| done >= r) || until.is_some_and(|u| done % 64 == 0 && Instant::now() >= u) {
                    break;
                }
                let at = (done % blocks) as i64 * block as i64;
                let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), block, at) };
                assert!(n > 0, "pread");
                done += 1;
                bytes += n as u64;
            }
            unsafe { libc::close(fd) };
            let line = format!("{} {done} {bytes}\n", std::process::id());
            unsafe { libc::write(fds[1], line.as_ptr().cast(), line.len()) };
            unsafe { libc::_exit(0) };
        }
        children.push(pid);
    }
    unsafe { libc::close(fds[1]) };
    for pid in &children {
        let mut status = 0;
        unsafe { libc::waitpid(*pid, &mut status, 0) };
    }
    let elapsed = start.elapsed().as_secs_f64();
    let mut out = String::new();
    let mut reader = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fds[0]) };
    std::io::Read::read_to_string(&mut reader, &mut out).unwrap();
    let mut rows = Vec::new();
    let mut total = 0u64;
    for line in out.lines() {
        let f: Vec<u64> = line.split_whitespace().map(|v| v.parse().unwrap()).collect();
        total += f[1];
        rows.push(format!(r#"{{"pid":{},"preads":{},"bytes":{}}}"#, f[0], f[1], f[2]));
    }
    let json = format!(
        r#"{{"procs":{procs},"block":{block},"seconds":{elapsed:.3},"preads":{total},"preads_per_s":{:.0},"processes":[{}]}}"#,
        total as f64 / elapsed,
        rows.join(",")
    );
    println!("{json}");
    if let Some(path) = args.value("--out") {
        std::fs::File::create(path)
            .and_then(|mut f| f.write_all(json.as_bytes()))
            .expect("--out written");
    }
}
