//! What the free-list check ([`super::verify_buddy`]) reports: each zone's
//! verified numbers, and every way a list, a head or a count can disagree
//! with the struct pages, each with a message that names the place.

use alloc::vec::Vec;
use core::fmt;

use memmap::{NodeId, Pfn, PfnRange, ZoneType, NR_ORDERS};

use super::pages::MAX_RECORDED_MISMATCHES;
use crate::buddy::PFN_NONE;
use memmap::page::PageWords;

/// Verified numbers of one (node, zone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZoneSummary {
    pub nid: NodeId,
    pub zone: ZoneType,
    /// `ZoneInfo::present_pages`.
    pub present: u64,
    /// Memory pages with matching links (page scan).
    pub initialised: u64,
    /// Reserved memory pages per memblock, within the node's memory.
    pub expected_reserved: u64,
    /// Correctly reserved pages (page scan).
    pub reserved: u64,
    /// Free pages of initialised memory: `present - expected_reserved`
    /// minus the pool's unreserved pages.
    pub expected_free: u64,
    /// Free pages in valid blocks (page scan).
    pub free: u64,
    /// `BuddyAllocator::nr_free_pages`.
    pub buddy_free: u64,
    /// Blocks on the free lists, per order.
    pub listed_blocks: [u64; NR_ORDERS],
    /// Memory pages still in the pool (struct pages untouched), and the
    /// memblock-reserved pages among them.
    pub untouched: u64,
    pub untouched_reserved: u64,
    /// Pages of huge pages taken from the allocator, and HVO's page
    /// tables for them (page scan).
    pub huge: u64,
}

impl fmt::Display for ZoneSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "verify: node {} zone {}: {} present, {} initialised, {} reserved, {} free (expected {})",
            self.nid,
            self.zone.name(),
            self.present,
            self.initialised,
            self.reserved,
            self.free,
            self.expected_free
        )?;
        if self.untouched > 0 {
            write!(
                f,
                ", {} untouched ({} of them reserved)",
                self.untouched, self.untouched_reserved
            )?;
        }
        if self.huge > 0 {
            write!(f, ", {} in huge pages", self.huge)?;
        }
        Ok(())
    }
}

/// What [`verify_buddy`](super::verify_buddy) checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuddySummary {
    /// Zones of the layout with present pages, plus any (node, zone) the
    /// scan or the allocator has pages of.
    pub zones: Vec<ZoneSummary>,
    pub pages_checked: u64,
    /// Blocks walked on all free lists.
    pub listed_blocks: u64,
}

impl fmt::Display for BuddySummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for z in &self.zones {
            writeln!(f, "{z}")?;
        }
        write!(
            f,
            "verify: {} pages checked, {} free blocks listed",
            self.pages_checked, self.listed_blocks
        )
    }
}

/// What is wrong with a block on a free list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadProblem {
    NotBuddy,
    WrongOrder,
    Misaligned,
    WrongLinks,
    Refcount,
    /// `lru.prev` is not the previous head on the list.
    BrokenList {
        expected_prev: Pfn,
    },
    /// The head has no struct-page backing.
    Unbacked,
}

impl fmt::Display for HeadProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            HeadProblem::NotBuddy => write!(f, "not PageBuddy"),
            HeadProblem::WrongOrder => write!(f, "wrong order"),
            HeadProblem::Misaligned => write!(f, "not aligned to its order"),
            HeadProblem::WrongLinks => write!(f, "section/node/zone bits wrong"),
            HeadProblem::Refcount => write!(f, "wrong refcount"),
            HeadProblem::BrokenList { expected_prev } => {
                write!(f, "lru.prev should be {expected_prev:#x}")
            }
            HeadProblem::Unbacked => write!(f, "no struct-page backing"),
        }
    }
}

/// What is wrong with a free list as a list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListProblem {
    /// Head `from`'s `lru.next` (the list head if `from` is `PFN_NONE`)
    /// points at `to`, which is not memory of the list's node and zone.
    LeavesZone { from: Pfn, to: Pfn },
    /// More blocks are linked than the list's counter says; `after` is the
    /// last one counted.
    TooLong { after: Pfn },
    /// The links end after `walked` blocks, before the counter says.
    TooShort { walked: u64 },
}

