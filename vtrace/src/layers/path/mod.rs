//! The path layer (`--layers path`): latency along a VM's virtio data path,
//! stage by stage (vtrace-ebpf/src/path/, `vtrace_common::path_stage`):
//! rx, a frame queued to the tap -> taken by vhost-net or the VMM -> the
//! interrupt raised for the guest -> injected into a vCPU -> that vCPU
//! entering the guest; tx, the guest's kick -> the thread that serves it ->
//! the frame into the tap -> out of it into the host's stack. Each stage is
//! a histogram in the kernel per process that ended it, owned as the CPU
//! layer's threads table owns that process, so the report shows each VM
//! instance's path; with `--events`, each rx batch's and tx kick's first
//! frame is followed through every stage (path_packets). Its ends are
//! tun/vhost-net functions (kprobes) and kvm/* tracepoints: without kprobes
//! it does not run. Inside a guest (`vtrace agent`), the same layer times
//! virtio-net's side: the receive interrupt -> its NAPI poll -> the frames
//! through the guest's stack; the first frame queued -> the kick -> the
//! kick's exit back (`guest_*` stages).

pub mod packets;
pub mod probes;
pub mod summary;
pub mod tables;

use std::collections::BTreeMap;

use aya::{
    Ebpf,
    maps::{HashMap, MapData, PerCpuArray, PerCpuHashMap, RingBuf},
};
use vtrace_common::{
    Config, FINE_BUCKETS, PathGuestTx, PathKey, PathPacket, PathRxPending, PathStats, fine_bucket_range, path_dir,
    path_loss, path_stage,
};

pub use tables::{PathHistRow, PathPacketRow, PathRow};

use super::{Collector, Emit, End, Layer, LayerOutput, Loss, Setup, cpu::ThreadIndex, cpu::ThreadRow};
use crate::recording::Owner;
use crate::{
    Result,
    collectors::maps::{Counters, delta, sum_per_cpu, take},
    probes::{
        ProbeSpec,
        offsets::{self, KernelLayout},
    },
    recording::{Overhead, Recording, TableKind},
    report_model::Section,
};

pub struct PathLayer;

/// The IRQs of virtio-net's receive queues that have one of their own
/// (MSI-X: `virtioN-input.M` in /proc/interrupts, where virtioN's driver
/// is virtio_net; a shared vector, `virtioN-virtqueues`, tells no queue).
pub fn virtio_net_rx_irqs() -> Vec<u32> {
    let Ok(text) = std::fs::read_to_string("/proc/interrupts") else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| {
            let (irq, rest) = line.trim_start().split_once(':')?;
            let irq: u32 = irq.parse().ok()?;
            let (device, queue) = rest.split_whitespace().last()?.split_once("-input.")?;
            queue.parse::<u32>().ok()?;
            let driver = std::fs::read_link(format!("/sys/bus/virtio/devices/{device}/driver")).ok()?;
            (driver.file_name()? == "virtio_net").then_some(irq)
        })
        .collect()
}

/// A passed-through VF inside a guest: its network device and its
/// driver's receive IRQs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VfNic {
    pub name: String,
    pub ifindex: u32,
    pub rx_irqs: Vec<u32>,
}

/// The VF drivers whose receive IRQs are told by name (`/proc/interrupts`):
/// igbvf's `ethN-rx-M`, ixgbevf's `ethN-TxRx-M`, iavf's `iavf-ethN-TxRx-M`.
const VF_DRIVERS: &[&str] = &["igbvf", "ixgbevf", "iavf"];

/// This machine's network devices a VF driver runs, each with its receive
/// IRQs (none found: the device's receive side is not timed, its
/// transmits still are).
pub fn vf_nics() -> Vec<VfNic> {
    let interrupts = std::fs::read_to_string("/proc/interrupts").unwrap_or_default();
    let Ok(devices) = std::fs::read_dir("/sys/class/net") else {
        return Vec::new();
    };
    let mut nics: Vec<VfNic> = devices
        .flatten()
        .filter_map(|d| {
            let name = d.file_name().to_string_lossy().into_owned();
            let driver = std::fs::read_link(d.path().join("device/driver")).ok()?;
            if !VF_DRIVERS.iter().any(|v| driver.file_name().is_some_and(|f| f == *v)) {
                return None;
            }
            let ifindex = std::fs::read_to_string(d.path().join("ifindex"))
                .ok()?
                .trim()
                .parse()
                .ok()?;
            let rx_irqs = vf_rx_irqs(&interrupts, &name);
            Some(VfNic { name, ifindex, rx_irqs })
        })
        .collect();
    nics.sort_by_key(|n| n.ifindex);
    nics
}

