//! Tries each probe's strategies in order and records what happened.

use aya::{
    Ebpf,
    programs::{FEntry, KProbe, RawTracePoint, TracePoint},
};
use serde::{Deserialize, Serialize};

use super::{Capabilities, ProbeSpec, Strategy};

/// Outcome for one probe: the method used, or why it is unavailable. `reason`
/// also lists why better strategies were skipped when a fallback was used.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProbeStatus {
    pub id: String,
    pub layer: String,
    pub method: Option<String>,
    pub program: Option<String>,
    pub available: bool,
    pub reason: Option<String>,
}

impl ProbeStatus {
    fn new(spec: &ProbeSpec, used: Option<&Strategy>, skipped: Vec<String>) -> Self {
        ProbeStatus {
            id: spec.id.to_string(),
            layer: spec.layer.name().to_string(),
            method: used.map(|s| s.method().to_string()),
            program: used.map(|s| s.program().to_string()),
            available: used.is_some(),
            reason: (!skipped.is_empty()).then(|| skipped.join("; ")),
        }
    }
}

/// What each probe would use on this kernel, judged from capabilities alone
/// (no program is loaded).
pub fn plan(caps: &Capabilities, specs: &[ProbeSpec]) -> Vec<ProbeStatus> {
    specs
        .iter()
        .map(|spec| {
            let mut skipped = Vec::new();
            for s in spec.strategies {
                match caps.check(s) {
                    Ok(()) => return ProbeStatus::new(spec, Some(s), skipped),
                    Err(why) => skipped.push(format!("{}: {why}", s.method())),
                }
            }
            ProbeStatus::new(spec, None, skipped)
        })
        .collect()
}

/// Loads and attaches every probe with its first strategy that works.
pub fn attach_all(ebpf: &mut Ebpf, caps: &Capabilities, specs: &[ProbeSpec]) -> Vec<ProbeStatus> {
    specs
        .iter()
        .map(|spec| {
            let mut skipped = Vec::new();
            for s in spec.strategies {
                let outcome = caps.check(s).and_then(|()| attach_one(ebpf, s));
                match outcome {
                    Ok(()) => return ProbeStatus::new(spec, Some(s), skipped),
                    Err(why) => skipped.push(format!("{}: {why}", s.method())),
                }
            }
            ProbeStatus::new(spec, None, skipped)
        })
        .collect()
}

fn attach_one(ebpf: &mut Ebpf, strategy: &Strategy) -> Result<(), String> {
    let name = strategy.program();
    let program = ebpf
        .program_mut(name)
        .ok_or_else(|| format!("program {name} missing from the eBPF object"))?;
    let err = |e: &dyn std::fmt::Display| format!("{e:#}").replace('\n', " ");
    match *strategy {
        Strategy::RawTracepoint { tracepoint, .. } => {
            let p: &mut RawTracePoint = program.try_into().map_err(|e| err(&e))?;
            p.load().map_err(|e| err(&e))?;
            p.attach(tracepoint).map_err(|e| err(&e))?;
        }
        Strategy::Tracepoint { category, name, .. } => {
            let p: &mut TracePoint = program.try_into().map_err(|e| err(&e))?;
            p.load().map_err(|e| err(&e))?;
            p.attach(category, name).map_err(|e| err(&e))?;
        }
        Strategy::KProbe { function, .. } => {
            let p: &mut KProbe = program.try_into().map_err(|e| err(&e))?;
            p.load().map_err(|e| err(&e))?;
            p.attach(function, 0).map_err(|e| err(&e))?;
        }
        Strategy::FEntry { function, .. }
        | Strategy::BtfTracepoint {
            tracepoint: function, ..
        } => {
            let btf = aya::Btf::from_sys_fs().map_err(|e| err(&e))?;
            if let Strategy::FEntry { .. } = strategy {
                let p: &mut FEntry = program.try_into().map_err(|e| err(&e))?;
                p.load(function, &btf).map_err(|e| err(&e))?;
                p.attach().map_err(|e| err(&e))?;
            } else {
                let p: &mut aya::programs::BtfTracePoint = program.try_into().map_err(|e| err(&e))?;
                p.load(function, &btf).map_err(|e| err(&e))?;
                p.attach().map_err(|e| err(&e))?;
            }
        }
    }
    Ok(())
}
