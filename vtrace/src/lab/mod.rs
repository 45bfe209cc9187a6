//! `vtrace lab`: starts and stops real instances of the platforms this
//! machine can run, each serving redis (6379) and an iperf3 server (5201) on a
//! known address reachable from the host.
//!
//! Every resource `up` creates is written to a ledger
//! (/run/vtrace-lab/<platform>.json) *before* the next step, so `down` undoes
//! exactly what was made, also after a failed or interrupted `up`.
//!
//! `kinds.rs` is the table of platforms (and the file that implements each),
//! `common.rs` what those files share (the traits a runtime implements),
//! `ledger.rs` the record and its undoing, `net.rs` the host-instance
//! network, `lock.rs` the one-at-a-time lock; the entry points below
//! dispatch through the table. No file uses one that uses it back
//! (scripts/check-layering.py).

mod common;
mod containerd;
mod containers;
mod disks;
mod docker;
pub mod guest;
pub mod kata;
mod kinds;
mod ledger;
mod linuxvm;
mod lock;
mod loopdev;
mod lwip;
mod lxc;
mod net;
pub mod rootfs;
pub mod shell;
mod sriov;
mod vms;

use std::{fs, time::Duration};

pub use self::{
    common::{ContainerRuntime, DATA_DIR, HTTP_PORT, LabPlatform, Runtime, VOLUME_DIR, VOLUME_MOUNT},
    kinds::{RUNNABLE, availability, which},
    ledger::{LEDGER_DIR, Ledger, Resource, leftovers},
    net::{address, ipv4_only, veth_netns, wait_listening},
    sriov::SRIOV_PF_ENV,
    vms::{FIRECRACKER_ENV, UNIKRAFT_IMAGE_ENV, kvm_cannot_boot_guests},
};
use self::{
    kinds::{container_runtime, lab_platform},
    lock::PlatformLock,
};
use crate::{Error, Result, layers::guest::transport::GuestAddress};

/// Where the lab volume is inside an instance of `platform`.
pub fn volume_in(platform: &str) -> &'static str {
    if platform == crate::platforms::HOST {
        VOLUME_DIR
    } else {
        VOLUME_MOUNT
    }
}

/// Whether the platform's instance is up (its ledger says it became ready).
pub fn is_up(name: &str) -> bool {
    Ledger::load(name).is_some_and(|l| l.ready)
}

/// Starts the platform's instance; on failure everything made so far is
/// removed. An instance already up is returned as it is; one a crashed
/// `up` left half-made is removed first (its ledger was written as it went).
pub fn up(name: &str) -> Result<Ledger> {
    crate::privileges::check_root()?;
    let p = lab_platform(name)?;
    if let Some(missing) = availability(name) {
        return Err(Error::LabUnavailable {
            platform: name.into(),
            reason: missing,
        });
    }
    let _lock = PlatformLock::take(name)?;
    if let Some(l) = Ledger::load(name) {
        if l.ready {
            return Ok(l);
        }
        down_locked(name)?; // a half-made earlier attempt
    }
    let (_, guest) = address(p);
    // The volume outlives instances (a cache, like the root filesystem).
    fs::create_dir_all(VOLUME_DIR).map_err(crate::error::io(format!("create {VOLUME_DIR}")))?;
    let mut ledger = Ledger {
        platform: name.into(),
        address: guest,
        ..Default::default()
    };
    ledger.save()?;
    let began = std::time::Instant::now();
    // The address may be the runtime's choice (docker): read after `up`.
    let made = p.runtime.up(p, &mut ledger).and_then(|()| {
        for (i, &port) in p.runtime.ports().iter().enumerate() {
            // The first port waits for the boot; the others are up by then.
            let wait = if i == 0 {
                p.runtime.boot()
            } else {
                Duration::from_secs(10)
            };
            wait_listening(&ledger.address, port, wait)?;
        }
        Ok(())
    });
    if let Err(e) = made {
        let _ = down_locked(name);
        return Err(e);
    }
    ledger.note = format!("{}; ready in {:.1} s", ledger.note, began.elapsed().as_secs_f64())
        .trim_start_matches("; ")
        .to_string();
    ledger.ready = true;
    ledger.save()?;
    Ok(ledger)
}

/// Undoes everything in the platform's ledger, newest first; then checks.
/// False when nothing was up.
pub fn down(name: &str) -> Result<bool> {
    crate::privileges::check_root()?;
    lab_platform(name)?; // an unknown name is an error, not "nothing was up"
    let _lock = PlatformLock::take(name)?;
    down_locked(name)
}

