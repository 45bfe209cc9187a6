//! vtrace as a library: record a function of this very process and print
//! its CPU split, read back from the recording it wrote.
//!
//! `embed-record OUTPUT` (as root) starts a [`Recorder`] for the CPU layer,
//! runs `work` on a thread of its own (user-space spinning and syscalls),
//! stops the recorder, and prints one JSON line: the thread's id, its run
//! time by its own /proc schedstat (ground truth), and vtrace's split.

use std::{
    sync::mpsc,
    time::{Duration, Instant},
};

use vtrace::{
    layers::{self, cpu::ThreadRow},
    record::{RecordOptions, Recorder},
};

/// Half the time spinning in user space, half in short syscalls.
fn work(for_how_long: Duration) {
    let end = Instant::now() + for_how_long;
    let mut x = 0u64;
    while Instant::now() < end {
        for i in 0..200_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
        for _ in 0..2_000 {
            unsafe { libc::getppid() };
        }
    }
    std::hint::black_box(x);
}

/// This thread's run time so far, from the kernel's scheduler (ns).
fn schedstat_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .expect("schedstat readable")
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let output = std::env::args().nth(1).unwrap_or_else(|| "embed.vtrace".into());
    let opts = RecordOptions::default()
        .layers(["cpu"])
        .output(&output)
        .duration(None)
        .interval(Duration::from_millis(250));
    let recorder = Recorder::start(opts)?;

    // The measured function runs on a thread of its own, which parks once it
    // read its own ground truth, so nothing runs on it after that reading.
    let (done_tx, done_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let worker = std::thread::spawn(move || {
        work(Duration::from_millis(1500));
        let tid = unsafe { libc::gettid() } as u32;
        done_tx.send((tid, schedstat_ns())).unwrap();
        let _ = release_rx.recv();
    });
    let (tid, truth_ns) = done_rx.recv()?;
    let outcome = recorder.stop()?;
    drop(release_tx);
    worker.join().unwrap();

    // The reader API: the recording as any later program reads it.
    let rec = layers::read(&outcome.path)?;
    let t = rec
        .rows::<ThreadRow>()
        .iter()
        .find(|t| t.tid == tid)
        .ok_or("the worker thread is missing from the recording")?;
    let total = t.user_ns + t.system_ns + t.softirq_ns + t.hardirq_ns + t.guest_ns;
    println!(
        "{{\"tid\": {tid}, \"schedstat_ns\": {truth_ns}, \"total_ns\": {total}, \"user_ns\": {}, \"system_ns\": {}, \
         \"softirq_ns\": {}, \"hardirq_ns\": {}, \"role\": \"{}\", \"recorder_role\": \"{}\", \"stopped_by\": \"{}\"}}",
        t.user_ns,
        t.system_ns,
        t.softirq_ns,
        t.hardirq_ns,
        t.owner.role,
        rec.rows::<ThreadRow>()
            .iter()
            .find(|t| t.owner.comm == "vtrace-recorder")
            .map_or("missing", |t| t.owner.role.as_str()),
        rec.meta.stopped_by
    );
    Ok(())
}
