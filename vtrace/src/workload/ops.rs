//! How much work a workload did, read from its own output (or given with
//! `--ops N`): the denominator of every per-operation figure. A workload is
//! known by what it prints, not by its command line, so a wrapped command
//! (`ip netns exec ... redis-benchmark`, `docker exec`) is read all the same.

use serde::{Deserialize, Serialize};

/// The workload's own count of what it did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Operations {
    /// How many: requests, MiB, I/Os, replies.
    pub count: f64,
    /// What one operation is, singular: "request", "MiB", "I/O", "reply".
    pub unit: String,
    /// Where the count comes from: "redis-benchmark", "iperf3", "fio",
    /// "ping", or "--ops".
    pub source: String,
    /// Operations per second as the workload itself measured them, when it says.
    #[serde(default)]
    pub per_second: Option<f64>,
    /// Operations the workload itself counted as failed (not in `count`),
    /// where it says: http-load's requests that got no answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<f64>,
}

impl Operations {
    /// `--ops N`: a count given by the user.
    pub fn given(count: f64) -> Operations {
        Operations {
            count,
            unit: "op".into(),
            source: "--ops".into(),
            per_second: None,
            failed: None,
        }
    }

    /// The unit, plural.
    pub fn units(&self) -> String {
        plural(&self.unit)
    }
}

/// An operation's unit, plural: "requests", "MiB", "I/Os", "replies".
pub fn plural(unit: &str) -> String {
    match unit {
        "MiB" => "MiB".into(),
        "reply" => "replies".into(),
        unit => format!("{unit}s"),
    }
}

/// The operations in `output` (the workload's stdout and stderr) of
/// `command`, when a workload vtrace knows printed its summary.
pub fn parse(command: &[String], output: &str) -> Option<Operations> {
    redis_benchmark(command, output)
        .or_else(|| http_load(output))
        .or_else(|| iperf3(output))
        .or_else(|| fio(output))
        .or_else(|| ping(output))
        .or_else(|| modules(output))
}

/// redis-benchmark: `100000 requests completed in 1.23 seconds` per test in
/// its default output; with `-q` or `--csv` only the rate per test is
/// printed, so the count is `-n` (100000 by default) per test.
fn redis_benchmark(command: &[String], output: &str) -> Option<Operations> {
    // Progress lines end in '\r' without a newline: split on both.
    let lines = || output.split(['\n', '\r']).map(str::trim);
    let mut count = 0.0;
    let mut seconds = 0.0;
    for line in lines() {
        if let Some((n, rest)) = line.split_once(" requests completed in ")
            && let (Ok(n), Some(Ok(s))) = (
                n.trim().parse::<f64>(),
                rest.split_whitespace().next().map(str::parse::<f64>),
            )
        {
            count += n;
            seconds += s;
        }
    }
    if count > 0.0 {
        return Some(Operations {
            count,
            unit: "request".into(),
            source: "redis-benchmark".into(),
            per_second: (seconds > 0.0).then(|| count / seconds),
            failed: None,
        });
    }
    // -q: `SET: 81234.00 requests per second, p50=0.303 msec`; --csv:
    // `"SET","81234.00",...` under a `"test","rps",...` header.
    let csv = output.contains("\"test\",\"rps\"");
    let rates: Vec<f64> = lines()
        .filter_map(|l| {
            if csv {
                let mut cells = l.split(',').map(|c| c.trim_matches('"'));
                let test = cells.next()?;
                (test != "test").then(|| cells.next()?.parse().ok()).flatten()
            } else {
                let (_, rest) = l.split_once(": ")?;
                let (rate, _) = rest.split_once(" requests per second")?;
                rate.trim().parse().ok()
            }
        })
        .collect();
    if rates.is_empty() {
        return None;
    }
    let per_test = flag_value(command, "-n").unwrap_or(100_000.0);
    let count = per_test * rates.len() as f64;
    let seconds: f64 = rates.iter().map(|r| per_test / r).sum();
    Some(Operations {
        count,
        unit: "request".into(),
        source: "redis-benchmark".into(),
        per_second: (seconds > 0.0).then(|| count / seconds),
        failed: None,
    })
}

/// `vtrace http-load`: the requests answered, and those that were not.
fn http_load(output: &str) -> Option<Operations> {
    let (count, failed, seconds) = super::http::parse(output)?;
    Some(Operations {
        count,
        unit: "request".into(),
        source: "http-load".into(),
        per_second: (seconds > 0.0).then(|| count / seconds),
        failed: Some(failed),
    })
}