fn down_locked(name: &str) -> Result<bool> {
    let Some(ledger) = Ledger::load(name) else {
        Ledger::discard_unfinished_write(name); // torn: killed in its first write
        return Ok(false);
    };
    ledger.undo(name, kinds::remover);
    let left = leftovers(&ledger, kinds::remover);
    if left.is_empty() {
        Ok(true)
    } else {
        Err(Error::LabLeftovers {
            platform: name.into(),
            what: left.join(", "),
        })
    }
}

/// How `vtrace lab exec` runs a command inside an instance.
#[derive(Debug)]
pub enum Exec {
    /// A command line run here: the runtime's own exec (runc, crun, runsc,
    /// docker, lxc-attach), or `ip netns exec` for the host platform.
    Here(Vec<String>),
    /// Sent to a lab Linux VM's command channel (lab/shell.rs).
    InVm(GuestAddress, Vec<String>),
}

/// How `command` runs inside the running instance of `platform`.
pub fn exec_command(platform: &str, command: &[String]) -> Result<Exec> {
    let ledger = Ledger::load(platform)
        .filter(|l| l.ready)
        .ok_or_else(|| Error::LabUnavailable {
            platform: platform.into(),
            reason: format!("no instance is up: `vtrace lab up {platform}` first"),
        })?;
    let here = ledger
        .resources
        .iter()
        .find_map(|r| match r {
            Resource::Container { runtime, id, root } => Some(container_runtime(runtime).exec(runtime, id, root)),
            _ => None,
        })
        .or_else(|| {
            let p = RUNNABLE.iter().find(|p| p.name == platform)?;
            p.runtime.exec(&ledger)
        });
    if let Some(mut argv) = here {
        argv.extend(command.iter().cloned());
        return Ok(Exec::Here(argv));
    }
    match GuestAddress::parse(&ledger.shell) {
        Ok(shell) => Ok(Exec::InVm(shell, command.to_vec())),
        Err(_) => Err(Error::LabUnavailable {
            platform: platform.into(),
            reason: "its instance runs no shell to exec in (a unikernel, a user-space stack, or a VM \
                     brought up with VTRACE_LAB_AGENT=0): run the workload from the host against its address"
                .into(),
        }),
    }
}

/// The data disk inside the running instance of `platform`, where it is a
/// lab Linux VM that has one (lab/disks.rs).
pub fn data_disk_in(platform: &str) -> Option<&'static str> {
    Ledger::load(platform)?
        .resources
        .iter()
        .any(|r| matches!(r, Resource::LoopDevice { .. }))
        .then_some(disks::GUEST_DATA_DISK)
}

/// What the instance of `platform` serves where: "redis 10.99.11.2:6379,
/// iperf3 10.99.11.2:5201".
pub fn serves(platform: &str, addr: &str) -> String {
    let Some(p) = RUNNABLE.iter().find(|p| p.name == platform) else {
        return addr.to_string();
    };
    let name = |port| match port {
        6379 => "redis",
        5201 => "iperf3",
        HTTP_PORT => "http",
        _ => "tcp",
    };
    let each: Vec<String> = p
        .runtime
        .ports()
        .iter()
        .map(|&port| format!("{} {addr}:{port}", name(port)))
        .collect();
    each.join(", ")
}

/// The platform an instance of lab platform `name` is recorded as
/// (`containerd-runc`'s is a runc instance); an unknown name is itself.
pub fn recorded_as(name: &str) -> &str {
    RUNNABLE
        .iter()
        .find(|p| p.name == name)
        .and_then(|p| p.runtime.recorded_as())
        .unwrap_or(name)
}

/// Whether the instance of `platform` serves `port` (any port for a name
/// the lab does not know: the user's own instance).
pub fn serves_port(platform: &str, port: u16) -> bool {
    RUNNABLE
        .iter()
        .find(|p| p.name == platform)
        .is_none_or(|p| p.runtime.ports().contains(&port))
}

/// A workload that drives the instance of `platform` at `addr`: redis where
/// it serves redis, `vtrace http-load` where it serves only HTTP.
pub fn example_workload(platform: &str, addr: &str) -> String {
    if serves_port(platform, 6379) {
        format!("redis-benchmark -h {addr} -t get,set -d 64")
    } else {
        format!("vtrace http-load {addr}:{HTTP_PORT} -n 1000")
    }
}

/// One line per platform: running (address), or startable, or why not.
pub fn status() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in RUNNABLE {
        let state = match Ledger::load(p.name) {
            Some(l) if l.ready => format!("up: {} {}", serves(p.name, &l.address), l.note),
            Some(_) => "half-made (run `vtrace lab down` to clean up)".into(),
            None => match availability(p.name) {
                Some(why) => format!("cannot start: {why}"),
                None => "down (can start here)".into(),
            },
        };
        out.push((p.name.to_string(), state));
    }
    out
}
