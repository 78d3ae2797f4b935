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

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

/// Read-only access to physical memory.
pub trait PhysMemory {
    /// Copy `buf.len()` bytes from physical address `phys`; Err if not
    /// readable/out of range.
    fn read(&self, phys: u64, buf: &mut [u8]) -> Result<(), AcpiError>;
}

/// Size of the standard system description table header (§5.2.6).
pub const SDT_HEADER_LEN: u32 = 36;
/// Largest table length we believe. Real tables are a few KiB (a MADT for
/// 8192 x2APIC CPUs is 128 KiB); anything bigger is a corrupt length field.
pub const MAX_TABLE_LEN: u32 = 16 << 20;
/// The ACPI 1.0 RSDP is 20 bytes; its checksum covers exactly those.
const RSDP_V1_LEN: u32 = 20;
/// The ACPI 2.0+ RSDP is 36 bytes (§5.2.5.3).
const RSDP_V2_LEN: u32 = 36;
/// An RSDP `length` beyond one page is not a future extension but garbage.
const RSDP_MAX_LEN: u32 = 4096;
/// Root table entries we follow. Real firmware lists a few dozen tables.
const MAX_ROOT_ENTRIES: u32 = 1024;
/// CPUs we record (the x86 Linux `NR_CPUS` maximum).
pub const MAX_CPUS: usize = 8192;
/// Distinct NUMA nodes we record (Linux's `MAX_NUMNODES` at `NODES_SHIFT` 10).
pub const MAX_NODES: usize = 1024;
/// SRAT memory ranges we record.
const MAX_MEM_RANGES: usize = 4096;
/// Warnings we keep; further ones are only counted.
const MAX_WARNINGS: usize = 64;
/// Default local APIC base (Intel SDM Vol. 3 §11.4.1), used without a MADT.
pub const DEFAULT_LAPIC_ADDR: u64 = 0xFEE0_0000;

/// MADT: entries start after the header, the local APIC address and flags.
const MADT_ENTRIES_OFFSET: usize = 44;
/// SRAT: entries start after the header and 12 reserved bytes.
const SRAT_ENTRIES_OFFSET: usize = 48;

const SIG_MADT: [u8; 4] = *b"APIC";
const SIG_SRAT: [u8; 4] = *b"SRAT";
const SIG_XSDT: [u8; 4] = *b"XSDT";
const SIG_RSDT: [u8; 4] = *b"RSDT";
/// Placeholder signature for a table whose header we could not read.
const SIG_UNKNOWN: [u8; 4] = *b"????";

// ---------------------------------------------------------------------------
// Errors and warnings
// ---------------------------------------------------------------------------

/// Why a table (or one entry of it) could not be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableProblem {
    /// The root table lists physical address 0.
    NullAddress,
    /// [`PhysMemory::read`] failed somewhere inside the table.
    Unreadable,
    /// `length` is < 36, > [`MAX_TABLE_LEN`], or too short for the table's
    /// fixed fields.
    BadLength { length: u32 },
    /// A root table pointer led to a table with another signature.
    BadSignature { found: [u8; 4] },
    /// The bytes of the table do not sum to 0 mod 256.
    BadChecksum { sum: u8 },
    /// The heap could not hold a copy of the table.
    OutOfMemory { length: u32 },
    /// The root table lists this address more than once.
    DuplicateAddress,
    /// An earlier valid table had the same signature; only the first is used
    /// (as `AcpiGetTable(sig, instance 1)` would).
    DuplicateTable,
    /// More than `limit` items of kind `what`; the rest are ignored.
    LimitReached { what: &'static str, limit: u32 },
    /// An entry is too short for its type; that entry alone is skipped.
    BadEntry {
        offset: u32,
        entry_type: u8,
        entry_length: u8,
    },
    /// An entry's length is < 2 or runs past the table end, so the walk
    /// cannot continue; the rest of the table is ignored.
    EntriesTruncated {
        offset: u32,
        entry_type: u8,
        entry_length: u8,
    },
    /// An SRAT memory range that wraps past the top of the address space.
    BadRange { base: u64, length: u64 },
}

impl TableProblem {
    /// What the parser did about it, for messages.
    fn consequence(&self) -> &'static str {
        match self {
            Self::BadEntry { .. } | Self::BadRange { .. } => "entry ignored",
            Self::EntriesTruncated { .. } => "rest of table ignored",
            Self::LimitReached { .. } => "the rest are ignored",
            Self::DuplicateAddress => "later entries ignored",
            _ => "table ignored",
        }
    }
}

impl fmt::Display for TableProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::NullAddress => write!(f, "null table address"),
            Self::Unreadable => write!(f, "table is not readable (outside mapped memory)"),
            Self::BadLength { length } => write!(
                f,
                "impossible length {length} (need {SDT_HEADER_LEN}..={MAX_TABLE_LEN} and room \
                 for the fixed fields)"
            ),
            Self::BadSignature { found } => {
                write!(f, "unexpected signature \"{}\"", Ascii(&found))
            }
            Self::BadChecksum { sum } => {
                write!(f, "checksum mismatch (bytes sum to {sum:#04x}, not 0)")
            }
            Self::OutOfMemory { length } => {
                write!(f, "cannot allocate {length} bytes to parse the table")
            }
            Self::DuplicateAddress => write!(f, "address listed twice in the root table"),
            Self::DuplicateTable => write!(f, "a valid table with this signature came first"),
            Self::LimitReached { what, limit } => write!(f, "more than {limit} {what}"),
            Self::BadEntry {
                offset,
                entry_type,
                entry_length,
            } => write!(
                f,
                "entry type {entry_type} at offset {offset:#x} is too short (length {entry_length})"
            ),
            Self::EntriesTruncated {
                offset,
                entry_type,
                entry_length,
            } => write!(
                f,
                "entry type {entry_type} at offset {offset:#x} has impossible length {entry_length}"
            ),
            Self::BadRange { base, length } => write!(
                f,
                "memory range base {base:#x} length {length:#x} wraps past the top of memory"
            ),
        }
    }
}

/// Fatal problems: without a valid RSDP and root table there is no ACPI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcpiError {
    /// Physical memory at `phys..phys+len` could not be read.
    Unreadable { phys: u64, len: u64 },
    /// No `"RSD PTR "` signature at the given address.
    RsdpSignature { phys: u64, found: [u8; 8] },
    /// The ACPI 1.0 checksum (first 20 bytes) fails.
    RsdpChecksum { phys: u64 },
    /// The ACPI 2.0+ extended checksum (over `length` bytes) fails.
    RsdpExtendedChecksum { phys: u64, length: u32 },
    /// The ACPI 2.0+ `length` field is impossible.
    RsdpLength { phys: u64, length: u32 },
    /// The RSDP gives neither an XSDT nor an RSDT address.
    NoRootTable { rsdp_phys: u64 },
    /// The XSDT/RSDT we must use is invalid.
    RootTable {
        signature: [u8; 4],
        phys: u64,
        problem: TableProblem,
    },
}

impl fmt::Display for AcpiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Unreadable { phys, len } => write!(
                f,
                "ACPI: cannot read {len} bytes at physical {phys:#x}: the address is outside \
                 mapped memory; check the RSDP address from the bootloader and the physical \
                 memory mapping"
            ),
            Self::RsdpSignature { phys, found } => write!(
                f,
                "ACPI: no RSDP at physical {phys:#x} (found \"{}\", not \"RSD PTR \"): the \
                 bootloader passed a wrong RSDP address",
                Ascii(&found)
            ),
            Self::RsdpChecksum { phys } => write!(
                f,
                "ACPI: RSDP at physical {phys:#x} fails its checksum over the first 20 bytes: \
                 wrong address or corrupt firmware tables; update the firmware or boot \
                 without ACPI"
            ),
            Self::RsdpExtendedChecksum { phys, length } => write!(
                f,
                "ACPI: RSDP at physical {phys:#x} fails its extended checksum over {length} \
                 bytes: corrupt firmware tables; update the firmware or boot without ACPI"
            ),
            Self::RsdpLength { phys, length } => write!(
                f,
                "ACPI: RSDP at physical {phys:#x} claims length {length} (expected \
                 {RSDP_V2_LEN}..={RSDP_MAX_LEN}): corrupt RSDP; update the firmware"
            ),
            Self::NoRootTable { rsdp_phys } => write!(
                f,
                "ACPI: RSDP at physical {rsdp_phys:#x} has neither an XSDT nor an RSDT \
                 address: the firmware provides no ACPI tables"
            ),
            Self::RootTable {
                signature,
                phys,
                problem,
            } => write!(
                f,
                "ACPI: root table {} at physical {phys:#x} is unusable: {problem}; the \
                 firmware tables are corrupt, update the firmware or boot without ACPI",
                Ascii(&signature)
            ),
        }
    }
}

/// A non-fatal problem: one table or entry was skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcpiWarning {
    /// Signature of the affected table (`"????"` if its header was unreadable).
    pub signature: [u8; 4],
    /// Physical address of the affected table.
    pub phys: u64,
    pub reason: TableProblem,
}