/// Device `name`'s receive IRQs in `interrupts` (/proc/interrupts' text),
/// by the VF drivers' names for them.
fn vf_rx_irqs(interrupts: &str, name: &str) -> Vec<u32> {
    interrupts
        .lines()
        .filter_map(|line| {
            let (irq, rest) = line.trim_start().split_once(':')?;
            let irq: u32 = irq.parse().ok()?;
            let action = rest.split_whitespace().last()?;
            let action = action.strip_prefix("iavf-").unwrap_or(action);
            let queue = action
                .strip_prefix(name)?
                .strip_prefix("-rx-")
                .or_else(|| action.strip_prefix(name)?.strip_prefix("-TxRx-"))?;
            queue.parse::<u32>().ok()?;
            Some(irq)
        })
        .collect()
}

impl Layer for PathLayer {
    fn name(&self) -> &'static str {
        "path"
    }
    /// A program on every guest entry and on every frame a tap queues: asked for.
    fn on_by_default(&self) -> bool {
        false
    }
    /// Every host stage starts or ends at a tun/vhost-net function
    /// (kprobes); without them only a guest's side is timed: virtio-net's
    /// receive side, where a receive queue has an interrupt of its own, and
    /// a passed-through VF's (tracepoints only).
    fn can_run(&self, setup: &Setup) -> Result<(), String> {
        if setup.caps.kprobe_pmu || !virtio_net_rx_irqs().is_empty() || !vf_nics().is_empty() {
            Ok(())
        } else {
            Err(
                "kprobes unavailable (no kprobe PMU: kernel built without CONFIG_KPROBES): every stage of the \
                 virtio data path on a host starts or ends at a tun/vhost-net kernel function, and no virtio-net \
                 receive queue here has an interrupt of its own (MSI-X), nor is a VF's driver here, to time a \
                 guest's side at tracepoints"
                    .into(),
            )
        }
    }
    fn catalog(&self) -> &'static [ProbeSpec] {
        probes::PATH
    }
    /// The VM key (`task_struct.mm`), vhost-net's frame in its msghdr, and
    /// the kvm/* record fields the kvm layer reads too (same values).
    fn offsets(&self, k: &KernelLayout, o: &mut Config) {
        o.path.task_mm = k.member("task_struct", "mm");
        o.path.msghdr_control = k.member("msghdr", "msg_control");
        let kvm = |ev: &str, field: &str| k.tracepoint("kvm", ev, field);
        o.path.tp_kvm_set_irq_level = kvm("kvm_set_irq", "level");
        o.path.tp_kvm_msi_data = kvm("kvm_msi_set_irq", "data");
        // `vector` (with `soft`) since Linux 6.0; `irq` before.
        o.path.tp_kvm_inj_virq_vector = k.tracepoint_any("kvm", "kvm_inj_virq", &["vector", "irq"]);
        o.path.tp_kvm_inj_virq_soft = kvm("kvm_inj_virq", "soft");
        o.path.tp_kvm_apic_accept_irq_vec = kvm("kvm_apic_accept_irq", "vec");
        // Kernel addresses the programs compare with: virtio-net's device
        // operations (the tracepoints that count frames tell its devices by
        // them; tun's are told in the net_device group), its receive poll,
        // and vhost-net's transmit kick handler.
        offsets::net_device(k, o);
        let [virtnet_ops, virtnet_poll, tx_kick] = k.symbols([
            ("virtnet_netdev", "virtio_net"),
            ("virtnet_poll", "virtio_net"),
            ("handle_tx_kick", "vhost_net"),
        ]);
        (o.path.virtnet_netdev_lo, o.path.virtnet_netdev_hi) = vtrace_common::halves(virtnet_ops);
        (o.path.virtnet_poll_lo, o.path.virtnet_poll_hi) = vtrace_common::halves(virtnet_poll);
        // vhost-net's batches into a tap (the tun module's own struct, as
        // the tun layer reads it).
        if let Some(tun) = k.module("tun") {
            o.path.tun_msg_ctl_type = offsets::member_offset(&tun, "tun_msg_ctl", "type").unwrap_or(0);
            o.path.tun_msg_ctl_num = offsets::member_offset(&tun, "tun_msg_ctl", "num").unwrap_or(0);
        }
        // vhost's struct vhost_poll: from its wait queue entry to its
        // work's function, and vhost-net's transmit kick handler.
        if let Some(vhost) = k.module("vhost") {
            let member = |s: &str, m: &str| offsets::member_offset(&vhost, s, m);
            if let (Some(wait), Some(work), Some(func)) = (
                member("vhost_poll", "wait"),
                member("vhost_poll", "work"),
                member("vhost_work", "fn"),
            ) && work + func > wait
            {
                o.path.vhost_wait_to_fn = work + func - wait;
                (o.path.vhost_tx_kick_fn_lo, o.path.vhost_tx_kick_fn_hi) = vtrace_common::halves(tx_kick);
            }
        }
        // The eventfd a kick signals (KVM's struct _ioeventfd, in kvm's
        // BTF where KVM is a module) and the one a read reads.
        let ioeventfd = |m: &str| {
            k.module("kvm")
                .and_then(|kvm| offsets::member_offset(&kvm, "_ioeventfd", m))
                .unwrap_or_else(|| k.member("_ioeventfd", m))
        };
        o.path.ioeventfd_dev = ioeventfd("dev");
        o.path.ioeventfd_eventfd = ioeventfd("eventfd");
        o.path.kiocb_filp = k.member("kiocb", "ki_filp");
        o.path.file_private_data = k.member("file", "private_data");
        // Inside a guest: virtio's struct virtqueue, in vmlinux where virtio
        // is built in, else in the module's BTF.
        o.path.virtqueue_name = ["virtio_ring", "virtio"]
            .iter()
            .filter_map(|m| k.module(m))
            .find_map(|btf| offsets::member_offset(&btf, "virtqueue", "name"))
            .unwrap_or_else(|| k.member("virtqueue", "name"));
        o.path.napi_poll = k.member("napi_struct", "poll");
        o.path.napi_dev = k.member("napi_struct", "dev");
        o.path.skb_queue_mapping = k.member("sk_buff", "queue_mapping");
    }
    /// The tracepoints that count frames only where the devices they are
    /// for were found (tun's, virtio-net's): elsewhere they would run on
    /// every packet for nothing.
    fn probes(&self, _setup: &Setup, config: &Config) -> Result<Vec<ProbeSpec>> {
        let c = &config.path;
        let known = |lo: u32, hi: u32| vtrace_common::address(lo, hi) != 0;
        let virtio_rx = known(c.virtnet_poll_lo, c.virtnet_poll_hi);
        let virtio_tx = known(c.virtnet_netdev_lo, c.virtnet_netdev_hi);
        let tun = config.net_device.tells_tun();
        let vf = c.vf_ifindexes[0] != 0;
        Ok(probes::PATH
            .iter()
            .filter(|p| match p.id {
                probes::START_XMIT => virtio_tx || tun || vf,
                probes::NAPI_POLL => virtio_rx || vf,
                probes::VF_RX_SOFTIRQ => vf,
                id if probes::VIRTIO_NET_RX.contains(&id) => virtio_rx,
                id if probes::VIRTIO_NET_TX.contains(&id) => virtio_tx || vf,
                _ => true,
            })
            .copied()
            .collect())
    }
    fn configure(&self, setup: &Setup, config: &mut Config) {
        config.path.path_packets_on = setup.asked.switches.get::<super::CommonSwitches>().events as u32;
        let set = |bitmap: &mut [u32], irq: u32| {
            if let Some(word) = bitmap.get_mut(irq as usize / 32) {
                *word |= 1 << (irq % 32);
            }
        };
        let virtio_rx_irqs = virtio_net_rx_irqs();
        for &irq in &virtio_rx_irqs {
            set(&mut config.path.virtio_rx_irqs, irq);
        }
        for (slot, nic) in config.path.vf_ifindexes.iter_mut().zip(vf_nics()) {
            *slot = nic.ifindex;
            for irq in nic.rx_irqs {
                set(&mut config.path.vf_rx_irqs, irq);
            }
        }
        // Without kprobes virtio-net's poll starts at the NET_RX softirq
        // (its fallback), which then starts a VF's too. (Where fentry
        // attached and kprobes could not, a VF's polls go untimed, their
        // frames still counted.)
        let virtio_poll_known = vtrace_common::address(config.path.virtnet_poll_lo, config.path.virtnet_poll_hi) != 0;
        config.path.vf_starts_poll =
            !(virtio_poll_known && !setup.caps.kprobe_pmu && !virtio_rx_irqs.is_empty()) as u32;
        config.path.rx_irq_at_return = setup.caps.kprobe_pmu as u32;
    }
    fn tables(&self) -> Vec<TableKind> {
        vec![
            TableKind::of::<PathRow>(),
            TableKind::of::<PathHistRow>(),
            TableKind::of::<PathPacketRow>(),
        ]
    }
    fn losses(&self) -> &'static [Loss] {
        &[
            Loss {
                key: "path.stats_full",
                meaning: "virtio path latencies not counted: the per-process stage map was full",
            },
            Loss {
                key: "path.untimed",
                meaning: "frames taken from a tap whose queueing was not seen (queued before the layer started, \
                          evicted from the map of queued frames, or an XDP frame, never an skb): not in rx_tap_queue",
            },
            Loss {
                key: "path.unsignalled_at_start",
                meaning: "frames taken from a tap before the window whose interrupt had not been raised at its \
                          start: in rx_signal's frames if it was raised in the window, not in rx_tap_queue",
            },
            Loss {
                key: "path.unsignalled_at_end",
                meaning: "frames taken from a tap whose interrupt had not been raised at the window's end (the \
                          last frames, or ones the guest took by polling, no interrupt asked): not in rx_signal's \
                          frames",
            },
            Loss {
                key: "path.uninjected",
                meaning: "interrupts raised for a VM after taking frames whose injection KVM did not trace before \
                          the same vector was raised again (posted interrupts: APICv/AVIC; or coalesced): not in \
                          rx_inject or rx_entry",
            },
            Loss {
                key: "path.other_kicks",
                meaning: "guest writes an ioeventfd took that woke a vhost queue other than vhost-net's transmit one \
                          (its receive queue refilled, vhost-vsock), or, in a VM vhost-net serves, woke none (a device \
                          the VMM serves: a 9p share), or, where the VMM serves its queues, signalled another eventfd \
                          than the one its tap writes follow (its vsock, a 9p share): not kicks of tx_kick",
            },
            Loss {
                key: "path.tx_queue_unknown",
                meaning: "kicks of a VM before its transmit queue was known (before a kick woke vhost-net's \
                          transmit queue; where the VMM serves its queues, before that queue's eventfd was learnt from \
                          its first tap writes): not timed in tx_kick, since any could be another queue's",
            },
            Loss {
                key: "path.guest_unannounced",
                meaning: "inside a guest: frames virtio-net added to a transmit queue without a kick, the host still \
                          serving the queue (virtqueue_kick_prepare false): not in guest_tx_kick's frames",
            },
            Loss {
                key: "path.guest_unannounced_at_start",
                meaning: "inside a guest: frames virtio-net had started to transmit before the window and not \
                          announced at its start: in guest_tx_kick's frames if kicked in the window",
            },
            Loss {
                key: "path.guest_unannounced_at_end",
                meaning: "inside a guest: frames virtio-net started to transmit whose kick had not come at the \
                          window's end: not in guest_tx_kick's frames",
            },
            Loss {
                key: "path.packets_dropped",
                meaning: "followed packets (--events) not recorded: their 4 MiB ring buffer filled between two \
                          readings, or more than the packets kept in memory came",
            },
        ]
    }
    fn summarize(&self, rec: &Recording, top: usize) -> Section {
        summary::section(rec, top)
    }
    fn start(&self, ebpf: &mut Ebpf, setup: &Setup, config: &Config) -> Result<Box<dyn Collector>> {
        let packets = if config.path.path_packets_on != 0 {
            Some(take(ebpf, "PATH_PACKETS")?)
        } else {
            None
        };
        Ok(Box::new(PathRecorder {
            stats: take(ebpf, "PATH_STATS")?,
            losses: take(ebpf, "PATH_LOSSES")?,
            pending: take(ebpf, "PATH_RX_PENDING")?,
            guest_tx: take(ebpf, "PATH_GUEST_TX")?,
            base_unsignalled: 0,
            unsignalled: 0,
            base_unannounced: 0,
            unannounced: 0,
            unsteady: false,
            base: BTreeMap::new(),
            last: BTreeMap::new(),
            base_lost: [0; path_loss::COUNT as usize],
            lost: [0; path_loss::COUNT as usize],
            packets,
            followed: Vec::new(),
            unkept: 0,
            start_mono: setup.start_mono,
        }))
    }
}

