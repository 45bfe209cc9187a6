//! Figures derived from a recording, independent of how they are shown.

pub mod cpu;
pub mod kvm;
pub mod net;
