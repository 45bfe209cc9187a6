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
