//! `kata`: a Kata Containers sandbox started the way users start one, by a
//! containerd (the lab's own: its root, state and socket, CRI off) running
//! the lab rootfs with `ctr run --runtime io.containerd.kata.v2` in a netns
//! with a veth as a CNI plugin leaves it. Kata mirrors the netns's eth0 and
//! its tap (`tap0_kata`) into each other with tc, vhost-net serves the tap,
//! virtiofsd shares the rootfs and the lab volume into the VM. redis and
//! iperf3 answer at the lab address inside the VM.
//!
//! Kata comes from `$VTRACE_KATA_DIR`, else the directory of
//! `containerd-shim-kata-v2` on PATH, else /opt/kata/bin. A directory laid
//! out like ../shared/vmm/kata (the shim beside `kata-agent`, `virtiofsd`
//! and `configuration-qemu.toml`) gets its guest made here: the lab's
//! stock kernel and an initrd of kata-agent and the modules it needs
//! ([`guest_initrd`]). Any other install runs with its own configuration,
//! or the one `$VTRACE_KATA_CONFIG` names (given to the shim as the task's
//! ConfigPath option, as Kubernetes' RuntimeClass options do).
//!
//! Like the other VM platforms it needs a KVM that boots guests; on a PVM
//! host it runs one level down (tests/tests/kata.rs).

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use super::{
    ContainerRuntime, DATA_DIR, LEDGER_DIR, LabPlatform, Ledger, Resource, Runtime, containers::SERVE, linuxvm, net,
    quiet, rootfs, vms,
};
use crate::{Error, Result, workload::netns::sh};

/// Names the directory of the Kata install.
pub const KATA_DIR_ENV: &str = "VTRACE_KATA_DIR";
/// Names the Kata configuration file (else the lab's own or the install's).
pub const KATA_CONFIG_ENV: &str = "VTRACE_KATA_CONFIG";
const SHIM: &str = "containerd-shim-kata-v2";
const RUNTIME: &str = "io.containerd.kata.v2";
/// The container's id; Kata names the sandbox, its QEMU and virtiofsd by it.
pub const CONTAINER_ID: &str = "vtrace-lab-kata";
const NETNS: &str = "vtl-kata";
/// The host's end of the veth; the netns's end is eth0, as CNI leaves it.
const HOST_IF: &str = "vtl-kata0";
/// Modules the Kata guest loads before its agent can talk (virtio-pci,
/// vsock, virtio-net, virtio-fs, the console, virtio-blk, overlayfs).
const GUEST_MODULES: &[&str] = &[
    "virtio_pci",
    "virtio_net",
    "vmw_vsock_virtio_transport",
    "virtiofs",
    "virtio_console",
    "virtio_blk",
    "overlay",
];
/// Bumped when the guest initrd's contents change.
const INITRD_VERSION: &str = "1";

fn unavailable(reason: String) -> Error {
    Error::LabUnavailable {
        platform: "kata".into(),
        reason,
    }
}

fn dir() -> PathBuf {
    Path::new(DATA_DIR).join("kata")
}

