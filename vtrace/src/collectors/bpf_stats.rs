//! Self-overhead: how many times each program ran (counted by the programs
//! themselves in HOOK_RUNS, over the whole recording) and what a run costs
//! (the kernel's BPF run-time statistics, as bpftop reads them).
//!
//! Keeping the statistics on is not free: the kernel then reads the clock
//! twice around every program run. On this project's machine that alone
//! cost redis about 10 % of its throughput under the CPU layer
//! (benches/overhead.py, "vtrace cpu" beside "vtrace cpu, stats always"), so
//! by default they are on only for a window at the start of each interval:
//! ns per run comes from those windows, run counts from HOOK_RUNS. (Scaling
//! the windows' run counts instead would be biased low: the statistics slow
//! the workload down while they are on.)

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use aya::{Ebpf, maps::PerCpuArray, sys::Stats};
use vtrace_common::COUNTED_HOOKS;

/// When the kernel's BPF statistics are on (`record --self-stats`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SelfStats {
    /// On for the first tenth of each interval (at most 100 ms); totals extrapolated.
    Sampled,
    /// On for the whole recording: exact totals, at a cost per event.
    Always,
    /// Off: no run time or event counts per program.
    Off,
}

/// Switches the statistics on and off and keeps the time they were on.
pub struct StatsWindow {
    mode: SelfStats,
    window: Duration,
    on: Option<(OwnedFd, Instant)>,
    covered: Duration,
    started: Instant,
    /// Why the statistics could not be enabled, once that happened.
    pub error: Option<String>,
}

impl StatsWindow {
    /// Starts the first window (or the whole-run one).
    pub fn start(mode: SelfStats, interval: Duration) -> StatsWindow {
        let mut w = StatsWindow {
            mode,
            window: (interval / 10).min(Duration::from_millis(100)),
            on: None,
            covered: Duration::ZERO,
            started: Instant::now(),
            error: None,
        };
        w.open();
        w
    }

    fn open(&mut self) {
        if self.mode == SelfStats::Off || self.on.is_some() || self.error.is_some() {
            return;
        }
        match aya::sys::enable_stats(Stats::RunTime) {
            Ok(fd) => self.on = Some((fd, Instant::now())),
            Err(e) => self.error = Some(format!("cannot enable BPF run-time statistics: {e}")),
        }
    }

    /// Closes the window: the kernel stops timing once no one holds a stats fd.
    pub fn close(&mut self) {
        if let Some((fd, since)) = self.on.take() {
            drop(fd);
            self.covered += since.elapsed();
        }
    }

    /// At each interval tick: a new sampled window.
    pub fn tick(&mut self) {
        if self.mode == SelfStats::Sampled {
            self.open();
        }
    }

    /// When the open sampled window should close, if one is open.
    pub fn closes_at(&self) -> Option<tokio::time::Instant> {
        match (&self.on, self.mode) {
            (Some((_, since)), SelfStats::Sampled) => Some((*since + self.window).into()),
            _ => None,
        }
    }

    /// Ends the statistics when the recorded run ends (the workload exited,
    /// the duration passed): returns the share of the run they were on. It is
    /// taken over the span the windows were spread on, not vtrace's own
    /// start-up and wrap-up, where the rate of events differs.
    pub fn finish(mut self) -> f64 {
        let always = self.mode == SelfStats::Always && self.on.is_some();
        self.close();
        coverage(always, self.covered, self.started.elapsed())
    }
}

/// The share of a run of length `span` the statistics were on: all of it
/// when they were on `always`, else the time the windows `covered`, at most
/// all of it (0 for an empty span).
fn coverage(always: bool, covered: Duration, span: Duration) -> f64 {
    let span = span.as_secs_f64();
    if always {
        1.0
    } else if span > 0.0 {
        (covered.as_secs_f64() / span).min(1.0)
    } else {
        0.0
    }
}

/// The empty program [`calibrate`] attaches (vtrace-ebpf/src/runs.rs).
pub const CALIBRATION_PROGRAM: &str = "raw_stats_floor";

/// What a program run costs beyond what the kernel's statistics measure,
/// found at start-up with a program that does nothing (`raw_stats_floor`)
/// attached to task_rename while this thread renames itself to its own
/// name: a tracepoint only that call fires, on an otherwise cheap path (a
/// syscall tracepoint would also move every syscall to the slow entry path,
/// and overstate what other hooks cost).
#[derive(Clone, Copy, Debug, Default)]
pub struct Calibration {
    /// The empty program's measured run time: what the statistics' own
    /// clock reads put inside every measured span.
    pub floor_ns: f64,
    /// What the empty program really costs each call with the statistics
    /// off: the tracepoint's dispatch, which no statistic counts, and the
    /// run. A program's real cost is its measured time - floor + this.
    pub hook_ns: f64,
}

