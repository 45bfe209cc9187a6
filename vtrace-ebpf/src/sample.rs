//! Stack sampling (`record --sample HZ`): a software cpu-clock perf event on
//! every CPU; each sample counts one (thread, kernel stack, user stack) in
//! the kernel, so the cost is one stack walk and one map update per sample,
//! never a per-sample event to user space.

use crate::runs::count_run;
use aya_ebpf::{
    EbpfContext,
    bindings::{BPF_F_FAST_STACK_CMP, BPF_F_REUSE_STACKID, BPF_F_USER_STACK},
    helpers::bpf_get_current_task,
    macros::{map, perf_event},
    maps::{PerCpuArray, PerCpuHashMap, StackTrace},
    programs::{PerfEventContext, tracing::StackIdContext},
};
use vtrace_common::SampleKey;

use crate::{account, config::conf, kmem::read_or_zero};

/// PF_VCPU from include/linux/sched.h: set from a vCPU's entry into its
/// guest until after the exit has taken the interrupts that came meanwhile
/// (the timer's among them), so a sample that stopped a guest sees it.
const PF_VCPU: u32 = 0x1;

#[map]
pub static STACKS: StackTrace = StackTrace::with_max_entries(16384, 0);

#[map]
pub static SAMPLES: PerCpuHashMap<SampleKey, u64> = PerCpuHashMap::with_max_entries(32768, 0);

/// [0]: samples not counted because SAMPLES was full.
#[map]
pub static SAMPLE_DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

#[perf_event]
pub fn sample_cpu(ctx: PerfEventContext) -> u32 {
    count_run!("sample_cpu");
    let flags = (BPF_F_FAST_STACK_CMP | BPF_F_REUSE_STACKID) as u64;
    let key = SampleKey {
        tgid: ctx.tgid(),
        tid: ctx.pid(),
        kernel_stack: ctx.get_stackid(&STACKS, flags).map(|id| id as i32).unwrap_or(-1),
        user_stack: ctx
            .get_stackid(&STACKS, flags | BPF_F_USER_STACK as u64)
            .map(|id| id as i32)
            .unwrap_or(-1),
        in_guest: read_or_zero::<u32>(unsafe { bpf_get_current_task() }, conf!(cpu.task_flags)) & PF_VCPU,
    };
    match account::entry(&SAMPLES, &key) {
        Some(n) => *n += 1,
        None => {
            if let Some(d) = SAMPLE_DROPS.get_ptr_mut(0) {
                unsafe { *d += 1 };
            }
        }
    }
    0
}
