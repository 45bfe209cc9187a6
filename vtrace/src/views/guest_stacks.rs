//! The host's sampled stacks with each guest's own under its VM's vCPU
//! threads (sample, guest, CPU layers): a sample that stopped a vCPU in its
//! guest (`[guest mode]`) shows only the host's side of the exit, so where
//! the guest's agent sampled stacks too, the host's guest-mode samples of
//! that VM are shared out over the guest's busy stacks, by how often the
//! guest saw each (its idle task's are left out: a halted vCPU is out of
//! guest mode, so the host never samples it there).
//!
//! Samples carry no time, so the guest's recording's window is applied by
//! proportion: of a vCPU thread's guest-mode samples, the share its
//! guest-mode time inside that window is of its whole (CPU layer
//! intervals) goes to the guest's stacks; the rest (the agent's start-up
//! before its probes attached, above all) stays under `[outside the guest's
//! recording]`. A guest's samples do not say which CPU ran them: in a guest
//! of several CPUs, each thread's samples go to each vCPU in the share of
//! its time the guest counted on that vCPU's CPU (`thread_cpus`), so a
//! thread pinned to one vCPU is under that vCPU alone.

use std::collections::BTreeMap;

use crate::{
    layers::{
        cpu::{CpuRow, ThreadCpuRow},
        guest::{
            summary::{in_window, vcpu_index, vcpu_threads, vmm_of},
            tables::GuestLinkRow,
        },
        sample::{
            GUEST_MODE_FRAME, SampleRow,
            flamegraph::{as_lines, folded_stack, frames, svg_of},
        },
    },
    recording::Recording,
    report_model::Section,
};

/// One guest whose stacks go under its VM's vCPU threads.
struct GuestStacks {
    name: String,
    vmm_pid: u32,
    /// Per vCPU thread (host tid): its share of the guest's stacks.
    vcpus: BTreeMap<u32, VcpuStacks>,
    /// The guest's busy stacks, `comm;frames`, with their samples.
    stacks: BTreeMap<String, u64>,
    /// Its idle task's samples, left out.
    idle: u64,
}

/// What one vCPU thread's guest-mode samples are shared over.
struct VcpuStacks {
    /// Its guest-mode time inside the guest's recording, and in all (ns).
    in_window_ns: u64,
    guest_mode_ns: u64,
    /// The guest's busy stacks weighted for this vCPU: as sampled, or, in
    /// a guest of several CPUs, each thread's by its time on this vCPU's
    /// CPU (parts per million of its samples).
    stacks: BTreeMap<String, u64>,
}

/// How one VM's guest-mode samples were shared (JSON `samples_in_guest`).
#[derive(Debug, PartialEq, serde::Serialize)]
pub struct Nested {
    pub guest: String,
    pub vmm_pid: u32,
    /// The host's samples of the VM's threads in guest mode.
    pub host_guest_mode_samples: u64,
    /// Of them, those shared over the guest's stacks: of each vCPU's, in
    /// proportion to its guest-mode time inside the guest's recording.
    pub shared_samples: u64,
    /// The vCPUs' guest-mode time inside the guest's recording, and in all.
    pub guest_mode_in_window_ns: u64,
    pub guest_mode_ns: u64,
    /// The guest's own samples it was shared out by (its idle task's left out).
    pub guest_busy_samples: u64,
    pub guest_idle_samples: u64,
}

