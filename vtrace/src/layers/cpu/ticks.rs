//! How user and system time are told apart with `--cpu-split ticks`: the
//! kernel leaves each thread's process-context time unsplit (no syscall
//! hooks), and it is divided here in the ratio of the kernel's own tick
//! samples (utime/stime, what top and /proc report), each CPU's by
//! /proc/stat.

use std::collections::HashMap;

use vtrace_common::{CpuState, ThreadTimes, state, thread_flag};

/// A thread's (user, system) weights from its tick samples. The kernel charges
/// a tick that lands in the guest to the thread's utime: guest time vtrace
/// measured exactly is taken out first. Ticks that land in an interrupt count
/// as stime, but are left in: the softirqs that run right after each tick are
/// never sampled, so taking all measured interrupt time out would overcorrect
/// (on a loopback receiver it tripled the user share).
fn tick_weights(t: &ThreadTimes) -> (u64, u64) {
    let guest = if t.flags & thread_flag::GUEST_TRACED != 0 {
        t.ns[state::GUEST]
    } else {
        0
    };
    (t.user_tick_ns.saturating_sub(guest), t.system_tick_ns)
}

/// Divides `unsplit` in the ratio `user : system`; all system when both are 0.
fn divide(unsplit: u64, (user, system): (u64, u64)) -> (u64, u64) {
    let total = user as u128 + system as u128;
    if total == 0 {
        return (0, unsplit);
    }
    let u = (unsplit as u128 * user as u128 / total) as u64;
    (u, unsplit - u)
}

/// Moves each thread's unsplit process-context time into user and system, in
/// the ratio of its own tick samples; a thread that ran too little to be
/// sampled takes its process's ratio, then that of all threads. Kernel threads
/// have no user mode.
pub fn split_by_ticks(threads: &mut [(u32, ThreadTimes)]) {
    let mut per_process: HashMap<u32, (u64, u64)> = HashMap::new();
    let mut everyone = (0u64, 0u64);
    for (_, t) in threads.iter() {
        let (u, s) = tick_weights(t);
        let p = per_process.entry(t.tgid).or_default();
        p.0 += u;
        p.1 += s;
        everyone.0 += u;
        everyone.1 += s;
    }
    for (_, t) in threads.iter_mut() {
        let unsplit = std::mem::take(&mut t.unsplit_ns);
        if unsplit == 0 {
            continue;
        }
        let weights = if t.flags & thread_flag::KTHREAD != 0 {
            (0, 1)
        } else {
            [tick_weights(t), per_process[&t.tgid], everyone]
                .into_iter()
                .find(|&(u, s)| u + s > 0)
                .unwrap_or((0, 1))
        };
        let (user, system) = divide(unsplit, weights);
        t.ns[state::USER] += user;
        t.ns[state::SYSTEM] += system;
    }
}

/// Moves each CPU's unsplit time into user and system in the ratio of its
/// /proc/stat ticks since `start` (all CPUs' ratio for a CPU with none).
pub fn split_cpus_by_ticks(cpus: &mut [CpuState], start: &[(u64, u64)], now: &[(u64, u64)]) {
    let delta = |cpu: usize| {
        let (s, n) = (
            start.get(cpu).copied().unwrap_or_default(),
            now.get(cpu).copied().unwrap_or_default(),
        );
        (n.0.saturating_sub(s.0), n.1.saturating_sub(s.1))
    };
    let all = (0..cpus.len()).map(delta).fold((0, 0), |a, d| (a.0 + d.0, a.1 + d.1));
    for (cpu, st) in cpus.iter_mut().enumerate() {
        let unsplit = std::mem::take(&mut st.cpu_ns[state::UNRESOLVED]);
        let own = delta(cpu);
        let (user, system) = divide(unsplit, if own.0 + own.1 > 0 { own } else { all });
        st.cpu_ns[state::USER] += user;
        st.cpu_ns[state::SYSTEM] += system;
    }
}

/// Per CPU (user + nice, system) ticks from /proc/stat, in CPU order.
pub fn cpu_user_system_ticks() -> Vec<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    parse_cpu_ticks(&text)
}

fn parse_cpu_ticks(text: &str) -> Vec<(u64, u64)> {
    let mut rows: Vec<(usize, (u64, u64))> = text
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let cpu: usize = f.next()?.strip_prefix("cpu")?.parse().ok()?;
            let v: Vec<u64> = f.take(3).filter_map(|x| x.parse().ok()).collect();
            (v.len() == 3).then(|| (cpu, (v[0] + v[1], v[2])))
        })
        .collect();
    rows.sort_unstable_by_key(|r| r.0);
    let n = rows.last().map_or(0, |r| r.0 + 1);
    let mut out = vec![(0, 0); n];
    for (cpu, t) in rows {
        out[cpu] = t;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread(tgid: u32, unsplit: u64, user_ticks: u64, system_ticks: u64) -> ThreadTimes {
        ThreadTimes {
            tgid,
            unsplit_ns: unsplit,
            user_tick_ns: user_ticks,
            system_tick_ns: system_ticks,
            ..ThreadTimes::default()
        }
    }

    #[test]
    fn splits_by_own_then_process_then_all_ticks() {
        let mut kthread = thread(3, 500, 0, 0);
        kthread.flags = thread_flag::KTHREAD;
        let mut vcpu = thread(4, 1000, 8_000_000, 4_000_000);
        vcpu.flags = thread_flag::GUEST_TRACED;
        vcpu.ns[state::GUEST] = 4_000_000;
        let mut threads = vec![
            (10, thread(1, 1000, 12_000_000, 4_000_000)),
            // Never sampled: takes process 1's ratio.
            (11, thread(1, 400, 0, 0)),
            // Process 2 never sampled at all: everyone's ratio (12+4 : 4+4).
            (20, thread(2, 700, 0, 0)),
            (30, kthread),
            (40, vcpu),
        ];
        split_by_ticks(&mut threads);
        let us = |i: usize| (threads[i].1.ns[state::USER], threads[i].1.ns[state::SYSTEM]);
        assert_eq!(us(0), (750, 250));
        assert_eq!(us(1), (300, 100));
        assert_eq!(us(2), (466, 234));
        assert_eq!(us(3), (0, 500));
        // Its 4 ms in the guest explain half its user ticks.
        assert_eq!(us(4), (500, 500));
        assert!(threads.iter().all(|(_, t)| t.unsplit_ns == 0));
    }

    #[test]
    fn parses_proc_stat_cpu_lines() {
        let text = "cpu  10 1 5 100 0 0 0 0 0 0\ncpu1 7 0 3 40 0 0 0 0 0 0\ncpu0 3 1 2 60 0 0 0 0 0 0\nintr 5\n";
        assert_eq!(parse_cpu_ticks(text), vec![(4, 2), (7, 3)]);
    }
}
