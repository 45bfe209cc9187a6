//! The probe registry: every probe point vtrace knows, its layer, and its
//! attach strategies in order of preference. Each strategy names the eBPF
//! program (in `vtrace-ebpf/src/<family>.rs`) that implements it.

use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Layer {
    Sched,
    Irq,
    Softirq,
    Syscall,
    Kvm,
    Vmm,
    Vhost,
    Tun,
    Net,
    Fs,
    Block,
    Uprobe,
    Sample,
}

impl Layer {
    pub fn name(self) -> &'static str {
        match self {
            Layer::Sched => "sched",
            Layer::Irq => "irq",
            Layer::Softirq => "softirq",
            Layer::Syscall => "syscall",
            Layer::Kvm => "kvm",
            Layer::Vmm => "vmm",
            Layer::Vhost => "vhost",
            Layer::Tun => "tun",
            Layer::Net => "net",
            Layer::Fs => "fs",
            Layer::Block => "block",
            Layer::Uprobe => "uprobe",
            Layer::Sample => "sample",
        }
    }
}

/// What `record --layers` switches on and off. The CPU engine (sched,
/// syscalls, interrupts) is always on: every other figure is charged to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LayerGroup {
    Cpu,
    /// Device hops, tun/tap and vhost, drops.
    Net,
    /// KVM exits, user-space exits, port/MMIO and interrupt events.
    Kvm,
    /// User-space functions of known stacks and VMMs (lwIP, QEMU).
    Uprobe,
}

impl LayerGroup {
    pub const ALL: [LayerGroup; 4] = [LayerGroup::Cpu, LayerGroup::Net, LayerGroup::Kvm, LayerGroup::Uprobe];

    pub fn of(layer: Layer) -> LayerGroup {
        match layer {
            Layer::Net | Layer::Tun | Layer::Vhost => LayerGroup::Net,
            Layer::Kvm => LayerGroup::Kvm,
            Layer::Vmm | Layer::Uprobe => LayerGroup::Uprobe,
            Layer::Sched | Layer::Irq | Layer::Softirq | Layer::Syscall | Layer::Fs | Layer::Block | Layer::Sample => {
                LayerGroup::Cpu
            }
        }
    }
}

/// One way to attach a probe. Ordered best-first in [`ProbeSpec::strategies`]:
/// fentry (cheapest, typed) > kprobe > tp_btf > raw_tp > tracepoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    FEntry {
        program: &'static str,
        function: &'static str,
    },
    KProbe {
        program: &'static str,
        function: &'static str,
    },
    BtfTracepoint {
        program: &'static str,
        tracepoint: &'static str,
    },
    RawTracepoint {
        program: &'static str,
        tracepoint: &'static str,
    },
    Tracepoint {
        program: &'static str,
        category: &'static str,
        name: &'static str,
    },
    /// A user-space function in `binary` (a path, or a file name searched in
    /// the usual library and binary directories); `size` tells what a call handles.
    UProbe {
        program: &'static str,
        binary: &'static str,
        symbol: &'static str,
        size: UprobeSize,
    },
}

/// Where a uprobe reads the size of what a call handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UprobeSize {
    None,
    /// An integer argument.
    Arg(u32),
    /// tot_len of an lwIP `struct pbuf *` argument.
    PbufArg(u32),
}

