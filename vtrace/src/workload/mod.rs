//! Workloads vtrace can set up itself. `netns` builds isolated network
//! namespaces; `ops` reads how much work a workload did from its own output.
//! (The embedded default run of `vtrace demo`, which records, is `crate::demo`.)

pub mod fio;
pub mod modules;
pub mod netns;
pub mod ops;
