//! Sampled stacks.

/// One sampled stack: the thread and its kernel and user stack ids (-1:
/// none, e.g. a kernel thread has no user stack).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SampleKey {
    pub tgid: u32,
    pub tid: u32,
    pub kernel_stack: i32,
    pub user_stack: i32,
}
