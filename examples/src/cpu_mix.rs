//! cpu-mix: threads with known CPU behaviour, and their own ground truth.
//!
//! - `mix-spin`: a busy loop in user space (the clock is read via the vDSO, no syscalls);
//! - `mix-syscall`: reads /dev/zero in 64 KiB chunks (mostly system time);
//! - `mix-tx` / `mix-rx`: a loopback TCP stream (NET_RX softirq on the way);
//! - `mix-sleep` (only with `--only ...,sleep`): 20 000 additions, a 4 KiB
//!   write to /dev/null and a 200 us nanosleep in a loop: thousands of
//!   sleeps and wakeups, each a short slice (the case that needs every slice
//!   matched to the scheduler's clock);
//! - `mix-faults` (only with `--only ...,faults`): touches `--pages N` fresh
//!   anonymous pages (no huge pages) once each, then read(2)s /dev/zero into
//!   another N fresh pages: N faults in user mode and N in kernel mode.
//!
//! When the time is up every worker parks; the main thread then reads each
//! one's /proc/self/task/<tid>/schedstat (run time and run-queue wait, exact while it sleeps) and the
//! kernel's tick-sampled utime/stime from .../stat, prints them as JSON, and exits the process with the workers still parked.
//!
//! Usage: cpu-mix [--seconds S] [--out FILE] [--only spin,syscall,net,sleep,faults] [--spinners N] [--pages N]
//! (`--only`: just those workers, default spin,syscall,net; `net` is the rx/tx pair; `--spinners`:
//! that many `mix-spin` threads, more than the CPUs to make them queue).

mod args;

use args::Args;
use std::{
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    sync::{Arc, Barrier, mpsc},
    thread,
    time::{Duration, Instant},
};

fn gettid() -> u32 {
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

fn set_name(name: &str) {
    let c = std::ffi::CString::new(name).unwrap();
    unsafe { libc::prctl(libc::PR_SET_NAME, c.as_ptr() as libc::c_ulong, 0, 0, 0) };
}

/// (run time ns, run-queue wait ns, timeslices) from /proc/self/task/<tid>/schedstat.
fn schedstat(tid: u32) -> (u64, u64, u64) {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).unwrap_or_default();
    let f: Vec<u64> = s.split_whitespace().filter_map(|v| v.parse().ok()).collect();
    let field = |i: usize| f.get(i).copied().unwrap_or(0);
    (field(0), field(1), field(2))
}

/// (utime, stime) in clock ticks from /proc/self/task/<tid>/stat: the kernel's
/// own tick-sampled user/system split, scaled to the thread's run time.
fn utime_stime(tid: u32) -> (u64, u64) {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap_or_default();
    // Fields after the parenthesised comm: state is field 3, utime 14, stime 15.
    let rest = s.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    (f.first().copied().unwrap_or(0), f.get(1).copied().unwrap_or(0))
}

/// (minflt, majflt) from /proc/self/task/<tid>/stat: the kernel's own count
/// of the page faults the thread took (fields 10 and 12).
fn faults(tid: u32) -> (u64, u64) {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap_or_default();
    let rest = s.rsplit_once(')').map_or("", |(_, r)| r);
    // Fields after the parenthesised comm: state is field 3.
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| f.get(n - 3).and_then(|v| v.parse().ok()).unwrap_or(0);
    (field(10), field(12))
}

/// `pages` fresh anonymous pages, never backed by a huge page (one fault a page).
fn fresh_pages(pages: usize) -> &'static mut [u8] {
    let len = pages * 4096;
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED, "mmap");
        libc::madvise(p, len, libc::MADV_NOHUGEPAGE);
        std::slice::from_raw_parts_mut(p as *mut u8, len)
    }
}

/// The spinning thread's work: a function of its own (not inlined), so a
/// flamegraph of cpu-mix has a known hot function.
#[inline(never)]
fn spin_hot(mut x: u64) -> u64 {
    for i in 0..10_000u64 {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
    }
    x
}

