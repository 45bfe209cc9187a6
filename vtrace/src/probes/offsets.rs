//! Kernel layout the eBPF programs need but cannot learn themselves (Rust eBPF
//! has no CO-RE): struct member offsets from BTF and tracepoint record
//! offsets from tracefs format files, resolved into the one load-time
//! [`Config`] the object reads.

use std::{fs, path::Path};

use super::Capabilities;

use vtrace_common::Config;

/// The running kernel's layout as a layer reads it in `Layer::offsets`:
/// struct members from BTF, tracepoint record fields from tracefs. What the
/// kernel lacks reads as 0, and the strategies that need it are unavailable
/// anyway (no BTF: no raw_tp; no tracefs: no tracepoints).
pub struct KernelLayout<'a> {
    btf: Option<&'a btf_rs::Btf>,
    tracefs: Option<&'a Path>,
    /// /proc/kallsyms, read at the first [`KernelLayout::symbols`] (several
    /// MB: once for every layer).
    kallsyms: std::cell::OnceCell<String>,
}

impl<'a> KernelLayout<'a> {
    pub fn of(caps: &'a Capabilities) -> Self {
        KernelLayout {
            btf: caps.btf.as_ref().ok().map(|b| &**b),
            tracefs: caps.tracefs.as_ref().ok().map(|p| p.as_path()),
            kallsyms: std::cell::OnceCell::new(),
        }
    }

    /// The addresses of kernel symbols, each `(name, module)`: in that
    /// module, or built in (no module tag; a built-in module need not show
    /// in /sys/module). 0 for one not found: its module is not loaded, it
    /// is data and the kernel lists only text (no CONFIG_KALLSYMS_ALL), or
    /// the addresses are hidden (not root).
    pub fn symbols<const N: usize>(&self, wanted: [(&str, &str); N]) -> [u64; N] {
        let text = self
            .kallsyms
            .get_or_init(|| std::fs::read_to_string("/proc/kallsyms").unwrap_or_default());
        find_symbols(text, wanted)
    }

    /// `offsetof(struct s, member)`; 0 when unknown.
    pub fn member(&self, s: &str, member: &str) -> u32 {
        self.btf.and_then(|b| member_offset(b, s, member)).unwrap_or(0)
    }

    /// The bit offset of `member` (a bitfield) in `struct s`; 0 when unknown.
    pub fn member_bit(&self, s: &str, member: &str) -> u32 {
        self.btf.and_then(|b| member_bit_offset(b, s, member)).unwrap_or(0)
    }

    /// A member of a struct embedded in another (`s.member.inner_member`,
    /// `inner` the embedded struct's type): 0 unless both are known.
    pub fn nested(&self, s: &str, member: &str, inner: &str, inner_member: &str) -> u32 {
        self.btf
            .and_then(|b| member_offset(b, s, member).zip(member_offset(b, inner, inner_member)))
            .map_or(0, |(a, b)| a + b)
    }

    /// `sizeof(struct s)`; 0 when unknown.
    pub fn size(&self, s: &str) -> u32 {
        self.btf.and_then(|b| struct_size(b, s)).unwrap_or(0)
    }

    /// A loaded module's BTF (its own structs), where the kernel has BTF.
    pub fn module(&self, name: &str) -> Option<btf_rs::Btf> {
        module_btf(self.btf?, name)
    }

    /// Offset of `field` in the record of tracepoint `category:event`; 0 when unknown.
    pub fn tracepoint(&self, category: &str, event: &str, field: &str) -> u32 {
        self.tracefs
            .and_then(|t| tracepoint_field(t, category, event, field))
            .map_or(0, |f| f.offset)
    }

    /// The offset of the first of `fields` the record has (a field renamed
    /// between kernels, newest name first); 0 when it has none.
    pub fn tracepoint_any(&self, category: &str, event: &str, fields: &[&str]) -> u32 {
        fields
            .iter()
            .map(|f| self.tracepoint(category, event, f))
            .find(|&at| at != 0)
            .unwrap_or(0)
    }
}

