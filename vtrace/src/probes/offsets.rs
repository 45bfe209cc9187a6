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
}

impl<'a> KernelLayout<'a> {
    pub fn of(caps: &'a Capabilities) -> Self {
        KernelLayout {
            btf: caps.btf.as_ref().ok().map(|b| &**b),
            tracefs: caps.tracefs.as_ref().ok().map(|p| p.as_path()),
        }
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

/// The addresses of kernel symbols, each `(name, module)`, in the module
/// or, where it is built in, in the kernel's own (/proc/kallsyms, as root,
/// read once); 0 for one whose module is not loaded, or when the addresses
/// are hidden.
pub fn kernel_symbols<const N: usize>(wanted: [(&str, &str); N]) -> [u64; N] {
    let mut found = [0; N];
    let loaded = wanted.map(|(_, module)| Path::new("/sys/module").join(module).exists());
    if !loaded.contains(&true) {
        return found;
    }
    let tags = wanted.map(|(_, module)| format!("[{module}]"));
    let Ok(text) = std::fs::read_to_string("/proc/kallsyms") else {
        return found;
    };
    for l in text.lines() {
        let mut f = l.split_whitespace();
        let (Some(addr), Some(_kind), Some(sym)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let module = f.next();
        for (i, (name, _)) in wanted.iter().enumerate() {
            if found[i] == 0 && loaded[i] && sym == *name && module.is_none_or(|m| m == tags[i]) {
                found[i] = u64::from_str_radix(addr, 16).unwrap_or(0);
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Root sees kallsyms' addresses: a built-in symbol is found (no
    /// module tag), a missing symbol or module gives 0.
    #[test]
    fn kernel_symbols_are_found_in_one_read() {
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let [schedule, missing, unloaded] = kernel_symbols([
            ("schedule", "kernel"),
            ("no_such_symbol_of_vtrace", "kernel"),
            ("schedule", "no_such_module_of_vtrace"),
        ]);
        assert!(
            schedule != 0 && missing == 0 && unloaded == 0,
            "{schedule:x} {missing} {unloaded}"
        );
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
