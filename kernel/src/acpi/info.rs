//! What the parser hands the kernel: validated tables, CPUs, NUMA affinity.

use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

use super::ascii::Ascii;
use super::error::AcpiWarning;

/// A validated table from the root table (or the root table itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableInfo {
    pub signature: [u8; 4],
    pub phys: u64,
    pub length: u32,
    pub revision: u8,
    pub oem_id: [u8; 6],
    pub oem_table_id: [u8; 8],
    pub oem_revision: u32,
    pub creator_id: [u8; 4],
    pub creator_revision: u32,
}

impl fmt::Display for TableInfo {
    /// Linux's `acpi_tb_print_table_header` format.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ACPI: {} 0x{:016X} {:06X} (v{:02} {} {} {:08X} {} {:08X})",
            Ascii(&self.signature),
            self.phys,
            self.length,
            self.revision,
            Ascii(&self.oem_id),
            Ascii(&self.oem_table_id),
            self.oem_revision,
            Ascii(&self.creator_id),
            self.creator_revision
        )
    }
}

/// A usable CPU from the MADT (entries neither enabled nor online-capable
/// are only counted in [`AcpiInfo::ignored_cpus`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcpiCpu {
    /// Local APIC id (xAPIC entries: 8 bits; x2APIC entries: 32 bits).
    pub apic_id: u32,
    /// ACPI processor UID (matches `_UID` of the processor device).
    pub uid: u32,
    /// Listed by a Local x2APIC entry (type 9) rather than a Local APIC one.
    pub x2apic: bool,
    /// Present and running firmware-side: start it at boot.
    pub enabled: bool,
    /// Not present now but may be hot-added later: do not start it at boot.
    pub online_capable: bool,
    /// Dense NUMA node id (0 without SRAT or if SRAT does not list the CPU).
    pub node: u32,
}

impl AcpiCpu {
    /// Whether the OS may ever use this CPU (ACPI 6.5 Table 5.23).
    pub fn usable(&self) -> bool {
        self.enabled || self.online_capable
    }
}

/// An enabled SRAT processor affinity entry (type 0 or 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuAffinity {
    pub apic_id: u32,
    pub x2apic: bool,
    pub proximity_domain: u32,
    pub node: u32,
}

/// An enabled SRAT memory affinity range (type 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemAffinity {
    pub base: u64,
    /// Length in bytes (never 0; the range never wraps past 2^64).
    pub length: u64,
    pub node: u32,
    pub proximity_domain: u32,
    pub hotplug: bool,
    pub nonvolatile: bool,
}

/// Everything the kernel needs from ACPI.
#[derive(Debug, Clone)]
pub struct AcpiInfo {
    pub rsdp_phys: u64,
    /// RSDP revision: 0 for ACPI 1.0, 2 for ACPI 2.0 and later.
    pub revision: u8,
    pub oem_id: [u8; 6],
    /// Bytes of the RSDP covered by its checksums (20 or `length`).
    pub rsdp_length: u32,
    /// The root table actually used (XSDT or RSDT).
    pub root: TableInfo,
    /// Valid tables listed by the root table, in its order.
    pub tables: Vec<TableInfo>,
    /// A valid MADT was found. Without one, `cpus` is empty and only the
    /// bootstrap processor can be assumed.
    pub has_madt: bool,
    /// Local APIC physical base (MADT type 5 override applied).
    pub lapic_addr: u64,
    /// MADT flag PCAT_COMPAT: dual 8259 PICs are present and must be masked.
    pub pcat_compat: bool,
    /// Usable CPUs in MADT order, de-duplicated by APIC id.
    pub cpus: Vec<AcpiCpu>,
    /// MADT processor entries neither enabled nor online-capable, or with an
    /// invalid APIC id (0xFF / 0xFFFFFFFF).
    pub ignored_cpus: u32,
    /// MADT processor entries for an APIC id already listed.
    pub duplicate_cpus: u32,
    /// A valid SRAT was found.
    pub has_srat: bool,
    /// Enabled SRAT processor affinity entries, in table order.
    pub cpu_affinity: Vec<CpuAffinity>,
    /// Enabled SRAT memory ranges, in table order.
    pub mem_affinity: Vec<MemAffinity>,
    /// Number of NUMA nodes: distinct proximity domains, at least 1.
    pub nr_nodes: u32,
    pub warnings: Vec<AcpiWarning>,
    /// Warnings beyond the first 64, counted but not kept.
    pub suppressed_warnings: u32,
}

impl AcpiInfo {
    /// The CPU with local APIC id `apic_id`, if the MADT lists it as usable.
    pub fn cpu_by_apic_id(&self, apic_id: u32) -> Option<&AcpiCpu> {
        self.cpus.iter().find(|c| c.apic_id == apic_id)
    }

