//! What a VMM boots: the guest kernel image named in its arguments, and the
//! marks its contents carry. A unikernel is known by what its image holds
//! (Unikraft's own ELF sections, or its banner), not by what a user named
//! the file. Each image is read once per process and file version, however
//! many snapshots see its VMM.

use std::{
    fs,
    io::Read,
    path::{Path, PathBuf},
    sync::Mutex,
    time::SystemTime,
};

use object::{Object, ObjectSection};

/// The mark of a Unikraft image.
pub const UNIKRAFT: &str = "unikraft";
/// The mark of a VMM whose image could not be examined: none named in its
/// arguments (given over an API socket), or gone, or not a regular file.
pub const UNREAD: &str = "unread";

/// Sections only Unikraft's linker scripts make: its init, constructor and
/// event tables.
const UNIKRAFT_SECTIONS: &[&str] = &[".uk_inittab", ".uk_ctortab", ".uk_eventtab"];
/// Unikraft's banner (`Unikraft Telesto (0.16.3)`), for an image that is not
/// an ELF file or has no section headers.
const UNIKRAFT_BANNER: &[u8] = b"Unikraft ";
/// The most of an image read (unikernels are a few MiB).
const IMAGE_READ_LIMIT: u64 = 64 << 20;
/// The most of a VMM's configuration file read.
const CONFIG_READ_LIMIT: u64 = 1 << 20;
/// Images remembered (one per VMM process seen).
const CACHE_ENTRIES: usize = 256;

/// The guest kernel image in a VMM's arguments, as the VMM sees it: QEMU's
/// `-kernel PATH`, Cloud Hypervisor's `--kernel PATH`, or the
/// `boot-source` of Firecracker's `--config-file PATH`. An absolute path
/// lies under the process's `root`, a relative one under its `cwd` (its
/// /proc/<pid>/root and cwd: a VMM in a container or a chroot sees its own
/// files).
pub fn kernel_image(args: &[String], root: &Path, cwd: &Path) -> Option<PathBuf> {
    let value = |name: &str| {
        args.iter().enumerate().find_map(|(i, a)| {
            if a == name {
                args.get(i + 1).cloned()
            } else {
                a.strip_prefix(name)?.strip_prefix('=').map(str::to_string)
            }
        })
    };
    let resolve = |p: &str| match p.strip_prefix('/') {
        Some(absolute) => root.join(absolute),
        None => cwd.join(p),
    };
    if let Some(kernel) = value("-kernel").or_else(|| value("--kernel")) {
        return Some(resolve(&kernel));
    }
    let config = read_regular(&resolve(&value("--config-file")?), CONFIG_READ_LIMIT)?;
    let json: serde_json::Value = serde_json::from_slice(&config).ok()?;
    json["boot-source"]["kernel_image_path"].as_str().map(resolve)
}

/// The marks of the guest kernel of process `pid` (of arguments `args`):
/// [`UNIKRAFT`], or [`UNREAD`] for a VMM whose image could not be read;
/// none for a process that names no image and holds no vCPU.
pub fn marks_of_process(pid: u32, args: &[String]) -> Vec<String> {
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    match kernel_image(args, &proc_dir.join("root"), &proc_dir.join("cwd")) {
        Some(image) => marks(&image),
        None if is_vmm_command(args) => vec![UNREAD.to_string()],
        None => Vec::new(),
    }
}

/// A command line of a VMM that takes its guest over an API (Firecracker,
/// Cloud Hypervisor) or a configuration file vtrace could not read.
fn is_vmm_command(args: &[String]) -> bool {
    args.iter()
        .any(|a| a == "--api-sock" || a.starts_with("--api-socket") || a == "--config-file")
}

/// The file at `path`, at most `limit` bytes, if it is a regular file.
fn read_regular(path: &Path, limit: u64) -> Option<Vec<u8>> {
    // A FIFO, a device or /dev/stdin would block or never end.
    if !fs::metadata(path).ok()?.is_file() {
        return None;
    }
    let mut data = Vec::new();
    fs::File::open(path).ok()?.take(limit).read_to_end(&mut data).ok()?;
    Some(data)
}

/// An image read: its path, length and time of change, and its marks.
type ReadImage = (PathBuf, u64, Option<SystemTime>, Vec<String>);

