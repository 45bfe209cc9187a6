//! KVM: exit and user-space exit latency, port/MMIO/interrupt events.

/// KVM: what a [`KvmLatencyKey`] times.
pub mod kvm_latency {
    /// kvm_exit -> next kvm_entry of the vCPU thread (`reason` = exit reason, `isa` = 1 VMX / 2 SVM).
    pub const EXIT: u32 = 0;
    /// kvm_userspace_exit -> the thread's next `ioctl(KVM_RUN)`: the VMM's
    /// handling time (`reason` = KVM_EXIT_*, or [`super::KVM_RUN_INTERRUPTED`]).
    pub const USERSPACE: u32 = 1;
    /// kvm_vcpu_wakeup: a halted vCPU woke (`reason` 1 = waited, 0 = polled; time from the event).
    pub const HALT: u32 = 2;
    pub const NAMES: [&str; 3] = ["exit", "userspace_exit", "halt"];
}

/// kvm_userspace_exit with a negative errno (KVM_RUN interrupted by a
/// signal: -EINTR), kept apart from real exit reasons.
pub const KVM_RUN_INTERRUPTED: u32 = 0x8000_0000;

/// Log-linear latency buckets: 8 per power of two (12.5 % wide), exact
/// below 8 ns, up to 2^34 ns (17 s); larger values land in the last bucket.
pub const FINE_BUCKETS: usize = 256;

/// The power of two at or below `v` (0 and 1 both give 0): every log2
/// histogram's bucket before its top bound (sizes, latencies), in the eBPF
/// programs and in userspace alike.
#[inline(always)]
pub fn log2_index(v: u64) -> usize {
    63 - (v | 1).leading_zeros() as usize
}

#[inline(always)]
pub fn fine_bucket(ns: u64) -> usize {
    if ns < 8 {
        return ns as usize;
    }
    let e = 63 - ns.leading_zeros() as usize;
    let i = 8 * (e - 2) + ((ns >> (e - 3)) & 7) as usize;
    if i < FINE_BUCKETS { i } else { FINE_BUCKETS - 1 }
}

/// The values bucket `i` holds: `[lo, hi)`.
pub fn fine_bucket_range(i: usize) -> (u64, u64) {
    if i < 8 {
        return (i as u64, i as u64 + 1);
    }
    let e = i / 8 + 2;
    let step = 1u64 << (e - 3);
    let lo = (1u64 << e) + (i % 8) as u64 * step;
    (lo, lo + step)
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KvmLatencyKey {
    pub tid: u32,
    /// [`kvm_latency`] kind.
    pub kind: u32,
    pub reason: u32,
    pub isa: u32,
}

/// Count, sum, extremes and a [`fine_bucket`] histogram of one latency.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatencyHist {
    pub count: u64,
    pub sum_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    pub buckets: [u64; FINE_BUCKETS],
}

impl Default for LatencyHist {
    fn default() -> Self {
        LatencyHist {
            count: 0,
            sum_ns: 0,
            min_ns: 0,
            max_ns: 0,
            buckets: [0; FINE_BUCKETS],
        }
    }
}

/// KVM events counted per vCPU thread and address ([`KvmEventKey::kind`]).
pub mod kvm_event {
    /// kvm_pio: `addr` = port, `op` = 0 read / 1 write, `size` = bytes per
    /// access; a write that [`legacy_virtio_queue`] takes for a legacy
    /// virtio-pci kick also holds the queue's index + 1 from bit
    /// [`PIO_QUEUE_SHIFT`] (one row per queue).
    pub const PIO: u32 = 0;
    pub const PIO_QUEUE_SHIFT: u32 = 8;