impl Calibration {
    /// From the start-up timings: ns per call of the renames with the empty
    /// program attached and without (`hooked_ns`, `bare_ns`), and the
    /// statistics' `runs` and `run_time_ns` of the empty program meanwhile.
    /// Err when it never ran.
    fn from_timings(bare_ns: f64, hooked_ns: f64, runs: u64, run_time_ns: f64) -> Result<Calibration, String> {
        if runs == 0 {
            return Err("the calibration program never ran".to_string());
        }
        Ok(Calibration {
            floor_ns: run_time_ns / runs as f64,
            // Noise can make the hooked calls the faster.
            hook_ns: (hooked_ns - bare_ns).max(0.0),
        })
    }

    /// A program's real cost per run from what the statistics measured
    /// (`run_time_ns` over `runs`): less the floor (never below zero), plus
    /// the hook's cost. 0 when it never ran.
    pub fn ns_per_run(&self, run_time_ns: u64, runs: u64) -> f64 {
        if runs == 0 {
            return 0.0;
        }
        (run_time_ns as f64 / runs as f64 - self.floor_ns).max(0.0) + self.hook_ns
    }

    /// A program's run time over the whole recording: its exact number of
    /// runs (HOOK_RUNS, `events`) times its real cost per run, measured
    /// while the statistics were on (`run_time_ns` over `runs`).
    pub fn whole_run_time_ns(&self, run_time_ns: u64, runs: u64, events: u64) -> u64 {
        (self.ns_per_run(run_time_ns, runs) * events as f64).round() as u64
    }
}

/// Measures [`Calibration`]. Each timing is the fastest of several blocks
/// of calls, so that an interrupt in one block does not count: blocks of
/// about a millisecond here, shorter than a timer tick (4 ms), so most hold
/// none. Err: why it could not be measured.
pub fn calibrate(ebpf: &mut Ebpf) -> Result<Calibration, String> {
    const CALLS: u32 = 1_000;
    const BLOCKS: usize = 7;
    let mut name = [0u8; 16];
    unsafe { libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr()) };
    let ns_per_call = || {
        (0..BLOCKS)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..CALLS {
                    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
                }
                t.elapsed().as_nanos() as f64 / CALLS as f64
            })
            .fold(f64::MAX, f64::min)
    };
    let prog: &mut aya::programs::RawTracePoint = ebpf
        .program_mut(CALIBRATION_PROGRAM)
        .ok_or("the object has no calibration program")?
        .try_into()
        .map_err(|e| format!("{e}"))?;
    prog.load().map_err(|e| format!("load: {e}"))?;
    let bare = ns_per_call();
    let link = prog.attach("task_rename").map_err(|e| format!("attach: {e}"))?;
    let hooked = ns_per_call();
    let measured = aya::sys::enable_stats(Stats::RunTime)
        .map_err(|e| format!("enable statistics: {e}"))
        .and_then(|stats| {
            let before = prog.info().map_err(|e| format!("{e}"))?;
            ns_per_call();
            let after = prog.info().map_err(|e| format!("{e}"))?;
            drop(stats);
            let runs = after.run_count().saturating_sub(before.run_count());
            let ns = after.run_time().saturating_sub(before.run_time()).as_nanos() as f64;
            Calibration::from_timings(bare, hooked, runs, ns)
        });
    let _ = prog.detach(link);
    measured
}

/// Runs the kernel skipped because the program was already running on that
/// CPU (a softirq interrupting it, say): `recursion_misses` of bpf_prog_info,
/// which aya does not expose.
pub fn recursion_misses(fd: std::os::fd::BorrowedFd<'_>) -> u64 {
    use std::os::fd::AsRawFd;
    let mut info: aya_obj::generated::bpf_prog_info = unsafe { std::mem::zeroed() };
    #[repr(C)]
    struct InfoAttr {
        bpf_fd: u32,
        info_len: u32,
        info: u64,
    }
    let attr = InfoAttr {
        bpf_fd: fd.as_raw_fd() as u32,
        info_len: std::mem::size_of_val(&info) as u32,
        info: &mut info as *mut _ as u64,
    };
    const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET_INFO_BY_FD,
            &attr,
            std::mem::size_of::<InfoAttr>(),
        )
    };
    if rc == 0 { info.recursion_misses } else { 0 }
}

