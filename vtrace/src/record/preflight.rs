//! Before anything is loaded: the options checked, the output claimed, the
//! system and the selected platform's instances found. A bad selector or an
//! unknown platform fails here, before the workload starts.

use super::RecordOptions;
use crate::{
    Error, Result,
    platforms::{self, Instance, Profile, SystemSnapshot},
    probes::capabilities::ensure_tracefs,
    recording::OutputSlot,
};

/// What preflight found: where to write, the system as it was, and the
/// platform's instances in it.
pub struct Prepared {
    pub(super) slot: OutputSlot,
    pub(super) profiles: Vec<Profile>,
    pub(super) system: SystemSnapshot,
    pub(super) instances: Vec<Instance>,
    /// vtrace's own CPU when preflight began: its set-up is counted from
    /// here (a process that records again and again, a bench, counts each
    /// recording's own).
    pub(super) usage_at_preflight: crate::recording::Overhead,
    /// When preflight began: the first of the set-up's steps.
    pub(super) started: std::time::Instant,
}

/// The selected platform's instances in `system` (none for `host`).
pub(super) fn platform_instances(
    opts: &RecordOptions,
    profiles: &[Profile],
    system: &SystemSnapshot,
) -> Result<Vec<Instance>> {
    if opts.platform == platforms::HOST {
        return Ok(Vec::new());
    }
    let all = platforms::detect(profiles, system);
    match platforms::select(profiles, all, &opts.platform, opts.instance.as_deref()) {
        // The command may start it (`--platform firecracker -- firecracker
        // ...`): the watch finds it when it appears.
        Err(Error::NoInstance { .. }) if !opts.command.is_empty() => Ok(Vec::new()),
        found => found,
    }
}

/// Checks everything that can be checked before the workload starts.
pub fn preflight(opts: &RecordOptions) -> Result<Prepared> {
    let usage_at_preflight = super::emit::self_usage();
    let started = std::time::Instant::now();
    opts.check_layers()?;
    opts.check_selectors()?;
    let profiles = platforms::profiles(opts.platform_file.as_deref())?;
    if opts.platform != platforms::HOST {
        // An unknown name fails here, before privileges are looked at,
        // naming the instances that do run.
        if let Err(Error::UnknownPlatform { name, known, .. }) =
            platforms::select(&profiles, Vec::new(), &opts.platform, None)
        {
            let running = platforms::detect(&profiles, &SystemSnapshot::live());
            return Err(Error::UnknownPlatform {
                name,
                known,
                running: Some(platforms::ids(&running)),
            });
        }
    }
    crate::privileges::check()?;
    ensure_tracefs()?;
    // One look at the system serves platform detection, the tun fds to follow
    // and the kinds of the devices whose counters are read.
    let system = SystemSnapshot::live();
    let instances = platform_instances(opts, &profiles, &system)?;
    let slot = OutputSlot::claim(&opts.output, opts.force)?;
    Ok(Prepared {
        slot,
        profiles,
        system,
        instances,
        usage_at_preflight,
        started,
    })
}
