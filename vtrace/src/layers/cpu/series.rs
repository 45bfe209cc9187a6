//! The per-interval time series of every thread's CPU time (the
//! `intervals` table; per CPU, the `thread_cpus` table), and how what a
//! snapshot gave back is repaid.

use std::{collections::HashMap, hash::Hash};

use vtrace_common::state;

use super::{
    collector::CpuSnapshot,
    tables::{IntervalRow, ThreadCpuRow},
};

/// A thread's incarnation: its tid and its fork (ns since the start, 0:
/// before it), so that a tid reused while recording is two threads.
pub type ThreadKey = (u32, u64);

/// A row of a series: one key's deltas over one interval. The key is a
/// thread's incarnation, with its CPU for per-CPU rows.
pub trait SeriesRow: Clone {
    type Key: Copy + Eq + Hash + Ord;
    fn key(&self) -> Self::Key;
    fn thread(key: Self::Key) -> ThreadKey;
    /// `key` with its fork time replaced.
    fn born(key: Self::Key, born_ns: u64) -> Self::Key;
    fn new(key: Self::Key, pid: u32, span: (u64, u64), d: [u64; state::REPORTED]) -> Self;
    fn set_born(&mut self, born_ns: u64);
    /// The row's times, in `state` order.
    fn times(&mut self) -> [&mut u64; state::REPORTED];
}

impl SeriesRow for IntervalRow {
    type Key = ThreadKey;
    fn key(&self) -> ThreadKey {
        (self.tid, self.born_ns)
    }
    fn thread(key: ThreadKey) -> ThreadKey {
        key
    }
    fn born(key: ThreadKey, born_ns: u64) -> ThreadKey {
        (key.0, born_ns)
    }
    fn new((tid, born_ns): ThreadKey, pid: u32, (start_ns, end_ns): (u64, u64), d: [u64; state::REPORTED]) -> Self {
        IntervalRow {
            start_ns,
            end_ns,
            tid,
            pid,
            user_ns: d[state::USER],
            system_ns: d[state::SYSTEM],
            softirq_ns: d[state::SOFTIRQ],
            hardirq_ns: d[state::HARDIRQ],
            guest_ns: d[state::GUEST],
            idle_ns: d[state::IDLE],
            born_ns,
        }
    }
    fn set_born(&mut self, born_ns: u64) {
        self.born_ns = born_ns;
    }
    fn times(&mut self) -> [&mut u64; state::REPORTED] {
        [
            &mut self.user_ns,
            &mut self.system_ns,
            &mut self.softirq_ns,
            &mut self.hardirq_ns,
            &mut self.guest_ns,
            &mut self.idle_ns,
        ]
    }
}

/// (tid, fork, CPU).
pub type ThreadCpuKey = (u32, u64, u32);

impl SeriesRow for ThreadCpuRow {
    type Key = ThreadCpuKey;
    fn key(&self) -> ThreadCpuKey {
        (self.tid, self.born_ns, self.cpu)
    }
    fn thread(key: ThreadCpuKey) -> ThreadKey {
        (key.0, key.1)
    }
    fn born(key: ThreadCpuKey, born_ns: u64) -> ThreadCpuKey {
        (key.0, born_ns, key.2)
    }
    fn new(
        (tid, born_ns, cpu): ThreadCpuKey,
        pid: u32,
        (start_ns, end_ns): (u64, u64),
        d: [u64; state::REPORTED],
    ) -> Self {
        ThreadCpuRow {
            start_ns,
            end_ns,
            tid,
            pid,
            born_ns,
            cpu,
            user_ns: d[state::USER],
            system_ns: d[state::SYSTEM],
            softirq_ns: d[state::SOFTIRQ],
            hardirq_ns: d[state::HARDIRQ],
            guest_ns: d[state::GUEST],
            idle_ns: d[state::IDLE],
        }
    }
    fn set_born(&mut self, born_ns: u64) {
        self.born_ns = born_ns;
    }
    fn times(&mut self) -> [&mut u64; state::REPORTED] {
        [
            &mut self.user_ns,
            &mut self.system_ns,
            &mut self.softirq_ns,
            &mut self.hardirq_ns,
            &mut self.guest_ns,
            &mut self.idle_ns,
        ]
    }
}

// The rows' `times` list user, system, softirq, hardirq, guest and idle: `state`'s order.
const _: () = assert!(
    state::USER == 0
        && state::SYSTEM == 1
        && state::SOFTIRQ == 2
        && state::HARDIRQ == 3
        && state::GUEST == 4
        && state::IDLE == 5
);