impl Strategy {
    pub fn method(&self) -> &'static str {
        match self {
            Strategy::FEntry { .. } => "fentry",
            Strategy::KProbe { .. } => "kprobe",
            Strategy::BtfTracepoint { .. } => "tp_btf",
            Strategy::RawTracepoint { .. } => "raw_tp",
            Strategy::Tracepoint { .. } => "tracepoint",
            Strategy::UProbe { program, .. } if program.starts_with("uret") => "uretprobe",
            Strategy::UProbe { .. } => "uprobe",
        }
    }

    pub fn program(&self) -> &'static str {
        match *self {
            Strategy::FEntry { program, .. }
            | Strategy::KProbe { program, .. }
            | Strategy::BtfTracepoint { program, .. }
            | Strategy::RawTracepoint { program, .. }
            | Strategy::Tracepoint { program, .. }
            | Strategy::UProbe { program, .. } => program,
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct ProbeSpec {
    pub id: &'static str,
    pub layer: Layer,
    pub what: &'static str,
    pub strategies: &'static [Strategy],
}

/// raw_tp first (no record formatting, args straight from TP_PROTO), the
/// classic tracepoint as fallback (kernels without raw_tp, or a raw_tp that
/// fails to attach). With a leading `tp_btf`, a tp_btf program comes first:
/// BTF-typed arguments, so it reads the structs they point to with plain
/// loads instead of helper calls.
macro_rules! tracepoint_probe {
    ($($typed:ident)? $id:literal, $layer:expr, $what:literal, $category:literal) => {
        ProbeSpec {
            id: $id,
            layer: $layer,
            what: $what,
            strategies: &[
                $(tracepoint_probe!(@$typed $id),)?
                Strategy::RawTracepoint {
                    program: concat!("raw_", $id),
                    tracepoint: $id,
                },
                Strategy::Tracepoint {
                    program: concat!("tp_", $id),
                    category: $category,
                    name: $id,
                },
            ],
        }
    };
    (@tp_btf $id:literal) => {
        Strategy::BtfTracepoint {
            program: concat!("btf_", $id),
            tracepoint: $id,
        }
    };
}

/// A kvm/* event read through its classic record (fields at offsets from
/// its format file): rare enough per second that the record costs little.
macro_rules! kvm_tracepoint {
    ($id:literal, $what:literal) => {
        ProbeSpec {
            id: $id,
            layer: Layer::Kvm,
            what: $what,
            strategies: &[Strategy::Tracepoint {
                program: concat!("tp_", $id),
                category: "kvm",
                name: $id,
            }],
        }
    };
}

/// A uprobe catalog entry on a function of a well-known binary.
macro_rules! uprobe_probe {
    ($id:literal, $layer:expr, $what:literal, $binary:literal, $symbol:literal, $size:expr) => {
        ProbeSpec {
            id: $id,
            layer: $layer,
            what: $what,
            strategies: &[Strategy::UProbe {
                program: "uprobe_call",
                binary: $binary,
                symbol: $symbol,
                size: $size,
            }],
        }
    };
}

/// A kernel function probed by fentry, else kprobe.
macro_rules! kfunc_probe {
    ($id:literal, $layer:expr, $what:literal, $function:literal, $fentry:literal, $kprobe:literal) => {
        ProbeSpec {
            id: $id,
            layer: $layer,
            what: $what,
            strategies: &[
                Strategy::FEntry {
                    program: $fentry,
                    function: $function,
                },
                Strategy::KProbe {
                    program: $kprobe,
                    function: $function,
                },
            ],
        }
    };
}

/// Every probe point, in attach order. Probes of the CPU attribution engine
/// come first, and each `*_exit` precedes its `*_entry`: attaching a probe
/// patches kernel text with IPIs, so an entry attached before its exit would
/// see interrupts whose end it never sees. An exit without an entry is ignored.
pub const CATALOG: &[ProbeSpec] = &[
    tracepoint_probe!(
        tp_btf "sched_switch",
        Layer::Sched,
        "context switch: flushes per-thread CPU time",
        "sched"
    ),
    tracepoint_probe!(
        "sched_process_fork",
        Layer::Sched,
        "thread creation: new threads are tracked from birth",
        "sched"
    ),
    tracepoint_probe!(
        "sched_process_exit",
        Layer::Sched,
        "thread exit: totals of exited threads are kept",
        "sched"
    ),
    tracepoint_probe!("sys_exit", Layer::Syscall, "system -> user transition", "raw_syscalls"),
    tracepoint_probe!("sys_enter", Layer::Syscall, "user -> system transition", "raw_syscalls"),
    tracepoint_probe!("irq_handler_exit", Layer::Irq, "device interrupt handler end", "irq"),
    tracepoint_probe!("irq_handler_entry", Layer::Irq, "device interrupt handler start", "irq"),
    tracepoint_probe!(
        "local_timer_exit",
        Layer::Irq,
        "x86 local APIC timer interrupt end",
        "irq_vectors"
    ),
    tracepoint_probe!(
        "local_timer_entry",
        Layer::Irq,
        "x86 local APIC timer interrupt start",
        "irq_vectors"
    ),
    tracepoint_probe!("reschedule_exit", Layer::Irq, "x86 reschedule IPI end", "irq_vectors"),
    tracepoint_probe!(
        "reschedule_entry",
        Layer::Irq,
        "x86 reschedule IPI start",
        "irq_vectors"
    ),
    tracepoint_probe!(
        "call_function_exit",
        Layer::Irq,
        "x86 function call IPI end",
        "irq_vectors"
    ),
    tracepoint_probe!(
        "call_function_entry",
        Layer::Irq,
        "x86 function call IPI start",
        "irq_vectors"
    ),
    tracepoint_probe!(
        "call_function_single_exit",
        Layer::Irq,
        "x86 single function call IPI end",
        "irq_vectors"
    ),
    tracepoint_probe!(
        "call_function_single_entry",
        Layer::Irq,
        "x86 single function call IPI start",
        "irq_vectors"
    ),
    tracepoint_probe!("irq_work_exit", Layer::Irq, "x86 irq work interrupt end", "irq_vectors"),
    tracepoint_probe!(
        "irq_work_entry",
        Layer::Irq,
        "x86 irq work interrupt start",
        "irq_vectors"
    ),
    tracepoint_probe!("softirq_exit", Layer::Softirq, "softirq end (per vector)", "irq"),
    tracepoint_probe!("softirq_entry", Layer::Softirq, "softirq start (per vector)", "irq"),
    tracepoint_probe!(
        tp_btf "net_dev_queue",
        Layer::Net,
        "packet handed to a device's queue (transmit)",
        "net"
    ),
    ProbeSpec {
        id: "net_dev_start_xmit",
        layer: Layer::Net,
        what: "packet given to the driver",
        strategies: &[
            Strategy::BtfTracepoint {
                program: "btf_net_dev_start_xmit",
                tracepoint: "net_dev_start_xmit",
            },
            Strategy::RawTracepoint {
                program: "raw_net_dev_start_xmit",
                tracepoint: "net_dev_start_xmit",
            },
        ],
    },
    tracepoint_probe!(
        tp_btf "net_dev_xmit",
        Layer::Net,
        "driver took the packet (or refused it)",
        "net"
    ),
    tracepoint_probe!(
        tp_btf "netif_rx",
        Layer::Net,
        "packet queued for receive (veth, tun/tap, backlog)",
        "net"
    ),
    tracepoint_probe!(
        tp_btf "netif_receive_skb",
        Layer::Net,
        "packet enters the protocol stack; NET_RX time per device",
        "net"
    ),
    ProbeSpec {
        id: "napi_gro_receive_entry",
        layer: Layer::Net,
        what: "NAPI driver receive, before GRO",
        strategies: &[Strategy::RawTracepoint {
            program: "raw_napi_gro_receive_entry",
            tracepoint: "napi_gro_receive_entry",
        }],
    },
    tracepoint_probe!(
        "kfree_skb",
        Layer::Net,
        "packet dropped, with the kernel's drop reason",
        "skb"
    ),
    ProbeSpec {
        id: "napi_poll",
        layer: Layer::Net,
        what: "NAPI poll of a device: packets per poll, budget exhaustion",
        strategies: &[Strategy::RawTracepoint {
            program: "raw_napi_poll",
            tracepoint: "napi_poll",
        }],
    },
    tracepoint_probe!(
        "consume_skb",
        Layer::Net,
        "packet freed after use: ends its journey",
        "skb"
    ),
    kfunc_probe!(
        "tun:tun_get_user",
        Layer::Tun,
        "packet written to a tap by its user (VMM tx); else the tap's rx hop",
        "tun_get_user",
        "fentry_tun_get_user",
        "kprobe_tun_get_user"
    ),
    kfunc_probe!(
        "tun:tun_sendmsg",
        Layer::Tun,
        "packet sent into a tap by vhost-net",
        "tun_sendmsg",
        "fentry_tun_sendmsg",
        "kprobe_tun_sendmsg"
    ),
    kfunc_probe!(
        "tun:tun_recvmsg",
        Layer::Tun,
        "packet taken from a tap by vhost-net",
        "tun_recvmsg",
        "fentry_tun_recvmsg",
        "kprobe_tun_recvmsg"
    ),
    kfunc_probe!(
        "tun:tun_net_xmit",
        Layer::Tun,
        "packet queued to a tap for its user; else the tap's xmit hop",
        "tun_net_xmit",
        "fentry_tun_net_xmit",
        "kprobe_tun_net_xmit"
    ),
    kfunc_probe!(
        "vhost:handle_tx",
        Layer::Vhost,
        "vhost-net worker transmits guest packets",
        "handle_tx",
        "fentry_handle_tx",
        "kprobe_handle_tx"
    ),
    kfunc_probe!(
        "vhost:handle_rx",
        Layer::Vhost,
        "vhost-net worker delivers packets to the guest",
        "handle_rx",
        "fentry_handle_rx",
        "kprobe_handle_rx"
    ),
    kfunc_probe!(
        "vhost:handle_tx_kick",
        Layer::Vhost,
        "guest kicked the vhost-net tx queue",
        "handle_tx_kick",
        "fentry_handle_tx_kick",
        "kprobe_handle_tx_kick"
    ),
    kfunc_probe!(
        "vhost:handle_rx_kick",
        Layer::Vhost,
        "guest kicked the vhost-net rx queue",
        "handle_rx_kick",
        "fentry_handle_rx_kick",
        "kprobe_handle_rx_kick"
    ),
    uprobe_probe!(
        "lwip:lwip_send",
        Layer::Uprobe,
        "lwIP socket send (bytes asked)",
        "liblwip.so.0",
        "lwip_send",
        UprobeSize::Arg(2)
    ),
    uprobe_probe!(
        "lwip:tcp_write",
        Layer::Uprobe,
        "lwIP TCP enqueue (bytes)",
        "liblwip.so.0",
        "tcp_write",
        UprobeSize::Arg(2)
    ),
    uprobe_probe!(
        "lwip:tcp_output",
        Layer::Uprobe,
        "lwIP TCP output",
        "liblwip.so.0",
        "tcp_output",
        UprobeSize::None
    ),
    uprobe_probe!(
        "lwip:ip4_output",
        Layer::Uprobe,
        "lwIP IPv4 output (packet bytes)",
        "liblwip.so.0",
        "ip4_output",
        UprobeSize::PbufArg(0)
    ),
    uprobe_probe!(
        "lwip:etharp_output",
        Layer::Uprobe,
        "lwIP ARP/Ethernet output (packet bytes)",
        "liblwip.so.0",
        "etharp_output",
        UprobeSize::PbufArg(1)
    ),
    uprobe_probe!(
        "lwip:ethernet_output",
        Layer::Uprobe,
        "lwIP Ethernet output (frame bytes)",
        "liblwip.so.0",
        "ethernet_output",
        UprobeSize::PbufArg(1)
    ),
    uprobe_probe!(
        "qemu:virtio_queue_notify",
        Layer::Vmm,
        "guest kicked a virtqueue (VMM backend)",
        "qemu-system-x86_64",
        "virtio_queue_notify",
        UprobeSize::None
    ),
    uprobe_probe!(
        "qemu:virtio_notify",
        Layer::Vmm,
        "VMM notifies the guest (interrupt)",
        "qemu-system-x86_64",
        "virtio_notify",
        UprobeSize::None
    ),
    uprobe_probe!(
        "qemu:virtio_notify_irqfd",
        Layer::Vmm,
        "VMM notifies the guest through an irqfd",
        "qemu-system-x86_64",
        "virtio_notify_irqfd",
        UprobeSize::None
    ),
    uprobe_probe!(
        "qemu:qemu_sendv_packet_async",
        Layer::Vmm,
        "VMM hands a guest packet to its backend (tap)",
        "qemu-system-x86_64",
        "qemu_sendv_packet_async",
        UprobeSize::None
    ),
    ProbeSpec {
        id: "kvm_exit",
        layer: Layer::Kvm,
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
        Layer::Kvm,
        "vCPU enters the guest: guest time starts, exit latency ends",
        "kvm"
    ),
    kvm_tracepoint!(
        "kvm_userspace_exit",
        "KVM_RUN returns to the VMM (reason); timed until the next KVM_RUN"
    ),
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

pub fn find(id: &str) -> Option<&'static ProbeSpec> {
    CATALOG.iter().find(|p| p.id == id)
}

/// Directories searched for a uprobe binary given by file name.
pub const UPROBE_SEARCH_PATH: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/lib/x86_64-linux-gnu",
    "/usr/lib",
    "/usr/local/lib",
    "/usr/bin",
    "/usr/local/bin",
    "/usr/sbin",
    "/bin",
];

