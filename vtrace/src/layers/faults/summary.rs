//! The faults layer's report section: the threads that faulted most, and
//! faults per role.

use std::collections::BTreeMap;

use super::FaultRow;
use crate::{
    recording::Recording,
    report_model::{Section, Table, col, left},
};

pub fn section(rec: &Recording, top: usize) -> Section {
    let mut s = Section::new("faults", "Page faults");
    let rows = rec.rows::<FaultRow>();
    if rows.is_empty() {
        return s;
    }
    let mut sorted: Vec<&FaultRow> = rows.iter().collect();
    sorted.sort_by_key(|r| std::cmp::Reverse(r.user + r.kernel));
    let mut t = Table::new(
        "Page faults (threads that faulted most; kernel: a user page the kernel touched)",
        vec![
            col("pid", 8),
            col("tid", 8).gap(1),
            left("comm", 16).gap(1),
            left("role", 10),
            col("user", 12),
            col("kernel", 12),
        ],
    );
    for r in sorted.iter().take(top) {
        t.row(vec![
            r.owner.pid.to_string(),
            r.tid.to_string(),
            r.owner.comm.clone(),
            r.owner.role.clone(),
            r.user.to_string(),
            r.kernel.to_string(),
        ]);
    }
    s.table(t);
    let mut by_role: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for r in rows {
        *by_role.entry((&r.owner.platform, &r.owner.role)).or_default() += r.user + r.kernel;
    }
    for ((platform, role), n) in by_role {
        s.metric(
            "page_faults",
            n as f64,
            "faults",
            &[("platform", platform), ("role", role)],
        );
    }
    s.json("faults", rows);
    s
}
