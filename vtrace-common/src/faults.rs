//! Page faults per thread (the faults layer).

/// A thread's page faults by the mode of the code that faulted: user, or
/// kernel (a user page the kernel touched for it, e.g. copy_to_user).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    pub user: u64,
    pub kernel: u64,
}

/// Threads the faults layer keeps counts for.
pub const MAX_FAULT_THREADS: u32 = 16384;
