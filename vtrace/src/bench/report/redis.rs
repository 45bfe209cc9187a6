//! redis-benchmark GET/SET against the instance, one cell per value size.

use super::WorkloadSection;

pub struct Redis;

impl WorkloadSection for Redis {
    fn heading(&self) -> (&'static str, &'static str) {
        ("bench_redis", "redis GET/SET by value size")
    }

    fn param(&self, param: &str) -> String {
        format!("{param} B")
    }
}
