//! memblock's regions and the tables that hold them: [`MemblockRegion`],
//! its [`RegionFlags`], the [`MemblockError`]s an edit can fail with, and
//! [`RegionTable`], sorted, disjoint and merged, edited by splicing (Linux
//! `struct memblock_type` and `memblock_add_range()` /
//! `memblock_remove_range()`). [`crate::memblock`] builds the two tables
//! and is the only path to these names.

use alloc::vec::Vec;
use core::fmt;

use crate::page::MAX_NUMNODES;
use crate::{NodeId, PfnRange, PAGE_SHIFT};

/// Region flags (Linux `enum memblock_flags`); regions merge only when equal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct RegionFlags(pub(crate) u32);

impl RegionFlags {
    /// `MEMBLOCK_NONE`.
    pub(crate) const NONE: RegionFlags = RegionFlags(0);
    /// `MEMBLOCK_HOTPLUG`: hotpluggable memory (SRAT hot-pluggable bit).
    pub const HOTPLUG: RegionFlags = RegionFlags(1);
    /// `MEMBLOCK_MIRROR`: mirrored (reliable) memory.
    #[allow(dead_code)] // Linux's flag, not set by memboot
    pub(crate) const MIRROR: RegionFlags = RegionFlags(2);
    /// `MEMBLOCK_NOMAP`: not to be mapped by the kernel.
    #[allow(dead_code)] // Linux's flag, not set by memboot
    pub(crate) const NOMAP: RegionFlags = RegionFlags(4);
    /// `MEMBLOCK_RSRV_NOINIT` (Linux 6.5+), on reserved regions: memmap
    /// init leaves their struct pages alone, because their owner writes
    /// them. memboot sets it on the 1 GiB huge pages only
    /// ([`crate::hugetlb`]), whose struct pages the huge-page phase writes
    /// as compound pages.
    pub const RSRV_NOINIT: RegionFlags = RegionFlags(0x10);
}

/// One memblock region, in bytes (Linux `struct memblock_region`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemblockRegion {
    pub base: u64,
    pub size: u64,
    pub nid: NodeId,
    pub flags: RegionFlags,
}

impl MemblockRegion {
    /// One past the last byte.
    pub const fn end(&self) -> u64 {
        self.base + self.size
    }
    /// The region's page frames (exact: regions are page aligned).
    pub const fn pfns(&self) -> PfnRange {
        PfnRange::new(self.base >> PAGE_SHIFT, self.end() >> PAGE_SHIFT)
    }
    fn mergeable_with(&self, next: &MemblockRegion) -> bool {
        self.end() == next.base && self.nid == next.nid && self.flags == next.flags
    }
}

/// Which table an error or a region refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableKind {
    Memory,
    Reserved,
}

impl TableKind {
    pub(crate) const fn name(self) -> &'static str {
        match self {
            TableKind::Memory => "memory",
            TableKind::Reserved => "reserved",
        }
    }
}

/// Everything that can go wrong building or editing memblock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemblockError {
    /// The edit would need more regions than the table may hold.
    TooManyRegions {
        table: TableKind,
        needed: usize,
        max_regions: usize,
    },
    /// The heap could not grow the table.
    OutOfMemory { table: TableKind },
    /// The configured physical address width is not something x86_64 has.
    BadPhysAddrBits { bits: u32 },
    /// The firmware map contained no whole page of usable RAM.
    NoUsableMemory,
    /// A range ends past the CPU's physical address width.
    BeyondPhysAddrWidth {
        base: u64,
        size: u64,
        phys_addr_bits: u32,
    },
    /// `base + size` overflows 64 bits.
    RangeOverflow { base: u64, size: u64 },
    /// A node id the struct-page flags cannot encode.
    InvalidNode { nid: NodeId },
    /// Two SRAT affinity entries claim the same memory for different nodes.
    AffinityOverlap {
        start: u64,
        end: u64,
        first_nid: NodeId,
        second_nid: NodeId,
    },
    /// An allocation alignment that is not a power of two.
    BadAlign { align: u64 },
    /// An allocation of zero bytes.
    ZeroSize,
    /// No free memory fits the allocation on any node.
    AllocFailed {
        size: u64,
        align: u64,
        nid: Option<NodeId>,
    },
}

