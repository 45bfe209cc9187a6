//! The path layer: latency along a VM's virtio data path, stage by stage.

use crate::*;

/// The stages the path layer times ([`PathKey::stage`]), host -> guest
/// (rx) first, then guest -> host (tx).
pub mod path_stage {
    /// An skb queued to a tap (net_dev_start_xmit) -> taken by the tap's user:
    /// vhost-net (tun_recvmsg) or a VMM's read (consume_skb once copied
    /// out). Per frame.
    pub const RX_TAP_QUEUE: u32 = 0;
    /// The first frame the VM's threads took and have not signalled yet ->
    /// the next interrupt a thread of the VM raises for its guest
    /// (irqfd_wakeup, kvm_msi_set_irq, kvm_set_irq). Per signal; `frames`:
    /// the frames it covers.
    pub const RX_SIGNAL: u32 = 1;
    /// That MSI (its vector, in the same VM) -> KVM injects the vector
    /// into a vCPU (kvm_inj_virq).
    pub const RX_INJECT: u32 = 2;
    /// The injection -> the vCPU thread's next guest entry (kvm_entry).
    pub const RX_ENTRY: u32 = 3;
    /// The VM's first virtqueue kick not served yet (a guest write an
    /// ioeventfd took) -> a thread of the VM starts serving: vhost-net's
    /// handle_tx, or the VMM writing a frame to its tap (tun_get_user).
    /// `frames`: the kicks it served.
    pub const TX_KICK: u32 = 4;
    /// vhost-net's handle_tx started serving kicks -> its first frame
    /// reaches the tap (tun_get_user). A VMM's serving starts at its write
    /// to the tap: it has no such stage.
    pub const TX_SERVE: u32 = 5;
    /// Frames from the guest enter the tap (vhost-net's tun_sendmsg, a
    /// batch; a VMM's tun_get_user, one) -> the tap has handed them to the
    /// host's stack (the call returns; the stack runs inline there unless
    /// the tap uses NAPI). Per call; `frames`: the frames.
    pub const TX_TAP: u32 = 6;
    /// The passthrough path (a VF's interrupt, vfio-pci): the host takes the
    /// VF's MSI (irq_handler_entry of a `vfio-*` IRQ) -> vfio's handler
    /// signals the VM's irqfd and KVM sets the MSI (kvm_msi_set_irq), in
    /// that hardirq. Per interrupt, keyed by its host IRQ.
    pub const PT_SIGNAL: u32 = 7;
    /// That MSI -> KVM injects its vector into a vCPU (kvm_inj_virq): the
    /// vCPU woken (or kicked out of the guest), waiting for a CPU, and
    /// back in KVM's run loop.
    pub const PT_INJECT: u32 = 8;
    /// The injection -> the vCPU thread's next guest entry (kvm_entry).
    pub const PT_ENTRY: u32 = 9;
    /// The VF's host hardirq itself (irq_handler_entry -> _exit), beside
    /// the chain above (PT_SIGNAL ends inside it).
    pub const PT_HARDIRQ: u32 = 10;
    /// Inside a guest (`vtrace agent`), virtio-net's or a passed-through
    /// VF's side of the path. A receive queue's interrupt (vring_interrupt
    /// of an `input.N` virtqueue; a VF driver's receive IRQ, its handler's
    /// entry) -> its NAPI poll starts (virtnet_poll; a VF's, the NET_RX
    /// softirq's entry): the guest's softirq getting to it. Per interrupt.
    pub const GUEST_RX_POLL: u32 = 11;
    /// That poll (its start -> its napi_poll tracepoint): the driver takes
    /// the frames and the guest's stack runs them (GRO is flushed before it
    /// returns: IP, TCP or ICMP, the socket, a reply the stack sends
    /// inline). Per poll; `frames`: the frames it received, counted at the
    /// tracepoint, those of a poll whose start's kprobe was missed
    /// included, untimed.
    pub const GUEST_RX_STACK: u32 = 12;
    /// The first frame virtio-net starts to transmit on a queue
    /// (net_dev_start_xmit) and not announced yet -> the driver's kick of
    /// its `output.N` virtqueue (virtqueue_notify). Frames whose kick the
    /// driver found unneeded (the host was still serving the queue) are
    /// handed over without one (`path.guest_unannounced`); frames not
    /// announced yet when the window opens or closes are
    /// `path.guest_unannounced_at_start` and `_at_end`. `frames`: the
    /// frames announced.
    pub const GUEST_TX_KICK: u32 = 13;
    /// The kick itself (virtqueue_notify's entry -> return): the guest's
    /// write traps to the host (a VM exit, taken by an ioeventfd or the
    /// VMM) until the guest runs again.
    pub const GUEST_TX_NOTIFY: u32 = 14;
    /// Inside a guest, a passed-through VF's transmit: its driver's
    /// ndo_start_xmit (net_dev_start_xmit -> net_dev_xmit of the VF's
    /// device), its doorbell write included. The doorbell is a plain
    /// write to the VF's own memory, which the host never sees: the
    /// frame's next stop is the NIC. Per frame sent.
    pub const GUEST_TX_XMIT: u32 = 15;
    pub const COUNT: usize = 16;
    pub const NAMES: [&str; COUNT] = [
        "rx_tap_queue",
        "rx_signal",
        "rx_inject",
        "rx_entry",
        "tx_kick",
        "tx_serve",
        "tx_tap",
        "pt_signal",
        "pt_inject",
        "pt_entry",
        "pt_hardirq",
        "guest_rx_poll",
        "guest_rx_stack",
        "guest_tx_kick",
        "guest_tx_notify",
        "guest_tx_xmit",
    ];
    /// Each stage's direction: rx (host -> guest), tx (guest -> host), or
    /// passthrough (a VF's interrupt into its guest: `pt` in sequence,
    /// `pt_irq` the hardirq beside them), and a guest's own rx and tx.
    pub const DIRECTIONS: [&str; COUNT] = [
        "rx", "rx", "rx", "rx", "tx", "tx", "tx", "pt", "pt", "pt", "pt_irq", "guest_rx", "guest_rx", "guest_tx",
        "guest_tx", "guest_tx",
    ];
}

