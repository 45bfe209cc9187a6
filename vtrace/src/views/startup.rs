//! How each platform instance that started while recording came up (a Kata
//! sandbox around `ctr run`, a VM the recorded command starts): milestones
//! and the phases between them, each with the CPU every role used.
//!
//! Milestones come from three layers' tables, so this join sits above them:
//! - the recorded command's fork, and the first thread of each of the
//!   instance's roles at its fork (the threads table's `born_ns`: exact);
//! - the guest's first run: the first interval in which a vCPU thread of the
//!   instance had guest time (the CPU layer's intervals);
//! - the guest's first accepted vsock connection, per port (the vsock
//!   layer: a response from the guest, exact): for Kata, port 1024, its
//!   agent became reachable;
//! - the first frame each device the instance owns received (the net
//!   layer's intervals; for a tap, the first frame its VM sent: a host's
//!   stack may send into a tap before its VM runs).
//!
//! A milestone known to an interval stands at the interval's end (it had
//! happened by then) and says where the interval began.
//!
//! A phase's CPU is the interval rows' time shared out by how much of each
//! interval the phase covers (`record --interval` sets how fine that is);
//! the phases run from the recording's start to its end, so each role's
//! phases sum to its total over the intervals.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::{
    layers::{
        cpu::{IntervalRow, ThreadIndex, ThreadRow, analysis::StateTimes},
        net::{NetDeviceRow, NetIntervalRow},
        vsock::VsockRow,
    },
    platforms::ROLES_LEFT_OUT,
    recording::Recording,
    report_model::{Figure, FigureKind, Section, Series, Table, col, left, secs},
};

/// CPU of threads outside the instance (vtrace's own and stressors' left out).
pub const ELSEWHERE: &str = "elsewhere";

/// The vsock port Kata's agent listens on (its `AGENT_VSOCK_PORT`).
const KATA_AGENT_PORT: u32 = 1024;

