//! Workloads vtrace can set up itself. `netns` builds isolated network
//! namespaces; `demo` is the embedded default run of `vtrace demo`; `ops`
//! reads how much work a workload did from its own output.

pub mod demo;
pub mod fio;
pub mod modules;
pub mod netns;
pub mod ops;
