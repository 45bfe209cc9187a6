//! vtrace: where the CPU and the latency go along the virtualization I/O path.
//!
//! Data flow: `layers` (one folder per probe family: its catalog entries,
//! collector, tables, rows and analysis, beside its eBPF file in
//! vtrace-ebpf/src/) -> `recording` (on-disk schema) -> `report` (text,
//! JSON, CSV). `probes` holds what every layer's probes share (strategies,
//! capabilities, attach), `collectors` what every layer's collector shares
//! (vtrace's own cost, /proc), `analysis` the shared histogram. `record`
//! runs the layers through one generic loop and [`record::Recorder`] lets
//! another program do so; `platforms` says which threads and devices belong
//! to which platform instance; `workload` holds the embedded default run and
//! reads a workload's count of operations; `compare` puts recordings side
//! by side and explains their difference per operation; `bench` records a
//! matrix of platforms x workloads x parameters and draws the studies' figures.

pub mod analysis;
pub mod bench;
pub mod collectors;
pub mod compare;
pub mod demo;
pub mod ebpf;
pub mod error;
pub mod exposition;
pub mod lab;
pub mod layers;
pub mod platforms;
pub mod privileges;
pub mod probes;
pub mod record;
pub mod recording;
pub mod report;
pub mod report_model;
pub mod serve;
pub mod views;
pub mod workload;

pub use error::{Error, Result};
