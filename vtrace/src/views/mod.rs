//! Views of a recording that join several layers' tables, above the layers
//! (which each see only their own and the CPU layer's) and below the
//! reports, which show them without naming a layer: the Chrome trace
//! (`trace.rs`: CPU, net, KVM), start-up (`startup.rs`: CPU, net, vsock),
//! each packet across the guest boundary (`boundary.rs`: path, guest),
//! the overlay cost (`overlay.rs`: fs beside sampled stacks), each guest's
//! sampled stacks under its VM's vCPUs (`guest_stacks.rs`: sample, guest,
//! folded and drawn so), and the threads' CPU breakdown as CSV.

pub mod boundary;
pub mod guest_stacks;
pub mod overlay;
pub mod startup;
pub mod trace;

use crate::{
    layers::cpu::analysis::{CpuBreakdown, StateTimes},
    recording::Recording,
};

/// The interactive flamegraph (SVG) of the recording's sampled stacks; with
/// `lines`, a frame per source line where debug info has them.
/// Each guest's own stacks go under its VM's vCPU threads where its agent
/// sampled them (`guest_stacks.rs`).
pub fn flamegraph(rec: &Recording, lines: bool) -> Result<String, String> {
    guest_stacks::svg(rec, lines)
}

/// The recording's sampled stacks folded as the flamegraph draws them
/// (`platform/role;instance;comm;frames count`, one per line), each guest's
/// own under its VM's `[guest mode]` frame where its agent sampled them,
/// for flamegraph.pl, inferno or speedscope; with `lines`, a frame per
/// source line.
pub fn folded(rec: &Recording, lines: bool) -> String {
    guest_stacks::folded(rec, lines)
        .0
        .into_iter()
        .map(|line| line + "\n")
        .collect()
}

/// One row per thread: its CPU time by state (`report --format csv`).
pub fn threads_csv(rec: &Recording) -> String {
    let cpu = CpuBreakdown::of(rec);
    let mut out = String::from(
        "pid,tid,comm,platform,role,selected,user_ns,system_ns,softirq_ns,hardirq_ns,guest_ns,idle_ns,total_ns,guest_source\n",
    );
    for t in &cpu.threads {
        let total = StateTimes::of_thread(t).busy_ns();
        out.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
            t.owner.pid,
            t.tid,
            quote(&t.owner.comm),
            t.owner.platform,
            t.owner.role,
            t.selected,
            t.user_ns,
            t.system_ns,
            t.softirq_ns,
            t.hardirq_ns,
            t.guest_ns,
            t.idle_ns,
            total,
            t.guest_source
        ));
    }
    out
}

/// RFC 4180 quoting for fields that need it (comm may hold commas or quotes).
pub fn quote(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}
