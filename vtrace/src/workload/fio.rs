//! fio's own figures from its JSON output (`--output-format=json`): per job
//! and direction, the I/Os and bytes it did and the latency it measured,
//! kept in the recording beside what vtrace counted.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One job's one direction (read, write, trim) as fio reports it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FioJob {
    pub name: String,
    pub op: String,
    pub ios: u64,
    pub bytes: u64,
    pub iops: f64,
    pub bw_bytes: u64,
    /// Submission to completion, mean and percentiles.
    pub lat_mean_ns: f64,
    pub clat_p50_ns: u64,
    pub clat_p99_ns: u64,
}

/// The jobs of fio's JSON output; empty when `output` has none (fio's
/// default text output, or another program). fio may print warnings
/// before the JSON object.
pub fn jobs(output: &str) -> Vec<FioJob> {
    let Some(start) = output.find("{\n").or_else(|| output.find('{')) else {
        return Vec::new();
    };
    let mut stream = serde_json::Deserializer::from_str(&output[start..]).into_iter::<Value>();
    let Some(Ok(doc)) = stream.next() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for job in doc["jobs"].as_array().into_iter().flatten() {
        let name = job["jobname"].as_str().unwrap_or("").to_string();
        for op in ["read", "write", "trim"] {
            let d = &job[op];
            let ios = d["total_ios"].as_u64().unwrap_or(0);
            if ios == 0 {
                continue;
            }
            let pct = |p: &str| d["clat_ns"]["percentile"][p].as_u64().unwrap_or(0);
            out.push(FioJob {
                name: name.clone(),
                op: op.to_string(),
                ios,
                bytes: d["io_bytes"].as_u64().unwrap_or(0),
                iops: d["iops"].as_f64().unwrap_or(0.0),
                bw_bytes: d["bw_bytes"].as_u64().unwrap_or(0),
                lat_mean_ns: d["lat_ns"]["mean"].as_f64().unwrap_or(0.0),
                clat_p50_ns: pct("50.000000"),
                clat_p99_ns: pct("99.000000"),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_jobs_after_a_warning_line() {
        let out = "fio: note: both iodepth >= 1 and synchronous I/O engine are selected\n{\n  \"fio version\" : \"fio-3.33\",\n  \"jobs\" : [ { \"jobname\" : \"victim\", \"read\" : { \"io_bytes\" : 8192, \"total_ios\" : 2, \"iops\" : 4.0, \"bw_bytes\" : 16384, \"lat_ns\" : { \"mean\" : 1500.5 }, \"clat_ns\" : { \"percentile\" : { \"50.000000\" : 1000, \"99.000000\" : 2000 } } }, \"write\" : { \"total_ios\" : 0 } } ]\n}\n";
        let jobs = jobs(out);
        assert_eq!(jobs.len(), 1);
        assert_eq!(
            (jobs[0].name.as_str(), jobs[0].op.as_str(), jobs[0].ios, jobs[0].bytes),
            ("victim", "read", 2, 8192)
        );
        assert_eq!((jobs[0].clat_p50_ns, jobs[0].clat_p99_ns), (1000, 2000));
        assert!(super::jobs("3.2 requests per second").is_empty());
    }
}
