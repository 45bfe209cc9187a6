//! The tun layer (`--layers tun`): tun/tap and vhost-net kernel functions
//! per device and calling process, in frames and bytes
//! (vtrace-ebpf/src/tun.rs). Kernels without kprobes (and whose fentry
//! cannot reach module functions) see taps through the net layer's
//! tracepoints on the tap device instead, and count the frames queued to a
//! tap (a tracepoint here too) all the same.

pub mod collector;
pub mod metrics;
pub mod probes;
pub mod summary;
pub mod tables;

use std::collections::BTreeMap;

use aya::Ebpf;
use vtrace_common::{Config, TunKey, TunStats};

pub use tables::TunRow;

use self::collector::TunMaps;
use super::{Attached, Collector, Emit, End, Facts, Layer, LayerOutput, Setup, cpu::ThreadRow};
use crate::probes::offsets::{self, KernelLayout};
use crate::{
    Result,
    probes::ProbeSpec,
    recording::{Overhead, TableKind},
};

pub struct TunLayer;

impl Layer for TunLayer {
    fn name(&self) -> &'static str {
        "tun"
    }
    fn catalog(&self) -> &'static [ProbeSpec] {
        probes::TUN
    }
    fn offsets(&self, k: &KernelLayout, o: &mut Config) {
        offsets::net_device(k, o);
        o.tun.msghdr_control = k.member("msghdr", "msg_control");
        o.tun.xdp_buff_data = k.member("xdp_buff", "data");
        o.tun.xdp_buff_data_end = k.member("xdp_buff", "data_end");
        o.tun.xdp_buff_size = k.size("xdp_buff");
        o.tun.xdp_frame_len = k.member("xdp_frame", "len");
        o.tun.iov_iter_count = k.member("iov_iter", "count");
        o.tun.kiocb_filp = k.member("kiocb", "ki_filp");
        o.tun.file_private_data = k.member("file", "private_data");
        // The tun module's own structs: in its BTF, split on vmlinux's (read
        // when the module is loaded; its functions cannot be probed otherwise).
        if let Some(tun) = k.module("tun") {
            let t = |s: &str, f: &str| offsets::member_offset(&tun, s, f).unwrap_or(0);
            o.tun.tun_struct_dev = t("tun_struct", "dev");
            o.tun.tun_file_tun = t("tun_file", "tun");
            o.tun.tun_file_socket = t("tun_file", "socket");
            o.tun.tun_msg_ctl_type = t("tun_msg_ctl", "type");
            o.tun.tun_msg_ctl_num = t("tun_msg_ctl", "num");
            o.tun.tun_msg_ctl_ptr = t("tun_msg_ctl", "ptr");
        }
    }
    /// The tracepoint that counts a tap's queued frames only where tun's
    /// devices were found: elsewhere it would run on every frame for nothing.
    fn probes(&self, _setup: &Setup, config: &Config) -> Result<Vec<ProbeSpec>> {
        let tun = config.net_device.tells_tun();
        Ok(probes::TUN
            .iter()
            .filter(|p| tun || p.id != probes::NET_XMIT)
            .copied()
            .collect())
    }
    fn tables(&self) -> Vec<TableKind> {
        vec![TableKind::of::<TunRow>()]
    }
    fn summarize(&self, rec: &crate::recording::Recording, top: usize) -> crate::report_model::Section {
        summary::section(rec, top)
    }
    fn metrics(&self, tables: &crate::recording::TableSet, out: &mut crate::exposition::Samples) {
        metrics::metrics(tables, out);
    }
    fn start(&self, ebpf: &mut Ebpf, _setup: &Setup, _config: &Config) -> Result<Box<dyn Collector>> {
        Ok(Box::new(TunRecorder {
            maps: TunMaps::new(ebpf)?,
            start: BTreeMap::new(),
            end: BTreeMap::new(),
        }))
    }
}

struct TunRecorder {
    maps: TunMaps,
    start: BTreeMap<TunKey, TunStats>,
    end: BTreeMap<TunKey, TunStats>,
}

impl Collector for TunRecorder {
    fn baseline(&mut self, _attached: &Attached) -> Result<()> {
        self.start = self.maps.snapshot()?;
        Ok(())
    }

    fn checkpoint(&mut self, _now: &End) -> Result<bool> {
        self.end = self.maps.snapshot()?;
        Ok(true)
    }

    fn facts(&self, facts: &mut Facts) {
        for (key, stats) in self.start.iter().chain(&self.end) {
            let len = stats.name.iter().position(|&b| b == 0).unwrap_or(stats.name.len());
            if key.dev != 0 && len > 0 {
                facts
                    .device_names
                    .entry(((key.dev >> 32) as u32, key.dev as u32))
                    .or_insert_with(|| String::from_utf8_lossy(&stats.name[..len]).into_owned());
            }
        }
    }

    fn emit(&self, ctx: &Emit, out: &mut LayerOutput, _overhead: &mut Overhead) -> Result<()> {
        out.tables.put(collector::rows(
            &self.start,
            &self.end,
            ctx.tables.rows::<ThreadRow>(),
            ctx.probes,
        ));
        Ok(())
    }
}
