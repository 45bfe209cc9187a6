//! Platform profiles (data, see profiles.toml) and the rules they hold.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The embedded profiles.
pub const EMBEDDED: &str = include_str!("profiles.toml");

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ProfileFile {
    #[serde(default)]
    pub platform: Vec<Profile>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub name: String,
    #[serde(default)]
    pub about: String,
    #[serde(default = "default_priority")]
    pub priority: i32,
    #[serde(default = "default_role")]
    pub default_role: String,
    #[serde(default)]
    pub vhost_variant: Option<String>,
    #[serde(default)]
    pub virtio_variant: Option<String>,
    /// A command-line option of the root process whose value names the
    /// instance (Kata's shims take `-id SANDBOX`): roots with the same
    /// value are one instance, `NAME:VALUE`, so the shims a sandbox runs
    /// over its life (the `start` shim, the daemon, the `delete` shim) are
    /// one instance in every sighting.
    #[serde(default)]
    pub instance_arg: Option<String>,
    #[serde(default)]
    pub root: Vec<RootRule>,
    #[serde(default)]
    pub role: Vec<RoleRule>,
}

fn default_priority() -> i32 {
    100
}

fn default_role() -> String {
    "app".into()
}

/// A process that roots an instance: every field given must match.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RootRule {
    #[serde(default)]
    pub comm: Vec<String>,
    #[serde(default)]
    pub exe: Vec<String>,
    #[serde(default)]
    pub cmdline_any: Vec<String>,
    #[serde(default)]
    pub cmdline_none: Vec<String>,
    #[serde(default)]
    pub parent_comm: Vec<String>,
    /// Globs on the process's cgroup path (e.g. "/docker/*", "*/lxc.payload.*").
    #[serde(default)]
    pub cgroup: Vec<String>,
    /// Glob of runtime state files naming the root pid.
    #[serde(default)]
    pub state_file: Option<String>,
    /// Marks, at least one of which the guest kernel image the process
    /// boots carries (`super::image`: `unikraft`).
    #[serde(default)]
    pub kernel_marks: Vec<String>,
    /// Globs, at least one of which names a thread of the process: names a
    /// program gives its own threads (Firecracker's `fc_api`) outlast a
    /// renamed binary.
    #[serde(default)]
    pub thread_any: Vec<String>,
    /// The process holds KVM vCPU file descriptors: it runs a VM, whatever
    /// the VMM is called.
    #[serde(default)]
    pub kvm_vcpus: Option<bool>,
}

/// Role of a thread: every field given must match; first matching rule wins.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleRule {
    #[serde(default)]
    pub root: Option<bool>,
    #[serde(default)]
    pub process: Vec<String>,
    #[serde(default)]
    pub thread: Vec<String>,
    #[serde(default)]
    pub cmdline_any: Vec<String>,
    pub role: String,
}

/// Shell-style glob with `*` only (names are short; no backtracking blow-up).
pub fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || !text[first.len()..].ends_with(last) || text.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

pub fn any_glob(patterns: &[String], text: &str) -> bool {
    patterns.iter().any(|p| glob(p, text))
}

/// Embedded profiles, after those of `extra` (a user's `--platform-file`), by priority.
pub fn load(extra: Option<&str>) -> Result<Vec<Profile>> {
    let parse = |text: &str, what: &str| -> Result<Vec<Profile>> {
        toml::from_str::<ProfileFile>(text)
            .map(|f| f.platform)
            .map_err(|e| Error::PlatformFile {
                what: what.into(),
                reason: e.to_string(),
            })
    };
    let mut user = match extra {
        Some(text) => parse(text, "--platform-file")?,
        None => Vec::new(),
    };
    for p in &mut user {
        // A user's profile wins over an embedded one of the same priority.
        p.priority -= 1;
    }
    let mut all = parse(EMBEDDED, "embedded profiles")?;
    all.retain(|p| !user.iter().any(|u| u.name == p.name));
    all.extend(user);
    all.sort_by_key(|p| p.priority);
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob("CPU */KVM", "CPU 0/KVM"));
        assert!(glob("qemu-system-*", "qemu-system-x86"));
        assert!(glob("fc_vcpu*", "fc_vcpu 1"));
        assert!(glob("*", ""));
        assert!(!glob("CPU */KVM", "CPU 0/TCG"));
        assert!(!glob("a*a", "a"));
        assert!(glob("exe", "exe") && !glob("exe", "exec"));
    }

    #[test]
    fn embedded_profiles_parse_and_cover_every_platform() {
        let all = load(None).unwrap();
        for name in [
            "firecracker",
            "kata",
            "unikraft",
            "linuxvm",
            "runc",
            "docker",
            "crun",
            "gvisor",
            "lxc",
            "sriov",
            "kvm-vm",
        ] {
            assert!(all.iter().any(|p| p.name == name), "{name} missing");
        }
    }
}