impl fmt::Display for AcpiWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ACPI: [{}] at 0x{:016X}: {}; {}",
            Ascii(&self.signature),
            self.phys,
            self.reason,
            self.reason.consequence()
        )
    }
}

// ---------------------------------------------------------------------------
// Output
// ---------------------------------------------------------------------------

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

    /// The first valid table with this signature.
    pub fn table(&self, signature: [u8; 4]) -> Option<&TableInfo> {
        self.tables.iter().find(|t| t.signature == signature)
    }

    /// Boot log lines in the style of Linux's dmesg.
    pub fn report_lines(&self) -> impl Iterator<Item = String> {
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
        for cpu in &self.cpus {
            let state = if cpu.enabled {
                "enabled"
            } else {
                "online-capable"
            };
            lines.push(if cpu.x2apic {
                format!(
                    "ACPI: X2APIC (apic_id[{:#04x}] uid[{:#04x}] {state})",
                    cpu.apic_id, cpu.uid
                )
            } else {
                format!(
                    "ACPI: LAPIC (acpi_id[{:#04x}] lapic_id[{:#04x}] {state})",
                    cpu.uid, cpu.apic_id
                )
            });
        }
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
        if self.has_srat {
            for a in &self.cpu_affinity {
                lines.push(if a.x2apic {
                    format!(
                        "ACPI: SRAT: PXM {} -> x2APIC {:#06x} -> Node {}",
                        a.proximity_domain, a.apic_id, a.node
                    )
                } else {
                    format!(
                        "ACPI: SRAT: PXM {} -> APIC {:#04x} -> Node {}",
                        a.proximity_domain, a.apic_id, a.node
                    )
                });
            }
            for m in &self.mem_affinity {
                // `length` is non-zero and base + length - 1 cannot wrap:
                // both were checked when the entry was accepted.
                let last = m.base.saturating_add(m.length.saturating_sub(1));
                lines.push(format!(
                    "ACPI: SRAT: Node {} PXM {} [mem {:#010x}-{:#010x}]{}{}",
                    m.node,
                    m.proximity_domain,
                    m.base,
                    last,
                    if m.hotplug { " hotplug" } else { "" },
                    if m.nonvolatile { " non-volatile" } else { "" }
                ));
            }
            lines.push(format!("ACPI: SRAT: {} NUMA nodes", self.nr_nodes));
        } else {
            lines.push(String::from("ACPI: no SRAT; everything is on node 0"));
        }
        let hotplug = self.cpus.iter().filter(|c| !c.enabled).count();
        lines.push(format!(
            "smpboot: Allowing {} CPUs, {} hotplug CPUs",
            self.cpus.len(),
            hotplug
        ));
        lines.into_iter()
    }
}

// ---------------------------------------------------------------------------
// Byte helpers: every access is checked, nothing can panic.
// ---------------------------------------------------------------------------

/// Prints bytes as ASCII: NUL as space (OEM ids are often NUL padded), other
/// non-printable bytes as `?`.
struct Ascii<'a>(&'a [u8]);

impl fmt::Display for Ascii<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use fmt::Write;
        for &b in self.0 {
            let c = match b {
                0 => ' ',
                0x20..=0x7e => char::from(b),
                _ => '?',
            };
            f.write_char(c)?;
        }
        Ok(())
    }
}

fn array_at<const N: usize>(b: &[u8], offset: usize) -> Option<[u8; N]> {
    b.get(offset..offset.checked_add(N)?)?.try_into().ok()
}

fn u8_at(b: &[u8], offset: usize) -> Option<u8> {
    b.get(offset).copied()
}

fn u32_at(b: &[u8], offset: usize) -> Option<u32> {
    array_at(b, offset).map(u32::from_le_bytes)
}

fn u64_at(b: &[u8], offset: usize) -> Option<u64> {
    array_at(b, offset).map(u64::from_le_bytes)
}

fn sum_bytes(start: u8, bytes: &[u8]) -> u8 {
    bytes.iter().fold(start, |s, &b| s.wrapping_add(b))
}

fn read_array<const N: usize, M: PhysMemory + ?Sized>(
    mem: &M,
    phys: u64,
) -> Result<[u8; N], AcpiError> {
    let mut buf = [0u8; N];
    mem.read(phys, &mut buf)?;
    Ok(buf)
}

/// Sum of `len_bytes` bytes at `phys`, read in small chunks so that tables
/// we only validate never need a heap copy.
fn checksum_phys<M: PhysMemory + ?Sized>(mem: &M, phys: u64, len_bytes: u32) -> Option<u8> {
    let mut chunk = [0u8; 512];
    let mut sum = 0u8;
    let mut done: u32 = 0;
    while done < len_bytes {
        let n = (len_bytes - done).min(chunk.len() as u32);
        let buf = chunk.get_mut(..n as usize)?;
        mem.read(phys.checked_add(u64::from(done))?, buf).ok()?;
        sum = sum_bytes(sum, buf);
        done += n;
    }
    Some(sum)
}

/// Parses a 36-byte SDT header (§5.2.6).
fn parse_header(phys: u64, h: &[u8; SDT_HEADER_LEN as usize]) -> TableInfo {
    TableInfo {
        signature: array_at(h, 0).unwrap_or(SIG_UNKNOWN),
        phys,
        length: u32_at(h, 4).unwrap_or(0),
        revision: u8_at(h, 8).unwrap_or(0),
        oem_id: array_at(h, 10).unwrap_or_default(),
        oem_table_id: array_at(h, 16).unwrap_or_default(),
        oem_revision: u32_at(h, 24).unwrap_or(0),
        creator_id: array_at(h, 28).unwrap_or_default(),
        creator_revision: u32_at(h, 32).unwrap_or(0),
    }
}

/// A validated table, with a heap copy of its bytes if it was asked for.
type Fetched = (TableInfo, Option<Vec<u8>>);
/// The signature to report (expected or found) and what was wrong.
type Rejected = ([u8; 4], TableProblem);

/// Validates the table at `phys`: header readable, plausible length,
/// expected signature (if given), checksum. When `keep` says so for its
/// signature, the whole table is returned as a heap copy for parsing.
fn fetch_table<M: PhysMemory + ?Sized>(
    mem: &M,
    phys: u64,
    expected: Option<[u8; 4]>,
    keep: impl Fn(&[u8; 4]) -> bool,
) -> Result<Fetched, Rejected> {
    let unknown = expected.unwrap_or(SIG_UNKNOWN);
    if phys == 0 {
        return Err((unknown, TableProblem::NullAddress));
    }
    let raw = read_array::<{ SDT_HEADER_LEN as usize }, M>(mem, phys)
        .map_err(|_| (unknown, TableProblem::Unreadable))?;
    let info = parse_header(phys, &raw);
    if let Some(want) = expected {
        if info.signature != want {
            return Err((
                want,
                TableProblem::BadSignature {
                    found: info.signature,
                },
            ));
        }
    }
    let sig = info.signature;
    let length = info.length;
    if !(SDT_HEADER_LEN..=MAX_TABLE_LEN).contains(&length) {
        return Err((sig, TableProblem::BadLength { length }));
    }
    if keep(&sig) {
        let mut data = Vec::new();
        data.try_reserve_exact(length as usize)
            .map_err(|_| (sig, TableProblem::OutOfMemory { length }))?;
        data.resize(length as usize, 0);
        mem.read(phys, &mut data)
            .map_err(|_| (sig, TableProblem::Unreadable))?;
        match sum_bytes(0, &data) {
            0 => Ok((info, Some(data))),
            sum => Err((sig, TableProblem::BadChecksum { sum })),
        }
    } else {
        match checksum_phys(mem, phys, length) {
            None => Err((sig, TableProblem::Unreadable)),
            Some(0) => Ok((info, None)),
            Some(sum) => Err((sig, TableProblem::BadChecksum { sum })),
        }
    }
}

/// Collects warnings, keeping at most [`MAX_WARNINGS`].
#[derive(Default)]
struct Warnings {
    list: Vec<AcpiWarning>,
    suppressed: u32,
}

impl Warnings {
    fn push(&mut self, signature: [u8; 4], phys: u64, reason: TableProblem) {
        if self.list.len() < MAX_WARNINGS {
            self.list.push(AcpiWarning {
                signature,
                phys,
                reason,
            });
        } else {
            self.suppressed = self.suppressed.saturating_add(1);
        }
    }
}

// ---------------------------------------------------------------------------
// RSDP and root table
// ---------------------------------------------------------------------------

struct Rsdp {
    revision: u8,
    oem_id: [u8; 6],
    length: u32,
    rsdt: u32,
    xsdt: u64,
}