/// Runs per hook over the whole recording, summed over CPUs (HOOK_RUNS,
/// indexed as [`COUNTED_HOOKS`]).
pub fn hook_runs(ebpf: &Ebpf) -> Vec<u64> {
    let Some(map) = ebpf.map("HOOK_RUNS") else {
        return Vec::new();
    };
    let Ok(runs) = PerCpuArray::<_, u64>::try_from(map) else {
        return Vec::new();
    };
    (0..COUNTED_HOOKS.len() as u32)
        .map(|i| runs.get(&i, 0).map(|v| v.iter().sum()).unwrap_or(0))
        .collect()
}

/// The hook a program counts its runs under: its name without the attach prefix.
pub fn hook_of(program: &str) -> &str {
    ["raw_", "tp_", "btf_", "kprobe_", "fentry_"]
        .iter()
        .find_map(|p| program.strip_prefix(p))
        .unwrap_or(program)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibration_from_timings() {
        // 4000 runs measured at 120 µs: 30 ns each; the hook adds 45 ns a call.
        let c = Calibration::from_timings(100.0, 145.0, 4000, 120_000.0).unwrap();
        assert_eq!((c.floor_ns, c.hook_ns), (30.0, 45.0));
        // Hooked calls measured faster than bare ones (noise): no cost, not a negative one.
        let c = Calibration::from_timings(100.0, 90.0, 10, 100.0).unwrap();
        assert_eq!((c.floor_ns, c.hook_ns), (10.0, 0.0));
        assert!(Calibration::from_timings(100.0, 145.0, 0, 0.0).is_err());
    }

    #[test]
    fn real_cost_per_run_is_measured_less_floor_plus_hook() {
        let c = Calibration {
            floor_ns: 30.0,
            hook_ns: 45.0,
        };
        // 1000 runs measured at 100 ns each: 100 - 30 + 45.
        assert_eq!(c.ns_per_run(100_000, 1000), 115.0);
        // Measured below the floor: the floor does not make it negative.
        assert_eq!(c.ns_per_run(20_000, 1000), 45.0);
        assert_eq!(c.ns_per_run(0, 0), 0.0);
        // Recordings before the calibration: as measured.
        assert_eq!(Calibration::default().ns_per_run(100_000, 1000), 100.0);
    }

    #[test]
    fn whole_run_time_is_every_run_at_the_windows_cost() {
        let c = Calibration {
            floor_ns: 30.0,
            hook_ns: 45.0,
        };
        // 1000 runs seen in the windows, 1 000 000 over the run: 115 ns each.
        assert_eq!(c.whole_run_time_ns(100_000, 1000, 1_000_000), 115_000_000);
        // Rounded to the ns: 2 runs at 1/3 ns.
        assert_eq!(Calibration::default().whole_run_time_ns(1, 3, 2), 1);
        // Never measured (statistics off): no run time, however many runs.
        assert_eq!(c.whole_run_time_ns(0, 0, 1_000_000), 0);
    }

    #[test]
    fn coverage_is_the_share_the_windows_were_on() {
        let ms = Duration::from_millis;
        assert_eq!(coverage(false, ms(100), ms(1000)), 0.1);
        assert_eq!(coverage(false, ms(0), ms(1000)), 0.0);
        // At most all of it.
        assert_eq!(coverage(false, ms(1200), ms(1000)), 1.0);
        assert_eq!(coverage(false, ms(100), ms(0)), 0.0);
        // On throughout.
        assert_eq!(coverage(true, ms(0), ms(0)), 1.0);
        assert_eq!(coverage(true, ms(500), ms(1000)), 1.0);
    }

    /// Every program the catalog can attach counts its runs: a hook missing
    /// from COUNTED_HOOKS would report 0 events.
    #[test]
    fn every_catalog_program_counts_its_runs() {
        let mut programs: Vec<&str> = crate::layers::catalog()
            .iter()
            .flat_map(|p| p.strategies.iter().map(|s| s.program()))
            .collect();
        programs.push(crate::layers::sample::PROGRAM);
        for program in programs {
            assert!(
                COUNTED_HOOKS.contains(&hook_of(program)),
                "{program}: hook {} not in COUNTED_HOOKS",
                hook_of(program)
            );
        }
    }
}