/// Where the Kata install is: the shim's directory.
pub fn install_dir() -> std::result::Result<PathBuf, String> {
    if let Some(d) = std::env::var_os(KATA_DIR_ENV) {
        let d = PathBuf::from(d);
        return if d.join(SHIM).is_file() {
            Ok(d)
        } else {
            Err(format!("{KATA_DIR_ENV}={} holds no {SHIM}", d.display()))
        };
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .chain([PathBuf::from("/opt/kata/bin")])
        .find(|d| d.join(SHIM).is_file())
        .ok_or_else(|| {
            format!("no {SHIM}: install Kata Containers (on PATH or in /opt/kata/bin) or name its directory with {KATA_DIR_ENV}=DIR")
        })
}

/// Whether `dir` is a bare build like ../shared/vmm/kata, whose guest the
/// lab makes (no Kata image or guest kernel comes with it).
fn is_bare_build(dir: &Path) -> bool {
    dir.join("kata-agent").is_file() && dir.join("configuration-qemu.toml").is_file()
}

/// The guest initrd for a bare build: busybox, kata-agent with its
/// libraries and [`GUEST_MODULES`] of the lab's kernel; /init loads them,
/// sends its output to the console the shim reads (/dev/hvc0) and execs
/// the agent as PID 1. Made once per agent (its size and time mark it).
pub fn guest_initrd(kata_dir: &Path) -> Result<PathBuf> {
    let agent = kata_dir.join("kata-agent");
    let meta = fs::metadata(&agent).map_err(crate::error::io(format!("read {}", agent.display())))?;
    // Whole seconds: a copy through cpio (one level down) keeps no more.
    let stamp = format!(
        "{INITRD_VERSION} {} {}",
        meta.len(),
        meta.modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs())
    );
    let out = dir().join("kata-initrd.cpio");
    let marker = dir().join("kata-initrd.version");
    if out.exists() && fs::read_to_string(&marker).is_ok_and(|v| v == stamp) {
        return Ok(out);
    }
    let (_, modules) = linuxvm::kernel()?;
    let tree = dir().join("initrd-tree");
    let _ = fs::remove_dir_all(&tree);
    for d in ["bin", "usr/bin", "proc", "sys", "dev", "run", "tmp", "etc"] {
        fs::create_dir_all(tree.join(d)).map_err(crate::error::io(format!("create {d}")))?;
    }
    let busybox = rootfs::find("busybox")?;
    for (bin, dest) in [(&busybox, "bin/busybox"), (&agent, "usr/bin/kata-agent")] {
        fs::copy(bin, tree.join(dest)).map_err(crate::error::io(format!("copy {}", bin.display())))?;
        for lib in rootfs::libraries(bin) {
            rootfs::copy_into(&tree, &lib)?;
        }
    }
    for applet in ["sh", "insmod", "mount", "umount", "cat"] {
        std::os::unix::fs::symlink("busybox", tree.join("bin").join(applet))
            .map_err(crate::error::io(format!("link {applet}")))?;
    }
    fs::write(tree.join("etc/hostname"), "kata\n").map_err(crate::error::io("write hostname"))?;
    let insmods = linuxvm::install_modules(&tree, &modules, GUEST_MODULES)?;
    let init = format!(
        "#!/bin/sh\nmount -t proc proc /proc\n{insmods}umount /proc\n\
         mount -t devtmpfs dev /dev 2>/dev/null; [ -c /dev/hvc0 ] && exec >/dev/hvc0 2>&1\n\
         echo 'init: modules loaded, starting kata-agent'\nexec /usr/bin/kata-agent\n"
    );
    let init_path = tree.join("init");
    fs::write(&init_path, init).map_err(crate::error::io("write init"))?;
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&init_path, fs::Permissions::from_mode(0o755)).map_err(crate::error::io("chmod init"))?;
    linuxvm::pack(&tree, &out, false)?;
    let _ = fs::remove_dir_all(&tree);
    fs::write(&marker, stamp).map_err(crate::error::io("write initrd marker"))?;
    Ok(out)
}

/// What a bare build needs copied to run one level down: the guest initrd
/// and its marker, at the same paths (made here, where `ldd` is).
pub fn guest_files(kata_dir: &Path) -> Result<Vec<(PathBuf, PathBuf)>> {
    let initrd = guest_initrd(kata_dir)?;
    let marker = initrd.with_file_name("kata-initrd.version");
    Ok([initrd, marker].into_iter().map(|p| (p.clone(), p)).collect())
}

/// The configuration a bare build runs with: its configuration-qemu.toml
/// with the lab's kernel, the guest initrd and the build's virtiofsd.
fn bare_config(kata_dir: &Path, run: &Path) -> Result<PathBuf> {
    let (vmlinuz, _) = linuxvm::kernel()?;
    let initrd = guest_initrd(kata_dir)?;
    let virtiofsd = [kata_dir.join("virtiofsd"), PathBuf::from("/usr/libexec/virtiofsd")]
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| unavailable(format!("no virtiofsd in {} or /usr/libexec", kata_dir.display())))?;
    let source = kata_dir.join("configuration-qemu.toml");
    let text = fs::read_to_string(&source).map_err(crate::error::io(format!("read {}", source.display())))?;
    let set = |line: &str| -> Option<String> {
        let key = line.split('=').next()?.trim();
        Some(match key {
            "kernel" => format!("kernel = \"{}\"", vmlinuz.display()),
            "initrd" => format!("initrd = \"{}\"", initrd.display()),
            "image" => String::new(),
            "virtio_fs_daemon" => format!("virtio_fs_daemon = \"{}\"", virtiofsd.display()),
            "valid_virtio_fs_daemon_paths" => format!("valid_virtio_fs_daemon_paths = [\"{}\"]", virtiofsd.display()),
            _ => return None,
        })
    };
    let config: Vec<String> = text
        .lines()
        .map(|l| if l.starts_with('#') { None } else { set(l) }.unwrap_or_else(|| l.to_string()))
        .collect();
    let out = run.join("configuration.toml");
    fs::write(&out, config.join("\n")).map_err(crate::error::io(format!("write {}", out.display())))?;
    Ok(out)
}

