//! The run-queue layer's probes (vtrace-ebpf/src/runq.rs): its own
//! sched_switch program, and the two wakeups.

use crate::probes::catalog::{ProbeSpec, Strategy};

/// The three strategies of one sched/* event, best first.
macro_rules! runq_probe {
    ($id:literal, $event:literal, $what:literal) => {
        ProbeSpec {
            id: $id,
            layer: "runq",
            what: $what,
            strategies: &[
                Strategy::BtfTracepoint {
                    program: concat!("btf_", $id),
                    tracepoint: $event,
                },
                Strategy::RawTracepoint {
                    program: concat!("raw_", $id),
                    tracepoint: $event,
                },
                Strategy::Tracepoint {
                    program: concat!("tp_", $id),
                    category: "sched",
                    name: $event,
                },
            ],
        }
    };
}

/// In attach order: wakeups before switches, so no wait is seen ending
/// before the layer saw it start.
pub const RUNQ: &[ProbeSpec] = &[
    runq_probe!(
        "runq_wakeup",
        "sched_wakeup",
        "a sleeping thread becomes runnable: its wait starts"
    ),
    runq_probe!(
        "runq_wakeup_new",
        "sched_wakeup_new",
        "a new thread becomes runnable: its wait starts"
    ),
    runq_probe!(
        "runq_switch",
        "sched_switch",
        "switch-in ends a wait; a preempted thread's wait starts"
    ),
];
