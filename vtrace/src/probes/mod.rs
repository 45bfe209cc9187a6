//! Probes: the kernel side. The catalog lists every probe point with its
//! attach strategies in order of preference; capabilities of the running
//! kernel decide which strategy is tried; `attach` tries them and records
//! the method used or why each was skipped.

pub mod attach;
pub mod capabilities;
pub mod catalog;
pub mod offsets;

pub use attach::{ProbeStatus, attach_all, plan};
pub use capabilities::Capabilities;
pub use catalog::{ProbeSpec, Strategy};
