//! SRAT (§5.2.16): CPU and memory affinity, proximity domains to dense node ids.

use alloc::vec::Vec;

use super::error::TableProblem;
use super::error::{Limit, Warnings};
use super::info::{CpuAffinity, MemAffinity};
use super::limits::*;
use super::tables::*;

/// Dense node ids for proximity domains, in order of first use.
#[derive(Default)]
pub(super) struct PxmMap {
    /// (pxm, node) sorted by pxm.
    pub(super) map: Vec<(u32, u32)>,
}

impl PxmMap {
    /// Node for `pxm`, allocating the next id; None once [`MAX_SRAT_NODES`] exist.
    pub(super) fn node(&mut self, pxm: u32) -> Option<u32> {
        match self.map.binary_search_by_key(&pxm, |&(p, _)| p) {
            Ok(pos) => self.map.get(pos).map(|&(_, n)| n),
            Err(_) if self.map.len() >= MAX_SRAT_NODES => None,
            Err(pos) => {
                let node = self.map.len() as u32;
                self.map.insert(pos, (pxm, node));
                Some(node)
            }
        }
    }
}

pub(super) struct Srat {
    pub(super) cpu_affinity: Vec<CpuAffinity>,
    pub(super) mem_affinity: Vec<MemAffinity>,
    pub(super) nr_nodes: u32,
}

/// An enabled processor affinity entry before node numbering.
struct SratCpu {
    pxm: u32,
    apic_id: u32,
    x2apic: bool,
}

/// An enabled, non-empty memory affinity entry before node numbering.
struct SratMem {
    pxm: u32,
    base: u64,
    length: u64,
    flags: u32,
}

/// What one SRAT entry contributes.
enum SratEntry {
    Cpu(SratCpu),
    Mem(SratMem),
    /// Disabled, empty, or of a type that creates no x86 node.
    Nothing,
}

/// §5.2.16. `table` is the whole validated SRAT.
pub(super) fn parse_srat(
    table: &[u8],
    phys: u64,
    revision: u8,
    warnings: &mut Warnings,
) -> Option<Srat> {
    if table.len() < SRAT_ENTRIES_OFFSET {
        let length = table.len() as u32;
        warnings.push(SIG_SRAT, phys, TableProblem::BadLength { length });
        return None;
    }
    let mut cpus: Vec<SratCpu> = Vec::new();
    let mut mems: Vec<SratMem> = Vec::new();
    let mut cpu_limit = Limit::new(SIG_SRAT, "CPU affinity entries", MAX_CPUS);
    let mut mem_limit = Limit::new(SIG_SRAT, "memory ranges", MAX_MEM_RANGES);
    for entry in entries(table, SRAT_ENTRIES_OFFSET) {
        let entry = match entry {
            Ok(e) => e,
            Err(problem) => {
                warnings.push(SIG_SRAT, phys, problem);
                break;
            }
        };
        match srat_entry(&entry, revision) {
            Ok(SratEntry::Cpu(cpu)) => {
                if cpu_limit.allows(cpus.len(), warnings, phys) {
                    cpus.push(cpu);
                }
            }
            Ok(SratEntry::Mem(mem)) => {
                if mem_limit.allows(mems.len(), warnings, phys) {
                    mems.push(mem);
                }
            }
            Ok(SratEntry::Nothing) => {}
            Err(problem) => warnings.push(SIG_SRAT, phys, problem),
        }
    }
    Some(number_nodes(&cpus, &mems, warnings, phys))
}