/// The lab containerd's socket.
pub fn socket() -> String {
    format!("{LEDGER_DIR}/containerd-kata/containerd.sock")
}

/// Runs `ctr` against the lab's containerd.
fn ctr(args: &[&str]) -> Result<String> {
    let out = Command::new("ctr")
        .args(["--address", &socket()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(crate::error::io("run ctr"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(Error::Io {
            context: format!("ctr {}", args.join(" ")),
            source: std::io::Error::other(String::from_utf8_lossy(&out.stderr).trim().to_string()),
        })
    }
}

/// The `kata` platform.
pub struct Kata;

impl Runtime for Kata {
    fn up(&self, p: &LabPlatform, ledger: &mut Ledger) -> Result<()> {
        up(p, ledger)
    }

    /// Under nested TCG a sandbox takes tens of seconds (the shim, QEMU,
    /// the guest kernel, 7 modules, the agent, the container).
    fn boot(&self) -> Duration {
        Duration::from_secs(300)
    }

    fn missing(&self) -> Option<String> {
        if let Some(why) = vms::kvm_cannot_boot_guests() {
            return Some(why);
        }
        if let Err(why) = install_dir() {
            return Some(why);
        }
        if !Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
            return Some("containerd and Kata need cgroup2 mounted at /sys/fs/cgroup".into());
        }
        if !Path::new("/dev/shm").is_dir() {
            return Some("Kata puts the sandbox's memory in /dev/shm, which is missing".into());
        }
        if !Path::new("/dev/log").exists() {
            return Some("Kata's shim logs to syslog and fails without it: no /dev/log (start a syslog daemon)".into());
        }
        None
    }
}

impl ContainerRuntime for Kata {
    fn remove(&self, _runtime: &str, id: &str, _root: &str) {
        let sock = socket();
        quiet(&["ctr", "--address", &sock, "task", "kill", "--signal", "SIGKILL", id]);
        let start = Instant::now();
        // The sandbox goes down with its task; delete waits for that.
        while !quiet(&["ctr", "--address", &sock, "task", "delete", id]) && start.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(300));
        }
        quiet(&["ctr", "--address", &sock, "container", "delete", id]);
    }

    fn left(&self, _runtime: &str, _id: &str, _root: &str) -> Option<String> {
        None // gone with its containerd; its QEMU and virtiofsd are checked by name
    }

    fn exec(&self, _runtime: &str, id: &str, _root: &str) -> Vec<String> {
        [
            "ctr",
            "--address",
            &socket(),
            "task",
            "exec",
            "--exec-id",
            &format!("vtrace-{}", std::process::id()),
            id,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }
}

fn up(p: &LabPlatform, ledger: &mut Ledger) -> Result<()> {
    let kata_dir = install_dir().map_err(unavailable)?;
    net::veth_netns(ledger, p, NETNS, HOST_IF, "eth0")?;
    let run = vms::run_dir(ledger, p.name)?;
    let config = match std::env::var_os(KATA_CONFIG_ENV) {
        Some(c) => Some(PathBuf::from(c)),
        None if is_bare_build(&kata_dir) => Some(bare_config(&kata_dir, &run)?),
        None => None,
    };
    // The container's root: the lab rootfs under a private overlay.
    let lower = rootfs::ensure()?;
    let (upper, work, merged) = (run.join("upper"), run.join("work"), run.join("rootfs"));
    for d in [&upper, &work, &merged] {
        fs::create_dir_all(d).map_err(crate::error::io(format!("create {}", d.display())))?;
    }
    ledger.add(Resource::Mount {
        path: merged.display().to_string(),
    })?;
    let options = format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.display(),
        upper.display(),
        work.display()
    );
    sh(&[
        "mount",
        "-t",
        "overlay",
        "overlay",
        "-o",
        &options,
        &merged.display().to_string(),
    ])?;

    // The lab's containerd; its shims, and the sandbox's QEMU and
    // virtiofsd (named by the container id), go with it.
    let state = Path::new(LEDGER_DIR).join("containerd-kata");
    ledger.add(Resource::Dir {
        path: state.display().to_string(),
    })?;
    ledger.add(Resource::Processes {
        pattern: CONTAINER_ID.into(),
    })?;
    fs::create_dir_all(&state).map_err(crate::error::io(format!("create {}", state.display())))?;
    let containerd_config = run.join("containerd.toml");
    fs::write(
        &containerd_config,
        format!(
            "version = 2\nroot = \"{}\"\nstate = \"{}\"\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n\
             [grpc]\n  address = \"{}\"\n",
            run.join("containerd-root").display(),
            state.display(),
            socket()
        ),
    )
    .map_err(crate::error::io("write containerd.toml"))?;
    let log = fs::File::create(run.join("containerd.log")).map_err(crate::error::io("create containerd.log"))?;
    let path = format!(
        "{}:{}",
        kata_dir.display(),
        std::env::var("PATH").unwrap_or_else(|_| "/usr/sbin:/usr/bin:/sbin:/bin".into())
    );
    let mut containerd = Command::new("containerd");
    containerd
        .arg("--config")
        .arg(&containerd_config)
        .env("PATH", path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    let child = containerd.spawn().map_err(crate::error::io("start containerd"))?;
    ledger.add(Resource::Process {
        pid: child.id(),
        comm: "containerd".into(),
    })?;
    let start = Instant::now();
    while ctr(&["version"]).is_err() {
        if start.elapsed() > Duration::from_secs(60) {
            return Err(unavailable(format!(
                "containerd did not answer within 60 s; its log ends:\n{}",
                log_tail(&run)
            )));
        }
        std::thread::sleep(Duration::from_millis(200));
    }

    ledger.add(Resource::Container {
        runtime: "kata".into(),
        id: CONTAINER_ID.into(),
        root: socket(),
    })?;
    let volume = format!(
        "type=bind,src={},dst={},options=rbind:rw",
        super::VOLUME_DIR,
        super::VOLUME_MOUNT
    );
    let netns = format!("network:/run/netns/{NETNS}");
    // The configuration goes as the task's ConfigPath option: Kata 4 takes
    // KATA_CONF_FILE only when it names one of its shipped paths.
    let config_arg: Vec<String> = config
        .iter()
        .flat_map(|c| ["--runtime-config-path".to_string(), c.display().to_string()])
        .collect();
    let root = merged.display().to_string();
    let mut args: Vec<&str> = vec!["run", "-d", "--runtime", RUNTIME];
    args.extend(config_arg.iter().map(String::as_str));
    args.extend_from_slice(&[
        // A root of our own (not a snapshot), given where an image would be.
        "--rootfs",
        "--with-ns",
        &netns,
        "--mount",
        &volume,
        "--cwd",
        "/data",
        // `lab exec`'s commands by name: execs take the container's environment.
        "--env",
        "PATH=/bin:/usr/bin:/sbin:/usr/sbin",
        &root,
        CONTAINER_ID,
        "/bin/sh",
        "-c",
        SERVE,
    ]);
    ctr(&args).map_err(|e| {
        unavailable(format!(
            "the sandbox did not start: {e}; containerd's log ends:\n{}",
            log_tail(&run)
        ))
    })?;
    ledger.note = format!(
        "Kata Containers from {} ({}), QEMU/KVM sandbox {CONTAINER_ID}, tc-mirrored tap, vhost-net, virtio-fs",
        kata_dir.display(),
        match &config {
            Some(c) => format!("configuration {}", c.display()),
            None => "its own configuration".into(),
        }
    );
    Ok(())
}

/// The end of containerd's log (the shim's lines among them): `down` removes
/// the run directory, so a failed `up` says it.
fn log_tail(run: &Path) -> String {
    let log = fs::read_to_string(run.join("containerd.log")).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