impl fmt::Display for MemblockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            MemblockError::TooManyRegions { table, needed, max_regions } => write!(
                f,
                "memblock: the {} table would need {needed} regions but holds at most {max_regions}; \
                 raise MemblockConfig::max_regions or check the firmware map for fragmentation",
                table.name()
            ),
            MemblockError::OutOfMemory { table } => write!(
                f,
                "memblock: out of heap memory growing the {} table; give the early heap more space",
                table.name()
            ),
            MemblockError::BadPhysAddrBits { bits } => write!(
                f,
                "memblock: physical address width of {bits} bits is not supported; use 32..=52 (CPUID 0x80000008 EAX[7:0])"
            ),
            MemblockError::NoUsableMemory => write!(
                f,
                "memblock: the firmware map has no whole page of usable RAM; check the bootloader's memory map"
            ),
            MemblockError::BeyondPhysAddrWidth { base, size, phys_addr_bits } => write!(
                f,
                "memblock: range [{base:#x}, +{size:#x}) ends past the {phys_addr_bits}-bit physical address width; clip it to the CPU's limit"
            ),
            MemblockError::RangeOverflow { base, size } => write!(
                f,
                "memblock: range [{base:#x}, +{size:#x}) overflows 64 bits; the caller passed a corrupt size"
            ),
            MemblockError::InvalidNode { nid } => write!(
                f,
                "memblock: node {nid} exceeds the {MAX_NUMNODES} nodes struct page flags can encode; renumber SRAT proximity domains densely"
            ),
            MemblockError::AffinityOverlap { start, end, first_nid, second_nid } => write!(
                f,
                "memblock: SRAT assigns [mem {start:#018x}-{:#018x}] to both node {first_nid} and node {second_nid}; the ACPI SRAT is inconsistent",
                end.saturating_sub(1)
            ),
            MemblockError::BadAlign { align } => write!(
                f,
                "memblock: allocation alignment {align:#x} is not a power of two"
            ),
            MemblockError::ZeroSize => write!(f, "memblock: refusing a zero-byte allocation"),
            MemblockError::AllocFailed { size, align, nid } => {
                write!(f, "memblock: no free range of {size:#x} bytes aligned to {align:#x}")?;
                match nid {
                    Some(nid) => write!(f, " on node {nid} or any other node")?,
                    None => write!(f, " on any node")?,
                }
                write!(f, "; reserve less early memory or boot with more RAM")
            }
        }
    }
}

/// A sorted, disjoint, merged region table (Linux `struct memblock_type`).
#[derive(Clone, Debug)]
pub struct RegionTable {
    kind: TableKind,
    max_regions: usize,
    regions: Vec<MemblockRegion>,
}

impl RegionTable {
    pub(crate) fn new(kind: TableKind, max_regions: usize) -> Self {
        Self {
            kind,
            max_regions,
            regions: Vec::new(),
        }
    }

