//! rt-hog: a delay of known size for the threads that wake on its CPU.
//!
//! A SCHED_FIFO thread (priority 50) spins `--busy-us` then sleeps
//! `--idle-us`, for `--seconds`: a normal (CFS) thread that wakes while it
//! spins waits for the rest of the spin, so a wakeup at a random moment
//! waits busy² / (2 (busy + idle)) on average (500 us for 2000/2000). The
//! threads whose name starts with `--raise PREFIX` (repeatable; e.g. a VM's
//! vCPU threads) get priority 60 first, so they are never delayed.
//!
//! Usage: rt-hog [--busy-us N] [--idle-us N] [--seconds S] [--raise PREFIX]...
//! It prints `rt-hog: raised N threads` and exits when the time is up.

mod args;

use std::time::{Duration, Instant};

use args::Args;

fn fifo(tid: i32, priority: i32) -> std::io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    if unsafe { libc::sched_setscheduler(tid, libc::SCHED_FIFO, &param) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Every thread on the system whose name starts with one of `prefixes`.
fn threads_named(prefixes: &[String]) -> Vec<i32> {
    let mut out = Vec::new();
    for p in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(tasks) = std::fs::read_dir(p.path().join("task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            let comm = comm.trim_end();
            if prefixes.iter().any(|x| comm.starts_with(x.as_str()))
                && let Ok(tid) = t.file_name().to_string_lossy().parse()
            {
                out.push(tid);
            }
        }
    }
    out
}

fn main() {
    let args = Args::from_env();
    let busy = Duration::from_micros(args.num("--busy-us", 2000));
    let idle = Duration::from_micros(args.num("--idle-us", 2000));
    let seconds: f64 = args.num("--seconds", 10.0);
    let raise: Vec<String> = std::env::args()
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|w| w[0] == "--raise")
        .map(|w| w[1].clone())
        .collect();
    let raised = threads_named(&raise);
    for &tid in &raised {
        fifo(tid, 60).unwrap_or_else(|e| panic!("rt-hog: SCHED_FIFO for thread {tid}: {e}"));
    }
    println!("rt-hog: raised {} threads", raised.len());
    fifo(0, 50).unwrap_or_else(|e| panic!("rt-hog: SCHED_FIFO for itself (needs CAP_SYS_NICE): {e}"));
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    while Instant::now() < end {
        let spin = Instant::now() + busy;
        while Instant::now() < spin {
            std::hint::spin_loop();
        }
        std::thread::sleep(idle);
    }
}
