//! The faults layer's probes (vtrace-ebpf/src/faults.rs).

use crate::probes::catalog::{ProbeSpec, tracepoint_probe};

pub const FAULTS: &[ProbeSpec] = &[
    tracepoint_probe!(
        "page_fault_user",
        "faults",
        "a page fault taken in user mode",
        "exceptions"
    ),
    tracepoint_probe!(
        "page_fault_kernel",
        "faults",
        "a page fault taken in kernel mode (a user page the kernel touched, e.g. copy_to_user)",
        "exceptions"
    ),
];
