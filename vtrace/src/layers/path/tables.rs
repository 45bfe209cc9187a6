//! The path layer's tables: each stage of a VM's virtio data path per
//! process that ended it, and their histograms.

use crate::recording::{Owner, table};

table! {
    /// Latencies of one stage of the virtio data path (`stage`: rx_tap_queue,
    /// rx_signal, rx_inject, rx_entry, tx_kick, tx_serve, tx_tap) or of the
    /// passthrough path (pt_signal, pt_inject, pt_entry, pt_hardirq), ended by
    /// process `pid` (the tap's reader, the signalling thread, the vCPU's
    /// VMM, the serving thread), named and owned as the threads table names
    /// it. `frames`: frames timed (rx_tap_queue, tx_tap), frames covered by
    /// the signals (rx_signal), kicks served (tx_kick, tx_serve); 0 for
    /// rx_inject and rx_entry.
    PathRow = "path" version 2 {
        stage: String,
        #[serde(flatten)]
        owner: Owner,
        count: u64,
        sum_ns: u64,
        min_ns: u64,
        max_ns: u64,
        frames: u64,
        /// The passthrough stages' (pt_*) host IRQ: the VF's vector, named
        /// in the hardirqs table; 0 for virtio's.
        irq: u32 [since 2],
    }
}

table! {
    /// Histograms of path rows: buckets `[lo_ns, hi_ns)`, 8 per power of two.
    PathHistRow = "path_hists" version 2 {
        stage: String,
        pid: u32,
        lo_ns: u64,
        hi_ns: u64,
        count: u64,
        irq: u32 [since 2],
    }
}

table! {
    /// Followed packets (`record --events`): the first frame of each rx
    /// batch from the tap to the vCPU entry that delivered its interrupt,
    /// and the first frame after each tx kick from the kick into the host's
    /// stack. `t0_ns`..`t4_ns`: the ends of its stages, ns since the
    /// recording started (0: not seen, or no such stage): rx, queued to the
    /// tap, taken, signalled, injected, entered; tx, kicked, handle_tx
    /// (vhost-net only), into the tap, out of the tap, 0. Consecutive
    /// non-zero ends are its stage times (`vtrace_common::path_stage` in
    /// order), which sum exactly to the last end minus the first. `vm`:
    /// the VM's kernel memory key, shared by its rx and tx packets;
    /// `frames`: rx, frames its
    /// interrupt covered; tx, kicks served. `pid`/`tid`: the thread that
    /// ended it (rx: the vCPU; tx: the tap's writer), owned as the threads
    /// table owns it.
    PathPacketRow = "path_packets" version 2 {
        dir: String,
        #[serde(flatten)]
        owner: Owner,
        tid: u32,
        vm: u64,
        frames: u32,
        t0_ns: u64,
        t1_ns: u64,
        t2_ns: u64,
        t3_ns: u64,
        t4_ns: u64,
        /// pt (a VF's interrupt, since 2): its host IRQ; t0..t3 are the
        /// IRQ's entry, KVM's MSI, the injection, the guest entry; t4 0.
        /// Inside a guest (`vtrace agent`): guest_rx, an interrupt's poll
        /// (t0..t2: the interrupt, the poll's start and return; `frames`:
        /// received), guest_tx, a kick (t0..t2: its first frame added, the
        /// notify's start and return; `frames`: announced), guest_vf_tx, a
        /// VF's transmit (t0, t1: its driver's start and end; `frames` 1);
        /// `vm` 0.
        irq: u32 [since 2],
    }
}
