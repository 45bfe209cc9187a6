//! `vtrace lab`: real platform instances, started, stopped and listed.

use anyhow::Context as _;

#[derive(clap::Subcommand)]
pub enum Action {
    /// Start an instance of PLATFORM (host, runc, crun, docker, gvisor, lxc, linuxvm, lwip,
    /// qemu-kvm, qemu-kvm-novhost, firecracker, unikraft-vhost, unikraft-virtio).
    Up { platform: String },
    /// Stop it and remove everything `up` made.
    Down { platform: String },
    /// Run a command inside the running instance of PLATFORM (its runtime's
    /// exec; the host platform's network namespace), e.g.
    /// `vtrace record --platform runc -- vtrace lab exec runc -- fio ...`.
    Exec {
        platform: String,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// What runs, what can start here, and what cannot (and why).
    Status,
    /// Inside a lab Linux VM (its /init runs it): serve `vtrace lab exec`'s
    /// commands on vsock.
    #[command(hide = true)]
    GuestShell {
        #[arg(long, default_value = "vsock:1026")]
        listen: String,
    },
}

pub fn run(action: Action) -> anyhow::Result<i32> {
    match action {
        Action::Up { platform } => up(&platform)?,
        Action::Down { platform } => {
            if vtrace::lab::down(&platform)? {
                println!("{platform} down: nothing left behind");
            } else {
                println!("{platform} is not up: nothing to remove");
            }
        }
        Action::Exec { platform, command } => return exec(&platform, &command),
        Action::GuestShell { listen } => {
            let listen = vtrace::layers::guest::transport::Listen::parse(&listen, false).map_err(anyhow::Error::msg)?;
            vtrace::lab::shell::serve(&listen)?;
        }
        Action::Status => {
            for (name, state) in vtrace::lab::status() {
                println!("{name:<12} {state}");
            }
        }
    }
    Ok(0)
}

/// Brings PLATFORM up and says how to use it.
fn up(platform: &str) -> anyhow::Result<()> {
    if vtrace::lab::is_up(platform) {
        println!("{platform} is already up (`vtrace lab down {platform}` removes it)");
    }
    let l = vtrace::lab::up(platform)?;
    println!("{platform} up: {}", vtrace::lab::serves(platform, &l.address));
    if !l.note.is_empty() {
        println!("  {}", l.note);
    }
    let workload = vtrace::lab::example_workload(platform, &l.address);
    println!("  e.g. {workload}");
    println!(
        "  record: vtrace record --platform {} -- {workload}",
        vtrace::lab::recorded_as(platform)
    );
    Ok(())
}

/// The command inside PLATFORM's instance; its exit status is vtrace's.
fn exec(platform: &str, command: &[String]) -> anyhow::Result<i32> {
    let argv = match vtrace::lab::exec_command(platform, command)? {
        vtrace::lab::Exec::Here(argv) => argv,
        vtrace::lab::Exec::InVm(shell, argv) => return Ok(vtrace::lab::shell::run(platform, &shell, &argv)?),
    };
    let status = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .status()
        .with_context(|| format!("run {}", argv[0]))?;
    Ok(status
        .code()
        .unwrap_or(128 + std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0)))
}
