//! Hardware IRQs: their names (/proc/interrupts), the platform instance a
//! device's IRQ belongs to, and the `irqs` table.

use std::collections::HashMap;

use vtrace_common::{IRQ_DEVICE_SLOTS, irq_vector};

use super::{collector::CpuSnapshot, tables::IrqRow};
use crate::platforms::Instance;

/// Device IRQ names from /proc/interrupts (its last column).
fn irq_names() -> HashMap<u32, String> {
    std::fs::read_to_string("/proc/interrupts")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (num, rest) = l.trim_start().split_once(':')?;
            let irq = num.trim().parse::<u32>().ok()?;
            Some((irq, rest.split_whitespace().last().unwrap_or("").to_string()))
        })
        .collect()
}

/// The instance that passes through the PCI function a vfio IRQ named
/// `name` belongs to (`vfio-msix[0](0000:00:12.0)`, `vfio-intx(...)`).
fn irq_instance<'a>(name: &str, instances: &'a [Instance]) -> Option<&'a str> {
    let pci = name.strip_prefix("vfio-")?.split_once('(')?.1.strip_suffix(')')?;
    instances
        .iter()
        .find(|i| i.passthrough.iter().any(|d| d.pci == pci))
        .map(|i| i.id.as_str())
}

pub fn irq_rows(snap: &CpuSnapshot, instances: &[Instance]) -> Vec<IrqRow> {
    let listed = irq_names();
    let mut rows = Vec::new();
    for (cpu, slots) in snap.irqs.iter().enumerate() {
        for (slot, s) in slots.iter().enumerate() {
            if s.count == 0 && s.ns == 0 {
                continue;
            }
            let slot = slot as u32;
            let name = if slot < IRQ_DEVICE_SLOTS {
                snap.irq_names
                    .get(&slot)
                    .or_else(|| listed.get(&slot))
                    .cloned()
                    .unwrap_or_else(|| format!("irq {slot}"))
            } else {
                irq_vector::NAMES
                    .iter()
                    .find(|(v, _)| *v == slot)
                    .map(|(_, n)| n.to_string())
                    .unwrap_or_default()
            };
            rows.push(IrqRow {
                cpu: cpu as u32,
                irq: slot,
                instance: irq_instance(&name, instances).unwrap_or_default().to_string(),
                name,
                ns: s.ns,
                count: s.count,
            });
        }
    }
    rows
}
