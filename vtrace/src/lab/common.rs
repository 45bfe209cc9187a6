//! What every lab platform's file shares: where the lab keeps its files,
//! the ports it serves, the table entry of a platform and the traits its
//! runtime implements ([`Runtime`], [`ContainerRuntime`]), and how a
//! runtime's binaries and commands are run. Below every platform's file and
//! the table of platforms (`kinds.rs`), which names them all.

use std::{
    path::PathBuf,
    process::{Command, Stdio},
    time::Duration,
};

use super::ledger::{Ledger, RemoveContainer};
use crate::{Error, Result};

/// Where lab root filesystems and bundles live.
pub const DATA_DIR: &str = "/var/lib/vtrace-lab";

/// A host directory every container instance sees at [`VOLUME_MOUNT`]
/// (bind-mounted; the host platform uses it in place): where the
/// module-load workload's tree lives, as the studies' host volume did.
pub const VOLUME_DIR: &str = "/var/lib/vtrace-lab/volume";
pub const VOLUME_MOUNT: &str = "/volume";

/// The port the Unikraft image's HTTP server answers on (app-httpreply).
pub const HTTP_PORT: u16 = 8123;

/// Platforms `lab` can start here, and what each needs.
pub struct LabPlatform {
    pub name: &'static str,
    /// Third octet of the 10.99.X.0/24 network between host and instance.
    pub net: u8,
    pub binaries: &'static [&'static str],
    /// The file that starts it.
    pub runtime: &'static dyn Runtime,
}

/// What a platform's file knows of its instance: how it comes up, and how
/// it serves once up.
pub trait Runtime: Sync {
    /// Makes the instance, recording every resource in the ledger before the
    /// next step (the address too, where the runtime chooses it).
    fn up(&self, p: &LabPlatform, ledger: &mut Ledger) -> Result<()>;

    /// How long `up` waits for its redis to answer.
    fn boot(&self) -> Duration {
        Duration::from_secs(20)
    }

    /// The ports its instance serves (redis 6379, iperf3 5201, HTTP 8123):
    /// `up` waits for each.
    fn ports(&self) -> &'static [u16] {
        &[6379, 5201]
    }

    /// What this machine lacks for it beyond its binaries (a KVM that boots
    /// guests, an image), if anything.
    fn missing(&self) -> Option<String> {
        None
    }

    /// The platform its instances are recorded as (`record --platform`),
    /// when not its own name.
    fn recorded_as(&self) -> Option<&'static str> {
        None
    }

    /// The command line that runs a command inside an instance whose ledger
    /// records no container (`vtrace lab exec`); None: nothing to exec in.
    fn exec(&self, _ledger: &Ledger) -> Option<Vec<String>> {
        None
    }
}

/// What `down`, the leftover check ([`RemoveContainer`]) and `vtrace lab
/// exec` do with a container a ledger records, by the runtime that made it.
pub trait ContainerRuntime: RemoveContainer {
    /// The runtime's own exec: the words before the command.
    fn exec(&self, runtime: &str, id: &str, root: &str) -> Vec<String>;
}

/// `binary` in a directory of PATH, else of `also`.
pub(super) fn find_binary(binary: &str, also: &[&str]) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain(also.iter().map(PathBuf::from))
        .map(|d| d.join(binary))
        .find(|p| p.is_file())
}

/// What `program args` printed (trimmed), or its stderr as the error.
pub(super) fn stdout_of(program: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(crate::error::io(format!("run {program}")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(Error::Io {
            context: format!("{program} {}", args.join(" ")),
            source: std::io::Error::other(String::from_utf8_lossy(&out.stderr).trim().to_string()),
        })
    }
}
