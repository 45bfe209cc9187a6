//! Network collector: per-device, per-hop packet statistics and NET_RX
//! softirq time per device from `vtrace-ebpf/src/net.rs`, drops per reason,
//! and the devices' own counters (what `ip -s link` shows) for comparison.

use std::{
    collections::{BTreeMap, HashMap},
    process::Command,
};

use aya::{
    Ebpf,
    maps::{MapData, PerCpuArray, PerCpuHashMap},
};
use vtrace_common::{DROP_REASONS, DevKey, DevStats, HopEdge, HopLatency, NetEvent, net_loss};

use crate::{Error, Result};

fn map_err(e: impl std::fmt::Display) -> Error {
    Error::Ebpf(e.to_string())
}

#[derive(Clone, Debug, Default)]
pub struct NetSnapshot {
    pub devices: BTreeMap<DevKey, DevStats>,
    /// dev_key -> NET_RX softirq ns.
    pub softirq: BTreeMap<u64, u64>,
    pub drops: Vec<u64>,
    pub latency: BTreeMap<HopEdge, HopLatency>,
    /// dev_key -> [polls, packets, polls that used their whole budget].
    pub napi: BTreeMap<u64, [u64; 3]>,
}

fn add(a: &mut DevStats, b: &DevStats) {
    a.packets += b.packets;
    a.bytes += b.bytes;
    a.gso_packets += b.gso_packets;
    a.gso_segs += b.gso_segs;
    a.errors += b.errors;
    for (x, y) in a.size_hist.iter_mut().zip(b.size_hist) {
        *x += y;
    }
    for (x, y) in a.log2_hist.iter_mut().zip(b.log2_hist) {
        *x += y;
    }
}

fn sub(a: &DevStats, b: &DevStats) -> DevStats {
    let mut d = *a;
    d.packets -= b.packets.min(d.packets);
    d.bytes -= b.bytes.min(d.bytes);
    d.gso_packets -= b.gso_packets.min(d.gso_packets);
    d.gso_segs -= b.gso_segs.min(d.gso_segs);
    d.errors -= b.errors.min(d.errors);
    for (x, y) in d.size_hist.iter_mut().zip(b.size_hist) {
        *x -= y.min(*x);
    }
    for (x, y) in d.log2_hist.iter_mut().zip(b.log2_hist) {
        *x -= y.min(*x);
    }
    d
}

impl NetSnapshot {
    /// What happened between `base` and `self`.
    pub fn since(&self, base: &NetSnapshot) -> NetSnapshot {
        let devices = self
            .devices
            .iter()
            .map(|(k, v)| (*k, base.devices.get(k).map(|b| sub(v, b)).unwrap_or(*v)))
            .filter(|(_, v)| v.packets > 0 || v.errors > 0)
            .collect();
        let softirq = self
            .softirq
            .iter()
            .map(|(k, v)| (*k, v.saturating_sub(base.softirq.get(k).copied().unwrap_or(0))))
            .filter(|(_, v)| *v > 0)
            .collect();
        let drops = self
            .drops
            .iter()
            .zip(base.drops.iter().chain(std::iter::repeat(&0)))
            .map(|(a, b)| a - b.min(a))
            .collect();
        let latency = self
            .latency
            .iter()
            .map(|(k, v)| {
                let mut d = *v;
                if let Some(b) = base.latency.get(k) {
                    d.count -= b.count.min(d.count);
                    d.sum_ns -= b.sum_ns.min(d.sum_ns);
                    for (x, y) in d.log2.iter_mut().zip(b.log2) {
                        *x -= y.min(*x);
                    }
                }
                (*k, d)
            })
            .filter(|(_, v)| v.count > 0)
            .collect();
        let napi = self
            .napi
            .iter()
            .map(|(k, v)| {
                let b = base.napi.get(k).copied().unwrap_or_default();
                (
                    *k,
                    [
                        v[0].saturating_sub(b[0]),
                        v[1].saturating_sub(b[1]),
                        v[2].saturating_sub(b[2]),
                    ],
                )
            })
            .filter(|(_, v)| v[0] > 0)
            .collect();
        NetSnapshot {
            devices,
            softirq,
            drops,
            latency,
            napi,
        }
    }
}

