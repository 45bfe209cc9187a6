//! Platforms: which processes, threads and network devices make up each
//! running instance of a virtualization platform, and the role of each.
//! Profiles are data (`profiles.toml`, extensible with `--platform-file`);
//! `detect` applies them to a snapshot of the system.

pub mod attribute;
pub mod detect;
pub mod image;
pub mod netdev;
pub mod profile;
pub mod snapshot;

use std::path::Path;

pub use detect::{DeviceRole, Instance, ThreadRole, detect, thread_role};
pub use profile::Profile;
pub use snapshot::SystemSnapshot;

use crate::{Error, Result};

/// The platform of everything no profile claims.
pub const HOST: &str = "host";

/// The name of `vtrace bench --stress` busy loops: their threads take the
/// role `stress`.
pub const STRESSOR_COMM: &str = "vtrace-stress";

/// Roles whose CPU is not the cost of what was measured: vtrace's own, and
/// the stressors a bench ran beside the workload. Per-operation totals and
/// `explain` leave them out.
pub const ROLES_LEFT_OUT: [&str; 2] = ["vtrace", "stress"];

/// Profiles: the embedded ones plus a user's file.
pub fn profiles(platform_file: Option<&Path>) -> Result<Vec<Profile>> {
    let extra = match platform_file {
        Some(p) => Some(std::fs::read_to_string(p).map_err(crate::error::io(format!("read {}", p.display())))?),
        None => None,
    };
    profile::load(extra.as_deref())
}

/// Names `--platform` accepts.
pub fn known(profiles: &[Profile]) -> Vec<String> {
    std::iter::once(HOST.to_string())
        .chain(profiles.iter().map(|p| p.name.clone()))
        .collect()
}

/// Instances by id, for messages ("none" when there are none).
pub fn ids(instances: &[Instance]) -> String {
    if instances.is_empty() {
        "none".to_string()
    } else {
        instances.iter().map(|i| i.id.as_str()).collect::<Vec<_>>().join(", ")
    }
}

/// Whether `--platform platform` (its name or a variant's) and `--instance
/// instance` (an id or a root pid) choose `i`.
pub fn chooses(i: &Instance, platform: &str, instance: Option<&str>) -> bool {
    (i.platform == platform || i.variant == platform)
        && instance.is_none_or(|id| i.id == id || i.root_pid.to_string() == id)
}

/// Instances of `platform` (matched on platform or variant name) running now,
/// optionally only the one with id `instance`.
pub fn select(
    profiles: &[Profile],
    all: Vec<Instance>,
    platform: &str,
    instance: Option<&str>,
) -> Result<Vec<Instance>> {
    let names = known(profiles);
    let is_variant = profiles
        .iter()
        .any(|p| p.vhost_variant.as_deref() == Some(platform) || p.virtio_variant.as_deref() == Some(platform));
    if !names.iter().any(|n| n == platform) && !is_variant {
        return Err(Error::UnknownPlatform {
            name: platform.into(),
            known: names.join(", "),
            running: None,
        });
    }
    let detected = ids(&all);
    let chosen: Vec<Instance> = all.into_iter().filter(|i| chooses(i, platform, instance)).collect();
    if chosen.is_empty() {
        return Err(Error::NoInstance {
            platform: platform.into(),
            instance: instance.map(str::to_string),
            detected,
        });
    }
    Ok(chosen)
}