/// One stage's latencies, ended by one process (the thread that ended it:
/// the tap's reader, the signaller, the vCPU, the serving thread).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PathKey {
    pub tgid: u32,
    /// [`path_stage`].
    pub stage: u32,
    /// The passthrough stages' host IRQ (the VF's vector); 0 for virtio's.
    pub irq: u32,
    pub _pad: u32,
}

/// A stage's latencies ([`LatencyHist`]) and the frames (or kicks) they
/// covered (see [`path_stage`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathStats {
    pub frames: u64,
    pub hist: LatencyHist,
}

/// A batch of frames taken from a tap, followed through its interrupt: the
/// times of its first frame at each stage end so far (0: not reached, or,
/// for `queued_ns`, not seen).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathRxBatch {
    /// Its first frame was queued to the tap (net_dev_start_xmit).
    pub queued_ns: u64,
    /// That frame was taken from the tap (0: no batch pending).
    pub dequeued_ns: u64,
    /// The taking thread raised the guest's interrupt.
    pub signal_ns: u64,
    /// KVM injected that interrupt into a vCPU.
    pub inject_ns: u64,
    pub frames: u64,
}

/// What a VM's threads have taken from its taps and not signalled.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathRxPending {
    /// The frames taken since its last signal (`dequeued_ns` 0: none).
    pub batch: PathRxBatch,
    /// The batch its last signal ended, until the MSI of that signal
    /// stores it for [`path_stage::RX_INJECT`] (kvm_set_irq on an MSI
    /// route fires before kvm_msi_set_irq in the same call; `signal_ns`
    /// 0: none).
    pub signalled: PathRxBatch,
}

/// An MSI vector of one VM: the VM's memory (`mm_struct *`, shared by its
/// vCPUs, its VMM's threads and its vhost workers) and the vector.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PathVectorKey {
    pub mm: u64,
    pub vector: u32,
    pub _pad: u32,
}

/// A VM's kicks not served yet, and the last served ones until their first
/// frame reaches the tap.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathKick {
    /// When the first of them came (0: none pending).
    pub first_ns: u64,
    pub kicks: u64,
    /// vhost-net's handle_tx started serving kicks (0: no frame of them
    /// awaited at the tap).
    pub serve_ns: u64,
    /// The first of the kicks it serves, and their count.
    pub served_kick_ns: u64,
    pub served_kicks: u64,
    /// 1 once a kick of this VM woke vhost-net's transmit queue: from then
    /// on only such kicks are its transmit kicks (a 9p share's or another
    /// device the VMM serves is not).
    pub vhost: u64,
    /// Where the VMM serves the queues itself: the eventfds (their
    /// `eventfd_ctx`) a VMM thread read before every one of its tap writes
    /// so far (0: none), and, once they are down to one, its transmit
    /// queue's: from then on only kicks of it are transmit kicks (its
    /// vsock's, its 9p share's are not). 0: not known yet.
    pub candidates: [u64; PATH_READS_KEPT],
    pub tx_eventfd: u64,
}

