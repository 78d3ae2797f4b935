//! memboot's memory-initialisation logic, free of hardware access so that the
//! host can test it and the kernel can call it.
//!
//! The pipeline it models is Linux's boot-time path:
//! firmware map → memblock → zones and 128 MiB sections → vmemmap →
//! `struct page` init (eager part here; the deferred part in `deferred-init`)
//! → memory-block devices.
//!
//! Units: a `pfn` is a 4 KiB page frame number, ranges are half-open
//! `[start, end)`, sizes in bytes are `u64`.
#![cfg_attr(not(test), no_std)]

extern crate alloc;

pub mod firmware;
mod holes;
pub mod hugetlb;
pub mod init;
pub mod iter;
pub mod memblock;
pub mod memory_block;
pub mod page;
pub mod page32;
pub mod page8;
mod page_size;
pub mod pageblock;
mod region_table;
pub mod sections;
pub mod store;
pub mod user_map;
pub mod zones;

/// log2 of the page size (4 KiB), as Linux's `PAGE_SHIFT` on x86_64.
pub const PAGE_SHIFT: u32 = 12;
/// Page size in bytes.
pub const PAGE_SIZE: u64 = 1 << PAGE_SHIFT;
/// log2 of the sparsemem section size (128 MiB), Linux x86_64 `SECTION_SIZE_BITS`.
pub const SECTION_SIZE_BITS: u32 = 27;
/// Pages per 128 MiB section (32768).
pub const PAGES_PER_SECTION: u64 = 1 << (SECTION_SIZE_BITS - PAGE_SHIFT);
/// Largest buddy order; blocks of order 10 are 4 MiB (Linux 6.1 `MAX_ORDER - 1`).
pub const MAX_ORDER: u32 = 10;
/// Buddy orders, `0..=MAX_ORDER`: the free lists (or bitmap words) per zone.
pub const NR_ORDERS: usize = MAX_ORDER as usize + 1;
/// Pageblock order (2 MiB pageblocks of 512 pages), Linux `pageblock_order` on x86_64.
pub(crate) const PAGEBLOCK_ORDER: u32 = 9;
/// Pages per pageblock (512).
pub(crate) const PAGEBLOCK_NR_PAGES: u64 = 1 << PAGEBLOCK_ORDER;

/// A page frame number: physical address >> 12.
pub type Pfn = u64;
/// A NUMA node id, as numbered by ACPI SRAT proximity domains (made dense).
pub type NodeId = u32;

/// Section number of `pfn`.
#[inline]
pub const fn pfn_to_section_nr(pfn: Pfn) -> u64 {
    pfn >> (SECTION_SIZE_BITS - PAGE_SHIFT)
}

/// First PFN of section `section_nr`.
#[inline]
pub const fn section_nr_to_pfn(section_nr: u64) -> Pfn {
    section_nr << (SECTION_SIZE_BITS - PAGE_SHIFT)
}

/// A half-open PFN range `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PfnRange {
    pub start: Pfn,
    pub end: Pfn,
}

impl PfnRange {
    pub const fn new(start: Pfn, end: Pfn) -> Self {
        Self { start, end }
    }
    /// Number of pages in the range (0 when `end <= start`).
    pub const fn nr_pages(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }
    pub const fn is_empty(&self) -> bool {
        self.end <= self.start
    }
    pub const fn contains(&self, pfn: Pfn) -> bool {
        self.start <= pfn && pfn < self.end
    }
    /// The overlap of two ranges, if any.
    pub fn intersect(&self, other: &PfnRange) -> Option<PfnRange> {
        let r = PfnRange::new(self.start.max(other.start), self.end.min(other.end));
        (!r.is_empty()).then_some(r)
    }

    /// The range cut at 128 MiB section boundaries, ascending: each piece
    /// lies in one section, so its struct pages are one contiguous slice of
    /// that section's memmap (see [`store::Memmap::pages`]).
    pub fn section_pieces(self) -> impl Iterator<Item = PfnRange> {
        let mut start = self.start;
        core::iter::from_fn(move || {
            if start >= self.end {
                return None;
            }
            let end = section_nr_to_pfn(pfn_to_section_nr(start) + 1).min(self.end);
            let piece = PfnRange::new(start, end);
            start = end;
            Some(piece)
        })
    }
}

/// Zone types, numbered as Linux x86_64 numbers them (`enum zone_type` with
/// `CONFIG_ZONE_DMA`, `CONFIG_ZONE_DMA32`; `ZONE_MOVABLE` exists in Linux but
/// memboot never populates it). The number is what goes into page flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum ZoneType {
    /// PFNs below 16 MiB.
    Dma = 0,
    /// PFNs below 4 GiB.
    Dma32 = 1,
    /// Everything above.
    Normal = 2,
}

impl ZoneType {
    pub const ALL: [ZoneType; 3] = [ZoneType::Dma, ZoneType::Dma32, ZoneType::Normal];
    /// Linux's name for the zone, as printed in dmesg.
    pub const fn name(self) -> &'static str {
        match self {
            ZoneType::Dma => "DMA",
            ZoneType::Dma32 => "DMA32",
            ZoneType::Normal => "Normal",
        }
    }
    /// The PFN range this zone may span on x86_64 (`max_zone_pfns`).
    pub const fn pfn_limit(self) -> PfnRange {
        match self {
            ZoneType::Dma => PfnRange::new(0, (16 << 20) >> PAGE_SHIFT),
            ZoneType::Dma32 => PfnRange::new((16 << 20) >> PAGE_SHIFT, (4 << 30) >> PAGE_SHIFT),
            ZoneType::Normal => PfnRange::new((4 << 30) >> PAGE_SHIFT, u64::MAX >> PAGE_SHIFT),
        }
    }
    /// Zone of a PFN.
    pub const fn of_pfn(pfn: Pfn) -> ZoneType {
        if pfn < (16 << 20) >> PAGE_SHIFT {
            ZoneType::Dma
        } else if pfn < (4 << 30) >> PAGE_SHIFT {
            ZoneType::Dma32
        } else {
            ZoneType::Normal
        }
    }
    pub(crate) const fn from_index(i: u64) -> Option<ZoneType> {
        match i {
            0 => Some(ZoneType::Dma),
            1 => Some(ZoneType::Dma32),
            2 => Some(ZoneType::Normal),
            _ => None,
        }
    }
}

/// A PFN range of one node and one zone: the unit memory init, deferred init
/// and the buddy allocator pass around. Ranges of this type never cross a
/// zone boundary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZoneRange {
    pub nid: NodeId,
    pub zone: ZoneType,
    pub pfns: PfnRange,
}

/// One node's PFN range whose struct pages the `Deferred` strategy left
/// uninitialised, for `deferred-init` to do on that node's CPUs; it contains
/// only present (memblock memory) PFNs.
pub type DeferredRange = ZoneRange;
