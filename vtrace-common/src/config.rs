//! The load-time configuration every program reads (`CONFIG`).

/// What userspace writes into the eBPF object at load (one `CONFIG`
/// global, pwru-style, instead of a global per value): kernel struct member
/// offsets from BTF and tracepoint record offsets from tracefs format files
/// (Rust eBPF has no CO-RE), and each layer's switches (`*_on`). Read-only
/// to the programs, so the verifier prunes what a switch turns off.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// Shared by the network layers.
    pub net_device: NetDeviceOffsets,
    /// Shared by the syscall hooks (CPU layer) and the fs layer.
    pub syscall_args: SyscallArgOffsets,
    /// One group per layer, declared in its own file beside its map types.
    pub cpu: crate::CpuConfig,
    pub net: crate::NetConfig,
    pub tun: crate::TunConfig,
    pub kvm: crate::KvmConfig,
    pub runq: crate::RunqConfig,
    pub block: crate::BlockConfig,
    pub fs: crate::FsConfig,
    pub vsock: crate::VsockConfig,
    pub path: crate::PathConfig,
}

/// A kernel address as the configuration holds it: its low and high
/// halves (the programs read the configuration as u32s).
pub const fn halves(address: u64) -> (u32, u32) {
    (address as u32, (address >> 32) as u32)
}

/// The kernel address of [`halves`] `lo` and `hi` (0: unknown).
pub const fn address(lo: u32, hi: u32) -> u64 {
    (hi as u64) << 32 | lo as u64
}

/// Network device and skb offsets every network layer reads (net, tun), resolved by `probes::offsets::net_device`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetDeviceOffsets {
    /// struct sk_buff: `len`, `dev`, `head`, `data`, `end`, `mac_header`,
    /// `protocol`.
    pub skb_len: u32,
    /// struct net_device: `ifindex`, `nd_net` (possible_net_t, whose first member is the struct net pointer).
    pub dev_ifindex: u32,
    pub dev_nd_net: u32,
    /// struct net: `ns.inum`.
    pub net_ns_inum: u32,
    pub dev_name: u32,
    /// struct net_device `netdev_ops`, struct net_device_ops
    /// `ndo_start_xmit`, and tun's `tun_net_xmit` (kallsyms, low and high
    /// halves): a device that transmits with tun_net_xmit is a tun or tap
    /// device. Any 0: unknown (no device is told as tun's).
    pub dev_netdev_ops: u32,
    pub ops_ndo_start_xmit: u32,
    pub tun_net_xmit_lo: u32,
    pub tun_net_xmit_hi: u32,
}

impl NetDeviceOffsets {
    /// Whether the programs can tell a tun or tap device (everything its
    /// test needs is known): where not, the tracepoints that count tun's
    /// frames would run on every frame for nothing.
    pub const fn tells_tun(&self) -> bool {
        self.dev_netdev_ops != 0
            && self.ops_ndo_start_xmit != 0
            && address(self.tun_net_xmit_lo, self.tun_net_xmit_hi) != 0
    }
}

/// Syscall argument registers, read by the CPU layer's syscall hooks and the fs layer, resolved by `probes::offsets::syscall_args`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyscallArgOffsets {
    /// struct pt_regs: `di` (first syscall argument on x86-64).
    pub pt_regs_di: u32,
    pub pt_regs_si: u32,
    pub pt_regs_orig_ax: u32,
    /// raw_syscalls/sys_exit record: offset of `id`.
    pub tp_sys_exit_id: u32,
}
