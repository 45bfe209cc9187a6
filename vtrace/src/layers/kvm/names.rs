//! Names for what the KVM layer counts: exit reasons and access types from
//! the running kernel's own tracepoint formats (so they never drift from the
//! kernel that produced the numbers), well-known ports and MMIO windows.

use std::{collections::HashMap, path::Path};

use vtrace_common::{KVM_RUN_INTERRUPTED, KvmLatencyKey, kvm_event, kvm_latency};

/// Names of exit reasons and access types, parsed from the `__print_symbolic`
/// tables in the running kernel's kvm/* format files, so they never drift
/// from the kernel that produced the numbers.
#[derive(Clone, Debug, Default)]
pub struct ReasonNames {
    pub vmx: HashMap<u32, String>,
    pub svm: HashMap<u32, String>,
    /// KVM_EXIT_* without the prefix (IO, MMIO, HLT, ...).
    pub userspace: HashMap<u32, String>,
    pub mmio_type: HashMap<u32, String>,
}

impl ReasonNames {
    pub fn from_tracefs(tracefs: &Path) -> Self {
        let fmt = |event: &str| {
            std::fs::read_to_string(tracefs.join("events/kvm").join(event).join("format")).unwrap_or_default()
        };
        let exit = symbolic_tables(&fmt("kvm_exit"));
        // kvm_exit prints `(REC->isa == 1) ? VMX table : SVM table`.
        let mut exit = exit.into_iter();
        let userspace = symbolic_tables(&fmt("kvm_userspace_exit"))
            .into_iter()
            .next()
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.strip_prefix("KVM_EXIT_").map(str::to_string).unwrap_or(v)))
            .collect();
        ReasonNames {
            vmx: exit.next().unwrap_or_default(),
            svm: exit.next().unwrap_or_default(),
            userspace,
            mmio_type: symbolic_tables(&fmt("kvm_mmio")).into_iter().next().unwrap_or_default(),
        }
    }

    /// Name of a KVM_EXIT_* reason (or of an interrupted KVM_RUN).
    pub fn userspace_name(&self, reason: u32) -> String {
        if reason == KVM_RUN_INTERRUPTED {
            return "INTERRUPTED".into();
        }
        self.userspace
            .get(&reason)
            .cloned()
            .unwrap_or_else(|| format!("reason_{reason}"))
    }

    /// ("vmx" | "svm" | "", name) of a latency key's reason.
    pub fn name(&self, k: &KvmLatencyKey) -> (&'static str, String) {
        let lookup = |table: &HashMap<u32, String>, reason: u32| {
            table
                .get(&reason)
                .cloned()
                .unwrap_or_else(|| format!("reason_{reason}"))
        };
        match k.kind {
            kvm_latency::EXIT if k.reason == u32::MAX => ("", "unknown (raw_tp)".into()),
            kvm_latency::EXIT if k.isa == 1 => ("vmx", lookup(&self.vmx, k.reason)),
            kvm_latency::EXIT => ("svm", lookup(&self.svm, k.reason)),
            kvm_latency::USERSPACE => ("", self.userspace_name(k.reason)),
            _ => ("", if k.reason == 1 { "wait" } else { "poll" }.into()),
        }
    }
}

/// Every `__print_symbolic(expr, { value, "name" }, ...)` table of a format
/// file's print fmt, in order. Values may be sums (`0x040 + 14`); names may
/// be concatenated literals (`"KVM_EXIT_" "IO"`).
pub fn symbolic_tables(format: &str) -> Vec<HashMap<u32, String>> {
    let mut tables = Vec::new();
    let mut rest = format;
    while let Some(at) = rest.find("__print_symbolic(") {
        rest = &rest[at + "__print_symbolic(".len()..];
        let mut table = HashMap::new();
        // Entries until the call's closing parenthesis.
        let mut s = rest;
        loop {
            s = s.trim_start_matches([' ', ',', '\n', '\t']);
            if s.starts_with(')') || s.is_empty() {
                break;
            }
            if let Some(body) = s.strip_prefix('{') {
                let Some(end) = body.find('}') else { break };
                if let Some((value, name)) = parse_entry(&body[..end]) {
                    table.insert(value, name);
                }
                s = &body[end + 1..];
            } else {
                // The expression being decoded: skip to the first entry or the end.
                match s.find(['{', ')']) {
                    Some(i) => s = &s[i..],
                    None => break,
                }
                if s.starts_with(')') {
                    // `(REC->x & 0xffff)`-style nested parenthesis before the entries.
                    s = &s[1..];
                }
            }
        }
        rest = s;
        tables.push(table);
    }
    tables
}

fn parse_entry(entry: &str) -> Option<(u32, String)> {
    let (value, name) = entry.split_once(',')?;
    let value = value
        .split('+')
        .map(|t| {
            let t = t.trim();
            match t.strip_prefix("0x") {
                Some(h) => u32::from_str_radix(h, 16).ok(),
                None => t.parse().ok(),
            }
        })
        .sum::<Option<u32>>()?;
    let name: String = name.split('"').skip(1).step_by(2).collect();
    Some((value, name))
}

/// Well-known x86 port ranges (PC platform, QEMU and Firecracker devices).
const PORTS: &[(u32, u32, &str)] = &[
    (0x20, 0x21, "pic-master"),
    (0x40, 0x43, "pit"),
    (0x60, 0x64, "i8042"),
    (0x70, 0x71, "rtc-cmos"),
    (0x80, 0x80, "post-debug"),
    (0x92, 0x92, "port92-a20"),
    (0xa0, 0xa1, "pic-slave"),
    (0x2f8, 0x2ff, "serial-com2"),
    (0x3c0, 0x3df, "vga"),
    (0x3f8, 0x3ff, "serial-com1"),
    (0x402, 0x402, "isa-debugcon"),
    (0x510, 0x51b, "fw_cfg"),
    (0x600, 0x63f, "acpi-pm"),
    (0xcf8, 0xcff, "pci-config"),
];

