//! The CPU engine's probes: scheduler, syscalls, interrupts, softirqs (vtrace-ebpf/src/sched.rs,
//! syscalls.rs, irq.rs, account.rs).

use crate::probes::catalog::{Layer, ProbeSpec, tracepoint_probe};

/// In attach order: each `*_exit` precedes its `*_entry`, because attaching
/// a probe patches kernel text with IPIs, so an entry attached before its
/// exit would see interrupts whose end it never sees (an exit without an
/// entry is ignored). The registry attaches these before any other layer's.
pub const CPU: &[ProbeSpec] = &[
    tracepoint_probe!(
        tp_btf "sched_switch",
        Layer::Sched,
        "context switch: flushes per-thread CPU time",
        "sched"
    ),
    tracepoint_probe!(
        "sched_process_fork",
        Layer::Sched,
        "thread creation: new threads are tracked from birth",
        "sched"
    ),
    tracepoint_probe!(
        "sched_process_exit",
        Layer::Sched,
        "thread exit: totals of exited threads are kept",
        "sched"
    ),
    tracepoint_probe!("sys_exit", Layer::Syscall, "system -> user transition", "raw_syscalls"),
    tracepoint_probe!("sys_enter", Layer::Syscall, "user -> system transition", "raw_syscalls"),
    tracepoint_probe!("irq_handler_exit", Layer::Irq, "device interrupt handler end", "irq"),
    tracepoint_probe!("irq_handler_entry", Layer::Irq, "device interrupt handler start", "irq"),
    tracepoint_probe!(
        "local_timer_exit",
        Layer::Irq,
        "x86 local APIC timer interrupt end",
        "irq_vectors"
    ),
    tracepoint_probe!(
        "local_timer_entry",
        Layer::Irq,
        "x86 local APIC timer interrupt start",
        "irq_vectors"
    ),
    tracepoint_probe!("reschedule_exit", Layer::Irq, "x86 reschedule IPI end", "irq_vectors"),
    tracepoint_probe!(
        "reschedule_entry",
        Layer::Irq,
        "x86 reschedule IPI start",
        "irq_vectors"
    ),
    tracepoint_probe!(
        "call_function_exit",
        Layer::Irq,
        "x86 function call IPI end",
        "irq_vectors"
    ),
    tracepoint_probe!(
        "call_function_entry",
        Layer::Irq,
        "x86 function call IPI start",
        "irq_vectors"
    ),
    tracepoint_probe!(
        "call_function_single_exit",
        Layer::Irq,
        "x86 single function call IPI end",
        "irq_vectors"
    ),
    tracepoint_probe!(
        "call_function_single_entry",
        Layer::Irq,
        "x86 single function call IPI start",
        "irq_vectors"
    ),
    tracepoint_probe!("irq_work_exit", Layer::Irq, "x86 irq work interrupt end", "irq_vectors"),
    tracepoint_probe!(
        "irq_work_entry",
        Layer::Irq,
        "x86 irq work interrupt start",
        "irq_vectors"
    ),
    tracepoint_probe!("softirq_exit", Layer::Softirq, "softirq end (per vector)", "irq"),
    tracepoint_probe!("softirq_entry", Layer::Softirq, "softirq start (per vector)", "irq"),
];
