//! The network devices' own counters (the kernel's `dev_get_stats`, what
//! `ip -s link` and /proc/net/dev show), in every network namespace: the
//! ground truth the net, tun and path layers' packet counts are compared
//! with, and what tells the recorder that a packet moved while the layers
//! read the window's edges (record::edge).

use std::collections::HashMap;

use super::snapshot::{NetDev, NetNamespaces};

/// A device's own counters (the kernel's `dev_get_stats`, as `ip -s link`
/// and /proc/net/dev report them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceCounters {
    pub name: String,
    pub kind: String,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
}

/// Reads every device's counters fast, the namespaces open and the devices'
/// kinds known beforehand.
///
/// Finding the devices is slow (an `ip` per namespace, done by the system
/// snapshot) and the read must be fast: the counters are compared with the
/// probes' snapshot taken right after, and a packet that lands between the
/// two reads counts in one window and not in the other. So
/// [`DeviceCounterReader::read`] takes every namespace's /proc/net/dev within
/// microseconds (160 us for three namespaces) of the probes.
pub struct DeviceCounterReader {
    namespaces: NetNamespaces,
    /// (netns, ifindex) -> the device's kind (veth, bridge, tap, ...).
    kinds: HashMap<(u32, u32), String>,
}

impl DeviceCounterReader {
    /// `known`: the devices of a [`crate::platforms::SystemSnapshot`], for their kinds.
    pub fn new(known: &[NetDev]) -> Self {
        DeviceCounterReader {
            namespaces: NetNamespaces::open(),
            kinds: known
                .iter()
                .map(|d| ((d.netns as u32, d.ifindex), d.kind.clone()))
                .collect(),
        }
    }

    /// (netns, ifindex) -> counters. A device that appeared since
    /// [`Self::new`] has the kind "device".
    pub fn read(&self) -> HashMap<(u32, u32), DeviceCounters> {
        let mut out = HashMap::new();
        for (ns, devices) in self.namespaces.in_each(|ns| (ns as u32, proc_net_dev())) {
            for (ifindex, mut c) in devices {
                c.kind = self
                    .kinds
                    .get(&(ns, ifindex))
                    .cloned()
                    .unwrap_or_else(|| "device".into());
                out.insert((ns, ifindex), c);
            }
        }
        out
    }
}

/// /proc/net/dev of the calling thread's namespace: (ifindex, counters).
fn proc_net_dev() -> Vec<(u32, DeviceCounters)> {
    let text = std::fs::read_to_string("/proc/thread-self/net/dev").unwrap_or_default();
    text.lines()
        .skip(2)
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let name = name.trim();
            let f: Vec<u64> = rest.split_whitespace().filter_map(|v| v.parse().ok()).collect();
            if f.len() < 10 {
                return None;
            }
            let cname = std::ffi::CString::new(name).ok()?;
            // A socket made inside the thread's namespace resolves the name there.
            let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
            (ifindex != 0).then(|| {
                (
                    ifindex,
                    DeviceCounters {
                        name: name.to_string(),
                        kind: String::new(),
                        rx_bytes: f[0],
                        rx_packets: f[1],
                        tx_bytes: f[8],
                        tx_packets: f[9],
                    },
                )
            })
        })
        .collect()
}
