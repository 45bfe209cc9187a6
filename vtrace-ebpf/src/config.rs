//! Load-time constants written by userspace (`EbpfLoader::override_global`):
//! offsets resolved from the running kernel's BTF and tracepoint format files.

macro_rules! globals {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        $(
            $(#[$doc])*
            #[unsafe(no_mangle)]
            pub static $name: u32 = 0;
        )*
    };
}

globals! {
    /// `offsetof(struct task_struct, pid)` from BTF.
    TASK_PID_OFFSET,
    /// `offsetof(struct task_struct, tgid)` from BTF.
    TASK_TGID_OFFSET,
    /// `offsetof(struct task_struct, flags)` from BTF.
    TASK_FLAGS_OFFSET,
    /// `offsetof(struct task_struct, se) + offsetof(struct sched_entity, sum_exec_runtime)`.
    TASK_RUNTIME_OFFSET,
    /// `offsetof(struct task_struct, utime)` and `stime` from BTF (read with `TICK_SPLIT_ON`).
    TASK_UTIME_OFFSET,
    TASK_STIME_OFFSET,
    /// 1: `--cpu-split ticks`: the syscall hooks do no accounting (they are
    /// attached only when tun or KVM tracking needs them), process-context
    /// time stays unsplit and each slice's utime/stime ticks are kept.
    TICK_SPLIT_ON,
    /// sched/sched_switch record: offset of `prev_state`.
    TP_SWITCH_PREV_STATE,
    /// sched/sched_switch record: offset of `next_pid`.
    TP_SWITCH_NEXT_PID,
    /// sched/sched_process_fork record: offset of `child_pid`.
    TP_FORK_CHILD_PID,
    /// irq/irq_handler_entry and _exit records: offset of `irq`.
    TP_IRQ_IRQ,
    /// irq/softirq_entry and _exit records: offset of `vec`.
    TP_SOFTIRQ_VEC,
    /// struct sk_buff: `len`, `dev`, `head`, `data`, `end`, `mac_header`.
    SKB_LEN,
    SKB_DEV,
    SKB_HEAD,
    SKB_DATA,
    SKB_END,
    SKB_MAC_HEADER,
    /// struct skb_shared_info: `gso_size`, `gso_segs`.
    SHINFO_GSO_SIZE,
    SHINFO_GSO_SEGS,
    /// struct net_device: `ifindex`, `nd_net` (possible_net_t, whose first member is the struct net pointer).
    DEV_IFINDEX,
    DEV_ND_NET,
    /// struct net: `ns.inum`.
    NET_NS_INUM,
    /// struct pt_regs: `di` (first syscall argument on x86-64).
    PT_REGS_DI,
    /// 1: some process holds a tun fd: follow read/write syscalls on them.
    TUN_FDS_ON,
    /// struct napi_struct: `dev`.
    NAPI_DEV,
    /// 1: stream every packet at every hop to NET_EVENTS (`record --events`).
    NET_EVENTS_ON,
    /// 1: the net layer is traced: NET_RX softirq time is kept per device.
    NET_LAYER_ON,
    /// struct pt_regs: `si` (second syscall argument: the ioctl command).
    PT_REGS_SI,
    /// 1: kvm_userspace_exit is traced: time each vCPU thread until its next ioctl(KVM_RUN).
    KVM_RUN_ON,
    /// kvm/* records (from their format files): the fields the programs read.
    TP_KVM_EXIT_REASON,
    TP_KVM_EXIT_ISA,
    TP_KVM_UEXIT_REASON,
    TP_KVM_UEXIT_ERRNO,
    TP_KVM_PIO_RW,
    TP_KVM_PIO_PORT,
    TP_KVM_PIO_SIZE,
    TP_KVM_PIO_COUNT,
    TP_KVM_MMIO_TYPE,
    TP_KVM_MMIO_LEN,
    TP_KVM_MMIO_GPA,
    TP_KVM_FAST_MMIO_GPA,
    TP_KVM_SET_IRQ_GSI,
    TP_KVM_SET_IRQ_LEVEL,
    TP_KVM_MSI_ADDRESS,
    TP_KVM_MSI_DATA,
    TP_KVM_INJ_VIRQ_VECTOR,
    TP_KVM_INJ_VIRQ_SOFT,
    TP_KVM_WAKEUP_NS,
    TP_KVM_WAKEUP_WAITED,
}

/// Reads a global without letting the compiler fold it to its initial 0.
#[inline(always)]
pub fn get(global: &'static u32) -> u32 {
    unsafe { core::ptr::read_volatile(global) }
}