/// §5.2.5.3: validates the RSDP at `phys`.
fn read_rsdp<M: PhysMemory + ?Sized>(mem: &M, phys: u64) -> Result<Rsdp, AcpiError> {
    let v1 = read_array::<{ RSDP_V1_LEN as usize }, M>(mem, phys)?;
    let signature: [u8; 8] = array_at(&v1, 0).unwrap_or_default();
    if &signature != b"RSD PTR " {
        return Err(AcpiError::RsdpSignature {
            phys,
            found: signature,
        });
    }
    if sum_bytes(0, &v1) != 0 {
        return Err(AcpiError::RsdpChecksum { phys });
    }
    let mut rsdp = Rsdp {
        revision: u8_at(&v1, 15).unwrap_or(0),
        oem_id: array_at(&v1, 9).unwrap_or_default(),
        length: RSDP_V1_LEN,
        rsdt: u32_at(&v1, 16).unwrap_or(0),
        xsdt: 0,
    };
    // Revision 1 was never defined; anything below 2 is the 1.0 layout.
    if rsdp.revision >= 2 {
        let v2 = read_array::<{ RSDP_V2_LEN as usize }, M>(mem, phys)?;
        let length = u32_at(&v2, 20).unwrap_or(0);
        if !(RSDP_V2_LEN..=RSDP_MAX_LEN).contains(&length) {
            return Err(AcpiError::RsdpLength { phys, length });
        }
        match checksum_phys(mem, phys, length) {
            None => {
                return Err(AcpiError::Unreadable {
                    phys,
                    len: u64::from(length),
                })
            }
            Some(0) => {}
            Some(_) => return Err(AcpiError::RsdpExtendedChecksum { phys, length }),
        }
        rsdp.length = length;
        rsdp.xsdt = u64_at(&v2, 24).unwrap_or(0);
    }
    Ok(rsdp)
}

/// Picks and validates the root table: XSDT if possible, else RSDT.
/// Returns it with its entry size in bytes.
fn find_root<M: PhysMemory + ?Sized>(
    mem: &M,
    rsdp_phys: u64,
    rsdp: &Rsdp,
    warnings: &mut Warnings,
) -> Result<(TableInfo, u32), AcpiError> {
    let rsdt = u64::from(rsdp.rsdt);
    let fetch_rsdt = || {
        fetch_table(mem, rsdt, Some(SIG_RSDT), |_| false)
            .map(|(t, _)| (t, 4))
            .map_err(|(signature, problem)| AcpiError::RootTable {
                signature,
                phys: rsdt,
                problem,
            })
    };
    if rsdp.revision >= 2 && rsdp.xsdt != 0 {
        match fetch_table(mem, rsdp.xsdt, Some(SIG_XSDT), |_| false) {
            Ok((t, _)) => Ok((t, 8)),
            Err((signature, problem)) if rsdt == 0 => Err(AcpiError::RootTable {
                signature,
                phys: rsdp.xsdt,
                problem,
            }),
            Err((signature, problem)) => {
                // The RSDT exists for ACPI 1.0 OSes; it is the documented
                // fallback when the XSDT is broken.
                warnings.push(signature, rsdp.xsdt, problem);
                fetch_rsdt()
            }
        }
    } else if rsdt != 0 {
        fetch_rsdt()
    } else {
        Err(AcpiError::NoRootTable { rsdp_phys })
    }
}

// ---------------------------------------------------------------------------
// Entry walk shared by MADT and SRAT (both are type/length lists)
// ---------------------------------------------------------------------------

struct Entry<'a> {
    offset: usize,
    entry_type: u8,
    /// The whole entry including its type and length bytes, so spec offsets
    /// apply directly.
    bytes: &'a [u8],
}

impl Entry<'_> {
    fn too_short(&self) -> TableProblem {
        TableProblem::BadEntry {
            offset: self.offset as u32,
            entry_type: self.entry_type,
            entry_length: self.bytes.len() as u8,
        }
    }
}

/// Iterates type/length entries from `offset` to the end of `table`. Yields
/// one `Err` and stops on an entry whose length is < 2 (which would never
/// advance) or runs past the table end.
struct Entries<'a> {
    table: &'a [u8],
    offset: usize,
    done: bool,
}

impl<'a> Iterator for Entries<'a> {
    type Item = Result<Entry<'a>, TableProblem>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.offset >= self.table.len() {
            return None;
        }
        let offset = self.offset;
        let entry_type = u8_at(self.table, offset).unwrap_or(0);
        let entry_length = u8_at(self.table, offset + 1).unwrap_or(0);
        let bytes = match usize::from(entry_length) {
            0 | 1 => None,
            n => self.table.get(offset..offset + n),
        };
        match bytes {
            Some(bytes) => {
                self.offset = offset + bytes.len();
                Some(Ok(Entry {
                    offset,
                    entry_type,
                    bytes,
                }))
            }
            None => {
                self.done = true;
                Some(Err(TableProblem::EntriesTruncated {
                    offset: offset as u32,
                    entry_type,
                    entry_length,
                }))
            }
        }
    }
}

fn entries(table: &[u8], offset: usize) -> Entries<'_> {
    Entries {
        table,
        offset,
        done: false,
    }
}

// ---------------------------------------------------------------------------
// MADT
// ---------------------------------------------------------------------------

struct Madt {
    lapic_addr: u64,
    pcat_compat: bool,
    cpus: Vec<AcpiCpu>,
    ignored: u32,
    duplicates: u32,
}

/// §5.2.12. `table` is the whole validated MADT.
fn parse_madt(table: &[u8], phys: u64, revision: u8, warnings: &mut Warnings) -> Option<Madt> {
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
    // (apic_id, index into cpus), sorted by apic_id, for O(log n) de-dup.
    let mut by_apic_id: Vec<(u32, usize)> = Vec::new();
    let mut override_seen = false;
    let mut cpu_limit = Limit::new(SIG_MADT, "CPUs", MAX_CPUS);

    for entry in entries(table, MADT_ENTRIES_OFFSET) {
        let entry = match entry {
            Ok(e) => e,
            Err(problem) => {
                warnings.push(SIG_MADT, phys, problem);
                break;
            }
        };
        let b = entry.bytes;
        // (apic_id, uid, x2apic, flags) for processor entries.
        let cpu = match entry.entry_type {
            // Processor Local APIC (§5.2.12.2): 8 bytes.
            0 => match (u8_at(b, 2), u8_at(b, 3), u32_at(b, 4)) {
                (Some(uid), Some(id), Some(fl)) => Some((u32::from(id), u32::from(uid), false, fl)),
                _ => {
                    warnings.push(SIG_MADT, phys, entry.too_short());
                    None
                }
            },
            // Local APIC Address Override (§5.2.12.8): 12 bytes.
            5 => {
                match u64_at(b, 4) {
                    // The spec allows only one; the first wins.
                    Some(addr) if !override_seen => {
                        madt.lapic_addr = addr;
                        override_seen = true;
                    }
                    Some(_) => {}
                    None => warnings.push(SIG_MADT, phys, entry.too_short()),
                }
                None
            }
            // Processor Local x2APIC (§5.2.12.12): 16 bytes.
            9 => match (u32_at(b, 4), u32_at(b, 8), u32_at(b, 12)) {
                (Some(id), Some(fl), Some(uid)) => Some((id, uid, true, fl)),
                _ => {
                    warnings.push(SIG_MADT, phys, entry.too_short());
                    None
                }
            },
            // I/O APICs, overrides, NMIs, GIC... are not ours to parse here.
            _ => None,
        };
        let Some((apic_id, uid, x2apic, cpu_flags)) = cpu else {
            continue;
        };
        let enabled = cpu_flags & 1 != 0;
        let online_capable = honor_online_capable && cpu_flags & 2 != 0;
        // 0xFF is the xAPIC broadcast id and 0xFFFFFFFF the x2APIC one: never
        // a real CPU, some firmware uses them for placeholder entries.
        let invalid_id = if x2apic {
            apic_id == u32::MAX
        } else {
            apic_id == 0xFF
        };
        if invalid_id || !(enabled || online_capable) {
            madt.ignored = madt.ignored.saturating_add(1);
            continue;
        }
        match by_apic_id.binary_search_by_key(&apic_id, |&(id, _)| id) {
            Ok(pos) => {
                // Same CPU listed twice (QEMU lists CPUs as both LAPIC and
                // x2APIC): keep the first entry, but if either form says
                // enabled the CPU is present.
                madt.duplicates = madt.duplicates.saturating_add(1);
                if let Some(existing) = by_apic_id.get(pos).and_then(|&(_, i)| madt.cpus.get_mut(i))
                {
                    existing.enabled |= enabled;
                    existing.online_capable =
                        !existing.enabled && (existing.online_capable || online_capable);
                }
            }
            Err(_) if !cpu_limit.allows(madt.cpus.len(), warnings, phys) => {}
            Err(pos) => {
                by_apic_id.insert(pos, (apic_id, madt.cpus.len()));
                madt.cpus.push(AcpiCpu {
                    apic_id,
                    uid,
                    x2apic,
                    enabled,
                    // The spec makes the bits exclusive; an enabled CPU is
                    // simply present.
                    online_capable: online_capable && !enabled,
                    node: 0,
                });
            }
        }
    }
    Some(madt)
}

// ---------------------------------------------------------------------------
// SRAT
// ---------------------------------------------------------------------------

