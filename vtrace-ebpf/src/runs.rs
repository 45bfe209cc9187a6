//! Runs per hook: one per-CPU array add per program run, so vtrace knows how
//! many events each hook handled without the kernel's BPF statistics (which
//! add two clock reads to every run). Read by collectors/bpf_stats.rs.

use aya_ebpf::{macros::map, maps::PerCpuArray};
use vtrace_common::COUNTED_HOOKS;

#[map]
pub static HOOK_RUNS: PerCpuArray<u64> = PerCpuArray::with_max_entries(COUNTED_HOOKS.len() as u32, 0);

#[inline(always)]
pub fn hit(index: u32) {
    if let Some(c) = HOOK_RUNS.get_ptr_mut(index) {
        unsafe { *c += 1 };
    }
}

/// `count_run!("sys_enter")`: counts a run of that hook (index resolved at compile time).
macro_rules! count_run {
    ($hook:expr) => {
        $crate::runs::hit(const { vtrace_common::hook_index($hook) })
    };
}
pub(crate) use count_run;

/// Does nothing. Attached for a moment at start-up to task_rename, which
/// vtrace then fires itself (prctl(PR_SET_NAME) with its own name), with
/// and without the kernel's BPF statistics on: what they add to every
/// measured run, and what a run really costs at a hook
/// (`collectors/bpf_stats.rs::calibrate`).
#[aya_ebpf::macros::raw_tracepoint(tracepoint = "task_rename")]
pub fn raw_stats_floor(_ctx: aya_ebpf::programs::RawTracePointContext) -> i32 {
    0
}