#[derive(Clone, Debug, Serialize)]
pub struct Milestone {
    pub what: String,
    /// ns since the recording started: when it happened (a fork), or the
    /// end of the interval it happened in.
    pub at_ns: u64,
    /// The earliest it can have happened: `at_ns` when exact, else its
    /// interval's start (or the vCPU's birth, for the guest's first run).
    pub earliest_ns: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Phase {
    pub from: String,
    pub to: String,
    pub start_ns: u64,
    pub end_ns: u64,
    /// CPU ns (every state but idle) by the instance's role, and
    /// [`ELSEWHERE`] for everything else on the machine.
    pub cpu_ns: BTreeMap<String, u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct InstanceStart {
    pub platform: String,
    pub instance: String,
    pub milestones: Vec<Milestone>,
    pub phases: Vec<Phase>,
}

/// The start of every instance whose threads were all born during the
/// recording (one running before it gains threads too: it did not start).
pub fn starts(rec: &Recording) -> Vec<InstanceStart> {
    let threads = rec.rows::<ThreadRow>();
    let intervals = rec.rows::<IntervalRow>();
    let mut instances: Vec<(&str, &str)> = threads
        .iter()
        .filter(|t| !t.owner.instance.is_empty())
        .map(|t| (t.owner.platform.as_str(), t.owner.instance.as_str()))
        .collect();
    instances.sort();
    instances.dedup();
    instances.retain(|(_, instance)| {
        threads
            .iter()
            .filter(|t| t.owner.instance == *instance)
            .all(|t| t.born_ns > 0)
    });
    instances
        .into_iter()
        .map(|(platform, instance)| {
            let milestones = milestones(rec, threads, intervals, instance);
            let phases = phases(&milestones, rec.meta.wall_ns, threads, intervals, instance);
            InstanceStart {
                platform: platform.into(),
                instance: instance.into(),
                milestones,
                phases,
            }
        })
        .collect()
}

fn milestones(rec: &Recording, threads: &[ThreadRow], intervals: &[IntervalRow], instance: &str) -> Vec<Milestone> {
    let mine: Vec<&ThreadRow> = threads.iter().filter(|t| t.owner.instance == instance).collect();
    let mut out = vec![Milestone {
        what: "recording started".into(),
        at_ns: 0,
        earliest_ns: 0,
    }];
    // The recorded command's fork: vtrace's own start-up comes before it.
    if let Some(w) = &rec.meta.workload
        && let Some(t) = threads.iter().find(|t| t.tid == w.pid && t.born_ns > 0)
    {
        out.push(Milestone {
            what: "command started".into(),
            at_ns: t.born_ns,
            earliest_ns: t.born_ns,
        });
    }
    // The first thread of each role (every one was born during the run).
    let mut first: BTreeMap<&str, u64> = BTreeMap::new();
    for t in &mine {
        let e = first.entry(&t.owner.role).or_insert(u64::MAX);
        *e = (*e).min(t.born_ns);
    }
    for (role, &at) in &first {
        out.push(Milestone {
            what: format!("first {role} thread"),
            at_ns: at,
            earliest_ns: at,
        });
    }
    // The guest's first run.
    let vcpu_born = first.get("vcpu").copied();
    let vcpus: Vec<u32> = mine.iter().filter(|t| t.owner.role == "vcpu").map(|t| t.tid).collect();
    if let Some(i) = intervals
        .iter()
        .filter(|i| i.guest_ns > 0 && vcpus.contains(&i.tid))
        .min_by_key(|i| i.start_ns)
    {
        out.push(Milestone {
            what: "guest first ran".into(),
            at_ns: i.end_ns,
            earliest_ns: i.start_ns.max(vcpu_born.unwrap_or(0)).min(i.end_ns),
        });
    }
    // The guest accepting a vsock connection, first per port: a response
    // its host's vhost-vsock worker (one of the instance's threads) took.
    let mut accepted: BTreeMap<u32, u64> = BTreeMap::new();
    for r in rec.rows::<VsockRow>() {
        if r.owner.instance == instance && r.direction == "received" && r.op == "response" && r.first_ns > 0 {
            let e = accepted.entry(r.port).or_insert(u64::MAX);
            *e = (*e).min(r.first_ns);
        }
    }
    let platform = mine.first().map_or("", |t| t.owner.platform.as_str());
    for (port, at) in accepted {
        let agent = if platform == "kata" && port == KATA_AGENT_PORT {
            ": agent reachable"
        } else {
            ""
        };
        out.push(Milestone {
            what: format!("guest accepted vsock port {port}{agent}"),
            at_ns: at,
            earliest_ns: at,
        });
    }
    // The first frame each device the instance owns received.
    let devices: Vec<&NetDeviceRow> = rec
        .rows::<NetDeviceRow>()
        .iter()
        .filter(|d| d.instance == instance)
        .collect();
    for d in devices {
        if let Some(i) = rec
            .rows::<NetIntervalRow>()
            .iter()
            .filter(|i| i.netns == d.netns && i.ifindex == d.ifindex && i.hop == "receive" && i.packets > 0)
            .min_by_key(|i| i.start_ns)
        {
            out.push(Milestone {
                what: format!("first frame received by {}", d.name),
                at_ns: i.end_ns,
                earliest_ns: i.start_ns,
            });
        }
    }
    out.sort_by_key(|m| (m.at_ns, m.earliest_ns));
    out
}

fn phases(
    milestones: &[Milestone],
    wall_ns: u64,
    threads: &[ThreadRow],
    intervals: &[IntervalRow],
    instance: &str,
) -> Vec<Phase> {
    // Milestones at the same moment (a frame through a veth's two ends and a
    // tap in one interval) open and close one phase together.
    let mut moments: Vec<(u64, Vec<&str>)> = Vec::new();
    for m in milestones {
        match moments.last_mut() {
            Some((at, names)) if *at == m.at_ns => names.push(&m.what),
            _ => moments.push((m.at_ns, vec![&m.what])),
        }
    }
    let mut phases: Vec<Phase> = moments
        .iter()
        .enumerate()
        .map(|(k, (at, names))| {
            let next = moments.get(k + 1);
            Phase {
                from: joined(names),
                to: next.map_or("recording ended".into(), |(_, n)| joined(n)),
                start_ns: *at,
                end_ns: next.map_or(wall_ns.max(*at), |(n, _)| *n),
                cpu_ns: BTreeMap::new(),
            }
        })
        .collect();
    let index = ThreadIndex::new(threads);
    for i in intervals {
        let Some(t) = index.interval_thread(i.tid, i.born_ns) else {
            continue;
        };
        let key = if t.owner.instance == instance {
            t.owner.role.as_str()
        } else if ROLES_LEFT_OUT.contains(&t.owner.role.as_str()) {
            continue;
        } else {
            ELSEWHERE
        };
        let cpu = StateTimes::of_interval(i).busy_ns();
        // A thread ran only between its fork and its exit: an interval it
        // was born or ended in is shared out over that part alone.
        let from = i.start_ns.max(t.born_ns);
        let to = if t.exited_ns > 0 {
            i.end_ns.min(t.exited_ns)
        } else {
            i.end_ns
        };
        let (from, to) = if from < to { (from, to) } else { (i.start_ns, i.end_ns) };
        if cpu == 0 || to <= from {
            continue;
        }
        // By overlap, the last phase taking what rounding left.
        let overlapping: Vec<usize> = (0..phases.len())
            .filter(|&p| phases[p].start_ns < to && phases[p].end_ns > from)
            .collect();
        let mut left = cpu;
        for (n, &p) in overlapping.iter().enumerate() {
            let share = if n + 1 == overlapping.len() {
                left
            } else {
                let overlap = phases[p].end_ns.min(to) - phases[p].start_ns.max(from);
                ((cpu as u128 * overlap as u128) / (to - from) as u128) as u64
            };
            left -= share.min(left);
            *phases[p].cpu_ns.entry(key.to_string()).or_default() += share;
        }
    }
    phases
}

/// Names of milestones at one moment, their common words said once:
/// "first frame received by vtl-kata0, eth0".
fn joined(names: &[&str]) -> String {
    let first = names[0];
    let mut common = first.len();
    for n in &names[1..] {
        common = common.min(first.bytes().zip(n.bytes()).take_while(|(a, b)| a == b).count());
    }
    // Back to a word boundary.
    let common = first[..common].rfind(' ').map_or(0, |i| i + 1);
    let rest: Vec<&str> = names.iter().map(|n| &n[common..]).collect();
    format!("{}{}", &first[..common], rest.join(", "))
}

/// The section: per instance, its milestones and phases (text, JSON
/// `starts`) and the phases' CPU by role stacked (HTML).
pub fn section(rec: &Recording) -> Option<Section> {
    let starts = starts(rec);
    if starts.is_empty() {
        return None;
    }
    let mut s = Section::new("start", "Instances that started while recording");
    for st in &starts {
        let mut t = Table::new(
            format!(
                "Start of {}: milestones (a thread's fork and a vsock connection are exact; the guest's first run and \
                 a device's first frame are known to an interval: by its end, not before its start)",
                st.instance
            ),
            vec![col("by(s)", 9), col("from(s)", 9), left("milestone", 0).gap(2)],
        );
        for m in &st.milestones {
            t.row(vec![
                secs(m.at_ns),
                if m.earliest_ns == m.at_ns {
                    "exact".into()
                } else {
                    secs(m.earliest_ns)
                },
                m.what.clone(),
            ]);
        }
        s.table(t);
        let roles: Vec<String> = role_columns(&st.phases);
        let phase_width = st
            .phases
            .iter()
            .map(|p| p.from.len() + p.to.len() + 4)
            .max()
            .unwrap_or(10)
            .min(100);
        let mut columns = vec![left("phase", phase_width), col("ms", 9)];
        columns.extend(roles.iter().map(|r| col(format!("{r}(ms)"), (r.len() + 5).max(9))));
        let mut t = Table::new(
            format!("Phases of {}'s start: duration and CPU by role (ms)", st.instance),
            columns,
        );
        for p in &st.phases {
            let mut row = vec![
                format!("{} -> {}", p.from, p.to),
                format!("{:.1}", (p.end_ns - p.start_ns) as f64 / 1e6),
            ];
            row.extend(
                roles
                    .iter()
                    .map(|r| format!("{:.1}", p.cpu_ns.get(r).copied().unwrap_or(0) as f64 / 1e6)),
            );
            t.row(row);
        }
        s.table(t);
        s.figure(Figure {
            title: format!("CPU of each phase of {}'s start, by role", st.instance),
            value_label: "CPU (ms), roles stacked".into(),
            kind: FigureKind::StackedBars {
                categories: st
                    .phases
                    .iter()
                    .map(|p| format!("{} ({:.2} s)", p.to, (p.end_ns - p.start_ns) as f64 / 1e9))
                    .collect(),
                series: roles
                    .iter()
                    .map(|r| Series {
                        name: r.clone(),
                        values: st
                            .phases
                            .iter()
                            .map(|p| p.cpu_ns.get(r).copied().unwrap_or(0) as f64 / 1e6)
                            .collect(),
                    })
                    .collect(),
            },
        });
        for p in &st.phases {
            let phase = format!("{} -> {}", p.from, p.to);
            s.metric(
                "start_phase_ns",
                (p.end_ns - p.start_ns) as f64,
                "ns",
                &[("instance", &st.instance), ("phase", &phase)],
            );
        }
    }
    s.json("starts", &starts);
    Some(s)
}

/// The roles with CPU in any phase, the instance's first (by total, largest
/// first), then everything else.
fn role_columns(phases: &[Phase]) -> Vec<String> {
    let mut total: BTreeMap<&str, u64> = BTreeMap::new();
    for p in phases {
        for (r, ns) in &p.cpu_ns {
            *total.entry(r).or_default() += ns;
        }
    }
    let mut roles: Vec<(&str, u64)> = total.into_iter().filter(|(_, ns)| *ns > 0).collect();
    roles.sort_by_key(|(r, ns)| (*r == ELSEWHERE, std::cmp::Reverse(*ns)));
    roles.into_iter().map(|(r, _)| r.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::Owner;

    #[test]
    fn milestones_at_one_moment_share_their_words() {
        assert_eq!(joined(&["guest first ran"]), "guest first ran");
        assert_eq!(
            joined(&["first frame received by vtl-kata0", "first frame received by eth0"]),
            "first frame received by vtl-kata0, eth0"
        );
        assert_eq!(
            joined(&["first vmm thread", "guest first ran"]),
            "first vmm thread, guest first ran"
        );
    }

    fn thread(tid: u32, role: &str, instance: &str, born_ns: u64, exited_ns: u64) -> ThreadRow {
        ThreadRow {
            tid,
            owner: Owner {
                pid: tid,
                role: role.into(),
                instance: instance.into(),
                ..Default::default()
            },
            born_ns,
            exited_ns,
            ..Default::default()
        }
    }

    fn interval(tid: u32, start_ns: u64, end_ns: u64, system_ns: u64) -> IntervalRow {
        IntervalRow {
            start_ns,
            end_ns,
            tid,
            pid: tid,
            system_ns,
            ..Default::default()
        }
    }

    #[test]
    fn a_phase_holds_a_threads_cpu_only_after_its_fork_and_every_role_sums_to_its_intervals() {
        let threads = [
            thread(1, "shim", "kata:x", 100, 0),
            thread(2, "vmm", "kata:x", 250, 0),
            thread(3, "app", "", 0, 150),
            thread(4, "vtrace", "", 0, 0),
        ];
        let milestones = [
            Milestone {
                what: "recording started".into(),
                at_ns: 0,
                earliest_ns: 0,
            },
            Milestone {
                what: "first shim thread".into(),
                at_ns: 100,
                earliest_ns: 100,
            },
            Milestone {
                what: "first vmm thread".into(),
                at_ns: 250,
                earliest_ns: 250,
            },
        ];
        let intervals = [
            interval(1, 0, 200, 50),
            interval(1, 200, 400, 40),
            interval(2, 200, 400, 30),
            interval(3, 0, 200, 60),
            interval(4, 0, 200, 99),
        ];
        let p = phases(&milestones, 400, &threads, &intervals, "kata:x");
        assert_eq!(p.len(), 3);
        assert_eq!(
            (p[2].start_ns, p[2].end_ns, p[2].to.as_str()),
            (250, 400, "recording ended")
        );
        // The shim was born at 100: nothing of it before.
        assert_eq!(p[0].cpu_ns.get("shim"), None);
        assert_eq!(p[1].cpu_ns["shim"], 50 + 40 * 50 / 200);
        // The vmm only after 250; the app ended at 150; vtrace left out.
        assert_eq!(p[2].cpu_ns["vmm"], 30);
        assert_eq!(p[0].cpu_ns[ELSEWHERE] + p[1].cpu_ns[ELSEWHERE], 60);
        assert_eq!(p[0].cpu_ns[ELSEWHERE], 60 * 100 / 150);
        let sum = |role: &str| p.iter().map(|x| x.cpu_ns.get(role).copied().unwrap_or(0)).sum::<u64>();
        assert_eq!((sum("shim"), sum("vmm"), sum("vtrace")), (90, 30, 0));
    }
}