/// What the net and tun layers both read of a network device and an skb.
pub fn net_device(k: &KernelLayout, o: &mut Config) {
    o.net_device.skb_len = k.member("sk_buff", "len");
    o.net_device.dev_ifindex = k.member("net_device", "ifindex");
    o.net_device.dev_nd_net = k.member("net_device", "nd_net");
    o.net_device.dev_name = k.member("net_device", "name");
    o.net_device.net_ns_inum = k.nested("net", "ns", "ns_common", "inum");
    o.net_device.dev_netdev_ops = k.member("net_device", "netdev_ops");
    o.net_device.ops_ndo_start_xmit = k.member("net_device_ops", "ndo_start_xmit");
    // A function, so listed on every kernel (its device operations, data,
    // only with CONFIG_KALLSYMS_ALL).
    let [tun_net_xmit] = k.symbols([("tun_net_xmit", "tun")]);
    (o.net_device.tun_net_xmit_lo, o.net_device.tun_net_xmit_hi) = vtrace_common::halves(tun_net_xmit);
}

/// A syscall's arguments and number, as the CPU engine (tun fds) and the fs
/// layer read them at sys_enter/sys_exit.
pub fn syscall_args(k: &KernelLayout, o: &mut Config) {
    o.syscall_args.pt_regs_di = k.member("pt_regs", "di");
    o.syscall_args.pt_regs_si = k.member("pt_regs", "si");
    o.syscall_args.pt_regs_orig_ax = k.member("pt_regs", "orig_ax");
    o.syscall_args.tp_sys_exit_id = k.tracepoint("raw_syscalls", "sys_exit", "id");
}

/// A loaded module's BTF (`/sys/kernel/btf/<module>`, split on vmlinux's).
pub fn module_btf(vmlinux: &btf_rs::Btf, module: &str) -> Option<btf_rs::Btf> {
    // Read whole, as vmlinux's (see `Capabilities::detect`).
    let bytes = std::fs::read(Path::new("/sys/kernel/btf").join(module)).ok()?;
    btf_rs::Btf::from_split_bytes(&bytes, vmlinux).ok()
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
    member_bit_offset(btf, name, member).map(|bits| bits / 8)
}

/// Bit offset of `member` in `struct name` (a bitfield's own bit).
pub fn member_bit_offset(btf: &btf_rs::Btf, name: &str, member: &str) -> Option<u32> {
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
            return Some(bits);
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

/// [`KernelLayout::symbols`] in kallsyms' `text`.
fn find_symbols<const N: usize>(text: &str, wanted: [(&str, &str); N]) -> [u64; N] {
    let mut found = [0; N];
    let tags = wanted.map(|(_, module)| format!("[{module}]"));
    for l in text.lines() {
        let mut f = l.split_whitespace();
        let (Some(addr), Some(_kind), Some(sym)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let module = f.next();
        for (i, (name, _)) in wanted.iter().enumerate() {
            if found[i] == 0 && sym == *name && module.is_none_or(|m| m == tags[i]) {
                found[i] = u64::from_str_radix(addr, 16).unwrap_or(0);
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A symbol is found built in (no tag) or in its module, not in
    /// another module; a missing one is 0.
    #[test]
    fn kernel_symbols_are_found_built_in_or_in_their_module() {
        let text = "ffffffff81daef80 t tun_net_xmit\n\
                    ffffffffc0a01000 t start_xmit\t[other]\n\
                    ffffffffc0b02000 t start_xmit\t[virtio_net]\n\
                    ffffffffc0b03000 d virtnet_netdev\t[virtio_net]\n";
        let [tun, xmit, ops, missing] = find_symbols(
            text,
            [
                ("tun_net_xmit", "tun"),
                ("start_xmit", "virtio_net"),
                ("virtnet_netdev", "virtio_net"),
                ("tun_netdev_ops", "tun"),
            ],
        );
        assert_eq!(
            (tun, xmit, ops, missing),
            (0xffffffff81daef80, 0xffffffffc0b02000, 0xffffffffc0b03000, 0)
        );
    }

    /// Root sees kallsyms' addresses: this kernel's schedule is found.
    #[test]
    fn this_kernels_symbols_are_read() {
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let caps = crate::probes::Capabilities::detect();
        let [schedule] = KernelLayout::of(&caps).symbols([("schedule", "kernel")]);
        assert_ne!(schedule, 0);
    }

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
