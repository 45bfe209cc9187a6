//! `vtrace http-load`.

#[derive(clap::Args)]
pub struct Args {
    /// The server, e.g. 10.99.23.2:8123.
    addr: std::net::SocketAddr,
    #[arg(short = 'n', long, default_value_t = 1000)]
    requests: u64,
    /// Connections at a time.
    #[arg(short, long, default_value_t = 1)]
    concurrency: u32,
    /// Per request (connect, reply).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    timeout: std::time::Duration,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let load = vtrace::workload::http::run(args.addr, args.requests, args.concurrency, args.timeout);
    println!("{}", load.summary());
    // A server that answered was measured, its failures with it (the
    // summary says them; `record` and `bench` keep them): only one that
    // answered nothing failed the run.
    Ok(if load.ok == 0 { 1 } else { 0 })
}
