//! KVM: guest entry/exit (switches a vCPU thread's base state between guest
//! and system, and times exit -> entry per reason), user-space exits (timed
//! until the vCPU thread's next `ioctl(KVM_RUN)`), port and
//! MMIO accesses, interrupt injection and halt wake-ups.
//!
//! Records are read at offsets from the kvm/* format files (`Config::tp_kvm_*`).
//! On kernels where kvm_entry/kvm_exit do not fire (e.g. PVM), userspace falls
//! back to tick-sampled guest time from /proc and labels it so.

use crate::runs::hook_programs;
use aya_ebpf::{
    macros::map,
    maps::{LruHashMap, PerCpuHashMap},
};
use vtrace_common::{
    KVM_RUN_INTERRUPTED, KvmEventKey, KvmEventStats, KvmLatencyKey, LatencyHist, VcpuPending, kvm_event, kvm_latency,
    state,
};

use crate::{account, config::conf, hist, kmem::tp_field};

/// What each vCPU thread is in the middle of (bounded: LRU).
#[map]
pub static VCPU_PENDING: LruHashMap<u32, VcpuPending> = LruHashMap::with_max_entries(4096, 0);

#[map]
pub static KVM_LATENCY: PerCpuHashMap<KvmLatencyKey, LatencyHist> = PerCpuHashMap::with_max_entries(1024, 0);

#[map]
pub static KVM_EVENTS: PerCpuHashMap<KvmEventKey, KvmEventStats> = PerCpuHashMap::with_max_entries(4096, 0);

#[inline(always)]
fn add_latency(key: &KvmLatencyKey, ns: u64) {
    if let Some(h) = crate::account::entry_from(&KVM_LATENCY, &hist::ZERO_HIST, key) {
        hist::add(h, ns);
    }
}

#[inline(always)]
fn count_event(kind: u32, addr: u64, op: u32, size: u32, bytes: u64) {
    let key = KvmEventKey {
        tid: account::current_tid(),
        kind,
        addr,
        op,
        size,
    };
    if let Some(s) = account::entry(&KVM_EVENTS, &key) {
        s.count += 1;
        s.bytes += bytes;
    }
}

#[inline(always)]
fn set_base(now: u64, base: usize) {
    if let Some(st) = account::enter(now, state::SYSTEM) {
        st.base = base as u32;
    }
}

#[inline(always)]
fn pending(tid: u32) -> Option<&'static mut VcpuPending> {
    if let Some(p) = VCPU_PENDING.get_ptr_mut(&tid) {
        return Some(unsafe { &mut *p });
    }
    let _ = VCPU_PENDING.insert(&tid, &VcpuPending::default(), 0);
    VCPU_PENDING.get_ptr_mut(&tid).map(|p| unsafe { &mut *p })
}

#[inline(always)]
fn on_exit(reason: u32, isa: u32) {
    let now = account::now();
    set_base(now, account::kernel_base());
    if let Some(p) = pending(account::current_tid()) {
        p.exit_ns = now;
        p.exit_reason = reason;
        p.exit_isa = isa;
        p.in_guest = 0;
        p.exits += 1;
    }
    count_event(kvm_event::EXIT, reason as u64, isa, 0, 0);
}

#[inline(always)]
fn on_entry() {
    let now = account::now();
    set_base(now, state::GUEST);
    let tid = account::current_tid();
    if let Some(p) = pending(tid) {
        if p.in_guest != 0 {
            count_event(kvm_event::FASTPATH_REENTRY, 0, 0, 0, 0);
            p.exits += 1;
        }
        p.in_guest = 1;
        if p.exit_ns != 0 {
            let key = KvmLatencyKey {
                tid,
                kind: kvm_latency::EXIT,
                reason: p.exit_reason,
                isa: p.exit_isa,
            };
            add_latency(&key, now.saturating_sub(p.exit_ns));
            p.exit_ns = 0;
        }
    }
}

/// `_IO(KVMIO, 0x80)`
const KVM_RUN: u64 = 0xae80;

// syscalls/sys_enter_ioctl fires for ioctl(2) only, so KVM_RUN is seen
// without a program on every syscall. Record: args[1] (the command) at 24,
// the layout every syscalls/sys_enter_* record shares.
hook_programs! {
    "sys_enter_ioctl", "syscalls";
    tp tp_sys_enter_ioctl(ctx) => {
        if unsafe { ctx.read_at::<u64>(24) } == Ok(KVM_RUN) {
            on_kvm_run();
        }
    }
}

/// An `ioctl(fd, KVM_RUN)` ends the VMM's handling of the thread's last
/// user-space exit.
#[inline(always)]
fn on_kvm_run() {
    let tid = account::current_tid();
    let Some(p) = VCPU_PENDING.get_ptr_mut(&tid) else {
        return;
    };
    let p = unsafe { &mut *p };
    if p.userspace_ns != 0 {
        let key = KvmLatencyKey {
            tid,
            kind: kvm_latency::USERSPACE,
            reason: p.userspace_reason,
            isa: 0,
        };
        add_latency(&key, account::now().saturating_sub(p.userspace_ns));
        p.userspace_ns = 0;
    }
}

