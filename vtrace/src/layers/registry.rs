//! The registry: every layer, one line each, and what is asked of all of
//! them at once (their names, probes, tables, switches). Above the layers
//! and the frame (`mod.rs`); nothing under `layers/` uses it.

use std::path::Path;

use vtrace_common::Config;

use super::{
    CommonSwitches, Layer, Switches, block, cpu, faults, fs, guest, kvm, net, path, runq, sample,
    switches::SwitchGroup, tun, uprobe, vsock,
};
use crate::{
    Result,
    probes::{Capabilities, ProbeSpec, offsets::KernelLayout},
    recording::{Recording, TableKind},
};

/// Every layer, in attach and emit order. The CPU engine comes first: its
/// probes must attach before any other (see `cpu::probes`), and its thread
/// table is what every other layer attributes its rows with.
pub const REGISTRY: &[&dyn Layer] = &[
    &cpu::CpuLayer,
    &net::NetLayer,
    &tun::TunLayer,
    &kvm::KvmLayer,
    &uprobe::UprobeLayer,
    &runq::RunqLayer,
    &block::BlockLayer,
    &fs::FsLayer,
    &faults::FaultsLayer,
    &vsock::VsockLayer,
    &path::PathLayer,
    &sample::SampleLayer,
    &guest::GuestLayer,
];

/// The layer named `name`.
pub fn find(name: &str) -> Option<&'static dyn Layer> {
    REGISTRY.iter().copied().find(|l| l.name() == name)
}

/// Names of every layer, for messages.
pub fn names() -> Vec<&'static str> {
    REGISTRY.iter().map(|l| l.name()).collect()
}

/// The configuration with every layer's offsets on this kernel and no
/// switch on: what `vtrace probes` and the verifier test load.
pub fn kernel_config(caps: &Capabilities) -> Config {
    let kernel = KernelLayout::of(caps);
    let mut config = Config::default();
    for layer in REGISTRY {
        layer.offsets(&kernel, &mut config);
    }
    config
}

/// `--layers`' help: every layer by name, from the registry.
pub fn layers_help() -> String {
    format!(
        "Layers to record, comma-separated (the CPU layer is always on): {}; e.g. `--layers cpu` for CPU \
         attribution alone. Default: every layer that is on by default",
        names().join(", ")
    )
}

/// The layers a plain `vtrace record` runs.
pub fn default_names() -> Vec<String> {
    REGISTRY
        .iter()
        .filter(|l| l.on_by_default())
        .map(|l| l.name().to_string())
        .collect()
}

/// Every probe of every layer, in attach order.
pub fn catalog() -> Vec<ProbeSpec> {
    REGISTRY.iter().flat_map(|l| l.catalog().iter().copied()).collect()
}

/// Reads any recording, its tables as the layers declare them; an
/// unfinished one (vtrace was killed) is recovered from its journal.
pub fn read(path: &Path) -> Result<Recording> {
    let mut rec = crate::recording::read(path, &table_kinds(), cpu::journal::replay)?;
    rec.guests = read_guests(path);
    Ok(rec)
}

/// The guests' recordings kept in the one at `path` (the guest layer's
/// `guests/<guest>/`), each read as any recording is: a guest's damaged
/// or unfinished recording is its own error or journal, never the host's.
fn read_guests(path: &Path) -> Vec<crate::recording::GuestPart> {
    let mut dirs: Vec<_> = std::fs::read_dir(path.join(guest::GUESTS_DIR))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_dir() && !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .collect();
    dirs.sort();
    dirs.iter()
        .map(|d| crate::recording::GuestPart {
            name: d.file_name().unwrap_or_default().to_string_lossy().into_owned(),
            recording: crate::recording::read(d, &table_kinds(), cpu::journal::replay).map_err(|e| e.to_string()),
        })
        .collect()
}

/// Writes the recording an unfinished directory holds (`vtrace recover`).
pub fn recover_into(path: &Path, output: Option<&Path>) -> Result<std::path::PathBuf> {
    crate::recording::recover_into(path, output, &table_kinds(), cpu::journal::replay)
}

/// How to read every table a layer (or the recording itself) writes.
pub fn table_kinds() -> Vec<TableKind> {
    let mut kinds = vec![TableKind::of::<crate::recording::ProgramRow>()];
    kinds.extend(REGISTRY.iter().flat_map(|l| l.tables()));
    kinds
}

/// What loss counter `key` means, as the layer that keeps it says.
pub fn loss_meaning(key: &str) -> Option<&'static str> {
    REGISTRY
        .iter()
        .flat_map(|l| l.losses())
        .find(|l| l.key == key)
        .map(|l| l.meaning)
}

/// The frame's switch group, then every layer's, in registry order.
fn switch_groups() -> Vec<SwitchGroup> {
    std::iter::once(SwitchGroup::of::<CommonSwitches>())
        .chain(REGISTRY.iter().filter_map(|l| l.switches()))
        .collect()
}

/// Every layer's switches at their defaults, in registry order (so that
/// the cost mode reads the same however they were set).
pub fn default_switches() -> Switches {
    let command = <Switches as clap::Args>::augment_args(clap::Command::new("vtrace"));
    command
        .try_get_matches_from(["vtrace"])
        .and_then(|m| Switches::parse(&switch_groups(), &m))
        .unwrap_or_default()
}

/// `#[command(flatten)] switches: Switches` puts every layer's group in a command.
impl clap::Args for Switches {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        switch_groups().iter().fold(cmd, |cmd, g| g.augment(cmd))
    }
    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

impl clap::FromArgMatches for Switches {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        Switches::parse(&switch_groups(), m)
    }
    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    /// A loss counter is named after the layer that keeps it, once.
    #[test]
    fn loss_counters_are_named_layer_dot_counter() {
        let mut seen = std::collections::HashSet::new();
        for layer in super::REGISTRY {
            for loss in layer.losses() {
                assert!(
                    loss.key.starts_with(&format!("{}.", layer.name())),
                    "{} keeps {}",
                    layer.name(),
                    loss.key
                );
                assert!(seen.insert(loss.key), "{} declared twice", loss.key);
                assert!(!loss.meaning.is_empty());
            }
        }
    }

    /// Every table a recording can hold is described in
    /// docs/recording-schema.md: a section heading names `NAME.parquet`.
    #[test]
    fn every_table_has_a_section_in_the_schema_doc() {
        let doc = include_str!("../../../docs/recording-schema.md");
        let headings: Vec<&str> = doc.lines().filter(|l| l.starts_with("## ")).collect();
        let missing: Vec<&str> = super::table_kinds()
            .iter()
            .map(|k| k.name)
            .filter(|name| !headings.iter().any(|h| h.contains(&format!("{name}.parquet"))))
            .collect();
        assert!(
            missing.is_empty(),
            "tables without a section in docs/recording-schema.md: {missing:?}"
        );
    }
}
