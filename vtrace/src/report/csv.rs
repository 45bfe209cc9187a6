//! `vtrace report --format csv`: one row per thread.

use crate::layers::cpu::analysis::CpuBreakdown;

pub fn threads(cpu: &CpuBreakdown) -> String {
    let mut out = String::from(
        "pid,tid,comm,platform,role,selected,user_ns,system_ns,softirq_ns,hardirq_ns,guest_ns,idle_ns,total_ns,guest_source\n",
    );
    for t in &cpu.threads {
        let total = t.user_ns + t.system_ns + t.softirq_ns + t.hardirq_ns + t.guest_ns;
        out.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
            t.pid,
            t.tid,
            quote(&t.comm),
            t.platform,
            t.role,
            t.selected,
            t.user_ns,
            t.system_ns,
            t.softirq_ns,
            t.hardirq_ns,
            t.guest_ns,
            t.idle_ns,
            total,
            t.guest_source
        ));
    }
    out
}

/// RFC 4180 quoting for fields that need it (comm may hold commas or quotes).
fn quote(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}
