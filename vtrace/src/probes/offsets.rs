//! Kernel layout the eBPF programs need but cannot learn themselves (Rust eBPF
//! has no CO-RE): struct member offsets from BTF and tracepoint record
//! offsets from tracefs format files. Passed in as load-time globals.

use std::{fs, path::Path};

use super::Capabilities;

#[derive(Clone, Copy, Debug, Default)]
pub struct KernelOffsets {
    pub task_pid: u32,
    pub task_tgid: u32,
    pub task_flags: u32,
    pub task_runtime: u32,
    pub task_utime: u32,
    pub task_stime: u32,
    pub tp_switch_prev_state: u32,
    pub tp_switch_next_pid: u32,
    pub tp_fork_child_pid: u32,
    pub tp_irq_irq: u32,
    pub tp_softirq_vec: u32,
    pub skb_len: u32,
    pub skb_dev: u32,
    pub skb_head: u32,
    pub skb_data: u32,
    pub skb_end: u32,
    pub skb_mac_header: u32,
    pub shinfo_gso_size: u32,
    pub shinfo_gso_segs: u32,
    pub dev_ifindex: u32,
    pub dev_nd_net: u32,
    pub net_ns_inum: u32,
    pub napi_dev: u32,
    pub pt_regs_di: u32,
    /// Not an offset: 1 follows syscalls on tun fds (set when some process holds one).
    pub tun_fds_on: u32,
    /// Not an offset: 1 streams per-packet events (`record --events`).
    pub net_events_on: u32,
    /// Not an offset: 1 when the net layer is traced (NET_RX time is kept per device).
    pub net_layer_on: u32,
    pub pt_regs_si: u32,
    /// Not an offset: 1 leaves the user/system split to tick sampling (`--cpu-split ticks`).
    pub tick_split_on: u32,
    /// Not an offset: 1 times user-space exits until the next ioctl(KVM_RUN) (kvm is loaded).
    pub kvm_run_on: u32,
    /// Offsets of the [`KVM_FIELDS`] record fields, in that order.
    pub kvm_fields: [u32; KVM_FIELDS.len()],
}

/// (global, event, field) of every kvm/* record field the eBPF programs read.
const KVM_FIELDS: [(&str, &str, &str); 20] = [
    ("TP_KVM_EXIT_REASON", "kvm_exit", "exit_reason"),
    ("TP_KVM_EXIT_ISA", "kvm_exit", "isa"),
    ("TP_KVM_UEXIT_REASON", "kvm_userspace_exit", "reason"),
    ("TP_KVM_UEXIT_ERRNO", "kvm_userspace_exit", "errno"),
    ("TP_KVM_PIO_RW", "kvm_pio", "rw"),
    ("TP_KVM_PIO_PORT", "kvm_pio", "port"),
    ("TP_KVM_PIO_SIZE", "kvm_pio", "size"),
    ("TP_KVM_PIO_COUNT", "kvm_pio", "count"),
    ("TP_KVM_MMIO_TYPE", "kvm_mmio", "type"),
    ("TP_KVM_MMIO_LEN", "kvm_mmio", "len"),
    ("TP_KVM_MMIO_GPA", "kvm_mmio", "gpa"),
    ("TP_KVM_FAST_MMIO_GPA", "kvm_fast_mmio", "gpa"),
    ("TP_KVM_SET_IRQ_GSI", "kvm_set_irq", "gsi"),
    ("TP_KVM_SET_IRQ_LEVEL", "kvm_set_irq", "level"),
    ("TP_KVM_MSI_ADDRESS", "kvm_msi_set_irq", "address"),
    ("TP_KVM_MSI_DATA", "kvm_msi_set_irq", "data"),
    ("TP_KVM_INJ_VIRQ_VECTOR", "kvm_inj_virq", "vector"),
    ("TP_KVM_INJ_VIRQ_SOFT", "kvm_inj_virq", "soft"),
    ("TP_KVM_WAKEUP_NS", "kvm_vcpu_wakeup", "ns"),
    ("TP_KVM_WAKEUP_WAITED", "kvm_vcpu_wakeup", "waited"),
];