/// The marks of the image at `path` ([`UNIKRAFT`]; [`UNREAD`] when it
/// cannot be read).
pub fn marks(path: &Path) -> Vec<String> {
    static SEEN: Mutex<Vec<ReadImage>> = Mutex::new(Vec::new());
    let Ok(meta) = fs::metadata(path) else {
        return vec![UNREAD.to_string()];
    };
    let version = (meta.len(), meta.modified().ok());
    {
        let seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((.., marks)) = seen.iter().find(|(p, len, at, _)| p == path && (*len, *at) == version) {
            return marks.clone();
        }
    }
    let marks = read_marks(path);
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    seen.retain(|(p, ..)| p != path);
    if seen.len() >= CACHE_ENTRIES {
        seen.remove(0);
    }
    seen.push((path.to_path_buf(), version.0, version.1, marks.clone()));
    marks
}

fn read_marks(path: &Path) -> Vec<String> {
    let Some(data) = read_regular(path, IMAGE_READ_LIMIT) else {
        return vec![UNREAD.to_string()];
    };
    let banner = || data.windows(UNIKRAFT_BANNER.len()).any(|w| w == UNIKRAFT_BANNER);
    let unikraft = match object::File::parse(&*data) {
        // An ELF with section headers says what it is by them; one
        // stripped of them (or cut at the read limit) by its banner.
        Ok(elf) if elf.sections().next().is_some() => elf
            .sections()
            .any(|s| s.name().is_ok_and(|n| UNIKRAFT_SECTIONS.contains(&n))),
        _ => banner(),
    };
    if unikraft {
        vec![UNIKRAFT.to_string()]
    } else {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn the_kernel_is_found_in_each_vmms_arguments() {
        let (root, cwd) = (Path::new("/proc/7/root"), Path::new("/proc/7/cwd"));
        assert_eq!(
            kernel_image(&args("qemu-system-x86_64 -accel kvm -kernel uk -m 64"), root, cwd),
            Some(PathBuf::from("/proc/7/cwd/uk"))
        );
        assert_eq!(
            kernel_image(&args("cloud-hypervisor --kernel=/boot/vmlinux"), root, cwd),
            Some(PathBuf::from("/proc/7/root/boot/vmlinux"))
        );
        assert_eq!(kernel_image(&args("qemu-system-x86_64 -hda disk.img"), root, cwd), None);
        let dir = std::env::temp_dir().join(format!("vtrace-image-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        fs::write(
            dir.join("fc.json"),
            r#"{"boot-source": {"kernel_image_path": "vmlinux", "boot_args": "console=ttyS0"}}"#,
        )
        .unwrap();
        assert_eq!(
            kernel_image(&args("firecracker --api-sock /tmp/a --config-file fc.json"), root, &dir),
            Some(dir.join("vmlinux"))
        );
        // A configuration that is no regular file is not read (it could block).
        assert_eq!(
            kernel_image(&args("firecracker --config-file /dev/stdin"), Path::new("/"), &dir),
            None
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_image_is_unikraft_by_its_sections_or_banner_not_its_name() {
        let dir = std::env::temp_dir().join(format!("vtrace-marks-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        // An ELF file with sections, none of them Unikraft's, under a unikernel's name.
        let named = dir.join("app_qemu-x86_64-unikraft");
        fs::copy("/bin/true", &named).unwrap();
        assert!(marks(&named).is_empty());
        // A raw image with the banner.
        let raw = dir.join("k");
        fs::write(&raw, b"\x00\x01boot...Unikraft Telesto (0.16.3)\n...").unwrap();
        assert_eq!(marks(&raw), vec![UNIKRAFT.to_string()]);
        // Rewritten (another length): read again.
        fs::write(&raw, b"\x00\x01Linux version 6.1.0 ...").unwrap();
        assert!(marks(&raw).is_empty());
        assert_eq!(marks(&dir.join("missing")), vec![UNREAD.to_string()]);
        assert_eq!(marks(Path::new("/dev/null")), vec![UNREAD.to_string()]);
        // A VMM configured over its API names no image: unread.
        assert_eq!(
            marks_of_process(1, &args("firecracker --api-sock /run/fc.sock")),
            vec![UNREAD.to_string()]
        );
        assert!(marks_of_process(1, &args("redis-server --port 6379")).is_empty());
        fs::remove_dir_all(&dir).unwrap();
    }
}