impl fmt::Display for ListProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ListProblem::LeavesZone { from, to } if from == PFN_NONE => {
                write!(
                    f,
                    "the list head points at pfn {to:#x}, outside the zone's memory"
                )
            }
            ListProblem::LeavesZone { from, to } => write!(
                f,
                "pfn {from:#x}'s lru.next points at pfn {to:#x}, outside the zone's memory"
            ),
            ListProblem::TooLong { after } => write!(
                f,
                "more blocks linked than counted, after pfn {after:#x} (a cycle?)"
            ),
            ListProblem::TooShort { walked } => {
                write!(f, "the links end after {walked} blocks, before the counter")
            }
        }
    }
}

/// `node N zone Z`, the place most mismatches are counted for.
struct InZone(NodeId, ZoneType);

impl fmt::Display for InZone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {} zone {}", self.0, self.1.name())
    }
}

/// A disagreement found by [`verify_buddy`](super::verify_buddy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BuddyMismatch {
    /// The page scan itself found mismatches.
    PageScan { nr_mismatches: u64 },
    /// The page scan did not cover all present-section pages.
    ScanIncomplete { checked: u64, expected: u64 },
    /// A block on a free list is not a proper head.
    ListedHead {
        nid: NodeId,
        zone: ZoneType,
        pfn: Pfn,
        order: u32,
        problem: HeadProblem,
        found: PageWords,
    },
    /// Blocks of one order: listed vs valid heads in the scan vs the list counter.
    BlockCount {
        nid: NodeId,
        zone: ZoneType,
        order: u32,
        listed: u64,
        scanned: u64,
        counter: u64,
    },
    /// Free pages: allocator counter vs listed blocks vs the scan.
    FreePages {
        nid: NodeId,
        zone: ZoneType,
        counter: u64,
        listed: u64,
        scanned: u64,
    },
    /// Initialised pages differ from the zone's present pages.
    Initialised {
        nid: NodeId,
        zone: ZoneType,
        present: u64,
        initialised: u64,
    },
    /// Reserved pages differ from memblock's.
    Reserved {
        nid: NodeId,
        zone: ZoneType,
        expected: u64,
        found: u64,
    },
    /// Free pages differ from present − reserved.
    Free {
        nid: NodeId,
        zone: ZoneType,
        expected: u64,
        found: u64,
    },
    /// A free list's links are broken.
    List {
        nid: NodeId,
        zone: ZoneType,
        order: u32,
        problem: ListProblem,
    },
    /// A block on a free list lies in the untouched pool.
    PoolOverlap {
        nid: NodeId,
        zone: ZoneType,
        pfn: Pfn,
        order: u32,
    },
    /// Pages out of the pool (claimed windows, pages taken out of it) vs
    /// what the claimants and takers reported initialising: a difference
    /// means a window was initialised twice, or not at all.
    ClaimedPages {
        nid: NodeId,
        claimed: u64,
        initialised: u64,
    },
    /// A chunk's windows were initialised a different number of times than
    /// they were claimed: some window twice (or one never).
    WindowInits {
        nid: NodeId,
        windows: PfnRange,
        claimed: u32,
        initialised: u32,
    },
    /// Verification ran while windows of the node were still in flight.
    InFlight { nid: NodeId },
    /// Pages counted for a (node, zone) the layout does not have.
    UnknownZone {
        nid: NodeId,
        zone: ZoneType,
        pages: u64,
    },
}

