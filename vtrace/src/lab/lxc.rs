//! `lxc`: an LXC container from the busybox template (its own lxcpath under
//! the lab's data directory) with the lab rootfs's redis and iperf3 copied
//! in, on a veth pair; the container's init serves.

use std::{fs, path::Path};

use super::{
    common::{ContainerRuntime, DATA_DIR, LabPlatform, Runtime},
    containers::SERVE,
    ledger::{Ledger, RemoveContainer, Resource},
    net::{self, address},
    rootfs,
};
use crate::{
    Result,
    workload::netns::{quiet, sh},
};

pub const NAME: &str = "vtrace-lab";
pub const HOST_IF: &str = "vtl-lxc0";

pub fn lxcpath() -> String {
    Path::new(DATA_DIR).join("lxc").display().to_string()
}

/// The `lxc` platform.
pub struct Lxc;

impl Runtime for Lxc {
    fn up(&self, p: &LabPlatform, ledger: &mut Ledger) -> Result<()> {
        up(p, ledger)
    }
}

impl RemoveContainer for Lxc {
    fn remove(&self, _runtime: &str, id: &str, root: &str) {
        quiet(&["lxc-stop", "-P", root, "-n", id, "-k"]);
        quiet(&["lxc-destroy", "-P", root, "-n", id]);
        // lxc-start leaves an empty `lxc.pivot` cgroup behind on cgroup v1.
        for ctl in fs::read_dir("/sys/fs/cgroup").into_iter().flatten().flatten() {
            let _ = fs::remove_dir(ctl.path().join("lxc.pivot"));
        }
    }
}

impl ContainerRuntime for Lxc {
    fn exec(&self, _runtime: &str, id: &str, root: &str) -> Vec<String> {
        vec![
            "lxc-attach".into(),
            "-P".into(),
            root.to_string(),
            "-n".into(),
            id.to_string(),
            "--".into(),
        ]
    }
}

fn up(p: &LabPlatform, ledger: &mut Ledger) -> Result<()> {
    let (host_addr, guest_addr) = address(p);
    let lower = rootfs::ensure()?;
    let path = lxcpath();
    ledger.add(Resource::Dir { path: path.clone() })?;
    fs::create_dir_all(&path).map_err(crate::error::io(format!("create {path}")))?;
    let conf = Path::new(&path).join("vtrace-lab.conf");
    fs::write(
        &conf,
        format!(
            "lxc.net.0.type = veth\nlxc.net.0.veth.pair = {HOST_IF}\nlxc.net.0.name = eth0\nlxc.net.0.flags = up\n\
             lxc.net.0.ipv4.address = {guest_addr}/24\nlxc.apparmor.profile = unconfined\n\
             lxc.init.cmd = /bin/sh /serve.sh\n\
             lxc.mount.entry = {volume} {mount} none bind,create=dir 0 0\n",
            volume = super::VOLUME_DIR,
            mount = super::VOLUME_MOUNT.trim_start_matches('/'),
        ),
    )
    .map_err(crate::error::io("write lxc config"))?;
    ledger.add(Resource::Container {
        runtime: "lxc".into(),
        id: NAME.into(),
        root: path.clone(),
    })?;
    sh(&[
        "lxc-create",
        "-P",
        &path,
        "-n",
        NAME,
        "-t",
        "busybox",
        "-f",
        &conf.display().to_string(),
    ])?;
    let root = Path::new(&path).join(NAME).join("rootfs");
    sh(&[
        "cp",
        "-a",
        &format!("{}/.", lower.display()),
        &root.display().to_string(),
    ])?;
    fs::write(root.join("serve.sh"), format!("cd /data\n{SERVE}\n")).map_err(crate::error::io("write serve.sh"))?;
    ledger.add(Resource::Link { name: HOST_IF.into() })?;
    sh(&["lxc-start", "-P", &path, "-n", NAME, "-d"])?;
    net::host_link_up(HOST_IF, &host_addr)
}
