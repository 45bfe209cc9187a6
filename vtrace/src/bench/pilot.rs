//! How many requests a platform's redis cells send under
//! `--request-seconds`: a pilot run, once its instance is up, measures what
//! it serves at the matrix's largest value size, and the count that takes
//! about that long is kept in `cells/PLATFORM/redis-requests` (a resumed
//! bench reuses it, and the report says which count each platform used).

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde::{Deserialize, Serialize};

use super::Matrix;

pub const REQUESTS_FILE: &str = "redis-requests";

/// Requests per test of the pilot (SET and GET).
const PILOT_REQUESTS: u32 = 200;
/// The fewest requests per test: a few for each of redis-benchmark's 50 clients.
const FEWEST: u32 = 200;
/// How long the pilot may take: an instance that stopped answering fails it.
const PILOT_LIMIT: Duration = Duration::from_secs(120);

/// A platform's request count, and the pilot it came from.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Sized {
    /// Requests per test of each of the platform's redis cells.
    pub requests: u32,
    /// What the pilot measured (requests per second, SET and GET together).
    pub pilot_per_s: f64,
    /// The value size it measured at (bytes).
    pub size: u32,
}

fn file(root: &Path, platform: &str) -> PathBuf {
    root.join("cells").join(platform).join(REQUESTS_FILE)
}

/// The pilot's count of `platform`, if it ran.
pub fn load(root: &Path, platform: &str) -> Option<Sized> {
    serde_json::from_slice(&std::fs::read(file(root, platform)).ok()?).ok()
}

/// Requests per test of `platform`'s redis cells: `--requests`, or with
/// `--request-seconds` the pilot's count (run now against `addr` if it
/// has not run yet).
pub(super) fn requests(m: &Matrix, root: &Path, platform: &str, addr: &str) -> Result<u32, String> {
    let Some(seconds) = m.request_seconds else {
        return Ok(m.requests);
    };
    if let Some(sized) = load(root, platform) {
        return Ok(sized.requests);
    }
    let size = m.sizes.iter().max().copied().unwrap_or(64);
    let command = redis_benchmark(addr, &format!("-t set,get -d {size} -n {PILOT_REQUESTS} -q"));
    let output = run_bounded(&command, PILOT_LIMIT)?;
    let rate = crate::workload::ops::parse(&command, &output)
        .and_then(|o| o.per_second)
        .ok_or_else(|| format!("the pilot `{}` printed no rate: {}", command.join(" "), output.trim()))?;
    let sized = Sized {
        requests: ((rate * f64::from(seconds)) as u32).clamp(FEWEST.min(m.requests), m.requests),
        pilot_per_s: rate,
        size,
    };
    let path = file(root, platform);
    let _ = std::fs::create_dir_all(path.parent().expect("a cell directory"));
    std::fs::write(&path, serde_json::to_vec(&sized).expect("serializes"))
        .map_err(|e| format!("write {}: {e}", path.display()))?;
    Ok(sized.requests)
}

/// `redis-benchmark -h ADDR ARGS` as words.
pub(super) fn redis_benchmark(addr: &str, args: &str) -> Vec<String> {
    format!("redis-benchmark -h {addr} {args}")
        .split_whitespace()
        .map(String::from)
        .collect()
}

/// Runs `command` to its end, or fails once it has run `limit`.
pub(super) fn run_bounded(command: &[String], limit: Duration) -> Result<String, String> {
    let mut child = Command::new(&command[0])
        .args(&command[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("run {}: {e}", command[0]))?;
    // Read beside the wait, so that a full pipe never stalls it.
    let mut stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut text);
        text
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break Some(status);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let text = reader.join().unwrap_or_default();
    match status {
        Some(s) if s.success() => Ok(text),
        Some(s) => Err(format!("`{}` failed ({s}): {}", command.join(" "), text.trim())),
        None => Err(format!(
            "`{}` had no answer in {} s: the instance stopped answering",
            command.join(" "),
            limit.as_secs()
        )),
    }
}
