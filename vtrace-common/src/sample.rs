//! Sampled stacks.

/// One sampled stack: the thread and its kernel and user stack ids (-1:
/// none, e.g. a kernel thread has no user stack), and whether the thread was
/// a vCPU in guest mode (its stacks are then the host's, at the exit).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SampleKey {
    pub tgid: u32,
    pub tid: u32,
    pub kernel_stack: i32,
    pub user_stack: i32,
    /// 1: the sample fell while the thread ran its guest (`PF_VCPU`).
    pub in_guest: u32,
}
