//! The net layer: packets, bytes, GSO and sizes per device and hop, NET_RX
//! softirq time and NAPI polls per device, drops per reason, hop latency of
//! the same skb, syscalls on tun fds, the devices' own counters over the
//! same window, and (`--events`) every packet at every hop
//! (vtrace-ebpf/src/net/ and tun.rs).

pub mod analysis;
pub mod collector;
pub mod metrics;
pub mod probes;
pub mod rows;
pub mod summary;
pub mod tables;

use std::{
    collections::HashMap,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use aya::Ebpf;
use vtrace_common::Config;

pub use tables::{NetDeviceRow, NetDropRow, NetHopRow, NetIntervalRow, NetLatencyRow, NetSizeRow, TunIoRow};
use vtrace_common::net_loss;

use self::collector::{NetCollector, NetSnapshot};
use super::{
    Attached, Collector, CommonSwitches, Emit, End, Layer, LayerOutput, Request, Setup, SwitchGroup, cpu::ThreadRow,
};
use crate::platforms::netdev::{DeviceCounterReader, DeviceCounters};
use crate::probes::offsets::{self, KernelLayout};
use crate::{
    Result,
    platforms::snapshot::NetDev,
    probes::ProbeSpec,
    recording::{NetEventWriter, Overhead, TableKind},
};

pub struct NetLayer;

impl Layer for NetLayer {
    fn name(&self) -> &'static str {
        "net"
    }
    fn catalog(&self) -> &'static [ProbeSpec] {
        probes::NET
    }
    fn offsets(&self, k: &KernelLayout, o: &mut Config) {
        offsets::net_device(k, o);
        o.net.skb_dev = k.member("sk_buff", "dev");
        o.net.skb_head = k.member("sk_buff", "head");
        o.net.skb_data = k.member("sk_buff", "data");
        o.net.skb_end = k.member("sk_buff", "end");
        o.net.skb_mac_header = k.member("sk_buff", "mac_header");
        o.net.skb_protocol = k.member("sk_buff", "protocol");
        o.net.skb_redirected_bit = k.member_bit("sk_buff", "redirected");
        o.net.tp_kfree_skb_location = k.tracepoint("skb", "kfree_skb", "location");
        o.net.tp_kfree_skb_protocol = k.tracepoint("skb", "kfree_skb", "protocol");
        o.net.tp_kfree_skb_reason = k.tracepoint("skb", "kfree_skb", "reason");
        o.net.shinfo_gso_size = k.member("skb_shared_info", "gso_size");
        o.net.shinfo_gso_segs = k.member("skb_shared_info", "gso_segs");
        o.net.dev_mtu = k.member("net_device", "mtu");
        o.net.dev_hard_header_len = k.member("net_device", "hard_header_len");
        o.net.napi_dev = k.member("napi_struct", "dev");
    }
    fn switches(&self) -> Option<SwitchGroup> {
        Some(SwitchGroup::of::<NetOptions>())
    }
    /// `--events` implies every hop.
    fn cost_mode(&self, asked: &Request) -> Vec<String> {
        if asked.switches.get::<CommonSwitches>().events {
            vec!["events".into()]
        } else if asked.switches.get::<NetOptions>().hops {
            vec!["hops".into()]
        } else {
            Vec::new()
        }
    }
    fn configure(&self, setup: &Setup, config: &mut Config) {
        config.net.net_layer_on = 1;
        config.net.net_events_on = setup.asked.switches.get::<CommonSwitches>().events as u32;
        config.net.net_hops_on = hop_correlation(setup) as u32;
        // Tun fds open at the start (a VMM's taps): their read/write syscalls are followed.
        config.net.tun_fds_on = !collector::tun_fds(setup.system).is_empty() as u32;
    }
    /// By default a packet costs two programs: at `xmit` (what the driver
    /// took) and at `receive` (entering the stack), the two hops whose counts
    /// equal the devices' own counters. `--hops` adds every other hop, NAPI
    /// polls and consume_skb (which fires for every skb freed anywhere, to
    /// end skb journeys).
    fn probes(&self, setup: &Setup, _config: &Config) -> Result<Vec<ProbeSpec>> {
        let hops = hop_correlation(setup);
        Ok(probes::NET
            .iter()
            .filter(|p| hops || !probes::EVERY_HOP.contains(&p.id))
            .copied()
            .collect())
    }
    fn tables(&self) -> Vec<TableKind> {
        vec![
            TableKind::of::<NetDeviceRow>(),
            TableKind::of::<NetHopRow>(),
            TableKind::of::<NetSizeRow>(),
            TableKind::of::<NetDropRow>(),
            TableKind::of::<NetLatencyRow>(),
            TableKind::of::<TunIoRow>(),
            TableKind::of::<NetIntervalRow>(),
        ]
    }
    fn losses(&self) -> &'static [super::Loss] {
        &[
            super::Loss {
                key: "net.event_drops",
                meaning: "per-packet events lost: the ring buffer was full or the disk nearly so (--events)",
            },
            super::Loss {
                key: "net.skb_marks_displaced",
                meaning: "packets whose hop-latency mark another in-flight packet took: those hops are not timed",
            },
        ]
    }
    fn summarize(&self, rec: &crate::recording::Recording, _top: usize) -> crate::report_model::Section {
        summary::section(rec)
    }
    fn metrics(&self, tables: &crate::recording::TableSet, out: &mut crate::exposition::Samples) {
        metrics::metrics(tables, out);
    }
    fn start(&self, ebpf: &mut Ebpf, setup: &Setup, _config: &Config) -> Result<Box<dyn Collector>> {
        collector::load_tun_fds(ebpf, &collector::tun_fds(setup.system))?;
        let maps = NetCollector::new(ebpf)?;
        let tun_io_map = crate::collectors::maps::take(ebpf, "TUN_IO")?;
        let events_stop = Arc::new(AtomicBool::new(false));
        let events_reader = if setup.asked.switches.get::<CommonSwitches>().events {
            let writer = NetEventWriter::create(setup.staging, setup.start_mono)?;
            Some(collector::spawn_event_reader(ebpf, writer, events_stop.clone())?)
        } else {
            None
        };
        Ok(Box::new(NetRecorder {
            maps,
            netdevs_at_start: setup.system.netdevs.clone(),
            probes_on: false,
            counters_start: HashMap::new(),
            counters_end: HashMap::new(),
            start: NetSnapshot::default(),
            last: NetSnapshot::default(),
            at_checkpoint: None,
            alive_at_checkpoint: Default::default(),
            mapped_before: Default::default(),
            last_at: setup.start_mono,
            start_mono: setup.start_mono,
            intervals: Vec::new(),
            events_stop,
            events_reader,
            events_error: None,
            events_unwritten: 0,
            tun_stats: Default::default(),
            tun_io_map,
            tun_start: Default::default(),
            losses: [0; net_loss::COUNT as usize],
        }))
    }
}

