//! redis-benchmark GET/SET against the instance, one cell per value size
//! (and per operation with `--each-op`).

use super::WorkloadSection;
use crate::bench::redis_param;

pub struct Redis;

impl WorkloadSection for Redis {
    fn heading(&self) -> (&'static str, &'static str) {
        ("bench_redis", "redis GET/SET by value size")
    }

    /// `64 B`, or `64 B GET`.
    fn param(&self, param: &str) -> String {
        match redis_param(param) {
            (size, Some(op)) => format!("{size} B {}", op.to_uppercase()),
            (size, None) => format!("{size} B"),
        }
    }
}
