//! Why the buddy allocator could not be built, allocate or free: each
//! message says what to do.

use core::fmt;

use memmap::page::MAX_NUMNODES;
use memmap::{NodeId, Pfn, ZoneType, MAX_ORDER};

use memmap::ZoneRange as ManagedRange;

/// Why the allocator could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BuddyError {
    /// A managed range's PFNs are not in the zone it is labelled with.
    RangeCrossesZone { range: ManagedRange },
    /// Node id beyond what struct-page flags hold.
    NodeIdTooLarge { nid: NodeId },
    /// Two managed ranges overlap.
    OverlappingRanges {
        first: ManagedRange,
        second: ManagedRange,
    },
    /// A managed range touches a section whose struct pages are not backed.
    SectionNotBacked {
        section_nr: u64,
        range: ManagedRange,
    },
    /// Free lists asked of struct pages that have no list link.
    NoListLink { page_bytes: u64 },
    /// The heap could not hold a zone's free bitmaps.
    NoMemoryForBitmaps {
        nid: NodeId,
        zone: ZoneType,
        bytes: u64,
    },
}

impl fmt::Display for BuddyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuddyError::RangeCrossesZone { range } => write!(
                f,
                "managed range {:#x}..{:#x} of node {} is labelled {} but leaves that zone; split it at zone boundaries",
                range.pfns.start, range.pfns.end, range.nid, range.zone.name()
            ),
            BuddyError::NodeIdTooLarge { nid } => write!(
                f,
                "node id {nid} exceeds the {} nodes struct-page flags can hold; renumber nodes densely",
                MAX_NUMNODES
            ),
            BuddyError::OverlappingRanges { first, second } => write!(
                f,
                "managed ranges {:#x}..{:#x} (node {}) and {:#x}..{:#x} (node {}) overlap; give each PFN to one (node, zone) once",
                first.pfns.start, first.pfns.end, first.nid, second.pfns.start, second.pfns.end, second.nid
            ),
            BuddyError::SectionNotBacked { section_nr, range } => write!(
                f,
                "section {section_nr} of managed range {:#x}..{:#x} (node {}) has no struct-page backing; populate the vmemmap for every section with present memory first",
                range.pfns.start, range.pfns.end, range.nid
            ),
            BuddyError::NoListLink { page_bytes } => write!(
                f,
                "a {page_bytes}-byte struct page has no list link for free lists; use buddy=bitmaps"
            ),
            BuddyError::NoMemoryForBitmaps { nid, zone, bytes } => write!(
                f,
                "the heap cannot hold the {bytes} bytes of free bitmaps of node {nid} zone {}; the heap is sized by bootmap::heap_bytes: report it with this log",
                zone.name()
            ),
        }
    }
}

/// Why an allocation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllocError {
    /// `order > MAX_ORDER`.
    OrderTooLarge { order: u32 },
    /// The node has no free lists in this allocator.
    UnknownNode { nid: NodeId },
    /// No free block of that order or larger, and nothing left to grow.
    OutOfMemory {
        nid: NodeId,
        zone: ZoneType,
        order: u32,
    },
    /// No free block yet, but deferred-init workers are still initialising
    /// chunks of the node; retry later or wait for them.
    InitInProgress {
        nid: NodeId,
        zone: ZoneType,
        order: u32,
        windows_in_flight: u64,
    },
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllocError::OrderTooLarge { order } => write!(
                f,
                "order {order} exceeds MAX_ORDER {MAX_ORDER} (4 MiB); allocate several blocks instead"
            ),
            AllocError::UnknownNode { nid } => write!(
                f,
                "node {nid} has no memory in the buddy allocator; pick a node with memory"
            ),
            AllocError::OutOfMemory { nid, zone, order } => write!(
                f,
                "node {nid} zone {} has no free block of order {order} or larger; try another zone/node or a smaller order",
                zone.name()
            ),
            AllocError::InitInProgress {
                nid,
                zone,
                order,
                windows_in_flight,
            } => write!(
                f,
                "node {nid} zone {} has no free block of order {order} yet; {windows_in_flight} claimed block window(s) are still being initialised, retry once they are done",
                zone.name()
            ),
        }
    }
}

/// Why a free was refused (nothing was changed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FreeError {
    /// `order > MAX_ORDER`.
    OrderTooLarge { order: u32 },
    /// `pfn` is not a multiple of `1 << order`.
    Misaligned { pfn: Pfn, order: u32 },
    /// The block is not wholly inside memory this allocator manages.
    NotManaged { pfn: Pfn, order: u32 },
    /// The head page is free already or not an allocated block head
    /// (double free, or freeing a tail page).
    NotAllocated { pfn: Pfn },
}

impl fmt::Display for FreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FreeError::OrderTooLarge { order } => {
                write!(f, "order {order} exceeds MAX_ORDER {MAX_ORDER}; free with the order used to allocate")
            }
            FreeError::Misaligned { pfn, order } => write!(
                f,
                "pfn {pfn:#x} is not aligned to order {order}; free the head PFN returned by alloc"
            ),
            FreeError::NotManaged { pfn, order } => write!(
                f,
                "block {pfn:#x} order {order} is not (wholly) memory this allocator manages; it came from elsewhere"
            ),
            FreeError::NotAllocated { pfn } => write!(
                f,
                "pfn {pfn:#x} is not the head of an allocated block (refcount != 1 or already free): double free?"
            ),
        }
    }
}

/// Why [`BuddyAllocator::manage`](super::BuddyAllocator::manage) refused a
/// range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManageError {
    pub range: ManagedRange,
    pub why: &'static str,
}

impl fmt::Display for ManageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the allocator cannot manage {:#x}..{:#x} of node {} zone {}: {}; a memboot bug, report it with the log",
            self.range.pfns.start,
            self.range.pfns.end,
            self.range.nid,
            self.range.zone.name(),
            self.why
        )
    }
}
