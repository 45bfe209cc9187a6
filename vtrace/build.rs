//! Builds the eBPF object (vtrace-ebpf, target bpfel-unknown-none, nightly +
//! bpf-linker) with aya-build; `src/ebpf.rs` embeds it.
use anyhow::{Context as _, anyhow};
use aya_build::Toolchain;

fn main() -> anyhow::Result<()> {
    let cargo_metadata::Metadata { packages, .. } = cargo_metadata::MetadataCommand::new()
        .no_deps()
        .exec()
        .context("cargo metadata")?;
    let ebpf = packages
        .iter()
        .find(|p| p.name.as_str() == "vtrace-ebpf")
        .ok_or_else(|| anyhow!("vtrace-ebpf package not found in the workspace"))?;
    let root_dir = ebpf
        .manifest_path
        .parent()
        .ok_or_else(|| anyhow!("no parent for {}", ebpf.manifest_path))?;
    let package = aya_build::Package {
        name: ebpf.name.as_str(),
        root_dir: root_dir.as_str(),
        ..Default::default()
    };
    aya_build::build_ebpf([package], Toolchain::default())?;
    // AYA_BUILD_SKIP=1 (scripts/test.sh's clippy: it lints this crate, not
    // the eBPF one, and under clippy this script runs apart from the
    // build's, so it would build the object again): an empty object, which
    // `ebpf::load` refuses by name.
    let object = std::path::Path::new(&std::env::var("OUT_DIR")?).join("vtrace");
    if !object.exists() {
        std::fs::write(&object, b"").context("write the empty eBPF object")?;
    }
    Ok(())
}
