//! Workloads vtrace can set up itself. `netns` builds isolated network
//! namespaces; `demo` is the embedded default run of `vtrace demo`.

pub mod demo;
pub mod netns;
