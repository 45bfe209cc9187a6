//! Network collector: per-device, per-hop packet statistics and NET_RX
//! softirq time per device from `vtrace-ebpf/src/net/`, and drops per
//! reason. The devices' own counters they are compared with are read by
//! `platforms::netdev`.

use std::collections::{BTreeMap, HashMap};

use aya::{
    Ebpf,
    maps::{MapData, PerCpuArray, PerCpuHashMap},
};
use vtrace_common::{DEV_SLOTS, DevKey, DevSlot, DevStats, DropKey, HopEdge, HopLatency, NetEvent, net_loss};

use crate::{
    Error, Result,
    collectors::{
        batch::BatchReader,
        maps::{Counters, delta, sum_per_cpu, take},
    },
};

fn map_err(e: impl std::fmt::Display) -> Error {
    Error::Ebpf(e.to_string())
}

#[derive(Clone, Debug, Default)]
pub struct NetSnapshot {
    pub devices: BTreeMap<DevKey, DevStats>,
    /// dev_key -> NET_RX softirq ns.
    pub softirq: BTreeMap<u64, u64>,
    /// Freed-as-dropped skbs by kind and place.
    pub drops: BTreeMap<DropKey, u64>,
    pub latency: BTreeMap<HopEdge, HopLatency>,
    /// dev_key -> [polls, packets, polls that used their whole budget].
    pub napi: BTreeMap<u64, [u64; 3]>,
}

impl NetSnapshot {
    /// What happened between `base` and `self`.
    pub fn since(&self, base: &NetSnapshot) -> NetSnapshot {
        NetSnapshot {
            devices: delta(&self.devices, &base.devices, |v| v.packets > 0 || v.errors > 0),
            softirq: delta(&self.softirq, &base.softirq, |v| *v > 0),
            drops: delta(&self.drops, &base.drops, |v| *v > 0),
            latency: delta(&self.latency, &base.latency, |v| v.count > 0),
            napi: delta(&self.napi, &base.napi, |v| v[0] > 0),
        }
    }
}

pub struct NetCollector {
    slots: PerCpuArray<MapData, DevSlot>,
    /// The slots read whole at each snapshot (a few calls, not one a slot).
    slots_whole: BatchReader<u32, DevSlot>,
    devices: PerCpuHashMap<MapData, DevKey, DevStats>,
    softirq: PerCpuHashMap<MapData, u64, u64>,
    drops: PerCpuHashMap<MapData, DropKey, u64>,
    latency: PerCpuHashMap<MapData, HopEdge, HopLatency>,
    napi: PerCpuHashMap<MapData, u64, [u64; 3]>,
    losses: PerCpuArray<MapData, u64>,
}

impl NetCollector {
    pub fn new(ebpf: &mut Ebpf) -> Result<Self> {
        Ok(NetCollector {
            slots_whole: BatchReader::of(ebpf, "DEV_SLOT_STATS")?,
            slots: take(ebpf, "DEV_SLOT_STATS")?,
            devices: take(ebpf, "NET_DEVICES")?,
            softirq: take(ebpf, "NET_SOFTIRQ")?,
            drops: take(ebpf, "NET_DROPS")?,
            latency: take(ebpf, "NET_HOP_LATENCY")?,
            napi: take(ebpf, "NAPI_POLLS")?,
            losses: take(ebpf, "NET_LOSSES")?,
        })
    }

