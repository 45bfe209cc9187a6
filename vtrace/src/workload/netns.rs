//! A network namespace joined to the host by a veth pair, torn down on drop
//! (also when a later step fails), so nothing is left behind.

use std::process::{Child, Command, Stdio};

use crate::{Error, Result};

/// Runs a set-up command, failing with its stderr.
pub fn sh(args: &[&str]) -> Result<()> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .map_err(crate::error::io(format!("run {}", args.join(" "))))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::Io {
            context: format!("{} failed", args.join(" ")),
            source: std::io::Error::other(String::from_utf8_lossy(&out.stderr).trim().to_string()),
        })
    }
}

/// Runs `program args` with no input or output; whether it succeeded.
pub(crate) fn quiet(args: &[&str]) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// netns `name` with `ns_if` (addr `ns_addr`) inside, `host_if` (addr `host_addr`) outside.
pub struct Netns {
    pub name: String,
    pub host_if: String,
    pub ns_if: String,
    pub host_addr: String,
    pub ns_addr: String,
    processes: Vec<Child>,
    /// This namespace's `ip netns add` made /run/netns a mount point.
    made_netns_mount: bool,
}

/// Where `ip netns` keeps named namespaces: the first `ip netns add` makes
/// it a bind mount of its own, which stays after the last `ip netns del`.
pub const NETNS_DIR: &str = "/run/netns";

pub fn is_mount_point(path: &str) -> bool {
    std::fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some(path))
}

/// No named namespace left in /run/netns.
pub fn netns_dir_unused() -> bool {
    std::fs::read_dir(NETNS_DIR).map_or(true, |mut d| d.next().is_none())
}

impl Netns {
    pub fn create(name: &str, host_if: &str, ns_if: &str, host_addr: &str, ns_addr: &str, prefix: u8) -> Result<Self> {
        // Leftovers of an interrupted earlier run would make `ip` fail.
        quiet(&["ip", "netns", "del", name]);
        quiet(&["ip", "link", "del", host_if]);
        let n = Netns {
            name: name.into(),
            host_if: host_if.into(),
            ns_if: ns_if.into(),
            host_addr: host_addr.into(),
            ns_addr: ns_addr.into(),
            processes: Vec::new(),
            made_netns_mount: !is_mount_point(NETNS_DIR),
        };
        sh(&["ip", "netns", "add", name])?;
        sh(&["ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if])?;
        sh(&["ip", "link", "set", ns_if, "netns", name])?;
        sh(&["ip", "addr", "add", &format!("{host_addr}/{prefix}"), "dev", host_if])?;
        sh(&["ip", "link", "set", host_if, "up"])?;
        sh(&[
            "ip",
            "-n",
            name,
            "addr",
            "add",
            &format!("{ns_addr}/{prefix}"),
            "dev",
            ns_if,
        ])?;
        sh(&["ip", "-n", name, "link", "set", ns_if, "up"])?;
        sh(&["ip", "-n", name, "link", "set", "lo", "up"])?;
        Ok(n)
    }

    /// Starts `args` inside the namespace; it is killed when the namespace goes.
    pub fn spawn(&mut self, args: &[&str]) -> Result<u32> {
        let child = Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(crate::error::io(format!("start {} in netns {}", args[0], self.name)))?;
        let pid = child.id();
        self.processes.push(child);
        Ok(pid)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for c in &mut self.processes {
            let _ = c.kill();
            let _ = c.wait();
        }
        quiet(&["ip", "netns", "del", &self.name]);
        quiet(&["ip", "link", "del", &self.host_if]);
        if self.made_netns_mount && netns_dir_unused() {
            quiet(&["umount", NETNS_DIR]);
        }
    }
}
