//! Every program in the embedded eBPF object passes the verifier of the
//! running kernel, and the probe catalog and the object agree.

use std::collections::BTreeSet;

use aya::programs::Program;
use vtrace::probes::{Capabilities, Strategy};

#[test]
fn every_program_passes_the_verifier() {
    assert!(vtrace_tests::is_root(), "the verifier test loads programs: run as root");
    let caps = Capabilities::detect();
    let mut ebpf = vtrace::ebpf::load(&vtrace::layers::kernel_config(&caps)).expect("object loads");
    let btf = aya::Btf::from_sys_fs().expect("kernel BTF");
    // Function or tracepoint each fentry or tp_btf program is meant for, from the catalog.
    let btf_target = |name: &str| {
        vtrace::layers::catalog()
            .iter()
            .flat_map(|p| p.strategies)
            .find_map(|s| match *s {
                Strategy::FEntry { program, function } if program == name => Some(function),
                Strategy::BtfTracepoint { program, tracepoint } if program == name => Some(tracepoint),
                _ => None,
            })
    };
    let mut failures = Vec::new();
    let mut skipped = Vec::new();
    let mut loaded = 0;
    for (name, program) in ebpf.programs_mut() {
        let is_fentry = matches!(program, Program::FEntry(_));
        let result = match program {
            Program::RawTracePoint(p) => p.load().map_err(|e| e.to_string()),
            Program::TracePoint(p) => p.load().map_err(|e| e.to_string()),
            Program::UProbe(p) => p.load().map_err(|e| e.to_string()),
            Program::PerfEvent(p) => p.load().map_err(|e| e.to_string()),
            // Loads (verifier) even where kprobes cannot attach.
            Program::KProbe(p) => p.load().map_err(|e| e.to_string()),
            Program::FEntry(p) => match btf_target(name) {
                Some(f) => p.load(f, &btf).map_err(|e| e.to_string()),
                None => Err("no catalog entry names its target function".into()),
            },
            // Typed loads through the tracepoint's BTF arguments: checked here against this kernel's types.
            Program::BtfTracePoint(p) => match btf_target(name) {
                Some(t) => p.load(t, &btf).map_err(|e| e.to_string()),
                None => Err("no catalog entry names its tracepoint".into()),
            },
            other => Err(format!("unexpected program type {:?}", other.prog_type())),
        };
        match result {
            Ok(()) => loaded += 1,
            // This kernel refuses every fentry program at load (EPERM, before
            // the verifier), and lacks vhost-net's functions: those cannot be
            // checked here, and `vtrace probes` says so. Anything else is a
            // real rejection.
            Err(e) if is_fentry && (e.contains("Operation not permitted") || e.contains("unknown BTF type")) => skipped
                .push(format!(
                    "{name} ({})",
                    if e.contains("unknown BTF") {
                        "function not in this kernel"
                    } else {
                        "EPERM"
                    }
                )),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    assert!(failures.is_empty(), "programs rejected:\n{}", failures.join("\n"));
    eprintln!("{loaded} programs verified; fentry programs this kernel cannot load: {skipped:?}");
    assert!(loaded >= 40, "only {loaded} programs in the object");
}

#[test]
fn catalog_and_object_agree() {
    let caps = Capabilities::detect();
    let ebpf = vtrace::ebpf::load(&vtrace::layers::kernel_config(&caps)).expect("object loads");
    let in_object: BTreeSet<&str> = ebpf.programs().map(|(n, _)| n).collect();
    // `--uprobe BINARY:SYMBOL:ret` uses programs no static entry names.
    let user = vtrace::probes::catalog::user_uprobe("/bin/true:main:ret").unwrap();
    let in_catalog: BTreeSet<&str> = vtrace::layers::catalog()
        .iter()
        .chain(user.iter())
        .flat_map(|p| p.strategies)
        .map(|s| s.program())
        .chain([
            vtrace::layers::sample::PROGRAM,
            vtrace::collectors::bpf_stats::CALIBRATION_PROGRAM,
        ])
        .collect();
    let missing: Vec<_> = in_catalog.difference(&in_object).collect();
    let unused: Vec<_> = in_object.difference(&in_catalog).collect();
    assert!(
        missing.is_empty(),
        "catalog names programs the object lacks: {missing:?}"
    );
    assert!(unused.is_empty(), "object has programs no probe uses: {unused:?}");
}

#[test]
fn offsets_come_from_this_kernel() {
    // Tracepoint records' offsets come from tracefs, which `record` mounts
    // when a fresh machine has not: so does this test, run first or alone.
    vtrace::probes::capabilities::ensure_tracefs().expect("tracefs (run as root)");
    let caps = Capabilities::detect();
    let o = vtrace::layers::kernel_config(&caps);
    assert!(
        o.cpu.task_pid > 0 && o.cpu.task_tgid > 0,
        "task_struct offsets from BTF: {o:?}"
    );
    assert_eq!(
        o.cpu.task_tgid,
        o.cpu.task_pid + 4,
        "pid and tgid are adjacent pid_t fields"
    );
    // sched_switch record: 8-byte common header, prev_comm[16] at 8.
    assert_eq!(o.cpu.tp_switch_next_pid, 56, "{o:?}");
    assert_eq!(o.cpu.tp_softirq_vec, 8, "{o:?}");
}