    /// Removes every entry of the devices `gone` (dev_key) from the kernel
    /// maps (`vtrace serve`: a device that ended, once a read counted it).
    pub fn forget_devices(&mut self, gone: &std::collections::HashSet<u64>) {
        let dev = |k: &DevKey| vtrace_common::dev_key(k.netns, k.ifindex);
        let keys: Vec<DevKey> = self
            .devices
            .keys()
            .flatten()
            .filter(|k| gone.contains(&dev(k)))
            .collect();
        for k in keys {
            let _ = self.devices.remove(&k);
        }
        for map in [&mut self.softirq] {
            let keys: Vec<u64> = map.keys().flatten().filter(|k| gone.contains(k)).collect();
            for k in keys {
                let _ = map.remove(&k);
            }
        }
        let keys: Vec<u64> = self.napi.keys().flatten().filter(|k| gone.contains(k)).collect();
        for k in keys {
            let _ = self.napi.remove(&k);
        }
        // Their per-CPU slots, freed for other devices. (Written back whole:
        // a count another CPU adds to the same slot index between this read
        // and the write, microseconds, would be lost; a slot index is one
        // device's hop, so that is the ended device's own.)
        for i in 0..DEV_SLOTS {
            let Ok(values) = self.slots.get(&i, 0) else { continue };
            let mut slots: Vec<DevSlot> = values.iter().copied().collect();
            let mut freed = false;
            for slot in slots.iter_mut().filter(|s| s.dev != 0 && gone.contains(&dev(&s.key))) {
                *slot = DevSlot::default();
                freed = true;
            }
            if freed && let Ok(values) = aya::maps::PerCpuValues::try_from(slots) {
                let _ = self.slots.set(i, values, 0);
            }
        }
        let keys: Vec<HopEdge> = self
            .latency
            .keys()
            .flatten()
            .filter(|e| gone.contains(&e.from_dev) || gone.contains(&e.to_dev))
            .collect();
        for k in keys {
            let _ = self.latency.remove(&k);
        }
    }

    /// What the net layer could not keep, indexed by [`net_loss`].
    pub fn losses(&self) -> [u64; net_loss::COUNT as usize] {
        core::array::from_fn(|i| self.losses.get(&(i as u32), 0).map(|v| v.iter().sum()).unwrap_or(0))
    }

    pub fn snapshot(&self) -> Result<NetSnapshot> {
        let mut snap = NetSnapshot {
            devices: sum_per_cpu(&self.devices)?,
            softirq: sum_per_cpu(&self.softirq)?,
            latency: sum_per_cpu(&self.latency)?,
            napi: sum_per_cpu(&self.napi)?,
            drops: sum_per_cpu(&self.drops)?,
        };
        // Each CPU's slots, merged with the hash map's entries by device and hop.
        for (_, values) in self.slots_whole.read()? {
            for slot in &values {
                if slot.dev != 0 {
                    snap.devices.entry(slot.key).or_default().add(&slot.stats);
                    if slot.softirq_ns > 0 {
                        let dev = vtrace_common::dev_key(slot.key.netns, slot.key.ifindex);
                        *snap.softirq.entry(dev).or_default() += slot.softirq_ns;
                    }
                }
            }
        }
        Ok(snap)
    }
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

/// The kernel functions at `addresses` (from /proc/kallsyms), by address;
/// an address no symbol covers is left out.
pub fn kernel_function_names(addresses: impl IntoIterator<Item = u64>) -> HashMap<u64, String> {
    use blazesym::symbolize::{
        Input, Symbolizer,
        source::{Kernel, Source},
    };
    let addresses: Vec<u64> = addresses
        .into_iter()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    if addresses.is_empty() {
        return HashMap::new();
    }
    let kernel = Source::Kernel(Kernel {
        vmlinux: blazesym::MaybeDefault::None,
        debug_syms: false,
        ..Kernel::default()
    });
    Symbolizer::new()
        .symbolize(&kernel, Input::AbsAddr(&addresses))
        .map(|symbols| {
            addresses
                .iter()
                .zip(symbols)
                .filter_map(|(&a, s)| Some((a, s.as_sym()?.name.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// Drains the per-packet ring buffer into `writer` on a thread of its own
/// until `stop` is set, so the buffer is emptied however busy the recorder's
/// loop is; returns what it wrote and dropped.
pub fn spawn_event_reader(
    ebpf: &mut Ebpf,
    mut writer: crate::recording::NetEventWriter,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Result<std::thread::JoinHandle<Result<crate::recording::EventsWritten>>> {
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
pub type TunIoMap = PerCpuHashMap<aya::maps::MapData, vtrace_common::TunIoKey, DevStats>;

/// Syscalls on tun fds so far (TUN_IO), summed over CPUs.
pub fn tun_io(map: &TunIoMap) -> Result<BTreeMap<vtrace_common::TunIoKey, DevStats>> {
    sum_per_cpu(map)
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
