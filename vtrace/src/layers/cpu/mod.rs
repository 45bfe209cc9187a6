//! The CPU layer: the attribution engine every other figure is charged to.
//! CPU time per thread, process, role and CPU, split into user / system /
//! softirq / hardirq / guest / idle (vtrace-ebpf/src/account/ keeps the
//! per-CPU state machine; `collector.rs` reads it).

pub mod analysis;
pub mod collector;
mod guest_time;
pub mod index;
mod irqs;
pub mod journal;
pub mod metrics;
mod ownership;
pub mod probes;
pub mod rows;
mod selection;
mod series;
pub mod summary;
pub mod tables;
pub mod ticks;

use std::collections::HashMap;

use aya::Ebpf;
use vtrace_common::{Config, thread_flag};

pub use collector::{CpuSplit, monotonic_ns};
pub use index::ThreadIndex;
pub use tables::{CpuRow, IntervalRow, IrqRow, SoftirqRow, ThreadCpuRow, ThreadRow};

use self::{
    collector::{CpuCollector, CpuSnapshot},
    guest_time::GuestSampler,
    selection::Selection,
    series::Series,
};
use super::{Attached, Collector, Emit, End, Layer, LayerOutput, Request, Setup, SwitchGroup};
use crate::probes::offsets::{self, KernelLayout};
use crate::{
    Error, Result,
    collectors::procfs::{self, TaskStat},
    probes::ProbeSpec,
    recording::{Overhead, TableKind},
};
use journal::{Journal, ThreadIdentity};

pub struct CpuLayer;

impl Layer for CpuLayer {
    fn name(&self) -> &'static str {
        "cpu"
    }
    /// Always: every other layer's rows are attributed through its threads.
    fn wanted(&self, _asked: &Request) -> bool {
        true
    }
    fn switches(&self) -> Option<SwitchGroup> {
        Some(SwitchGroup::of::<CpuOptions>())
    }
    fn cost_mode(&self, asked: &Request) -> Vec<String> {
        match asked.switches.get::<CpuOptions>().cpu_split {
            CpuSplit::Syscalls => vec!["exact split".into()],
            CpuSplit::Ticks => Vec::new(),
        }
    }
    fn catalog(&self) -> &'static [ProbeSpec] {
        probes::CPU
    }
    fn offsets(&self, k: &KernelLayout, o: &mut Config) {
        o.cpu.task_pid = k.member("task_struct", "pid");
        o.cpu.task_tgid = k.member("task_struct", "tgid");
        o.cpu.task_flags = k.member("task_struct", "flags");
        o.cpu.task_runtime = k.nested("task_struct", "se", "sched_entity", "sum_exec_runtime");
        o.cpu.task_utime = k.member("task_struct", "utime");
        o.cpu.task_stime = k.member("task_struct", "stime");
        o.cpu.task_start_time = k.member("task_struct", "start_time");
        o.cpu.task_cfs_rq = k.nested("task_struct", "se", "sched_entity", "cfs_rq");
        o.cpu.cfs_rq_rq = k.member("cfs_rq", "rq");
        o.cpu.rq_curr = k.member("rq", "curr");
        o.cpu.tp_switch_prev_state = k.tracepoint("sched", "sched_switch", "prev_state");
        o.cpu.tp_switch_next_pid = k.tracepoint("sched", "sched_switch", "next_pid");
        o.cpu.tp_fork_child_pid = k.tracepoint("sched", "sched_process_fork", "child_pid");
        o.cpu.tp_irq_irq = k.tracepoint("irq", "irq_handler_entry", "irq");
        o.cpu.tp_irq_name = k.tracepoint("irq", "irq_handler_entry", "name");
        o.cpu.irqaction_name = k.member("irqaction", "name");
        o.cpu.tp_softirq_vec = k.tracepoint("irq", "softirq_entry", "vec");
        // The syscall hooks read a tun fd's number (tun_fds_on).
        offsets::syscall_args(k, o);
    }
    fn configure(&self, setup: &Setup, config: &mut Config) {
        config.cpu.tick_split_on = (setup.asked.switches.get::<CpuOptions>().cpu_split == CpuSplit::Ticks) as u32;
    }
    /// With the tick split the syscall hooks only serve tun fds.
    fn probes(&self, _setup: &Setup, config: &Config) -> Result<Vec<ProbeSpec>> {
        let syscall_hooks = syscall_hooks(config);
        Ok(probes::CPU
            .iter()
            .filter(|p| p.layer != "syscall" || syscall_hooks)
            .copied()
            .collect())
    }
    fn tables(&self) -> Vec<TableKind> {
        vec![
            TableKind::of::<ThreadRow>(),
            TableKind::of::<CpuRow>(),
            TableKind::of::<SoftirqRow>(),
            TableKind::of::<IrqRow>(),
            TableKind::of::<IntervalRow>(),
            TableKind::of::<ThreadCpuRow>(),
        ]
    }
    fn losses(&self) -> &'static [super::Loss] {
        &[
            super::Loss {
                key: "cpu.thread_map_overflows",
                meaning: "context switches whose thread found the per-thread map full (its time kept under tid 4294967295)",
            },
            super::Loss {
                key: "cpu.state_repairs",
                meaning: "interrupts whose exit event was missed, closed at the next syscall or switch",
            },
            super::Loss {
                key: "cpu.untraced_switches",
                meaning: "context switches no sched_switch event reported (each slice is still bounded by its thread's scheduler clock)",
            },
        ]
    }
    fn summarize(&self, rec: &crate::recording::Recording, top: usize) -> crate::report_model::Section {
        summary::section(rec, top)
    }
    fn metrics(&self, tables: &crate::recording::TableSet, out: &mut crate::exposition::Samples) {
        metrics::metrics(tables, out);
    }
    fn start(&self, ebpf: &mut Ebpf, setup: &Setup, config: &Config) -> Result<Box<dyn Collector>> {
        let options = setup.asked.switches.get::<CpuOptions>();
        let split = options.cpu_split;
        let engine = CpuCollector::new(ebpf, split, options.thread_cpus)?;
        let tasks_at_start = procfs::scan_tasks();
        Ok(Box::new(CpuRecorder {
            // `vtrace serve` writes nothing, the journal included.
            journal: if setup.asked.live {
                None
            } else {
                Some(Journal::create(setup.staging)?)
            },
            engine,
            guest: GuestSampler::new(&tasks_at_start),
            tasks_at_start,
            series: Series::default(),
            cpu_series: Series::default(),
            start_mono: setup.start_mono,
            split,
            syscall_hooks: syscall_hooks(config),
            last: None,
        }))
    }
}