impl Counters for PathStats {
    fn add(&mut self, o: &Self) {
        self.frames += o.frames;
        self.hist.add(&o.hist);
    }
    fn sub(&mut self, o: &Self) {
        self.frames -= o.frames.min(self.frames);
        self.hist.sub(&o.hist);
    }
}

struct PathRecorder {
    stats: PerCpuHashMap<MapData, PathKey, PathStats>,
    losses: PerCpuArray<MapData, u64>,
    /// Each VM's frames taken from its taps and not yet signalled.
    pending: HashMap<MapData, u64, PathRxPending>,
    /// Frames taken and not yet signalled at the window's start and at the
    /// last reading.
    base_unsignalled: u64,
    unsignalled: u64,
    /// Inside a guest: each virtio-net transmit queue's frames not
    /// announced yet.
    guest_tx: HashMap<MapData, u64, PathGuestTx>,
    /// Those frames at the window's start and at the last reading.
    base_unannounced: u64,
    unannounced: u64,
    /// A VM took frames or signalled while the last reading read the
    /// stages: its counts may not agree with `unsignalled`.
    unsteady: bool,
    /// Every stage per process, summed over CPUs, when the workload started
    /// (the window every layer's counters share) and at the last reading.
    base: BTreeMap<PathKey, PathStats>,
    last: BTreeMap<PathKey, PathStats>,
    base_lost: [u64; path_loss::COUNT as usize],
    /// [`path_loss`] counters at the last reading.
    lost: [u64; path_loss::COUNT as usize],
    /// Followed packets (`--events`), drained every interval.
    packets: Option<RingBuf<MapData>>,
    followed: Vec<PathPacket>,
    /// Followed packets drained past [`MAX_FOLLOWED`].
    unkept: u64,
    start_mono: u64,
}

