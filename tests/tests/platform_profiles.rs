//! Profile matching on captured /proc and sysfs snapshots of each platform,
//! including those this machine cannot run (Firecracker, Kata, Unikraft,
//! SR-IOV), built from their documented process and thread names.

use std::collections::BTreeMap;

use serde_json::Value;
use vtrace::platforms::{self, SystemSnapshot};

fn check_fixture(name: &str) {
    let path = format!("{}/fixtures/platforms/{name}.json", env!("CARGO_MANIFEST_DIR"));
    let fixture: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let snap: SystemSnapshot = serde_json::from_value(fixture["snapshot"].clone()).expect("snapshot parses");
    let profiles = platforms::profiles(None).unwrap();
    let found = platforms::detect(&profiles, &snap);
    let expect = fixture["expect"].as_array().unwrap();
    assert_eq!(
        found.len(),
        expect.len(),
        "{name}: found {:?}",
        found.iter().map(|i| &i.id).collect::<Vec<_>>()
    );
    for e in expect {
        let root = e["root_pid"].as_u64().unwrap() as u32;
        let inst = found
            .iter()
            .find(|i| i.root_pid == root)
            .unwrap_or_else(|| panic!("{name}: no instance rooted at {root}"));
        assert_eq!(inst.platform, e["platform"], "{name}");
        if let Some(id) = e["id"].as_str() {
            assert_eq!(inst.id, id, "{name}");
        }
        assert_eq!(inst.variant, e["variant"], "{name}");
        let roles: BTreeMap<String, String> = inst
            .threads
            .iter()
            .map(|t| (t.tid.to_string(), t.role.clone()))
            .collect();
        let want: BTreeMap<String, String> = serde_json::from_value(e["roles"].clone()).unwrap();
        assert_eq!(roles, want, "{name}: thread roles of {}", inst.id);
        let devices: BTreeMap<String, String> = inst.devices.iter().map(|d| (d.name.clone(), d.role.clone())).collect();
        let want: BTreeMap<String, String> = serde_json::from_value(e["devices"].clone()).unwrap();
        assert_eq!(devices, want, "{name}: devices of {}", inst.id);
    }
}

#[test]
fn firecracker() {
    check_fixture("firecracker");
}

#[test]
fn kata_with_qemu_and_vhost() {
    check_fixture("kata");
}

#[test]
fn unikraft_vhost_and_virtio_variants() {
    check_fixture("unikraft");
}

#[test]
fn sriov() {
    check_fixture("sriov");
}

#[test]
fn gvisor() {
    check_fixture("gvisor");
}

#[test]
fn docker() {
    check_fixture("docker");
}

#[test]
fn runc_crun_and_lxc() {
    check_fixture("runc-crun-lxc");
}

#[test]
fn linuxvm() {
    check_fixture("linuxvm");
}

#[test]
fn cgroup_paths_root_instances() {
    let profiles: Vec<platforms::Profile> = toml_profiles(
        r#"
[[platform]]
name = "podman"
  [[platform.root]]
  cgroup = ["/machine.slice/libpod-*"]
"#,
    );
    let snap: SystemSnapshot = serde_json::from_value(serde_json::json!({
        "processes": [
            {"pid": 20, "ppid": 1, "comm": "redis-server", "cgroup": "/machine.slice/libpod-ab12.scope", "threads": [{"tid": 20, "comm": "redis-server"}]},
            {"pid": 30, "ppid": 1, "comm": "redis-server", "cgroup": "/user.slice", "threads": [{"tid": 30, "comm": "redis-server"}]}
        ]
    }))
    .unwrap();
    let found = platforms::detect(&profiles, &snap);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].root_pid, 20);
}

fn toml_profiles(text: &str) -> Vec<platforms::Profile> {
    let path = std::env::temp_dir().join(format!("vtrace-cg-profile-{}.toml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    let all = platforms::profiles(Some(&path)).unwrap();
    std::fs::remove_file(&path).unwrap();
    all.into_iter().filter(|p| p.name == "podman").collect()
}

#[test]
fn user_profile_file_adds_a_platform() {
    let file = r#"
[[platform]]
name = "myvmm"
default_role = "vmm"
  [[platform.root]]
  comm = ["myvmm"]
  [[platform.role]]
  thread = ["vcpu-*"]
  role = "vcpu"
"#;
    let dir = std::env::temp_dir().join(format!("vtrace-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("p.toml");
    std::fs::write(&path, file).unwrap();
    let profiles = platforms::profiles(Some(&path)).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let snap: SystemSnapshot = serde_json::from_value(serde_json::json!({
        "processes": [{"pid": 10, "ppid": 1, "comm": "myvmm", "threads": [{"tid": 10, "comm": "myvmm"}, {"tid": 11, "comm": "vcpu-0"}]}]
    }))
    .unwrap();
    let found = platforms::detect(&profiles, &snap);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].role_of(11), Some("vcpu"));
    assert_eq!(found[0].role_of(10), Some("vmm"));
    // A malformed file is named in the error.
    let bad = profiles_error("[[platform]]\nnam = 1\n");
    assert!(bad.contains("bad platform profiles in --platform-file"), "{bad}");
}

fn profiles_error(text: &str) -> String {
    let path = std::env::temp_dir().join(format!("vtrace-bad-profile-{}.toml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    let e = platforms::profiles(Some(&path)).unwrap_err().to_string();
    std::fs::remove_file(&path).unwrap();
    e
}