fn syscall_hooks(config: &Config) -> bool {
    config.cpu.tick_split_on == 0 || config.net.tun_fds_on != 0
}

struct CpuRecorder {
    /// Each interval's rows as they come (crash safety: recording::journal);
    /// none in `vtrace serve`, which keeps no series either.
    journal: Option<Journal>,
    engine: CpuCollector,
    tasks_at_start: HashMap<(u32, u32), TaskStat>,
    series: Series<IntervalRow>,
    /// Each thread's per CPU (`--thread-cpus`).
    cpu_series: Series<ThreadCpuRow>,
    guest: GuestSampler,
    start_mono: u64,
    split: CpuSplit,
    syscall_hooks: bool,
    /// The latest snapshot: the last tick's, then the end's.
    last: Option<CpuSnapshot>,
}

impl Collector for CpuRecorder {
    fn baseline(&mut self, attached: &Attached) -> Result<()> {
        match attached.probes.iter().find(|p| p.id == "sched_switch" && !p.available) {
            Some(p) => Err(Error::NoProbes(format!(
                "sched_switch: {}",
                p.reason.clone().unwrap_or_default()
            ))),
            None => Ok(()),
        }
    }

    fn tick(&mut self, now_mono: u64) -> Result<()> {
        let snap = self.engine.snapshot(now_mono, true)?;
        self.guest.sample();
        let Some(journal) = self.journal.as_mut() else {
            self.last = Some(snap);
            return Ok(());
        };
        let journaled = self.series.rows.len();
        self.series.push(&snap, self.start_mono);
        self.cpu_series.push(&snap, self.start_mono);
        let identities = snap.threads.iter().map(|(tid, t)| ThreadIdentity {
            tid: *tid,
            pid: t.tgid,
            comm: rows::comm_of(t),
            kthread: t.flags & thread_flag::KTHREAD != 0,
        });
        journal.append(
            identities,
            &self.series.rows[journaled..],
            now_mono.saturating_sub(self.start_mono),
            &self.series.owed(),
            rows::cpu_rows(&snap),
        );
        self.last = Some(snap);
        Ok(())
    }

    /// The last tick's snapshot stands for now.
    fn checkpoint(&mut self, _now: &End) -> Result<bool> {
        Ok(true)
    }

    fn forget(&mut self) -> Result<()> {
        self.engine.forget_retired()
    }

    /// The final snapshot, at the recording's end: the window every other
    /// layer's readings fall in.
    fn close(&mut self, end_mono: u64) -> Result<()> {
        let snap = self.engine.snapshot(end_mono, false)?;
        self.series.push(&snap, self.start_mono);
        self.cpu_series.push(&snap, self.start_mono);
        self.guest.sample_every_task();
        self.last = Some(snap);
        Ok(())
    }