fn guests_with_stacks(rec: &Recording, lines: bool) -> Vec<GuestStacks> {
    let vcpus = vcpu_threads(rec);
    let mut out = Vec::new();
    for link in rec.rows::<GuestLinkRow>() {
        let Some(vmm_pid) = vmm_of(link, &vcpus) else {
            continue;
        };
        let Some(Ok(guest)) = rec.guests.iter().find(|g| g.name == link.guest).map(|g| &g.recording) else {
            continue;
        };
        let mut stacks: BTreeMap<String, u64> = BTreeMap::new();
        // (stack, tid, samples) of the busy ones.
        let mut by_thread: Vec<(String, u32, u64)> = Vec::new();
        let mut idle = 0;
        for s in guest.rows::<SampleRow>() {
            if s.tid == 0 {
                idle += s.count;
                continue;
            }
            let key = format!("{};{}", s.owner.comm.replace(';', ":"), frames(&s.stack, lines));
            *stacks.entry(key.clone()).or_default() += s.count;
            by_thread.push((key, s.tid, s.count));
        }
        if stacks.is_empty() {
            continue;
        }
        let on_cpus = ThreadsOnCpus::of(guest);
        let window = (link.attached_ns, link.attached_ns + guest.meta.wall_ns);
        let vcpus = vcpus
            .iter()
            .filter(|t| t.owner.pid == vmm_pid)
            .map(|t| {
                let weighted = match (&on_cpus, vcpu_index(t)) {
                    (Some(on), Some(cpu)) => {
                        let mut w: BTreeMap<String, u64> = BTreeMap::new();
                        for (key, tid, n) in &by_thread {
                            *w.entry(key.clone()).or_default() += on.weight(*tid, cpu, *n);
                        }
                        w
                    }
                    _ => stacks.clone(),
                };
                let stacks_here = VcpuStacks {
                    in_window_ns: in_window(rec, t.tid, window).0,
                    guest_mode_ns: in_window(rec, t.tid, (0, u64::MAX)).0,
                    stacks: weighted,
                };
                (t.tid, stacks_here)
            })
            .collect();
        out.push(GuestStacks {
            name: link.guest.clone(),
            vmm_pid,
            vcpus,
            stacks,
            idle,
        });
    }
    out
}

/// A guest of several CPUs: each thread's busy time per CPU (its
/// `thread_cpus` rows) and in all.
struct ThreadsOnCpus {
    per_cpu: BTreeMap<(u32, u32), u64>,
    total: BTreeMap<u32, u64>,
    cpus: u64,
}

impl ThreadsOnCpus {
    fn of(guest: &Recording) -> Option<ThreadsOnCpus> {
        let cpus = guest.rows::<CpuRow>().len() as u64;
        let rows = guest.rows::<ThreadCpuRow>();
        if cpus < 2 || rows.is_empty() {
            return None;
        }
        let mut on = ThreadsOnCpus {
            per_cpu: BTreeMap::new(),
            total: BTreeMap::new(),
            cpus,
        };
        for r in rows {
            let busy = r.user_ns + r.system_ns + r.softirq_ns + r.hardirq_ns;
            *on.per_cpu.entry((r.tid, r.cpu)).or_default() += busy;
            *on.total.entry(r.tid).or_default() += busy;
        }
        Some(on)
    }

    /// `samples` of thread `tid` weighted for CPU `cpu`, in parts per
    /// million: its share of time there (an equal share where its time is unknown).
    fn weight(&self, tid: u32, cpu: u32, samples: u64) -> u64 {
        const PPM: u128 = 1_000_000;
        let total = self.total.get(&tid).copied().unwrap_or(0);
        let here = self.per_cpu.get(&(tid, cpu)).copied().unwrap_or(0);
        let w = if total == 0 {
            samples as u128 * PPM / self.cpus as u128
        } else {
            samples as u128 * PPM * here as u128 / total as u128
        };
        w as u64
    }
}

/// `total` shared over `weights` in proportion, in whole samples that sum
/// to it (largest remainders).
fn shares(total: u64, weights: &BTreeMap<String, u64>) -> Vec<(&str, u64)> {
    let sum: u64 = weights.values().sum();
    if sum == 0 {
        return Vec::new();
    }
    let mut parts: Vec<(&str, u64, u128)> = weights
        .iter()
        .map(|(k, &w)| {
            let exact = total as u128 * w as u128;
            (k.as_str(), (exact / sum as u128) as u64, exact % sum as u128)
        })
        .collect();
    let mut left = total - parts.iter().map(|p| p.1).sum::<u64>();
    let mut order: Vec<usize> = (0..parts.len()).collect();
    order.sort_by(|&a, &b| parts[b].2.cmp(&parts[a].2).then(a.cmp(&b)));
    for i in order {
        if left == 0 {
            break;
        }
        parts[i].1 += 1;
        left -= 1;
    }
    parts.into_iter().filter(|p| p.1 > 0).map(|(k, n, _)| (k, n)).collect()
}

