//! Collectors: userspace, one per concern. Each reads what its probes
//! accumulate in the kernel (or what /proc says) and turns it into rows.

pub mod bpf_stats;
pub mod cpu;
pub mod kvm;
pub mod net;
pub mod procfs;
pub mod sample;
pub mod uprobes;