/// iperf3's summary: the `sender` line of the stream (or `[SUM]` of several)
/// gives the bytes moved, counted in MiB so that per-operation figures read
/// as cost per MiB; `-J` output gives `end.sum_sent.bytes`.
fn iperf3(output: &str) -> Option<Operations> {
    if let Ok(json) = serde_json::from_str::<serde_json::Value>(output.trim()) {
        let sent = &json["end"]["sum_sent"];
        let bytes = sent["bytes"].as_f64()?;
        let seconds = sent["seconds"].as_f64().unwrap_or(0.0);
        return Some(mib(bytes, seconds));
    }
    let senders: Vec<&str> = output
        .lines()
        .filter(|l| l.trim_end().ends_with("sender") && l.contains(" sec "))
        .collect();
    let line = senders.iter().find(|l| l.starts_with("[SUM]")).or(senders.first())?;
    // `[  5]   0.00-10.00  sec  25.6 GBytes  22.0 Gbits/sec    0   sender`
    let words: Vec<&str> = line.split_whitespace().collect();
    let sec_at = words.iter().position(|w| *w == "sec")?;
    let (from, to) = words.get(sec_at - 1)?.split_once('-')?;
    let seconds = to.parse::<f64>().ok()? - from.parse::<f64>().ok()?;
    let bytes = words.get(sec_at + 1)?.parse::<f64>().ok()? * byte_unit(words.get(sec_at + 2)?)?;
    Some(mib(bytes, seconds))
}

fn mib(bytes: f64, seconds: f64) -> Operations {
    let count = bytes / (1024.0 * 1024.0);
    Operations {
        count,
        unit: "MiB".into(),
        source: "iperf3".into(),
        per_second: (seconds > 0.0).then(|| count / seconds),
        failed: None,
    }
}

/// iperf3 prints sizes in binary units.
fn byte_unit(unit: &str) -> Option<f64> {
    Some(match unit {
        "Bytes" => 1.0,
        "KBytes" => 1024.0,
        "MBytes" => 1024.0 * 1024.0,
        "GBytes" => 1024.0 * 1024.0 * 1024.0,
        "TBytes" => 1024.0f64.powi(4),
        _ => return None,
    })
}

/// fio: `issued rwts: total=1234,5678,0,0 short=...` per job group: the I/Os
/// issued; the rate from `IOPS=` lines.
fn fio(output: &str) -> Option<Operations> {
    let jobs = super::fio::jobs(output);
    if !jobs.is_empty() {
        return Some(Operations {
            count: jobs.iter().map(|j| j.ios as f64).sum(),
            unit: "I/O".into(),
            source: "fio".into(),
            per_second: Some(jobs.iter().map(|j| j.iops).sum()),
            failed: None,
        });
    }
    let mut count = 0.0;
    let mut iops = 0.0;
    for line in output.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("issued rwts: total=") {
            let totals = rest.split_whitespace().next()?;
            count += totals.split(',').filter_map(|n| n.parse::<f64>().ok()).sum::<f64>();
        }
        if let Some((_, rest)) = line.split_once("IOPS=") {
            iops += si_number(rest.split(',').next()?).unwrap_or(0.0);
        }
    }
    (count > 0.0).then(|| Operations {
        count,
        unit: "I/O".into(),
        source: "fio".into(),
        per_second: (iops > 0.0).then_some(iops),
        failed: None,
    })
}

/// The module-load workload's entry scripts (workload/modules.rs): every
/// loader's modules, at the rate of all of them together (each its own
/// rate, summed: they ran at once).
fn modules(output: &str) -> Option<Operations> {
    let loads = super::modules::parse(output);
    if loads.is_empty() {
        return None;
    }
    let count = loads.iter().map(|(n, _)| n).sum();
    let rate: f64 = loads
        .iter()
        .filter(|(_, ms)| *ms > 0.0)
        .map(|(n, ms)| n / ms * 1e3)
        .sum();
    Some(Operations {
        count,
        unit: "module".into(),
        source: "node".into(),
        per_second: (rate > 0.0).then_some(rate),
        failed: None,
    })
}

/// `12.3k` -> 12300.
fn si_number(s: &str) -> Option<f64> {
    let s = s.trim();
    let (digits, scale) = match s.chars().last()? {
        'k' => (&s[..s.len() - 1], 1e3),
        'M' => (&s[..s.len() - 1], 1e6),
        _ => (s, 1.0),
    };
    Some(digits.parse::<f64>().ok()? * scale)
}

