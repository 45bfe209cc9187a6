//! Tries each probe's strategies in order and records what happened.

use aya::{
    Ebpf,
    maps::Array,
    programs::{
        FEntry, KProbe, RawTracePoint, TracePoint, UProbe,
        uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeLink, UProbeScope},
    },
};
use serde::{Deserialize, Serialize};
use vtrace_common::{MAX_UPROBES, UprobeSpec, uprobe_size};

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
    /// Attached, but known not to deliver here (and why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caveat: Option<String>,
    /// Uprobes: the slot (BPF cookie) their statistics are kept under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<u32>,
}

impl ProbeStatus {
    /// Attached with `used`, or unavailable; `skipped`: why each strategy
    /// before it (or every one) was not used.
    pub(crate) fn new(spec: &ProbeSpec, used: Option<&Strategy>, skipped: Vec<String>) -> Self {
        ProbeStatus {
            id: spec.id.to_string(),
            layer: spec.layer.to_string(),
            method: used.map(|s| s.method().to_string()),
            program: used.map(|s| s.program().to_string()),
            available: used.is_some(),
            reason: (!skipped.is_empty()).then(|| skipped.join("; ")),
            caveat: None,
            slot: None,
        }
    }

    fn with_caveat(mut self, caps: &Capabilities) -> Self {
        if self.available && (self.id == "kvm_exit" || self.id == "kvm_entry") && caps.kvm_module == Some("kvm_pvm") {
            self.caveat = Some(
                "never fires under kvm_pvm: PVM runs guests without VMX/SVM entries and exits; guest time is \
                 tick-sampled and exit reasons are unavailable"
                    .into(),
            );
        }
        self
    }

    /// What `vtrace probes` and the report show beside the probe.
    pub fn note(&self) -> String {
        [self.caveat.as_deref(), self.reason.as_deref()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join("; ")
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
                    Ok(()) => return ProbeStatus::new(spec, Some(s), skipped).with_caveat(caps),
                    Err(why) => skipped.push(format!("{}: {why}", s.method())),
                }
            }
            ProbeStatus::new(spec, None, skipped)
        })
        .collect()
}

/// Loads and attaches every probe with its first strategy that works. The
/// uprobes' links are taken from their shared program into `uprobe_links`
/// (its owner detaches them, [`crate::ebpf::unload`]).
pub fn attach_all(
    ebpf: &mut Ebpf,
    caps: &Capabilities,
    specs: &[ProbeSpec],
    uprobe_links: &mut Vec<UProbeLink>,
) -> Vec<ProbeStatus> {
    let mut next_slot = 0u32;
    specs
        .iter()
        .map(|spec| {
            let mut skipped = Vec::new();
            for s in spec.strategies {
                let slot = next_slot;
                let outcome = caps.check(s).and_then(|()| attach_one(ebpf, s, slot, uprobe_links));
                match outcome {
                    Ok(()) => {
                        let mut status = ProbeStatus::new(spec, Some(s), skipped).with_caveat(caps);
                        if let Strategy::UProbe { .. } = s {
                            status.slot = Some(slot);
                            next_slot += 1;
                        }
                        return status;
                    }
                    Err(why) => skipped.push(format!("{}: {why}", s.method())),
                }
            }
            ProbeStatus::new(spec, None, skipped)
        })
        .collect()
}

fn attach_one(
    ebpf: &mut Ebpf,
    strategy: &Strategy,
    slot: u32,
    uprobe_links: &mut Vec<UProbeLink>,
) -> Result<(), String> {
    if let Strategy::UProbe {
        program,
        binary,
        symbol,
        size,
    } = *strategy
    {
        let link = attach_uprobe(ebpf, program, binary, symbol, size, slot)?;
        uprobe_links.push(link);
        return Ok(());
    }
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
        Strategy::UProbe { .. } => unreachable!("handled above"),
        Strategy::FEntry { function, .. }
        | Strategy::BtfTracepoint {
            tracepoint: function, ..
        } => {
            let btf = crate::ebpf::kernel_btf().map_err(|e| err(&e))?;
            if let Strategy::FEntry { .. } = strategy {
                let p: &mut FEntry = program.try_into().map_err(|e| err(&e))?;
                p.load(function, btf).map_err(|e| err(&e))?;
                p.attach().map_err(|e| err(&e))?;
            } else {
                let p: &mut aya::programs::BtfTracePoint = program.try_into().map_err(|e| err(&e))?;
                p.load(function, btf).map_err(|e| err(&e))?;
                p.attach().map_err(|e| err(&e))?;
            }
        }
    }
    Ok(())
}

/// Attaches the shared uprobe program at `symbol` of `binary` with cookie
/// `slot`, after writing the slot's size rule; its link, taken from the
/// program: a program detaches its own links one after the other, and each
/// uprobe's detach waits for grace periods (0.1 s each here, ten uprobes a
/// second at every recording's end), where links of their own can be
/// dropped at once.
fn attach_uprobe(
    ebpf: &mut Ebpf,
    program: &str,
    binary: &str,
    symbol: &str,
    size: super::catalog::UprobeSize,
    slot: u32,
) -> Result<UProbeLink, String> {
    if slot >= MAX_UPROBES {
        return Err(format!("more than {MAX_UPROBES} uprobes"));
    }
    let path = super::catalog::resolve_binary(binary).ok_or_else(|| format!("{binary} not found"))?;
    let spec = match size {
        super::catalog::UprobeSize::None => UprobeSpec {
            size_kind: uprobe_size::NONE,
            arg: 0,
        },
        super::catalog::UprobeSize::Arg(a) => UprobeSpec {
            size_kind: uprobe_size::ARG,
            arg: a,
        },
        super::catalog::UprobeSize::PbufArg(a) => UprobeSpec {
            size_kind: uprobe_size::PBUF_ARG,
            arg: a,
        },
    };
    let err = |e: &dyn std::fmt::Display| format!("{e:#}").replace('\n', " ");
    let map = ebpf.map_mut("UPROBE_SPECS").ok_or("map UPROBE_SPECS missing")?;
    let mut specs: Array<_, UprobeSpec> = Array::try_from(map).map_err(|e| err(&e))?;
    specs.set(slot, spec, 0).map_err(|e| err(&e))?;
    let p: &mut UProbe = ebpf
        .program_mut(program)
        .ok_or_else(|| format!("program {program} missing from the eBPF object"))?
        .try_into()
        .map_err(|e| err(&e))?;
    if p.fd().is_err() {
        p.load().map_err(|e| err(&e))?;
    }
    let point = UProbeAttachPoint {
        location: UProbeAttachLocation::Symbol(symbol),
        cookie: Some(slot as u64),
    };
    let id = p.attach(point, &path, UProbeScope::AllProcesses).map_err(|e| err(&e))?;
    p.take_link(id).map_err(|e| err(&e))
}
