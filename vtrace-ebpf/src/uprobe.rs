//! User-space functions: calls, sizes and (with a return probe) latency per
//! attach point and process. One entry and one return program serve every
//! attach point; the attach cookie names the slot, whose size rule comes from
//! UPROBE_SPECS. Used for user-space network stacks (lwIP), VMM virtio
//! backends (QEMU) and `--uprobe BINARY:SYMBOL[:ret]`.

use crate::runs::count_run;
use aya_ebpf::{
    EbpfContext,
    helpers::{bpf_get_attach_cookie, bpf_get_current_pid_tgid, bpf_probe_read_user},
    macros::{map, uprobe, uretprobe},
    maps::{Array, LruHashMap, PerCpuHashMap},
    programs::{ProbeContext, RetProbeContext},
};
use vtrace_common::{LATENCY_BUCKETS, MAX_UPROBES, UprobeKey, UprobeSpec, UprobeStats, count_size, uprobe_size};

use crate::account;

#[map]
pub static UPROBE_SPECS: Array<UprobeSpec> = Array::with_max_entries(MAX_UPROBES, 0);

#[map]
pub static UPROBE_STATS: PerCpuHashMap<UprobeKey, UprobeStats> = PerCpuHashMap::with_max_entries(4096, 0);

/// Entry time per (thread, slot), for latency at return.
#[map]
pub static UPROBE_STARTS: LruHashMap<u64, u64> = LruHashMap::with_max_entries(16384, 0);

/// Argument `n` (0-3) of the probed call (x86-64 System V: rdi, rsi, rdx,
/// rcx). Each register is loaded at a constant offset and only then chosen:
/// the verifier rejects context loads at a computed offset.
#[inline(always)]
fn argument(ctx: &ProbeContext, n: u32) -> u64 {
    let regs = ctx.as_ptr() as *const u64;
    // struct pt_regs: rcx at 88, rdx at 96, rsi at 104, rdi at 112.
    let (rdi, rsi, rdx, rcx) = unsafe {
        (
            core::ptr::read_volatile(regs.add(14)),
            core::ptr::read_volatile(regs.add(13)),
            core::ptr::read_volatile(regs.add(12)),
            core::ptr::read_volatile(regs.add(11)),
        )
    };
    match n {
        0 => rdi,
        1 => rsi,
        2 => rdx,
        _ => rcx,
    }
}

#[uprobe]
pub fn uprobe_call(ctx: ProbeContext) -> u32 {
    count_run!("uprobe_call");
    let slot = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as u32;
    if slot >= MAX_UPROBES {
        return 0;
    }
    let id = bpf_get_current_pid_tgid();
    let Some(s) = stats_of(slot, id) else {
        return 0;
    };
    s.calls += 1;
    let spec = UPROBE_SPECS.get(slot).copied().unwrap_or_default();
    let arg = || argument(&ctx, spec.arg);
    let size: Option<u64> = match spec.size_kind {
        uprobe_size::ARG => Some(arg()),
        uprobe_size::PBUF_ARG => unsafe { bpf_probe_read_user((arg() + 16) as *const u16) }
            .ok()
            .map(|v| v as u64),
        _ => None,
    };
    if let Some(len) = size {
        s.bytes += len;
        count_size(&mut s.size_hist, len);
    }
    let _ = UPROBE_STARTS.insert(&((id << 6) ^ slot as u64), &account::now(), 0);
    0
}

#[uretprobe]
pub fn uretprobe_call(ctx: RetProbeContext) -> u32 {
    count_run!("uretprobe_call");
    let slot = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) } as u32;
    if slot >= MAX_UPROBES {
        return 0;
    }
    let id = bpf_get_current_pid_tgid();
    // A return probe's slot directly follows its entry probe's
    // (catalog::user_uprobe emits them in that order): the entry time is
    // stored under the entry's slot.
    let start_key = (id << 6) ^ slot.wrapping_sub(1) as u64;
    let Some(start) = (unsafe { UPROBE_STARTS.get(&start_key) }).copied() else {
        return 0;
    };
    let _ = UPROBE_STARTS.remove(&start_key);
    let ns = account::now().saturating_sub(start);
    let Some(s) = stats_of(slot, id) else {
        return 0;
    };
    s.returns += 1;
    s.latency_sum_ns += ns;
    s.latency_log2[crate::hist::log2_bucket(ns, LATENCY_BUCKETS)] += 1;
    0
}

/// The statistics of uprobe `slot` in the process of `pid_tgid`.
#[inline(always)]
fn stats_of(slot: u32, pid_tgid: u64) -> Option<&'static mut UprobeStats> {
    account::entry(
        &UPROBE_STATS,
        &UprobeKey {
            slot,
            tgid: (pid_tgid >> 32) as u32,
        },
    )
}
