//! `vtrace agent`: runs inside a Linux guest, and records it for the host's
//! `vtrace record --guest` (layers/guest/agent.rs speaks to the host; this
//! file starts its recordings).

use std::path::PathBuf;

use anyhow::Context;
use vtrace::{
    layers::guest::{
        agent::{self, Asked, GuestRecording},
        transport::Listen,
    },
    layers::{CommonSwitches, cpu::CpuOptions},
    record::{RecordOptions, Recorder},
};

#[derive(clap::Args)]
pub struct Args {
    /// Where to wait for the host: `vsock[:PORT]` (the default; port 1025) or `tcp:ADDR:PORT`.
    #[arg(long, default_value = "vsock")]
    listen: String,
    /// Allow `--listen tcp:` on every interface (0.0.0.0 or ::): whoever reaches it can record this guest.
    #[arg(long)]
    listen_any: bool,
    /// Where recordings are kept until sent (each is removed once sent).
    #[arg(long, default_value = "/tmp/vtrace-agent")]
    dir: PathBuf,
    /// Serve one host's recording, then exit.
    #[arg(long)]
    once: bool,
}

struct Running {
    recorder: Recorder,
    staging: PathBuf,
}

impl GuestRecording for Running {
    fn staging(&self) -> PathBuf {
        self.staging.clone()
    }
    fn stop(self: Box<Self>) -> Result<PathBuf, String> {
        self.recorder.stop().map(|o| o.path).map_err(|e| e.to_string())
    }
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let listen = Listen::parse(&args.listen, args.listen_any).map_err(anyhow::Error::msg)?;
    std::fs::create_dir_all(&args.dir).with_context(|| format!("create {}", args.dir.display()))?;
    let listener = listen.bind().with_context(|| format!("listen on {}", args.listen))?;
    eprintln!("vtrace agent: waiting for the host on {}", listener.local());
    // The kernel's BTF parsed while the host has not asked yet.
    std::thread::spawn(vtrace::probes::capabilities::warm);
    let output = args.dir.join("guest.vtrace");
    let start = |asked: &Asked| -> Result<Box<dyn GuestRecording>, String> {
        let mut opts = RecordOptions {
            // An agent records its own guest, never a guest of its own.
            layers: asked.layers.iter().filter(|l| *l != "guest").cloned().collect(),
            duration: None,
            interval: asked.interval,
            checkpoint: asked.checkpoint,
            output: output.clone(),
            force: true,
            pass_output: false,
            ..RecordOptions::default()
        };
        opts.switches.edit::<CommonSwitches>(|s| s.events = asked.events);
        // Each guest thread's time per CPU: the host splits each vCPU's guest time by them.
        opts.switches.edit::<CpuOptions>(|c| c.thread_cpus = true);
        let recorder = Recorder::start(opts).map_err(|e| e.to_string())?;
        let staging = args.dir.join(format!(".guest.vtrace.tmp.{}", std::process::id()));
        Ok(Box::new(Running { recorder, staging }))
    };
    agent::serve(&listener, &start, args.once).context("waiting for the host")?;
    Ok(0)
}
