//! What can go wrong in the tables: fatal errors, per-table warnings, and
//! the caps that keep hostile tables from exhausting the heap.

use alloc::vec::Vec;
use core::fmt;

use super::ascii::Ascii;
use super::limits::*;

/// Why a table (or one entry of it) could not be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableProblem {
    /// The root table lists physical address 0.
    NullAddress,
    /// [`PhysMemory::read`](crate::acpi::PhysMemory::read) failed somewhere inside the table.
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
    pub(super) fn consequence(&self) -> &'static str {
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

/// Collects warnings, keeping at most [`MAX_WARNINGS`].
#[derive(Default)]
pub(super) struct Warnings {
    pub(super) list: Vec<AcpiWarning>,
    pub(super) suppressed: u32,
}

impl Warnings {
    pub(super) fn push(&mut self, signature: [u8; 4], phys: u64, reason: TableProblem) {
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

/// A cap on how many items of one kind a table may contribute; warns once
/// per table, not once per excess entry.
pub(super) struct Limit {
    pub(super) signature: [u8; 4],
    pub(super) what: &'static str,
    pub(super) cap: usize,
    pub(super) warned: bool,
}

impl Limit {
    pub(super) const fn new(signature: [u8; 4], what: &'static str, cap: usize) -> Self {
        Self {
            signature,
            what,
            cap,
            warned: false,
        }
    }

    /// Whether an item fits beside `len` existing ones; warns the first time
    /// one does not.
    pub(super) fn allows(&mut self, len: usize, warnings: &mut Warnings, phys: u64) -> bool {
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