/// Dense node ids for proximity domains, in order of first use.
#[derive(Default)]
struct PxmMap {
    /// (pxm, node) sorted by pxm.
    map: Vec<(u32, u32)>,
}

impl PxmMap {
    /// Node for `pxm`, allocating the next id; None once [`MAX_NODES`] exist.
    fn node(&mut self, pxm: u32) -> Option<u32> {
        match self.map.binary_search_by_key(&pxm, |&(p, _)| p) {
            Ok(pos) => self.map.get(pos).map(|&(_, n)| n),
            Err(_) if self.map.len() >= MAX_NODES => None,
            Err(pos) => {
                let node = self.map.len() as u32;
                self.map.insert(pos, (pxm, node));
                Some(node)
            }
        }
    }
}

struct Srat {
    cpu_affinity: Vec<CpuAffinity>,
    mem_affinity: Vec<MemAffinity>,
    nr_nodes: u32,
}

/// §5.2.16. `table` is the whole validated SRAT.
fn parse_srat(table: &[u8], phys: u64, revision: u8, warnings: &mut Warnings) -> Option<Srat> {
    if table.len() < SRAT_ENTRIES_OFFSET {
        let length = table.len() as u32;
        warnings.push(SIG_SRAT, phys, TableProblem::BadLength { length });
        return None;
    }
    let mut cpus: Vec<(u32, u32, bool)> = Vec::new(); // (pxm, apic_id, x2apic)
    let mut mems: Vec<(u32, u64, u64, u32)> = Vec::new(); // (pxm, base, length, flags)
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
        let b = entry.bytes;
        match entry.entry_type {
            // Processor Local APIC/SAPIC Affinity (§5.2.16.1): 16 bytes.
            0 => {
                let fields = (u8_at(b, 2), u8_at(b, 3), u32_at(b, 4), array_at::<3>(b, 9));
                let (Some(pxm_lo), Some(apic_id), Some(flags), Some(pxm_hi)) = fields else {
                    warnings.push(SIG_SRAT, phys, entry.too_short());
                    continue;
                };
                if flags & 1 == 0 {
                    continue;
                }
                let mut pxm = u32::from(pxm_lo);
                // Bits 31:8 of the domain were reserved in SRAT revision 1
                // (ACPI 2.0); Linux ignores them there too.
                if revision >= 2 {
                    let [b1, b2, b3] = pxm_hi;
                    pxm |= u32::from_le_bytes([0, b1, b2, b3]);
                }
                if cpu_limit.allows(cpus.len(), warnings, phys) {
                    cpus.push((pxm, u32::from(apic_id), false));
                }
            }
            // Memory Affinity (§5.2.16.2): 40 bytes.
            1 => {
                let fields = (u32_at(b, 2), u64_at(b, 8), u64_at(b, 16), u32_at(b, 28));
                let (Some(mut pxm), Some(base), Some(length), Some(flags)) = fields else {
                    warnings.push(SIG_SRAT, phys, entry.too_short());
                    continue;
                };
                if flags & 1 == 0 || length == 0 {
                    // Disabled entries are placeholders; a zero-length range
                    // describes no memory.
                    continue;
                }
                if base.checked_add(length - 1).is_none() {
                    warnings.push(SIG_SRAT, phys, TableProblem::BadRange { base, length });
                    continue;
                }
                // As for processors: only 8 domain bits before revision 2.
                if revision < 2 {
                    pxm &= 0xFF;
                }
                if mem_limit.allows(mems.len(), warnings, phys) {
                    mems.push((pxm, base, length, flags));
                }
            }
            // Processor Local x2APIC Affinity (§5.2.16.3): 24 bytes.
            2 => {
                let (Some(pxm), Some(x2apic_id), Some(flags)) =
                    (u32_at(b, 4), u32_at(b, 8), u32_at(b, 12))
                else {
                    warnings.push(SIG_SRAT, phys, entry.too_short());
                    continue;
                };
                if flags & 1 == 0 {
                    continue;
                }
                if cpu_limit.allows(cpus.len(), warnings, phys) {
                    cpus.push((pxm, x2apic_id, true));
                }
            }
            // GICC, GIC ITS, generic initiator/port affinity: not x86 CPUs or
            // RAM, so they create no nodes here.
            _ => {}
        }
    }

    // Linux numbers nodes for all processor entries first, then for memory
    // entries, so a memory-only node gets an id after every CPU node.
    let mut pxm_map = PxmMap::default();
    let mut node_limit = Limit::new(SIG_SRAT, "NUMA nodes", MAX_NODES);
    let mut srat = Srat {
        cpu_affinity: Vec::new(),
        mem_affinity: Vec::new(),
        nr_nodes: 1,
    };
    for (pxm, apic_id, x2apic) in cpus {
        let node = match pxm_map.node(pxm) {
            Some(node) => node,
            None => {
                // The map is full: this records the warning.
                node_limit.allows(pxm_map.map.len(), warnings, phys);
                continue;
            }
        };
        srat.cpu_affinity.push(CpuAffinity {
            apic_id,
            x2apic,
            proximity_domain: pxm,
            node,
        });
    }
    for (pxm, base, length, flags) in mems {
        let node = match pxm_map.node(pxm) {
            Some(node) => node,
            None => {
                // The map is full: this records the warning.
                node_limit.allows(pxm_map.map.len(), warnings, phys);
                continue;
            }
        };
        srat.mem_affinity.push(MemAffinity {
            base,
            length,
            node,
            proximity_domain: pxm,
            hotplug: flags & 2 != 0,
            nonvolatile: flags & 4 != 0,
        });
    }
    srat.nr_nodes = (pxm_map.map.len() as u32).max(1);
    Some(srat)
}

/// A cap on how many items of one kind a table may contribute; warns once
/// per table, not once per excess entry.
struct Limit {
    signature: [u8; 4],
    what: &'static str,
    cap: usize,
    warned: bool,
}

impl Limit {
    const fn new(signature: [u8; 4], what: &'static str, cap: usize) -> Self {
        Self {
            signature,
            what,
            cap,
            warned: false,
        }
    }

    /// Whether an item fits beside `len` existing ones; warns the first time
    /// one does not.
    fn allows(&mut self, len: usize, warnings: &mut Warnings, phys: u64) -> bool {
        if len < self.cap {
            return true;
        }
        if !self.warned {
            self.warned = true;
            let (what, limit) = (self.what, self.cap as u32);
            warnings.push(
                self.signature,
                phys,
                TableProblem::LimitReached { what, limit },
            );
        }
        false
    }
}

