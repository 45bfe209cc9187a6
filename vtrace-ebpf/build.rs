use which::which;

/// Rebuild when bpf-linker changes: the object it links is embedded in vtrace.
fn main() {
    let bpf_linker = which("bpf-linker")
        .expect("bpf-linker not found on PATH: run scripts/setup.sh (it installs bpf-linker 0.13.0)");
    println!("cargo:rerun-if-changed={}", bpf_linker.display());
}
