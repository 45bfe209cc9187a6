//! The bench matrix: platforms x workloads x parameters x repetitions, as
//! given on the command line and kept in `bench.json`, its cells and where
//! each run's recording lies.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{Error, Result, lab};

/// The matrix, as given on the command line (`bench.json`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, clap::Args)]
pub struct Matrix {
    /// A study's matrix, and its section in the report: `redis-sizes` is
    /// the microVM study's (Redis GET and SET by value size on Kata, the
    /// Unikraft platforms, Firecracker and a QEMU Linux VM: requests/s, CPU
    /// split as mpstat splits it, packet sizes per hop, and the study's
    /// findings beside this machine's). Flags given beside it override its settings.
    #[arg(long, value_enum)]
    #[serde(default)]
    pub study: Option<Study>,
    /// Lab platforms (see `vtrace lab status`).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "host,runc",
        default_value_if("study", "redis-sizes", REDIS_SIZES_PLATFORMS)
    )]
    pub platforms: Vec<String>,
    #[arg(long = "workload", value_enum, value_delimiter = ',', default_value = "redis")]
    pub workloads: Vec<Workload>,
    /// redis-benchmark value sizes (bytes).
    #[arg(long, value_delimiter = ',', default_value = "32,64,1024,4096,16384")]
    pub sizes: Vec<u32>,
    /// iperf3 TCP window sizes (its -w: 64K, 1M, ...).
    #[arg(long, value_delimiter = ',', default_value = "64K,256K,1M")]
    pub windows: Vec<String>,
    /// CPU stressors (busy loops) beside the workload, one cell per count (e.g. 0,2).
    #[arg(long, value_delimiter = ',', default_value = "0")]
    pub stress: Vec<u32>,
    /// Runs per cell.
    #[arg(long, default_value_t = 3)]
    pub repeat: u32,
    /// redis-benchmark requests per test (GET, SET); with
    /// `--request-seconds`, the most.
    #[arg(long, default_value_t = 100_000)]
    pub requests: u32,
    /// redis: GET and SET in cells of their own (`64-set`, `64-get`), each
    /// recording one operation; a GET cell's key is set to its size first,
    /// unrecorded.
    #[arg(long, default_value_if("study", "redis-sizes", "true"))]
    #[serde(default)]
    pub each_op: bool,
    /// redis: the operations benchmarked (redis-benchmark's `-t`), each a
    /// cell of its own with `--each-op`.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "set,get")]
    #[serde(default = "default_redis_ops")]
    pub redis_ops: Vec<RedisOp>,
    /// redis: size each platform's requests per test to what it serves in
    /// about this many seconds at the largest size, by a pilot run once its
    /// instance is up (`cells/PLATFORM/redis-requests` keeps the count;
    /// `--requests` the most).
    #[arg(long, default_value_if("study", "redis-sizes", "10"))]
    #[serde(default)]
    pub request_seconds: Option<u32>,
    /// iperf3 seconds per run.
    #[arg(long, default_value_t = 5)]
    pub seconds: u32,
    /// HTTP GET requests per run (`vtrace http-load`, one connection at a time).
    #[arg(long, default_value_t = 2000)]
    #[serde(default = "default_http_requests")]
    pub http_requests: u32,
    /// ping echo requests per run (10 ms apart).
    #[arg(long, default_value_t = 200)]
    pub pings: u32,
    /// Packages the module-load workload requires (one cell per count).
    #[arg(long, value_delimiter = ',', default_value = "500")]
    #[serde(default = "default_modules")]
    pub modules: Vec<u32>,
    /// Node.js processes loading the modules at once in the instance, each
    /// its own `lab exec` (one cell per count): concurrent reads of the one
    /// shared volume (for Kata, one virtiofsd serving them all).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    #[serde(default = "default_loaders")]
    pub loaders: Vec<u32>,
    /// fio cells also run beside a noisy neighbour: direct 1 MiB writes to
    /// a large file on the same disk from a cgroup of their own.
    #[arg(long)]
    #[serde(default)]
    pub neighbour: bool,
}

/// A study the bench draws whole: its matrix's settings and its report section.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Study {
    /// Redis GET/SET by value size on the microVM platforms (seed 000).
    RedisSizes,
}

