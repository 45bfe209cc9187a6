#![no_std]
//! Empty library target: lets vtrace declare a build-dependency on this crate
//! so cargo rebuilds vtrace when the eBPF sources change.
