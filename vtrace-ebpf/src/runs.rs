//! Runs per hook: one per-CPU array add per program run, so vtrace knows how
//! many events each hook handled without the kernel's BPF statistics (which
//! add two clock reads to every run). Read by collectors/bpf_stats.rs.

use aya_ebpf::{macros::map, maps::PerCpuArray};
use vtrace_common::COUNTED_HOOKS;

#[map]
pub static HOOK_RUNS: PerCpuArray<u64> = PerCpuArray::with_max_entries(COUNTED_HOOKS.len() as u32, 0);

#[inline(always)]
pub fn hit(index: u32) {
    if let Some(c) = HOOK_RUNS.get_ptr_mut(index) {
        unsafe { *c += 1 };
    }
}

/// `count_run!("sys_enter")`: counts a run of that hook (index resolved at compile time).
macro_rules! count_run {
    ($hook:expr) => {
        $crate::runs::hit(const { vtrace_common::hook_index($hook) })
    };
}
pub(crate) use count_run;

/// One hook's programs, one per attach flavour it has (each a strategy of
/// its catalog entry, best first): `btf NAME(ctx) => { .. }` (tp_btf: typed
/// pointer arguments), `raw NAME(ctx) => { .. }` (raw_tp: arguments as
/// u64), `tp NAME(ctx) => { .. }` (the classic tracepoint of `category`:
/// the record's fields, at offsets from tracefs). Each counts its run under
/// the hook's name (or under `counted`, for a second family of programs on
/// the same tracepoint), then runs its body, and returns 0.
macro_rules! hook_programs {
    (@gen $hook:literal, $category:literal, $counted:literal;
     $(btf $btf:ident($bctx:ident) => $btf_body:block)?
     $(raw $raw:ident($rctx:ident) => $raw_body:block)?
     $(tp $tp:ident($tctx:ident) => $tp_body:block)?) => {
        $(
            #[aya_ebpf::macros::btf_tracepoint(function = $hook)]
            pub fn $btf($bctx: aya_ebpf::programs::BtfTracePointContext) -> i32 {
                $crate::runs::count_run!($counted);
                $btf_body;
                0
            }
        )?
        $(
            #[aya_ebpf::macros::raw_tracepoint(tracepoint = $hook)]
            pub fn $raw($rctx: aya_ebpf::programs::RawTracePointContext) -> i32 {
                $crate::runs::count_run!($counted);
                $raw_body;
                0
            }
        )?
        $(
            #[aya_ebpf::macros::tracepoint(category = $category, name = $hook)]
            pub fn $tp($tctx: aya_ebpf::programs::TracePointContext) -> i32 {
                $crate::runs::count_run!($counted);
                $tp_body;
                0
            }
        )?
    };
    ($hook:literal, $category:literal, counted $counted:literal; $($programs:tt)*) => {
        $crate::runs::hook_programs!(@gen $hook, $category, $counted; $($programs)*);
    };
    ($hook:literal, $category:literal; $($programs:tt)*) => {
        $crate::runs::hook_programs!(@gen $hook, $category, $hook; $($programs)*);
    };
    // Without a classic tracepoint, no category.
    ($hook:literal; $($programs:tt)*) => {
        $crate::runs::hook_programs!(@gen $hook, "", $hook; $($programs)*);
    };
}
pub(crate) use hook_programs;

/// A kernel function's `kprobe` and `fentry` programs, each counting its run
/// as `$counted` (default: the function's name; another layer's programs on
/// the same function count under their own) and passing its first
/// arguments (as u64) to `$body`.
macro_rules! kfunc_programs {
    ($kprobe:ident, $fentry:ident, $function:literal, counted $counted:literal, [$($arg:ident),*] => $body:expr) => {
        #[aya_ebpf::macros::kprobe]
        pub fn $kprobe(_ctx: aya_ebpf::programs::ProbeContext) -> u32 {
            #[allow(unused_variables)]
            let ctx = _ctx;
            $crate::runs::count_run!($counted);
            let mut _i = 0;
            $(let $arg: u64 = ctx.arg(_i).unwrap_or(0); _i += 1;)*
            $body;
            0
        }
        #[aya_ebpf::macros::fentry(function = $function)]
        pub fn $fentry(_ctx: aya_ebpf::programs::FEntryContext) -> i32 {
            #[allow(unused_variables)]
            let ctx = _ctx;
            $crate::runs::count_run!($counted);
            let mut _i = 0;
            $(let $arg: u64 = ctx.arg(_i); _i += 1;)*
            $body;
            0
        }
    };
    ($kprobe:ident, $fentry:ident, $function:literal, [$($arg:ident),*] => $body:expr) => {
        $crate::runs::kfunc_programs!($kprobe, $fentry, $function, counted $function, [$($arg),*] => $body);
    };
}
pub(crate) use kfunc_programs;

/// Does nothing. Attached for a moment at start-up to task_rename, which
/// vtrace then fires itself (prctl(PR_SET_NAME) with its own name), with
/// and without the kernel's BPF statistics on: what they add to every
/// measured run, and what a run really costs at a hook
/// (`collectors/bpf_stats.rs::calibrate`).
#[aya_ebpf::macros::raw_tracepoint(tracepoint = "task_rename")]
pub fn raw_stats_floor(_ctx: aya_ebpf::programs::RawTracePointContext) -> i32 {
    0
}
