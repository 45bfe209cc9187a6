//! `docker`: a private dockerd (its own data root, socket and bridge; no
//! iptables or sysctl changes) running the lab rootfs, imported as an image,
//! with runc.

use std::{
    fs,
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use super::{
    common::{ContainerRuntime, DATA_DIR, LabPlatform, Runtime, stdout_of},
    containers::SERVE,
    ledger::{LEDGER_DIR, Ledger, RemoveContainer, Resource},
    net, rootfs,
};
use crate::{
    Error, Result,
    workload::netns::{quiet, sh},
};

pub const BRIDGE: &str = "vtl-docker0";
const IMAGE: &str = "vtrace-lab/redis:1";
pub const CONTAINER: &str = "vtrace-lab";

pub fn socket() -> String {
    format!("unix://{LEDGER_DIR}/docker.sock")
}

/// Runs the docker client against the lab's daemon.
pub fn client(args: &[&str]) -> Result<String> {
    stdout_of("docker", &[&["-H", socket().as_str()], args].concat())
}

/// The `docker` platform.
pub struct Docker;

impl Runtime for Docker {
    fn up(&self, p: &LabPlatform, ledger: &mut Ledger) -> Result<()> {
        up(p, ledger)
    }
}

impl RemoveContainer for Docker {
    fn remove(&self, _runtime: &str, id: &str, root: &str) {
        quiet(&["docker", "-H", root, "rm", "-f", id]);
    }

    fn left(&self, _runtime: &str, _id: &str, _root: &str) -> Option<String> {
        None // gone with its daemon
    }
}

impl ContainerRuntime for Docker {
    fn exec(&self, _runtime: &str, id: &str, root: &str) -> Vec<String> {
        vec![
            "docker".into(),
            "-H".into(),
            root.to_string(),
            "exec".into(),
            id.to_string(),
        ]
    }
}

fn up(p: &LabPlatform, ledger: &mut Ledger) -> Result<()> {
    let lower = rootfs::ensure()?;
    net::bridge(ledger, p, BRIDGE)?;
    let data = Path::new(DATA_DIR).join("docker");
    let exec = Path::new(LEDGER_DIR).join("docker-exec");
    ledger.add(Resource::Dir {
        path: data.display().to_string(),
    })?;
    ledger.add(Resource::Dir {
        path: exec.display().to_string(),
    })?;
    // containerd and shims dockerd starts live under the exec root.
    ledger.add(Resource::Processes {
        pattern: exec.display().to_string(),
    })?;
    // Log and pid file live in the data root, which `down` removes.
    fs::create_dir_all(&data).map_err(crate::error::io(format!("create {}", data.display())))?;
    let log = fs::File::create(data.join("dockerd.log")).map_err(crate::error::io("create dockerd.log"))?;
    let pidfile = data.join("dockerd.pid");
    let host = socket();
    let child = Command::new("dockerd")
        .args([
            "--data-root",
            &data.display().to_string(),
            "--exec-root",
            &exec.display().to_string(),
        ])
        .args(["--pidfile", &pidfile.display().to_string(), "-H", &host])
        .args([
            "--bridge",
            BRIDGE,
            "--iptables=false",
            "--ip-forward=false",
            "--ip-masq=false",
            "--userland-proxy=false",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(crate::error::io("start dockerd"))?;
    ledger.add(Resource::Process {
        pid: child.id(),
        comm: "dockerd".into(),
    })?;
    let start = Instant::now();
    while client(&["info", "--format", "{{.ServerVersion}}"]).is_err() {
        if start.elapsed() > Duration::from_secs(30) {
            return Err(Error::Io {
                context: "dockerd".into(),
                source: std::io::Error::other("not ready within 30 s (see /var/lib/vtrace-lab/docker/dockerd.log)"),
            });
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let import = format!(
        "tar -C '{}' -c . | docker -H {host} import - {IMAGE} >/dev/null",
        lower.display()
    );
    sh(&["sh", "-c", &import])?;
    ledger.add(Resource::Container {
        runtime: "docker".into(),
        id: CONTAINER.into(),
        root: host.clone(),
    })?;
    let volume = format!("{}:{}", super::VOLUME_DIR, super::VOLUME_MOUNT);
    client(&[
        "run",
        "-d",
        "--name",
        CONTAINER,
        "--workdir",
        "/data",
        "-v",
        &volume,
        IMAGE,
        "/bin/sh",
        "-c",
        SERVE,
    ])?;
    let ip = client(&["inspect", "-f", "{{.NetworkSettings.IPAddress}}", CONTAINER])?;
    ledger.address = ip;
    Ok(())
}