/// The recording's folded stacks ([`folded_stack`]'s roots), each guest's
/// under its VM's `[guest mode]` frames, and how each VM's were shared.
pub fn folded(rec: &Recording, lines: bool) -> (Vec<String>, Vec<Nested>) {
    let guests = guests_with_stacks(rec, lines);
    let mut merged: BTreeMap<String, u64> = BTreeMap::new();
    // Per guest and vCPU thread, its guest-mode stacks (ending in the frame).
    let mut in_guest: Vec<BTreeMap<(u32, String), u64>> = vec![BTreeMap::new(); guests.len()];
    for s in rec.rows::<SampleRow>() {
        let key = folded_stack(s, lines);
        let guest = guests
            .iter()
            .position(|g| g.vmm_pid == s.owner.pid && g.vcpus.contains_key(&s.tid));
        match guest {
            Some(i) if s.stack.ends_with(GUEST_MODE_FRAME) => *in_guest[i].entry((s.tid, key)).or_default() += s.count,
            _ => *merged.entry(key).or_default() += s.count,
        }
    }
    let mut nested = Vec::new();
    for (g, host) in guests.iter().zip(in_guest) {
        let host_samples: u64 = host.values().sum();
        let mut shared = 0;
        for ((tid, stack), n) in host {
            let v = &g.vcpus[&tid];
            let inside = match v.guest_mode_ns {
                0 => 0,
                all => (n as u128 * v.in_window_ns.min(all) as u128 / all as u128) as u64,
            };
            shared += inside;
            for (guest_stack, share) in shares(inside, &v.stacks) {
                *merged
                    .entry(format!("{stack};[guest {}];{guest_stack}", g.name))
                    .or_default() += share;
            }
            if n > inside {
                *merged.entry(format!("{stack};{OUTSIDE}")).or_default() += n - inside;
            }
        }
        nested.push(Nested {
            guest: g.name.clone(),
            vmm_pid: g.vmm_pid,
            host_guest_mode_samples: host_samples,
            shared_samples: shared,
            guest_mode_in_window_ns: g.vcpus.values().map(|v| v.in_window_ns).sum(),
            guest_mode_ns: g.vcpus.values().map(|v| v.guest_mode_ns).sum(),
            guest_busy_samples: g.stacks.values().sum(),
            guest_idle_samples: g.idle,
        });
    }
    (as_lines(merged), nested)
}

/// Under `[guest mode]`: the share of a VM's guest-mode samples from
/// outside its guest's recording.
const OUTSIDE: &str = "[outside the guest's recording]";

/// The flamegraph's subtitle's end where guests' stacks are nested.
const NESTED: &str = "; each guest's own stacks under its VM's [guest mode], shared by its samples";

/// The flamegraph with the guests' stacks nested ([`folded`]).
pub fn svg(rec: &Recording, lines: bool) -> Result<String, String> {
    let (folded, nested) = folded(rec, lines);
    svg_of(&folded, &rec.title(), if nested.is_empty() { "" } else { NESTED })
}

