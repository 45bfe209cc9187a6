//! Page faults (exceptions:page_fault_user, page_fault_kernel), counted per
//! thread: one per-CPU hash lookup a fault.

use aya_ebpf::{
    macros::map,
    maps::{PerCpuArray, PerCpuHashMap},
};
use vtrace_common::{FaultCounts, MAX_FAULT_THREADS};

use crate::{account, runs::hook_programs};

#[map]
pub static FAULTS: PerCpuHashMap<u32, FaultCounts> = PerCpuHashMap::with_max_entries(MAX_FAULT_THREADS, 0);

/// Faults not counted: FAULTS was full.
#[map]
pub static FAULT_DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

#[inline(always)]
fn count(user: bool) {
    let tid = account::current_tid();
    match account::entry(&FAULTS, &tid) {
        Some(c) if user => c.user += 1,
        Some(c) => c.kernel += 1,
        None => {
            if let Some(d) = FAULT_DROPS.get_ptr_mut(0) {
                unsafe { *d += 1 };
            }
        }
    }
}

// TP_PROTO(unsigned long address, struct pt_regs *regs, unsigned long error_code)
hook_programs! {
    "page_fault_user", "exceptions";
    raw raw_page_fault_user(_ctx) => { count(true); }
    tp tp_page_fault_user(_ctx) => { count(true); }
}

hook_programs! {
    "page_fault_kernel", "exceptions";
    raw raw_page_fault_kernel(_ctx) => { count(false); }
    tp tp_page_fault_kernel(_ctx) => { count(false); }
}
