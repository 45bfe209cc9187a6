//! Shared mechanisms for derived figures; each layer's own analysis lives in
//! `layers/<name>/analysis.rs`.

pub mod histogram;
