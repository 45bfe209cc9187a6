//! Workloads vtrace can set up itself. `netns` builds isolated network
//! namespaces; `ops` reads how much work a workload did from its own output;
//! `http` is a counted HTTP load generator (`vtrace http-load`).
//! (The embedded default run of `vtrace demo`, which records, is `crate::demo`.)

pub mod fio;
pub mod http;
pub mod modules;
pub mod netns;
pub mod ops;