/// The platforms of `--study redis-sizes`: the study's Kata, UK-vhost,
/// UK-virtio, Firecracker and LinuxVM (virtio, as the study's).
const REDIS_SIZES_PLATFORMS: &str = "kata,unikraft-vhost,unikraft-virtio,firecracker,qemu-kvm-novhost";

/// A redis-benchmark test.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum RedisOp {
    Set,
    Get,
}

impl RedisOp {
    pub fn name(self) -> &'static str {
        match self {
            RedisOp::Set => "set",
            RedisOp::Get => "get",
        }
    }
}

fn default_redis_ops() -> Vec<RedisOp> {
    vec![RedisOp::Set, RedisOp::Get]
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    Redis,
    Iperf3,
    Ping,
    /// Direct random 4 KiB reads inside the instance (`vtrace lab exec`).
    Fio,
    /// Node.js requiring a tree of small packages from the lab volume.
    Modules,
    /// HTTP GETs (`vtrace http-load`) against the instance's HTTP server
    /// (port 8123: the Linux guests' busybox httpd, a Unikraft image's own).
    Http,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::Redis => "redis",
            Workload::Iperf3 => "iperf3",
            Workload::Ping => "ping",
            Workload::Fio => "fio",
            Workload::Modules => "modules",
            Workload::Http => "http",
        }
    }
}

/// One configuration of the matrix; its repetitions are its runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Cell {
    pub platform: String,
    pub workload: Workload,
    /// The value size (`64`, or `64-get` with `--each-op`), the window, or "rtt".
    pub param: String,
    pub stress: u32,
    /// Beside a noisy neighbour (`--neighbour`, fio cells).
    pub neighbour: bool,
}

impl Cell {
    /// `redis-64`, `iperf3-64K+stress2`, `fio-randread-4k+neighbour`.
    pub fn name(&self) -> String {
        let stress = if self.stress > 0 {
            format!("+stress{}", self.stress)
        } else {
            String::new()
        };
        let neighbour = if self.neighbour { "+neighbour" } else { "" };
        format!("{}-{}{stress}{neighbour}", self.workload.name(), self.param)
    }

    pub fn dir(&self, root: &Path) -> PathBuf {
        root.join("cells").join(&self.platform).join(self.name())
    }

    /// The command that drives the instance at `addr`; a redis cell sends
    /// `requests` per test.
    pub(super) fn command(&self, m: &Matrix, addr: &str, requests: u32) -> Vec<String> {
        let vtrace = || std::env::current_exe().map_or_else(|_| "vtrace".into(), |p| p.display().to_string());
        let words = match self.workload {
            Workload::Redis => {
                let (size, op) = redis_param(&self.param);
                format!(
                    "redis-benchmark -h {addr} -t {} -d {size} -n {requests} -q",
                    op.map_or_else(
                        || m.ops().iter().map(|o| o.name()).collect::<Vec<_>>().join(","),
                        String::from
                    )
                )
            }
            Workload::Iperf3 => format!("iperf3 -c {addr} -t {} -w {}", m.seconds, self.param),
            Workload::Ping => format!("ping -c {} -i 0.01 {addr}", m.pings),
            Workload::Fio => {
                // Inside the instance: a file in its own root (the host
                // platform's processes share the host's: the lab's
                // directory), or a lab VM's data disk.
                let file = if self.platform == crate::platforms::HOST {
                    format!("{}/fio-victim.dat", lab::DATA_DIR)
                } else if let Some(disk) = lab::data_disk_in(&self.platform) {
                    disk.into()
                } else {
                    "/fio-victim.dat".into()
                };
                format!(
                    "{} lab exec {} -- fio --name=victim --filename={file} --rw=randread --bs=4k \
                     --size=64M --direct=1 --time_based --runtime={} --output-format=json",
                    vtrace(),
                    self.platform,
                    m.seconds
                )
            }
            Workload::Modules => {
                let (modules, loaders) = modules_param(&self.param);
                let load = format!(
                    "{} lab exec {} -- node {}/modules-{modules}/index.js",
                    vtrace(),
                    self.platform,
                    lab::volume_in(&self.platform),
                );
                if loaders == 1 {
                    load
                } else {
                    // One shell word: the loaders start together, and the run ends with the last.
                    let script = format!("for i in $(seq {loaders}); do {load} & done; wait");
                    return vec!["sh".into(), "-c".into(), script];
                }
            }
            Workload::Http => format!(
                "{} http-load {addr}:{} -n {}",
                vtrace(),
                lab::HTTP_PORT,
                m.http_requests
            ),
        };
        words.split_whitespace().map(String::from).collect()
    }
}

