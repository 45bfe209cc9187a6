//! The network between the host and a lab instance: each platform's
//! 10.99.X.0/24 addresses, and the namespaces, veth pairs, bridges and tap
//! devices that carry it, each recorded in the ledger before it is made.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use super::{
    common::LabPlatform,
    ledger::{Ledger, Resource},
};
use crate::{
    Error, Result,
    workload::netns::{NETNS_DIR, is_mount_point, sh},
};

/// Address of a platform's instance.
pub fn address(p: &LabPlatform) -> (String, String) {
    (format!("10.99.{}.1", p.net), format!("10.99.{}.2", p.net))
}

/// Waits until `addr:port` accepts connections.
pub fn wait_listening(addr: &str, port: u16, timeout: Duration) -> Result<()> {
    use std::io::Read;
    let start = Instant::now();
    let sock = format!("{addr}:{port}").parse().expect("valid address");
    while start.elapsed() < timeout {
        if let Ok(mut probe) = std::net::TcpStream::connect_timeout(&sock, Duration::from_millis(200)) {
            // The probe is closed from both sides before `lab up` returns: a
            // recording started right after must not see its last packets
            // (lwIP sends its FIN up to seconds late), which the devices'
            // counters would count on one side of the window and vtrace not.
            let _ = probe.shutdown(std::net::Shutdown::Write);
            let _ = probe.set_read_timeout(Some(Duration::from_secs(5)));
            let mut buf = [0u8; 256];
            while matches!(probe.read(&mut buf), Ok(n) if n > 0) {}
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(Error::Io {
        context: format!("waiting for {addr}:{port}"),
        source: std::io::Error::other(format!("nothing listened within {} s", timeout.as_secs())),
    })
}

/// Turns IPv6 off on a lab link before it comes up. The labs measure IPv4
/// workloads; IPv6 autoconfiguration would add its own packets (duplicate
/// address detection, router solicitations every 4 s, MLD reports) at random
/// moments, landing in per-hop counts and straddling the window's edges.
pub fn ipv4_only(dev: &str, netns: Option<&str>) -> Result<()> {
    if !Path::new("/proc/sys/net/ipv6").exists() {
        return Ok(()); // the kernel has no IPv6 at all
    }
    let key = format!("net.ipv6.conf.{dev}.disable_ipv6=1");
    match netns {
        Some(ns) => sh(&["ip", "netns", "exec", ns, "sysctl", "-qw", &key]),
        None => sh(&["sysctl", "-qw", &key]),
    }
}

/// Gives the host's link `dev` the host's address `host_addr` (/24) and
/// brings it up.
pub fn host_link_up(dev: &str, host_addr: &str) -> Result<()> {
    sh(&["ip", "addr", "add", &format!("{host_addr}/24"), "dev", dev])?;
    sh(&["ip", "link", "set", dev, "up"])
}

/// Creates netns `ns` joined to the host by a veth pair `host_if`/`ns_if`,
/// recording each piece in the ledger.
pub fn veth_netns(ledger: &mut Ledger, p: &LabPlatform, ns: &str, host_if: &str, ns_if: &str) -> Result<()> {
    let (host_addr, guest_addr) = address(p);
    if !is_mount_point(NETNS_DIR) {
        ledger.add(Resource::NetnsMount)?;
    }
    ledger.add(Resource::Netns { name: ns.into() })?;
    sh(&["ip", "netns", "add", ns])?;
    // Devices a runtime adds to the namespace later (Kata's tap0_kata) are
    // IPv4-only too: an IPv6 report sent into a tap before its VM reads it
    // is dropped at the tap's qdisc, a loss the lab did not make.
    ipv4_only("default", Some(ns))?;
    ledger.add(Resource::Link { name: host_if.into() })?;
    // The peer is made in the namespace: its name (eth0, as CNI names it)
    // may be taken on the host.
    sh(&[
        "ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if, "netns", ns,
    ])?;
    ipv4_only(host_if, None)?; // the peer took the namespace's default
    host_link_up(host_if, &host_addr)?;
    sh(&["ip", "-n", ns, "addr", "add", &format!("{guest_addr}/24"), "dev", ns_if])?;
    sh(&["ip", "-n", ns, "link", "set", ns_if, "up"])?;
    sh(&["ip", "-n", ns, "link", "set", "lo", "up"])
}

/// Creates bridge `dev` on the host's side of `p`'s network, recording it
/// in the ledger.
pub fn bridge(ledger: &mut Ledger, p: &LabPlatform, dev: &str) -> Result<()> {
    let (host_addr, _) = address(p);
    ledger.add(Resource::Link { name: dev.into() })?;
    sh(&["ip", "link", "add", dev, "type", "bridge"])?;
    ipv4_only(dev, None)?;
    host_link_up(dev, &host_addr)
}

/// Creates tap device `dev` on the host's side of `p`'s network (with
/// `mtu`, when given), recording it in the ledger.
pub fn tap(ledger: &mut Ledger, p: &LabPlatform, dev: &str, mtu: Option<&str>) -> Result<()> {
    let (host_addr, _) = address(p);
    ledger.add(Resource::Link { name: dev.into() })?;
    sh(&["ip", "tuntap", "add", "dev", dev, "mode", "tap"])?;
    ipv4_only(dev, None)?;
    if let Some(mtu) = mtu {
        sh(&["ip", "link", "set", dev, "mtu", mtu])?;
    }
    host_link_up(dev, &host_addr)
}