/// The different eventfds a thread read since its last tap write.
pub const PATH_READS_KEPT: usize = 4;

/// A thread's eventfd reads since its last tap write: the different ones
/// (`count` of them; more than [`PATH_READS_KEPT`]: `count` past it, and
/// they say nothing).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathReads {
    pub eventfds: [u64; PATH_READS_KEPT],
    pub count: u64,
}

/// A frame in tun_get_user on a thread, until it returns.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathTxFrame {
    /// It entered tun_get_user.
    pub tap_ns: u64,
    /// The kick it answers and when vhost-net started serving it (0: not
    /// the first frame after a kick: only its tx_tap is timed; `serve_ns`
    /// 0 for a VMM's write).
    pub kick_ns: u64,
    pub serve_ns: u64,
    pub kicks: u64,
    /// The frames of this entry (a vhost-net batch: up to 64).
    pub frames: u64,
    /// Entries into the tap nested in this one (tun_sendmsg ->
    /// tun_get_user), whose returns do not end it.
    pub depth: u64,
}

/// `PathPacket::dir`.
pub mod path_dir {
    pub const RX: u32 = 0;
    pub const TX: u32 = 1;
    /// A VF's interrupt: ts are its host IRQ's entry, KVM's MSI, the
    /// injection, the guest entry, 0.
    pub const PASSTHROUGH: u32 = 2;
    /// Inside a guest, a receive interrupt: ts are the interrupt
    /// (vring_interrupt, or a VF's receive IRQ), its poll's start and
    /// return, 0, 0; `frames`: the frames the poll received.
    pub const GUEST_RX: u32 = 3;
    /// Inside a guest, a kick: ts are its first frame added, the notify's
    /// start and return, 0, 0; `frames`: the frames it announced.
    pub const GUEST_TX: u32 = 4;
    /// Inside a guest, a VF's transmit (SR-IOV): ts are its driver's
    /// start (net_dev_start_xmit, before the doorbell) and end
    /// (net_dev_xmit), 0, 0, 0; `frames` 1.
    pub const GUEST_VF_TX: u32 = 5;
}

/// A VF interrupt in its host handler on this CPU (`PT_IRQ`), then waiting
/// for its vector's injection (`PT_VECTORS`) and the vCPU's entry
/// (`PT_INJECTED`): the times of its stage ends so far (0: not reached).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathPtIrq {
    pub entry_ns: u64,
    pub signal_ns: u64,
    pub inject_ns: u64,
    pub irq: u32,
    pub _pad: u32,
}

/// One packet followed along a VM's path (`record --events`): the first
/// frame of an rx batch from the tap to the guest entry that delivered its
/// interrupt, or the first frame after a tx kick from the kick into the
/// host stack. `ts` are the ends of its stages in order (monotonic ns;
/// 0: that end not seen, or no such stage for this way of serving):
/// rx: queued to the tap, taken, signalled, injected, vCPU entry;
/// tx: kick, vhost-net's handle_tx, into the tap, out of the tap, 0.
/// Consecutive non-zero ends are its stage times, which sum exactly to
/// its last end minus its first.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathPacket {
    pub ts: [u64; 5],
    /// The VM (`mm_struct *`): rx and tx packets of one VM share it.
    pub vm: u64,
    /// The thread that ended it (rx: the vCPU; tx: the thread writing to the tap).
    pub tgid: u32,
    pub tid: u32,
    /// [`path_dir`].
    pub dir: u32,
    /// rx: the frames its interrupt covered; tx: the kicks served.
    pub frames: u32,
    /// Passthrough: the host IRQ; else 0.
    pub irq: u32,
    pub _pad: u32,
}