impl Matrix {
    pub fn cells(&self) -> Vec<Cell> {
        let mut cells = Vec::new();
        for platform in &self.platforms {
            for &workload in &self.workloads {
                let params: Vec<String> = match workload {
                    // SET before GET (a GET cell's key is set first, unrecorded).
                    Workload::Redis if self.each_op => self
                        .sizes
                        .iter()
                        .flat_map(|s| self.ops().into_iter().map(move |op| format!("{s}-{}", op.name())))
                        .collect(),
                    Workload::Redis => self.sizes.iter().map(u32::to_string).collect(),
                    Workload::Iperf3 => self.windows.clone(),
                    Workload::Ping => vec!["rtt".into()],
                    Workload::Fio => vec!["randread-4k".into()],
                    Workload::Modules => self
                        .modules
                        .iter()
                        .flat_map(|m| self.loaders.iter().map(move |l| modules_name(*m, *l)))
                        .collect(),
                    Workload::Http => vec!["get".into()],
                };
                let neighbours: &[bool] = if workload == Workload::Fio && self.neighbour {
                    &[false, true]
                } else {
                    &[false]
                };
                for param in params {
                    for &stress in &self.stress {
                        for &neighbour in neighbours {
                            cells.push(Cell {
                                platform: platform.clone(),
                                workload,
                                param: param.clone(),
                                stress,
                                neighbour,
                            });
                        }
                    }
                }
            }
        }
        cells
    }

    /// The redis operations, once each, SET before GET.
    pub fn ops(&self) -> Vec<RedisOp> {
        let mut ops = self.redis_ops.clone();
        ops.sort_unstable();
        ops.dedup();
        ops
    }

    pub fn load(root: &Path) -> Result<Matrix> {
        let path = root.join(MATRIX_FILE);
        let bytes = std::fs::read(&path).map_err(|e| Error::NotARecording {
            path: root.to_path_buf(),
            reason: format!("not a bench directory ({MATRIX_FILE}: {e})"),
        })?;
        serde_json::from_slice(&bytes).map_err(|e| Error::NotARecording {
            path: path.clone(),
            reason: format!("unreadable bench matrix: {e}"),
        })
    }
}

pub const MATRIX_FILE: &str = "bench.json";

fn default_modules() -> Vec<u32> {
    vec![500]
}

fn default_loaders() -> Vec<u32> {
    vec![1]
}

/// A module-load cell's parameter: `500` (one loader) or `500x4`.
fn modules_name(modules: u32, loaders: u32) -> String {
    if loaders == 1 {
        modules.to_string()
    } else {
        format!("{modules}x{loaders}")
    }
}

/// (modules, loaders) of a module-load cell's parameter.
pub fn modules_param(param: &str) -> (u32, u32) {
    let (m, l) = param.split_once('x').unwrap_or((param, "1"));
    (m.parse().unwrap_or(0), l.parse().unwrap_or(1))
}

/// (value size, operation) of a redis cell's parameter: `64` (GET and
/// SET) or `64-get`.
pub fn redis_param(param: &str) -> (&str, Option<&str>) {
    match param.split_once('-') {
        Some((size, op)) => (size, Some(op)),
        None => (param, None),
    }
}

fn default_http_requests() -> u32 {
    2000
}

/// A run of a cell: its recording, or the error that stopped it.
pub fn run_path(cell_dir: &Path, rep: u32) -> PathBuf {
    cell_dir.join(format!("rep{rep}.vtrace"))
}

pub fn error_path(cell_dir: &Path, rep: u32) -> PathBuf {
    cell_dir.join(format!("rep{rep}.error"))
}
