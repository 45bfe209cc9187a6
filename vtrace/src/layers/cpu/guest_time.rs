//! Each thread's guest time as the kernel's tick sampling counts it
//! (/proc's guest_time): what the exact guest split is checked against.

use std::collections::HashMap;

use crate::collectors::procfs::{self, TaskStat};

/// guest_time of every thread at the start and at its last sighting.
pub struct GuestSampler {
    first: HashMap<u32, u64>,
    last: HashMap<u32, u64>,
}

impl GuestSampler {
    pub fn new(at_start: &HashMap<(u32, u32), TaskStat>) -> Self {
        let first: HashMap<u32, u64> = at_start.iter().map(|((_, tid), s)| (*tid, s.guest_ticks)).collect();
        GuestSampler {
            last: first.clone(),
            first,
        }
    }

    pub fn sample(&mut self) {
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