/// Followed packets kept in memory until the end (64 MiB): one per rx
/// interrupt and tx kick, so a minute of a latency-bound workload fits.
const MAX_FOLLOWED: usize = 1 << 20;

impl PathRecorder {
    fn drain(&mut self) {
        let Some(ring) = self.packets.as_mut() else {
            return;
        };
        while let Some(item) = ring.next() {
            if item.len() < std::mem::size_of::<PathPacket>() {
                continue;
            }
            if self.followed.len() < MAX_FOLLOWED {
                self.followed
                    .push(unsafe { std::ptr::read_unaligned(item.as_ptr() as *const PathPacket) });
            } else {
                self.unkept += 1;
            }
        }
    }

    /// Every VM's frames taken and not yet signalled, and every guest
    /// transmit queue's frames not announced, as the kernel holds them.
    fn pending(&self) -> (BTreeMap<u64, PathRxPending>, BTreeMap<u64, PathGuestTx>) {
        (
            self.pending.iter().filter_map(|e| e.ok()).collect(),
            self.guest_tx.iter().filter_map(|e| e.ok()).collect(),
        )
    }

    fn read(&mut self) -> Result<()> {
        self.drain();
        // Every take and signal changes its VM's entry (its frames, its
        // timestamps): the same entries before and after the stages and
        // losses were read mean none happened meanwhile, and the frames
        // they hold are those the stages have not signalled. (Not quite
        // always: a program preempted between its stage's write and its
        // entry's, or two queues of one VM taking frames at once on two
        // CPUs, can still put one frame on one side only.)
        let before = self.pending();
        self.last = sum_per_cpu(&self.stats)?;
        for (slot, n) in self.lost.iter_mut().enumerate() {
            *n = self.losses.get(&(slot as u32), 0).map(|v| v.iter().sum()).unwrap_or(0);
        }
        let after = self.pending();
        self.unsteady = before != after;
        self.unsignalled = after
            .0
            .values()
            .filter(|p| p.batch.dequeued_ns != 0)
            .map(|p| p.batch.frames)
            .sum();
        self.unannounced = after.1.values().map(|t| t.frames).sum();
        Ok(())
    }
}