impl KernelOffsets {
    /// Resolves what the running kernel provides; what it lacks stays 0 and the
    /// strategies that need it are unavailable anyway (no BTF: no raw_tp;
    /// no tracefs: no tracepoints). The switches (`*_on`) stay 0: each layer
    /// sets its own ([`crate::layers::Layer::configure`]).
    pub fn resolve(caps: &Capabilities) -> Self {
        let mut o = KernelOffsets::default();
        if let Ok(btf) = &caps.btf {
            o.task_pid = member_offset(btf, "task_struct", "pid").unwrap_or(0);
            o.task_tgid = member_offset(btf, "task_struct", "tgid").unwrap_or(0);
            o.task_flags = member_offset(btf, "task_struct", "flags").unwrap_or(0);
            o.task_runtime = match (
                member_offset(btf, "task_struct", "se"),
                member_offset(btf, "sched_entity", "sum_exec_runtime"),
            ) {
                (Some(se), Some(rt)) => se + rt,
                _ => 0,
            };
            let m = |s: &str, f: &str| member_offset(btf, s, f).unwrap_or(0);
            o.task_utime = m("task_struct", "utime");
            o.task_stime = m("task_struct", "stime");
            o.skb_len = m("sk_buff", "len");
            o.skb_dev = m("sk_buff", "dev");
            o.skb_head = m("sk_buff", "head");
            o.skb_data = m("sk_buff", "data");
            o.skb_end = m("sk_buff", "end");
            o.skb_mac_header = m("sk_buff", "mac_header");
            o.shinfo_gso_size = m("skb_shared_info", "gso_size");
            o.shinfo_gso_segs = m("skb_shared_info", "gso_segs");
            o.dev_ifindex = m("net_device", "ifindex");
            o.dev_nd_net = m("net_device", "nd_net");
            o.net_ns_inum = m("net", "ns") + m("ns_common", "inum");
            o.napi_dev = m("napi_struct", "dev");
            o.pt_regs_di = m("pt_regs", "di");
            o.pt_regs_si = m("pt_regs", "si");
        }
        if let Ok(tracefs) = &caps.tracefs {
            let f = |cat: &str, ev: &str, field: &str| {
                tracepoint_field(tracefs, cat, ev, field).map(|f| f.offset).unwrap_or(0)
            };
            o.tp_switch_prev_state = f("sched", "sched_switch", "prev_state");
            o.tp_switch_next_pid = f("sched", "sched_switch", "next_pid");
            o.tp_fork_child_pid = f("sched", "sched_process_fork", "child_pid");
            o.tp_irq_irq = f("irq", "irq_handler_entry", "irq");
            o.tp_softirq_vec = f("irq", "softirq_entry", "vec");
            for (slot, (_, event, field)) in o.kvm_fields.iter_mut().zip(KVM_FIELDS) {
                *slot = f("kvm", event, field);
            }
        }
        o
    }

    /// (global name in vtrace-ebpf/src/config.rs, value)
    pub fn globals(&self) -> Vec<(&'static str, u32)> {
        let mut g = vec![
            ("PT_REGS_SI", self.pt_regs_si),
            ("KVM_RUN_ON", self.kvm_run_on),
            ("PT_REGS_DI", self.pt_regs_di),
            ("TUN_FDS_ON", self.tun_fds_on),
            ("NAPI_DEV", self.napi_dev),
            ("NET_EVENTS_ON", self.net_events_on),
            ("NET_LAYER_ON", self.net_layer_on),
            ("SKB_LEN", self.skb_len),
            ("SKB_DEV", self.skb_dev),
            ("SKB_HEAD", self.skb_head),
            ("SKB_DATA", self.skb_data),
            ("SKB_END", self.skb_end),
            ("SKB_MAC_HEADER", self.skb_mac_header),
            ("SHINFO_GSO_SIZE", self.shinfo_gso_size),
            ("SHINFO_GSO_SEGS", self.shinfo_gso_segs),
            ("DEV_IFINDEX", self.dev_ifindex),
            ("DEV_ND_NET", self.dev_nd_net),
            ("NET_NS_INUM", self.net_ns_inum),
            ("TASK_RUNTIME_OFFSET", self.task_runtime),
            ("TASK_UTIME_OFFSET", self.task_utime),
            ("TASK_STIME_OFFSET", self.task_stime),
            ("TICK_SPLIT_ON", self.tick_split_on),
            ("TASK_PID_OFFSET", self.task_pid),
            ("TASK_TGID_OFFSET", self.task_tgid),
            ("TASK_FLAGS_OFFSET", self.task_flags),
            ("TP_SWITCH_PREV_STATE", self.tp_switch_prev_state),
            ("TP_SWITCH_NEXT_PID", self.tp_switch_next_pid),
            ("TP_FORK_CHILD_PID", self.tp_fork_child_pid),
            ("TP_IRQ_IRQ", self.tp_irq_irq),
            ("TP_SOFTIRQ_VEC", self.tp_softirq_vec),
        ];
        g.extend(
            KVM_FIELDS
                .iter()
                .zip(self.kvm_fields)
                .map(|((global, _, _), v)| (*global, v)),
        );
        g
    }
}

