//! A stock-kernel guest for tests: Debian's kernel (the one `lab up linuxvm`
//! boots, unpacked by scripts/setup.sh) under QEMU TCG with SVM emulated
//! (`-cpu EPYC`, so kvm_amd loads and nested guests make real SVM exits) on
//! one vCPU (with two, a kprobe's code patching once waited minutes for the
//! other vCPU's IPI answer while TCG starved it: a soft lockup),
//! booted from a busybox initramfs holding the given binaries (with their
//! shared libraries), kernel modules and a script. The script's files come
//! back through a 9p share. tests/tests/stock_kernel.rs uses it to attach for
//! real what the host kernel refuses: kprobes, vhost-net, kvm_exit/kvm_entry;
//! tests/tests/vm_platforms.rs runs the VM platforms there (`lab up
//! qemu-kvm` and the others, vms.rs), with what [`vm_platform_files`] lists.

use std::{
    fs,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use super::{common::DATA_DIR, linuxvm, rootfs};
use crate::{Error, Result};

/// Modules the guest loads: 9p for the share, then what the scenarios need
/// (tun and tap, vhost-net, overlayfs, KVM on AMD), and what Kata's shim
/// needs besides: vhost-vsock to its agent, veth for the netns, tc's
/// ingress qdisc, filters and mirred action to join eth0 and the tap, and
/// the XFRM and netfilter netlink families its netlink handles open; and
/// vsock's loopback transport, for the vsock layer's test.
pub const MODULES: &[&str] = &[
    "virtio_pci",
    // The lab VMs' data disks (lab/disks.rs).
    "loop",
    "9pnet_virtio",
    "9p",
    "tun",
    "tap",
    "vhost_net",
    "overlay",
    "kvm_amd",
    "vhost_vsock",
    "veth",
    "sch_ingress",
    "cls_u32",
    "cls_flower",
    "cls_matchall",
    "act_mirred",
    "xfrm_user",
    "nfnetlink",
    "vsock_loopback",
];

/// Modules the SR-IOV board's guest loads besides [`MODULES`]: the igb PF
/// driver, the VF driver (igbvf), and vfio-pci to pass a VF through.
pub const SRIOV_MODULES: &[&str] = &["igb", "igbvf", "vfio_pci", "vfio_iommu_type1"];

/// Names a QEMU >= 8 (one that emulates `-device igb`) for the SR-IOV board.
pub const SRIOV_QEMU_ENV: &str = "VTRACE_SRIOV_QEMU";
/// Where scripts/setup.sh unpacks QEMU 10 from bookworm-backports.
pub const SRIOV_QEMU_DIR: &str = "/var/lib/vtrace-lab/qemu-sriov";

/// The machine the guest boots on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Board {
    /// The host's QEMU, q35, no NIC.
    Plain,
    /// QEMU >= 8 with an emulated SR-IOV NIC (igb: an 82576 with 7 VFs)
    /// behind an emulated IOMMU (intel-iommu with interrupt remapping), so
    /// the guest can pass a VF through to a nested KVM guest with vfio-pci.
    SriovNic,
}

/// The SR-IOV board's QEMU: `$VTRACE_SRIOV_QEMU`, else setup.sh's under
/// [`SRIOV_QEMU_DIR`]; it must be QEMU 8 or later (igb came in 8.0).
pub fn sriov_qemu() -> Result<PathBuf> {
    let (qemu, named) = match std::env::var_os(SRIOV_QEMU_ENV) {
        Some(p) => (PathBuf::from(p), true),
        None => (Path::new(SRIOV_QEMU_DIR).join("usr/bin/qemu-system-x86_64"), false),
    };
    let whence = if named {
        format!("{SRIOV_QEMU_ENV}={}", qemu.display())
    } else {
        format!(
            "{} (scripts/setup.sh unpacks QEMU 10 from bookworm-backports there; or name one with {SRIOV_QEMU_ENV}=PATH)",
            qemu.display()
        )
    };
    let version = Command::new(&qemu)
        .arg("--version")
        .env("QEMU_MODULE_DIR", module_dir(&qemu))
        .output()
        .map_err(|e| unavailable(format!("the SR-IOV board needs QEMU >= 8 (-device igb): {whence}: {e}")))?;
    let text = String::from_utf8_lossy(&version.stdout);
    let major: u32 = text
        .split("version ")
        .nth(1)
        .and_then(|v| v.split('.').next())
        .and_then(|m| m.trim().parse().ok())
        .unwrap_or(0);
    if major < 8 {
        return Err(unavailable(format!(
            "the SR-IOV board needs QEMU >= 8 (-device igb), but {whence} is {}",
            text.lines().next().unwrap_or("no QEMU")
        )));
    }
    Ok(qemu)
}