impl Collector for PathRecorder {
    /// What the probes timed while the others attached is left out, and so
    /// are the packets they followed then.
    fn baseline(&mut self, _attached: &super::Attached) -> Result<()> {
        self.read()?;
        self.base = self.last.clone();
        self.base_lost = self.lost;
        self.base_unsignalled = self.unsignalled;
        self.base_unannounced = self.unannounced;
        self.followed.clear();
        self.unkept = 0;
        Ok(())
    }

    fn tick(&mut self, _now_mono: u64) -> Result<()> {
        self.drain();
        Ok(())
    }

    fn checkpoint(&mut self, _now: &End) -> Result<bool> {
        self.read()?;
        Ok(true)
    }

    fn unsteady(&self) -> Option<&'static str> {
        self.unsteady.then_some(
            "a VM's thread took frames from a tap or raised their interrupt while the path layer read its \
             stages: rx_signal's frames and path.unsignalled_at_start/_at_end may disagree by those frames",
        )
    }

    fn emit(&self, ctx: &Emit, out: &mut LayerOutput, _overhead: &mut Overhead) -> Result<()> {
        let threads = ctx.tables.rows::<ThreadRow>();
        let window = delta(&self.last, &self.base, |s| s.hist.count > 0 || s.frames > 0);
        let (rows, hists) = rows(&window, threads);
        out.notes.extend(notes(&rows));
        out.tables.put(rows);
        out.tables.put(hists);
        out.tables.put(packet_rows(&self.followed, threads, self.start_mono));
        let lost = |slot: u32| self.lost[slot as usize] - self.base_lost[slot as usize];
        out.losses.push(("path.stats_full", lost(path_loss::STATS_FULL)));
        out.losses.push(("path.untimed", lost(path_loss::UNTIMED)));
        out.losses.push(("path.unsignalled_at_start", self.base_unsignalled));
        out.losses.push(("path.unsignalled_at_end", self.unsignalled));
        out.losses.push(("path.uninjected", lost(path_loss::UNINJECTED)));
        out.losses
            .push(("path.guest_unannounced", lost(path_loss::GUEST_UNANNOUNCED)));
        out.losses
            .push(("path.guest_unannounced_at_start", self.base_unannounced));
        out.losses.push(("path.guest_unannounced_at_end", self.unannounced));
        out.losses.push(("path.other_kicks", lost(path_loss::OTHER_KICKS)));
        out.losses
            .push(("path.tx_queue_unknown", lost(path_loss::TX_QUEUE_UNKNOWN)));
        out.losses
            .push(("path.packets_dropped", lost(path_loss::PACKETS_DROPPED) + self.unkept));
        Ok(())
    }
}

