//! ACPI table parsing: from the RSDP to the CPUs (MADT) and NUMA layout (SRAT).
//!
//! # The walk
//!
//! 1. **RSDP** (ACPI 6.5 §5.2.5). The bootloader hands us its physical
//!    address. We check the `"RSD PTR "` signature and the checksum of the
//!    first 20 bytes (the ACPI 1.0 structure). For revision ≥ 2 the structure
//!    is longer: we also check `length` and the extended checksum over it.
//! 2. **Root table** (§5.2.7 RSDT, §5.2.8 XSDT). With revision ≥ 2 and a
//!    non-zero XSDT address we use the XSDT (64-bit entries); if the XSDT is
//!    invalid but an RSDT exists we warn and fall back to the RSDT (32-bit
//!    entries), as the spec keeps the RSDT for exactly that compatibility.
//!    The root table's header checksum must hold; its entry count comes from
//!    its `length`.
//! 3. **Each listed table** (§5.2.6 system description table header). We read
//!    the 36-byte header, reject impossible lengths (< 36 or > 16 MiB) and
//!    verify the checksum over the whole table. A table that fails is reported
//!    as an [`AcpiWarning`] and skipped: nothing from it is trusted. Only an
//!    invalid RSDP or root table is fatal ([`AcpiError`]).
//! 4. **MADT** `"APIC"` (§5.2.12): the local APIC address (type 5 override
//!    wins over the 32-bit header field), Processor Local APIC (type 0,
//!    §5.2.12.2) and Processor Local x2APIC (type 9, §5.2.12.12) entries. A
//!    CPU is usable when Enabled, or Online Capable (MADT revision ≥ 5 only,
//!    §5.2.12.2 Table 5.23: the bit was reserved before ACPI 6.3). CPUs are
//!    de-duplicated by APIC id, since firmware such as QEMU may list the same
//!    CPU as both a local APIC and a local x2APIC.
//! 5. **SRAT** `"SRAT"` (§5.2.16): Processor Local APIC/SAPIC Affinity
//!    (type 0, §5.2.16.1), Memory Affinity (type 1, §5.2.16.2) and Processor
//!    Local x2APIC Affinity (type 2, §5.2.16.3). Disabled entries are skipped.
//!    Proximity domains (PXMs, arbitrary 32-bit numbers) are mapped to dense
//!    node ids `0..n` in order of first appearance, CPU affinity entries
//!    first and memory entries second, the same order as Linux's
//!    `acpi_numa_init` / `acpi_map_pxm_to_node`.
//!
//! Physical memory is only reached through [`PhysMemory`], so the same code
//! runs over real memory in the kernel and over synthetic tables in host
//! tests. Every field is read from a copied byte buffer with
//! `from_le_bytes`; every slice access is bounds-checked with `get`, so no
//! input, however corrupt, can panic or make a loop run forever (every
//! structure walk advances by at least 2 bytes and is bounded by a length
//! that was validated first). Large allocations use `try_reserve`, and counts
//! of CPUs, nodes, memory ranges and warnings are capped, so hostile tables
//! cannot exhaust the kernel heap.

mod ascii;
mod error;
mod info;
mod limits;
mod madt;
mod srat;
mod tables;
#[cfg(test)]
mod tests;

pub use error::{AcpiError, AcpiWarning, TableProblem};
pub use info::{AcpiCpu, AcpiInfo, CpuAffinity, MemAffinity, TableInfo};
pub use limits::{DEFAULT_LAPIC_ADDR, MAX_CPUS, MAX_SRAT_NODES, MAX_TABLE_LEN, SDT_HEADER_LEN};
pub use tables::PhysMemory;

use alloc::vec::Vec;

use error::Warnings;
use limits::*;
use madt::parse_madt;
use srat::parse_srat;
use tables::{fetch_table, find_root, read_array, read_rsdp};