/// Per-interval deltas of each key's totals. A snapshot charges a running
/// thread the time its CPU has pending, which the kernel side may trim when
/// the thread switches out (the scheduler's own slice length, the tick split
/// shifting): a total can go down between snapshots. What went down is owed
/// and taken from that key's next increases (its last rows, if none come),
/// so each key's rows sum to its final total, as the threads table says.
pub struct Series<R: SeriesRow> {
    last_at: Option<u64>,
    last: HashMap<R::Key, [u64; state::REPORTED]>,
    owed: HashMap<R::Key, [u64; state::REPORTED]>,
    pub rows: Vec<R>,
}

impl<R: SeriesRow> Default for Series<R> {
    fn default() -> Self {
        Series {
            last_at: None,
            last: HashMap::new(),
            owed: HashMap::new(),
            rows: Vec::new(),
        }
    }
}

/// A CLOCK_MONOTONIC time as ns since the recording started (0 stays 0:
/// unknown, or before the start).
pub(super) fn since(ns: u64, start_mono: u64) -> u64 {
    if ns == 0 {
        0
    } else {
        ns.saturating_sub(start_mono).max(1)
    }
}

impl Series<IntervalRow> {
    /// Each thread's totals in `snap`.
    pub fn push(&mut self, snap: &CpuSnapshot, start_mono: u64) {
        let totals = snap
            .threads
            .iter()
            .map(|(tid, t)| ((*tid, since(t.born_ns, start_mono)), t.tgid, t.ns));
        self.push_totals(snap.at_ns, start_mono, totals);
    }
}

impl Series<ThreadCpuRow> {
    /// Each thread's totals per CPU in `snap`.
    pub fn push(&mut self, snap: &CpuSnapshot, start_mono: u64) {
        let totals = snap
            .thread_cpus
            .iter()
            .map(|(cpu, tid, t)| ((*tid, since(t.born_ns, start_mono), *cpu), t.tgid, t.ns));
        self.push_totals(snap.at_ns, start_mono, totals);
    }
}

impl<R: SeriesRow> Series<R> {
    /// Each key's totals (with its process) at `at_ns`: a row per key that grew.
    fn push_totals(
        &mut self,
        at_ns: u64,
        start_mono: u64,
        totals: impl Iterator<Item = (R::Key, u32, [u64; state::REPORTED])>,
    ) {
        let mut now: HashMap<R::Key, ([u64; state::REPORTED], u32)> = HashMap::new();
        for (key, pid, ns) in totals {
            let e = now.entry(key).or_insert(([0; state::REPORTED], pid));
            for (total, ns) in e.0.iter_mut().zip(ns) {
                *total += ns;
            }
        }
        // A thread first read before its fork time was (its per-CPU slot
        // read before its map entry, a fork racing the read) is the same
        // thread once its fork shows: its readings carry over, or its time
        // so far would count twice.
        for &key in now.keys() {
            let unborn = R::born(key, 0);
            if R::thread(key).1 != 0
                && !self.last.contains_key(&key)
                && !now.contains_key(&unborn)
                && let Some(prev) = self.last.remove(&unborn)
            {
                self.last.insert(key, prev);
                if let Some(owed) = self.owed.remove(&unborn) {
                    self.owed.insert(key, owed);
                }
                for row in self.rows.iter_mut().filter(|r| r.key() == unborn) {
                    row.set_born(R::thread(key).1);
                }
            }
        }
        let span = (
            self.last_at.unwrap_or(start_mono).saturating_sub(start_mono),
            at_ns.saturating_sub(start_mono),
        );
        let mut keys: Vec<_> = now.keys().copied().collect();
        keys.sort_unstable();
        for key in keys {
            let (cur, pid) = now[&key];
            let prev = self.last.get(&key).copied().unwrap_or_default();
            let owed = self.owed.entry(key).or_default();
            let mut d = [0u64; state::REPORTED];
            for s in 0..state::REPORTED {
                if cur[s] >= prev[s] {
                    let repaid = (cur[s] - prev[s]).min(owed[s]);
                    owed[s] -= repaid;
                    d[s] = cur[s] - prev[s] - repaid;
                } else {
                    owed[s] += prev[s] - cur[s];
                }
            }
            if d.iter().any(|&v| v > 0) {
                self.rows.push(R::new(key, pid, span, d));
            }
            self.last.insert(key, cur);
        }
        self.last_at = Some(at_ns);
    }