/// The path and path_hists rows: each stage per process, named and owned
/// as the threads table names the process.
fn rows(stats: &BTreeMap<PathKey, PathStats>, threads: &[ThreadRow]) -> (Vec<PathRow>, Vec<PathHistRow>) {
    let index = ThreadIndex::new(threads);
    let mut rows = Vec::new();
    let mut hists = Vec::new();
    for (k, s) in stats {
        let h = &s.hist;
        // Frames counted with no latency (a poll whose start a kprobe
        // missed) keep their row, untimed.
        if h.count == 0 && s.frames == 0 {
            continue;
        }
        let stage = path_stage::NAMES.get(k.stage as usize).copied().unwrap_or("?");
        rows.push(PathRow {
            stage: stage.into(),
            owner: index.process_owner(k.tgid),
            count: h.count,
            sum_ns: h.sum_ns,
            min_ns: if h.count == 0 { 0 } else { h.min_ns },
            max_ns: h.max_ns,
            frames: s.frames,
            irq: k.irq,
        });
        for (i, &count) in h.buckets.iter().enumerate().take(FINE_BUCKETS) {
            if count > 0 {
                let (lo_ns, hi_ns) = fine_bucket_range(i);
                hists.push(PathHistRow {
                    stage: stage.into(),
                    pid: k.tgid,
                    lo_ns,
                    hi_ns,
                    count,
                    irq: k.irq,
                });
            }
        }
    }
    (rows, hists)
}