    fn emit(&self, ctx: &Emit, out: &mut LayerOutput, overhead: &mut Overhead) -> Result<()> {
        let none = CpuSnapshot::default();
        let snap = self.last.as_ref().unwrap_or(&none);
        if let Some(why) = self.journal.as_ref().and_then(|j| j.failed.as_ref()) {
            out.notes.push(format!(
                "the journal stopped ({why}): had vtrace been killed, less of this recording would have survived"
            ));
        }
        if self.split == CpuSplit::Ticks {
            out.notes.push(format!(
                "user/system split by tick sampling (--cpu-split ticks): each thread's exact process-context time \
                 is divided in the ratio of the kernel's utime/stime timer ticks over its slices, each CPU's by \
                 /proc/stat; threads too short-lived to be sampled take their process's ratio{}",
                if self.syscall_hooks {
                    "; the syscall hooks stay attached for tun fds"
                } else {
                    "; no syscall hooks"
                }
            ));
        }
        let selection = Selection::new(ctx.asked, ctx.own_threads, ctx.workload, &self.tasks_at_start, snap);
        let threads = rows::thread_rows(
            &rows::with_idle_instance_threads(snap, ctx.attribution),
            &selection,
            ctx.attribution,
            &self.guest.deltas(),
            ctx.facts,
            rows::Clocks {
                start_mono: self.start_mono,
                clock_ticks: procfs::clock_ticks(),
                split: self.split,
            },
        );
        if threads.iter().any(|t| t.guest_source == "tick_sampled") {
            out.notes.push(
                "kvm_entry/kvm_exit did not fire on this kernel: guest time of vCPU threads is tick-sampled from \
                 /proc/<tid>/stat guest_time (resolution 1/USER_HZ) and moved out of their system time"
                    .into(),
            );
        }
        if let Some(note) = unknown_guest_time(&threads) {
            out.notes.push(note);
        }
        let sum = |f: fn(&vtrace_common::CpuState) -> u64| snap.cpus.iter().map(f).sum::<u64>();
        out.losses.extend([
            ("cpu.thread_map_overflows", sum(|c| c.thread_map_overflows)),
            ("cpu.state_repairs", sum(|c| c.state_repairs)),
            ("cpu.untraced_switches", sum(|c| c.untraced_switches)),
        ]);
        overhead.untraced_trimmed_ns = snap.cpus.iter().map(|c| c.untraced_trimmed_ns).sum();
        out.tables.put(threads);
        out.tables.put(rows::cpu_rows(snap));
        out.tables.put(rows::softirq_rows(snap));
        out.tables.put(irqs::irq_rows(snap, ctx.attribution.instances()));
        // At a checkpoint the journal holds the series, line by line.
        if !ctx.checkpoint {
            out.tables.put(self.series.finish());
        }
        // (none with one CPU: the collector keeps it only with several; not
        // journaled: a recording cut short keeps it from its last checkpoint)
        if !self.cpu_series.rows.is_empty() {
            out.tables.put(self.cpu_series.finish());
        }
        Ok(())
    }
}

/// The CPU layer's switches (`record`, `bench`).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct CpuOptions {
    /// How user and system time are told apart: by the kernel's tick-sampled utime/stime (the
    /// default: no syscall hooks, totals still exact), or exactly at every syscall (a program on
    /// every syscall of every process: redis over loopback kept 0.78 of untraced throughput, tracing
    /// cost 9.8 % of capacity, against 0.98 and 3.7 % by default).
    #[arg(long, value_enum, default_value_t = CpuSplit::Ticks)]
    pub cpu_split: CpuSplit,
    /// Each thread's CPU time per CPU per interval too (the `thread_cpus` table, on a machine of
    /// more than one CPU). `vtrace agent` sets it: the host splits each vCPU's guest time by the
    /// guest's threads that ran on that vCPU.
    #[arg(long)]
    pub thread_cpus: bool,
}

/// vCPU threads whose guest time nothing measured: their guest column's 0
/// is unknown, not idle (a recording without the kvm layer on a kernel
/// whose /proc guest_time counted none for them).
fn unknown_guest_time(threads: &[ThreadRow]) -> Option<String> {
    let unknown: Vec<String> = threads
        .iter()
        .filter(|t| t.owner.role == "vcpu" && t.guest_source == "none" && t.guest_ns == 0)
        .map(|t| format!("{} ({})", t.owner.comm, t.tid))
        .collect();
    (!unknown.is_empty()).then(|| {
        format!(
            "guest time UNKNOWN for {} vCPU thread(s): {}: kvm_entry/kvm_exit were not traced (add the kvm layer: \
             --layers ...,kvm) and /proc/<tid>/stat guest_time counted none, so the guest mode they ran is in \
             their system time and their guest column reads 0",
            unknown.len(),
            unknown.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vcpus_guest_time_nothing_measured_is_named_unknown() {
        let thread = |tid: u32, role: &str, source: &str, guest_ns: u64| {
            let mut t = ThreadRow {
                tid,
                guest_source: source.into(),
                guest_ns,
                ..Default::default()
            };
            t.owner.comm = format!("t{tid}");
            t.owner.role = role.into();
            t
        };
        let measured = [
            thread(1, "vcpu", "kvm_tracepoints", 5),
            thread(2, "vcpu", "tick_sampled", 0),
            thread(3, "vmm", "none", 0),
        ];
        assert_eq!(unknown_guest_time(&measured), None);
        let note = unknown_guest_time(&[thread(4, "vcpu", "none", 0)]).unwrap();
        assert!(note.contains("t4 (4)") && note.contains("kvm layer"), "{note}");
    }
}