    /// What each key's snapshots gave back and its later intervals have
    /// not yet repaid (non-zero only).
    pub fn owed(&self) -> Vec<(R::Key, [u64; state::REPORTED])> {
        let mut owed: Vec<_> = self
            .owed
            .iter()
            .filter(|(_, o)| o.iter().any(|&v| v > 0))
            .map(|(key, o)| (*key, *o))
            .collect();
        owed.sort_unstable();
        owed
    }

    /// The rows, after the last snapshot (see [`settle`]).
    pub fn finish(&self) -> Vec<R> {
        settle(self.rows.clone(), self.owed())
    }
}

/// What is still owed comes off each key's latest rows: its rows then
/// sum to its last snapshot. (Also how a journal is settled: recording::journal.)
pub fn settle<R: SeriesRow>(
    mut rows: Vec<R>,
    owed: impl IntoIterator<Item = (R::Key, [u64; state::REPORTED])>,
) -> Vec<R> {
    for (key, mut owed) in owed {
        for row in rows.iter_mut().rev().filter(|r| r.key() == key) {
            for (s, value) in row.times().into_iter().enumerate() {
                let take = owed[s].min(*value);
                *value -= take;
                owed[s] -= take;
            }
            if owed.iter().all(|&o| o == 0) {
                break;
            }
        }
    }
    rows.retain_mut(|r| r.times().iter().any(|v| **v > 0));
    rows
}

#[cfg(test)]
mod tests {
    use vtrace_common::ThreadTimes;

    use super::*;

    /// A snapshot at `at_ns` with each thread's totals (user, system).
    fn snapshot(at_ns: u64, threads: &[(u32, u64, u64)]) -> CpuSnapshot {
        CpuSnapshot {
            at_ns,
            threads: threads
                .iter()
                .map(|&(tid, user, system)| {
                    let mut ns = [0; state::REPORTED];
                    ns[state::USER] = user;
                    ns[state::SYSTEM] = system;
                    (
                        tid,
                        ThreadTimes {
                            ns,
                            tgid: tid,
                            ..Default::default()
                        },
                    )
                })
                .collect(),
            ..Default::default()
        }
    }

    fn interval(start_ns: u64, tid: u32, user_ns: u64, system_ns: u64) -> IntervalRow {
        IntervalRow {
            start_ns,
            end_ns: start_ns + 10,
            tid,
            pid: tid,
            user_ns,
            system_ns,
            ..Default::default()
        }
    }

    fn owed(user: u64, system: u64) -> [u64; state::REPORTED] {
        let mut o = [0; state::REPORTED];
        o[state::USER] = user;
        o[state::SYSTEM] = system;
        o
    }

    /// (start, user, system) of `tid`'s rows.
    fn of(rows: &[IntervalRow], tid: u32) -> Vec<(u64, u64, u64)> {
        rows.iter()
            .filter(|r| r.tid == tid)
            .map(|r| (r.start_ns, r.user_ns, r.system_ns))
            .collect()
    }

    fn total(rows: &[IntervalRow], tid: u32) -> (u64, u64) {
        of(rows, tid)
            .iter()
            .fold((0, 0), |(u, s), &(_, user, system)| (u + user, s + system))
    }

    #[test]
    fn settle_takes_what_is_owed_from_the_latest_rows() {
        let rows = vec![
            interval(0, 1, 10, 4),
            interval(0, 2, 7, 0),
            interval(10, 1, 10, 4),
            interval(20, 1, 10, 0),
        ];
        let settled = settle(rows, [((1, 0), owed(15, 3))]);
        // User: 10 off the last row (dropped, empty), 5 off the one before;
        // system: 3 off the latest row that has any.
        assert_eq!(of(&settled, 1), [(0, 10, 4), (10, 5, 1)]);
        assert_eq!(total(&settled, 1), (30 - 15, 8 - 3));
        // Other threads untouched.
        assert_eq!(of(&settled, 2), [(0, 7, 0)]);
    }

    #[test]
    fn settle_never_goes_below_zero() {
        let rows = vec![interval(0, 1, 10, 4), interval(10, 1, 5, 0), interval(0, 2, 3, 0)];
        let settled = settle(rows, [((1, 0), owed(100, 1)), ((3, 0), owed(5, 5))]);
        // More owed than the rows hold: they go to zero, the empty ones away.
        assert_eq!(of(&settled, 1), [(0, 0, 3)]);
        // Owed by a thread with no rows: nothing to take.
        assert_eq!(of(&settled, 2), [(0, 3, 0)]);
        assert!(settle(Vec::<IntervalRow>::new(), [((1, 0), owed(1, 1))]).is_empty());
    }