impl fmt::Display for BuddyMismatch {
    // One message per variant, a table: splitting it would scatter the
    // wording a reader compares across variants.
    #[allow(clippy::too_many_lines)]
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BuddyMismatch::PageScan { nr_mismatches } => {
                write!(f, "verify: page scan found {nr_mismatches} mismatching pages")
            }
            BuddyMismatch::ScanIncomplete { checked, expected } => write!(
                f,
                "verify: page scan covered {checked} pages, present sections have {expected}; scan all of present_section_ranges() and merge"
            ),
            BuddyMismatch::ListedHead {
                nid,
                zone,
                pfn,
                order,
                problem,
                found,
            } => {
                write!(
                    f,
                    "verify: pfn {pfn:#x}: expected head of a free order-{order} block of node {nid} zone {} (PageBuddy, order {order}, refcount 0), found {found} (",
                    zone.name()
                )?;
                write!(f, "{problem})")
            }
            BuddyMismatch::BlockCount {
                nid,
                zone,
                order,
                listed,
                scanned,
                counter,
            } => write!(
                f,
                "verify: {} order {order}: {listed} blocks listed, {scanned} heads in the page scan, list counter {counter}",
                InZone(nid, zone)
            ),
            BuddyMismatch::FreePages {
                nid,
                zone,
                counter,
                listed,
                scanned,
            } => write!(
                f,
                "verify: {}: nr_free_pages {counter}, {listed} pages in listed blocks, {scanned} free pages in the page scan",
                InZone(nid, zone)
            ),
            BuddyMismatch::Initialised {
                nid,
                zone,
                present,
                initialised,
            } => write!(
                f,
                "verify: {}: {present} present, but {initialised} initialised",
                InZone(nid, zone)
            ),
            BuddyMismatch::Reserved {
                nid,
                zone,
                expected,
                found,
            } => write!(
                f,
                "verify: {}: {found} reserved pages, memblock reserves {expected}",
                InZone(nid, zone)
            ),
            BuddyMismatch::Free {
                nid,
                zone,
                expected,
                found,
            } => write!(
                f,
                "verify: {}: {found} free pages, expected {expected} (present - reserved)",
                InZone(nid, zone)
            ),
            BuddyMismatch::List {
                nid,
                zone,
                order,
                problem,
            } => write!(
                f,
                "verify: {} order-{order} free list: {problem}",
                InZone(nid, zone)
            ),
            BuddyMismatch::PoolOverlap {
                nid,
                zone,
                pfn,
                order,
            } => write!(
                f,
                "verify: {}: free order-{order} block {pfn:#x} lies in untouched pool memory",
                InZone(nid, zone)
            ),
            BuddyMismatch::ClaimedPages {
                nid,
                claimed,
                initialised,
            } => write!(
                f,
                "verify: node {nid}: {claimed} pages out of the pool (claimed windows and pages taken out), but claimants and takers initialised {initialised}: a window was initialised twice or not at all"
            ),
            BuddyMismatch::WindowInits {
                nid,
                windows,
                claimed,
                initialised,
            } => write!(
                f,
                "verify: node {nid} chunk {:#x}..{:#x}: {claimed} block windows claimed, but the init path ran {initialised} times: {}",
                windows.start,
                windows.end,
                if initialised > claimed {
                    "a window was initialised twice"
                } else {
                    "a claimed window was never initialised"
                }
            ),
            BuddyMismatch::InFlight { nid } => write!(
                f,
                "verify: node {nid}: claimed windows are still being initialised; verify once every worker and allocation returned"
            ),
            BuddyMismatch::UnknownZone { nid, zone, pages } => write!(
                f,
                "verify: {} is not in the zone layout but has {pages} pages",
                InZone(nid, zone)
            ),
        }
    }
}

/// [`verify_buddy`](super::verify_buddy) failed: the numbers and what differs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuddyFailure {
    pub summary: BuddySummary,
    /// The first [`MAX_RECORDED_MISMATCHES`] mismatches.
    pub mismatches: Vec<BuddyMismatch>,
    pub nr_mismatches: u64,
}

impl BuddyFailure {
    pub(super) fn record(&mut self, m: BuddyMismatch) {
        self.nr_mismatches += 1;
        if self.mismatches.len() < MAX_RECORDED_MISMATCHES {
            self.mismatches.push(m);
        }
    }
}

impl fmt::Display for BuddyFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.summary)?;
        for m in &self.mismatches {
            writeln!(f, "{m}")?;
        }
        write!(f, "verify: FAILED, {} mismatches", self.nr_mismatches)?;
        if self.nr_mismatches > self.mismatches.len() as u64 {
            write!(f, " (first {} shown)", self.mismatches.len())?;
        }
        Ok(())
    }
}
