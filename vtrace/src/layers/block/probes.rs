//! The block layer's probes (vtrace-ebpf/src/block.rs): a request's insert,
//! issue and completion.

use crate::probes::catalog::{ProbeSpec, Strategy};

/// The typed and raw tracepoint of one block/* event: both hand over the
/// request itself, which pairs its events (the classic records do not).
macro_rules! block_probe {
    ($id:literal, $what:literal) => {
        ProbeSpec {
            id: $id,
            layer: "block",
            what: $what,
            strategies: &[
                Strategy::BtfTracepoint {
                    program: concat!("btf_", $id),
                    tracepoint: $id,
                },
                Strategy::RawTracepoint {
                    program: concat!("raw_", $id),
                    tracepoint: $id,
                },
            ],
        }
    };
}

/// In attach order: completions last, so none is seen without its start.
pub const BLOCK: &[ProbeSpec] = &[
    block_probe!("block_rq_insert", "request enters the I/O scheduler: queue time starts"),
    block_probe!("block_rq_issue", "request sent to the driver: device time starts"),
    block_probe!(
        "block_rq_requeue",
        "the driver gave the request back: its next insert (a kworker's) stays its submitter's"
    ),
    block_probe!(
        "block_rq_complete",
        "request done: counted per device, operation and cgroup"
    ),
];
