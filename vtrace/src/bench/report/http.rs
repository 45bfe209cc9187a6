//! `vtrace http-load` GETs against the instance's HTTP server: the one
//! workload every VM platform serves (a Unikraft image speaks only HTTP).

use super::WorkloadSection;

pub struct Http;

impl WorkloadSection for Http {
    fn heading(&self) -> (&'static str, &'static str) {
        ("bench_http", "HTTP GET requests (one connection each)")
    }
}
