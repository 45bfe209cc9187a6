//! The CPU engine's probes: scheduler, syscalls, interrupts, softirqs (vtrace-ebpf/src/sched.rs,
//! syscalls.rs, irq.rs, account/).

use crate::probes::catalog::{ProbeSpec, tracepoint_probe};

/// In attach order: each `*_exit` precedes its `*_entry`, because attaching
/// a probe patches kernel text with IPIs, so an entry attached before its
/// exit would see interrupts whose end it never sees (an exit without an
/// entry is ignored). The registry attaches these before any other layer's.
pub const CPU: &[ProbeSpec] = &[
    tracepoint_probe!(
        tp_btf "sched_switch",
        "sched",
        "context switch: flushes per-thread CPU time",
        "sched"
    ),
    tracepoint_probe!(
        "sched_process_fork",
        "sched",
        "thread creation: new threads are tracked from birth",
        "sched"
    ),
    tracepoint_probe!(
        "sched_process_exec",
        "sched",
        "exec: a thread's name is read again when it changes",
        "sched"
    ),
    tracepoint_probe!(
        "sched_process_exit",
        "sched",
        "thread exit: totals of exited threads are kept",
        "sched"
    ),
    tracepoint_probe!("sys_exit", "syscall", "system -> user transition", "raw_syscalls"),
    tracepoint_probe!("sys_enter", "syscall", "user -> system transition", "raw_syscalls"),
    tracepoint_probe!("irq_handler_exit", "irq", "device interrupt handler end", "irq"),
    tracepoint_probe!("irq_handler_entry", "irq", "device interrupt handler start", "irq"),
    tracepoint_probe!(
        "local_timer_exit",
        "irq",
        "x86 local APIC timer interrupt end",
        "irq_vectors"
    ),
    tracepoint_probe!(
        "local_timer_entry",
        "irq",
        "x86 local APIC timer interrupt start",
        "irq_vectors"
    ),
    tracepoint_probe!("reschedule_exit", "irq", "x86 reschedule IPI end", "irq_vectors"),
    tracepoint_probe!("reschedule_entry", "irq", "x86 reschedule IPI start", "irq_vectors"),
    tracepoint_probe!("call_function_exit", "irq", "x86 function call IPI end", "irq_vectors"),
    tracepoint_probe!(
        "call_function_entry",
        "irq",
        "x86 function call IPI start",
        "irq_vectors"
    ),
    tracepoint_probe!(
        "call_function_single_exit",
        "irq",
        "x86 single function call IPI end",
        "irq_vectors"
    ),
    tracepoint_probe!(
        "call_function_single_entry",
        "irq",
        "x86 single function call IPI start",
        "irq_vectors"
    ),
    tracepoint_probe!("irq_work_exit", "irq", "x86 irq work interrupt end", "irq_vectors"),
    tracepoint_probe!("irq_work_entry", "irq", "x86 irq work interrupt start", "irq_vectors"),
    tracepoint_probe!("softirq_exit", "softirq", "softirq end (per vector)", "irq"),
    tracepoint_probe!("softirq_entry", "softirq", "softirq start (per vector)", "irq"),
];
