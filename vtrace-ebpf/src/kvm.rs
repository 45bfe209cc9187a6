//! KVM guest entry/exit: switches a vCPU thread's base state between guest
//! and system. On kernels where they do not fire (e.g. PVM), userspace falls
//! back to tick-sampled guest time from /proc and labels it so.

use aya_ebpf::{
    macros::{raw_tracepoint, tracepoint},
    programs::{RawTracePointContext, TracePointContext},
};
use vtrace_common::state;

use crate::account;

#[inline(always)]
fn set_base(base: usize) {
    if let Some(st) = account::enter(account::now(), state::SYSTEM) {
        st.base = base as u32;
    }
}

#[raw_tracepoint(tracepoint = "kvm_entry")]
pub fn raw_kvm_entry(_ctx: RawTracePointContext) -> i32 {
    set_base(state::GUEST);
    0
}

#[raw_tracepoint(tracepoint = "kvm_exit")]
pub fn raw_kvm_exit(_ctx: RawTracePointContext) -> i32 {
    set_base(state::SYSTEM);
    0
}

#[tracepoint(category = "kvm", name = "kvm_entry")]
pub fn tp_kvm_entry(_ctx: TracePointContext) -> i32 {
    set_base(state::GUEST);
    0
}

#[tracepoint(category = "kvm", name = "kvm_exit")]
pub fn tp_kvm_exit(_ctx: TracePointContext) -> i32 {
    set_base(state::SYSTEM);
    0
}
