//! `vtrace http-load`: a bounded HTTP load generator, counted, for servers
//! that speak nothing else (the Unikraft image's httpreply): N GET requests,
//! `concurrency` connections at a time, one request per connection (the
//! server closes after its reply, as app-httpreply does). Its summary line
//! is what `ops` reads.

use std::{
    collections::BTreeMap,
    io::{ErrorKind, Read, Write},
    net::{SocketAddr, TcpStream},
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
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
    /// The failures by what went wrong, e.g. "no reply in 5s": 2.
    pub why: BTreeMap<String, u64>,
    pub elapsed: Duration,
}

impl HttpLoad {
    /// `vtrace http-load: 200 requests completed in 1.234 seconds (198 ok, 2 failed: 2 no reply in 5s)`.
    pub fn summary(&self) -> String {
        let why: Vec<String> = self.why.iter().map(|(what, n)| format!("{n} {what}")).collect();
        format!(
            "{SUMMARY} {} requests completed in {:.3} seconds ({} ok, {} failed{})",
            self.ok + self.failed,
            self.elapsed.as_secs_f64(),
            self.ok,
            self.failed,
            if why.is_empty() {
                String::new()
            } else {
                format!(": {}", why.join(", "))
            }
        )
    }
}

/// What went wrong at one step of a GET, e.g. "reply: nothing in 5s".
fn failure(step: &str, e: std::io::Error, timeout: Duration) -> String {
    match e.kind() {
        ErrorKind::TimedOut | ErrorKind::WouldBlock => {
            format!("{step}: nothing in {}", humantime::format_duration(timeout))
        }
        kind => format!("{step}: {kind}"),
    }
}

/// One GET: Ok when the status line says 2xx, else what went wrong.
fn get(addr: SocketAddr, timeout: Duration) -> Result<(), String> {
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| failure("connect", e, timeout))?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| failure("connect", e, timeout))?;
    s.write_all(format!("GET / HTTP/1.0\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes())
        .map_err(|e| failure("send", e, timeout))?;
    let mut reply = Vec::new();
    if let Err(e) = s.read_to_end(&mut reply) {
        // Whether any of the reply came says which side stalled.
        return Err(failure(
            if reply.is_empty() { "reply" } else { "reply's end" },
            e,
            timeout,
        ));
    }
    if reply.starts_with(b"HTTP/1.") && reply.get(9) == Some(&b'2') {
        Ok(())
    } else if reply.is_empty() {
        Err("reply: closed with no answer".into())
    } else {
        let status = String::from_utf8_lossy(&reply[..reply.len().min(12)]).into_owned();
        Err(format!("reply: status {status:?}"))
    }
}

/// Sends `requests` GETs to `addr`, `concurrency` at a time.
pub fn run(addr: SocketAddr, requests: u64, concurrency: u32, timeout: Duration) -> HttpLoad {
    let next = AtomicU64::new(0);
    let ok = AtomicU64::new(0);
    let why = Mutex::new(BTreeMap::<String, u64>::new());
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..concurrency.max(1) {
            s.spawn(|| {
                while next.fetch_add(1, Ordering::Relaxed) < requests {
                    match get(addr, timeout) {
                        Ok(()) => {
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(what) => *why.lock().unwrap().entry(what).or_default() += 1,
                    }
                }
            });
        }
    });
    let why = why.into_inner().unwrap();
    HttpLoad {
        ok: ok.into_inner(),
        failed: why.values().sum(),
        why,
        elapsed: start.elapsed(),
    }
}

/// The answered and failed requests of a summary line in `output`, and their seconds.
pub fn parse(output: &str) -> Option<(f64, f64, f64)> {
    let line = output.lines().find_map(|l| l.trim().strip_prefix(SUMMARY))?;
    let (_, counts) = line.split_once('(')?;
    let mut words = counts.split_whitespace();
    let ok: f64 = words.next()?.parse().ok()?;
    let failed: f64 = words.nth(1)?.parse().ok()?;
    let (_, rest) = line.split_once(" completed in ")?;
    let seconds: f64 = rest.split_whitespace().next()?.parse().ok()?;
    Some((ok, failed, seconds))
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
        assert_eq!(
            parse(&load.summary()).map(|(n, failed, _)| (n, failed)),
            Some((20.0, 0.0))
        );
        // Nothing listens there any more: every request fails, and is said.
        let refused = run(addr, 3, 1, Duration::from_secs(1));
        assert_eq!((refused.ok, refused.failed), (0, 3));
        assert_eq!(
            refused.why.get("connect: connection refused"),
            Some(&3),
            "{:?}",
            refused.why
        );
        assert!(
            refused
                .summary()
                .ends_with("(0 ok, 3 failed: 3 connect: connection refused)")
        );
        assert_eq!(
            parse(&refused.summary()).map(|(n, failed, _)| (n, failed)),
            Some((0.0, 3.0))
        );
    }
}
