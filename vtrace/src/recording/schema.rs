//! Recording contents: `meta.json` ([`Metadata`]) and the tables. Documented
//! for users in docs/recording-schema.md; keep the two in step.

use serde::{Deserialize, Serialize};

use super::table::table;
use crate::probes::ProbeStatus;

table! {
    /// CPU time per thread over the whole run (exited threads included).
    ThreadRow = "threads" {
        tid: u32,
        /// Thread group id (the process id).
        pid: u32,
        /// Process that created this thread's process (0 if it predates the run).
        ppid: u32,
        comm: String,
        platform: String,
        /// Platform instance id (`<platform>:<root pid>`), empty on the host.
        instance: String,
        /// Platform component: app, vmm, vcpu, kernel, idle, vtrace, other, ...
        role: String,
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
    IrqRow = "hardirqs" {
        cpu: u32,
        /// Device IRQ number, or 256+ for system vectors.
        irq: u32,
        name: String,
        ns: u64,
        count: u64,
    }
}

table! {
    /// Per-thread CPU time per snapshot interval (the time series).
    IntervalRow = "intervals" {
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
    }
}

table! {
    /// Self-overhead per eBPF program: its runs over the whole recording
    /// (counted by the program itself) and the kernel's BPF run-time
    /// statistics, which cover `overhead.bpf_stats_coverage` of it.
    ProgramRow = "programs" {
        probe: String,
        program: String,
        method: String,
        /// Runs over the whole recording (HOOK_RUNS); 0 for a program that does not count itself.
        events: u64,
        /// Runs and run time while the kernel's statistics were on.
        run_count: u64,
        run_time_ns: u64,
        /// Events the kernel did not run the program for: it was already
        /// running on that CPU (e.g. interrupted by a softirq that hit the same hook).
        recursion_misses: u64,
    }
}

table! {
    /// One network device seen during the run: its owner, its NET_RX softirq
    /// time, and its own counters (/proc/net/dev) over the same window.
    NetDeviceRow = "net_devices" {
        netns: u32,
        ifindex: u32,
        name: String,
        /// veth, tun, tap, bridge, loopback, device, ...
        kind: String,
        platform: String,
        instance: String,
        /// tap, veth, veth-peer, bridge, vf, or empty.
        role: String,
        /// NET_RX softirq time spent on this device's received packets.
        softirq_ns: u64,
        /// NAPI polls of the device, packets they processed, and polls that used their whole budget.
        napi_polls: u64,
        napi_packets: u64,
        napi_budget_exhausted: u64,
        counter_rx_packets: u64,
        counter_rx_bytes: u64,
        counter_tx_packets: u64,
        counter_tx_bytes: u64,
    }
}

table! {
    /// Packets through one device at one hop.
    NetHopRow = "net_hops" {
        netns: u32,
        ifindex: u32,
        /// queue, start_xmit, xmit, rx, receive, gro.
        hop: String,
        /// tx or rx.
        direction: String,
        packets: u64,
        /// With the link-layer header, as device counters count.
        bytes: u64,
        gso_packets: u64,
        /// Segments on the wire (1 per non-GSO packet).
        gso_segs: u64,
        errors: u64,
    }
}

table! {
    /// Size histograms per device and hop: `kind` "mtu" (bucket upper bounds 64 ... 65536, then
    /// 4294967295 for larger) or "log2" (`le` = 2^(i+1) - 1).
    NetSizeRow = "net_sizes" {
        netns: u32,
        ifindex: u32,
        hop: String,
        kind: String,
        le: u64,
        count: u64,
    }
}

table! {
    /// Latency from one hop to the next of the same packet (skb), in-kernel
    /// log2 histograms summarised: p50/p99 are bucket upper bounds.
    NetLatencyRow = "net_latency" {
        from_netns: u32,
        from_ifindex: u32,
        from_hop: String,
        to_netns: u32,
        to_ifindex: u32,
        to_hop: String,
        count: u64,
        sum_ns: u64,
        p50_ns: u64,
        p99_ns: u64,
    }
}

table! {
    /// read/write syscalls of a process on a tun/tap fd: the VMM (or other
    /// user-space backend) side of a tap. Their sizes are in net_sizes with
    /// hop `fd_read` / `fd_write`.
    TunIoRow = "tun_io" {
        pid: u32,
        comm: String,
        device: String,
        netns: u32,
        ifindex: u32,
        /// read (packets from the tap to the process) or write (into the tap).
        direction: String,
        calls: u64,
        bytes: u64,
    }
}

table! {
    /// Packets freed as dropped, per kernel drop reason.
    NetDropRow = "net_drops" {
        reason: String,
        count: u64,
    }
}

table! {
    /// Calls of a user-space function (uprobe) by one process: lwIP's stack
    /// functions, QEMU's virtio backend, or `--uprobe` targets.
    UprobeRow = "uprobes" {
        probe: String,
        pid: u32,
        comm: String,
        platform: String,
        instance: String,
        calls: u64,
        /// Sum of the sizes the calls handled (probes with a size rule).
        bytes: u64,
        /// Returns seen (`:ret` probes) and their summed latency.
        returns: u64,
        latency_sum_ns: u64,
    }
}

table! {
    /// Histograms of uprobe rows: `kind` "size" (mtu buckets, as net_sizes) or
    /// "latency" (log2 ns: `le` = 2^(i+1)-1).
    UprobeHistRow = "uprobe_hists" {
        probe: String,
        pid: u32,
        kind: String,
        le: u64,
        count: u64,
    }
}

table! {
    /// KVM latencies per vCPU thread and reason: `kind` "exit" (kvm_exit ->
    /// next kvm_entry, `isa` vmx/svm), "userspace_exit" (kvm_userspace_exit ->
    /// the thread's next ioctl(KVM_RUN): the VMM's handling time) or "halt"
    /// (kvm_vcpu_wakeup: time halted, reason "wait" or "poll"). Reason names
    /// come from the recording kernel's tracepoint formats.
    KvmLatencyRow = "kvm_latency" {
        tid: u32,
        pid: u32,
        comm: String,
        platform: String,
        instance: String,
        role: String,
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
        pid: u32,
        comm: String,
        platform: String,
        instance: String,
        role: String,
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
    KvmStatRow = "kvm_stats" {
        vm: String,
        pid: u32,
        stat: String,
        start: u64,
        end: u64,
    }
}

table! {
    /// Sampled stacks (`record --sample HZ`), folded root first: user frames,
    /// then kernel frames suffixed `_[k]`; `count` samples of this thread had it.
    SampleRow = "samples" {
        pid: u32,
        tid: u32,
        comm: String,
        platform: String,
        instance: String,
        role: String,
        stack: String,
        count: u64,
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Host {
    pub hostname: String,
    pub kernel: String,
    pub cpus: u32,
    /// Clock ticks per second of /proc time fields (USER_HZ).
    pub clock_ticks: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Selectors {
    pub platform: String,
    pub pids: Vec<u32>,
    pub comms: Vec<String>,
    pub cgroups: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    pub command: Vec<String>,
    pub pid: u32,
    /// Exit code, when it exited normally.
    pub exit_code: Option<i32>,
    /// Signal number, when a signal ended it.
    pub signal: Option<i32>,
}

fn full_coverage() -> f64 {
    1.0
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Overhead {
    /// Sum of run time of all vtrace eBPF programs (kernel BPF stats), over
    /// the whole run: extrapolated when the statistics were sampled.
    pub bpf_run_time_ns: u64,
    pub bpf_run_count: u64,
    /// Share of the run during which the kernel's BPF statistics were on (1:
    /// always; 0: never). Per-program rows hold what was counted in that share.
    #[serde(default = "full_coverage")]
    pub bpf_stats_coverage: f64,
    /// bpf_run_time_ns / (wall_ns x cpus).
    pub bpf_cpu_fraction: f64,
    /// CPU time of the vtrace process itself (collection, snapshots, writing).
    pub vtrace_user_ns: u64,
    pub vtrace_system_ns: u64,
    pub vtrace_peak_rss_kib: u64,
    /// Context switches whose thread found the per-thread map full (time kept under tid 4294967295).
    pub thread_map_overflows: u64,
    /// Interrupts whose exit event was missed, found open and closed at the next syscall or switch.
    pub state_repairs: u64,
    /// Context switches no sched_switch event reported (detected at the next one).
    pub untraced_switches: u64,
    /// Per-packet events lost because the ring buffer was full (`--events`).
    pub net_event_drops: u64,
    /// In-flight skbs whose latency mark another skb took (a `SKB_MARKS` slot
    /// collision): hop latencies not measured.
    #[serde(default)]
    pub skb_marks_displaced: u64,
    /// Stack sampling frequency (`--sample`), 0 when off.
    #[serde(default)]
    pub sample_hz: u64,
    /// Samples not counted because the sample map was full.
    #[serde(default)]
    pub sample_drops: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Metadata {
    /// Always [`super::FORMAT_NAME`].
    pub format: String,
    pub schema_version: u32,
    pub vtrace_version: String,
    pub host: Host,
    /// vtrace's own command line.
    pub command_line: Vec<String>,
    pub selectors: Selectors,
    pub workload: Option<Workload>,
    /// Why recording stopped: "workload exited", "duration elapsed", "SIGINT", "SIGTERM".
    pub stopped_by: String,
    pub start_unix_ns: u64,
    pub end_unix_ns: u64,
    pub wall_ns: u64,
    /// How user and system time were told apart: "syscalls" (exact) or "ticks" (`record --cpu-split`).
    #[serde(default)]
    pub cpu_split: String,
    pub probes: Vec<ProbeStatus>,
    pub overhead: Overhead,
    /// Caveats a reader of the numbers must know (e.g. tick-sampled guest time).
    pub notes: Vec<String>,
}

/// Everything in one recording.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Recording {
    pub meta: Metadata,
    pub threads: Vec<ThreadRow>,
    pub cpus: Vec<CpuRow>,
    pub softirqs: Vec<SoftirqRow>,
    pub hardirqs: Vec<IrqRow>,
    pub intervals: Vec<IntervalRow>,
    pub programs: Vec<ProgramRow>,
    pub net_devices: Vec<NetDeviceRow>,
    pub net_hops: Vec<NetHopRow>,
    pub net_sizes: Vec<NetSizeRow>,
    pub net_drops: Vec<NetDropRow>,
    pub net_latency: Vec<NetLatencyRow>,
    /// `net_events.parquet`, read in slices (it can hold tens of millions of rows).
    pub net_events: super::NetEvents,
    pub tun_io: Vec<TunIoRow>,
    pub uprobes: Vec<UprobeRow>,
    pub uprobe_hists: Vec<UprobeHistRow>,
    pub kvm_latency: Vec<KvmLatencyRow>,
    pub kvm_latency_hists: Vec<KvmLatencyHistRow>,
    pub kvm_events: Vec<KvmEventRow>,
    pub kvm_stats: Vec<KvmStatRow>,
    pub samples: Vec<SampleRow>,
}