/// What is at port or guest-physical address `addr` (an event's `op` as
/// the kvm_events key holds it), where that is known without the VMM's
/// help; else empty (the raw address stands).
pub fn device_at(kind: u32, addr: u64, op: u32) -> String {
    match kind {
        kvm_event::PIO if op >> kvm_event::PIO_QUEUE_SHIFT != 0 => format!(
            "virtio-pci notify (legacy), queue {}",
            (op >> kvm_event::PIO_QUEUE_SHIFT) - 1
        ),
        kvm_event::PIO => PORTS
            .iter()
            .find(|(lo, hi, _)| (*lo as u64..=*hi as u64).contains(&addr))
            .map_or("", |p| p.2)
            .into(),
        kvm_event::MMIO | kvm_event::FAST_MMIO => match addr {
            0xfee0_0000..=0xfeef_ffff => "local-apic",
            0xfec0_0000..=0xfec0_0fff => "ioapic",
            0xfed0_0000..=0xfed0_03ff => "hpet",
            // Firecracker's virtio-mmio devices (x86_64): a 4 KiB window
            // each from 0xc000_1000 (its layout's MMIO32_MEM_START plus a
            // page); offset 0x50 is QueueNotify, the guest's kick.
            0xc000_1000..=0xc0ff_ffff if addr & 0xfff == 0x50 => "virtio-mmio notify (firecracker)",
            0xc000_1000..=0xc0ff_ffff => "virtio-mmio (firecracker)",
            _ => "",
        }
        .into(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against the real format files of the running kernel.
    #[test]
    fn names_exit_reasons_from_this_kernel() {
        let tracefs = crate::probes::capabilities::ensure_tracefs().expect("tracefs (run as root)");
        assert!(
            tracefs.join("events/kvm/kvm_exit/format").exists(),
            "no kvm tracepoints on this kernel: load kvm (kvm_intel, kvm_amd or kvm_pvm)"
        );
        let n = ReasonNames::from_tracefs(&tracefs);
        // VMX basic exit reasons (SDM Appendix C) and SVM exit codes (APM vol. 2).
        assert_eq!(n.vmx.get(&12).map(String::as_str), Some("HLT"));
        assert_eq!(n.vmx.get(&30).map(String::as_str), Some("IO_INSTRUCTION"));
        assert_eq!(n.vmx.get(&48).map(String::as_str), Some("EPT_VIOLATION"));
        assert_eq!(n.svm.get(&0x078).map(String::as_str), Some("hlt"));
        assert_eq!(n.svm.get(&0x07b).map(String::as_str), Some("io"));
        assert_eq!(n.svm.get(&(0x040 + 14)).map(String::as_str), Some("PF excp"));
        assert!(
            n.vmx.len() > 50 && n.svm.len() > 50,
            "{} vmx / {} svm",
            n.vmx.len(),
            n.svm.len()
        );
        assert_eq!(n.userspace.get(&2).map(String::as_str), Some("IO"));
        assert_eq!(n.userspace.get(&5).map(String::as_str), Some("HLT"));
        assert_eq!(n.userspace.get(&6).map(String::as_str), Some("MMIO"));
        assert_eq!(n.mmio_type.get(&2).map(String::as_str), Some("write"));
        let key = KvmLatencyKey {
            tid: 1,
            kind: kvm_latency::EXIT,
            reason: 12,
            isa: 1,
        };
        assert_eq!(n.name(&key), ("vmx", "HLT".to_string()));
    }

    #[test]
    fn parses_symbolic_tables() {
        let t = symbolic_tables(
            r#"print fmt: "%s", __print_symbolic(REC->r, { 0, "KVM_EXIT_" "UNKNOWN" }, { 0x040 + 3, "BP excp" }), x"#,
        );
        assert_eq!(t.len(), 1);
        assert_eq!(t[0][&0], "KVM_EXIT_UNKNOWN");
        assert_eq!(t[0][&0x43], "BP excp");
    }

    #[test]
    fn names_well_known_ports() {
        assert_eq!(device_at(kvm_event::PIO, 0x3f8, 1), "serial-com1");
        assert_eq!(device_at(kvm_event::PIO, 0xcfc, 0), "pci-config");
        assert_eq!(device_at(kvm_event::PIO, 0x10, 1), "");
        // Kata's QEMU: legacy virtio-net, its tx queue kicked at BAR0 0xd080 + 0x10.
        let kick = 1 | ((1 + 1) << kvm_event::PIO_QUEUE_SHIFT);
        assert_eq!(
            device_at(kvm_event::PIO, 0xd090, kick),
            "virtio-pci notify (legacy), queue 1"
        );
        assert_eq!(kvm_event::legacy_virtio_queue(0xd090, true, 2, 1), Some(1));
        // Not a kick: a read, a 32-bit write, a fixed port, offset 0x14, a port status word.
        assert_eq!(kvm_event::legacy_virtio_queue(0xd090, false, 2, 1), None);
        assert_eq!(kvm_event::legacy_virtio_queue(0xd090, true, 4, 1), None);
        assert_eq!(kvm_event::legacy_virtio_queue(0x0610, true, 2, 1), None);
        assert_eq!(kvm_event::legacy_virtio_queue(0xd094, true, 2, 1), None);
        assert_eq!(kvm_event::legacy_virtio_queue(0xc010, true, 2, 0x0a2a), None);
        assert_eq!(device_at(kvm_event::MMIO, 0xfee0_0300, 2), "local-apic");
    }
}