    /// SRAT's memory ranges as the pipeline takes them (node ids, table
    /// order); `None` without a valid SRAT, where all memory is node 0.
    pub fn memory_affinity(&self) -> Option<Vec<memmap::firmware::NodeAffinity>> {
        self.has_srat.then(|| {
            self.mem_affinity
                .iter()
                .map(|m| memmap::firmware::NodeAffinity::new(m.base, m.length, m.node))
                .collect()
        })
    }

    /// The NUMA nodes the boot has: SRAT's, or one without a valid SRAT.
    pub fn node_count(&self) -> u32 {
        if self.has_srat {
            self.nr_nodes.max(1)
        } else {
            1
        }
    }

    /// The first valid table with this signature.
    pub fn table(&self, signature: [u8; 4]) -> Option<&TableInfo> {
        self.tables.iter().find(|t| t.signature == signature)
    }

    /// Boot log lines in the style of Linux's dmesg.
    pub fn report_lines(&self) -> impl Iterator<Item = String> {
        let mut lines = self.table_lines();
        lines.extend(self.madt_lines());
        lines.extend(self.srat_lines());
        let hotplug = self.cpus.iter().filter(|c| !c.enabled).count();
        lines.push(format!(
            "smpboot: Allowing {} CPUs, {} hotplug CPUs",
            self.cpus.len(),
            hotplug
        ));
        lines.into_iter()
    }

    /// RSDP, the root table, every valid table, and the warnings.
    fn table_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        lines.push(format!(
            "ACPI: RSDP 0x{:016X} {:06X} (v{:02} {})",
            self.rsdp_phys,
            self.rsdp_length,
            self.revision,
            Ascii(&self.oem_id)
        ));
        lines.push(format!("{}", self.root));
        lines.extend(self.tables.iter().map(|t| format!("{t}")));
        lines.extend(self.warnings.iter().map(|w| format!("{w}")));
        if self.suppressed_warnings > 0 {
            lines.push(format!(
                "ACPI: {} more warnings suppressed",
                self.suppressed_warnings
            ));
        }
        lines
    }

    /// The local APIC address, a line per usable CPU, what was ignored.
    fn madt_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if self.has_madt {
            lines.push(format!(
                "ACPI: Local APIC address {:#010x}",
                self.lapic_addr
            ));
        } else {
            lines.push(String::from(
                "ACPI: no valid MADT; only the boot CPU is known",
            ));
        }
        lines.extend(self.cpus.iter().map(|cpu| format!("{cpu}")));
        if self.ignored_cpus > 0 {
            lines.push(format!(
                "ACPI: {} disabled or invalid processor entries ignored",
                self.ignored_cpus
            ));
        }
        if self.duplicate_cpus > 0 {
            lines.push(format!(
                "ACPI: {} duplicate processor entries ignored",
                self.duplicate_cpus
            ));
        }
        lines
    }

    /// A line per CPU and memory affinity and the node count, or that
    /// there is no SRAT.
    fn srat_lines(&self) -> Vec<String> {
        if !self.has_srat {
            return vec![String::from("ACPI: no SRAT; everything is on node 0")];
        }
        let mut lines: Vec<String> = self.cpu_affinity.iter().map(|a| format!("{a}")).collect();
        lines.extend(self.mem_affinity.iter().map(|m| format!("{m}")));
        lines.push(format!("ACPI: SRAT: {} NUMA nodes", self.nr_nodes));
        lines
    }
}

impl fmt::Display for AcpiCpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = if self.enabled {
            "enabled"
        } else {
            "online-capable"
        };
        if self.x2apic {
            write!(
                f,
                "ACPI: X2APIC (apic_id[{:#04x}] uid[{:#04x}] {state})",
                self.apic_id, self.uid
            )
        } else {
            write!(
                f,
                "ACPI: LAPIC (acpi_id[{:#04x}] lapic_id[{:#04x}] {state})",
                self.uid, self.apic_id
            )
        }
    }
}

impl fmt::Display for CpuAffinity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.x2apic {
            write!(
                f,
                "ACPI: SRAT: PXM {} -> x2APIC {:#06x} -> Node {}",
                self.proximity_domain, self.apic_id, self.node
            )
        } else {
            write!(
                f,
                "ACPI: SRAT: PXM {} -> APIC {:#04x} -> Node {}",
                self.proximity_domain, self.apic_id, self.node
            )
        }
    }
}

impl fmt::Display for MemAffinity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `length` is non-zero and base + length - 1 cannot wrap: both were
        // checked when the entry was accepted.
        let last = self.base.saturating_add(self.length.saturating_sub(1));
        write!(
            f,
            "ACPI: SRAT: Node {} PXM {} [mem {:#010x}-{:#010x}]{}{}",
            self.node,
            self.proximity_domain,
            self.base,
            last,
            if self.hotplug { " hotplug" } else { "" },
            if self.nonvolatile {
                " non-volatile"
            } else {
                ""
            }
        )
    }
}