/// The path layer's loss counters (`PATH_LOSSES` slots).
pub mod path_loss {
    /// Latencies not counted: PATH_STATS was full.
    pub const STATS_FULL: u32 = 0;
    /// Frames taken from a tap with no queue time: queued before the layer
    /// started, evicted from the LRU of queued frames, or an XDP frame.
    pub const UNTIMED: u32 = 1;
    /// A path MSI whose injection was not seen before the same VM raised
    /// the same vector again (posted interrupts, APICv/AVIC, inject without
    /// kvm_inj_virq; or interrupts coalesced). A VF's MSI raised while its
    /// vector still waits is coalesced into the waiting one, timed from it.
    pub const UNINJECTED: u32 = 2;
    /// Followed packets (`--events`) not recorded: their ring buffer was full.
    pub const PACKETS_DROPPED: u32 = 3;
    /// Inside a guest: frames added to a virtio-net transmit queue whose
    /// kick the driver found unneeded (virtqueue_kick_prepare false: the
    /// host was still serving the queue), so not in guest_tx_kick.
    pub const GUEST_UNANNOUNCED: u32 = 4;
    /// Guest writes an ioeventfd took that woke a vhost queue other than
    /// vhost-net's transmit one (its receive queue refilled, vhost-vsock),
    /// or, in a VM whose transmit queue vhost-net serves, woke none (a
    /// device the VMM serves: a 9p share): not kicks of tx_kick.
    pub const OTHER_KICKS: u32 = 5;
    /// Kicks of a VM before its transmit queue was known (a kick woke
    /// vhost-net's transmit queue; where the VMM serves its queues, their
    /// eventfd was learnt from its first few tap writes): not timed, as any
    /// could be another queue's (a receive queue refilled, its vsock's) and
    /// would start tx_kick long before the transmit it is taken for.
    pub const TX_QUEUE_UNKNOWN: u32 = 6;
    pub const COUNT: u32 = 7;
}

/// Processes x stages the path layer keeps latencies for.
pub const MAX_PATH_STATS: u32 = 256;

/// Words of [`PathConfig::virtio_rx_irqs`] and `vf_rx_irqs`: a bit for
/// each of the `IRQ_DEVICE_SLOTS` device IRQs.
pub const RX_IRQ_WORDS: usize = crate::IRQ_DEVICE_SLOTS as usize / 32;

/// Passed-through VF network devices a guest's path layer times
/// ([`PathConfig::vf_ifindexes`]).
pub const MAX_VF_NICS: usize = 4;

