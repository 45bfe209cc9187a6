//! The KVM layer's tables: exit latencies, their histograms, events, KVM's own statistics.

use crate::recording::{Owner, table};

table! {
    /// KVM latencies per vCPU thread and reason: `kind` "exit" (kvm_exit ->
    /// next kvm_entry, `isa` vmx/svm), "userspace_exit" (kvm_userspace_exit ->
    /// the thread's next ioctl(KVM_RUN): the VMM's handling time) or "halt"
    /// (kvm_vcpu_wakeup: time halted, reason "wait" or "poll"). Reason names
    /// come from the recording kernel's tracepoint formats.
    KvmLatencyRow = "kvm_latency" {
        tid: u32,
        #[serde(flatten)]
        owner: Owner,
        kind: String,
        isa: String,
        reason: u32,
        reason_name: String,
        count: u64,
        sum_ns: u64,
        min_ns: u64,
        max_ns: u64,
    }
}

table! {
    /// Histograms of kvm_latency rows: buckets `[lo_ns, hi_ns)`, 8 per power of two.
    KvmLatencyHistRow = "kvm_latency_hists" {
        tid: u32,
        kind: String,
        reason_name: String,
        lo_ns: u64,
        hi_ns: u64,
        count: u64,
    }
}

table! {
    /// KVM events per vCPU thread and address: `kind` pio (addr = port, op
    /// read/write), mmio (addr = gpa, op read/write/unsatisfied-read),
    /// fast_mmio (ioeventfd kick), set_irq (addr = GSI), msi (addr = MSI
    /// address, op = vector), inj_virq (addr = vector), userspace_exit
    /// (addr = KVM_EXIT_* reason, op its name: every exit, timed or not). `device` names
    /// well-known ports and addresses, else is empty.
    KvmEventRow = "kvm_events" {
        tid: u32,
        #[serde(flatten)]
        owner: Owner,
        kind: String,
        addr: u64,
        op: String,
        size: u32,
        count: u64,
        bytes: u64,
        device: String,
    }
}

table! {
    /// KVM's own per-VM statistics (debugfs kvm/<pid>-<fd>/<stat>) at the
    /// first and last sample while recording (`start` 0 for VMs created during it).
    KvmStatRow = "kvm_stats" version 3 {
        vm: String,
        pid: u32,
        stat: String,
        start: u64,
        end: u64,
        /// When `end` was read, ns since the recording started: before the
        /// recording's end when the VM (and its debugfs directory) went first.
        read_ns: u64 [since 2],
        /// vtrace's own count of what `stat` counts, when KVM's `start` and
        /// `end` were read: the same window, whatever it was. For `exits`
        /// (kvm_exit and fastpath re-entries) since version 2, for
        /// `irq_injections` (kvm_inj_virq) since 3; 0 for the others.
        vtrace_start: u64 [since 2],
        vtrace_end: u64 [since 2],
    }
}

table! {
    /// Exits, user-space exits and halts per vCPU thread and reason per
    /// snapshot interval (the time series).
    KvmIntervalRow = "kvm_intervals" {
        /// Interval start and end, ns since the recording started.
        start_ns: u64,
        end_ns: u64,
        tid: u32,
        kind: String,
        reason_name: String,
        count: u64,
        sum_ns: u64,
    }
}
