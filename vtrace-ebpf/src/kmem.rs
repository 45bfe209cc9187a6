//! How programs read kernel structs. Classic and raw tracepoints see
//! pointers as plain numbers and must copy through a helper call; tp_btf
//! programs get BTF-typed pointers, and the verifier turns a load through
//! them (checked against the kernel's types, with offsets from rodata known
//! at load) into a fault-safe load: no call at all. Code shared by both
//! flavours is generic over [`KernelMem`].

use aya_ebpf::helpers::bpf_probe_read_kernel;

pub trait KernelMem {
    /// Reads are plain loads (no helper call).
    const DIRECT: bool;
    /// The `T` at `base + offset`.
    fn read<T>(base: u64, offset: u32) -> Option<T>;
}

/// `bpf_probe_read_kernel`: any address.
pub struct ProbeRead;

impl KernelMem for ProbeRead {
    const DIRECT: bool = false;
    #[inline(always)]
    fn read<T>(base: u64, offset: u32) -> Option<T> {
        unsafe { bpf_probe_read_kernel((base + offset as u64) as *const T) }.ok()
    }
}

/// The `T` at `base + offset` through [`ProbeRead`]; zero when `base` is
/// null or the read faults (a missing field reads as absent).
#[inline(always)]
pub fn read_or_zero<T: Default>(base: u64, offset: u32) -> T {
    if base == 0 {
        return T::default();
    }
    ProbeRead::read(base, offset).unwrap_or_default()
}

/// A classic tracepoint record's field at `offset` (from its format file);
/// zero when it cannot be read.
#[inline(always)]
pub fn tp_field<T: Copy + Default>(ctx: &aya_ebpf::programs::TracePointContext, offset: u32) -> T {
    unsafe { ctx.read_at::<T>(offset as usize) }.unwrap_or_default()
}

/// A plain load: `base` must be a BTF-typed pointer (a tp_btf argument, or a
/// struct pointer loaded through one) and the access must match a member.
pub struct BtfLoad;

impl KernelMem for BtfLoad {
    const DIRECT: bool = true;
    #[inline(always)]
    fn read<T>(base: u64, offset: u32) -> Option<T> {
        Some(unsafe { core::ptr::read_volatile((base + offset as u64) as *const T) })
    }
}
