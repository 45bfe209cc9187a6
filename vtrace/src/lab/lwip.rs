//! `lwip`: a small Redis-protocol server on Debian's liblwip (a user-space
//! TCP/IP stack, as in Unikraft unikernels) over a tap device: it stands in
//! for Unikraft's lwIP path on a machine that cannot run Unikraft.
//!
//! The tap's MTU is 576: Debian's liblwip 2.1.3 tapif copies each frame into
//! a pool pbuf of 616 bytes without checking, so larger frames corrupt its
//! heap (found with AddressSanitizer). lwIP then uses an MSS of 536.

use std::{
    fs,
    path::Path,
    process::{Command, Stdio},
};

use super::{
    common::{DATA_DIR, LabPlatform, Runtime},
    ledger::{Ledger, Resource},
    net::{self, address},
};
use crate::{Error, Result};

pub const TAP: &str = "vtl-lwip0";
pub const MTU: &str = "576";
const SOURCE: &str = include_str!("lwip/lwip_redis.c");

/// Compiles the server if its source changed; returns the binary.
fn build() -> Result<std::path::PathBuf> {
    let dir = Path::new(DATA_DIR).join("lwip");
    fs::create_dir_all(&dir).map_err(crate::error::io(format!("create {}", dir.display())))?;
    let (src, bin) = (dir.join("lwip_redis.c"), dir.join("lwip-redis"));
    if bin.exists() && fs::read_to_string(&src).is_ok_and(|s| s == SOURCE) {
        return Ok(bin);
    }
    fs::write(&src, SOURCE).map_err(crate::error::io("write lwip_redis.c"))?;
    let out = Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&bin)
        .arg(&src)
        .args(["-I/usr/include/lwip", "-llwip", "-lpthread"])
        .output()
        .map_err(crate::error::io("run cc"))?;
    if !out.status.success() {
        let _ = fs::remove_file(&src);
        return Err(Error::LabUnavailable {
            platform: "lwip".into(),
            reason: format!(
                "building the lwIP server failed (is liblwip-dev installed?): {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    Ok(bin)
}

/// The `lwip` platform.
pub struct Lwip;

impl Runtime for Lwip {
    fn up(&self, p: &LabPlatform, ledger: &mut Ledger) -> Result<()> {
        up(p, ledger)
    }

    fn ports(&self) -> &'static [u16] {
        &[6379] // redis only
    }
}

fn up(p: &LabPlatform, ledger: &mut Ledger) -> Result<()> {
    let (host_addr, guest_addr) = address(p);
    let bin = build()?;
    net::tap(ledger, p, TAP, Some(MTU))?;
    let child = Command::new("setsid")
        .arg(&bin)
        .args([guest_addr.as_str(), "255.255.255.0", host_addr.as_str()])
        .env("PRECONFIGURED_TAPIF", TAP)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(crate::error::io("start lwip-redis"))?;
    ledger.add(Resource::Process {
        pid: child.id(),
        comm: "lwip-redis".into(),
    })?;
    ledger.note = format!("user-space lwIP stack on tap {TAP} (MTU {MTU}); redis protocol only, no iperf3 server");
    Ok(())
}