/// A QEMU's module directory, beside its prefix (a private prefix's QEMU
/// would load the host's modules of another version otherwise).
fn module_dir(qemu: &Path) -> PathBuf {
    let prefix = qemu.parent().and_then(Path::parent).unwrap_or(Path::new("/usr"));
    prefix.join("lib/x86_64-linux-gnu/qemu")
}

impl Board {
    /// The QEMU it runs on, and its machine's arguments.
    fn qemu(self) -> Result<(PathBuf, Vec<String>)> {
        let base = ["-accel", "tcg", "-cpu", "EPYC", "-smp", "1", "-m", "4096"];
        let mut args: Vec<String> = Vec::new();
        let qemu = match self {
            Board::Plain => {
                args.extend(["-machine", "q35"].map(String::from));
                PathBuf::from("qemu-system-x86_64")
            }
            Board::SriovNic => {
                let qemu = sriov_qemu()?;
                let prefix = qemu.parent().and_then(Path::parent).unwrap_or(Path::new("/usr"));
                args.extend([
                    "-L".to_string(),
                    prefix.join("share/qemu").display().to_string(),
                    "-L".to_string(),
                    "/usr/share/seabios".to_string(),
                    // Interrupt remapping needs the split irqchip.
                    "-machine".into(),
                    "q35,kernel-irqchip=split".into(),
                    "-device".into(),
                    "intel-iommu,intremap=on,caching-mode=on".into(),
                    // QEMU 10.0.2 maps a 64-bit VF BAR placed above 4 GiB at
                    // an address cut to 32 bits: the VF's registers go
                    // nowhere (igbvf: "PF still in reset state"). Fixed
                    // upstream after 10.0.2; without a 64-bit PCI hole the
                    // guest places the VF BARs below 4 GiB.
                    "-global".into(),
                    "q35-pcihost.pci-hole64-size=0".into(),
                    // The NIC's wire: a hub port with nothing else on the
                    // hub (igb switches VF <-> PF frames inside the NIC).
                    "-netdev".into(),
                    "hubport,id=wire,hubid=0".into(),
                    "-device".into(),
                    "igb,netdev=wire".into(),
                ]);
                qemu
            }
        };
        args.extend(base.map(String::from));
        Ok((qemu, args))
    }

    /// The guest kernel's command line. `mitigations=off`: under TCG the
    /// speculative-execution mitigations a Zen CPU gets (return thunks,
    /// IBPB and RSB stuffing at VM exits) are emulated instructions with
    /// nothing to defend.
    fn append(self) -> &'static str {
        match self {
            Board::Plain => "console=ttyS0 panic=-1 quiet mitigations=off",
            Board::SriovNic => "console=ttyS0 panic=-1 quiet mitigations=off intel_iommu=on",
        }
    }

    fn modules(self) -> Vec<&'static str> {
        let mut m = MODULES.to_vec();
        if self == Board::SriovNic {
            m.extend(SRIOV_MODULES);
        }
        m
    }
}

/// What a guest run left: its console and how long it took.
#[derive(Debug)]
pub struct GuestRun {
    pub console: String,
    /// The script's exit status.
    pub status: i32,
    /// Its last boot's wall time.
    pub wall: Duration,
    /// Boots it took: more than one when it froze (see [`FROZE`]).
    pub boots: u32,
    /// Its last boot's time to its first heartbeat: how near a booting
    /// guest came to [`BOOT_FROZEN_AFTER`].
    pub first_beat: Duration,
    /// The longest its last boot's heartbeat stood still after the first
    /// beat: how near a working guest came to [`FROZEN_AFTER`].
    pub longest_silence: Duration,
}

fn unavailable(reason: String) -> Error {
    Error::LabUnavailable {
        platform: "stock-kernel guest".into(),
        reason,
    }
}

/// Why a guest cannot run here, if it cannot.
pub fn can_run() -> Result<()> {
    rootfs::find("qemu-system-x86_64")
        .map_err(|_| unavailable("qemu-system-x86_64 not found (run scripts/setup.sh)".into()))?;
    rootfs::find("busybox")?;
    linuxvm::kernel().map(|_| ())
}

