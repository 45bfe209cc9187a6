//! The passthrough path: a VF's interrupt (vfio-pci) from the host's
//! hardirq to the guest entry that delivers it.

use super::*;

/// The VF interrupt (a `vfio-*` IRQ) this CPU's hardirq is handling
/// (`entry_ns` 0: none).
#[map]
pub static PT_IRQ: PerCpuArray<PathPtIrq> = PerCpuArray::with_max_entries(1, 0);

/// MSI vector -> the VF interrupt that set it, until a vCPU injects it
/// (`signal_ns` 0: injected since). Keyed by vector alone: in the hardirq
/// the VM is not the current task's, and the vector is what the vCPU
/// injects. Two VMs whose VFs raise the same vector at once are confused.
#[map]
pub static PT_VECTORS: LruHashMap<u32, PathPtIrq> = LruHashMap::with_max_entries(256, 0);

/// vCPU tid -> the VF interrupt injected into it, until its guest entry
/// (`inject_ns` 0: entered since).
#[map]
pub static PT_INJECTED: LruHashMap<u32, PathPtIrq> = LruHashMap::with_max_entries(4096, 0);

// The passthrough path: a VF's interrupt (vfio-pci) from the host's
// hardirq to the guest entry that delivers it.

/// A VF interrupt waiting longer than this for its injection never gets
/// one (its VM exited): a new MSI of its vector replaces it.
const PT_STALE_NS: u64 = 1_000_000_000;

/// Whether this CPU is in a VF interrupt's handler.
#[inline(always)]
pub(super) fn in_vf_irq() -> bool {
    PT_IRQ.get(0).is_some_and(|p| p.entry_ns != 0)
}

/// A device IRQ's handler starts: a `vfio-*` one (the name's first five
/// bytes at `name`) is a passed-through device's interrupt.
#[inline(always)]
fn vf_irq_entry(irq: u32, name: *const u8) {
    if name.is_null() || irq >= IRQ_DEVICE_SLOTS {
        return;
    }
    let prefix: [u8; 5] =
        unsafe { aya_ebpf::helpers::bpf_probe_read_kernel(name as *const [u8; 5]) }.unwrap_or_default();
    if &prefix != b"vfio-" {
        return;
    }
    if let Some(p) = PT_IRQ.get_ptr_mut(0) {
        unsafe {
            *p = PathPtIrq {
                entry_ns: account::now(),
                irq,
                ..Default::default()
            }
        };
    }
}

/// The handler returns: the interrupt's hardirq time.
#[inline(always)]
fn vf_irq_exit() {
    let Some(p) = PT_IRQ.get_ptr_mut(0) else {
        return;
    };
    let p = unsafe { &mut *p };
    if p.entry_ns == 0 {
        return;
    }
    add_irq(
        path_stage::PT_HARDIRQ,
        account::now().saturating_sub(p.entry_ns),
        0,
        p.irq,
    );
    p.entry_ns = 0;
}

/// kvm_msi_set_irq of `vector` in a VF interrupt's handler (vfio's
/// eventfd -> irqfd_wakeup -> KVM): the interrupt's signal. False outside
/// one: a virtio signal.
#[inline(always)]
pub(super) fn vf_msi(vector: u32) -> bool {
    let Some(p) = PT_IRQ.get_ptr_mut(0) else {
        return false;
    };
    let p = unsafe { &mut *p };
    if p.entry_ns == 0 {
        return false;
    }
    let now = account::now();
    add_irq(path_stage::PT_SIGNAL, now.saturating_sub(p.entry_ns), 0, p.irq);
    p.signal_ns = now;
    let key = vector & 0xff;
    // One still waiting for its injection: the APIC holds the vector once,
    // so this one is coalesced into it, and the wait is the earlier one's
    // (unless it waited past any delivery: its VM is gone).
    if let Some(v) = PT_VECTORS.get_ptr_mut(&key)
        && unsafe { (*v).signal_ns } != 0
        && now.saturating_sub(unsafe { (*v).signal_ns }) < PT_STALE_NS
    {
        lost(path_loss::UNINJECTED);
        return true;
    }
    let _ = PT_VECTORS.insert(&key, p, 0);
    true
}

/// kvm_inj_virq of `vector` on a vCPU thread: a VF interrupt waiting for
/// it ends its inject stage here. True when it was one.
#[inline(always)]
pub(super) fn vf_injected(vector: u32) -> bool {
    let Some(v) = PT_VECTORS.get_ptr_mut(&(vector & 0xff)) else {
        return false;
    };
    let v = unsafe { &mut *v };
    if v.signal_ns == 0 {
        return false;
    }
    let now = account::now();
    add_irq(path_stage::PT_INJECT, now.saturating_sub(v.signal_ns), 0, v.irq);
    let mut pending = *v;
    pending.inject_ns = now;
    v.signal_ns = 0;
    let _ = PT_INJECTED.insert(&account::current_tid(), &pending, 0);
    true
}

/// kvm_entry: a VF interrupt injected into this vCPU is delivered.
#[inline(always)]
pub(super) fn vf_entered() {
    let Some(p) = PT_INJECTED.get_ptr_mut(&account::current_tid()) else {
        return;
    };
    let p = unsafe { &mut *p };
    if p.inject_ns == 0 {
        return;
    }
    let now = account::now();
    add_irq(path_stage::PT_ENTRY, now.saturating_sub(p.inject_ns), 0, p.irq);
    let done = *p;
    p.inject_ns = 0;
    followed(PathPacket {
        ts: [done.entry_ns, done.signal_ns, done.inject_ns, now, 0],
        vm: current_mm(),
        tgid: 0,
        tid: 0,
        dir: path_dir::PASSTHROUGH,
        frames: 0,
        irq: done.irq,
        _pad: 0,
    });
}

// irq_handler_entry(irq, action): the name from the record's __data_loc
// word, or the action's (the cpu layer's offsets). Inside a guest, a VF's
// receive interrupt too.
hook_programs! {
    "irq_handler_entry", "irq", counted "path_irq_handler_entry";
    raw raw_path_irq_handler_entry(ctx) => {
        guest::device_irq(ctx.arg::<u64>(0) as u32);
        let at = conf!(cpu.irqaction_name);
        if at != 0 {
            let action: u64 = ctx.arg(1);
            let name: u64 = read_or_zero(action, at);
            vf_irq_entry(ctx.arg::<u64>(0) as u32, name as *const u8);
        }
    }
    tp tp_path_irq_handler_entry(ctx) => {
        // The record's `int irq`, read as the u32 it is (never negative):
        // widened from an i32, its bound check was on a copy the verifier
        // does not tie to the index.
        let irq: u32 = tp_field(&ctx, conf!(cpu.tp_irq_irq));
        guest::device_irq(irq);
        let at = conf!(cpu.tp_irq_name);
        if at != 0 {
            let loc: u32 = tp_field(&ctx, at);
            let name = unsafe { (aya_ebpf::EbpfContext::as_ptr(&ctx) as *const u8).add((loc & 0xffff) as usize) };
            vf_irq_entry(irq, name);
        }
    }
}

hook_programs! {
    "irq_handler_exit", "irq", counted "path_irq_handler_exit";
    raw raw_path_irq_handler_exit(_ctx) => {
        vf_irq_exit();
    }
    tp tp_path_irq_handler_exit(_ctx) => {
        vf_irq_exit();
    }
}
