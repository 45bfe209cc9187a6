//! CPU time breakdown: per state, platform role, process and thread, plus
//! softirq vectors and hard interrupts summed over CPUs.

use std::collections::BTreeMap;

use serde::Serialize;

use super::tables::{CpuRow, IntervalRow, ThreadRow};
use crate::recording::Recording;

/// Nanoseconds per state. `busy_ns` excludes idle.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StateTimes {
    pub user_ns: u64,
    pub system_ns: u64,
    pub softirq_ns: u64,
    pub hardirq_ns: u64,
    pub guest_ns: u64,
    pub idle_ns: u64,
}

impl StateTimes {
    pub fn busy_ns(&self) -> u64 {
        self.user_ns + self.system_ns + self.softirq_ns + self.hardirq_ns + self.guest_ns
    }
    /// Each state's name and time, in the order reports list them.
    pub fn named(&self) -> [(&'static str, u64); 6] {
        [
            ("user", self.user_ns),
            ("system", self.system_ns),
            ("softirq", self.softirq_ns),
            ("hardirq", self.hardirq_ns),
            ("guest", self.guest_ns),
            ("idle", self.idle_ns),
        ]
    }
    pub fn add(&mut self, o: &StateTimes) {
        self.user_ns += o.user_ns;
        self.system_ns += o.system_ns;
        self.softirq_ns += o.softirq_ns;
        self.hardirq_ns += o.hardirq_ns;
        self.guest_ns += o.guest_ns;
        self.idle_ns += o.idle_ns;
    }
    pub fn of_cpu(c: &CpuRow) -> Self {
        StateTimes {
            user_ns: c.user_ns,
            system_ns: c.system_ns,
            softirq_ns: c.softirq_ns,
            hardirq_ns: c.hardirq_ns,
            guest_ns: c.guest_ns,
            idle_ns: c.idle_ns,
        }
    }
    pub fn of_interval(i: &IntervalRow) -> Self {
        StateTimes {
            user_ns: i.user_ns,
            system_ns: i.system_ns,
            softirq_ns: i.softirq_ns,
            hardirq_ns: i.hardirq_ns,
            guest_ns: i.guest_ns,
            idle_ns: i.idle_ns,
        }
    }
    /// Sets a thread's six state columns to these.
    pub fn put_into(&self, t: &mut ThreadRow) {
        t.user_ns = self.user_ns;
        t.system_ns = self.system_ns;
        t.softirq_ns = self.softirq_ns;
        t.hardirq_ns = self.hardirq_ns;
        t.guest_ns = self.guest_ns;
        t.idle_ns = self.idle_ns;
    }
    pub fn of_thread(t: &ThreadRow) -> Self {
        StateTimes {
            user_ns: t.user_ns,
            system_ns: t.system_ns,
            softirq_ns: t.softirq_ns,
            hardirq_ns: t.hardirq_ns,
            guest_ns: t.guest_ns,
            idle_ns: t.idle_ns,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Group {
    pub platform: String,
    pub role: String,
    pub pid: Option<u32>,
    pub comm: String,
    pub threads: usize,
    #[serde(flatten)]
    pub times: StateTimes,
    pub total_ns: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct VectorTime {
    pub vector: String,
    pub ns: u64,
    pub count: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct IrqTime {
    pub irq: u32,
    pub name: String,
    pub ns: u64,
    pub count: u64,
    /// The instance whose passed-through device raised it (empty: none).
    pub instance: String,
}

#[derive(Clone, Debug)]
pub struct CpuBreakdown {
    pub wall_ns: u64,
    pub cpus: u32,
    /// All CPUs together, from the per-CPU table.
    pub total: StateTimes,
    pub by_role: Vec<Group>,
    pub by_process: Vec<Group>,
    /// Threads by busy time, descending.
    pub threads: Vec<ThreadRow>,
    pub softirq_vectors: Vec<VectorTime>,
    pub hardirqs: Vec<IrqTime>,
}

impl CpuBreakdown {
    /// wall x CPUs: the capacity percentages are taken of.
    pub fn capacity_ns(&self) -> u64 {
        self.wall_ns * self.cpus as u64
    }

    pub fn of(rec: &Recording) -> Self {
        let mut total = StateTimes::default();
        for c in rec.rows::<crate::layers::cpu::CpuRow>() {
            total.add(&StateTimes::of_cpu(c));
        }
        // A recording recovered from its journal has threads but no CPUs:
        // every ns the engine counts is some thread's (idle: tid 0's).
        if rec.rows::<crate::layers::cpu::CpuRow>().is_empty() {
            for t in rec.rows::<crate::layers::cpu::ThreadRow>() {
                total.add(&StateTimes::of_thread(t));
            }
        }
        let mut roles: BTreeMap<(String, String), Group> = BTreeMap::new();
        let mut procs: BTreeMap<u32, Group> = BTreeMap::new();
        for t in rec.rows::<crate::layers::cpu::ThreadRow>() {
            let times = StateTimes::of_thread(t);
            let g = roles
                .entry((t.owner.platform.clone(), t.owner.role.clone()))
                .or_insert_with(|| Group {
                    platform: t.owner.platform.clone(),
                    role: t.owner.role.clone(),
                    pid: None,
                    comm: String::new(),
                    threads: 0,
                    times: StateTimes::default(),
                    total_ns: 0,
                });
            g.threads += 1;
            g.times.add(&times);
            let p = procs.entry(t.owner.pid).or_insert_with(|| Group {
                platform: t.owner.platform.clone(),
                role: t.owner.role.clone(),
                pid: Some(t.owner.pid),
                comm: t.owner.comm.clone(),
                threads: 0,
                times: StateTimes::default(),
                total_ns: 0,
            });
            // The process is named after its main thread when that is seen.
            if t.tid == t.owner.pid {
                p.comm = t.owner.comm.clone();
                p.role = t.owner.role.clone();
            }
            p.threads += 1;
            p.times.add(&times);
        }
        let finish = |m: Vec<Group>| {
            let mut v: Vec<Group> = m
                .into_iter()
                .map(|mut g| {
                    g.total_ns = g.times.busy_ns();
                    g
                })
                .collect();
            v.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.role.cmp(&b.role)));
            v
        };
        let mut threads = rec.rows::<crate::layers::cpu::ThreadRow>().to_vec();
        threads.sort_by_key(|t| std::cmp::Reverse(StateTimes::of_thread(t).busy_ns()));

        let mut vectors: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for s in rec.rows::<crate::layers::cpu::SoftirqRow>() {
            let e = vectors.entry(s.vector.clone()).or_default();
            e.0 += s.ns;
            e.1 += s.count;
        }
        let mut softirq_vectors: Vec<VectorTime> = vectors
            .into_iter()
            .map(|(vector, (ns, count))| VectorTime { vector, ns, count })
            .collect();
        softirq_vectors.sort_by_key(|v| std::cmp::Reverse(v.ns));

        let mut irqs: BTreeMap<u32, IrqTime> = BTreeMap::new();
        for r in rec.rows::<crate::layers::cpu::IrqRow>() {
            let e = irqs.entry(r.irq).or_insert_with(|| IrqTime {
                irq: r.irq,
                name: r.name.clone(),
                ns: 0,
                count: 0,
                instance: r.instance.clone(),
            });
            e.ns += r.ns;
            e.count += r.count;
        }
        let mut hardirqs: Vec<IrqTime> = irqs.into_values().collect();
        hardirqs.sort_by_key(|v| std::cmp::Reverse(v.ns));

        CpuBreakdown {
            wall_ns: rec.meta.wall_ns,
            cpus: rec.meta.host.cpus,
            total,
            by_role: finish(roles.into_values().collect()),
            by_process: finish(procs.into_values().collect()),
            threads,
            softirq_vectors,
            hardirqs,
        }
    }
}