/// What the VM platforms need inside the guest, made here first (a guest
/// without `ldd` or `xz` could not): the Linux guests' kernel, initramfs and
/// ELF vmlinux at the lab's own paths, so `lab up` there finds them made,
/// and QEMU's firmware beside where its binary goes (/usr/bin, with the
/// other binaries: QEMU finds its data relative to itself). Pairs of (here,
/// there).
pub fn vm_platform_files() -> Result<Vec<(PathBuf, PathBuf)>> {
    let initrd = linuxvm::initramfs()?;
    let vmlinux = linuxvm::vmlinux()?;
    let (vmlinuz, _) = linuxvm::kernel()?;
    let marker = initrd.with_file_name("initrd.version");
    let mut files: Vec<(PathBuf, PathBuf)> = [vmlinuz, initrd, marker, vmlinux]
        .into_iter()
        .map(|p| (p.clone(), p))
        .collect();
    // QEMU's option ROMs too: Kata's QEMU does not set `romfile=`.
    for firmware in ["/usr/share/qemu", "/usr/share/seabios", "/usr/lib/ipxe/qemu"] {
        files.push((firmware.into(), firmware.into()));
    }
    Ok(files)
}

/// The lab Linux VMs' tools disk (fio and its libraries, lab/disks.rs),
/// made here and placed at the lab's own path there (with its version
/// marker), for a guest without fio: about 100 MB, so only the files that
/// bring VMs up with disks carry it.
pub fn tools_disk_files() -> Result<Vec<(PathBuf, PathBuf)>> {
    let image = super::disks::tools_image()?;
    let marker = super::disks::tools_marker(&image);
    Ok([image, marker].into_iter().map(|p| (p.clone(), p)).collect())
}

/// Boots the guest, runs `script` (as /script.sh, in /out: the share backed
/// by `out`, emptied first) and powers off; at most `timeout` a boot, and
/// a guest that froze is booted again (see [`FROZE`]). `binaries` go to /usr/bin
/// (before busybox's applets on PATH) with their shared libraries; `files`
/// are (here, there) pairs, files or directories, copied as they are.
pub fn run(
    binaries: &[PathBuf],
    files: &[(PathBuf, PathBuf)],
    script: &str,
    out: &Path,
    timeout: Duration,
) -> Result<GuestRun> {
    run_on(Board::Plain, binaries, files, script, out, timeout)
}