/// Every hop is counted and skbs are followed from hop to hop (`--hops`, or
/// `--events`, whose records come from the same code).
fn hop_correlation(setup: &Setup) -> bool {
    setup.asked.switches.get::<NetOptions>().hops || setup.asked.switches.get::<CommonSwitches>().events
}

struct NetRecorder {
    maps: NetCollector,
    netdevs_at_start: Vec<NetDev>,
    /// Some net probe attached: device counters are read.
    probes_on: bool,
    counters_start: HashMap<(u32, u32), DeviceCounters>,
    counters_end: HashMap<(u32, u32), DeviceCounters>,
    start: NetSnapshot,
    /// The latest snapshot (the end one after `end`).
    last: NetSnapshot,
    /// The maps at the last checkpoint, read beside the devices' counters.
    at_checkpoint: Option<NetSnapshot>,
    /// The devices (dev_key) that existed at the last checkpoint, and those
    /// the maps held then: a live session forgets the ones that ended.
    alive_at_checkpoint: std::collections::HashSet<u64>,
    mapped_before: std::collections::HashSet<u64>,
    last_at: u64,
    start_mono: u64,
    intervals: Vec<NetIntervalRow>,
    events_stop: Arc<AtomicBool>,
    events_reader: Option<std::thread::JoinHandle<Result<crate::recording::EventsWritten>>>,
    events_error: Option<String>,
    /// Events read from the ring but not written (disk space): counted as drops.
    events_unwritten: u64,
    tun_stats: std::collections::BTreeMap<vtrace_common::TunIoKey, vtrace_common::DevStats>,
    /// The VMM side of taps (syscalls on tun fds), read right beside the
    /// hops at both ends, so that a packet written at a window's edge is in
    /// both or in neither.
    tun_io_map: collector::TunIoMap,
    tun_start: std::collections::BTreeMap<vtrace_common::TunIoKey, vtrace_common::DevStats>,
    losses: [u64; net_loss::COUNT as usize],
}

