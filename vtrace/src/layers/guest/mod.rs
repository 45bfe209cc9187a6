//! The guest layer (`--guest auto|cid:N|uds:PATH|tcp:ADDR`): the far side
//! of the virtualization boundary. Inside each Linux guest `vtrace agent`
//! (agent.rs) records the guest's own layers; this layer's collector
//! reaches it (transport.rs), exchanges clock readings with it all along
//! (clock.rs maps the guest's clock onto the host's from them, with an
//! error bound), mirrors its journal as it grows and takes its finished
//! recording at the stop (link.rs, mirror.rs, over wire.rs's frames). The
//! guest's recording is a recording of its own, kept in the host's as
//! `guests/<guest>/` and read with it (`Recording::guests`); this layer's
//! tables say how each link went and hold the exchanges. It has no probes
//! on the host: its probes run in the guest.

pub mod agent;
pub mod clock;
pub mod discover;
pub mod link;
pub mod mirror;
pub mod summary;
pub mod tables;
pub mod transport;
pub mod wire;

use std::time::Duration;

use aya::Ebpf;
use vtrace_common::Config;

pub use tables::{GuestClockRow, GuestLinkRow};

use super::{Collector, Emit, End, Layer, LayerOutput, Request, Setup, switches::SwitchGroup};
use crate::{
    Result,
    probes::{ProbeSpec, ProbeStatus},
    recording::{Overhead, Recording, TableKind},
    report_model::Section,
};

/// The directory of a recording that holds its guests' recordings.
pub const GUESTS_DIR: &str = "guests";
/// The layers an agent records unless `--guest-layers` says otherwise.
pub const DEFAULT_GUEST_LAYERS: &str = "cpu,net,runq,path";

/// The guest layer's switches (`record`).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct GuestOptions {
    /// Record inside each guest too, through the `vtrace agent` running there (repeatable): `auto`
    /// (every VM's vsock found from its VMM: QEMU's guest-cid=, Firecracker's vsock uds_path),
    /// `cid:N[:PORT]`, `uds:PATH[:PORT]` (a hybrid vsock's host end), or `tcp:HOST[:PORT]`; the
    /// port defaults to 1025. A guest without an agent costs the host recording nothing; the report says so.
    #[arg(long = "guest")]
    pub guests: Vec<String>,
    /// The layers each agent records inside its guest.
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_GUEST_LAYERS)]
    pub guest_layers: Vec<String>,
    /// How long an agent may take to attach its probes (before the workload starts), and to send its
    /// recording after the stop.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "120s")]
    pub guest_wait: Duration,
}

pub struct GuestLayer;

impl Layer for GuestLayer {
    fn name(&self) -> &'static str {
        "guest"
    }
    fn on_by_default(&self) -> bool {
        false
    }
    /// Asked for by `--guest` (or by name).
    fn wanted(&self, asked: &Request) -> bool {
        asked.names("guest") || !asked.switches.get::<GuestOptions>().guests.is_empty()
    }
    fn switches(&self) -> Option<SwitchGroup> {
        Some(SwitchGroup::of::<GuestOptions>())
    }
    fn can_run(&self, setup: &Setup) -> Result<(), String> {
        if setup.asked.live {
            return Err("vtrace serve does not reach guests yet: record them with `vtrace record --guest`".into());
        }
        if setup.asked.switches.get::<GuestOptions>().guests.is_empty() {
            return Err("no --guest given: name each guest's agent (auto, cid:N, uds:PATH or tcp:ADDR)".into());
        }
        Ok(())
    }
    fn catalog(&self) -> &'static [ProbeSpec] {
        &[]
    }
    fn tables(&self) -> Vec<TableKind> {
        vec![TableKind::of::<GuestLinkRow>(), TableKind::of::<GuestClockRow>()]
    }
    fn summarize(&self, rec: &Recording, top: usize) -> Section {
        summary::section(rec, top)
    }
    fn start(&self, _ebpf: &mut Ebpf, setup: &Setup, _config: &Config) -> Result<Box<dyn Collector>> {
        let opts = setup.asked.switches.get::<GuestOptions>();
        let (targets, mut notes) = discover::targets(&opts.guests, setup.system)?;
        let layers = if opts.guest_layers.is_empty() {
            DEFAULT_GUEST_LAYERS.split(',').map(str::to_string).collect()
        } else {
            opts.guest_layers.clone()
        };
        let ask = link::Ask {
            layers,
            interval_ms: 1000,
            checkpoint_ms: 5000,
            events: setup.asked.switches.get::<super::CommonSwitches>().events,
            connect: Duration::from_secs(5),
            attach: opts.guest_wait,
        };
        let guests = setup.staging.join(GUESTS_DIR);
        let links = targets
            .into_iter()
            .map(|t| {
                link::Link::start(
                    &t.name,
                    t.vmm_pid,
                    t.address,
                    guests.clone(),
                    ask.clone(),
                    setup.start_mono,
                )
            })
            .collect::<Vec<_>>();
        if links.is_empty() {
            notes.push("--guest: no guest to reach".into());
        }
        Ok(Box::new(GuestCollector {
            links,
            wait: opts.guest_wait,
            notes,
        }))
    }
}

struct GuestCollector {
    links: Vec<link::Link>,
    wait: Duration,
    notes: Vec<String>,
}

impl Collector for GuestCollector {
    /// The agents attach their probes before the workload starts (each link
    /// connects on its own thread: the waits overlap).
    fn attach(&mut self, _ebpf: &mut Ebpf) -> Result<Vec<ProbeStatus>> {
        let deadline = std::time::Instant::now() + self.wait;
        for l in &self.links {
            l.wait_attached(deadline.saturating_duration_since(std::time::Instant::now()));
        }
        Ok(self
            .links
            .iter()
            .map(|l| {
                let (row, _) = l.rows();
                let ok = row.state == "recording";
                ProbeStatus {
                    id: format!("guest:{}", row.guest),
                    layer: "guest".into(),
                    method: Some(format!("agent at {}", row.address)),
                    program: None,
                    available: ok,
                    reason: (!ok).then(|| row.error.clone()),
                    caveat: None,
                    slot: None,
                }
            })
            .collect())
    }
    fn end(&mut self, _ebpf: &Ebpf, _end: &End) -> Result<()> {
        for l in &mut self.links {
            l.stop();
        }
        Ok(())
    }
    /// After the window closed: the agents' recordings come (their waits overlap).
    fn close(&mut self, _end_mono: u64) -> Result<()> {
        let deadline = std::time::Instant::now() + self.wait;
        for l in &mut self.links {
            l.finish(deadline.saturating_duration_since(std::time::Instant::now()));
        }
        Ok(())
    }
    fn checkpoint(&mut self, _now: &End) -> Result<bool> {
        Ok(true)
    }
    fn emit(&self, _ctx: &Emit, out: &mut LayerOutput, _overhead: &mut Overhead) -> Result<()> {
        let mut links = Vec::new();
        let mut exchanges = Vec::new();
        for l in &self.links {
            let (row, ex) = l.rows();
            if row.state != "complete" && row.state != "recording" {
                out.notes.push(format!(
                    "guest {} ({}): {}: {}",
                    row.guest, row.address, row.state, row.error
                ));
            }
            links.push(row);
            exchanges.extend(ex);
        }
        out.notes.extend(self.notes.iter().cloned());
        out.tables.put(links);
        out.tables.put(exchanges);
        Ok(())
    }
}
