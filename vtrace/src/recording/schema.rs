//! Recording contents: `meta.json` ([`Metadata`]) and the tables. Documented
//! for users in docs/recording-schema.md; keep the two in step.

use serde::{Deserialize, Serialize};

use super::table::table;
use crate::probes::ProbeStatus;

/// The file whose presence marks a complete recording.
pub const META: &str = "meta.json";

table! {
    /// Self-overhead per eBPF program: its runs over the whole recording
    /// (counted by the program itself) and the kernel's BPF run-time
    /// statistics, which cover `overhead.bpf_stats_coverage` of it.
    ProgramRow = "programs" {
        probe: String,
        program: String,
        method: String,
        /// Runs over the whole recording (HOOK_RUNS); 0 for a program that does not count itself.
        events: u64,
        /// Runs and run time while the kernel's statistics were on.
        run_count: u64,
        run_time_ns: u64,
        /// Events the kernel did not run the program for: it was already
        /// running on that CPU (e.g. interrupted by a softirq that hit the same hook).
        recursion_misses: u64,
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Host {
    pub hostname: String,
    pub kernel: String,
    pub cpus: u32,
    /// Clock ticks per second of /proc time fields (USER_HZ).
    pub clock_ticks: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Selectors {
    pub platform: String,
    pub pids: Vec<u32>,
    pub comms: Vec<String>,
    pub cgroups: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    pub command: Vec<String>,
    pub pid: u32,
    /// Exit code, when it exited normally.
    pub exit_code: Option<i32>,
    /// Signal number, when a signal ended it.
    pub signal: Option<i32>,
    /// The work it reported (its own output, kept in `workload.out`), or
    /// `record --ops N`: what per-operation figures divide by.
    #[serde(default)]
    pub ops: Option<crate::workload::ops::Operations>,
    /// fio's own figures per job and direction, when it printed JSON.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fio: Vec<crate::workload::fio::FioJob>,
}

fn full_coverage() -> f64 {
    1.0
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Overhead {
    /// Sum of run time of all vtrace eBPF programs (kernel BPF stats), over
    /// the whole run: extrapolated when the statistics were sampled.
    pub bpf_run_time_ns: u64,
    pub bpf_run_count: u64,
    /// Share of the run during which the kernel's BPF statistics were on (1:
    /// always; 0: never). Per-program rows hold what was counted in that share.
    #[serde(default = "full_coverage")]
    pub bpf_stats_coverage: f64,
    /// bpf_run_time_ns / (wall_ns x cpus).
    pub bpf_cpu_fraction: f64,
    /// ns per run that the statistics' own clock reads add to every measured
    /// run (`bpf_stats::Calibration::floor_ns`), subtracted in bpf_run_time_ns; 0
    /// in recordings before it was measured.
    #[serde(default)]
    pub bpf_stats_floor_ns: f64,
    /// What an empty program really costs per run with the statistics off,
    /// the tracepoint's dispatch included (`bpf_stats::Calibration`).
    #[serde(default)]
    pub bpf_hook_ns: f64,
    /// CPU time of the vtrace process from the workload's start to the
    /// recording's last reading (collection, snapshots, the settle after
    /// the workload exits). Before `vtrace_setup_ns` existed in recordings,
    /// the whole process's, set-up included.
    pub vtrace_user_ns: u64,
    pub vtrace_system_ns: u64,
    /// CPU time of the vtrace process from this recording's preflight to
    /// that window: finding the platform, reading the kernel's BTF,
    /// loading, verifying and attaching the programs, calibrating (building
    /// the tables and writing the recording come after and are in
    /// neither). Recordings before 2026-11-29 counted it from the process's
    /// start: in a bench, every earlier cell's too.
    #[serde(default)]
    pub vtrace_setup_ns: u64,
    /// Wall time of each step of vtrace's own start, in order, and of its
    /// last readings: `preflight` (options, the platform's instances),
    /// `kernel` (its BTF parsed, what it offers), `configure` (offsets
    /// resolved, each layer's configuration and probes), `load` (the
    /// object's maps made, the statistics' floor measured), `attach`
    /// (the collectors started, a guest's agent reached among them; every
    /// program verified and attached, baselines taken), and
    /// `read_end` (the last readings, programs detaching). Empty in
    /// recordings before 2026-11-29.
    #[serde(default)]
    pub setup_steps_ns: Vec<(String, u64)>,
    pub vtrace_peak_rss_kib: u64,
    /// (eBPF run time + vtrace's CPU while the workload ran) / capacity:
    /// the tracing cost as a share of the machine.
    #[serde(default)]
    pub self_cost_fraction: f64,
    /// The workload's expected slowdown from tracing: that cost over the
    /// CPU time everything else used in the window (all CPUs' busy time,
    /// which includes the programs', less the cost itself). Exact for work
    /// whose critical path is CPU time on the traced paths; an upper bound
    /// where vtrace's process ran on otherwise idle CPUs.
    #[serde(default)]
    pub expected_slowdown: f64,
    /// What the slices after unreported context switches (`losses`'
    /// `cpu.untraced_switches`) would have over-charged their threads, taken
    /// back by each thread's own scheduler clock.
    #[serde(default)]
    pub untraced_trimmed_ns: u64,
    /// What vtrace could not count, per `layer.counter` (each layer declares
    /// its counters with their meaning: `Layer::losses`); zeros included for
    /// the layers that ran.
    #[serde(default)]
    pub losses: std::collections::BTreeMap<String, u64>,
    /// Fields of older recordings' overhead this vtrace has no field for:
    /// the named loss counters (read into `losses`), kept only while reading.
    #[serde(flatten, skip_serializing)]
    pub(crate) legacy: std::collections::BTreeMap<String, serde_json::Value>,
    /// Stack sampling frequency (`--sample`), 0 when off.
    #[serde(default)]
    pub sample_hz: u64,
    /// Checkpoints written into the journal while recording (`--checkpoint`).
    #[serde(default)]
    pub checkpoints: u64,
    /// Wall time spent writing them, all together (vtrace's main loop, in
    /// vtrace's CPU time above).
    #[serde(default)]
    pub checkpoint_ns: u64,
}

impl Overhead {
    /// Named loss counters of recordings before `losses` (schema 7 and
    /// older), under their `layer.counter` names.
    const LEGACY_LOSSES: [(&'static str, &'static str); 9] = [
        ("thread_map_overflows", "cpu.thread_map_overflows"),
        ("state_repairs", "cpu.state_repairs"),
        ("untraced_switches", "cpu.untraced_switches"),
        ("net_event_drops", "net.event_drops"),
        ("skb_marks_displaced", "net.skb_marks_displaced"),
        ("sample_drops", "sample.drops"),
        ("runq_drops", "runq.drops"),
        ("block_unpaired", "block.unpaired"),
        ("fs_dropped", "fs.dropped"),
    ];

    /// Deserializes an overhead, old recordings' named loss counters read
    /// into `losses`.
    pub fn read<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Overhead, D::Error> {
        let mut ov = Overhead::deserialize(d)?;
        for (old, key) in Self::LEGACY_LOSSES {
            if let Some(n) = ov.legacy.remove(old).and_then(|v| v.as_u64()) {
                ov.losses.entry(key.to_string()).or_insert(n);
            }
        }
        ov.legacy.clear();
        Ok(ov)
    }

    /// The count of loss counter `key` (`layer.counter`); 0 when absent.
    pub fn lost(&self, key: &str) -> u64 {
        self.losses.get(key).copied().unwrap_or(0)
    }

    /// vtrace's own process: user + system ns in the window.
    pub fn vtrace_cpu_ns(&self) -> u64 {
        self.vtrace_user_ns + self.vtrace_system_ns
    }

    /// Sets [`Overhead::self_cost_fraction`] and
    /// [`Overhead::expected_slowdown`] from the run's capacity and busy CPU ns.
    pub fn set_self_cost(&mut self, capacity_ns: u64, busy_ns: u64) {
        let cost = (self.bpf_run_time_ns + self.vtrace_cpu_ns()) as f64;
        self.self_cost_fraction = cost / capacity_ns.max(1) as f64;
        let work = busy_ns as f64 - cost;
        self.expected_slowdown = if work > 0.0 { cost / work } else { 0.0 };
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Metadata {
    /// Always [`super::FORMAT_NAME`].
    pub format: String,
    pub schema_version: u32,
    pub vtrace_version: String,
    pub host: Host,
    /// vtrace's own command line.
    pub command_line: Vec<String>,
    pub selectors: Selectors,
    pub workload: Option<Workload>,
    /// Why recording stopped: "workload exited", "duration elapsed", "SIGINT", "SIGTERM".
    pub stopped_by: String,
    pub start_unix_ns: u64,
    /// CLOCK_MONOTONIC at the start, which every table's "ns since the
    /// start" counts from (a guest's, mapped onto its host's clock, joins
    /// the host's timeline by it); 0 in recordings before it was kept.
    #[serde(default)]
    pub start_mono_ns: u64,
    pub end_unix_ns: u64,
    pub wall_ns: u64,
    /// How user and system time were told apart: "syscalls" (exact) or "ticks" (`record --cpu-split`).
    #[serde(default)]
    pub cpu_split: String,
    /// The cost mode (`RecordOptions::mode`): "default", or the options
    /// beyond it ("default + exact split + hops"); empty in older recordings.
    #[serde(default)]
    pub mode: String,
    /// Layers recorded (`record --layers`); empty in recordings before schema 6.
    #[serde(default)]
    pub layers: Vec<String>,
    /// Every table written and its version (schema 6 on; absent before,
    /// where every table is version 1).
    #[serde(default)]
    pub tables: std::collections::BTreeMap<String, u32>,
    /// FNV-1a 64 (hex) of every table file, by file name (schema 7 on): a
    /// damaged file is refused before its decoder sees it.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub checksums: std::collections::BTreeMap<String, String>,
    pub probes: Vec<ProbeStatus>,
    #[serde(deserialize_with = "Overhead::read")]
    pub overhead: Overhead,
    /// Caveats a reader of the numbers must know (e.g. tick-sampled guest time).
    pub notes: Vec<String>,
    /// Set on a recording recovered from its journal (vtrace ended before
    /// writing it): how much of the run survived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incomplete: Option<Incomplete>,
}

/// What survived of a recording whose vtrace ended before writing it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Incomplete {
    /// Whole intervals journaled.
    pub intervals: u64,
    /// ns from the start to the end of the last of them.
    pub covered_ns: u64,
    /// ns from the start to the last checkpoint, which every table other
    /// than the CPU layer's threads and intervals is as of; None when none
    /// survived (only the CPU layer's tables did).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_ns: Option<u64>,
}

/// Everything in one recording: its metadata and every table its layers
/// wrote, each table found by its row type ([`Recording::rows`]).
#[derive(Debug, Default)]
pub struct Recording {
    pub meta: Metadata,
    pub tables: super::TableSet,
    /// `net_events.parquet`, read in slices (it can hold tens of millions of rows).
    pub net_events: super::NetEvents,
    /// What reading found: tables missing (read as empty) or unknown to this vtrace.
    pub read_notes: Vec<String>,
    /// The guests' own recordings, kept in this one (`guests/<guest>/`,
    /// the guest layer's), each as read or why it could not be.
    pub guests: Vec<GuestPart>,
}

/// One guest's recording inside the host's.
#[derive(Debug)]
pub struct GuestPart {
    /// Its directory's name under `guests/`.
    pub name: String,
    pub recording: Result<Recording, String>,
}

impl Recording {
    /// What the recording is of, in a few words: its workload's command
    /// line, or vtrace's own.
    pub fn title(&self) -> String {
        match &self.meta.workload {
            Some(w) => w.command.join(" "),
            None => self.meta.command_line.join(" "),
        }
    }

    /// The rows of table `T`; empty when the recording has none.
    pub fn rows<T: super::Table>(&self) -> &[T] {
        self.tables.rows::<T>()
    }

    /// The work done, when known: what per-operation figures divide by.
    pub fn ops(&self) -> Option<&crate::workload::ops::Operations> {
        self.meta.workload.as_ref()?.ops.as_ref().filter(|o| o.count > 0.0)
    }

    /// Sets the work done (`--ops N`), also for a recording without a command.
    pub fn set_ops(&mut self, ops: crate::workload::ops::Operations) {
        self.meta.workload.get_or_insert_with(Default::default).ops = Some(ops);
    }
}

#[cfg(test)]
mod tests {
    use super::Overhead;

    /// Recordings before `losses` named each counter: they read into it.
    #[test]
    fn old_named_loss_counters_read_into_losses() {
        #[derive(serde::Deserialize)]
        struct Meta {
            #[serde(deserialize_with = "Overhead::read")]
            overhead: Overhead,
        }
        let old = r#"{"overhead": {"bpf_run_time_ns": 5, "bpf_run_count": 1, "bpf_cpu_fraction": 0.1,
            "vtrace_user_ns": 1, "vtrace_system_ns": 2, "vtrace_peak_rss_kib": 3,
            "thread_map_overflows": 4, "state_repairs": 0, "untraced_switches": 7,
            "net_event_drops": 9, "runq_drops": 2, "fs_dropped": 1}}"#;
        let ov = serde_json::from_str::<Meta>(old).unwrap().overhead;
        assert_eq!(ov.lost("cpu.thread_map_overflows"), 4);
        assert_eq!(ov.lost("cpu.untraced_switches"), 7);
        assert_eq!(ov.lost("net.event_drops"), 9);
        assert_eq!(ov.lost("runq.drops"), 2);
        assert_eq!(ov.lost("fs.dropped"), 1);
        assert_eq!(ov.bpf_run_time_ns, 5);
        assert!(ov.legacy.is_empty());
        // Written back, only the map carries them.
        let again = serde_json::to_value(&ov).unwrap();
        assert!(again.get("runq_drops").is_none() && again["losses"]["runq.drops"] == 2);
    }
}
