//! The sample layer's report section: the hottest sampled stacks.

use super::SampleRow;
use crate::{
    recording::Recording,
    report_model::{Section, Table, col, left, pct},
};

pub fn section(rec: &Recording, top: usize) -> Section {
    let mut s = Section::new("sample", "Sampled stacks");
    let samples = rec.rows::<SampleRow>();
    if !samples.is_empty() {
        let total: u64 = samples.iter().map(|s| s.count).sum();
        let mut t = Table::new(
            format!(
                "Sampled stacks ({} Hz, {total} samples; `report --format folded` for a flamegraph)",
                rec.meta.overhead.sample_hz
            ),
            vec![
                col("samples", 8),
                col("%", 7),
                left("comm", 16).gap(2),
                left("role", 10),
                left("leaf frames", 0),
            ],
        );
        let mut rows: Vec<_> = samples.iter().collect();
        rows.sort_by_key(|s| std::cmp::Reverse(s.count));
        for r in rows.iter().take(top) {
            let leaf: Vec<&str> = r.stack.rsplit(';').take(3).collect();
            t.row(vec![
                r.count.to_string(),
                pct(r.count, total),
                r.owner.comm.clone(),
                r.owner.role.clone(),
                leaf.join(" <- "),
            ]);
        }
        s.table(t);
        if let Ok(svg) = super::flamegraph::svg(rec, &rec.title(), false) {
            s.picture(super::flamegraph::without_script(&svg));
        }
    }
    s.json("samples", samples);
    s
}