impl NetRecorder {
    /// Packets and bytes per device and hop since the last snapshot.
    fn push_interval(&mut self, snap: NetSnapshot, now_mono: u64) {
        let delta = snap.since(&self.last);
        for (k, v) in &delta.devices {
            if v.packets > 0 {
                self.intervals.push(NetIntervalRow {
                    start_ns: self.last_at.saturating_sub(self.start_mono),
                    end_ns: now_mono.saturating_sub(self.start_mono),
                    netns: k.netns,
                    ifindex: k.ifindex,
                    hop: vtrace_common::hop::name(k.hop).to_string(),
                    packets: v.packets,
                    bytes: v.bytes,
                });
            }
        }
        self.last = snap;
        self.last_at = now_mono;
    }
}

impl Collector for NetRecorder {
    /// A workload's last packets (TCP close) land before the counters are read.
    fn settle(&self) -> Duration {
        if self.probes_on {
            Duration::from_millis(200)
        } else {
            Duration::ZERO
        }
    }

    /// Baselines for the network counters: the devices' own and the probes'.
    fn baseline(&mut self, attached: &Attached) -> Result<()> {
        self.probes_on = attached.probes.iter().any(|p| p.layer == "net" && p.available);
        if self.probes_on {
            self.counters_start = DeviceCounterReader::new(&self.netdevs_at_start).read();
        }
        self.start = self.maps.snapshot()?;
        self.tun_start = collector::tun_io(&self.tun_io_map)?;
        self.last = self.start.clone();
        Ok(())
    }

    fn tick(&mut self, now_mono: u64) -> Result<()> {
        let snap = self.maps.snapshot()?;
        self.push_interval(snap, now_mono);
        Ok(())
    }

    /// The closing readings are the last checkpoint's.
    fn end(&mut self, _ebpf: &Ebpf, _end: &End) -> Result<()> {
        if let Some(snap) = self.at_checkpoint.take() {
            self.push_interval(snap, super::cpu::monotonic_ns());
        }
        self.losses = self.maps.losses();
        self.events_stop.store(true, Ordering::Release);
        if let Some(reader) = self.events_reader.take() {
            match reader.join() {
                Ok(Ok(written)) => {
                    self.events_unwritten = written.dropped;
                    if let Some(why) = written.stopped {
                        self.events_error = Some(format!(
                            "stopped writing after {} events ({why}); the {} after them were dropped",
                            written.rows, written.dropped
                        ));
                    }
                }
                Ok(Err(e)) => self.events_error = Some(e.to_string()),
                Err(_) => self.events_error = Some("their writer panicked".into()),
            }
        }
        Ok(())
    }

    /// The devices' counters and the probes' read back to back, in the same
    /// order as at the start, so that a packet can only fall between the two
    /// in the microseconds that separate the reads (and the recorder reads
    /// again when one did, record::edge). No interval ends here.
    fn checkpoint(&mut self, now: &End) -> Result<bool> {
        if self.probes_on {
            self.counters_end = DeviceCounterReader::new(&now.system.netdevs).read();
        }
        self.at_checkpoint = Some(self.maps.snapshot()?);
        self.alive_at_checkpoint = now
            .system
            .netdevs
            .iter()
            .map(|d| vtrace_common::dev_key(d.netns as u32, d.ifindex))
            .collect();
        let tun_now = collector::tun_io(&self.tun_io_map)?;
        self.tun_stats = crate::collectors::maps::delta(&tun_now, &self.tun_start, |s| s.packets > 0);
        Ok(true)
    }

