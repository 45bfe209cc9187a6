//! `vtrace report --format json`. Field names are part of the documented
//! schema (docs/recording-schema.md, "Report JSON").

use serde_json::{Value, json};

use super::{ns_per_event, whole_run_time_ns};
use crate::{layers::cpu::analysis::CpuBreakdown, recording::Recording};

pub fn document(rec: &Recording, cpu: &CpuBreakdown) -> Value {
    let threads: Vec<Value> = cpu
        .threads
        .iter()
        .map(|t| {
            json!({
                "pid": t.pid, "tid": t.tid, "comm": t.comm, "role": t.role, "platform": t.platform, "instance": t.instance,
                "selected": t.selected, "kthread": t.kthread, "exited": t.exited,
                "user_ns": t.user_ns, "system_ns": t.system_ns, "softirq_ns": t.softirq_ns,
                "hardirq_ns": t.hardirq_ns, "guest_ns": t.guest_ns, "idle_ns": t.idle_ns,
                "total_ns": t.user_ns + t.system_ns + t.softirq_ns + t.hardirq_ns + t.guest_ns,
                "guest_source": t.guest_source, "switches": t.switches,
            })
        })
        .collect();
    let runs: std::collections::HashMap<&str, u64> = rec
        .rows::<crate::recording::ProgramRow>()
        .iter()
        .map(|p| (p.probe.as_str(), p.events))
        .collect();
    let probes: Vec<Value> = rec
        .meta
        .probes
        .iter()
        .map(|p| {
            let events = runs.get(p.id.as_str()).copied().unwrap_or_default();
            json!({"id": p.id, "layer": p.layer, "method": p.method, "available": p.available,
                   "reason": p.reason, "caveat": p.caveat, "events": events})
        })
        .collect();
    let programs: Vec<Value> = rec
        .rows::<crate::recording::ProgramRow>()
        .iter()
        .map(|p| {
            json!({"probe": p.probe, "program": p.program, "method": p.method, "events": p.events,
                   "run_count": p.run_count, "run_time_ns": p.run_time_ns, "recursion_misses": p.recursion_misses,
                   "whole_run_time_ns": whole_run_time_ns(p),
                   "ns_per_event": ns_per_event(p.run_time_ns, p.run_count)})
        })
        .collect();
    let devices: Vec<Value> = rec
        .rows::<crate::layers::net::NetHopRow>()
        .iter()
        .map(|h| {
            let d = rec
                .rows::<crate::layers::net::NetDeviceRow>()
                .iter()
                .find(|d| d.netns == h.netns && d.ifindex == h.ifindex);
            let hist: Vec<Value> = rec
                .rows::<crate::layers::net::NetSizeRow>()
                .iter()
                .filter(|s| s.netns == h.netns && s.ifindex == h.ifindex && s.hop == h.hop && s.kind == "mtu")
                .map(|s| json!({"le": s.le, "count": s.count}))
                .collect();
            json!({
                "name": d.map(|d| d.name.as_str()).unwrap_or(""), "ifindex": h.ifindex, "netns": h.netns,
                "kind": d.map(|d| d.kind.as_str()).unwrap_or(""),
                "direction": h.direction, "hop": h.hop,
                "platform": d.map(|d| d.platform.as_str()).unwrap_or("host"),
                "instance": d.map(|d| d.instance.as_str()).unwrap_or(""),
                "role": d.map(|d| d.role.as_str()).unwrap_or(""),
                "packets": h.packets, "bytes": h.bytes, "gso_packets": h.gso_packets, "gso_segs": h.gso_segs,
                "errors": h.errors, "size_hist": hist, "max_bytes": h.max_bytes, "mtu_edge": h.mtu_edge,
            })
        })
        .collect();
    let counters: Vec<Value> = rec
        .rows::<crate::layers::net::NetDeviceRow>()
        .iter()
        .map(|d| {
            json!({"name": d.name, "ifindex": d.ifindex, "netns": d.netns, "kind": d.kind, "platform": d.platform,
                   "instance": d.instance, "role": d.role, "softirq_ns": d.softirq_ns,
                   "napi_polls": d.napi_polls, "napi_packets": d.napi_packets, "napi_budget_exhausted": d.napi_budget_exhausted,
                   "rx_packets": d.counter_rx_packets, "rx_bytes": d.counter_rx_bytes,
                   "tx_packets": d.counter_tx_packets, "tx_bytes": d.counter_tx_bytes})
        })
        .collect();
    let drops: Vec<Value> = rec
        .rows::<crate::layers::net::NetDropRow>()
        .iter()
        .map(|d| json!({"reason": d.reason, "count": d.count}))
        .collect();
    let uprobes: Vec<Value> = rec
        .rows::<crate::layers::uprobe::UprobeRow>()
        .iter()
        .map(|u| {
            let hist = |kind: &str| -> Vec<Value> {
                rec.rows::<crate::layers::uprobe::UprobeHistRow>()
                    .iter()
                    .filter(|h| h.probe == u.probe && h.pid == u.pid && h.kind == kind)
                    .map(|h| json!({"le": h.le, "count": h.count}))
                    .collect()
            };
            json!({"probe": u.probe, "pid": u.pid, "comm": u.comm, "platform": u.platform, "instance": u.instance,
                   "calls": u.calls, "bytes": u.bytes, "size_hist": hist("size"), "returns": u.returns,
                   "latency_sum_ns": u.latency_sum_ns, "latency_hist": hist("latency")})
        })
        .collect();
    let dev_name = |netns: u32, ifindex: u32| {
        rec.rows::<crate::layers::net::NetDeviceRow>()
            .iter()
            .find(|d| d.netns == netns && d.ifindex == ifindex)
            .map(|d| d.name.clone())
            .unwrap_or_else(|| format!("if{ifindex}"))
    };
    let hops: Vec<Value> = rec
        .rows::<crate::layers::net::NetLatencyRow>()
        .iter()
        .map(|l| {
            json!({
                "from": format!("{}:{}", dev_name(l.from_netns, l.from_ifindex), l.from_hop),
                "to": format!("{}:{}", dev_name(l.to_netns, l.to_ifindex), l.to_hop),
                "count": l.count, "mean_ns": l.sum_ns / l.count.max(1), "p50_ns": l.p50_ns, "p99_ns": l.p99_ns,
            })
        })
        .collect();
    let o = &rec.meta.overhead;
    let kvm = crate::layers::kvm::analysis::KvmSummary::of(rec);
    let exits: Vec<Value> = kvm
        .by_thread
        .iter()
        .filter(|s| s.kind == "exit")
        .map(|s| json!(s))
        .collect();
    let userspace_exits: Vec<Value> = rec
        .rows::<crate::layers::kvm::KvmEventRow>()
        .iter()
        .filter(|e| e.kind == "userspace_exit")
        .map(|e| {
            let timed = kvm
                .by_thread
                .iter()
                .find(|s| s.kind == "userspace_exit" && s.tid == e.tid && s.reason == e.op);
            json!({"tid": e.tid, "pid": e.pid, "comm": e.comm, "platform": e.platform, "instance": e.instance,
                   "role": e.role, "reason": e.op, "count": e.count,
                   "timed": timed.map_or(0, |t| t.count),
                   "mean_vmm_ns": timed.map(|t| t.mean_ns), "min_vmm_ns": timed.map(|t| t.min_ns),
                   "max_vmm_ns": timed.map(|t| t.max_ns), "stddev_vmm_ns": timed.map(|t| t.stddev_ns),
                   "p50_vmm_ns": timed.map(|t| t.p50_ns), "p95_vmm_ns": timed.map(|t| t.p95_ns),
                   "p99_vmm_ns": timed.map(|t| t.p99_ns), "pct_time": timed.map(|t| t.pct_time)})
        })
        .collect();
    let kvm_events = |kind: &str, addr: &str, op: &str| -> Vec<Value> {
        rec.rows::<crate::layers::kvm::KvmEventRow>()
            .iter()
            .filter(|e| e.kind == kind)
            .map(|e| {
                let mut v = json!({"tid": e.tid, "pid": e.pid, "comm": e.comm, "role": e.role, "instance": e.instance,
                                   "count": e.count, "bytes": e.bytes, "size": e.size, "device": e.device});
                v[addr] = json!(e.addr);
                v[op] = json!(e.op);
                v
            })
            .collect()
    };
    let interrupts: Vec<Value> = ["set_irq", "msi", "inj_virq"]
        .iter()
        .flat_map(|k| kvm_events(k, "addr", "op"))
        .collect();
    let kvm = json!({
        "exits": exits,
        "userspace_exits": userspace_exits,
        "halts": kvm.by_thread.iter().filter(|s| s.kind == "halt").collect::<Vec<_>>(),
        "by_instance": kvm.by_instance,
        "pio": kvm_events("pio", "port", "direction"),
        "mmio": kvm_events("mmio", "gpa", "type"),
        "fast_mmio": kvm_events("fast_mmio", "gpa", "type"),
        "interrupts": interrupts,
        "kvm_stats": kvm.stats_check,
    });
    json!({
        "schema_version": rec.meta.schema_version,
        "wall_ns": cpu.wall_ns,
        "cpus": cpu.cpus,
        "platform": rec.meta.selectors.platform,
        "workload": rec.meta.workload,
        "stopped_by": rec.meta.stopped_by,
        "states": cpu.total,
        "roles": cpu.by_role,
        "processes": cpu.by_process,
        "threads": threads,
        "per_cpu": rec.rows::<crate::layers::cpu::CpuRow>(),
        "softirq_vectors": cpu.softirq_vectors,
        "hardirqs": cpu.hardirqs,
        "devices": devices,
        "device_counters": counters,
        "drops": drops,
        "uprobes": uprobes,
        "tun_io": rec.rows::<crate::layers::net::TunIoRow>(),
        "hops": hops,
        "kvm": kvm,
        "samples": rec.rows::<crate::layers::sample::SampleRow>(),
        "journeys": crate::layers::net::analysis::journeys(rec)
            .unwrap_or_else(|e| json!({"error": format!("per-packet events unreadable: {e}")})),
        "probes": probes,
        "overhead": {
            "bpf_run_time_ns": o.bpf_run_time_ns,
            "bpf_run_count": o.bpf_run_count,
            "bpf_stats_coverage": o.bpf_stats_coverage,
            "bpf_cpu_fraction": o.bpf_cpu_fraction,
            "vtrace_user_ns": o.vtrace_user_ns,
            "vtrace_system_ns": o.vtrace_system_ns,
            "vtrace_peak_rss_kib": o.vtrace_peak_rss_kib,
            "thread_map_overflows": o.thread_map_overflows,
            "state_repairs": o.state_repairs,
            "untraced_switches": o.untraced_switches,
            "net_event_drops": o.net_event_drops,
            "skb_marks_displaced": o.skb_marks_displaced,
            "programs": programs,
        },
        "cpu_split": rec.meta.cpu_split,
        "notes": rec.meta.notes.iter().chain(&rec.read_notes).collect::<Vec<_>>(),
    })
}
