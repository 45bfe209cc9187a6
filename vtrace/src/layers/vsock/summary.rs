//! The vsock layer's report section: packets by instance, peer, port,
//! direction and kind, with when each kind was first and last seen.

use std::collections::BTreeMap;

use super::VsockRow;
use crate::{
    recording::Recording,
    report_model::{Section, Table, col, left, secs},
};

pub fn section(rec: &Recording, top: usize) -> Section {
    let mut s = Section::new("vsock", "vsock");
    let rows = rec.rows::<VsockRow>();
    if rows.is_empty() {
        return s;
    }
    // Threads of one role are one line: a shim's goroutines take turns.
    struct Line {
        packets: u64,
        bytes: u64,
        first_ns: u64,
        last_ns: u64,
    }
    let mut lines: BTreeMap<(String, &str, u32, u32, &str, &str), Line> = BTreeMap::new();
    for r in rows {
        let owner = if r.owner.instance.is_empty() {
            format!("{}/{}", r.owner.platform, r.owner.comm)
        } else {
            r.owner.instance.clone()
        };
        let l = lines
            .entry((
                owner,
                r.owner.role.as_str(),
                r.peer_cid,
                r.port,
                r.direction.as_str(),
                r.op.as_str(),
            ))
            .or_insert(Line {
                packets: 0,
                bytes: 0,
                first_ns: u64::MAX,
                last_ns: 0,
            });
        l.packets += r.packets;
        l.bytes += r.bytes;
        // 0 (before the window) is the earliest of all.
        l.first_ns = l.first_ns.min(r.first_ns);
        l.last_ns = l.last_ns.max(r.last_ns);
    }
    let mut sorted: Vec<_> = lines.iter().collect();
    sorted.sort_by_key(|(_, l)| std::cmp::Reverse(l.packets));
    let mut t = Table::new(
        "vsock packets through the virtio transport (first(s) '-': already flowing when recording began)",
        vec![
            left("instance", 24),
            left("role", 8),
            col("peer cid", 11),
            col("port", 6),
            left("dir", 9).gap(2),
            left("op", 14),
            col("packets", 9),
            col("bytes", 10),
            col("first(s)", 9),
            col("last(s)", 9),
        ],
    );
    for ((owner, role, _, _, dir, op), l) in &sorted {
        s.metric(
            "vsock_packets",
            l.packets as f64,
            "packets",
            &[("instance", owner), ("role", role), ("direction", dir), ("op", op)],
        );
    }
    for ((owner, role, cid, port, dir, op), l) in sorted.iter().take(top) {
        t.row(vec![
            owner.clone(),
            role.to_string(),
            cid.to_string(),
            port.to_string(),
            dir.to_string(),
            op.to_string(),
            l.packets.to_string(),
            l.bytes.to_string(),
            if l.first_ns == 0 { "-".into() } else { secs(l.first_ns) },
            secs(l.last_ns),
        ]);
    }
    s.table(t);
    s.json("vsock", rows);
    s
}