/// The path layer's offsets and switch; the KVM and tun offsets its programs read it resolves itself, so it runs without those layers.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathConfig {
    pub tp_kvm_set_irq_level: u32,
    pub tp_kvm_msi_data: u32,
    pub tp_kvm_inj_virq_vector: u32,
    pub tp_kvm_inj_virq_soft: u32,
    pub msghdr_control: u32,
    pub tun_msg_ctl_type: u32,
    pub tun_msg_ctl_num: u32,
    /// `offsetof(struct task_struct, mm)`: the path layer's key of a VM
    /// (its vCPUs, its VMM's threads and its vhost workers, which run with
    /// their owner's mm, share one); 0 when unknown (nothing is keyed).
    pub task_mm: u32,
    /// kvm_apic_accept_irq's `vec` (the path layer learns lines' vectors).
    pub tp_kvm_apic_accept_irq_vec: u32,
    /// Non-zero: the path layer streams followed packets (`--events`).
    pub path_packets_on: u32,
    /// From a vhost poll's wait queue entry (`struct vhost_poll.wait`) to
    /// the function its work runs (`.work.fn`), and vhost-net's transmit
    /// kick handler's address (handle_tx_kick, its low and high halves: the
    /// programs read the configuration as u32s): a guest write that wakes
    /// another is no kick of tx_kick's. 0: unknown (every write counts).
    pub vhost_wait_to_fn: u32,
    pub vhost_tx_kick_fn_lo: u32,
    pub vhost_tx_kick_fn_hi: u32,
    /// Inside a guest: `offsetof(struct virtqueue, name)` (virtio-net's
    /// queues are `input.N` and `output.N`); 0 when unknown (the guest
    /// stages are not timed).
    pub virtqueue_name: u32,
    /// Inside a guest: virtio-net's `struct net_device_ops` and its receive
    /// poll function (their addresses from kallsyms, low and high halves),
    /// `offsetof(struct napi_struct, poll)` and `offsetof(struct sk_buff, queue_mapping)`:
    /// the tracepoints that count its frames tell its devices and polls
    /// from others'. Any 0: unknown (no frame is counted). (`netdev_ops`
    /// is the net_device group's; tun's devices are told there too.)
    pub virtnet_netdev_lo: u32,
    pub virtnet_netdev_hi: u32,
    pub virtnet_poll_lo: u32,
    pub virtnet_poll_hi: u32,
    pub napi_poll: u32,
    pub skb_queue_mapping: u32,
    /// Inside a guest: the IRQs of virtio-net's receive queues (their own
    /// MSI-X vectors, `virtioN-input.M` in /proc/interrupts), a bit per
    /// IRQ below `IRQ_DEVICE_SLOTS`: where vring_interrupt and virtnet_poll
    /// cannot be hooked (no kprobes), such an IRQ's handler is the receive
    /// interrupt and the NET_RX softirq after it the poll's start.
    pub virtio_rx_irqs: [u32; RX_IRQ_WORDS],
    /// Inside a guest: the receive IRQs of its passed-through VFs (their
    /// drivers' own vectors: igbvf's `ethN-rx-M`, ixgbevf's `ethN-TxRx-M`,
    /// iavf's `iavf-ethN-TxRx-M`), a bit per IRQ as above; the interrupt's
    /// handler is the receive interrupt, whatever kprobes allow.
    pub vf_rx_irqs: [u32; RX_IRQ_WORDS],
    /// Those VFs' network devices (ifindex; 0: no slot): their NAPI polls'
    /// frames are the guest's received ones, and their transmits are
    /// timed ([`path_stage::GUEST_TX_XMIT`]).
    pub vf_ifindexes: [u32; MAX_VF_NICS],
    /// `offsetof(struct napi_struct, dev)`: a VF's poll is told by its device.
    pub napi_dev: u32,
    /// Non-zero: the NET_RX softirq's entry starts a VF's poll. Zero where
    /// virtio-net's receive side is itself timed at that entry (no kprobes:
    /// its fallback), which starts every device's poll once.
    pub vf_starts_poll: u32,
    /// Non-zero: a receive queue's vring_interrupt is its interrupt only
    /// where it returns IRQ_HANDLED (a kretprobe checks: kprobes attach).
    /// virtio-mmio's one interrupt runs vring_interrupt on every queue:
    /// a transmit queue's completion would else start the receive
    /// queue's wait for a poll that comes with the next request.
    pub rx_irq_at_return: u32,
    /// The eventfd a kick signals (`struct _ioeventfd`'s `dev`, which
    /// ioeventfd_write gets, and its `eventfd`) and the one a read reads
    /// (`kiocb.ki_filp`, `file.private_data`): a VMM's transmit queue is
    /// the eventfd its tap writes follow. `ioeventfd_eventfd` or
    /// `file_private_data` 0: unknown (every kick counts).
    pub ioeventfd_dev: u32,
    pub ioeventfd_eventfd: u32,
    pub kiocb_filp: u32,
    pub file_private_data: u32,
}

/// Per CPU: the vCPU thread inside ioeventfd_write (0: none), and whether
/// the write woke a vhost queue other than vhost-net's transmit one.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathKickTarget {
    pub tid: u32,
    pub other: u32,
    /// The write woke vhost-net's transmit queue.
    pub tx: u32,
    pub _pad: u32,
    /// The eventfd it signals (0: unknown).
    pub eventfd: u64,
}

/// Inside a guest, per CPU: virtio-net's or a VF's receive side.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathGuestRx {
    /// The first receive interrupt its poll has not started on (0: none).
    pub irq_ns: u64,
    /// A receive queue's vring_interrupt running now (0: none): an
    /// interrupt of its poll's only if it found used buffers there.
    pub entering_ns: u64,
    /// The poll running now began (0: none), after the interrupt at
    /// `poll_irq_ns` (0: a poll no interrupt started, rescheduled).
    pub poll_ns: u64,
    pub poll_irq_ns: u64,
}

/// Inside a guest: a transmit virtqueue's frames not announced yet.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathGuestTx {
    pub first_ns: u64,
    pub frames: u64,
}

/// Inside a guest, per CPU: the virtio-net transmit running (its queue:
/// the device's address plus the queue's index; 0: none), the transmit
/// virtqueue its kick decision is for (0: none), and when that kick
/// began; or a VF's transmit running.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathGuestKick {
    pub txq: u64,
    pub vq: u64,
    pub notify_ns: u64,
    /// The kick's first frame added, and the frames it announces.
    pub first_ns: u64,
    pub frames: u64,
    /// A VF's transmit running on this CPU began (0: none).
    pub vf_xmit_ns: u64,
}
