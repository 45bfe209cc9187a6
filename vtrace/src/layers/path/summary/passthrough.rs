//! The passthrough stages (SR-IOV): a VF's interrupt from the host's
//! hardirq to the guest entry that delivers it, per VF vector.

use super::*;

/// One passthrough stage of one host IRQ (a VF's vector), pooled over the
/// processes that ended it.
#[derive(Clone, Debug, Serialize)]
pub struct PassthroughStage {
    pub instance: String,
    pub irq: u32,
    /// The IRQ's name (`vfio-msix[0](0000:00:12.0)`: vector 0 of that VF).
    pub name: String,
    /// The host's count of the IRQ (the hardirqs table).
    pub host_irqs: u64,
    pub stage: String,
    pub count: u64,
    pub mean_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
}

/// The passthrough stages per VF vector: the host's hardirq, the delay to
/// KVM's MSI, to the injection (the vCPU woken and run), to the guest entry.
pub fn passthrough_stages(rec: &Recording) -> Vec<PassthroughStage> {
    let mut irqs: BTreeMap<u32, (String, String, u64)> = BTreeMap::new();
    for r in rec.rows::<crate::layers::cpu::IrqRow>() {
        let e = irqs
            .entry(r.irq)
            .or_insert_with(|| (r.name.clone(), r.instance.clone(), 0));
        e.2 += r.count;
    }
    // (irq, stage order) -> (stage, count, sum, min, max)
    type Pooled = (String, u64, u64, u64, u64);
    let mut groups: BTreeMap<(u32, usize), Pooled> = BTreeMap::new();
    for r in rec.rows::<PathRow>().iter().filter(|r| r.stage.starts_with("pt_")) {
        let e = groups
            .entry((r.irq, order(&r.stage)))
            .or_insert_with(|| (r.stage.clone(), 0, 0, u64::MAX, 0));
        e.1 += r.count;
        e.2 += r.sum_ns;
        e.3 = e.3.min(r.min_ns);
        e.4 = e.4.max(r.max_ns);
    }
    groups
        .into_iter()
        .map(|((irq, _), (stage, count, sum_ns, min_ns, max_ns))| {
            let (name, instance, host_irqs) = irqs.get(&irq).cloned().unwrap_or_default();
            PassthroughStage {
                instance,
                irq,
                name,
                host_irqs,
                stage,
                count,
                mean_ns: sum_ns / count.max(1),
                min_ns,
                max_ns,
            }
        })
        .collect()
}

pub(super) fn add_section(s: &mut Section, rec: &Recording, rows: &[PathRow]) {
    if !rows.iter().any(|r| r.stage.starts_with("pt_")) {
        return;
    }
    let stages = passthrough_stages(rec);
    let mut t = Table::new(
        "Passthrough path per VF interrupt: the host's hardirq (pt_hardirq), and in sequence its MSI set by \
         KVM (pt_signal), its injection once the vCPU runs (pt_inject: wake-up and run-queue wait included), \
         the guest entry (pt_entry)",
        vec![
            left("instance", 16),
            col("irq", 5),
            left("name", 28).gap(1),
            col("host irqs", 10),
            left("stage", 11).gap(2),
            col("count", 8),
            col("mean(us)", 10),
            col("min(us)", 10),
            col("max(us)", 10),
        ],
    );
    for x in &stages {
        t.row(vec![
            x.instance.clone(),
            x.irq.to_string(),
            x.name.clone(),
            x.host_irqs.to_string(),
            x.stage.clone(),
            x.count.to_string(),
            us(x.mean_ns),
            us(x.min_ns),
            us(x.max_ns),
        ]);
        let dims = [
            ("instance", x.instance.as_str()),
            ("irq", x.name.as_str()),
            ("stage", x.stage.as_str()),
        ];
        s.metric("path_passthrough_mean_ns", x.mean_ns as f64, "ns", &dims);
    }
    s.table(t);
    s.json("path_passthrough", &stages);
}