    /// Also the devices that ended: their map entries, once a read counted
    /// them. Only those the maps already held at the read before (a device
    /// made since the system was looked at is not taken for an ended one).
    fn forget(&mut self) -> Result<()> {
        self.intervals.clear();
        let Some(snap) = &self.at_checkpoint else { return Ok(()) };
        let mapped: std::collections::HashSet<u64> = snap
            .devices
            .keys()
            .map(|k| vtrace_common::dev_key(k.netns, k.ifindex))
            .collect();
        let gone: std::collections::HashSet<u64> = mapped
            .iter()
            .filter(|d| !self.alive_at_checkpoint.contains(d) && self.mapped_before.contains(d))
            .copied()
            .collect();
        if !gone.is_empty() {
            self.maps.forget_devices(&gone);
            let ended = |k: &vtrace_common::DevKey| gone.contains(&vtrace_common::dev_key(k.netns, k.ifindex));
            self.start.devices.retain(|k, _| !ended(k));
            self.last.devices.retain(|k, _| !ended(k));
            self.start.softirq.retain(|k, _| !gone.contains(k));
            self.start.napi.retain(|k, _| !gone.contains(k));
            self.start
                .latency
                .retain(|e, _| !gone.contains(&e.from_dev) && !gone.contains(&e.to_dev));
        }
        self.mapped_before = mapped.difference(&gone).copied().collect();
        Ok(())
    }

    fn emit(&self, ctx: &Emit, out: &mut LayerOutput, _overhead: &mut Overhead) -> Result<()> {
        if let Some(e) = &self.events_error {
            out.notes.push(format!("per-packet events incomplete: {e}"));
        }
        let drop_names = collector::drop_reason_names(ctx.caps.btf.as_ref().ok().map(|b| b.as_ref()));
        let latest = match &self.at_checkpoint {
            Some(snap) if ctx.checkpoint => snap,
            _ => &self.last,
        };
        let delta = latest.since(&self.start);
        // Named at the end only: reading kallsyms would make a checkpoint
        // slow, and so rare (a recording killed after one keeps addresses).
        let location_names = if ctx.checkpoint {
            HashMap::new()
        } else {
            collector::kernel_function_names(delta.drops.keys().map(|k| k.location))
        };
        let (devices, hops, sizes, drops) = rows::net_rows(
            &delta,
            &self.counters_start,
            &self.counters_end,
            ctx.attribution,
            &drop_names,
            &location_names,
            &ctx.facts.device_names,
        );
        let threads = ctx.tables.rows::<ThreadRow>();
        let (tun_io, tun_sizes) = rows::tun_rows(&self.tun_stats, ctx.system, threads, &ctx.facts.device_names);
        out.losses.extend([
            (
                "net.event_drops",
                self.losses[net_loss::EVENT_DROPS as usize] + self.events_unwritten,
            ),
            (
                "net.skb_marks_displaced",
                self.losses[net_loss::MARKS_DISPLACED as usize],
            ),
            ("net.drop_keys_full", self.losses[net_loss::DROP_KEYS_FULL as usize]),
        ]);
        out.tables.put(devices);
        out.tables.put(hops);
        out.tables.put(sizes.into_iter().chain(tun_sizes).collect());
        out.tables.put(drops);
        out.tables.put(rows::latency_rows(&delta));
        out.tables.put(tun_io);
        out.tables.put(self.intervals.clone());
        Ok(())
    }
}

/// The net layer's switches (`record`, `bench`).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct NetOptions {
    /// Count every hop (queue, start_xmit, rx, gro), NAPI polls, and follow each packet from hop to
    /// hop for per-hop latency (net_latency). The default counts only the two hops that match the
    /// devices' own counters (xmit, receive). Cost: redis over loopback 0.87 of untraced
    /// throughput (default 0.98), tracing cost 8.2 % of capacity (default 3.7 %).
    #[arg(long)]
    pub hops: bool,
}
