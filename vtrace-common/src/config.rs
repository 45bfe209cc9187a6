//! The load-time configuration every program reads (`CONFIG`).

/// What userspace writes into the eBPF object at load (one `CONFIG`
/// global, pwru-style, instead of a global per value): kernel struct member
/// offsets from BTF and tracepoint record offsets from tracefs format files
/// (Rust eBPF has no CO-RE), and each layer's switches (`*_on`). Read-only
/// to the programs, so the verifier prunes what a switch turns off.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// `offsetof(struct task_struct, pid)` from BTF.
    pub task_pid: u32,
    /// `offsetof(struct task_struct, tgid)` from BTF.
    pub task_tgid: u32,
    /// `offsetof(struct task_struct, flags)` from BTF.
    pub task_flags: u32,
    /// `offsetof(struct task_struct, se) + offsetof(struct sched_entity, sum_exec_runtime)`.
    pub task_runtime: u32,
    /// `offsetof(struct task_struct, utime)` and `stime` from BTF (read with `TICK_SPLIT_ON`).
    pub task_utime: u32,
    pub task_stime: u32,
    /// `offsetof(struct task_struct, start_time)`: tells a reused tid apart.
    pub task_start_time: u32,
    /// The path from a task to its runqueue's current task, which the
    /// classic sched_switch record lacks (the scheduler sets `rq->curr` to
    /// `next` before the tracepoint): `task->se.cfs_rq` (with
    /// FAIR_GROUP_SCHED), `cfs_rq->rq`, `rq->curr`; 0 where missing.
    pub task_cfs_rq: u32,
    pub cfs_rq_rq: u32,
    pub rq_curr: u32,
    /// 1: `--cpu-split ticks`: the syscall hooks do no accounting (they are
    /// attached only when tun fd tracking needs them), process-context
    /// time stays unsplit and each slice's utime/stime ticks are kept.
    pub tick_split_on: u32,
    /// sched/sched_switch record: offset of `prev_state`.
    pub tp_switch_prev_state: u32,
    /// sched/sched_switch record: offset of `next_pid`.
    pub tp_switch_next_pid: u32,
    /// sched/sched_process_fork record: offset of `child_pid`.
    pub tp_fork_child_pid: u32,
    /// sched/sched_switch record: offset of `prev_pid` (the run-queue layer).
    pub tp_switch_prev_pid: u32,
    /// sched/sched_wakeup and sched_wakeup_new records: offset of `pid`.
    pub tp_wakeup_pid: u32,
    /// irq/irq_handler_entry and _exit records: offset of `irq`.
    pub tp_irq_irq: u32,
    /// irq/irq_handler_entry records: offset of the `name` __data_loc word.
    pub tp_irq_name: u32,
    /// `struct irqaction`: offset of `name` (raw irq_handler_entry's action).
    pub irqaction_name: u32,
    /// irq/softirq_entry and _exit records: offset of `vec`.
    pub tp_softirq_vec: u32,
    /// struct sk_buff: `len`, `dev`, `head`, `data`, `end`, `mac_header`,
    /// `protocol`.
    pub skb_len: u32,
    pub skb_dev: u32,
    pub skb_head: u32,
    pub skb_data: u32,
    pub skb_end: u32,
    pub skb_mac_header: u32,
    pub skb_protocol: u32,
    /// Bit offset of `sk_buff.redirected` (set by a tc redirect); 0: unknown.
    pub skb_redirected_bit: u32,
    /// skb/kfree_skb record: offsets of `location`, `protocol`, `reason`.
    pub tp_kfree_skb_location: u32,
    pub tp_kfree_skb_protocol: u32,
    pub tp_kfree_skb_reason: u32,
    /// struct skb_shared_info: `gso_size`, `gso_segs`.
    pub shinfo_gso_size: u32,
    pub shinfo_gso_segs: u32,
    /// struct net_device: `ifindex`, `nd_net` (possible_net_t, whose first member is the struct net pointer).
    pub dev_ifindex: u32,
    pub dev_nd_net: u32,
    /// struct net: `ns.inum`.
    pub net_ns_inum: u32,
    /// struct pt_regs: `di` (first syscall argument on x86-64).
    pub pt_regs_di: u32,
    /// 1: some process holds a tun fd: follow read/write syscalls on them.
    pub tun_fds_on: u32,
    /// struct napi_struct: `dev`.
    pub napi_dev: u32,
    /// 1: stream every packet at every hop to NET_EVENTS (`record --events`).
    pub net_events_on: u32,
    /// 1: the net layer is traced: NET_RX softirq time is kept per device.
    pub net_layer_on: u32,
    /// 1: follow each skb across hops (per-hop latency, `record --hops`;
    /// also with `--events`). Off by default: it costs a map update per
    /// packet and hop, and a program on every freed skb.
    pub net_hops_on: u32,
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
    /// struct net_device: `mtu` and `hard_header_len` (the size histograms' MTU edge).
    pub dev_mtu: u32,
    pub dev_hard_header_len: u32,
    /// struct request: `cmd_flags`, `part` (its block_device), `__data_len`
    /// (its bytes), `start_time_ns`; struct block_device: `bd_dev` (the
    /// block layer).
    pub request_cmd_flags: u32,
    pub request_part: u32,
    pub request_data_len: u32,
    pub request_start_time_ns: u32,
    pub bdev_dev: u32,
    /// The fs layer's walk from the current task to a superblock:
    /// task_struct `files`, `fs`; files_struct `fdt`; fdtable `max_fds`,
    /// `fd`; file `f_inode`; inode `i_sb`; super_block `s_magic`;
    /// fs_struct `pwd.dentry`, `root.dentry`; dentry `d_sb`; pt_regs `si`
    /// (a syscall's second argument), `orig_ax` (its number at exit).
    pub task_files: u32,
    pub task_fs: u32,
    pub files_fdt: u32,
    pub fdtable_max_fds: u32,
    pub fdtable_fd: u32,
    pub file_inode: u32,
    pub inode_sb: u32,
    pub sb_magic: u32,
    pub fs_pwd_dentry: u32,
    pub fs_root_dentry: u32,
    pub dentry_sb: u32,
    pub pt_regs_si: u32,
    pub pt_regs_orig_ax: u32,
    /// raw_syscalls/sys_exit record: offset of `id`.
    pub tp_sys_exit_id: u32,
    /// The tun layer: `struct tun_struct` and `struct tun_file` live in the
    /// tun module's BTF (split on vmlinux's), the rest in vmlinux's.
    pub tun_struct_dev: u32,
    pub tun_file_tun: u32,
    pub tun_file_socket: u32,
    pub msghdr_control: u32,
    pub tun_msg_ctl_type: u32,
    pub tun_msg_ctl_num: u32,
    pub tun_msg_ctl_ptr: u32,
    pub xdp_buff_data: u32,
    pub xdp_buff_data_end: u32,
    /// `sizeof(struct xdp_buff)`: the stride of a vhost-net batch.
    pub xdp_buff_size: u32,
    pub xdp_frame_len: u32,
    pub iov_iter_count: u32,
    pub dev_name: u32,
    /// struct kiocb `ki_filp`, struct file `private_data` (a tap's tun_file):
    /// tun_chr_read_iter's way from its kiocb to the tap.
    pub kiocb_filp: u32,
    pub file_private_data: u32,
    /// `offsetof(struct task_struct, mm)`: the path layer's key of a VM
    /// (its vCPUs, its VMM's threads and its vhost workers, which run with
    /// their owner's mm, share one); 0 when unknown (nothing is keyed).
    pub task_mm: u32,
    /// kvm_apic_accept_irq's `vec` (the path layer learns lines' vectors).
    pub tp_kvm_apic_accept_irq_vec: u32,
    /// Non-zero: the path layer streams followed packets (`--events`).
    pub path_packets_on: u32,
    /// The vsock layer: fields of vsock:virtio_transport_recv_pkt's record,
    /// which virtio_transport_alloc_pkt's shares (the layer checks).
    pub tp_vsock_src_cid: u32,
    pub tp_vsock_src_port: u32,
    pub tp_vsock_dst_cid: u32,
    pub tp_vsock_dst_port: u32,
    pub tp_vsock_len: u32,
    pub tp_vsock_op: u32,
}
