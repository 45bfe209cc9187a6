//! Checkpoints mid-run: every layer's tables written into the journal, so
//! that a killed vtrace leaves them as of the last one (recording::journal).

use std::time::Duration;

use super::{
    emit::{emit_all, self_usage},
    programs,
};
use crate::{
    Result,
    layers::{Collector, Emit, End},
    recording::{self, Metadata, Overhead, Recording, TableSet},
};

/// Writes the recording as it stands into the journal (see
/// [`recording::journal::checkpoint`]) right after a tick: the layers'
/// readings brought up to now, their tables, and the metadata known at the start.
pub(super) fn checkpoint(
    collectors: &mut [Box<dyn Collector>],
    ebpf: &aya::Ebpf,
    parts: &Emit,
    started: &Metadata,
    (start_mono, tick_mono, usage_at_start): (u64, u64, &Overhead),
    staging: &std::path::Path,
) -> Result<()> {
    let Emitted {
        tables,
        overhead,
        mut notes,
        ready,
    } = emit_now(collectors, ebpf, parts, usage_at_start)?;
    let mut meta = started.clone();
    let left_out: Vec<&str> = meta
        .layers
        .iter()
        .zip(&ready)
        .filter(|(_, r)| !**r)
        .map(|(l, _)| l.as_str())
        .collect();
    if !left_out.is_empty() {
        notes.push(format!(
            "layer(s) {} read their maps only at the end: nothing of them survives a killed vtrace",
            left_out.join(", ")
        ));
    }
    // As of the tick it follows: the CPU layer's tables are that tick's, and
    // its interval is journaled before (the other layers read a moment later).
    meta.wall_ns = tick_mono.saturating_sub(start_mono);
    meta.end_unix_ns = meta.start_unix_ns + meta.wall_ns;
    meta.notes.extend(notes);
    meta.overhead = overhead;
    let mut rec = Recording {
        meta,
        tables,
        net_events: recording::NetEvents::default(),
        read_notes: Vec::new(),
        guests: Vec::new(),
    };
    recording::journal::checkpoint(staging, &mut rec)
}

/// What every collector brought up to now emitted.
pub(super) struct Emitted {
    pub tables: TableSet,
    /// vtrace's own CPU since the probes attached (the rest is filled at the end).
    pub overhead: Overhead,
    pub notes: Vec<String>,
    /// Per collector, whether its tables could be had before the end.
    pub ready: Vec<bool>,
}

/// Every collector's readings brought up to now (`Collector::checkpoint`)
/// and the tables of those that could, with the programs' costs: what a
/// checkpoint journals and a live session's read exports.
pub(super) fn emit_now(
    collectors: &mut [Box<dyn Collector>],
    ebpf: &aya::Ebpf,
    parts: &Emit,
    usage_at_start: &Overhead,
) -> Result<Emitted> {
    let now = End { system: parts.system };
    let mut ready = Vec::with_capacity(collectors.len());
    for c in collectors.iter_mut() {
        ready.push(c.checkpoint(&now)?);
    }
    let usage = self_usage();
    let mut overhead = Overhead {
        vtrace_user_ns: usage.vtrace_user_ns.saturating_sub(usage_at_start.vtrace_user_ns),
        vtrace_system_ns: usage.vtrace_system_ns.saturating_sub(usage_at_start.vtrace_system_ns),
        vtrace_peak_rss_kib: usage.vtrace_peak_rss_kib,
        ..Default::default()
    };
    let mut notes = Vec::new();
    let ready_ones = collectors.iter().zip(&ready).filter(|(_, r)| **r).map(|(c, _)| c);
    let mut tables = emit_all(ready_ones, parts, &mut overhead, &mut notes)?;
    tables.put(programs::read(ebpf, parts.probes));
    Ok(Emitted {
        tables,
        overhead,
        notes,
        ready,
    })
}

/// When the next checkpoint is due: every `every`, and never sooner than a
/// hundred times the last one took (at most 1 % of a CPU). One that fails
/// (a full disk) leaves the last whole one, and the next is tried as usual.
pub(super) struct Checkpoints {
    every: Duration,
    next: Option<std::time::Instant>,
    written: u64,
    took: Duration,
    failures: u64,
    last_failure: Option<String>,
}

impl Checkpoints {
    pub(super) fn new(every: Duration) -> Self {
        Checkpoints {
            every,
            next: (!every.is_zero()).then(|| std::time::Instant::now() + every),
            written: 0,
            took: Duration::ZERO,
            failures: 0,
            last_failure: None,
        }
    }

    pub(super) fn due(&self) -> bool {
        self.next.is_some_and(|t| std::time::Instant::now() >= t)
    }

    /// After a checkpoint, which took `took`.
    pub(super) fn done(&mut self, result: Result<()>, took: Duration) {
        self.took += took;
        match result {
            Ok(()) => self.written += 1,
            Err(e) => {
                self.failures += 1;
                self.last_failure = Some(e.to_string());
            }
        }
        self.next = Some(std::time::Instant::now() + self.every.max(took * 100));
    }

    /// Their count and cost into `overhead`.
    pub(super) fn count(&self, overhead: &mut Overhead) {
        overhead.checkpoints = self.written;
        overhead.checkpoint_ns = self.took.as_nanos() as u64;
    }

    pub(super) fn notes(&self) -> Vec<String> {
        match &self.last_failure {
            Some(why) => vec![format!(
                "{} of {} checkpoints failed (the last: {why}): had vtrace been killed then, every table but the CPU \
                 layer's would have been as of the last one written",
                self.failures,
                self.failures + self.written
            )],
            None if self.every.is_zero() => vec![
                "no checkpoints (--checkpoint 0): had vtrace been killed, only the CPU layer's journal would have \
                 survived"
                    .into(),
            ],
            None => Vec::new(),
        }
    }
}