/// Decode one SRAT entry; Err for an entry too short for its type or a
/// memory range that wraps.
fn srat_entry(entry: &Entry<'_>, revision: u8) -> Result<SratEntry, TableProblem> {
    let b = entry.bytes;
    match entry.entry_type {
        // Processor Local APIC/SAPIC Affinity (§5.2.16.1): 16 bytes.
        0 => {
            let fields = (u8_at(b, 2), u8_at(b, 3), u32_at(b, 4), array_at::<3>(b, 9));
            let (Some(pxm_lo), Some(apic_id), Some(flags), Some(pxm_hi)) = fields else {
                return Err(entry.too_short());
            };
            if flags & 1 == 0 {
                return Ok(SratEntry::Nothing);
            }
            let mut pxm = u32::from(pxm_lo);
            // Bits 31:8 of the domain were reserved in SRAT revision 1
            // (ACPI 2.0); Linux ignores them there too.
            if revision >= 2 {
                let [b1, b2, b3] = pxm_hi;
                pxm |= u32::from_le_bytes([0, b1, b2, b3]);
            }
            Ok(SratEntry::Cpu(SratCpu {
                pxm,
                apic_id: u32::from(apic_id),
                x2apic: false,
            }))
        }
        // Memory Affinity (§5.2.16.2): 40 bytes.
        1 => {
            let fields = (u32_at(b, 2), u64_at(b, 8), u64_at(b, 16), u32_at(b, 28));
            let (Some(mut pxm), Some(base), Some(length), Some(flags)) = fields else {
                return Err(entry.too_short());
            };
            if flags & 1 == 0 || length == 0 {
                // Disabled entries are placeholders; a zero-length range
                // describes no memory.
                return Ok(SratEntry::Nothing);
            }
            if base.checked_add(length - 1).is_none() {
                return Err(TableProblem::BadRange { base, length });
            }
            // As for processors: only 8 domain bits before revision 2.
            if revision < 2 {
                pxm &= 0xFF;
            }
            Ok(SratEntry::Mem(SratMem {
                pxm,
                base,
                length,
                flags,
            }))
        }
        // Processor Local x2APIC Affinity (§5.2.16.3): 24 bytes.
        2 => {
            let (Some(pxm), Some(x2apic_id), Some(flags)) =
                (u32_at(b, 4), u32_at(b, 8), u32_at(b, 12))
            else {
                return Err(entry.too_short());
            };
            if flags & 1 == 0 {
                return Ok(SratEntry::Nothing);
            }
            Ok(SratEntry::Cpu(SratCpu {
                pxm,
                apic_id: x2apic_id,
                x2apic: true,
            }))
        }
        // GICC, GIC ITS, generic initiator/port affinity: not x86 CPUs or
        // RAM, so they create no nodes here.
        _ => Ok(SratEntry::Nothing),
    }
}

/// Dense node ids for the proximity domains. Linux numbers nodes for all
/// processor entries first, then for memory entries, so a memory-only node
/// gets an id after every CPU node.
fn number_nodes(cpus: &[SratCpu], mems: &[SratMem], warnings: &mut Warnings, phys: u64) -> Srat {
    let mut pxm_map = PxmMap::default();
    let mut node_limit = Limit::new(SIG_SRAT, "NUMA nodes", MAX_SRAT_NODES);
    let mut node_of = |pxm: u32, warnings: &mut Warnings| {
        let node = pxm_map.node(pxm);
        if node.is_none() {
            // The map is full: this records the warning.
            node_limit.allows(pxm_map.map.len(), warnings, phys);
        }
        node
    };
    let mut srat = Srat {
        cpu_affinity: Vec::new(),
        mem_affinity: Vec::new(),
        nr_nodes: 1,
    };
    for cpu in cpus {
        if let Some(node) = node_of(cpu.pxm, warnings) {
            srat.cpu_affinity.push(CpuAffinity {
                apic_id: cpu.apic_id,
                x2apic: cpu.x2apic,
                proximity_domain: cpu.pxm,
                node,
            });
        }
    }
    for mem in mems {
        if let Some(node) = node_of(mem.pxm, warnings) {
            srat.mem_affinity.push(MemAffinity {
                base: mem.base,
                length: mem.length,
                node,
                proximity_domain: mem.pxm,
                hotplug: mem.flags & 2 != 0,
                nonvolatile: mem.flags & 4 != 0,
            });
        }
    }
    srat.nr_nodes = (pxm_map.map.len() as u32).max(1);
    srat
}