/// Byte offset of `member` in `struct name`, searching anonymous nested
/// structs and unions.
pub fn member_offset(btf: &btf_rs::Btf, name: &str, member: &str) -> Option<u32> {
    let types = btf.resolve_types_by_name(name).ok()?;
    types.iter().find_map(|t| match t {
        btf_rs::Type::Struct(s) => find_member(btf, s, member, 0),
        _ => None,
    })
}

fn find_member(btf: &btf_rs::Btf, s: &btf_rs::Struct, member: &str, base_bits: u32) -> Option<u32> {
    for m in &s.members {
        let bits = base_bits + m.bit_offset();
        let name = btf.resolve_name(m).unwrap_or_default();
        if name == member {
            return Some(bits / 8);
        }
        if name.is_empty()
            && let Ok(btf_rs::Type::Struct(inner) | btf_rs::Type::Union(inner)) = btf.resolve_chained_type(m)
            && let Some(off) = find_member(btf, &inner, member, bits)
        {
            return Some(off);
        }
    }
    None
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TracepointField {
    pub c_type: String,
    pub name: String,
    pub offset: u32,
    pub size: u32,
    pub signed: bool,
}

/// Parses one `field:TYPE NAME;\toffset:N;\tsize:N;\tsigned:N;` line.
pub fn parse_format_line(line: &str) -> Option<TracepointField> {
    let mut decl = None;
    let (mut offset, mut size, mut signed) = (None, None, false);
    for part in line.trim().split(';') {
        let part = part.trim();
        if let Some(v) = part.strip_prefix("field:") {
            decl = Some(v.trim().to_string());
        } else if let Some(v) = part.strip_prefix("offset:") {
            offset = v.trim().parse().ok();
        } else if let Some(v) = part.strip_prefix("size:") {
            size = v.trim().parse().ok();
        } else if let Some(v) = part.strip_prefix("signed:") {
            signed = v.trim() == "1";
        }
    }
    let decl = decl?;
    let (c_type, name) = decl.rsplit_once(' ')?;
    // `char prev_comm[16]` -> name prev_comm
    let name = name.split('[').next()?.to_string();
    Some(TracepointField {
        c_type: c_type.to_string(),
        name,
        offset: offset?,
        size: size?,
        signed,
    })
}

pub fn tracepoint_fields(tracefs: &Path, category: &str, event: &str) -> Vec<TracepointField> {
    fs::read_to_string(tracefs.join("events").join(category).join(event).join("format"))
        .map(|s| s.lines().filter_map(parse_format_line).collect())
        .unwrap_or_default()
}

pub fn tracepoint_field(tracefs: &Path, category: &str, event: &str, field: &str) -> Option<TracepointField> {
    tracepoint_fields(tracefs, category, event)
        .into_iter()
        .find(|f| f.name == field)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_format_lines() {
        let f = parse_format_line("\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;").unwrap();
        assert_eq!(
            (f.name.as_str(), f.offset, f.size, f.signed),
            ("prev_comm", 8, 16, false)
        );
        let f = parse_format_line("\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;").unwrap();
        assert_eq!((f.c_type.as_str(), f.offset, f.signed), ("pid_t", 56, true));
        assert!(parse_format_line("print fmt: \"x\"").is_none());
    }
}