pub struct NetCollector {
    devices: PerCpuHashMap<MapData, DevKey, DevStats>,
    softirq: PerCpuHashMap<MapData, u64, u64>,
    drops: PerCpuArray<MapData, u64>,
    latency: PerCpuHashMap<MapData, HopEdge, HopLatency>,
    napi: PerCpuHashMap<MapData, u64, [u64; 3]>,
    losses: PerCpuArray<MapData, u64>,
}

impl NetCollector {
    pub fn new(ebpf: &mut Ebpf) -> Result<Self> {
        let mut take = |name: &str| {
            ebpf.take_map(name)
                .ok_or_else(|| Error::Ebpf(format!("map {name} missing from the eBPF object")))
        };
        Ok(NetCollector {
            devices: PerCpuHashMap::try_from(take("NET_DEVICES")?).map_err(map_err)?,
            softirq: PerCpuHashMap::try_from(take("NET_SOFTIRQ")?).map_err(map_err)?,
            drops: PerCpuArray::try_from(take("NET_DROPS")?).map_err(map_err)?,
            latency: PerCpuHashMap::try_from(take("NET_HOP_LATENCY")?).map_err(map_err)?,
            napi: PerCpuHashMap::try_from(take("NAPI_POLLS")?).map_err(map_err)?,
            losses: PerCpuArray::try_from(take("NET_LOSSES")?).map_err(map_err)?,
        })
    }

    /// What the net layer could not keep, indexed by [`net_loss`].
    pub fn losses(&self) -> [u64; net_loss::COUNT as usize] {
        core::array::from_fn(|i| self.losses.get(&(i as u32), 0).map(|v| v.iter().sum()).unwrap_or(0))
    }

    pub fn snapshot(&self) -> Result<NetSnapshot> {
        let mut snap = NetSnapshot::default();
        for entry in self.devices.iter() {
            let (k, per_cpu) = entry.map_err(map_err)?;
            let total = snap.devices.entry(k).or_default();
            for v in per_cpu.iter() {
                add(total, v);
            }
        }
        for entry in self.softirq.iter() {
            let (k, per_cpu) = entry.map_err(map_err)?;
            *snap.softirq.entry(k).or_default() += per_cpu.iter().sum::<u64>();
        }
        for entry in self.latency.iter() {
            let (k, per_cpu) = entry.map_err(map_err)?;
            let t = snap.latency.entry(k).or_default();
            for v in per_cpu.iter() {
                t.count += v.count;
                t.sum_ns += v.sum_ns;
                for (a, b) in t.log2.iter_mut().zip(v.log2) {
                    *a += b;
                }
            }
        }
        for entry in self.napi.iter() {
            let (k, per_cpu) = entry.map_err(map_err)?;
            let t = snap.napi.entry(k).or_default();
            for v in per_cpu.iter() {
                for (a, b) in t.iter_mut().zip(v) {
                    *a += b;
                }
            }
        }
        for r in 0..DROP_REASONS {
            snap.drops
                .push(self.drops.get(&r, 0).map(|v| v.iter().sum()).unwrap_or(0));
        }
        Ok(snap)
    }
}

/// A device's own counters, as `ip -s link` reports them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceCounters {
    pub name: String,
    pub kind: String,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
}

fn netns_inode(path: &str) -> u32 {
    std::fs::read_link(path)
        .ok()
        .and_then(|l| {
            l.to_str()
                .and_then(|s| s.trim_start_matches("net:[").trim_end_matches(']').parse().ok())
        })
        .or_else(|| {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(path).ok().map(|m| m.ino())
        })
        .unwrap_or(0) as u32
}

