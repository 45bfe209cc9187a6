//! `vtrace http-load`: a bounded HTTP load generator, counted, for servers
//! that speak nothing else (the Unikraft image's httpreply): N GET requests,
//! `concurrency` connections at a time, one request per connection (the
//! server closes after its reply, as app-httpreply does). Its summary line
//! is what `ops` reads.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    sync::atomic::{AtomicU64, Ordering},
    time::{Duration, Instant},
};

/// The summary line's start, which `ops::parse` looks for.
pub const SUMMARY: &str = "vtrace http-load:";

/// What a load run did.
#[derive(Debug, Default)]
pub struct HttpLoad {
    /// Requests answered with a 2xx status.
    pub ok: u64,
    /// Requests that failed (connection error, timeout, other status).
    pub failed: u64,
    pub elapsed: Duration,
}

impl HttpLoad {
    /// `vtrace http-load: 200 requests completed in 1.234 seconds (200 ok, 0 failed)`.
    pub fn summary(&self) -> String {
        format!(
            "{SUMMARY} {} requests completed in {:.3} seconds ({} ok, {} failed)",
            self.ok + self.failed,
            self.elapsed.as_secs_f64(),
            self.ok,
            self.failed
        )
    }
}

/// One GET; true when the status line says 2xx.
fn get(addr: SocketAddr, timeout: Duration) -> bool {
    let attempt = || -> std::io::Result<bool> {
        let mut s = TcpStream::connect_timeout(&addr, timeout)?;
        s.set_read_timeout(Some(timeout))?;
        s.write_all(format!("GET / HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes())?;
        let mut reply = Vec::new();
        s.read_to_end(&mut reply)?;
        Ok(reply.starts_with(b"HTTP/1.") && reply.get(9) == Some(&b'2'))
    };
    attempt().unwrap_or(false)
}

/// Sends `requests` GETs to `addr`, `concurrency` at a time.
pub fn run(addr: SocketAddr, requests: u64, concurrency: u32, timeout: Duration) -> HttpLoad {
    let next = AtomicU64::new(0);
    let ok = AtomicU64::new(0);
    let failed = AtomicU64::new(0);
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..concurrency.max(1) {
            s.spawn(|| {
                while next.fetch_add(1, Ordering::Relaxed) < requests {
                    let counter = if get(addr, timeout) { &ok } else { &failed };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    HttpLoad {
        ok: ok.into_inner(),
        failed: failed.into_inner(),
        elapsed: start.elapsed(),
    }
}

/// The answered requests of a summary line in `output`, and their seconds.
pub fn parse(output: &str) -> Option<(f64, f64)> {
    let line = output.lines().find_map(|l| l.trim().strip_prefix(SUMMARY))?;
    let (_, ok) = line.split_once('(')?;
    let ok: f64 = ok.split_whitespace().next()?.parse().ok()?;
    let (_, rest) = line.split_once(" completed in ")?;
    let seconds: f64 = rest.split_whitespace().next()?.parse().ok()?;
    Some((ok, seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_answers_of_a_real_server_and_failures_of_a_closed_port() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            for _ in 0..20 {
                let (mut c, _) = listener.accept().unwrap();
                let mut buf = [0u8; 512];
                let _ = c.read(&mut buf);
                c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").unwrap();
            }
        });
        let load = run(addr, 20, 2, Duration::from_secs(5));
        server.join().unwrap();
        assert_eq!((load.ok, load.failed), (20, 0));
        assert_eq!(parse(&load.summary()).map(|(n, _)| n), Some(20.0));
        // Nothing listens there any more: every request fails, and is said.
        let refused = run(addr, 3, 1, Duration::from_secs(1));
        assert_eq!((refused.ok, refused.failed), (0, 3));
        assert_eq!(parse(&refused.summary()).map(|(n, _)| n), Some(0.0));
    }
}
