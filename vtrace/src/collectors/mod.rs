//! Collectors shared by every layer: vtrace's own cost (BPF statistics) and
//! /proc readers. Each layer's own collector lives in `layers/<name>/`.

pub mod batch;
pub mod bpf_stats;
pub mod maps;
pub mod procfs;
