//! vtrace: where the CPU and the latency go along the virtualization I/O path.
//!
//! Data flow, one module per stage:
//! `probes` (kernel programs, catalog, attach) -> `collectors` (userspace
//! readers, one per concern) -> `recording` (on-disk schema) -> `analysis`
//! (derived figures) -> `report` (text, JSON, CSV). `record` drives the first
//! three; `platforms` says which threads and devices belong to which platform
//! instance; `workload` holds the embedded default run.

pub mod analysis;
pub mod collectors;
pub mod ebpf;
pub mod error;
pub mod lab;
pub mod platforms;
pub mod privileges;
pub mod probes;
pub mod record;
pub mod recording;
pub mod report;
pub mod workload;

pub use error::{Error, Result};
