//! Every layer's tables, at the end or at a checkpoint, and vtrace's own
//! CPU as the kernel counts it.

use crate::{
    Result,
    layers::{Collector, Emit, Facts, LayerOutput},
    recording::{Overhead, TableSet},
};

/// Every layer's tables and notes, in registry order: each sees the tables
/// of those before it (the CPU layer's threads first) and the facts of all.
/// `parts`: the context but for those two.
pub(super) fn emit_all<'c>(
    collectors: impl Iterator<Item = &'c Box<dyn Collector>> + Clone,
    parts: &Emit,
    overhead: &mut Overhead,
    notes: &mut Vec<String>,
) -> Result<TableSet> {
    let mut facts = Facts::default();
    for c in collectors.clone() {
        c.facts(&mut facts);
    }
    let mut tables = TableSet::default();
    for c in collectors {
        let mut out = LayerOutput::default();
        let ctx = Emit {
            facts: &facts,
            tables: &tables,
            ..*parts
        };
        c.emit(&ctx, &mut out, overhead)?;
        notes.extend(out.notes);
        for (key, n) in out.losses {
            overhead.losses.insert(key.to_string(), n);
        }
        tables.extend(out.tables);
    }
    Ok(tables)
}

/// vtrace's own CPU time and peak memory so far (getrusage).
pub(super) fn self_usage() -> Overhead {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let ns = |tv: libc::timeval| tv.tv_sec as u64 * 1_000_000_000 + tv.tv_usec as u64 * 1_000;
    Overhead {
        vtrace_user_ns: ns(ru.ru_utime),
        vtrace_system_ns: ns(ru.ru_stime),
        vtrace_peak_rss_kib: ru.ru_maxrss as u64,
        ..Default::default()
    }
}
