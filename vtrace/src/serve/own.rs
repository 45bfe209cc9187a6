//! vtrace serve's own series: what vtrace is, what each instance is, and
//! what vtrace costs (its eBPF programs' run time, its own CPU, each read).

use crate::{
    exposition::{Family, INSTANCE, Kind, Samples, Unit},
    record::Scraped,
    recording::ProgramRow,
};

pub static BUILD_INFO: Family = Family {
    name: "build_info",
    unit: None,
    kind: Kind::Gauge,
    per_unit: 1.0,
    help: "Always 1: the vtrace version serving these series.",
};

pub static INSTANCE_INFO: Family = Family {
    name: "instance_info",
    unit: None,
    kind: Kind::Gauge,
    per_unit: 1.0,
    help: "Always 1 while a platform instance runs: what it is (variant, root pid, devices), joined to \
           other series on instance rather than repeated on each.",
};

pub static BPF_RUN_SECONDS: Family = Family {
    name: "bpf_run",
    unit: Some(Unit::Seconds),
    kind: Kind::Counter,
    per_unit: 1e9,
    help: "Run time of one of vtrace's eBPF programs as the kernel's BPF statistics measured it (only while \
           they are on: sampled windows by default, every run with --self-stats always).",
};

pub static BPF_RUNS: Family = Family {
    name: "bpf_runs",
    unit: None,
    kind: Kind::Counter,
    per_unit: 1.0,
    help: "Runs of one of vtrace's eBPF programs counted by the kernel's BPF statistics (while they are on).",
};

pub static BPF_EVENTS: Family = Family {
    name: "bpf_events",
    unit: None,
    kind: Kind::Counter,
    per_unit: 1.0,
    help: "Events one of vtrace's eBPF programs handled, counted by the program itself (always).",
};

pub static SELF_CPU_SECONDS: Family = Family {
    name: "self_cpu",
    unit: Some(Unit::Seconds),
    kind: Kind::Counter,
    per_unit: 1e9,
    help: "vtrace's own CPU time (user or system) since its probes attached.",
};

pub static LOST: Family = Family {
    name: "lost",
    unit: None,
    kind: Kind::Counter,
    per_unit: 1.0,
    help: "What vtrace could not count, per loss counter (`layer.counter`; docs/recording-schema.md and \
           `vtrace report` say what each means): a rate above 0 means a layer's series miss it, or (say \
           block.unseen_completions) some of its detail.",
};

pub static READ_SECONDS: Family = Family {
    name: "scrape_duration",
    unit: Some(Unit::Seconds),
    kind: Kind::Gauge,
    per_unit: 1.0,
    help: "How long the last scrape took to read every map and emit these series.",
};

pub static SERIES: Family = Family {
    name: "series",
    unit: None,
    kind: Kind::Gauge,
    per_unit: 1.0,
    help: "Series this exporter holds after the last scrape (bounded: an instance's go once it ends).",
};

pub static TABLE_ROWS: Family = Family {
    name: "table_rows",
    unit: None,
    kind: Kind::Gauge,
    per_unit: 1.0,
    help: "Rows of one of vtrace's tables at the last scrape (threads: those that ran, and those that ended \
           since the scrape before; runq: threads that waited, ended ones forgotten once read). Bounded: an \
           ended thread's counts stay in its role's series, its rows go.",
};

pub fn metrics(read: &Scraped, took_s: f64, out: &mut Samples) {
    out.push(
        &BUILD_INFO,
        "build",
        vec![("version", env!("CARGO_PKG_VERSION").to_string())],
        1.0,
    );
    for i in &read.instances {
        let devices: Vec<&str> = i.devices.iter().map(|d| d.name.as_str()).collect();
        out.push(
            &INSTANCE_INFO,
            i.id.clone(),
            vec![
                ("platform", i.platform.clone()),
                (INSTANCE, i.id.clone()),
                ("variant", i.variant.clone()),
                ("root_pid", i.root_pid.to_string()),
                ("devices", devices.join(",")),
            ],
            1.0,
        );
    }
    for p in read.tables.rows::<ProgramRow>() {
        let labels = vec![("program", p.program.clone()), ("probe", p.probe.clone())];
        let source = format!("{}/{}", p.program, p.probe);
        out.push(&BPF_RUN_SECONDS, source.clone(), labels.clone(), p.run_time_ns as f64);
        out.push(&BPF_RUNS, source.clone(), labels.clone(), p.run_count as f64);
        out.push(&BPF_EVENTS, source, labels, p.events as f64);
    }
    let o = &read.overhead;
    for (mode, ns) in [("user", o.vtrace_user_ns), ("system", o.vtrace_system_ns)] {
        out.push(&SELF_CPU_SECONDS, mode, vec![("mode", mode.to_string())], ns as f64);
    }
    for (counter, &n) in &o.losses {
        out.push(&LOST, counter.clone(), vec![("counter", counter.clone())], n as f64);
    }
    out.push(&READ_SECONDS, "read", Vec::new(), took_s);
    for table in read.tables.iter() {
        out.push(
            &TABLE_ROWS,
            table.name(),
            vec![("table", table.name().to_string())],
            table.len() as f64,
        );
    }
}