/// Resolves a uprobe binary: a path as is, a file name in [`UPROBE_SEARCH_PATH`].
pub fn resolve_binary(binary: &str) -> Option<std::path::PathBuf> {
    if binary.contains('/') {
        let p = std::path::PathBuf::from(binary);
        return p.exists().then_some(p);
    }
    UPROBE_SEARCH_PATH
        .iter()
        .map(|d| std::path::Path::new(d).join(binary))
        .find(|p| p.exists())
}

/// `--uprobe BINARY:SYMBOL[:ret]`: a probe for any function (the return
/// probe adds latency). Strings live for the rest of the run.
pub fn user_uprobe(spec: &str) -> Result<Vec<ProbeSpec>, String> {
    let parts: Vec<&str> = spec.split(':').collect();
    let (binary, symbol, ret) = match parts.as_slice() {
        [b, s] => (*b, *s, false),
        [b, s, "ret"] => (*b, *s, true),
        _ => return Err(format!("--uprobe {spec}: expected BINARY:SYMBOL or BINARY:SYMBOL:ret")),
    };
    if binary.is_empty() || symbol.is_empty() {
        return Err(format!("--uprobe {spec}: expected BINARY:SYMBOL or BINARY:SYMBOL:ret"));
    }
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    let base = std::path::Path::new(binary)
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (binary, symbol) = (leak(binary.to_string()), leak(symbol.to_string()));
    let mut out = vec![ProbeSpec {
        id: leak(format!("uprobe:{base}:{symbol}")),
        layer: Layer::Uprobe,
        what: "user-requested uprobe",
        strategies: Box::leak(Box::new([Strategy::UProbe {
            program: "uprobe_call",
            binary,
            symbol,
            size: UprobeSize::None,
        }])),
    }];
    if ret {
        // Must follow the entry probe: slots are given in order, and the
        // return program finds the entry time under the previous slot.
        out.push(ProbeSpec {
            id: leak(format!("uretprobe:{base}:{symbol}")),
            layer: Layer::Uprobe,
            what: "user-requested return probe (latency)",
            strategies: Box::leak(Box::new([Strategy::UProbe {
                program: "uretprobe_call",
                binary,
                symbol,
                size: UprobeSize::None,
            }])),
        });
    }
    Ok(out)
}
