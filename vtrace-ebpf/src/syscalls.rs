//! Syscall entry/exit: the user <-> system boundary (`--cpu-split syscalls`)
//! and reads/writes on tun fds. The hottest hooks of all, so they touch only
//! this CPU's state (no per-thread lookup), and they are attached only when
//! one of those asks for them.

use crate::runs::hook_programs;
use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::map,
    maps::{HashMap, PerCpuHashMap},
};
use vtrace_common::{DevStats, TunIoKey, TunPending, count_size, state};

use crate::kmem::{KernelMem, ProbeRead};
use crate::{account, config::conf};

/// (tgid << 32 | fd) -> dev_key of the tap, for every tun fd open when
/// recording started (filled by userspace).
#[map]
pub static TUN_FDS: HashMap<u64, u64> = HashMap::with_max_entries(1024, 0);

#[map]
pub static TUN_PENDING: HashMap<u32, TunPending> = HashMap::with_max_entries(4096, 0);

/// Calls and bytes per (tap, process, direction); `packets` counts calls.
#[map]
pub static TUN_IO: PerCpuHashMap<TunIoKey, DevStats> = PerCpuHashMap::with_max_entries(1024, 0);

const NR_READ: u64 = 0;
const NR_WRITE: u64 = 1;
const NR_READV: u64 = 19;
const NR_WRITEV: u64 = 20;

/// At a read/write-family syscall on a known tun fd, remembers it for sys_exit.
#[inline(always)]
fn tun_enter(id: u64, fd: u64) {
    let write = match id {
        NR_READ | NR_READV => 0,
        NR_WRITE | NR_WRITEV => 1,
        _ => return,
    };
    let pid_tgid = bpf_get_current_pid_tgid();
    let key = (pid_tgid & 0xffff_ffff_0000_0000) | (fd & 0xffff_ffff);
    if let Some(dev) = unsafe { TUN_FDS.get(&key) } {
        let _ = TUN_PENDING.insert(
            &(pid_tgid as u32),
            &TunPending {
                dev: *dev,
                write,
                _pad: 0,
            },
            0,
        );
    }
}

#[inline(always)]
fn tun_exit(ret: i64) {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    let Some(p) = (unsafe { TUN_PENDING.get(&tid) }).copied() else {
        return;
    };
    let _ = TUN_PENDING.remove(&tid);
    if ret <= 0 {
        return;
    }
    let key = TunIoKey {
        dev: p.dev,
        tgid: (pid_tgid >> 32) as u32,
        write: p.write,
    };
    if let Some(s) = account::entry(&TUN_IO, &key) {
        s.packets += 1;
        s.bytes += ret as u64;
        count_size(&mut s.size_hist, ret as u64);
    }
}

#[inline(always)]
fn on_sys_enter() {
    // Attached for tun or KVM tracking only: user/system is split by ticks.
    if account::tick_split() {
        return;
    }
    let Some(st) = account::enter(account::now(), state::SYSTEM) else {
        return;
    };
    account::in_process_context(st);
    // Before a syscall the thread was in user space.
    if st.base == state::UNRESOLVED as u32 {
        account::resolve(st, state::USER);
    }
    st.base = state::SYSTEM as u32;
}

#[inline(always)]
fn on_sys_exit() {
    if account::tick_split() {
        return;
    }
    let Some(st) = account::enter(account::now(), state::USER) else {
        return;
    };
    account::in_process_context(st);
    if st.base == state::UNRESOLVED as u32 {
        account::resolve(st, state::SYSTEM);
    }
    st.base = state::USER as u32;
}

// TP_PROTO(struct pt_regs *regs, long id)
hook_programs! {
    "sys_enter", "raw_syscalls";
    raw raw_sys_enter(ctx) => {
        on_sys_enter();
        if conf!(net.tun_fds_on) != 0 {
            let id: u64 = ctx.arg(1);
            if id <= NR_WRITEV {
                let regs: u64 = ctx.arg(0);
                let fd: u64 = ProbeRead::read(regs, conf!(syscall_args.pt_regs_di)).unwrap_or(u64::MAX);
                tun_enter(id, fd);
            }
        }
    }
    tp tp_sys_enter(ctx) => {
        on_sys_enter();
        if conf!(net.tun_fds_on) != 0 {
            let id: u64 = unsafe { ctx.read_at(8) }.unwrap_or(u64::MAX);
            if id <= NR_WRITEV {
                let fd: u64 = unsafe { ctx.read_at(16) }.unwrap_or(u64::MAX);
                tun_enter(id, fd);
            }
        }
    }
}

// TP_PROTO(struct pt_regs *regs, long ret)
hook_programs! {
    "sys_exit", "raw_syscalls";
    raw raw_sys_exit(ctx) => {
        on_sys_exit();
        if conf!(net.tun_fds_on) != 0 {
            let ret: u64 = ctx.arg(1);
            tun_exit(ret as i64);
        }
    }
    tp tp_sys_exit(ctx) => {
        on_sys_exit();
        if conf!(net.tun_fds_on) != 0 {
            let ret: i64 = unsafe { ctx.read_at(16) }.unwrap_or(0);
            tun_exit(ret);
        }
    }
}

// Record: id at 8, args[6] at 16.

// Record: ret at 16.