/// Puts the nested flamegraph in the sample section in place of the host's
/// alone, with a line and JSON `samples_in_guest` per guest, where a guest
/// sampled its stacks.
pub fn join(sections: &mut [Section], rec: &Recording) {
    let Some(s) = sections.iter_mut().find(|s| s.id == "sample") else {
        return;
    };
    let (folded, nested) = folded(rec, false);
    if nested.is_empty() {
        return;
    }
    if let Ok(svg) = svg_of(&folded, &rec.title(), NESTED) {
        let picture = crate::layers::sample::flamegraph::without_script(&svg);
        match s
            .blocks
            .iter_mut()
            .find(|b| matches!(b, crate::report_model::Block::Picture(_)))
        {
            Some(b) => *b = crate::report_model::Block::Picture(picture),
            None => s.picture(picture),
        }
    }
    s.lines(nested.iter().map(|n| {
        format!(
            "guest {} (VMM pid {}): of the host's {} samples of its vCPUs in guest mode, {} ({:.1} of {:.1} s in guest mode fell inside its recording) shared over its own {} busy samples ({} idle left out)",
            n.guest,
            n.vmm_pid,
            n.host_guest_mode_samples,
            n.shared_samples,
            n.guest_mode_in_window_ns as f64 / 1e9,
            n.guest_mode_ns as f64 / 1e9,
            n.guest_busy_samples,
            n.guest_idle_samples
        )
    }));
    s.json("samples_in_guest", &nested);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::cpu::{IntervalRow, ThreadRow};

    #[test]
    fn a_share_is_whole_samples_in_proportion_that_sum_to_the_total() {
        let w: BTreeMap<String, u64> = [("a", 2), ("b", 1), ("c", 1)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        assert_eq!(shares(8, &w), vec![("a", 4), ("b", 2), ("c", 2)]);
        // 3.5, 1.75, 1.75: b's and c's remainders are the larger.
        assert_eq!(shares(7, &w), vec![("a", 3), ("b", 2), ("c", 2)]);
        assert_eq!(shares(1, &w), vec![("a", 1)]);
        assert!(shares(5, &BTreeMap::new()).is_empty());
    }

    fn sample(pid: u32, tid: u32, comm: &str, role: &str, stack: &str, count: u64) -> SampleRow {
        SampleRow {
            owner: crate::recording::Owner {
                pid,
                comm: comm.into(),
                platform: "qemu-kvm".into(),
                role: role.into(),
                ..Default::default()
            },
            tid,
            stack: stack.into(),
            count,
        }
    }

    /// The VM's guest-mode samples go under `[guest mode]` to the guest's
    /// busy stacks in proportion, the idle task's left out, as far as its
    /// vCPU's guest mode fell inside the guest's recording (3 of 4 here);
    /// its other samples, and another process's in guest mode, stay as
    /// they were.
    #[test]
    fn a_vms_guest_mode_samples_are_shared_over_the_guests_busy_stacks() {
        let mut guest = Recording::default();
        guest.meta.wall_ns = 1_000_000_000;
        guest.tables.put(vec![
            sample(7, 7, "redis-server", "app", "main;read", 3),
            sample(9, 9, "ksoftirqd/0", "kernel", "net_rx_action_[k]", 1),
            sample(0, 0, "swapper/0", "idle", "do_idle_[k]", 50),
        ]);
        let mut host = Recording::default();
        host.tables.put(vec![
            sample(
                100,
                101,
                "CPU 0/KVM",
                "vcpu",
                &format!("ioctl;vcpu_run_[k];{GUEST_MODE_FRAME}"),
                8,
            ),
            sample(100, 101, "CPU 0/KVM", "vcpu", "ioctl;handle_exit_[k]", 2),
            sample(200, 201, "other", "vcpu", &format!("ioctl;{GUEST_MODE_FRAME}"), 5),
        ]);
        let interval = |start_ns: u64, guest_ns: u64| IntervalRow {
            start_ns,
            end_ns: start_ns + 1_000_000_000,
            tid: 101,
            pid: 100,
            guest_ns,
            ..Default::default()
        };
        host.tables
            .put(vec![interval(0, 250_000_000), interval(1_000_000_000, 750_000_000)]);
        host.tables.put(vec![ThreadRow {
            tid: 101,
            owner: crate::recording::Owner {
                pid: 100,
                role: "vcpu".into(),
                ..Default::default()
            },
            ..Default::default()
        }]);
        host.tables.put(vec![GuestLinkRow {
            guest: "vm1".into(),
            vmm_pid: 100,
            attached_ns: 1_000_000_000,
            state: "complete".into(),
            ..Default::default()
        }]);
        host.guests.push(crate::recording::GuestPart {
            name: "vm1".into(),
            recording: Ok(guest),
        });
        let (lines, nested) = folded(&host, false);
        let root = "qemu-kvm/vcpu;host;CPU 0/KVM;ioctl;vcpu_run_[k];[guest mode];[guest vm1]";
        assert_eq!(
            lines,
            vec![
                "qemu-kvm/vcpu;host;CPU 0/KVM;ioctl;handle_exit_[k] 2".to_string(),
                format!("{root};ksoftirqd/0;net_rx_action_[k] 2"),
                format!("{root};redis-server;main;read 4"),
                format!("qemu-kvm/vcpu;host;CPU 0/KVM;ioctl;vcpu_run_[k];[guest mode];{OUTSIDE} 2"),
                "qemu-kvm/vcpu;host;other;ioctl;[guest mode] 5".to_string(),
            ]
        );
        assert_eq!(
            nested,
            vec![Nested {
                guest: "vm1".into(),
                vmm_pid: 100,
                host_guest_mode_samples: 8,
                shared_samples: 6,
                guest_mode_in_window_ns: 750_000_000,
                guest_mode_ns: 1_000_000_000,
                guest_busy_samples: 4,
                guest_idle_samples: 50,
            }]
        );
    }

    /// A guest of two CPUs: each vCPU thread's guest-mode samples go to the
    /// stacks of the guest threads that ran on its CPU (redis-server on CPU
    /// 1 alone, ksoftirqd on CPU 0 alone).
    #[test]
    fn each_vcpus_samples_go_to_the_threads_that_ran_on_its_cpu() {
        let mut guest = Recording::default();
        guest.meta.wall_ns = 2_000_000_000;
        guest.tables.put(vec![
            sample(7, 7, "redis-server", "app", "main;read", 3),
            sample(9, 9, "ksoftirqd/0", "kernel", "net_rx_action_[k]", 1),
        ]);
        guest.tables.put(vec![
            CpuRow {
                cpu: 0,
                ..Default::default()
            },
            CpuRow {
                cpu: 1,
                ..Default::default()
            },
        ]);
        let on = |tid: u32, cpu: u32| ThreadCpuRow {
            tid,
            cpu,
            end_ns: 1,
            system_ns: 10,
            ..Default::default()
        };
        guest.tables.put(vec![on(7, 1), on(9, 0)]);
        let mut host = Recording::default();
        let mode = format!("ioctl;{GUEST_MODE_FRAME}");
        host.tables.put(vec![
            sample(100, 101, "CPU 0/KVM", "vcpu", &mode, 4),
            sample(100, 102, "CPU 1/KVM", "vcpu", &mode, 6),
        ]);
        let interval = |tid: u32| IntervalRow {
            end_ns: 2_000_000_000,
            tid,
            pid: 100,
            guest_ns: 1_000_000,
            ..Default::default()
        };
        host.tables.put(vec![interval(101), interval(102)]);
        let vcpu = |tid: u32, comm: &str| ThreadRow {
            tid,
            owner: crate::recording::Owner {
                pid: 100,
                comm: comm.into(),
                role: "vcpu".into(),
                ..Default::default()
            },
            ..Default::default()
        };
        host.tables.put(vec![vcpu(101, "CPU 0/KVM"), vcpu(102, "CPU 1/KVM")]);
        host.tables.put(vec![GuestLinkRow {
            guest: "vm1".into(),
            vmm_pid: 100,
            state: "complete".into(),
            ..Default::default()
        }]);
        host.guests.push(crate::recording::GuestPart {
            name: "vm1".into(),
            recording: Ok(guest),
        });
        let (lines, _) = folded(&host, false);
        let root = |cpu: u32| format!("qemu-kvm/vcpu;host;CPU {cpu}/KVM;ioctl;{GUEST_MODE_FRAME};[guest vm1]");
        assert_eq!(
            lines,
            vec![
                format!("{};ksoftirqd/0;net_rx_action_[k] 4", root(0)),
                format!("{};redis-server;main;read 6", root(1)),
            ]
        );
    }
}
