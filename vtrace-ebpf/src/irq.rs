//! Hard and soft interrupts. Device IRQs come from irq_handler_entry/exit;
//! x86 system vectors (local timer, IPIs, irq work) have their own
//! tracepoints in irq_vectors and are kept in their own slots.

use aya_ebpf::{EbpfContext, helpers::bpf_probe_read_kernel_str_bytes, macros::map, maps::Array};

use crate::runs::hook_programs;
use vtrace_common::{IRQ_DEVICE_SLOTS, IRQ_NAME_LEN, NO_SOFTIRQ, SOFTIRQ_VECTORS, irq_vector, state};

use crate::{account, config::conf, kmem::read_or_zero};

/// Each device IRQ slot's name, as its handler last ran (the last slot:
/// whichever IRQ above it ran last).
#[map]
pub static IRQ_NAMES: Array<[u8; IRQ_NAME_LEN]> = Array::with_max_entries(IRQ_DEVICE_SLOTS, 0);

/// Keeps the name at `name` (a kernel string) for `slot`: one string read
/// a device interrupt.
#[inline(always)]
fn keep_name(slot: u32, name: *const u8) {
    if name.is_null() {
        return;
    }
    if let Some(buf) = IRQ_NAMES.get_ptr_mut(slot) {
        let _ = unsafe { bpf_probe_read_kernel_str_bytes(name, &mut *buf) };
    }
}

#[inline(always)]
fn on_hardirq_entry(slot: u32) {
    let Some(st) = account::enter(account::now(), state::UNRESOLVED) else {
        return;
    };
    if st.hardirq_depth == 0 {
        st.irq_slot = slot;
        st.irq_acc = 0;
    }
    st.hardirq_depth += 1;
}

#[inline(always)]
fn on_hardirq_exit() {
    let Some(st) = account::enter(account::now(), state::UNRESOLVED) else {
        return;
    };
    if st.hardirq_depth == 0 {
        return; // entered before this CPU's first event
    }
    st.hardirq_depth -= 1;
    if st.hardirq_depth == 0 {
        account::irq_done(st);
    }
}

#[inline(always)]
fn device_slot(irq: u32) -> u32 {
    if irq < IRQ_DEVICE_SLOTS {
        irq
    } else {
        IRQ_DEVICE_SLOTS - 1
    }
}

#[inline(always)]
fn on_softirq_entry(vec: u32) {
    let now = account::now();
    let Some(st) = account::enter(now, state::UNRESOLVED) else {
        return;
    };
    st.softirq_vec = if (vec as usize) < SOFTIRQ_VECTORS {
        vec
    } else {
        NO_SOFTIRQ
    };
    st.net_dev = account::NET_DEV_PENDING;
    st.net_mark = now;
}

#[inline(always)]
fn on_softirq_exit() {
    let now = account::now();
    if conf!(net.net_layer_on) != 0 {
        account::net_softirq_switch(Some(now), 0, vtrace_common::DEV_SLOTS);
    }
    let Some(st) = account::enter(now, state::UNRESOLVED) else {
        return;
    };
    let vec = st.softirq_vec as usize;
    if vec < SOFTIRQ_VECTORS {
        st.softirq_count[vec] += 1;
    }
    st.softirq_vec = NO_SOFTIRQ;
}

// TP_PROTO(int irq, struct irqaction *action)
hook_programs! {
    "irq_handler_entry", "irq";
    raw raw_irq_handler_entry(ctx) => {
        let irq: u64 = ctx.arg(0);
        let slot = device_slot(irq as u32);
        let at = conf!(cpu.irqaction_name);
        if at != 0 {
            let action: u64 = ctx.arg(1);
            let name: u64 = read_or_zero(action, at);
            keep_name(slot, name as *const u8);
        }
        on_hardirq_entry(slot);
    }
    tp tp_irq_handler_entry(ctx) => {
        let irq: i32 = unsafe { ctx.read_at(conf!(cpu.tp_irq_irq) as usize) }.unwrap_or(0);
        let slot = device_slot(irq as u32);
        // __data_loc: the string's offset in the record in the low 16 bits.
        let at = conf!(cpu.tp_irq_name);
        if at != 0 {
            let loc: u32 = unsafe { ctx.read_at(at as usize) }.unwrap_or(0);
            keep_name(slot, unsafe { (ctx.as_ptr() as *const u8).add((loc & 0xffff) as usize) });
        }
        on_hardirq_entry(slot);
    }
}

hook_programs! {
    "irq_handler_exit", "irq";
    raw raw_irq_handler_exit(_ctx) => {
        on_hardirq_exit();
    }
    tp tp_irq_handler_exit(_ctx) => {
        on_hardirq_exit();
    }
}

// TP_PROTO(unsigned int vec_nr)
hook_programs! {
    "softirq_entry", "irq";
    raw raw_softirq_entry(ctx) => {
        let vec: u64 = ctx.arg(0);
        on_softirq_entry(vec as u32);
    }
    tp tp_softirq_entry(ctx) => {
        let vec: u32 = unsafe { ctx.read_at(conf!(cpu.tp_softirq_vec) as usize) }.unwrap_or(u32::MAX);
        on_softirq_entry(vec);
    }
}

hook_programs! {
    "softirq_exit", "irq";
    raw raw_softirq_exit(_ctx) => {
        on_softirq_exit();
    }
    tp tp_softirq_exit(_ctx) => {
        on_softirq_exit();
    }
}

/// irq_vectors entry/exit pairs: raw and classic flavours per system vector.
macro_rules! system_vector {
    ($slot:expr, $raw_entry:ident, $raw_exit:ident, $tp_entry:ident, $tp_exit:ident, $entry:literal, $exit:literal) => {
        hook_programs! {
            $entry, "irq_vectors";
            raw $raw_entry(_ctx) => { on_hardirq_entry($slot); }
            tp $tp_entry(_ctx) => { on_hardirq_entry($slot); }
        }
        hook_programs! {
            $exit, "irq_vectors";
            raw $raw_exit(_ctx) => { on_hardirq_exit(); }
            tp $tp_exit(_ctx) => { on_hardirq_exit(); }
        }
    };
}

system_vector!(
    irq_vector::LOCAL_TIMER,
    raw_local_timer_entry,
    raw_local_timer_exit,
    tp_local_timer_entry,
    tp_local_timer_exit,
    "local_timer_entry",
    "local_timer_exit"
);
system_vector!(
    irq_vector::RESCHEDULE,
    raw_reschedule_entry,
    raw_reschedule_exit,
    tp_reschedule_entry,
    tp_reschedule_exit,
    "reschedule_entry",
    "reschedule_exit"
);
system_vector!(
    irq_vector::CALL_FUNCTION,
    raw_call_function_entry,
    raw_call_function_exit,
    tp_call_function_entry,
    tp_call_function_exit,
    "call_function_entry",
    "call_function_exit"
);
system_vector!(
    irq_vector::CALL_FUNCTION_SINGLE,
    raw_call_function_single_entry,
    raw_call_function_single_exit,
    tp_call_function_single_entry,
    tp_call_function_single_exit,
    "call_function_single_entry",
    "call_function_single_exit"
);
system_vector!(
    irq_vector::IRQ_WORK,
    raw_irq_work_entry,
    raw_irq_work_exit,
    tp_irq_work_entry,
    tp_irq_work_exit,
    "irq_work_entry",
    "irq_work_exit"
);