fn main() {
    let args = Args::from_env();
    let seconds: f64 = args.num("--seconds", 3.0);
    let out = args.value("--out");
    let run_for = Duration::from_secs_f64(seconds);
    let only = args.value("--only");
    let only = only.unwrap_or_else(|| "spin,syscall,net".into());
    let wanted = |kind: &str| only.split(',').any(|k| k == kind);
    let spinners: usize = args.num("--spinners", 1);
    let pages: usize = args.num("--pages", 1000);
    let workers = [
        ("spin", spinners),
        ("syscall", 1),
        ("net", 2),
        ("sleep", 1),
        ("faults", 1),
    ]
    .iter()
    .filter(|(k, _)| wanted(k))
    .map(|(_, n)| n)
    .sum::<usize>();

    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let addr = listener.local_addr().unwrap();
    // done: every worker reports its tid and parks; release: main lets them exit.
    let release = Arc::new(Barrier::new(workers + 1));
    let (done_tx, done_rx) = mpsc::channel::<(&'static str, u32, u64)>();

    let worker = |name: &'static str, work: Box<dyn FnOnce(Instant) -> u64 + Send>| {
        let release = release.clone();
        let done_tx = done_tx.clone();
        // A small stack: glibc madvise()s a finished thread's unused stack,
        // whose TLB shootdown IPIs would be CPU time after the ground truth was read.
        thread::Builder::new()
            .stack_size(128 * 1024)
            .spawn(move || {
                set_name(name);
                let units = work(Instant::now() + run_for);
                done_tx.send((name, gettid(), units)).unwrap();
                release.wait();
            })
            .expect("spawn worker")
    };

    let mut handles = Vec::new();
    for _ in 0..if wanted("spin") { spinners } else { 0 } {
        handles.push(worker(
            "mix-spin",
            Box::new(|until| {
                let mut x: u64 = 0;
                while Instant::now() < until {
                    x = spin_hot(x);
                }
                std::hint::black_box(x)
            }),
        ));
    }
    if wanted("syscall") {
        handles.push(worker(
            "mix-syscall",
            Box::new(|until| {
                let mut f = std::fs::File::open("/dev/zero").unwrap();
                let mut buf = vec![0u8; 64 * 1024];
                let mut reads = 0;
                while Instant::now() < until {
                    f.read_exact(&mut buf).unwrap();
                    reads += 1;
                }
                reads
            }),
        ));
    }
    if wanted("sleep") {
        handles.push(worker(
            "mix-sleep",
            Box::new(|until| {
                let mut null = std::fs::OpenOptions::new().write(true).open("/dev/null").unwrap();
                let page = [1u8; 4096];
                let mut x: u64 = 0;
                let mut loops = 0;
                while Instant::now() < until {
                    for i in 0..20_000u64 {
                        x = std::hint::black_box(x.wrapping_add(i));
                    }
                    null.write_all(&page).unwrap();
                    thread::sleep(Duration::from_micros(200));
                    loops += 1;
                }
                std::hint::black_box(x);
                loops
            }),
        ));
    }
    if wanted("faults") {
        handles.push(worker(
            "mix-faults",
            Box::new(move |_until| {
                // User mode: one write a page.
                let touched = fresh_pages(pages);
                for page in touched.chunks_mut(4096) {
                    page[0] = 1;
                }
                // Kernel mode: the kernel fills fresh pages for read(2).
                let filled = fresh_pages(pages);
                let mut zero = std::fs::File::open("/dev/zero").unwrap();
                zero.read_exact(filled).unwrap();
                pages as u64
            }),
        ));
    }
    if wanted("net") {
        handles.push(worker(
            "mix-rx",
            Box::new(move |_until| {
                let (mut s, _) = listener.accept().unwrap();
                let mut buf = vec![0u8; 64 * 1024];
                let mut total = 0u64;
                loop {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break total,
                        Ok(n) => total += n as u64,
                    }
                }
            }),
        ));
        handles.push(worker(
            "mix-tx",
            Box::new(move |until| {
                let mut s = TcpStream::connect(addr).unwrap();
                let buf = vec![7u8; 16 * 1024];
                let mut total = 0u64;
                while Instant::now() < until {
                    s.write_all(&buf).unwrap();
                    total += buf.len() as u64;
                    // Leave CPU to the others: a stream, not a saturating flood.
                    if total.is_multiple_of(4 << 20) {
                        thread::sleep(Duration::from_millis(2));
                    }
                }
                total
            }),
        ));
    }
    drop(done_tx);

    let mut rows = Vec::new();
    for _ in 0..workers {
        let (name, tid, units) = done_rx.recv().expect("worker finished");
        rows.push((name, tid, units));
    }
    // Give the last one time to reach the barrier and sleep there: a running
    // thread's schedstat lags until the scheduler next updates it.
    thread::sleep(Duration::from_millis(100));
    // Every worker is parked at the barrier now: their schedstat is final.
    let json_rows: Vec<String> = rows
        .iter()
        .map(|(name, tid, units)| {
            let (ns, run_delay, slices) = schedstat(*tid);
            let (utime, stime) = utime_stime(*tid);
            let (minflt, majflt) = faults(*tid);
            format!(
                r#"{{"name":"{name}","tid":{tid},"schedstat_ns":{ns},"run_delay_ns":{run_delay},"timeslices":{slices},"units":{units},"utime_ticks":{utime},"stime_ticks":{stime},"minflt":{minflt},"majflt":{majflt}}}"#
            )
        })
        .collect();
    let json = format!(
        r#"{{"pid":{},"threads":[{}]}}"#,
        std::process::id(),
        json_rows.join(",")
    );
    match out {
        Some(path) => std::fs::write(path, json).expect("write --out"),
        None => println!("{json}"),
    }
    // Let the workers finish (cheaply: small stacks) while this thread keeps
    // the address space, whose teardown then falls to it, not to a worker.
    release.wait();
    for h in handles {
        h.join().unwrap();
    }
}
