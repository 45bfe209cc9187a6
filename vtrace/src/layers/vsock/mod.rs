//! The vsock layer (`--layers vsock`, on by default): vsock packets through
//! the virtio transport, per thread, peer, port, direction and kind
//! (vtrace-ebpf/src/vsock.rs). A sandbox's control channel: Kata's shim
//! talks to its agent over vsock, and the guest's first accepted connection
//! is when the agent became reachable (report/startup.rs).

pub mod probes;
pub mod summary;
pub mod tables;

use std::collections::BTreeMap;

use aya::{
    Ebpf,
    maps::{MapData, PerCpuArray, PerCpuHashMap},
};
use vtrace_common::{Config, VsockKey, VsockStats, vsock_dir, vsock_op};

pub use tables::VsockRow;

use super::{Collector, Emit, End, Layer, LayerOutput, Loss, Setup, cpu::ThreadIndex, cpu::ThreadRow};
use crate::{
    Result,
    collectors::maps::{Counters, delta, sum_per_cpu, take},
    probes::{ProbeSpec, offsets::KernelLayout},
    recording::{Overhead, Recording, TableKind},
    report_model::Section,
};

pub struct VsockLayer;

/// The record fields the programs read, the same in both events' records.
const FIELDS: [&str; 6] = ["src_cid", "src_port", "dst_cid", "dst_port", "len", "op"];

impl Layer for VsockLayer {
    fn name(&self) -> &'static str {
        "vsock"
    }
    /// A program per vsock packet: control traffic, a few per request.
    fn on_by_default(&self) -> bool {
        true
    }
    /// The two events must lay out the fields alike (one set of offsets).
    fn can_run(&self, setup: &Setup) -> Result<(), String> {
        let k = KernelLayout::of(setup.caps);
        let differ: Vec<&str> = FIELDS
            .into_iter()
            .filter(|f| {
                k.tracepoint("vsock", "virtio_transport_recv_pkt", f)
                    != k.tracepoint("vsock", "virtio_transport_alloc_pkt", f)
            })
            .collect();
        if differ.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "vsock:virtio_transport_recv_pkt and _alloc_pkt place {} differently in their records on this \
                 kernel (this layer reads both with one set of offsets)",
                differ.join(", ")
            ))
        }
    }
    fn catalog(&self) -> &'static [ProbeSpec] {
        probes::VSOCK
    }
    fn offsets(&self, k: &KernelLayout, o: &mut Config) {
        let field = |f: &str| k.tracepoint("vsock", "virtio_transport_recv_pkt", f);
        o.vsock.tp_vsock_src_cid = field("src_cid");
        o.vsock.tp_vsock_src_port = field("src_port");
        o.vsock.tp_vsock_dst_cid = field("dst_cid");
        o.vsock.tp_vsock_dst_port = field("dst_port");
        o.vsock.tp_vsock_len = field("len");
        o.vsock.tp_vsock_op = field("op");
    }
    fn tables(&self) -> Vec<TableKind> {
        vec![TableKind::of::<VsockRow>()]
    }
    fn losses(&self) -> &'static [Loss] {
        &[Loss {
            key: "vsock.drops",
            meaning: "vsock packets not counted: the map of (thread, peer, port, direction, kind) was full",
        }]
    }
    fn summarize(&self, rec: &Recording, top: usize) -> Section {
        summary::section(rec, top)
    }
    fn start(&self, ebpf: &mut Ebpf, setup: &Setup, _config: &Config) -> Result<Box<dyn Collector>> {
        Ok(Box::new(VsockRecorder {
            packets: take(ebpf, "VSOCK_PACKETS")?,
            drops: take(ebpf, "VSOCK_DROPS")?,
            base: BTreeMap::new(),
            last: BTreeMap::new(),
            base_dropped: 0,
            dropped: 0,
            start_mono: setup.start_mono,
        }))
    }
}

/// Counts add and subtract; the first time is the earliest any CPU saw,
/// the last the latest.
impl Counters for VsockStats {
    fn add(&mut self, o: &Self) {
        self.packets += o.packets;
        self.bytes += o.bytes;
        if o.first_ns != 0 && (self.first_ns == 0 || o.first_ns < self.first_ns) {
            self.first_ns = o.first_ns;
        }
        self.last_ns = self.last_ns.max(o.last_ns);
    }
    fn sub(&mut self, o: &Self) {
        self.packets -= o.packets.min(self.packets);
        self.bytes -= o.bytes.min(self.bytes);
    }
}

struct VsockRecorder {
    packets: PerCpuHashMap<MapData, VsockKey, VsockStats>,
    drops: PerCpuArray<MapData, u64>,
    /// Every key, summed over CPUs, when the workload started and at the last reading.
    base: BTreeMap<VsockKey, VsockStats>,
    last: BTreeMap<VsockKey, VsockStats>,
    base_dropped: u64,
    dropped: u64,
    start_mono: u64,
}

impl VsockRecorder {
    fn read(&mut self) -> Result<()> {
        self.last = sum_per_cpu(&self.packets)?;
        self.dropped = self.drops.get(&0, 0).map(|v| v.iter().sum()).unwrap_or(0);
        Ok(())
    }
}

impl Collector for VsockRecorder {
    fn baseline(&mut self, _attached: &super::Attached) -> Result<()> {
        self.read()?;
        self.base = self.last.clone();
        self.base_dropped = self.dropped;
        Ok(())
    }

    fn checkpoint(&mut self, _now: &End) -> Result<bool> {
        self.read()?;
        Ok(true)
    }

    fn emit(&self, ctx: &Emit, out: &mut LayerOutput, _overhead: &mut Overhead) -> Result<()> {
        let index = ThreadIndex::new(ctx.tables.rows::<ThreadRow>());
        let window = delta(&self.last, &self.base, |s| s.packets > 0);
        let since = |t: u64| t.saturating_sub(self.start_mono).max(1);
        let rows: Vec<VsockRow> = window
            .iter()
            .map(|(k, s)| VsockRow {
                tid: k.tid,
                owner: index.thread_owner(k.tid),
                peer_cid: k.peer_cid,
                port: k.port,
                direction: if k.dir == vsock_dir::RECEIVED {
                    "received"
                } else {
                    "sent"
                }
                .into(),
                op: vsock_op::name(k.op).into(),
                packets: s.packets,
                bytes: s.bytes,
                first_ns: if self.base.contains_key(k) {
                    0
                } else {
                    since(s.first_ns)
                },
                last_ns: since(s.last_ns),
            })
            .collect();
        out.tables.put(rows);
        out.losses.push(("vsock.drops", self.dropped - self.base_dropped));
        Ok(())
    }
}
