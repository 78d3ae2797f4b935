//! MADT ("APIC", ACPI 6.5 §5.2.12): the local APIC address and the CPUs.

use alloc::vec::Vec;

use super::error::TableProblem;
use super::error::{Limit, Warnings};
use super::info::AcpiCpu;
use super::limits::*;
use super::tables::*;

pub(super) struct Madt {
    pub(super) lapic_addr: u64,
    pub(super) pcat_compat: bool,
    pub(super) cpus: Vec<AcpiCpu>,
    pub(super) ignored: u32,
    pub(super) duplicates: u32,
}

/// §5.2.12. `table` is the whole validated MADT.
pub(super) fn parse_madt(
    table: &[u8],
    phys: u64,
    revision: u8,
    warnings: &mut Warnings,
) -> Option<Madt> {
    let (Some(lapic32), Some(flags)) = (u32_at(table, 36), u32_at(table, 40)) else {
        let length = table.len() as u32;
        warnings.push(SIG_MADT, phys, TableProblem::BadLength { length });
        return None;
    };
    let mut madt = Madt {
        lapic_addr: u64::from(lapic32),
        pcat_compat: flags & 1 != 0,
        cpus: Vec::new(),
        ignored: 0,
        duplicates: 0,
    };
    // Online Capable was a reserved bit before MADT revision 5 (ACPI 6.3);
    // old firmware may leave junk there, so only trust it from revision 5.
    let honor_online_capable = revision >= 5;
    let mut cpus = CpuSet {
        by_apic_id: Vec::new(),
        limit: Limit::new(SIG_MADT, "CPUs", MAX_CPUS),
    };
    let mut override_seen = false;
    for entry in entries(table, MADT_ENTRIES_OFFSET) {
        let entry = match entry {
            Ok(e) => e,
            Err(problem) => {
                warnings.push(SIG_MADT, phys, problem);
                break;
            }
        };
        match madt_entry(&entry) {
            Ok(MadtEntry::Cpu(cpu)) => {
                cpus.add(&mut madt, cpu, honor_online_capable, warnings, phys)
            }
            // The spec allows only one override; the first wins.
            Ok(MadtEntry::LapicOverride(addr)) if !override_seen => {
                madt.lapic_addr = addr;
                override_seen = true;
            }
            Ok(_) => {}
            Err(problem) => warnings.push(SIG_MADT, phys, problem),
        }
    }
    Some(madt)
}

/// A processor entry as listed (type 0 or 9).
struct MadtCpu {
    apic_id: u32,
    uid: u32,
    x2apic: bool,
    flags: u32,
}

/// What one MADT entry contributes.
enum MadtEntry {
    Cpu(MadtCpu),
    LapicOverride(u64),
    /// I/O APICs, overrides, NMIs, GIC...: not ours to parse here.
    Nothing,
}

/// Decode one MADT entry; Err if it is too short for its type.
fn madt_entry(entry: &Entry<'_>) -> Result<MadtEntry, TableProblem> {
    let b = entry.bytes;
    match entry.entry_type {
        // Processor Local APIC (§5.2.12.2): 8 bytes.
        0 => match (u8_at(b, 2), u8_at(b, 3), u32_at(b, 4)) {
            (Some(uid), Some(id), Some(flags)) => Ok(MadtEntry::Cpu(MadtCpu {
                apic_id: u32::from(id),
                uid: u32::from(uid),
                x2apic: false,
                flags,
            })),
            _ => Err(entry.too_short()),
        },
        // Local APIC Address Override (§5.2.12.8): 12 bytes.
        5 => u64_at(b, 4)
            .map(MadtEntry::LapicOverride)
            .ok_or_else(|| entry.too_short()),
        // Processor Local x2APIC (§5.2.12.12): 16 bytes.
        9 => match (u32_at(b, 4), u32_at(b, 8), u32_at(b, 12)) {
            (Some(apic_id), Some(flags), Some(uid)) => Ok(MadtEntry::Cpu(MadtCpu {
                apic_id,
                uid,
                x2apic: true,
                flags,
            })),
            _ => Err(entry.too_short()),
        },
        _ => Ok(MadtEntry::Nothing),
    }
}

/// The usable CPUs found so far, de-duplicated by APIC id.
struct CpuSet {
    /// (apic_id, index into `Madt::cpus`), sorted by apic_id.
    by_apic_id: Vec<(u32, usize)>,
    limit: Limit,
}

impl CpuSet {
    fn add(
        &mut self,
        madt: &mut Madt,
        cpu: MadtCpu,
        honor_online_capable: bool,
        warnings: &mut Warnings,
        phys: u64,
    ) {
        let enabled = cpu.flags & 1 != 0;
        let online_capable = honor_online_capable && cpu.flags & 2 != 0;
        // 0xFF is the xAPIC broadcast id and 0xFFFFFFFF the x2APIC one: never
        // a real CPU, some firmware uses them for placeholder entries.
        let invalid_id = if cpu.x2apic {
            cpu.apic_id == u32::MAX
        } else {
            cpu.apic_id == 0xFF
        };
        if invalid_id || !(enabled || online_capable) {
            madt.ignored = madt.ignored.saturating_add(1);
            return;
        }
        match self
            .by_apic_id
            .binary_search_by_key(&cpu.apic_id, |&(id, _)| id)
        {
            Ok(pos) => {
                // Same CPU listed twice (QEMU lists CPUs as both LAPIC and
                // x2APIC): keep the first entry, but if either form says
                // enabled the CPU is present.
                madt.duplicates = madt.duplicates.saturating_add(1);
                let existing = self.by_apic_id.get(pos);
                if let Some(existing) = existing.and_then(|&(_, i)| madt.cpus.get_mut(i)) {
                    existing.enabled |= enabled;
                    existing.online_capable =
                        !existing.enabled && (existing.online_capable || online_capable);
                }
            }
            Err(_) if !self.limit.allows(madt.cpus.len(), warnings, phys) => {}
            Err(pos) => {
                self.by_apic_id.insert(pos, (cpu.apic_id, madt.cpus.len()));
                madt.cpus.push(AcpiCpu {
                    apic_id: cpu.apic_id,
                    uid: cpu.uid,
                    x2apic: cpu.x2apic,
                    enabled,
                    // The spec makes the bits exclusive; an enabled CPU is
                    // simply present.
                    online_capable: online_capable && !enabled,
                    node: 0,
                });
            }
        }
    }
}