/// [`run`] on `board`.
pub fn run_on(
    board: Board,
    binaries: &[PathBuf],
    files: &[(PathBuf, PathBuf)],
    script: &str,
    out: &Path,
    timeout: Duration,
) -> Result<GuestRun> {
    can_run()?;
    let (qemu_binary, machine) = board.qemu()?;
    let (vmlinuz, modules) = linuxvm::kernel()?;
    let work = Path::new(DATA_DIR).join(format!("guest-{}", std::process::id()));
    let _ = fs::remove_dir_all(&work);
    let tree = work.join("tree");
    let result = (|| {
        for d in ["bin", "usr/bin", "proc", "sys", "dev", "tmp", "out", "mnt", "run"] {
            fs::create_dir_all(tree.join(d)).map_err(crate::error::io(format!("create {d}")))?;
        }
        let busybox = rootfs::find("busybox")?;
        let placed = std::iter::once((&busybox, "bin")).chain(binaries.iter().map(|b| (b, "usr/bin")));
        for (bin, dir) in placed {
            let name = bin
                .file_name()
                .ok_or_else(|| unavailable(format!("{} is no file", bin.display())))?;
            fs::copy(bin, tree.join(dir).join(name)).map_err(crate::error::io(format!("copy {}", bin.display())))?;
            for lib in rootfs::libraries(bin) {
                rootfs::copy_into(&tree, &lib)?;
            }
        }
        for (here, there) in files {
            let dest = tree.join(there.strip_prefix("/").unwrap_or(there));
            if let Some(parent) = dest.parent() {
                fs::create_dir_all(parent).map_err(crate::error::io(format!("create {}", parent.display())))?;
            }
            crate::workload::netns::sh(&["cp", "-a", &here.display().to_string(), &dest.display().to_string()])?;
        }
        let insmods = linuxvm::install_modules(&tree, &modules, &board.modules())?;
        let init = format!(
            "#!/bin/busybox sh\n/bin/busybox --install -s /bin\nexport PATH=/usr/bin:/bin\n\
             mount -t proc proc /proc\nmount -t sysfs sys /sys\nmount -t devtmpfs dev /dev\n\
             mount -t tracefs nodev /sys/kernel/tracing\nmount -t debugfs nodev /sys/kernel/debug\n\
             mount -t cgroup2 none /sys/fs/cgroup\nmkdir -p /dev/shm /var/log\nmount -t tmpfs shm /dev/shm\nsyslogd\n\
             {insmods}mount -t 9p -o trans=virtio,version=9p2000.L out /out\n\
             (while :; do cut -d' ' -f1 /proc/uptime > /out/{HEARTBEAT}; sleep 5; done) &\n\
             cd /out && sh /script.sh >> /out/script.log 2>&1; echo $? > /out/script.rc\n\
             sync\npoweroff -f\n"
        );
        for (name, text) in [("init", init.as_str()), ("script.sh", script)] {
            let p = tree.join(name);
            fs::write(&p, text).map_err(crate::error::io(format!("write {name}")))?;
            fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).map_err(crate::error::io("chmod"))?;
        }
        let initrd = work.join("initrd.cpio");
        linuxvm::pack(&tree, &initrd, false)?;
        // A guest whose clock stops all the same (see Nudge for the one
        // cause found, and nudged away) is booted again, at most BOOTS
        // times in all: that is the emulator, not what is tested.
        // A boot after a freeze goes on after the parts of the script the
        // frozen one finished (STEPS' `once` and `finished`): their files
        // are kept, and everything written after them is removed.
        let mut boot = 1;
        loop {
            clear_for_boot(out, boot);
            let result: Result<GuestRun> = (|| {
                let _ = fs::remove_file(out.join("script.rc"));
                let console = work.join("console.log");
                let monitor = work.join("monitor.sock");
                let _ = fs::remove_file(&monitor);
                let mut nudge = Nudge::new(monitor.clone());
                let start = Instant::now();
                let mut qemu = Command::new(&qemu_binary)
                    .env("QEMU_MODULE_DIR", module_dir(&qemu_binary))
                    .args(&machine)
                    .arg("-kernel")
                    .arg(&vmlinuz)
                    .arg("-initrd")
                    .arg(&initrd)
                    .args(["-append", board.append()])
                    .arg("-virtfs")
                    .arg(format!(
                        "local,path={},mount_tag=out,security_model=none",
                        out.display()
                    ))
                    // No default devices: SeaBIOS 1.16.2 (Debian 12's)
                    // waits 32 s on the empty DVD drive of QEMU 10's q35
                    // (an AHCI command's timeout) before booting the
                    // kernel; the keyboard the nudge presses is the
                    // machine's own, not a default device.
                    .args(["-display", "none", "-nodefaults", "-no-reboot", "-nic", "none"])
                    .arg("-monitor")
                    .arg(format!("unix:{},server=on,wait=off", monitor.display()))
                    .arg("-serial")
                    .arg(format!("file:{}", console.display()))
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .map_err(crate::error::io("start qemu-system-x86_64"))?;
                // The guest's heartbeat (its uptime, written every 5 s) and when it
                // last changed: a guest whose clock stopped is frozen.
                // The heartbeat file is gone (cleared for this boot) until
                // the guest's first beat.
                let mut progress = (heartbeat(out), Instant::now());
                let mut first_beat: Option<Duration> = None;
                let mut longest_silence = Duration::ZERO;
                let exited = loop {
                    if qemu.try_wait().map_err(crate::error::io("wait for qemu"))?.is_some() {
                        break Ok(());
                    }
                    if start.elapsed() > timeout {
                        let _ = qemu.kill();
                        let _ = qemu.wait();
                        break Err(format!("the guest did not finish in {timeout:?}"));
                    }
                    nudge.tick();
                    let beat = heartbeat(out);
                    let limit = if first_beat.is_some() {
                        FROZEN_AFTER
                    } else {
                        BOOT_FROZEN_AFTER
                    };
                    if beat != progress.0 {
                        match first_beat {
                            None => first_beat = Some(start.elapsed()),
                            Some(_) => longest_silence = longest_silence.max(progress.1.elapsed()),
                        }
                        progress = (beat, Instant::now());
                    } else if progress.1.elapsed() > limit {
                        let _ = qemu.kill();
                        let _ = qemu.wait();
                        let when = if first_beat.is_some() {
                            ""
                        } else {
                            " (it never beat: still booting)"
                        };
                        break Err(format!(
                            "{FROZE}: its clock did not move for {} s{when}, {:.0} s after it started",
                            limit.as_secs(),
                            start.elapsed().as_secs_f64()
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(100));
                };
                let console = fs::read_to_string(&console).unwrap_or_default();
                let status = fs::read_to_string(out.join("script.rc"))
                    .ok()
                    .and_then(|s| s.trim().parse().ok());
                match (exited, status) {
                    (Ok(()), Some(status)) => Ok(GuestRun {
                        console,
                        status,
                        wall: start.elapsed(),
                        boots: boot,
                        first_beat: first_beat.unwrap_or_default(),
                        longest_silence,
                    }),
                    (Err(why), _) => Err(unavailable(format!(
                        "{why}; its console ends:\n{}\nits script's output ends:\n{}",
                        tail(&console),
                        script_tail(out)
                    ))),
                    (Ok(()), None) => Err(unavailable(format!(
                        "the guest stopped before its script did; its console ends:\n{}\nits script's output ends:\n{}",
                        tail(&console),
                        script_tail(out)
                    ))),
                }
            })();
            match result {
                Err(e) if boot < BOOTS && e.to_string().contains(FROZE) => {
                    eprintln!("vtrace: {e}; booting the guest again");
                    let note = format!("[boot {}] the guest froze; booted again\n", boot + 1);
                    let _ = fs::OpenOptions::new()
                        .append(true)
                        .create(true)
                        .open(out.join("steps.log"))
                        .and_then(|mut f| std::io::Write::write_all(&mut f, note.as_bytes()));
                    boot += 1;
                }
                other => break other,
            }
        }
    })();
    let _ = fs::remove_dir_all(&work);
    result
}

/// Wakes the guest's vCPU every [`NUDGE_EVERY`] with an interrupt of its
/// own: a shift key pressed on its keyboard, through QEMU's monitor.
///
/// QEMU's TCG, running KVM inside the guest (nested SVM), now and then
/// leaves an interrupt pending in the guest's local APIC with nothing
/// asking the vCPU to take it: the guest stops until another interrupt
/// comes. Its timer's is the one lost, so with no device busy none comes,
/// and the guest's clock stops (what [`FROZE`] calls frozen). QEMU's
/// monitor at 9 such freezes, each while Kata started its VM (QEMU 10.0 as
/// the emulator), showed IRR 236 (the timer's vector), ISR empty, PPR 0x10
/// and IF set: the vCPU halted in the idle loop (HLT=1) or spinning in a
/// user process, an interrupt it could take waiting beside it. A key
/// pressed then ended each freeze at once (5 of 5): QEMU looks at the APIC
/// again for the new interrupt and delivers both. Nudged, a lost wake-up
/// stalls the guest a second at most, where a freeze cost a boot.
struct Nudge {
    monitor: PathBuf,
    connection: Option<std::os::unix::net::UnixStream>,
    last: Instant,
}

/// How often [`Nudge`] presses the key: the longest a lost wake-up stalls
/// the guest. Two keyboard interrupts a second are nothing beside its
/// timer's 250.
const NUDGE_EVERY: Duration = Duration::from_secs(1);

impl Nudge {
    fn new(monitor: PathBuf) -> Nudge {
        Nudge {
            monitor,
            connection: None,
            last: Instant::now(),
        }
    }

    fn tick(&mut self) {
        use std::io::{Read, Write};
        if self.last.elapsed() < NUDGE_EVERY {
            return;
        }
        self.last = Instant::now();
        if self.connection.is_none() {
            // Not there yet while QEMU starts: the next tick tries again.
            self.connection = std::os::unix::net::UnixStream::connect(&self.monitor)
                .and_then(|c| c.set_nonblocking(true).map(|()| c))
                .ok();
        }
        let Some(c) = self.connection.as_mut() else { return };
        // The monitor echoes what it is sent: read it away, so its socket
        // never fills.
        let mut echo = [0u8; 4096];
        while matches!(c.read(&mut echo), Ok(n) if n > 0) {}
        if c.write_all(b"sendkey shift\n").is_err() {
            self.connection = None;
        }
    }
}

/// Shell functions for a script run here, put before it by the caller:
/// - `mark WHAT` notes a step in steps.log and on the console (so a guest
///   that runs out of time says where it was);
/// - `step LIMIT FAILFILE WHAT CMD...` runs CMD under a deadline, SIGINT
///   first as Ctrl-C would (a recording stops and keeps what it has), and
///   notes a failure in FAILFILE (with the processes running, when the
///   deadline ended it);
/// - `if once PART; then ...; finished PART; fi` runs PART unless a boot
///   before this one finished it and then froze: a part that leaves the
///   guest as it booted (what it brought up taken down) keeps its files, and
///   a boot after a freeze goes on after it instead of from the start.
pub const STEPS: &str = r#": "${OUT:=/out}"
mark() { m="[$(cut -d' ' -f1 /proc/uptime) s] $*"; echo "$m" >> "$OUT"/steps.log; echo "$m" > /dev/console; }
step() {
  limit=$1 fail=$2 what=$3; shift 3
  mark "$what"
  timeout -s INT -k 15 "$limit" "$@"; rc=$?
  [ $rc = 0 ] || { echo "$what failed (exit $rc)" >> "$fail"; mark "$what failed (exit $rc)"; }
  [ $rc -lt 124 ] || { echo "what ran when its limit came:"; ps -o pid,comm,args; } >> "$fail" 2>&1
  return $rc
}
once() { if grep -qxF "$1" "$OUT"/.done 2>/dev/null; then mark "$1: finished by a boot that froze later, kept"; return 1; fi; }
finished() { echo "$1" >> "$OUT"/.done; ls -A "$OUT" > "$OUT"/.kept.new && mv "$OUT"/.kept.new "$OUT"/.kept; }
resumes() { echo "$1" >> "$OUT"/.resumes; }
"#;
/// The parts of a script finished (`finished` in [`STEPS`]), and the files
/// in the share when the last of them was.
const DONE: &str = ".done";
const KEPT: &str = ".kept";
/// What unfinished parts resume (`resumes NAME` in [`STEPS`]): a `vtrace
/// bench` run again with the same options records only the cells not yet
/// done, so its output outlives a freeze, where starting over would redo
/// minutes of cells.
const RESUMES: &str = ".resumes";

/// What a frozen guest's error begins with.
pub const FROZE: &str = "the guest froze";
/// A guest whose heartbeat, once it beat, does not move this long is
/// frozen. Its beat comes every 5 s; the test command prints how long each
/// guest's stood still at most (VMs 7 s, Kata 9 s here): a freeze found
/// sooner costs less of CI's time, one called wrongly costs a boot.
pub const FROZEN_AFTER: Duration = Duration::from_secs(30);
/// A guest with no first beat this long after QEMU started is frozen: the
/// boot loads an initramfs of a few hundred MB, slower on a busy machine.
pub const BOOT_FROZEN_AFTER: Duration = Duration::from_secs(90);
/// Boots of a guest that keeps freezing, in all.
const BOOTS: u32 = 3;
/// The file in the share the guest writes its uptime to every 5 s.
const HEARTBEAT: &str = ".heartbeat";

/// Empties the share for boot `boot`: the first starts from nothing; a
/// later one keeps what the parts finished before the freeze left, and
/// what the unfinished ones resume.
fn clear_for_boot(out: &Path, boot: u32) {
    let kept: Vec<String> = match boot {
        1 => Vec::new(),
        _ => [KEPT, RESUMES]
            .iter()
            .flat_map(|list| {
                fs::read_to_string(out.join(list))
                    .unwrap_or_default()
                    .lines()
                    .map(String::from)
                    .collect::<Vec<_>>()
            })
            .collect(),
    };
    for e in fs::read_dir(out).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let bookkeeping = [KEPT, DONE, RESUMES, "steps.log"].contains(&name.as_str());
        if name != HEARTBEAT && ((boot > 1 && bookkeeping) || kept.contains(&name)) {
            continue;
        }
        let _ = fs::remove_dir_all(e.path()).or_else(|_| fs::remove_file(e.path()));
    }
}

