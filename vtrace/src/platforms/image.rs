//! What a VMM boots: the guest kernel image named in its arguments, and the
//! marks its contents carry. A unikernel is known by what its image holds
//! (Unikraft's own ELF sections, or its banner), not by what a user named
//! the file. Each image is read once per file version, however many
//! snapshots see its VMM.

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

/// Sections only Unikraft's linker scripts make: its init, constructor and
/// event tables.
const UNIKRAFT_SECTIONS: &[&str] = &[".uk_inittab", ".uk_ctortab", ".uk_eventtab"];
/// Unikraft's banner (`Unikraft Telesto (0.16.3)`), for an image that is not
/// an ELF file or has lost its section headers.
const UNIKRAFT_BANNER: &[u8] = b"Unikraft ";
/// The most of an image read (unikernels are a few MiB).
const IMAGE_READ_LIMIT: u64 = 64 << 20;

/// The guest kernel image in a VMM's arguments: QEMU's `-kernel PATH`,
/// Cloud Hypervisor's `--kernel PATH`, or the `boot-source` of
/// Firecracker's `--config-file PATH`. A relative path is the process's
/// (`cwd`).
pub fn kernel_image(args: &[String], cwd: &Path) -> Option<PathBuf> {
    let value = |name: &str| {
        args.iter().enumerate().find_map(|(i, a)| {
            if a == name {
                args.get(i + 1).cloned()
            } else {
                a.strip_prefix(name)?.strip_prefix('=').map(str::to_string)
            }
        })
    };
    let in_cwd = |p: &str| cwd.join(p);
    if let Some(kernel) = value("-kernel").or_else(|| value("--kernel")) {
        return Some(in_cwd(&kernel));
    }
    let config = in_cwd(&value("--config-file")?);
    let json: serde_json::Value = serde_json::from_slice(&fs::read(config).ok()?).ok()?;
    json["boot-source"]["kernel_image_path"].as_str().map(in_cwd)
}

/// An image read: its path, length and time of change, and its marks.
type ReadImage = (PathBuf, u64, Option<SystemTime>, Vec<String>);

/// The marks of the image at `path` ([`UNIKRAFT`]), empty when it carries
/// none or cannot be read.
pub fn marks(path: &Path) -> Vec<String> {
    static SEEN: Mutex<Vec<ReadImage>> = Mutex::new(Vec::new());
    let Ok(meta) = fs::metadata(path) else {
        return Vec::new();
    };
    let version = (meta.len(), meta.modified().ok());
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((.., marks)) = seen.iter().find(|(p, len, at, _)| p == path && (*len, *at) == version) {
        return marks.clone();
    }
    let marks = read_marks(path);
    seen.retain(|(p, ..)| p != path);
    seen.push((path.to_path_buf(), version.0, version.1, marks.clone()));
    marks
}

fn read_marks(path: &Path) -> Vec<String> {
    let mut data = Vec::new();
    let read = fs::File::open(path).and_then(|f| f.take(IMAGE_READ_LIMIT).read_to_end(&mut data));
    if read.is_err() {
        return Vec::new();
    }
    let unikraft = match object::File::parse(&*data) {
        Ok(elf) => elf
            .sections()
            .any(|s| s.name().is_ok_and(|n| UNIKRAFT_SECTIONS.contains(&n))),
        Err(_) => data.windows(UNIKRAFT_BANNER.len()).any(|w| w == UNIKRAFT_BANNER),
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
        let cwd = Path::new("/h");
        assert_eq!(
            kernel_image(&args("qemu-system-x86_64 -accel kvm -kernel uk -m 64"), cwd),
            Some(PathBuf::from("/h/uk"))
        );
        assert_eq!(
            kernel_image(&args("cloud-hypervisor --kernel=/boot/vmlinux"), cwd),
            Some(PathBuf::from("/boot/vmlinux"))
        );
        assert_eq!(kernel_image(&args("qemu-system-x86_64 -hda disk.img"), cwd), None);
        let dir = std::env::temp_dir().join(format!("vtrace-image-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        fs::write(
            dir.join("fc.json"),
            r#"{"boot-source": {"kernel_image_path": "vmlinux", "boot_args": "console=ttyS0"}}"#,
        )
        .unwrap();
        assert_eq!(
            kernel_image(&args("firecracker --api-sock /tmp/a --config-file fc.json"), &dir),
            Some(dir.join("vmlinux"))
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_image_is_unikraft_by_its_sections_or_banner_not_its_name() {
        let dir = std::env::temp_dir().join(format!("vtrace-marks-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        // This test binary is an ELF file without Unikraft's sections.
        let own = std::env::current_exe().unwrap();
        let named = dir.join("app_qemu-x86_64-unikraft");
        fs::copy(&own, &named).unwrap();
        assert!(marks(&named).is_empty());
        // A raw image with the banner.
        let raw = dir.join("k");
        fs::write(&raw, b"\x00\x01boot...Unikraft Telesto (0.16.3)\n...").unwrap();
        assert_eq!(marks(&raw), vec![UNIKRAFT.to_string()]);
        // Rewritten (another length): read again.
        fs::write(&raw, b"\x00\x01Linux version 6.1.0 ...").unwrap();
        assert!(marks(&raw).is_empty());
        assert!(marks(&dir.join("missing")).is_empty());
        fs::remove_dir_all(&dir).unwrap();
    }
}
