//! Interrupt bookkeeping: each IRQ's time and count, and NET_RX softirq
//! time per device.

use super::*;

/// NET_RX softirq ns per device ([`vtrace_common::dev_key`]; 0: softirqs that received no packet).
#[map]
pub static NET_SOFTIRQ: PerCpuHashMap<u64, u64> = PerCpuHashMap::with_max_entries(4096, 0);

#[map]
pub static IRQS: PerCpuArray<IrqStat> = PerCpuArray::with_max_entries(IRQ_SLOTS, 0);

const NET_RX: u32 = 3;

/// `CpuState::net_dev` from NET_RX entry until its first packet names a device.
pub const NET_DEV_PENDING: u64 = u64::MAX;

/// Charges the running NET_RX softirq's time since the last device switch to
/// the device it was processing, then hands over to `dev` (0 at softirq
/// end), whose counters are in DEV_SLOT_STATS slot `slot` (or `DEV_SLOTS`:
/// none). The time before a softirq's first packet goes to that packet's
/// device (its poll); a softirq without packets charges device 0. Packets of
/// the device already charged cost nothing; a device change costs one
/// array update, or a hash map update for a device without a slot. Time is
/// softirq time only: the caller's event timestamps are those of the softirq
/// state machine.
#[inline(always)]
pub fn net_softirq_switch(now: Option<u64>, dev: u64, slot: u32) {
    let Some(st) = cpu_state() else { return };
    if st.softirq_vec != NET_RX || st.net_dev == dev {
        return;
    }
    if st.net_dev == NET_DEV_PENDING {
        st.net_slot = slot;
        if dev != 0 {
            st.net_dev = dev;
            return;
        }
        st.net_dev = 0;
    }
    let now = now.unwrap_or_else(super::now);
    let elapsed = now.saturating_sub(st.net_mark);
    if st.net_mark != 0 && elapsed > 0 {
        let in_slot = match crate::net::DEV_SLOT_STATS.get_ptr_mut(st.net_slot) {
            Some(s) => {
                unsafe { (*s).softirq_ns += elapsed };
                true
            }
            None => false,
        };
        if !in_slot {
            match NET_SOFTIRQ.get_ptr_mut(&st.net_dev) {
                Some(v) => unsafe { *v += elapsed },
                None => {
                    let _ = NET_SOFTIRQ.insert(&st.net_dev, &elapsed, 0);
                }
            }
        }
    }
    st.net_dev = dev;
    st.net_slot = slot;
    st.net_mark = now;
}

/// Records the end of the outermost hard interrupt in its IRQ slot.
#[inline(always)]
pub fn irq_done(st: &mut CpuState) {
    let slot = if st.irq_slot < IRQ_SLOTS {
        st.irq_slot
    } else {
        IRQ_SLOTS - 1
    };
    if let Some(s) = IRQS.get_ptr_mut(slot) {
        let s = unsafe { &mut *s };
        s.ns += st.irq_acc;
        s.count += 1;
    }
    st.irq_acc = 0;
}