// ---------------------------------------------------------------------------
// Entry point
// ---------------------------------------------------------------------------

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

    let mut info = AcpiInfo {
        rsdp_phys,
        revision: rsdp.revision,
        oem_id: rsdp.oem_id,
        rsdp_length: rsdp.length,
        root,
        tables,
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
    if let Some((t, data)) = madt {
        if let Some(m) = parse_madt(&data, t.phys, t.revision, &mut warnings) {
            info.has_madt = true;
            info.lapic_addr = m.lapic_addr;
            info.pcat_compat = m.pcat_compat;
            info.cpus = m.cpus;
            info.ignored_cpus = m.ignored;
            info.duplicate_cpus = m.duplicates;
        }
    }
    if let Some((t, data)) = srat {
        if let Some(s) = parse_srat(&data, t.phys, t.revision, &mut warnings) {
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
    }
    info.warnings = warnings.list;
    info.suppressed_warnings = warnings.suppressed;
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec;

    const MEM_SIZE: usize = 0x4000;
    const RSDP_AT: u64 = 0x100;
    const RSDT_AT: u64 = 0x200;
    const XSDT_AT: u64 = 0x300;
    const MADT_AT: u64 = 0x1000;
    const SRAT_AT: u64 = 0x2000;
    const FACP_AT: u64 = 0x3000;
    const GIB: u64 = 1 << 30;

    /// Flat physical memory starting at address 0.
    #[derive(Clone)]
    struct Mem(Vec<u8>);

    impl PhysMemory for Mem {
        fn read(&self, phys: u64, buf: &mut [u8]) -> Result<(), AcpiError> {
            let err = AcpiError::Unreadable {
                phys,
                len: buf.len() as u64,
            };
            let start = usize::try_from(phys).map_err(|_| err)?;
            let end = start.checked_add(buf.len()).ok_or(err)?;
            buf.copy_from_slice(self.0.get(start..end).ok_or(err)?);
            Ok(())
        }
    }

    impl Mem {
        fn put(&mut self, at: u64, bytes: &[u8]) {
            let at = at as usize;
            self.0[at..at + bytes.len()].copy_from_slice(bytes);
        }
        fn put_u32(&mut self, at: u64, v: u32) {
            self.put(at, &v.to_le_bytes());
        }
        /// Recomputes the checksum byte of the SDT at `at` over `len` bytes.
        fn fix_sdt(&mut self, at: u64, len: usize) {
            let at = at as usize;
            fix_checksum(&mut self.0[at..at + len], 9);
        }
        fn table_len(&self, at: u64) -> usize {
            u32_at(&self.0, at as usize + 4).unwrap() as usize
        }
    }

    fn fix_checksum(t: &mut [u8], at: usize) {
        t[at] = 0;
        t[at] = 0u8.wrapping_sub(sum_bytes(0, t));
    }

    fn sdt(sig: &[u8; 4], revision: u8, body: &[u8]) -> Vec<u8> {
        let mut t = Vec::new();
        t.extend_from_slice(sig);
        t.extend_from_slice(&((36 + body.len()) as u32).to_le_bytes());
        t.extend_from_slice(&[revision, 0]);
        t.extend_from_slice(b"BOCHS ");
        t.extend_from_slice(b"BXPC    ");
        t.extend_from_slice(&1u32.to_le_bytes());
        t.extend_from_slice(b"BXPC");
        t.extend_from_slice(&1u32.to_le_bytes());
        t.extend_from_slice(body);
        fix_checksum(&mut t, 9);
        t
    }

    fn rsdp(revision: u8, rsdt: u32, xsdt: u64) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(b"RSD PTR ");
        r.push(0);
        r.extend_from_slice(b"BOCHS ");
        r.push(revision);
        r.extend_from_slice(&rsdt.to_le_bytes());
        if revision >= 2 {
            r.extend_from_slice(&36u32.to_le_bytes());
            r.extend_from_slice(&xsdt.to_le_bytes());
            r.extend_from_slice(&[0; 4]);
        }
        fix_checksum(&mut r[..20], 8);
        if revision >= 2 {
            fix_checksum(&mut r, 32);
        }
        r
    }

    fn root(sig: &[u8; 4], entries: &[u64]) -> Vec<u8> {
        let mut body = Vec::new();
        for &e in entries {
            if sig == b"XSDT" {
                body.extend_from_slice(&e.to_le_bytes());
            } else {
                body.extend_from_slice(&(e as u32).to_le_bytes());
            }
        }
        sdt(sig, 1, &body)
    }

    fn madt(revision: u8, entries: &[Vec<u8>]) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&0xFEE0_0000u32.to_le_bytes());
        body.extend_from_slice(&1u32.to_le_bytes()); // PCAT_COMPAT
        entries.iter().for_each(|e| body.extend_from_slice(e));
        sdt(b"APIC", revision, &body)
    }

    fn lapic(uid: u8, id: u8, flags: u32) -> Vec<u8> {
        let mut e = vec![0, 8, uid, id];
        e.extend_from_slice(&flags.to_le_bytes());
        e
    }

    fn x2apic(id: u32, flags: u32, uid: u32) -> Vec<u8> {
        let mut e = vec![9, 16, 0, 0];
        [id, flags, uid]
            .iter()
            .for_each(|v| e.extend_from_slice(&v.to_le_bytes()));
        e
    }

    fn lapic_override(addr: u64) -> Vec<u8> {
        let mut e = vec![5, 12, 0, 0];
        e.extend_from_slice(&addr.to_le_bytes());
        e
    }

    fn ioapic() -> Vec<u8> {
        let mut e = vec![1, 12, 0, 0];
        e.extend_from_slice(&0xFEC0_0000u32.to_le_bytes());
        e.extend_from_slice(&0u32.to_le_bytes());
        e
    }

    fn srat(revision: u8, entries: &[Vec<u8>]) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&1u32.to_le_bytes());
        body.extend_from_slice(&[0; 8]);
        entries.iter().for_each(|e| body.extend_from_slice(e));
        sdt(b"SRAT", revision, &body)
    }

    fn srat_cpu(pxm: u32, apic_id: u8, flags: u32) -> Vec<u8> {
        let p = pxm.to_le_bytes();
        let mut e = vec![0, 16, p[0], apic_id];
        e.extend_from_slice(&flags.to_le_bytes());
        e.extend_from_slice(&[0, p[1], p[2], p[3]]);
        e.extend_from_slice(&0u32.to_le_bytes());
        e
    }

    fn srat_mem(pxm: u32, base: u64, length: u64, flags: u32) -> Vec<u8> {
        let mut e = vec![1, 40];
        e.extend_from_slice(&pxm.to_le_bytes());
        e.extend_from_slice(&[0; 2]);
        e.extend_from_slice(&base.to_le_bytes());
        e.extend_from_slice(&length.to_le_bytes());
        e.extend_from_slice(&[0; 4]);
        e.extend_from_slice(&flags.to_le_bytes());
        e.extend_from_slice(&[0; 8]);
        e
    }

    fn srat_x2(pxm: u32, x2apic_id: u32, flags: u32) -> Vec<u8> {
        let mut e = vec![2, 24, 0, 0];
        [pxm, x2apic_id, flags, 0, 0]
            .iter()
            .for_each(|v| e.extend_from_slice(&v.to_le_bytes()));
        e
    }

    fn facp() -> Vec<u8> {
        sdt(b"FACP", 6, &[0x5a; 100])
    }

    /// RSDP revision `rev` at RSDP_AT; an RSDT and (rev ≥ 2) an XSDT both
    /// listing `tables`, which are placed at their addresses.
    fn firmware(rev: u8, tables: &[(u64, Vec<u8>)]) -> Mem {
        firmware_sized(MEM_SIZE, rev, tables)
    }

    fn firmware_sized(mem_size: usize, rev: u8, tables: &[(u64, Vec<u8>)]) -> Mem {
        let mut m = Mem(vec![0; mem_size]);
        let addrs: Vec<u64> = tables.iter().map(|t| t.0).collect();
        m.put(RSDT_AT, &root(b"RSDT", &addrs));
        let xsdt = if rev >= 2 {
            m.put(XSDT_AT, &root(b"XSDT", &addrs));
            XSDT_AT
        } else {
            0
        };
        m.put(RSDP_AT, &rsdp(rev, RSDT_AT as u32, xsdt));
        for (at, t) in tables {
            m.put(*at, t);
        }
        m
    }

    fn four_cpus() -> Vec<Vec<u8>> {
        (0..4).map(|i| lapic(i, i, 1)).collect()
    }

    fn ok(m: &Mem) -> AcpiInfo {
        parse(RSDP_AT, m).expect("valid firmware must parse")
    }

    fn lines(info: &AcpiInfo) -> Vec<String> {
        info.report_lines().collect()
    }

    fn has_line(info: &AcpiInfo, want: &str) -> bool {
        let all = lines(info);
        let found = all.iter().any(|l| l == want);
        if !found {
            std::eprintln!("missing {want:?} in {all:#?}");
        }
        found
    }

    #[test]
    fn rsdp_v0_uses_rsdt() {
        let m = firmware(0, &[(FACP_AT, facp()), (MADT_AT, madt(5, &four_cpus()))]);
        let info = ok(&m);
        assert_eq!(info.revision, 0);
        assert_eq!(&info.oem_id, b"BOCHS ");
        assert_eq!(info.rsdp_length, 20);
        assert_eq!(&info.root.signature, b"RSDT");
        assert_eq!(info.root.phys, RSDT_AT);
        assert_eq!(info.tables.len(), 2);
        assert_eq!(&info.tables[0].signature, b"FACP");
        assert_eq!(info.tables[1].phys, MADT_AT);
        assert!(info.has_madt && info.pcat_compat);
        assert_eq!(info.lapic_addr, 0xFEE0_0000);
        let ids: Vec<u32> = info.cpus.iter().map(|c| c.apic_id).collect();
        assert_eq!(ids, [0, 1, 2, 3]);
        assert!(info
            .cpus
            .iter()
            .all(|c| c.enabled && !c.x2apic && c.node == 0));
        assert!(!info.has_srat);
        assert_eq!(info.nr_nodes, 1);
        assert!(info.warnings.is_empty(), "{:?}", info.warnings);
        assert!(has_line(
            &info,
            "ACPI: RSDP 0x0000000000000100 000014 (v00 BOCHS )"
        ));
        assert!(has_line(
            &info,
            "ACPI: RSDT 0x0000000000000200 00002C (v01 BOCHS  BXPC     00000001 BXPC 00000001)"
        ));
        assert!(has_line(&info, "smpboot: Allowing 4 CPUs, 0 hotplug CPUs"));
    }

    #[test]
    fn rsdp_v2_uses_xsdt() {
        let mut m = firmware(2, &[(MADT_AT, madt(5, &four_cpus()))]);
        // Make the RSDT list something else, to see which one was walked.
        m.put(FACP_AT, &facp());
        m.put(RSDT_AT, &root(b"RSDT", &[FACP_AT]));
        let info = ok(&m);
        assert_eq!(info.revision, 2);
        assert_eq!(info.rsdp_length, 36);
        assert_eq!(&info.root.signature, b"XSDT");
        assert_eq!(info.tables.len(), 1);
        assert_eq!(&info.tables[0].signature, b"APIC");
        assert_eq!(info.cpus.len(), 4);
        assert!(has_line(
            &info,
            "ACPI: RSDP 0x0000000000000100 000024 (v02 BOCHS )"
        ));
        assert!(has_line(&info, "ACPI: Local APIC address 0xfee00000"));
        assert!(has_line(
            &info,
            "ACPI: LAPIC (acpi_id[0x02] lapic_id[0x02] enabled)"
        ));
    }

    #[test]
    fn broken_xsdt_falls_back_to_rsdt() {
        let mut m = firmware(2, &[(MADT_AT, madt(5, &four_cpus()))]);
        m.0[XSDT_AT as usize + 24] ^= 0x40; // oem_revision: checksum now fails
        let info = ok(&m);
        assert_eq!(&info.root.signature, b"RSDT");
        assert_eq!(info.cpus.len(), 4);
        assert_eq!(info.warnings.len(), 1);
        let w = info.warnings[0];
        assert_eq!((&w.signature, w.phys), (b"XSDT", XSDT_AT));
        assert!(matches!(w.reason, TableProblem::BadChecksum { .. }));
    }

    #[test]
    fn broken_xsdt_without_rsdt_is_an_error() {
        let mut m = firmware(2, &[]);
        m.put(RSDP_AT, &rsdp(2, 0, XSDT_AT));
        m.put(XSDT_AT, b"XSDX");
        let err = parse(RSDP_AT, &m).unwrap_err();
        assert_eq!(
            err,
            AcpiError::RootTable {
                signature: *b"XSDT",
                phys: XSDT_AT,
                problem: TableProblem::BadSignature { found: *b"XSDX" }
            }
        );
    }

    #[test]
    fn rsdp_errors() {
        let good = firmware(2, &[]);
        let at = RSDP_AT as usize;

        let mut m = good.clone();
        m.0[at + 10] ^= 1; // inside the OEM id: first checksum fails
        assert_eq!(
            parse(RSDP_AT, &m).unwrap_err(),
            AcpiError::RsdpChecksum { phys: RSDP_AT }
        );

        let mut m = good.clone();
        m.0[at + 33] ^= 1; // reserved byte: only the extended checksum fails
        assert_eq!(
            parse(RSDP_AT, &m).unwrap_err(),
            AcpiError::RsdpExtendedChecksum {
                phys: RSDP_AT,
                length: 36
            }
        );

        let mut m = good.clone();
        m.0[at] = b'X';
        assert!(matches!(
            parse(RSDP_AT, &m).unwrap_err(),
            AcpiError::RsdpSignature { found, .. } if &found == b"XSD PTR "
        ));

        let mut m = good.clone();
        let mut r = rsdp(2, RSDT_AT as u32, XSDT_AT);
        r[20..24].copy_from_slice(&20u32.to_le_bytes());
        fix_checksum(&mut r, 32);
        m.put(RSDP_AT, &r);
        assert_eq!(
            parse(RSDP_AT, &m).unwrap_err(),
            AcpiError::RsdpLength {
                phys: RSDP_AT,
                length: 20
            }
        );

        // Past the end of memory, and a v2 RSDP whose tail is cut off.
        let end = MEM_SIZE as u64;
        assert!(matches!(
            parse(end - 4, &good).unwrap_err(),
            AcpiError::Unreadable { .. }
        ));
        let mut m = good.clone();
        m.put(end - 20, &rsdp(2, RSDT_AT as u32, XSDT_AT)[..20]);
        assert!(matches!(
            parse(end - 20, &m).unwrap_err(),
            AcpiError::Unreadable { .. }
        ));
        assert!(matches!(
            parse(u64::MAX - 3, &good).unwrap_err(),
            AcpiError::Unreadable { .. }
        ));

        let mut m = good.clone();
        m.put(RSDP_AT, &rsdp(0, 0, 0));
        assert_eq!(
            parse(RSDP_AT, &m).unwrap_err(),
            AcpiError::NoRootTable { rsdp_phys: RSDP_AT }
        );

        let mut m = firmware(0, &[]);
        m.0[RSDT_AT as usize + 16] ^= 1;
        assert!(matches!(
            parse(RSDP_AT, &m).unwrap_err(),
            AcpiError::RootTable { signature, problem: TableProblem::BadChecksum { .. }, .. }
                if &signature == b"RSDT"
        ));
    }

    #[test]
    fn error_messages_name_the_address_and_a_remedy() {
        let m = firmware(0, &[]);
        let msg = parse(RSDP_AT + 1, &m).unwrap_err().to_string();
        assert!(msg.contains("0x101") && msg.contains("bootloader"), "{msg}");
        let e = AcpiError::RootTable {
            signature: *b"RSDT",
            phys: 0x200,
            problem: TableProblem::BadLength { length: 3 },
        };
        let msg = e.to_string();
        assert!(msg.contains("RSDT") && msg.contains("length 3"), "{msg}");
    }

    #[test]
    fn bad_madt_checksum_is_a_warning_and_skipped() {
        let mut m = firmware(2, &[(FACP_AT, facp()), (MADT_AT, madt(5, &four_cpus()))]);
        m.0[MADT_AT as usize + 44 + 3] = 9; // an APIC id
        let info = ok(&m);
        assert!(!info.has_madt);
        assert!(info.cpus.is_empty());
        assert_eq!(info.lapic_addr, DEFAULT_LAPIC_ADDR);
        assert_eq!(info.tables.len(), 1);
        assert_eq!(info.warnings.len(), 1);
        let w = info.warnings[0];
        assert_eq!((&w.signature, w.phys), (b"APIC", MADT_AT));
        assert!(matches!(w.reason, TableProblem::BadChecksum { sum } if sum != 0));
        let msg = w.to_string();
        assert!(
            msg.starts_with("ACPI: [APIC] at 0x0000000000001000: checksum"),
            "{msg}"
        );
        assert!(msg.ends_with("table ignored"), "{msg}");
        assert!(has_line(&info, "smpboot: Allowing 0 CPUs, 0 hotplug CPUs"));
    }

    #[test]
    fn impossible_lengths_are_warnings() {
        for (length, want) in [
            (10, TableProblem::BadLength { length: 10 }),
            (35, TableProblem::BadLength { length: 35 }),
            (
                0x2000_0000,
                TableProblem::BadLength {
                    length: 0x2000_0000,
                },
            ),
            (u32::MAX, TableProblem::BadLength { length: u32::MAX }),
            // Plausible, but runs past the end of memory.
            (0x4000, TableProblem::Unreadable),
        ] {
            let mut m = firmware(0, &[(FACP_AT, facp()), (MADT_AT, madt(5, &four_cpus()))]);
            m.put_u32(MADT_AT + 4, length);
            m.fix_sdt(MADT_AT, 36);
            let info = ok(&m);
            assert!(info.cpus.is_empty(), "length {length}");
            assert_eq!(info.tables.len(), 1, "FACP is still listed");
            assert_eq!(info.warnings.len(), 1);
            assert_eq!(info.warnings[0].reason, want);
        }
    }

    #[test]
    fn madt_too_short_for_its_fixed_fields() {
        let mut m = firmware(0, &[(MADT_AT, madt(5, &[]))]);
        m.put_u32(MADT_AT + 4, 40);
        m.fix_sdt(MADT_AT, 40);
        let info = ok(&m);
        assert!(!info.has_madt);
        assert_eq!(
            info.warnings[0].reason,
            TableProblem::BadLength { length: 40 }
        );
    }

    #[test]
    fn xapic_and_x2apic_for_the_same_cpu_are_deduplicated() {
        let entries = [
            lapic(0, 0, 1),
            lapic(1, 1, 1),
            ioapic(),
            x2apic(0, 1, 0),
            x2apic(1, 1, 1),
            x2apic(0x100, 1, 2),
        ];
        let info = ok(&firmware(2, &[(MADT_AT, madt(5, &entries))]));
        let got: Vec<(u32, u32, bool)> = info
            .cpus
            .iter()
            .map(|c| (c.apic_id, c.uid, c.x2apic))
            .collect();
        assert_eq!(got, [(0, 0, false), (1, 1, false), (0x100, 2, true)]);
        assert_eq!(info.duplicate_cpus, 2);
        assert!(info.warnings.is_empty());
        assert_eq!(info.cpu_by_apic_id(0x100).map(|c| c.uid), Some(2));
        assert!(has_line(
            &info,
            "ACPI: X2APIC (apic_id[0x100] uid[0x02] enabled)"
        ));
        assert!(has_line(
            &info,
            "ACPI: 2 duplicate processor entries ignored"
        ));
        assert!(has_line(&info, "smpboot: Allowing 3 CPUs, 0 hotplug CPUs"));
    }

    #[test]
    fn duplicate_that_is_enabled_marks_the_cpu_enabled() {
        let entries = [lapic(0, 0, 2), x2apic(0, 1, 0)];
        let info = ok(&firmware(2, &[(MADT_AT, madt(5, &entries))]));
        assert_eq!(info.cpus.len(), 1);
        assert!(info.cpus[0].enabled && !info.cpus[0].online_capable);
    }

    #[test]
    fn disabled_and_online_capable_cpus() {
        let entries = [
            lapic(0, 0, 1),    // enabled
            lapic(1, 1, 2),    // online capable: hot-pluggable
            lapic(2, 2, 0),    // disabled: never usable
            lapic(3, 0xFF, 1), // broadcast id: not a CPU
            x2apic(4, 3, 4),   // both bits: enabled wins
            x2apic(u32::MAX, 1, 5),
        ];
        let info = ok(&firmware(2, &[(MADT_AT, madt(5, &entries))]));
        let got: Vec<(u32, bool, bool)> = info
            .cpus
            .iter()
            .map(|c| (c.apic_id, c.enabled, c.online_capable))
            .collect();
        assert_eq!(got, [(0, true, false), (1, false, true), (4, true, false)]);
        assert!(info.cpus.iter().all(AcpiCpu::usable));
        assert_eq!(info.ignored_cpus, 3);
        assert!(has_line(
            &info,
            "ACPI: LAPIC (acpi_id[0x01] lapic_id[0x01] online-capable)"
        ));
        assert!(has_line(&info, "smpboot: Allowing 3 CPUs, 1 hotplug CPUs"));

        // Before MADT revision 5 the Online Capable bit was reserved.
        let info = ok(&firmware(2, &[(MADT_AT, madt(4, &entries))]));
        let ids: Vec<u32> = info.cpus.iter().map(|c| c.apic_id).collect();
        assert_eq!(ids, [0, 4]);
        assert_eq!(info.ignored_cpus, 4);
    }

    #[test]
    fn lapic_address_override() {
        let entries = [
            lapic(0, 0, 1),
            lapic_override(0x1_0000_0000),
            lapic_override(0x2000),
        ];
        let info = ok(&firmware(2, &[(MADT_AT, madt(5, &entries))]));
        assert_eq!(info.lapic_addr, 0x1_0000_0000);
    }

    #[test]
    fn srat_with_two_sparse_domains() {
        let cpus = four_cpus();
        let srat_entries = [
            srat_cpu(0, 0, 1),
            srat_cpu(0, 1, 1),
            srat_cpu(7, 2, 1),
            srat_cpu(7, 3, 1),
            srat_mem(0, 0, 0xA_0000, 1),
            srat_mem(0, 0x10_0000, GIB - 0x10_0000, 1),
            srat_mem(7, GIB, GIB, 1 | 2),
            srat_mem(7, 4 * GIB, GIB, 1 | 4),
        ];
        let m = firmware(
            2,
            &[(MADT_AT, madt(5, &cpus)), (SRAT_AT, srat(3, &srat_entries))],
        );
        let info = ok(&m);
        assert!(info.has_srat);
        assert_eq!(info.nr_nodes, 2);
        let nodes: Vec<u32> = info.cpus.iter().map(|c| c.node).collect();
        assert_eq!(nodes, [0, 0, 1, 1]);
        let mem: Vec<(u64, u64, u32, u32, bool, bool)> = info
            .mem_affinity
            .iter()
            .map(|r| {
                (
                    r.base,
                    r.length,
                    r.node,
                    r.proximity_domain,
                    r.hotplug,
                    r.nonvolatile,
                )
            })
            .collect();
        assert_eq!(
            mem,
            [
                (0, 0xA_0000, 0, 0, false, false),
                (0x10_0000, GIB - 0x10_0000, 0, 0, false, false),
                (GIB, GIB, 1, 7, true, false),
                (4 * GIB, GIB, 1, 7, false, true),
            ]
        );
        assert!(info.warnings.is_empty(), "{:?}", info.warnings);
        assert!(has_line(&info, "ACPI: SRAT: PXM 7 -> APIC 0x02 -> Node 1"));
        assert!(has_line(
            &info,
            "ACPI: SRAT: Node 0 PXM 0 [mem 0x00000000-0x0009ffff]"
        ));
        assert!(has_line(
            &info,
            "ACPI: SRAT: Node 0 PXM 0 [mem 0x00100000-0x3fffffff]"
        ));
        assert!(has_line(
            &info,
            "ACPI: SRAT: Node 1 PXM 7 [mem 0x40000000-0x7fffffff] hotplug"
        ));
        assert!(has_line(
            &info,
            "ACPI: SRAT: Node 1 PXM 7 [mem 0x100000000-0x13fffffff] non-volatile"
        ));
        assert!(has_line(&info, "ACPI: SRAT: 2 NUMA nodes"));
    }

    #[test]
    fn memory_only_node_is_numbered_after_cpu_nodes() {
        // The memory-only domain comes first in the table, but as in Linux
        // processor domains are numbered first.
        let srat_entries = [
            srat_mem(9, 2 * GIB, GIB, 1),
            srat_cpu(5, 0, 1),
            srat_x2(3, 0x100, 1),
            srat_mem(5, 0, GIB, 1),
        ];
        let cpus = [lapic(0, 0, 1), x2apic(0x100, 1, 1), lapic(2, 2, 1)];
        let m = firmware(
            2,
            &[(SRAT_AT, srat(3, &srat_entries)), (MADT_AT, madt(5, &cpus))],
        );
        let info = ok(&m);
        assert_eq!(info.nr_nodes, 3);
        let nodes: Vec<(u32, u32)> = info.cpus.iter().map(|c| (c.apic_id, c.node)).collect();
        // APIC 2 is not in the SRAT: node 0.
        assert_eq!(nodes, [(0, 0), (0x100, 1), (2, 0)]);
        let mem: Vec<(u32, u32)> = info
            .mem_affinity
            .iter()
            .map(|r| (r.proximity_domain, r.node))
            .collect();
        assert_eq!(mem, [(9, 2), (5, 0)]);
        assert!(has_line(
            &info,
            "ACPI: SRAT: PXM 3 -> x2APIC 0x0100 -> Node 1"
        ));
    }

    #[test]
    fn srat_skips_disabled_and_handles_revision_and_ranges() {
        let srat_entries = [
            srat_cpu(0x0102_0304, 0, 1),
            srat_cpu(6, 1, 0),              // disabled
            srat_x2(6, 2, 0),               // disabled
            srat_mem(6, 0, GIB, 0),         // disabled
            srat_mem(0x0102_0304, 0, 0, 1), // zero length: no memory
            srat_mem(0x0102_0304, 0, GIB, 1),
            srat_mem(0x0102_0304, u64::MAX, 2, 1), // wraps
            srat_mem(0x0102_0304, u64::MAX, 1, 1), // the last byte: fine
        ];
        let cpus = [lapic(0, 0, 1), lapic(1, 1, 1)];
        let tables = [(MADT_AT, madt(5, &cpus)), (SRAT_AT, srat(3, &srat_entries))];
        let info = ok(&firmware(2, &tables));
        assert_eq!(info.nr_nodes, 1);
        assert_eq!(info.cpu_affinity.len(), 1);
        assert_eq!(info.cpu_affinity[0].proximity_domain, 0x0102_0304);
        assert_eq!(info.mem_affinity.len(), 2);
        assert_eq!(
            info.warnings[0].reason,
            TableProblem::BadRange {
                base: u64::MAX,
                length: 2
            }
        );
        assert!(has_line(
            &info,
            "ACPI: SRAT: Node 0 PXM 16909060 [mem 0xffffffffffffffff-0xffffffffffffffff]"
        ));

        // SRAT revision 1 (ACPI 2.0): only the low 8 domain bits exist.
        let tables = [(MADT_AT, madt(5, &cpus)), (SRAT_AT, srat(1, &srat_entries))];
        let info = ok(&firmware(2, &tables));
        assert_eq!(info.cpu_affinity[0].proximity_domain, 0x04);
        assert_eq!(info.mem_affinity[0].proximity_domain, 0x04);
    }

    #[test]
    fn no_srat_means_one_node() {
        let info = ok(&firmware(2, &[(MADT_AT, madt(5, &four_cpus()))]));
        assert!(!info.has_srat);
        assert_eq!(info.nr_nodes, 1);
        assert!(info.cpus.iter().all(|c| c.node == 0));
        assert!(has_line(&info, "ACPI: no SRAT; everything is on node 0"));
    }

    #[test]
    fn zero_and_one_length_entries_stop_the_walk() {
        for bad_len in [0u8, 1] {
            let entries = [lapic(0, 0, 1), vec![0, bad_len, 0, 0], lapic(1, 1, 1)];
            let info = ok(&firmware(2, &[(MADT_AT, madt(5, &entries))]));
            assert_eq!(info.cpus.len(), 1);
            assert_eq!(
                info.warnings[0].reason,
                TableProblem::EntriesTruncated {
                    offset: 52,
                    entry_type: 0,
                    entry_length: bad_len
                }
            );
            assert!(info.warnings[0]
                .to_string()
                .ends_with("rest of table ignored"));

            let entries = [srat_cpu(1, 0, 1), vec![1, bad_len], srat_cpu(2, 1, 1)];
            let info = ok(&firmware(2, &[(SRAT_AT, srat(3, &entries))]));
            assert_eq!(info.nr_nodes, 1);
            assert!(matches!(
                info.warnings[0].reason,
                TableProblem::EntriesTruncated { .. }
            ));
        }
    }

    #[test]
    fn truncated_entries_and_tables() {
        // Last entry claims more bytes than the table has.
        let entries = [lapic(0, 0, 1), vec![9, 200, 0, 0]];
        let info = ok(&firmware(2, &[(MADT_AT, madt(5, &entries))]));
        assert_eq!(info.cpus.len(), 1);
        assert!(matches!(
            info.warnings[0].reason,
            TableProblem::EntriesTruncated {
                entry_type: 9,
                entry_length: 200,
                ..
            }
        ));

        // A single byte left for an entry header.
        let entries = [lapic(0, 0, 1), vec![0]];
        let info = ok(&firmware(2, &[(MADT_AT, madt(5, &entries))]));
        assert_eq!(info.cpus.len(), 1);
        assert_eq!(info.warnings.len(), 1);

        // Entries too short for their type are skipped, the walk goes on.
        let entries = [
            vec![0, 4, 0, 0],
            vec![9, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            vec![5, 6, 0, 0, 0, 0],
            lapic(1, 1, 1),
        ];
        let info = ok(&firmware(2, &[(MADT_AT, madt(5, &entries))]));
        assert_eq!(info.cpus.len(), 1);
        assert_eq!(info.warnings.len(), 3);
        assert_eq!(
            info.warnings[0].reason,
            TableProblem::BadEntry {
                offset: 44,
                entry_type: 0,
                entry_length: 4
            }
        );
        assert_eq!(info.lapic_addr, 0xFEE0_0000);

        // A table cut off by the end of memory.
        let mut m = firmware(2, &[(FACP_AT, facp())]);
        let t = madt(5, &four_cpus());
        let at = (MEM_SIZE - 40) as u64;
        m.put(at, &t[..40]);
        m.put(XSDT_AT, &root(b"XSDT", &[at, FACP_AT]));
        let info = ok(&m);
        assert_eq!(info.tables.len(), 1);
        assert_eq!(info.warnings[0].reason, TableProblem::Unreadable);
        assert_eq!(
            (&info.warnings[0].signature, info.warnings[0].phys),
            (b"APIC", at)
        );

        // Header itself unreadable, and a pointer far outside memory.
        m.put(
            XSDT_AT,
            &root(b"XSDT", &[MEM_SIZE as u64 - 8, u64::MAX - 2, FACP_AT]),
        );
        let info = ok(&m);
        assert_eq!(info.tables.len(), 1);
        assert_eq!(info.warnings.len(), 2);
        assert!(info
            .warnings
            .iter()
            .all(|w| w.reason == TableProblem::Unreadable));
        assert_eq!(&info.warnings[0].signature, b"????");

        // A root table cut off by the end of memory is fatal.
        let mut m = firmware(0, &[]);
        m.put_u32(RSDT_AT + 4, 0x8000);
        m.fix_sdt(RSDT_AT, 36);
        assert!(matches!(
            parse(RSDP_AT, &m).unwrap_err(),
            AcpiError::RootTable {
                problem: TableProblem::Unreadable,
                ..
            }
        ));
    }

    #[test]
    fn null_duplicate_and_second_tables() {
        let mut m = firmware(2, &[(MADT_AT, madt(5, &four_cpus()))]);
        let second = MADT_AT + 0x800;
        m.put(second, &madt(5, &[lapic(9, 9, 1)]));
        m.put(XSDT_AT, &root(b"XSDT", &[0, MADT_AT, MADT_AT, second]));
        let info = ok(&m);
        assert_eq!(info.cpus.len(), 4, "the first MADT is used");
        assert_eq!(info.tables.len(), 2, "both valid MADTs are listed");
        let reasons: Vec<TableProblem> = info.warnings.iter().map(|w| w.reason).collect();
        assert_eq!(
            reasons,
            [
                TableProblem::NullAddress,
                TableProblem::DuplicateAddress,
                TableProblem::DuplicateTable
            ]
        );
        assert_eq!(info.warnings[2].phys, second);
    }

    #[test]
    fn works_through_dyn_phys_memory() {
        let m = firmware(2, &[(MADT_AT, madt(5, &four_cpus()))]);
        let dyn_mem: &dyn PhysMemory = &m;
        assert_eq!(parse(RSDP_AT, dyn_mem).unwrap().cpus.len(), 4);
    }

    #[test]
    fn limits_cap_cpus_nodes_and_warnings() {
        const BIG_MADT_AT: u64 = 0x1_0000;
        const BIG_SRAT_AT: u64 = 0x4_0000;
        let cpus: Vec<Vec<u8>> = (0..MAX_CPUS as u32 + 5).map(|i| x2apic(i, 1, i)).collect();
        let mems: Vec<Vec<u8>> = (0..MAX_NODES as u64 + 3)
            .map(|i| srat_mem(i as u32 * 2, i * GIB, GIB, 1))
            .collect();
        let tables = [(BIG_MADT_AT, madt(5, &cpus)), (BIG_SRAT_AT, srat(3, &mems))];
        let info = ok(&firmware_sized(0x6_0000, 2, &tables));
        assert_eq!(info.cpus.len(), MAX_CPUS);
        assert_eq!(info.nr_nodes, MAX_NODES as u32);
        assert_eq!(info.mem_affinity.len(), MAX_NODES);
        let reasons: Vec<TableProblem> = info.warnings.iter().map(|w| w.reason).collect();
        assert_eq!(
            reasons,
            [
                TableProblem::LimitReached {
                    what: "CPUs",
                    limit: MAX_CPUS as u32
                },
                TableProblem::LimitReached {
                    what: "NUMA nodes",
                    limit: MAX_NODES as u32
                },
            ]
        );

        // Many bad entries: 64 warnings kept, the rest counted.
        let short: Vec<Vec<u8>> = (0..70).map(|_| vec![0, 2]).collect();
        let info = ok(&firmware(2, &[(MADT_AT, madt(5, &short))]));
        assert_eq!(info.warnings.len(), MAX_WARNINGS);
        assert_eq!(info.suppressed_warnings, 6);
        assert!(has_line(&info, "ACPI: 6 more warnings suppressed"));
    }

    /// A fixed-seed xorshift64 generator: deterministic, no extra crates.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    #[test]
    fn random_mutations_never_panic() {
        let madt_entries = [
            lapic(0, 0, 1),
            lapic(1, 1, 2),
            ioapic(),
            lapic_override(0xFEE0_0000),
            x2apic(0, 1, 0),
            x2apic(0x100, 1, 1),
        ];
        let srat_entries = [
            srat_cpu(0, 0, 1),
            srat_cpu(7, 1, 1),
            srat_x2(7, 0x100, 1),
            srat_mem(0, 0, GIB, 1),
            srat_mem(7, GIB, GIB, 3),
        ];
        let base = firmware(
            2,
            &[
                (FACP_AT, facp()),
                (MADT_AT, madt(5, &madt_entries)),
                (SRAT_AT, srat(3, &srat_entries)),
            ],
        );
        let regions: Vec<(u64, usize)> = [RSDT_AT, XSDT_AT, MADT_AT, SRAT_AT, FACP_AT]
            .iter()
            .map(|&at| (at, base.table_len(at)))
            .chain([(RSDP_AT, 36)])
            .collect();
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        let mut parsed = 0;
        for _ in 0..5000 {
            let mut m = base.clone();
            for _ in 0..=rng.below(8) {
                let (at, len) = regions[rng.below(regions.len())];
                // Also hit a few bytes past the end of each structure.
                let i = at as usize + rng.below(len + 8);
                match rng.below(3) {
                    0 => m.0[i] ^= 1 << rng.below(8),
                    1 => m.0[i] = rng.next() as u8,
                    _ => m.0[i] = [0, 1, 2, 0xFF][rng.below(4)],
                }
            }
            // Half the time repair every checksum, so the mutations reach
            // the entry parsers instead of stopping at the checksum check.
            if rng.below(2) == 0 {
                for &(at, len) in &regions[..5] {
                    let claimed = m.table_len(at);
                    let len = if (36..=MEM_SIZE - at as usize).contains(&claimed) {
                        claimed
                    } else {
                        len
                    };
                    m.fix_sdt(at, len);
                }
                let r = RSDP_AT as usize;
                fix_checksum(&mut m.0[r..r + 20], 8);
                fix_checksum(&mut m.0[r..r + 36], 32);
            }
            let Ok(info) = parse(RSDP_AT, &m) else {
                continue;
            };
            parsed += 1;
            assert!(info.nr_nodes >= 1);
            assert!(info
                .cpus
                .iter()
                .all(|c| c.node < info.nr_nodes && c.usable()));
            assert!(info.mem_affinity.iter().all(|r| r.node < info.nr_nodes));
            let mut ids: Vec<u32> = info.cpus.iter().map(|c| c.apic_id).collect();
            ids.sort_unstable();
            ids.dedup();
            assert_eq!(ids.len(), info.cpus.len(), "APIC ids are unique");
            assert!(info.report_lines().count() >= 3);
            let _ = format!("{info:?}");
        }
        assert!(parsed > 1000, "only {parsed} mutated inputs parsed");
    }
}
