//! iperf3 against the instance, one cell per TCP window.

use super::WorkloadSection;

pub struct Iperf3;

impl WorkloadSection for Iperf3 {
    fn heading(&self) -> (&'static str, &'static str) {
        ("bench_iperf3", "iperf3 by TCP window")
    }

    fn param(&self, param: &str) -> String {
        format!("window {param}")
    }
}