    /// The queue a port write kicks, when it has a legacy (0.9.5)
    /// virtio-pci notify's shape: a 16-bit write of a queue's index at
    /// offset 0x10 (VIRTIO_PCI_QUEUE_NOTIFY) of an I/O BAR, which is 32-byte
    /// aligned or more and lies in the PCI I/O window above the PC's fixed
    /// ports. (Modern virtio-pci kicks are MMIO writes.)
    pub const fn legacy_virtio_queue(port: u32, write: bool, size: u32, value: u32) -> Option<u32> {
        if write && size == 2 && port >= 0x1000 && port & 0x1f == 0x10 && value < 1024 {
            Some(value)
        } else {
            None
        }
    }
    /// kvm_mmio: `addr` = guest-physical address, `op` = 0 unsatisfied read / 1 read / 2 write.
    pub const MMIO: u32 = 1;
    /// kvm_fast_mmio (ioeventfd, handled in the kernel): `addr` = gpa.
    pub const FAST_MMIO: u32 = 2;
    /// kvm_set_irq: `addr` = GSI, `op` = level.
    pub const SET_IRQ: u32 = 3;
    /// kvm_msi_set_irq: `addr` = MSI address, `op` = vector.
    pub const MSI: u32 = 4;
    /// kvm_inj_virq: `addr` = vector, `op` = 1 soft (INTn) / 0 IRQ.
    pub const INJ_VIRQ: u32 = 5;
    /// kvm_userspace_exit: `addr` = KVM_EXIT_* reason (every exit, also one
    /// the VMM never returns from; [`super::kvm_latency::USERSPACE`] times the others).
    pub const USERSPACE_EXIT: u32 = 6;
    /// kvm_exit: `addr` = exit reason, `op` = isa (every exit, also one
    /// with no kvm_entry after it; [`super::kvm_latency::EXIT`] times the others).
    pub const EXIT: u32 = 7;
    /// A kvm_entry with no kvm_exit since the vCPU's last entry: KVM handled
    /// the exit in its fastpath and re-entered the guest at once (SVM traces
    /// kvm_exit only on the slow path, in svm_handle_exit; KVM's own `exits`
    /// statistic counts both). `addr` = 0.
    pub const FASTPATH_REENTRY: u32 = 8;
    pub const NAMES: [&str; 9] = [
        "pio",
        "mmio",
        "fast_mmio",
        "set_irq",
        "msi",
        "inj_virq",
        "userspace_exit",
        "exit",
        "fastpath_reentry",
    ];
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KvmEventKey {
    pub tid: u32,
    pub kind: u32,
    pub addr: u64,
    pub op: u32,
    pub size: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KvmEventStats {
    pub count: u64,
    /// size x repeat count (string I/O), 0 for interrupts.
    pub bytes: u64,
}

/// What a vCPU thread is in the middle of: since its last kvm_exit and
/// since its last return to user space.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VcpuPending {
    pub exit_ns: u64,
    pub exit_reason: u32,
    pub exit_isa: u32,
    pub userspace_ns: u64,
    pub userspace_reason: u32,
    /// 1 from a kvm_entry until the next kvm_exit or kvm_userspace_exit.
    pub in_guest: u32,
    /// The thread's exits so far (kvm_exit and fastpath re-entries): read
    /// in one lookup beside KVM's own `exits` statistic, so both cover the
    /// same moments.
    pub exits: u64,
    /// The interrupts KVM injected into this vCPU so far (kvm_inj_virq),
    /// read beside KVM's `irq_injections` the same way.
    pub injections: u64,
}

/// The KVM layer's tracepoint offsets.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KvmConfig {
    /// kvm/* records (from their format files): the fields the programs read.
    pub tp_kvm_exit_reason: u32,
    pub tp_kvm_exit_isa: u32,
    pub tp_kvm_uexit_reason: u32,
    pub tp_kvm_uexit_errno: u32,
    pub tp_kvm_pio_rw: u32,
    pub tp_kvm_pio_port: u32,
    pub tp_kvm_pio_size: u32,
    pub tp_kvm_pio_count: u32,
    pub tp_kvm_pio_val: u32,
    pub tp_kvm_mmio_type: u32,
    pub tp_kvm_mmio_len: u32,
    pub tp_kvm_mmio_gpa: u32,
    pub tp_kvm_fast_mmio_gpa: u32,
    pub tp_kvm_set_irq_gsi: u32,
    pub tp_kvm_set_irq_level: u32,
    pub tp_kvm_msi_address: u32,
    pub tp_kvm_msi_data: u32,
    pub tp_kvm_inj_virq_vector: u32,
    pub tp_kvm_inj_virq_soft: u32,
    pub tp_kvm_wakeup_ns: u32,
    pub tp_kvm_wakeup_waited: u32,
}
