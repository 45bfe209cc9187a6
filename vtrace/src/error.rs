//! Errors the library returns. Each names the cause and, where there is one,
//! the fix, because users see them as one-line messages.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "vtrace record needs CAP_BPF and CAP_PERFMON (and, not as root, CAP_DAC_READ_SEARCH to read tracefs); \
         this process lacks {missing}: run it as root, or grant them with \
         `setcap cap_bpf,cap_perfmon,cap_dac_read_search+ep <path to vtrace>`"
    )]
    MissingPrivilege { missing: String },

    #[error(
        "vtrace lab needs root: it creates network namespaces, links, mounts, cgroups and containers \
         (run it with sudo)"
    )]
    LabNeedsRoot,

    #[error(
        "tracefs is not mounted at {path} and mounting it failed ({reason}): \
         mount it with `mount -t tracefs nodev {path}`"
    )]
    TracefsNotMounted { path: PathBuf, reason: String },

    #[error("cannot write the recording to {path}: {reason}; choose a writable path with -o")]
    OutputNotWritable { path: PathBuf, reason: String },

    #[error("{path} is not a vtrace recording ({reason}); record one with `vtrace record -o FILE`")]
    NotARecording { path: PathBuf, reason: String },

    #[error("{path} is a corrupt vtrace recording ({reason}); it cannot be read, record it again")]
    CorruptRecording { path: PathBuf, reason: String },

    #[error(
        "{path} was written by vtrace {writer} with recording schema version {found}; this vtrace ({}) reads \
         versions {oldest} to {newest}: {}",
        env!("CARGO_PKG_VERSION"),
        if found > newest { "upgrade vtrace to read it" } else { "report it with the vtrace release that wrote it" }
    )]
    SchemaVersion {
        path: PathBuf,
        writer: String,
        found: u32,
        oldest: u32,
        newest: u32,
    },

    #[error(
        "{path}: table {table} was written by vtrace {writer} as version {found}; this vtrace ({}) reads it up to \
         version {supported}: upgrade vtrace to read it",
        env!("CARGO_PKG_VERSION")
    )]
    TableVersion {
        path: PathBuf,
        table: String,
        writer: String,
        found: u32,
        supported: u32,
    },

    #[error(
        "unknown platform '{name}': known platforms are {known}{}",
        running.as_ref().map(|r| format!("; running now: {r}")).unwrap_or_default()
    )]
    UnknownPlatform {
        name: String,
        known: String,
        /// The instances detected now (`vtrace record`), or None where that does not apply (the lab).
        running: Option<String>,
    },

    #[error(
        "no running instance of platform '{platform}'{}: detected instances: {detected} \
         (start one, e.g. `vtrace lab up {platform}`, or see `vtrace platforms`)",
        instance.as_ref().map(|i| format!(" with id {i}")).unwrap_or_default()
    )]
    NoInstance {
        platform: String,
        instance: Option<String>,
        detected: String,
    },

    #[error("vtrace lab cannot start {platform} on this machine: {reason}")]
    LabUnavailable { platform: String, reason: String },

    #[error("vtrace lab exec in {platform}'s VM: {reason}")]
    LabShell { platform: String, reason: String },

    #[error(
        "another `vtrace lab` (pid {holder}) is bringing {platform} up or down: wait for it, or stop it and run \
         `vtrace lab down {platform}`"
    )]
    LabBusy { platform: String, holder: String },

    #[error("vtrace lab down {platform} left behind: {what}")]
    LabLeftovers { platform: String, what: String },

    #[error("bad platform profiles in {what}: {reason}")]
    PlatformFile { what: String, reason: String },

    #[error("{0}")]
    BadArgument(String),

    #[error("no probe of the CPU attribution engine could be attached: {0}")]
    NoProbes(String),

    #[error("cannot read kernel type information: {0}")]
    Btf(String),

    #[error("eBPF: {0}")]
    Ebpf(String),

    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },

    #[error("recording table {table}: {reason}")]
    Table { table: &'static str, reason: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Wraps an I/O error with what was being done.
pub fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}
