//! The CPU layer's tables: time per thread, CPU, softirq vector, IRQ, and per interval.

use polars_core::prelude::{Column, DataFrame};

use crate::recording::{
    Owner,
    table::{ColumnError, ColumnValue, table},
};

/// The id of the vCPU a thread runs, as KVM numbers it (debugfs
/// `kvm/<vm>/vcpuN/pid`: the APIC ID on x86, QEMU's CPU index on a plain
/// layout); -1 when it runs none or KVM did not say (and in recordings
/// from before the column).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct VcpuIndex(pub i32);

impl Default for VcpuIndex {
    fn default() -> Self {
        VcpuIndex(-1)
    }
}

impl VcpuIndex {
    pub fn get(self) -> Option<u32> {
        u32::try_from(self.0).ok()
    }
}

impl ColumnValue for VcpuIndex {
    fn column(name: &str, values: Vec<Self>) -> Column {
        i32::column(name, values.into_iter().map(|v| v.0).collect())
    }
    fn read(df: &DataFrame, name: &str) -> Result<Vec<Self>, ColumnError> {
        Ok(i32::read(df, name)?.into_iter().map(VcpuIndex).collect())
    }
}

table! {
    /// CPU time per thread over the whole run (exited threads included).
    ThreadRow = "threads" version 4 {
        tid: u32,
        #[serde(flatten)]
        owner: Owner,
        /// Process that created this thread's process (0 if it predates the run).
        ppid: u32,
        /// Matched the recording's selectors (--pid/--comm/--cgroup or the command's process tree).
        selected: bool,
        kthread: bool,
        exited: bool,
        /// Created while recording: its whole life was seen.
        born_during_run: bool,
        user_ns: u64,
        system_ns: u64,
        softirq_ns: u64,
        hardirq_ns: u64,
        guest_ns: u64,
        idle_ns: u64,
        /// "kvm_tracepoints" (exact), "tick_sampled" (/proc guest_time) or "none".
        guest_source: String,
        switches: u64,
        cgroup_id: u64,
        /// Time in slices no scheduler clock bounded (the switch that brought
        /// the thread in went unreported and none of its switch-outs had been
        /// seen yet): its total may be off by at most this much.
        unbounded_ns: u64 [since 2],
        /// When the thread was created and when it exited, ns since the
        /// recording started (its fork and exit events); 0 when it predates
        /// the recording or is still running.
        born_ns: u64 [since 3],
        exited_ns: u64 [since 3],
        /// The id of the vCPU it runs, as KVM numbers it; -1 when none
        /// (since 4).
        vcpu: VcpuIndex [since 4],
    }
}

table! {
    /// CPU time per CPU and state.
    CpuRow = "cpus" {
        cpu: u32,
        user_ns: u64,
        system_ns: u64,
        softirq_ns: u64,
        hardirq_ns: u64,
        guest_ns: u64,
        idle_ns: u64,
    }
}

table! {
    /// Softirq time and count per CPU and vector.
    SoftirqRow = "softirqs" {
        cpu: u32,
        vector: String,
        ns: u64,
        count: u64,
    }
}

table! {
    /// Hard interrupt time and count per CPU and IRQ (device IRQs and x86 system vectors).
    IrqRow = "hardirqs" version 2 {
        cpu: u32,
        /// Device IRQ number, or 256+ for system vectors.
        irq: u32,
        /// As the kernel named it when its handler ran (since 2; kept for
        /// IRQs freed before the end), else from /proc/interrupts.
        name: String,
        ns: u64,
        count: u64,
        /// The platform instance whose device raised it: a vfio IRQ of a
        /// PCI function the instance passes through.
        instance: String [since 2],
    }
}

table! {
    /// Per-thread CPU time per snapshot interval (the time series).
    IntervalRow = "intervals" version 2 {
        /// Interval start and end, ns since the recording started.
        start_ns: u64,
        end_ns: u64,
        tid: u32,
        pid: u32,
        user_ns: u64,
        system_ns: u64,
        softirq_ns: u64,
        hardirq_ns: u64,
        guest_ns: u64,
        idle_ns: u64,
        /// The thread's fork, ns since the recording started (0: before
        /// it), as the threads table has it: two threads of one reused tid
        /// are two rows there and their intervals apart here (since 2).
        born_ns: u64 [since 2],
    }
}

table! {
    /// Each thread's CPU time per CPU per snapshot interval (`--thread-cpus`,
    /// which `vtrace agent` sets: the host splits each of a VM's vCPUs'
    /// guest time by the guest's threads that ran on that vCPU). Written
    /// where the machine has more than one CPU (with one, it is the
    /// intervals table). A thread's time is read per CPU from its per-CPU
    /// slot (`--cpu-split ticks`); time a thread's hash entry holds (the
    /// syscall split, or a slot another thread held) ran on no CPU known:
    /// its `cpu` is 4294967295. Rows of one interval sum to its
    /// intervals-table row, except what a snapshot gave back (each series
    /// repays its own).
    ThreadCpuRow = "thread_cpus" {
        start_ns: u64,
        end_ns: u64,
        tid: u32,
        pid: u32,
        born_ns: u64,
        cpu: u32,
        user_ns: u64,
        system_ns: u64,
        softirq_ns: u64,
        hardirq_ns: u64,
        guest_ns: u64,
        idle_ns: u64,
    }
}
