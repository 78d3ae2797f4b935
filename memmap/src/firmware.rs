//! The firmware memory map, seen through a three-method trait.
//!
//! Like rust-osdev/bootloader's `common` crate (`LegacyMemoryRegion`:
//! `start()`, `len()`, `kind()`), the logic never names a concrete firmware
//! format: BIOS e820, UEFI or the bootloader's `BootInfo` regions all become
//! [`FirmwareRegion`]s, and tests feed synthetic maps. SRAT memory-affinity
//! entries (ACPI `struct acpi_srat_mem_affinity`, consumed in Linux by
//! `numa_add_memblk()` in arch/x86/mm/numa.c) arrive the same way as
//! [`NodeAffinity`] values.
//!
//! Nothing here is trusted: entries may be unsorted, overlapping, empty,
//! unaligned or beyond the CPU's physical address width. `memblock` resolves
//! all of that; this module only names the kinds and orders them by how usable
//! they are, because when two entries overlap the *least* usable kind wins
//! (Linux `e820__update_table()` sanitises overlaps the same way: the higher
//! e820 type number wins).

use crate::NodeId;

/// What a firmware map entry says about its memory, ordered from most to
/// least usable; on overlap the greater value wins.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum RegionKind {
    /// Free RAM (e820 type 1, UEFI conventional memory).
    Usable = 0,
    /// RAM already in use by the bootloader or the loaded kernel (page
    /// tables, boot info, kernel image): it is memory, but reserved.
    Bootloader = 1,
    /// ACPI tables the OS may reclaim after parsing (e820 type 3); not RAM
    /// for the allocator at boot.
    AcpiReclaimable = 2,
    /// ACPI non-volatile storage (e820 type 4).
    AcpiNvs = 3,
    /// Firmware-reserved or unknown (e820 type 2 and anything unrecognised).
    Reserved = 4,
    /// Memory the firmware reports as defective (e820 type 5).
    Unusable = 5,
}

impl RegionKind {
    /// All kinds, most usable first.
    pub const ALL: [RegionKind; 6] = [
        RegionKind::Usable,
        RegionKind::Bootloader,
        RegionKind::AcpiReclaimable,
        RegionKind::AcpiNvs,
        RegionKind::Reserved,
        RegionKind::Unusable,
    ];

    /// Does this kind describe RAM that goes into `memblock.memory`?
    pub const fn is_ram(self) -> bool {
        matches!(self, RegionKind::Usable | RegionKind::Bootloader)
    }

    /// Is this RAM that must also be put in `memblock.reserved`?
    pub(crate) const fn is_reserved_ram(self) -> bool {
        matches!(self, RegionKind::Bootloader)
    }
}

/// One entry of a firmware memory map, in bytes.
pub trait FirmwareRegion {
    /// Physical start address in bytes.
    fn start(&self) -> u64;
    /// Length in bytes (may be 0, may run past the address width).
    fn len(&self) -> u64;
    /// What the firmware says the memory is.
    fn kind(&self) -> RegionKind;
    /// A zero-length entry (memblock ignores it and counts it).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T: FirmwareRegion + ?Sized> FirmwareRegion for &T {
    fn start(&self) -> u64 {
        (**self).start()
    }
    fn len(&self) -> u64 {
        (**self).len()
    }
    fn kind(&self) -> RegionKind {
        (**self).kind()
    }
}

/// A plain firmware map entry, for tests and for converting other formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FirmwareEntry {
    pub start: u64,
    pub len_bytes: u64,
    pub kind: RegionKind,
}

impl FirmwareEntry {
    pub const fn new(start: u64, len_bytes: u64, kind: RegionKind) -> Self {
        Self {
            start,
            len_bytes,
            kind,
        }
    }
}

impl FirmwareRegion for FirmwareEntry {
    fn start(&self) -> u64 {
        self.start
    }
    fn len(&self) -> u64 {
        self.len_bytes
    }
    fn kind(&self) -> RegionKind {
        self.kind
    }
}

/// An SRAT-style memory affinity: bytes `[start, start + len_bytes)` belong
/// to node `nid`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeAffinity {
    pub start: u64,
    pub len_bytes: u64,
    pub nid: NodeId,
}

impl NodeAffinity {
    pub const fn new(start: u64, len_bytes: u64, nid: NodeId) -> Self {
        Self {
            start,
            len_bytes,
            nid,
        }
    }
}