    /// The regions, ascending by base.
    pub fn regions(&self) -> &[MemblockRegion] {
        &self.regions
    }
    pub fn len(&self) -> usize {
        self.regions.len()
    }
    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }
    /// Sum of region sizes in bytes.
    pub fn total_bytes(&self) -> u64 {
        self.regions.iter().map(|r| r.size).sum()
    }
    /// Sum of region sizes in pages.
    pub fn total_pages(&self) -> u64 {
        self.total_bytes() >> PAGE_SHIFT
    }

    /// Index of the first region ending after byte `addr`.
    pub(crate) fn first_ending_after(&self, addr: u64) -> usize {
        self.regions.partition_point(|r| r.end() <= addr)
    }

    /// Index range of regions overlapping `[base, end)`.
    pub(crate) fn overlapping(&self, base: u64, end: u64) -> (usize, usize) {
        let first = self.first_ending_after(base);
        let last = first + self.regions[first..].partition_point(|r| r.base < end);
        (first, last)
    }

    /// Replace `regions[first..last]` by `replacement` (sorted, disjoint), merging
    /// with the untouched neighbours; fails without writing when the result
    /// would exceed the cap.
    pub(crate) fn splice(
        &mut self,
        first: usize,
        last: usize,
        replacement: Vec<MemblockRegion>,
    ) -> Result<(), MemblockError> {
        let lo = first.saturating_sub(1);
        let hi = (last + 1).min(self.regions.len());
        let mut merged: Vec<MemblockRegion> = Vec::new();
        merged
            .try_reserve(replacement.len() + 2)
            .map_err(|_| MemblockError::OutOfMemory { table: self.kind })?;
        let before = self.regions[lo..first].iter();
        let after = self.regions[last..hi].iter();
        for r in before.chain(replacement.iter()).chain(after) {
            if r.size == 0 {
                continue;
            }
            match merged.last_mut() {
                Some(prev) if prev.mergeable_with(r) => prev.size += r.size,
                _ => merged.push(*r),
            }
        }
        let needed = self.regions.len() - (hi - lo) + merged.len();
        if needed > self.max_regions {
            return Err(MemblockError::TooManyRegions {
                table: self.kind,
                needed,
                max_regions: self.max_regions,
            });
        }
        if needed > self.regions.len() {
            self.regions
                .try_reserve(needed - self.regions.len())
                .map_err(|_| MemblockError::OutOfMemory { table: self.kind })?;
        }
        replace_range(&mut self.regions, lo, hi, &merged);
        Ok(())
    }

    /// Add the parts of `[base, end)` not already in the table (existing
    /// regions keep their node and flags), as `memblock_add_range()` does.
    pub(crate) fn insert(
        &mut self,
        base: u64,
        end: u64,
        nid: NodeId,
        flags: RegionFlags,
    ) -> Result<(), MemblockError> {
        if base >= end {
            return Ok(());
        }
        let (first, last) = self.overlapping(base, end);
        let mut replacement = Vec::new();
        replacement
            .try_reserve(2 * (last - first) + 1)
            .map_err(|_| MemblockError::OutOfMemory { table: self.kind })?;
        let mut cursor = base;
        for r in &self.regions[first..last] {
            if r.base > cursor {
                replacement.push(MemblockRegion {
                    base: cursor,
                    size: r.base - cursor,
                    nid,
                    flags,
                });
            }
            replacement.push(*r);
            cursor = cursor.max(r.end());
        }
        if cursor < end {
            replacement.push(MemblockRegion {
                base: cursor,
                size: end - cursor,
                nid,
                flags,
            });
        }
        self.splice(first, last, replacement)
    }

    /// Rewrite the parts of regions inside `[base, end)` with `f` (`None`
    /// drops the part); parts outside are kept. This is Linux's
    /// `memblock_isolate_range()` followed by an edit of the isolated regions.
    pub(crate) fn rewrite_inside(
        &mut self,
        base: u64,
        end: u64,
        mut f: impl FnMut(MemblockRegion) -> Option<MemblockRegion>,
    ) -> Result<(), MemblockError> {
        if base >= end {
            return Ok(());
        }
        let (first, last) = self.overlapping(base, end);
        if first == last {
            return Ok(());
        }
        let mut replacement = Vec::new();
        replacement
            .try_reserve(last - first + 2)
            .map_err(|_| MemblockError::OutOfMemory { table: self.kind })?;
        for r in &self.regions[first..last] {
            if r.base < base {
                replacement.push(MemblockRegion {
                    size: base - r.base,
                    ..*r
                });
            }
            let in_base = r.base.max(base);
            let in_end = r.end().min(end);
            if let Some(piece) = f(MemblockRegion {
                base: in_base,
                size: in_end - in_base,
                ..*r
            }) {
                replacement.push(piece);
            }
            if r.end() > end {
                replacement.push(MemblockRegion {
                    base: end,
                    size: r.end() - end,
                    ..*r
                });
            }
        }
        self.splice(first, last, replacement)
    }

    /// Does any region overlap `[base, end)`?
    #[cfg(test)]
    pub(crate) fn overlaps(&self, base: u64, end: u64) -> bool {
        let (first, last) = self.overlapping(base, end);
        first < last
    }
}

/// `v[lo..hi] = with`, moving the tail once: what `Vec::splice` does, in a
/// fraction of its code (memblock runs before memory is ready, where under
/// TCG each instruction run for the first time is a translation). Growing
/// needs the capacity reserved already.
fn replace_range(v: &mut Vec<MemblockRegion>, lo: usize, hi: usize, with: &[MemblockRegion]) {
    let old_len = v.len();
    let new_len = old_len - (hi - lo) + with.len();
    if new_len > old_len {
        // `with` is longer than the part it replaces, so not empty.
        v.resize(new_len, with[0]);
    }
    v.copy_within(hi..old_len, lo + with.len());
    v.truncate(new_len);
    v[lo..lo + with.len()].copy_from_slice(with);
}