fn ip_links(prefix: &[&str]) -> Vec<serde_json::Value> {
    let out = Command::new(prefix[0])
        .args(&prefix[1..])
        .args(["-j", "-s", "-d", "link", "show"])
        .output();
    out.ok()
        .and_then(|o| serde_json::from_slice(&o.stdout).ok())
        .unwrap_or_default()
}

/// Counters of the host namespace's devices, straight from sysfs (fast: the
/// probes' snapshot is taken right beside this read).
fn host_counters(out: &mut HashMap<(u32, u32), DeviceCounters>, netns: u32) {
    let Ok(devs) = std::fs::read_dir("/sys/class/net") else {
        return;
    };
    for d in devs.flatten() {
        let p = d.path();
        let num = |f: &str| {
            std::fs::read_to_string(p.join(f))
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        let ifindex = num("ifindex") as u32;
        let prev = out.remove(&(netns, ifindex)).unwrap_or_default();
        out.insert(
            (netns, ifindex),
            DeviceCounters {
                name: d.file_name().to_string_lossy().into_owned(),
                kind: prev.kind,
                rx_packets: num("statistics/rx_packets"),
                rx_bytes: num("statistics/rx_bytes"),
                tx_packets: num("statistics/tx_packets"),
                tx_bytes: num("statistics/tx_bytes"),
            },
        );
    }
}

/// Counters of every device in the host namespace, the named namespaces and
/// the namespaces of running processes: (netns, ifindex) -> counters. The
/// host's are read last, from sysfs, because the probe snapshot follows at
/// once (at both edges of the window): they race with it the least.
pub fn device_counters() -> HashMap<(u32, u32), DeviceCounters> {
    let host = netns_inode("/proc/self/ns/net");
    let mut namespaces: HashMap<u32, Vec<String>> = HashMap::new();
    namespaces.insert(host, vec!["ip".into()]);
    if let Ok(d) = std::fs::read_dir("/run/netns") {
        for e in d.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            namespaces
                .entry(netns_inode(&e.path().display().to_string()))
                .or_insert_with(|| vec!["ip".into(), "-n".into(), name]);
        }
    }
    if let Ok(d) = std::fs::read_dir("/proc") {
        for e in d.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let ns = netns_inode(&format!("/proc/{pid}/ns/net"));
            namespaces
                .entry(ns)
                .or_insert_with(|| vec!["nsenter".into(), "-t".into(), pid.to_string(), "-n".into(), "ip".into()]);
        }
    }
    let mut out = HashMap::new();
    for (ns, prefix) in namespaces {
        let prefix: Vec<&str> = prefix.iter().map(String::as_str).collect();
        for l in ip_links(&prefix) {
            let (Some(ifindex), Some(name)) = (l["ifindex"].as_u64(), l["ifname"].as_str()) else {
                continue;
            };
            let kind = l["linkinfo"]["info_kind"]
                .as_str()
                .unwrap_or(if l["link_type"] == "loopback" {
                    "loopback"
                } else {
                    "device"
                });
            if ns == host {
                // Counters come from sysfs (host_counters); keep the kind.
                out.entry((ns, ifindex as u32))
                    .or_insert_with(DeviceCounters::default)
                    .kind = kind.to_string();
                continue;
            }
            let s = &l["stats64"];
            out.insert(
                (ns, ifindex as u32),
                DeviceCounters {
                    name: name.to_string(),
                    kind: kind.to_string(),
                    rx_packets: s["rx"]["packets"].as_u64().unwrap_or(0),
                    rx_bytes: s["rx"]["bytes"].as_u64().unwrap_or(0),
                    tx_packets: s["tx"]["packets"].as_u64().unwrap_or(0),
                    tx_bytes: s["tx"]["bytes"].as_u64().unwrap_or(0),
                },
            );
        }
    }
    host_counters(&mut out, host);
    out
}