/// ping: `10 packets transmitted, 10 received, 0% packet loss, time 9013ms`.
fn ping(output: &str) -> Option<Operations> {
    let line = output.lines().find(|l| l.contains(" packets transmitted, "))?;
    let received = line
        .split(", ")
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse::<f64>()
        .ok()?;
    let ms = line
        .split("time ")
        .nth(1)
        .and_then(|t| t.trim_end_matches("ms").trim().parse::<f64>().ok());
    Some(Operations {
        count: received,
        unit: "reply".into(),
        source: "ping".into(),
        per_second: ms.filter(|ms| *ms > 0.0).map(|ms| received / (ms / 1e3)),
        failed: None,
    })
}

/// Every reply's round-trip time (ms) in ping's output (`time=0.045 ms`).
pub fn ping_rtts_ms(output: &str) -> Vec<f64> {
    output
        .lines()
        .filter_map(|l| l.split_once(" time=")?.1.split_whitespace().next()?.parse().ok())
        .collect()
}

/// The number after `flag` in `command` (`-n 20000`), also inside a
/// shell's one-string command (`sh -c "redis-benchmark -n 20000"`).
fn flag_value(command: &[String], flag: &str) -> Option<f64> {
    let words: Vec<&str> = command.iter().flat_map(|a| a.split_whitespace()).collect();
    let at = words.iter().position(|a| *a == flag)?;
    words.get(at + 1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn redis_benchmark_default_output_counts_every_test() {
        let out = "SET: rps=0.0 (overall: nan) avg_msec=nan (overall: nan)\r====== SET ======\n  \
                   20000 requests completed in 0.25 seconds\n  50 parallel clients\n\n====== GET ======\n  \
                   20000 requests completed in 0.20 seconds\n";
        let ops = parse(&cmd("redis-benchmark -t set,get -n 20000"), out).unwrap();
        assert_eq!(ops.count, 40000.0);
        assert_eq!(ops.unit, "request");
        assert!((ops.per_second.unwrap() - 40000.0 / 0.45).abs() < 1e-6);
    }

    #[test]
    fn redis_benchmark_quiet_and_csv_take_the_count_from_n() {
        let q = "SET: 80000.00 requests per second, p50=0.303 msec\nGET: 100000.00 requests per second, p50=0.2 msec\n";
        let ops = parse(&cmd("ip netns exec x redis-benchmark -q -n 40000"), q).unwrap();
        assert_eq!(ops.count, 80000.0);
        let shell = vec!["sh".to_string(), "-c".into(), "redis-benchmark -q -n 40000".into()];
        assert_eq!(parse(&shell, q).unwrap().count, 80000.0);
        let csv = "\"test\",\"rps\",\"avg_latency_ms\"\n\"SET\",\"80000.00\",\"0.3\"\n\"GET\",\"100000.00\",\"0.2\"\n";
        assert_eq!(parse(&cmd("redis-benchmark --csv"), csv).unwrap().count, 200000.0);
    }

    #[test]
    fn iperf3_counts_the_senders_bytes_in_mib() {
        let out = "[ ID] Interval           Transfer     Bitrate         Retr\n\
                   [  5]   0.00-2.00   sec  1.00 GBytes  4.29 Gbits/sec    0             sender\n\
                   [  5]   0.00-2.00   sec  1.00 GBytes  4.29 Gbits/sec                  receiver\n";
        let ops = parse(&cmd("iperf3 -c 127.0.0.1 -t 2"), out).unwrap();
        assert_eq!(ops.count, 1024.0);
        assert_eq!(ops.unit, "MiB");
        assert_eq!(ops.per_second, Some(512.0));
    }

    #[test]
    fn fio_counts_issued_ios_and_ping_counts_replies() {
        let fio_out = "  read: IOPS=12.5k, BW=48.8MiB/s (51.2MB/s)(977MiB/20001msec)\n     \
                       issued rwts: total=250000,0,0,0 short=0,0,0,0 dropped=0,0,0,0\n";
        let ops = parse(&cmd("fio job.fio"), fio_out).unwrap();
        assert_eq!((ops.count, ops.per_second), (250000.0, Some(12500.0)));
        let ping_out =
            "--- 10.0.0.1 ping statistics ---\n10 packets transmitted, 9 received, 10% packet loss, time 9013ms\n";
        let ops = parse(&cmd("ping -c 10 10.0.0.1"), ping_out).unwrap();
        assert_eq!((ops.count, ops.unit.as_str()), (9.0, "reply"));
        assert_eq!(ops.units(), "replies");
        let replies = "64 bytes from 10.0.0.1: icmp_seq=1 ttl=64 time=0.045 ms\n64 bytes from 10.0.0.1: icmp_seq=2 ttl=64 time=1.20 ms\n";
        assert_eq!(ping_rtts_ms(replies), vec![0.045, 1.2]);
    }

    #[test]
    fn unknown_output_has_no_operations() {
        assert_eq!(parse(&cmd("sleep 1"), "hello\n"), None);
    }
}
