//! `vtrace demo`: the embedded default. redis-server runs in its own network
//! namespace behind a veth pair; redis-benchmark drives GET/SET with 64-byte
//! values from the host while vtrace records; the report is printed.

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use crate::workload::netns::Netns;
use crate::{
    Error, Result,
    record::{RecordOptions, RecordOutcome, record},
};

pub const NETNS: &str = "vtrace-demo";
pub const HOST_IF: &str = "vtd-host";
pub const NS_IF: &str = "vtd-ns";
/// Addresses of the demo's own namespace, reachable only from this machine.
pub const HOST_ADDR: &str = "10.99.0.1";
pub const SERVER_ADDR: &str = "10.99.0.2";

fn need(binary: &str) -> Result<()> {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(binary).is_file()))
        .unwrap_or(false);
    if found {
        Ok(())
    } else {
        Err(Error::Io {
            context: format!("{binary} not found on PATH"),
            source: std::io::Error::other("install it with scripts/setup.sh (Debian package redis-server/redis-tools)"),
        })
    }
}

fn wait_for_redis(addr: &str, timeout: Duration) -> Result<()> {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if std::net::TcpStream::connect_timeout(&format!("{addr}:6379").parse().unwrap(), Duration::from_millis(200))
            .is_ok()
        {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(Error::Io {
        context: "redis-server in the demo namespace".into(),
        source: std::io::Error::other("did not start listening within 10 s"),
    })
}

pub fn run(output: PathBuf, requests: u32) -> Result<RecordOutcome> {
    crate::privileges::check()?;
    need("redis-server")?;
    need("redis-benchmark")?;
    let mut ns = Netns::create(NETNS, HOST_IF, NS_IF, HOST_ADDR, SERVER_ADDR, 24)?;
    let redis = ns.spawn(&[
        "redis-server",
        "--bind",
        SERVER_ADDR,
        "--port",
        "6379",
        "--save",
        "",
        "--appendonly",
        "no",
        "--protected-mode",
        "no",
    ])?;
    wait_for_redis(SERVER_ADDR, Duration::from_secs(10))?;
    // The defaults of `vtrace record`: what a user leaves on.
    let opts = RecordOptions {
        pids: vec![redis],
        duration: None,
        output,
        command: [
            "redis-benchmark",
            "-h",
            SERVER_ADDR,
            "-p",
            "6379",
            "-t",
            "get,set",
            "-d",
            "64",
            "-c",
            "20",
            "-q",
            "-n",
            &requests.to_string(),
        ]
        .map(String::from)
        .to_vec(),
        ..RecordOptions::default()
    };
    let outcome = record(&opts);
    drop(ns);
    outcome
}
