//! The block layer (`--layers block`): every block request from its insert
//! (or issue) to its completion, per device, operation and the cgroup that
//! submitted it (its platform instance): requests, bytes, time queued and on
//! the device, size and latency histograms, beside each device's own
//! counters over the same window (vtrace-ebpf/src/block.rs).

pub mod collector;
pub mod metrics;
pub mod probes;
pub mod summary;
pub mod tables;

use std::collections::BTreeMap;

use aya::Ebpf;
use vtrace_common::{BlockKey, BlockStats, Config};

pub use tables::{BlockDeviceRow, BlockHistRow, BlockRow};

use self::collector::{BlockMaps, DeviceStat};
use super::{Attached, Collector, Emit, End, Layer, LayerOutput, Setup, cpu::ThreadRow};
use crate::probes::offsets::KernelLayout;
use crate::{
    Result,
    probes::ProbeSpec,
    recording::{Overhead, TableKind},
};

pub struct BlockLayer;

impl Layer for BlockLayer {
    fn name(&self) -> &'static str {
        "block"
    }
    fn on_by_default(&self) -> bool {
        false
    }
    fn catalog(&self) -> &'static [ProbeSpec] {
        probes::BLOCK
    }
    fn offsets(&self, k: &KernelLayout, o: &mut Config) {
        o.block.request_cmd_flags = k.member("request", "cmd_flags");
        o.block.request_part = k.member("request", "part");
        o.block.request_data_len = k.member("request", "__data_len");
        o.block.request_start_time_ns = k.member("request", "start_time_ns");
        o.block.bdev_dev = k.member("block_device", "bd_dev");
    }
    fn tables(&self) -> Vec<TableKind> {
        vec![
            TableKind::of::<BlockRow>(),
            TableKind::of::<BlockHistRow>(),
            TableKind::of::<BlockDeviceRow>(),
        ]
    }
    fn losses(&self) -> &'static [super::Loss] {
        &[
            super::Loss {
                key: "block.unpaired",
                meaning: "block completions not counted: the request was inserted before the layer started, or a block map was full",
            },
            super::Loss {
                key: "block.unseen_completions",
                meaning: "block requests whose completion no program saw (the kernel runs none in some contexts): counted, with their bytes, when a later request took their address or their device had nothing in flight, but without their queue and device times",
            },
        ]
    }
    fn summarize(&self, rec: &crate::recording::Recording, top: usize) -> crate::report_model::Section {
        summary::section(rec, top)
    }
    fn metrics(&self, tables: &crate::recording::TableSet, out: &mut crate::exposition::Samples) {
        metrics::metrics(tables, out);
    }
    fn start(&self, ebpf: &mut Ebpf, _setup: &Setup, _config: &Config) -> Result<Box<dyn Collector>> {
        Ok(Box::new(BlockRecorder {
            maps: BlockMaps::new(ebpf)?,
            start: BTreeMap::new(),
            end: BTreeMap::new(),
            devices_start: Vec::new(),
            devices_end: Vec::new(),
            inflight_peaks: Default::default(),
        }))
    }
}

struct BlockRecorder {
    maps: BlockMaps,
    start: BTreeMap<BlockKey, BlockStats>,
    end: BTreeMap<BlockKey, BlockStats>,
    devices_start: Vec<DeviceStat>,
    devices_end: Vec<DeviceStat>,
    inflight_peaks: std::collections::HashMap<u32, u64>,
}

impl Collector for BlockRecorder {
    /// The window opens: the maps' and the devices' counters now.
    fn baseline(&mut self, _attached: &Attached) -> Result<()> {
        self.start = self.maps.snapshot()?;
        self.devices_start = collector::device_stats();
        Ok(())
    }

    fn checkpoint(&mut self, _now: &End) -> Result<bool> {
        self.maps.note_ended();
        self.end = self.maps.snapshot()?;
        self.devices_end = collector::device_stats();
        self.inflight_peaks = self.maps.inflight_peaks();
        Ok(true)
    }

    fn forget(&mut self) -> Result<()> {
        for k in self.maps.forget_ended() {
            self.start.remove(&k);
        }
        Ok(())
    }

    fn emit(&self, ctx: &Emit, out: &mut LayerOutput, _overhead: &mut Overhead) -> Result<()> {
        let (rows, hists, devices) = collector::rows(
            &self.start,
            &self.end,
            &self.devices_start,
            &self.devices_end,
            &self.inflight_peaks,
            ctx.tables.rows::<ThreadRow>(),
        );
        out.losses.push(("block.unpaired", self.maps.drops()));
        out.losses.push(("block.unseen_completions", self.maps.unseen()));
        out.tables.put(rows);
        out.tables.put(hists);
        out.tables.put(devices);
        Ok(())
    }
}
