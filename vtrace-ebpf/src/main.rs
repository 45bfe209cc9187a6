//! vtrace's eBPF programs. One module per hook family; all of them feed the
//! per-CPU accounting state machine in [`account`].
//!
//! Every hook exists in the attach flavours the probe catalog
//! (`vtrace/src/probes/catalog.rs`) lists for it, e.g. `raw_sched_switch`
//! (raw tracepoint, preferred: no record formatting) and `tp_sched_switch`
//! (classic tracepoint, fallback). Rust eBPF has no CO-RE, so kernel struct
//! and tracepoint-record offsets arrive as load-time globals ([`config`]).
#![no_std]
#![no_main]
// Atomic adds (BPF_ATOMIC) for counters every CPU shares.
#![feature(core_intrinsics)]
#![allow(internal_features)]

mod account;
mod block;
mod config;
mod devices;
mod faults;
mod files;
mod hist;
mod irq;
mod kmem;
mod kvm;
mod net;
mod path;
mod runq;
mod runs;
mod sample;
mod sched;
mod syscalls;
mod tun;
mod uprobe;
mod vsock;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
