//! The `vtrace` command line's subcommands, one file each: its arguments
//! and the steps it takes. Part of the binary (`main.rs` parses and
//! dispatches); library errors become one-line messages here (anyhow).

pub mod agent;
pub mod bench;
pub mod compare;
pub mod demo;
pub mod http_load;
pub mod lab;
pub mod platforms;
pub mod probes;
pub mod record;
pub mod recover;
pub mod report;
pub mod serve;

mod output;