/// Parses the ACPI tables reachable from the RSDP at `rsdp_phys`.
///
/// Errors only if the RSDP or the root table is invalid; problems with
/// individual tables or entries are returned in [`AcpiInfo::warnings`].
pub fn parse(rsdp_phys: u64, mem: &(impl PhysMemory + ?Sized)) -> Result<AcpiInfo, AcpiError> {
    let rsdp = read_rsdp(mem, rsdp_phys)?;
    let mut warnings = Warnings::default();
    let (root, entry_size) = find_root(mem, rsdp_phys, &rsdp, &mut warnings)?;

    // Trailing bytes that do not form a whole entry are ignored.
    let total_entries = (root.length - SDT_HEADER_LEN) / entry_size;
    if total_entries > MAX_ROOT_ENTRIES {
        let (what, limit) = ("root table entries", MAX_ROOT_ENTRIES);
        let reason = TableProblem::LimitReached { what, limit };
        warnings.push(root.signature, root.phys, reason);
    }

    let listed = walk_root(mem, &root, entry_size, total_entries, &mut warnings);
    let mut info = AcpiInfo {
        rsdp_phys,
        revision: rsdp.revision,
        oem_id: rsdp.oem_id,
        rsdp_length: rsdp.length,
        root,
        tables: listed.tables,
        has_madt: false,
        lapic_addr: DEFAULT_LAPIC_ADDR,
        pcat_compat: false,
        cpus: Vec::new(),
        ignored_cpus: 0,
        duplicate_cpus: 0,
        has_srat: false,
        cpu_affinity: Vec::new(),
        mem_affinity: Vec::new(),
        nr_nodes: 1,
        warnings: Vec::new(),
        suppressed_warnings: 0,
    };
    if let Some((t, data)) = listed.madt {
        if let Some(m) = parse_madt(&data, t.phys, t.revision, &mut warnings) {
            info.has_madt = true;
            info.lapic_addr = m.lapic_addr;
            info.pcat_compat = m.pcat_compat;
            info.cpus = m.cpus;
            info.ignored_cpus = m.ignored;
            info.duplicate_cpus = m.duplicates;
        }
    }
    if let Some((t, data)) = listed.srat {
        if let Some(srat) = parse_srat(&data, t.phys, t.revision, &mut warnings) {
            apply_srat(&mut info, srat);
        }
    }
    info.warnings = warnings.list;
    info.suppressed_warnings = warnings.suppressed;
    Ok(info)
}

/// The tables the root table lists, validated, and a copy of the first MADT
/// and SRAT for parsing.
struct ListedTables {
    tables: Vec<TableInfo>,
    madt: Option<(TableInfo, Vec<u8>)>,
    srat: Option<(TableInfo, Vec<u8>)>,
}

/// Follow the root table's first `total_entries` (capped) entries.
fn walk_root(
    mem: &(impl PhysMemory + ?Sized),
    root: &TableInfo,
    entry_size: u32,
    total_entries: u32,
    warnings: &mut Warnings,
) -> ListedTables {
    let mut tables: Vec<TableInfo> = Vec::new();
    let mut visited: Vec<u64> = Vec::new();
    let mut madt: Option<(TableInfo, Vec<u8>)> = None;
    let mut srat: Option<(TableInfo, Vec<u8>)> = None;
    for i in 0..total_entries.min(MAX_ROOT_ENTRIES) {
        let at = u64::from(SDT_HEADER_LEN + i * entry_size);
        let entry = root.phys.checked_add(at).and_then(|p| {
            if entry_size == 8 {
                read_array::<8, _>(mem, p).ok().map(u64::from_le_bytes)
            } else {
                read_array::<4, _>(mem, p)
                    .ok()
                    .map(u32::from_le_bytes)
                    .map(u64::from)
            }
        });
        let Some(phys) = entry else {
            // It was readable a moment ago for the checksum; give up on it.
            warnings.push(root.signature, root.phys, TableProblem::Unreadable);
            break;
        };
        if phys != 0 && visited.contains(&phys) {
            warnings.push(SIG_UNKNOWN, phys, TableProblem::DuplicateAddress);
            continue;
        }
        visited.push(phys);
        let keep = |sig: &[u8; 4]| {
            (*sig == SIG_MADT && madt.is_none()) || (*sig == SIG_SRAT && srat.is_none())
        };
        match fetch_table(mem, phys, None, keep) {
            Err((sig, problem)) => warnings.push(sig, phys, problem),
            Ok((info, data)) => {
                if (info.signature == SIG_MADT || info.signature == SIG_SRAT) && data.is_none() {
                    warnings.push(info.signature, phys, TableProblem::DuplicateTable);
                }
                tables.push(info);
                match (info.signature, data) {
                    (SIG_MADT, Some(d)) => madt = Some((info, d)),
                    (SIG_SRAT, Some(d)) => srat = Some((info, d)),
                    _ => {}
                }
            }
        }
    }

    ListedTables { tables, madt, srat }
}

/// Record the SRAT's nodes, and each MADT CPU's node from its affinity
/// entry.
fn apply_srat(info: &mut AcpiInfo, s: srat::Srat) {
    info.has_srat = true;
    info.nr_nodes = s.nr_nodes;
    // apic id -> node, first SRAT entry wins if a CPU is listed twice.
    let mut node_of: Vec<(u32, u32)> = Vec::new();
    for a in &s.cpu_affinity {
        if let Err(pos) = node_of.binary_search_by_key(&a.apic_id, |&(id, _)| id) {
            node_of.insert(pos, (a.apic_id, a.node));
        }
    }
    for cpu in &mut info.cpus {
        // A CPU the SRAT does not mention goes to node 0, as Linux
        // does when NUMA_NO_NODE falls back.
        cpu.node = node_of
            .binary_search_by_key(&cpu.apic_id, |&(id, _)| id)
            .ok()
            .and_then(|pos| node_of.get(pos))
            .map_or(0, |&(_, n)| n);
    }
    info.cpu_affinity = s.cpu_affinity;
    info.mem_affinity = s.mem_affinity;
}
