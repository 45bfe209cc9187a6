//! The KVM layer's probes: exits, user-space exits, port/MMIO, interrupts, halts (vtrace-ebpf/src/kvm.rs).

use crate::probes::catalog::{ProbeSpec, Strategy, kvm_tracepoint, tracepoint_probe};

/// In attach order.
pub const KVM: &[ProbeSpec] = &[
    ProbeSpec {
        id: "kvm_exit",
        layer: "kvm",
        what: "vCPU leaves the guest: guest time ends, exit reason (VMX/SVM)",
        // The classic record carries the exit reason; the raw_tp args do not.
        strategies: &[
            Strategy::Tracepoint {
                program: "tp_kvm_exit",
                category: "kvm",
                name: "kvm_exit",
            },
            Strategy::RawTracepoint {
                program: "raw_kvm_exit",
                tracepoint: "kvm_exit",
            },
        ],
    },
    tracepoint_probe!(
        "kvm_entry",
        "kvm",
        "vCPU enters the guest: guest time starts, exit latency ends",
        "kvm"
    ),
    kvm_tracepoint!(
        "kvm_userspace_exit",
        "KVM_RUN returns to the VMM (reason); timed until the next KVM_RUN"
    ),
    ProbeSpec {
        id: "kvm_run",
        layer: "kvm",
        what: "ioctl(KVM_RUN): the VMM's handling of the last user-space exit ends",
        // A per-syscall tracepoint: no program runs for the other syscalls.
        strategies: &[Strategy::Tracepoint {
            program: "tp_sys_enter_ioctl",
            category: "syscalls",
            name: "sys_enter_ioctl",
        }],
    },
    kvm_tracepoint!(
        "kvm_pio",
        "guest port I/O handled by KVM or the VMM (port, size, direction)"
    ),
    kvm_tracepoint!("kvm_mmio", "guest MMIO access emulated (gpa, length, read/write)"),
    kvm_tracepoint!("kvm_fast_mmio", "guest MMIO write caught by an ioeventfd (virtio kick)"),
    kvm_tracepoint!("kvm_set_irq", "interrupt line raised or lowered (GSI)"),
    kvm_tracepoint!("kvm_msi_set_irq", "MSI delivered to the guest (vector)"),
    kvm_tracepoint!("kvm_inj_virq", "interrupt injected into a vCPU (vector)"),
    kvm_tracepoint!("kvm_vcpu_wakeup", "halted vCPU woke: halt time, polled or waited"),
];