/// The path_packets rows: followed packets, owned as the threads table owns
/// the thread that ended each.
fn packet_rows(packets: &[PathPacket], threads: &[ThreadRow], start_mono: u64) -> Vec<PathPacketRow> {
    let index = ThreadIndex::new(threads);
    let since = |t: u64| if t == 0 { 0 } else { t.saturating_sub(start_mono).max(1) };
    packets
        .iter()
        .map(|p| {
            // Named after its process, placed where the thread that ended it
            // sits (a vhost worker, a vCPU), else where its process does.
            let mut owner = index.process_owner(p.tgid);
            if let Some(t) = index.thread(p.tid) {
                owner = Owner {
                    pid: owner.pid,
                    comm: owner.comm,
                    ..t.owner.clone()
                };
            }
            PathPacketRow {
                dir: match p.dir {
                    path_dir::TX => "tx",
                    path_dir::PASSTHROUGH => "pt",
                    path_dir::GUEST_RX => "guest_rx",
                    path_dir::GUEST_TX => "guest_tx",
                    path_dir::GUEST_VF_TX => "guest_vf_tx",
                    _ => "rx",
                }
                .into(),
                owner,
                tid: p.tid,
                vm: p.vm,
                frames: p.frames,
                t0_ns: since(p.ts[0]),
                t1_ns: since(p.ts[1]),
                t2_ns: since(p.ts[2]),
                t3_ns: since(p.ts[3]),
                t4_ns: since(p.ts[4]),
                irq: p.irq,
            }
        })
        .collect()
}

/// What a reader of the stages must know: the ends this kernel did not give.
fn notes(rows: &[PathRow]) -> Vec<String> {
    let mut notes = Vec::new();
    let has = |stage: &str| rows.iter().any(|r| r.stage == stage);
    if has("rx_signal") && !has("rx_inject") {
        notes.push(
            "path: interrupts were raised after frames were taken but no injection of theirs was seen: an MSI's \
             vector injected without kvm_inj_virq (posted interrupts: APICv/AVIC), or a line delivered through \
             the PIC (no kvm_apic_accept_irq to learn its vector): rx_inject and rx_entry are unavailable"
                .into(),
        );
    }
    if has("rx_tap_queue") && !has("rx_signal") {
        notes.push(
            "path: frames were taken from taps but the thread that took them raised no interrupt KVM saw \
             (irqfd_wakeup, kvm_msi_set_irq, kvm_set_irq)"
                .into(),
        );
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::vf_rx_irqs;

    /// /proc/interrupts as a guest with an igbvf VF shows it (the stock
    /// kernel, one level down), with an ixgbevf's and an iavf's lines and
    /// look-alikes of another device beside it.
    const INTERRUPTS: &str = "           CPU0
  24:        511   PCI-MSIX-0000:00:03.0   0-edge      eth0-tx-0
  25:        987   PCI-MSIX-0000:00:03.0   1-edge      eth0-rx-0
  26:          2   PCI-MSIX-0000:00:03.0   2-edge      eth0
  27:         40   PCI-MSIX-0000:00:04.0   0-edge      eth10-rx-0
  28:         17   PCI-MSIX-0000:00:05.0   0-edge      eth1-TxRx-0
  29:         12   PCI-MSIX-0000:00:05.0   1-edge      eth1-TxRx-1
  30:          9   PCI-MSIX-0000:00:06.0   1-edge      iavf-eth2-TxRx-0
 NMI:          0   Non-maskable interrupts
";

    #[test]
    fn a_vfs_receive_irqs_are_told_by_its_drivers_names_and_no_other_devices() {
        assert_eq!(vf_rx_irqs(INTERRUPTS, "eth0"), vec![25]);
        assert_eq!(vf_rx_irqs(INTERRUPTS, "eth1"), vec![28, 29]);
        assert_eq!(vf_rx_irqs(INTERRUPTS, "eth2"), vec![30]);
        assert_eq!(vf_rx_irqs(INTERRUPTS, "eth3"), Vec::<u32>::new());
    }
}