    #[test]
    fn a_reused_tid_is_two_threads_with_intervals_of_their_own() {
        let mut series = Series::<IntervalRow>::default();
        // Thread 7 (there from the start) ran 10 and exited; at 25 a new
        // thread took tid 7 and ran 4, then 6: both stay in the snapshots.
        let first = |user| {
            let mut ns = [0; state::REPORTED];
            ns[state::USER] = user;
            ThreadTimes {
                ns,
                tgid: 7,
                ..Default::default()
            }
        };
        let second = |user| ThreadTimes {
            born_ns: 25,
            ..first(user)
        };
        let rows = born_start_user(
            &mut series,
            [
                (10, vec![(7, first(10))]),
                (30, vec![(7, first(10)), (7, second(4))]),
                (40, vec![(7, first(10)), (7, second(10))]),
            ],
        );
        assert_eq!(rows, [(0, 0, 10), (25, 10, 4), (25, 30, 6)]);
    }

    /// A thread read once before its fork time showed (born 0, then 8) is
    /// one thread: its 6 ns are counted once (kata.rs saw a role's
    /// intervals sum 0.5 ms over its total).
    #[test]
    fn a_thread_whose_fork_shows_late_keeps_its_intervals() {
        let mut series = Series::<IntervalRow>::default();
        let thread = |born_ns, user| {
            let mut ns = [0; state::REPORTED];
            ns[state::USER] = user;
            ThreadTimes {
                ns,
                tgid: 7,
                born_ns,
                ..Default::default()
            }
        };
        let rows = born_start_user(
            &mut series,
            [(10, vec![(7, thread(0, 2))]), (20, vec![(7, thread(8, 6))])],
        );
        assert_eq!(rows, [(8, 0, 2), (8, 10, 4)]);
    }

    /// Pushes a snapshot per (time, threads) and gives the interval rows
    /// as (born_ns, start_ns, user_ns).
    fn born_start_user<const N: usize>(
        series: &mut Series<IntervalRow>,
        snapshots: [(u64, Vec<(u32, ThreadTimes)>); N],
    ) -> Vec<(u64, u64, u64)> {
        for (at_ns, threads) in snapshots {
            series.push(
                &CpuSnapshot {
                    at_ns,
                    threads,
                    ..Default::default()
                },
                0,
            );
        }
        series
            .finish()
            .iter()
            .map(|r| (r.born_ns, r.start_ns, r.user_ns))
            .collect()
    }

    #[test]
    fn series_repays_what_a_snapshot_gave_back_from_the_next_intervals() {
        let mut series = Series::<IntervalRow>::default();
        // Thread 1 over-charged at 20 (25), trimmed at 30 (20): 5 owed,
        // repaid out of its next increase. Thread 2 grows steadily.
        for (at, t1, t2) in [(10, 10, 1), (20, 25, 2), (30, 20, 3), (40, 40, 4), (50, 50, 5)] {
            series.push(&snapshot(at, &[(1, t1, 0), (2, t2, 0)]), 0);
        }
        assert_eq!(of(&series.rows, 1), [(0, 10, 0), (10, 15, 0), (30, 15, 0), (40, 10, 0)]);
        assert!(series.owed().is_empty());
        let rows = series.finish();
        assert_eq!(total(&rows, 1), (50, 0));
        assert_eq!(total(&rows, 2), (5, 0));
        // Each row spans the interval since the previous snapshot.
        assert!(rows.iter().all(|r| r.end_ns == r.start_ns + 10));
    }

    #[test]
    fn series_settles_what_is_still_owed_at_the_end_from_the_last_rows() {
        let mut series = Series::<IntervalRow>::default();
        for (at, user, system) in [(10, 10, 10), (20, 30, 12), (30, 22, 12), (40, 22, 9)] {
            series.push(&snapshot(at, &[(1, user, system)]), 0);
        }
        assert_eq!(series.owed(), [((1, 0), owed(8, 3))]);
        let rows = series.finish();
        // The last snapshot's totals, never below zero in any row.
        assert_eq!(total(&rows, 1), (22, 9));
        assert_eq!(of(&rows, 1), [(0, 10, 9), (10, 12, 0)]);
    }
}
