//! Each thread's guest time as the kernel's tick sampling counts it
//! (/proc's guest_time): what the exact guest split is checked against.

use std::{
    collections::HashMap,
    fs,
    time::{Duration, Instant},
};

use crate::collectors::procfs::{self, TaskStat};

/// How often every task is read: between, only the threads known to have
/// guest time are (a VM's vCPUs), at each interval. A vCPU thread born
/// after the start is found within this; one born and gone within it is
/// missed. Reading every task at each interval (250 ms) took most of the
/// recorder's CPU in a TCG guest: hundreds of /proc files a tick.
const EVERY_TASK_EVERY: Duration = Duration::from_secs(1);

/// guest_time of every thread at the start and at its last sighting.
pub struct GuestSampler {
    first: HashMap<u32, u64>,
    last: HashMap<u32, u64>,
    /// When every task was last read.
    every_task_at: Instant,
}

impl GuestSampler {
    pub fn new(at_start: &HashMap<(u32, u32), TaskStat>) -> Self {
        let first: HashMap<u32, u64> = at_start.iter().map(|((_, tid), s)| (*tid, s.guest_ticks)).collect();
        GuestSampler {
            last: first.clone(),
            first,
            every_task_at: Instant::now(),
        }
    }

    /// At an interval: the threads with guest time, and every task once
    /// [`EVERY_TASK_EVERY`] has passed.
    pub fn sample(&mut self) {
        if self.every_task_at.elapsed() >= EVERY_TASK_EVERY {
            return self.sample_every_task();
        }
        let guests: Vec<u32> = self
            .last
            .iter()
            .filter(|(_, ticks)| **ticks > 0)
            .map(|(tid, _)| *tid)
            .collect();
        for tid in guests {
            if let Some(s) = fs::read_to_string(format!("/proc/{tid}/stat"))
                .ok()
                .as_deref()
                .and_then(procfs::parse_stat)
            {
                self.last.insert(tid, s.guest_ticks);
            }
        }
    }

    /// Every task (at the recording's end too).
    pub fn sample_every_task(&mut self) {
        self.every_task_at = Instant::now();
        for ((_, tid), s) in procfs::scan_tasks() {
            if s.guest_ticks > 0 || self.last.contains_key(&tid) {
                self.last.insert(tid, s.guest_ticks);
            }
        }
    }

    pub fn deltas(&self) -> HashMap<u32, u64> {
        self.last
            .iter()
            .filter_map(|(tid, &last)| {
                let d = last.saturating_sub(self.first.get(tid).copied().unwrap_or(0));
                (d > 0).then_some((*tid, d))
            })
            .collect()
    }
}
