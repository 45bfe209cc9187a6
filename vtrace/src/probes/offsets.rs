//! Kernel layout the eBPF programs need but cannot learn themselves (Rust eBPF
//! has no CO-RE): struct member offsets from BTF and tracepoint record
//! offsets from tracefs format files, resolved into the one load-time
//! [`Config`] the object reads.

use std::{fs, path::Path};

use super::Capabilities;

use vtrace_common::Config;

/// Resolves the offsets the running kernel provides; what it lacks stays 0
/// and the strategies that need it are unavailable anyway (no BTF: no
/// raw_tp; no tracefs: no tracepoints). The switches (`*_on`) stay 0: each
/// layer sets its own ([`crate::layers::Layer::configure`]).
pub fn resolve(caps: &Capabilities) -> Config {
    let mut o = Config::default();
    if let Ok(btf) = &caps.btf {
        let m = |s: &str, f: &str| member_offset(btf, s, f).unwrap_or(0);
        // A member of a struct embedded in another: 0 unless both are known.
        let nested = |s: &str, f: &str, inner: &str, g: &str| {
            member_offset(btf, s, f)
                .zip(member_offset(btf, inner, g))
                .map_or(0, |(a, b)| a + b)
        };
        o.task_pid = m("task_struct", "pid");
        o.task_tgid = m("task_struct", "tgid");
        o.task_flags = m("task_struct", "flags");
        o.task_runtime = nested("task_struct", "se", "sched_entity", "sum_exec_runtime");
        o.task_utime = m("task_struct", "utime");
        o.task_stime = m("task_struct", "stime");
        o.task_start_time = m("task_struct", "start_time");
        o.task_cfs_rq = nested("task_struct", "se", "sched_entity", "cfs_rq");
        o.cfs_rq_rq = m("cfs_rq", "rq");
        o.rq_curr = m("rq", "curr");
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
        o.dev_mtu = m("net_device", "mtu");
        o.dev_hard_header_len = m("net_device", "hard_header_len");
        o.net_ns_inum = nested("net", "ns", "ns_common", "inum");
        o.napi_dev = m("napi_struct", "dev");
        o.pt_regs_di = m("pt_regs", "di");
        o.request_cmd_flags = m("request", "cmd_flags");
        o.request_part = m("request", "part");
        o.bdev_dev = m("block_device", "bd_dev");
        o.task_files = m("task_struct", "files");
        o.task_fs = m("task_struct", "fs");
        o.files_fdt = m("files_struct", "fdt");
        o.fdtable_max_fds = m("fdtable", "max_fds");
        o.fdtable_fd = m("fdtable", "fd");
        o.file_inode = m("file", "f_inode");
        o.inode_sb = m("inode", "i_sb");
        o.sb_magic = m("super_block", "s_magic");
        o.fs_pwd_dentry = nested("fs_struct", "pwd", "path", "dentry");
        o.fs_root_dentry = nested("fs_struct", "root", "path", "dentry");
        o.dentry_sb = m("dentry", "d_sb");
        o.pt_regs_si = m("pt_regs", "si");
        o.pt_regs_orig_ax = m("pt_regs", "orig_ax");
        o.msghdr_control = m("msghdr", "msg_control");
        o.xdp_buff_data = m("xdp_buff", "data");
        o.xdp_buff_data_end = m("xdp_buff", "data_end");
        o.xdp_buff_size = struct_size(btf, "xdp_buff").unwrap_or(0);
        o.xdp_frame_len = m("xdp_frame", "len");
        o.iov_iter_count = m("iov_iter", "count");
        o.dev_name = m("net_device", "name");
        // The tun module's own structs: in its BTF, split on vmlinux's (read
        // when the module is loaded; its functions cannot be probed otherwise).
        if let Some(tun) = module_btf(btf, "tun") {
            let t = |s: &str, f: &str| member_offset(&tun, s, f).unwrap_or(0);
            o.tun_struct_dev = t("tun_struct", "dev");
            o.tun_file_tun = t("tun_file", "tun");
            o.tun_file_socket = t("tun_file", "socket");
            o.tun_msg_ctl_type = t("tun_msg_ctl", "type");
            o.tun_msg_ctl_num = t("tun_msg_ctl", "num");
            o.tun_msg_ctl_ptr = t("tun_msg_ctl", "ptr");
        }
    }
    if let Ok(tracefs) = &caps.tracefs {
        let f =
            |cat: &str, ev: &str, field: &str| tracepoint_field(tracefs, cat, ev, field).map(|f| f.offset).unwrap_or(0);
        o.tp_switch_prev_state = f("sched", "sched_switch", "prev_state");
        o.tp_switch_next_pid = f("sched", "sched_switch", "next_pid");
        o.tp_fork_child_pid = f("sched", "sched_process_fork", "child_pid");
        o.tp_switch_prev_pid = f("sched", "sched_switch", "prev_pid");
        o.tp_wakeup_pid = f("sched", "sched_wakeup", "pid");
        o.tp_sys_exit_id = f("raw_syscalls", "sys_exit", "id");
        o.tp_irq_irq = f("irq", "irq_handler_entry", "irq");
        o.tp_softirq_vec = f("irq", "softirq_entry", "vec");
        let kvm = |ev: &str, field: &str| f("kvm", ev, field);
        o.tp_kvm_exit_reason = kvm("kvm_exit", "exit_reason");
        o.tp_kvm_exit_isa = kvm("kvm_exit", "isa");
        o.tp_kvm_uexit_reason = kvm("kvm_userspace_exit", "reason");
        o.tp_kvm_uexit_errno = kvm("kvm_userspace_exit", "errno");
        o.tp_kvm_pio_rw = kvm("kvm_pio", "rw");
        o.tp_kvm_pio_port = kvm("kvm_pio", "port");
        o.tp_kvm_pio_size = kvm("kvm_pio", "size");
        o.tp_kvm_pio_count = kvm("kvm_pio", "count");
        o.tp_kvm_mmio_type = kvm("kvm_mmio", "type");
        o.tp_kvm_mmio_len = kvm("kvm_mmio", "len");
        o.tp_kvm_mmio_gpa = kvm("kvm_mmio", "gpa");
        o.tp_kvm_fast_mmio_gpa = kvm("kvm_fast_mmio", "gpa");
        o.tp_kvm_set_irq_gsi = kvm("kvm_set_irq", "gsi");
        o.tp_kvm_set_irq_level = kvm("kvm_set_irq", "level");
        o.tp_kvm_msi_address = kvm("kvm_msi_set_irq", "address");
        o.tp_kvm_msi_data = kvm("kvm_msi_set_irq", "data");
        o.tp_kvm_inj_virq_vector = kvm("kvm_inj_virq", "vector");
        o.tp_kvm_inj_virq_soft = kvm("kvm_inj_virq", "soft");
        o.tp_kvm_wakeup_ns = kvm("kvm_vcpu_wakeup", "ns");
        o.tp_kvm_wakeup_waited = kvm("kvm_vcpu_wakeup", "waited");
    }
    o
}

/// A loaded module's BTF (`/sys/kernel/btf/<module>`, split on vmlinux's).
pub fn module_btf(vmlinux: &btf_rs::Btf, module: &str) -> Option<btf_rs::Btf> {
    btf_rs::Btf::from_split_file(Path::new("/sys/kernel/btf").join(module), vmlinux).ok()
}

/// `sizeof(struct name)` from BTF.
pub fn struct_size(btf: &btf_rs::Btf, name: &str) -> Option<u32> {
    let types = btf.resolve_types_by_name(name).ok()?;
    types.iter().find_map(|t| match t {
        btf_rs::Type::Struct(s) => Some(s.size() as u32),
        _ => None,
    })
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
