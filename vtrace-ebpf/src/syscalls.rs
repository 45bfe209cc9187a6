//! Syscall entry/exit: the user <-> system boundary. The hottest hooks of all,
//! so they touch only this CPU's state (no per-thread lookup).

use aya_ebpf::{
    macros::{raw_tracepoint, tracepoint},
    programs::{RawTracePointContext, TracePointContext},
};
use vtrace_common::state;

use crate::account;

#[inline(always)]
fn on_sys_enter() {
    let Some(st) = account::enter(account::now(), state::SYSTEM) else {
        return;
    };
    account::in_process_context(st);
    // Before a syscall the thread was in user space.
    if st.base == state::UNRESOLVED as u32 {
        account::resolve(st, state::USER);
    }
    st.base = state::SYSTEM as u32;
}

#[inline(always)]
fn on_sys_exit() {
    let Some(st) = account::enter(account::now(), state::USER) else {
        return;
    };
    account::in_process_context(st);
    if st.base == state::UNRESOLVED as u32 {
        account::resolve(st, state::SYSTEM);
    }
    st.base = state::USER as u32;
}

#[raw_tracepoint(tracepoint = "sys_enter")]
pub fn raw_sys_enter(_ctx: RawTracePointContext) -> i32 {
    on_sys_enter();
    0
}

#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn raw_sys_exit(_ctx: RawTracePointContext) -> i32 {
    on_sys_exit();
    0
}

#[tracepoint(category = "raw_syscalls", name = "sys_enter")]
pub fn tp_sys_enter(_ctx: TracePointContext) -> i32 {
    on_sys_enter();
    0
}

#[tracepoint(category = "raw_syscalls", name = "sys_exit")]
pub fn tp_sys_exit(_ctx: TracePointContext) -> i32 {
    on_sys_exit();
    0
}
