//! What the ACPI specification fixes (header lengths, offsets, signatures)
//! and the bounds memboot puts on what firmware claims.

/// Size of the standard system description table header (§5.2.6).
pub const SDT_HEADER_LEN: u32 = 36;
/// Largest table length we believe. Real tables are a few KiB (a MADT for
/// 8192 x2APIC CPUs is 128 KiB); anything bigger is a corrupt length field.
pub const MAX_TABLE_LEN: u32 = 16 << 20;
/// The ACPI 1.0 RSDP is 20 bytes; its checksum covers exactly those.
pub(super) const RSDP_V1_LEN: u32 = 20;
/// The ACPI 2.0+ RSDP is 36 bytes (§5.2.5.3).
pub(super) const RSDP_V2_LEN: u32 = 36;
/// An RSDP `length` beyond one page is not a future extension but garbage.
pub(super) const RSDP_MAX_LEN: u32 = 4096;
/// Root table entries we follow. Real firmware lists a few dozen tables.
pub(super) const MAX_ROOT_ENTRIES: u32 = 1024;
/// CPUs we record (the x86 Linux `NR_CPUS` maximum).
pub const MAX_CPUS: usize = 8192;
/// Distinct NUMA nodes we record (Linux's `MAX_NUMNODES` at `NODES_SHIFT` 10).
pub const MAX_SRAT_NODES: usize = 1024;
/// SRAT memory ranges we record.
pub(super) const MAX_MEM_RANGES: usize = 4096;
/// Warnings we keep; further ones are only counted.
pub(super) const MAX_WARNINGS: usize = 64;
/// Default local APIC base (Intel SDM Vol. 3 §11.4.1), used without a MADT.
pub const DEFAULT_LAPIC_ADDR: u64 = 0xFEE0_0000;

/// MADT: entries start after the header, the local APIC address and flags.
pub(super) const MADT_ENTRIES_OFFSET: usize = 44;
/// SRAT: entries start after the header and 12 reserved bytes.
pub(super) const SRAT_ENTRIES_OFFSET: usize = 48;

pub(super) const SIG_MADT: [u8; 4] = *b"APIC";
pub(super) const SIG_SRAT: [u8; 4] = *b"SRAT";
pub(super) const SIG_XSDT: [u8; 4] = *b"XSDT";
pub(super) const SIG_RSDT: [u8; 4] = *b"RSDT";
/// Placeholder signature for a table whose header we could not read.
pub(super) const SIG_UNKNOWN: [u8; 4] = *b"????";