// Without the record's reason (raw_tp args are the vcpu and isa only); the
// classic tracepoint is preferred for that reason.
hook_programs! {
    "kvm_exit", "kvm";
    raw raw_kvm_exit(ctx) => {
        let isa: u64 = ctx.arg(1);
        on_exit(u32::MAX, isa as u32);
    }
    tp tp_kvm_exit(ctx) => {
        let reason: u32 = tp_field(&ctx, conf!(kvm.tp_kvm_exit_reason));
        let isa: u32 = tp_field(&ctx, conf!(kvm.tp_kvm_exit_isa));
        // VMX keeps flags in the upper half of the basic exit reason.
        let reason = if isa == 1 { reason & 0xffff } else { reason };
        on_exit(reason, isa);
    }
}

hook_programs! {
    "kvm_entry", "kvm";
    raw raw_kvm_entry(_ctx) => {
        on_entry();
    }
    tp tp_kvm_entry(_ctx) => {
        on_entry();
    }
}

hook_programs! {
    "kvm_userspace_exit", "kvm";
    tp tp_kvm_userspace_exit(ctx) => {
        let reason: u32 = tp_field(&ctx, conf!(kvm.tp_kvm_uexit_reason));
        let errno: i32 = tp_field(&ctx, conf!(kvm.tp_kvm_uexit_errno));
        let reason = if errno < 0 { KVM_RUN_INTERRUPTED } else { reason };
        if let Some(p) = pending(account::current_tid()) {
            p.userspace_ns = account::now();
            p.userspace_reason = reason;
            p.in_guest = 0;
        }
        count_event(kvm_event::USERSPACE_EXIT, reason as u64, 0, 0, 0);
    }
}

hook_programs! {
    "kvm_pio", "kvm";
    tp tp_kvm_pio(ctx) => {
        let rw: u32 = tp_field(&ctx, conf!(kvm.tp_kvm_pio_rw));
        let port: u32 = tp_field(&ctx, conf!(kvm.tp_kvm_pio_port));
        let size: u32 = tp_field(&ctx, conf!(kvm.tp_kvm_pio_size));
        let count: u32 = tp_field(&ctx, conf!(kvm.tp_kvm_pio_count));
        let value: u32 = tp_field(&ctx, conf!(kvm.tp_kvm_pio_val));
        let op = match kvm_event::legacy_virtio_queue(port, rw != 0, size, value) {
            Some(queue) => rw | ((queue + 1) << kvm_event::PIO_QUEUE_SHIFT),
            None => rw,
        };
        count_event(kvm_event::PIO, port as u64, op, size, size as u64 * count as u64);
    }
}

hook_programs! {
    "kvm_mmio", "kvm";
    tp tp_kvm_mmio(ctx) => {
        let kind: u32 = tp_field(&ctx, conf!(kvm.tp_kvm_mmio_type));
        let len: u32 = tp_field(&ctx, conf!(kvm.tp_kvm_mmio_len));
        let gpa: u64 = tp_field(&ctx, conf!(kvm.tp_kvm_mmio_gpa));
        count_event(kvm_event::MMIO, gpa, kind, len, len as u64);
    }
}

hook_programs! {
    "kvm_fast_mmio", "kvm";
    tp tp_kvm_fast_mmio(ctx) => {
        let gpa: u64 = tp_field(&ctx, conf!(kvm.tp_kvm_fast_mmio_gpa));
        count_event(kvm_event::FAST_MMIO, gpa, 0, 0, 0);
    }
}

hook_programs! {
    "kvm_set_irq", "kvm";
    tp tp_kvm_set_irq(ctx) => {
        let gsi: u32 = tp_field(&ctx, conf!(kvm.tp_kvm_set_irq_gsi));
        let level: i32 = tp_field(&ctx, conf!(kvm.tp_kvm_set_irq_level));
        count_event(kvm_event::SET_IRQ, gsi as u64, level as u32, 0, 0);
    }
}

hook_programs! {
    "kvm_msi_set_irq", "kvm";
    tp tp_kvm_msi_set_irq(ctx) => {
        let address: u64 = tp_field(&ctx, conf!(kvm.tp_kvm_msi_address));
        let data: u64 = tp_field(&ctx, conf!(kvm.tp_kvm_msi_data));
        count_event(kvm_event::MSI, address, (data & 0xff) as u32, 0, 0);
    }
}

hook_programs! {
    "kvm_inj_virq", "kvm";
    tp tp_kvm_inj_virq(ctx) => {
        let vector: u32 = tp_field(&ctx, conf!(kvm.tp_kvm_inj_virq_vector));
        let soft: u8 = tp_field(&ctx, conf!(kvm.tp_kvm_inj_virq_soft));
        count_event(kvm_event::INJ_VIRQ, vector as u64, soft as u32, 0, 0);
        if let Some(p) = pending(account::current_tid()) {
            p.injections += 1;
        }
    }
}

hook_programs! {
    "kvm_vcpu_wakeup", "kvm";
    tp tp_kvm_vcpu_wakeup(ctx) => {
        let ns: u64 = tp_field(&ctx, conf!(kvm.tp_kvm_wakeup_ns));
        let waited: u8 = tp_field(&ctx, conf!(kvm.tp_kvm_wakeup_waited));
        let key = KvmLatencyKey {
            tid: account::current_tid(),
            kind: kvm_latency::HALT,
            reason: waited as u32,
            isa: 0,
        };
        add_latency(&key, ns);
    }
}