/// Names of enum skb_drop_reason values, from the kernel's BTF.
pub fn drop_reason_names(btf: Option<&btf_rs::Btf>) -> HashMap<u32, String> {
    let mut names = HashMap::new();
    let Some(btf) = btf else { return names };
    if let Ok(types) = btf.resolve_types_by_name("skb_drop_reason") {
        for t in types {
            if let btf_rs::Type::Enum(e) = t {
                for m in &e.members {
                    if let Ok(n) = btf.resolve_name(m) {
                        names.insert(m.val(), n.trim_start_matches("SKB_DROP_REASON_").to_string());
                    }
                }
            }
        }
    }
    names
}

/// Drains the per-packet ring buffer into `writer` on a thread of its own
/// until `stop` is set, so the buffer is emptied however busy the recorder's
/// loop is; returns the rows written.
pub fn spawn_event_reader(
    ebpf: &mut Ebpf,
    mut writer: crate::recording::NetEventWriter,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Result<std::thread::JoinHandle<Result<u64>>> {
    let map = ebpf
        .take_map("NET_EVENTS")
        .ok_or_else(|| Error::Ebpf("map NET_EVENTS missing".into()))?;
    let mut ring = aya::maps::RingBuf::try_from(map).map_err(map_err)?;
    Ok(std::thread::spawn(move || {
        loop {
            let stopping = stop.load(std::sync::atomic::Ordering::Acquire);
            let mut got = false;
            while let Some(item) = ring.next() {
                if item.len() >= std::mem::size_of::<NetEvent>() {
                    writer.push(unsafe { std::ptr::read_unaligned(item.as_ptr() as *const NetEvent) })?;
                }
                got = true;
            }
            if stopping {
                break;
            }
            if !got {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        }
        writer.finish()
    }))
}

/// Tun fds open now: ((tgid << 32 | fd), dev_key of the tap), for TUN_FDS.
pub fn tun_fds(system: &crate::platforms::SystemSnapshot) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for p in &system.processes {
        for (fd, iff) in &p.tun_fds {
            let netns = if p.netns != 0 { p.netns } else { system.host_netns };
            if let Some(d) = system.netdevs.iter().find(|d| d.name == *iff && d.netns == netns) {
                out.push((
                    ((p.pid as u64) << 32) | *fd as u64,
                    vtrace_common::dev_key(netns as u32, d.ifindex),
                ));
            }
        }
    }
    out
}

/// Reads the syscalls-on-tun-fds statistics.
pub fn tun_io(ebpf: &Ebpf) -> Result<BTreeMap<vtrace_common::TunIoKey, DevStats>> {
    let map = ebpf
        .map("TUN_IO")
        .ok_or_else(|| Error::Ebpf("map TUN_IO missing".into()))?;
    let stats: PerCpuHashMap<_, vtrace_common::TunIoKey, DevStats> = PerCpuHashMap::try_from(map).map_err(map_err)?;
    let mut out: BTreeMap<vtrace_common::TunIoKey, DevStats> = BTreeMap::new();
    for entry in stats.iter() {
        let (k, per_cpu) = entry.map_err(map_err)?;
        let t = out.entry(k).or_default();
        for v in per_cpu.iter() {
            add(t, v);
        }
    }
    Ok(out)
}

/// Fills TUN_FDS before the syscall programs attach.
pub fn load_tun_fds(ebpf: &mut Ebpf, fds: &[(u64, u64)]) -> Result<()> {
    let map = ebpf
        .map_mut("TUN_FDS")
        .ok_or_else(|| Error::Ebpf("map TUN_FDS missing".into()))?;
    let mut m: aya::maps::HashMap<_, u64, u64> = aya::maps::HashMap::try_from(map).map_err(map_err)?;
    for (k, v) in fds {
        m.insert(k, v, 0).map_err(map_err)?;
    }
    Ok(())
}