fn heartbeat(out: &Path) -> String {
    fs::read_to_string(out.join(HEARTBEAT)).unwrap_or_default()
}

/// The end of what the script printed (script.log in `out`).
fn script_tail(out: &Path) -> String {
    tail(&fs::read_to_string(out.join("script.log")).unwrap_or_default())
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The nudge waits for QEMU's monitor to appear, then presses the key
    /// once a period, reading away what the monitor says back.
    #[test]
    fn the_nudge_presses_a_key_through_the_monitor_once_a_period() {
        use std::io::{Read, Write};
        let dir = std::env::temp_dir().join(format!("vtrace-nudge-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("monitor.sock");
        let mut nudge = Nudge::new(socket.clone());
        nudge.last -= NUDGE_EVERY;
        nudge.tick(); // no monitor yet: nothing sent, nothing fails
        let monitor = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        nudge.last -= NUDGE_EVERY;
        nudge.tick();
        let (mut qemu, _) = monitor.accept().unwrap();
        qemu.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        // What QEMU says on connecting, more than the nudge reads at once.
        qemu.write_all(&vec![b'x'; 10_000]).unwrap();
        let mut got = [0u8; 14];
        qemu.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"sendkey shift\n");
        nudge.tick(); // within the period: nothing
        nudge.last -= NUDGE_EVERY;
        nudge.tick();
        qemu.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"sendkey shift\n");
        qemu.set_nonblocking(true).unwrap();
        assert!(qemu.read(&mut got).is_err(), "one press a period");
        let _ = fs::remove_dir_all(&dir);
    }

    /// A boot's script, run here with the share at `out`.
    fn boot(out: &Path, n: u32, script: &str) {
        clear_for_boot(out, n);
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("{STEPS}{script}"))
            .env("OUT", out)
            .current_dir(out)
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// The first boot finishes part `a` and freezes in part `b` (here: stops
    /// writing); the next keeps `a`'s files and runs only `b`, from nothing.
    #[test]
    fn a_boot_after_a_freeze_goes_on_after_the_parts_finished() {
        let out = std::env::temp_dir().join(format!("vtrace-guest-parts-{}", std::process::id()));
        let _ = fs::remove_dir_all(&out);
        fs::create_dir_all(&out).unwrap();
        fs::write(out.join("stale"), "from an earlier run").unwrap();
        let script = "if once a; then echo \"$BOOT\" >> a.out; finished a; fi\n\
                      if once b; then echo \"$BOOT\" >> b.out; [ \"$BOOT\" = 1 ] && exit 0; finished b; fi\n";
        boot(&out, 1, &script.replace("$BOOT", "1"));
        assert!(!out.join("stale").exists(), "a first boot starts from nothing");
        assert_eq!(fs::read_to_string(out.join("b.out")).unwrap(), "1\n");
        boot(&out, 2, &script.replace("$BOOT", "2"));
        assert_eq!(fs::read_to_string(out.join("a.out")).unwrap(), "1\n", "part a ran once");
        assert_eq!(
            fs::read_to_string(out.join("b.out")).unwrap(),
            "2\n",
            "part b ran again from nothing"
        );
        let steps = fs::read_to_string(out.join("steps.log")).unwrap();
        assert!(
            steps.contains("a: finished by a boot that froze later, kept"),
            "{steps}"
        );
        assert_eq!(fs::read_to_string(out.join(DONE)).unwrap(), "a\nb\n");
        fs::remove_dir_all(&out).unwrap();
    }

    /// A part that resumes keeps its output over a freeze: the next boot's
    /// run of it finds what the frozen one did (a bench's cells done),
    /// where the rest of what the frozen boot wrote goes.
    #[test]
    fn a_part_that_resumes_keeps_its_output_over_a_freeze() {
        let out = std::env::temp_dir().join(format!("vtrace-guest-resumes-{}", std::process::id()));
        let _ = fs::remove_dir_all(&out);
        fs::create_dir_all(&out).unwrap();
        let script = "if once a; then resumes cells; mkdir -p cells; echo $BOOT > other.out; \
                      [ -e cells/1 ] && touch cells/2 || touch cells/1; [ $BOOT = 1 ] && exit 0; finished a; fi\n";
        boot(&out, 1, &script.replace("$BOOT", "1"));
        boot(&out, 2, &script.replace("$BOOT", "2"));
        assert!(out.join("cells/1").exists() && out.join("cells/2").exists(), "resumed");
        assert_eq!(
            fs::read_to_string(out.join("other.out")).unwrap(),
            "2\n",
            "the rest written anew"
        );
        fs::remove_dir_all(&out).unwrap();
    }
}
