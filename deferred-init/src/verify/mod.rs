//! Post-init verification: after memmap init and deferred init (mode
//! [`InitMode::InitAndFree`](crate::InitMode::InitAndFree)) are complete,
//! check every struct page against memblock and the buddy free lists against
//! the pages, and fail loudly with what differs.
//!
//! [`check_all`] runs all of it, the page scan on every CPU; the kernel's
//! verify stage and the host tests call it. Its parts, one file each:
//!
//! 1. `pages`: [`verify_pages`] scans the struct pages of a PFN range (read
//!    only, so several CPUs can scan disjoint slices at once) and returns a
//!    [`PageCheck`]; partial results combine with [`PageCheck::merge`].
//!    [`verify_scan_range`] does the same for a range between pool pieces.
//! 2. `pool`: [`PoolCheck`] accounts for the untouched pool (`ondemand`)
//!    from the claim counters, never reading its struct pages, and says
//!    which ranges the scan covers ([`PoolCheck::scan_ranges`]).
//! 3. `lists`: [`verify_buddy_with_pool`] (and [`verify_buddy`], without a
//!    pool) walks the free lists and compares them, the allocator's
//!    counters and the zones' present/reserved pages with the merged
//!    [`PageCheck`] of all initialised memory.
//! 4. `selftest`: [`alloc_free_selftest`] allocates and frees a few blocks
//!    on a node.
//!
//! # What a page must look like
//! * Memory PFN (memblock memory of node `nid`, zone by PFN): links
//!   (section, node, zone bits) of `(pfn, zone, nid)`; `mapping`, `index`,
//!   `memcg_data` zero.
//!   * memblock-reserved: `PG_reserved`, `_refcount == 1`, not `PageBuddy`;
//!   * free: not `PG_reserved`, `_refcount == 0`, and in exactly one buddy
//!     block: either a `PageBuddy` head (order ≤ `MAX_ORDER`, PFN aligned to
//!     the order, block wholly free memory of the same node and zone), or one
//!     of the `2^order − 1` pages after the last head (not `PageBuddy`).
//! * Hole PFN in a present section (not memory): `PG_reserved`,
//!   `_refcount == 1`, links of the [`UnavailableRange`] it lies in (Linux
//!   `init_unavailable_range`).
//!
//! # Range boundaries
//! A buddy block never crosses a `MAX_ORDER` (1024-page) boundary, so a scan
//! that starts on one knows no block is open. `range.start` should be
//! 1024-page aligned (section boundaries and present-section starts are); if
//! it is not, the scan reads (without checking or counting) the struct pages
//! from the 1024-aligned PFN below `range.start` to recover the open block,
//! so any split point gives the same merged result as one scan. A block whose
//! head lies in the range may end past `range.end`: its extent is checked
//! against memblock, its tail pages by the scan of the next range.
//!
//! # Preconditions
//! Nothing may allocate from or free into the buddy allocator while
//! [`verify_pages`] / [`verify_buddy`] run, and the scan must happen before
//! any page is allocated (an allocated page is free memory per memblock with
//! `_refcount == 1`, which is reported). [`alloc_free_selftest`] frees
//! everything it allocates, so it may run before or after.
//!
//! [`UnavailableRange`]: memmap::zones::UnavailableRange

use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicUsize, Ordering};

use memmap::memblock::Memblock;
use memmap::store::{Memmap, MemmapBacking};
use memmap::zones::ZoneLayout;
use memmap::NodeId;

use crate::buddy::BuddyAllocator;
use crate::hugetlb_pool::HugeCheck;
use crate::run::{DeferredInit, Executor};

mod list_report;
mod lists;
mod pages;
mod pool;
mod selftest;

pub use list_report::{
    BuddyFailure, BuddyMismatch, BuddySummary, HeadProblem, ListProblem, ZoneSummary,
};
pub use lists::{verify_buddy, verify_buddy_with_pool};
pub use pages::{
    verify_pages, verify_scan_range, Expected, PageCheck, PageMismatch, Problem, ScanRange,
    ZoneCheck, MAX_RECORDED_MISMATCHES,
};
pub use pool::PoolCheck;
pub use selftest::{alloc_free_selftest, SelftestError, SelftestReport, SELFTEST_ORDERS};

/// Sections per claim in the parallel page scan: large enough that claims
/// cost nothing, small enough that CPUs finish together.
pub const SECTIONS_PER_CLAIM: usize = 8;

/// What a verification that passed covered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// Struct pages the scan read and checked.
    pub pages_checked: u64,
    /// Pages of the untouched pool, accounted from its counters, not read.
    pub untouched_pages: u64,
    /// The per-zone figures the lists and counters were checked against.
    pub buddy: BuddySummary,
    /// The self-test of each node, in node order.
    pub selftests: Vec<NodeSelftest>,
}

/// One node's alloc/free self-test.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeSelftest {
    Ran(SelftestReport),
    /// Memblock reserves the whole node (the heap, the kernel): it has
    /// nothing to allocate, and the counts proved its free pages are 0.
    NoFreePages(NodeId),
}

impl fmt::Display for NodeSelftest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeSelftest::Ran(report) => write!(f, "{report}"),
            NodeSelftest::NoFreePages(nid) => write!(
                f,
                "verify: node {nid}: no free pages (all reserved): alloc/free self-test skipped"
            ),
        }
    }
}

/// The first part of [`check_all`] that failed, with what differs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckFailure {
    Pages(PageCheck),
    Buddy(BuddyFailure),
    Selftest { nid: NodeId, error: SelftestError },
}

impl fmt::Display for CheckFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckFailure::Pages(pages) => write!(f, "{pages}"),
            CheckFailure::Buddy(failure) => write!(f, "{failure}"),
            CheckFailure::Selftest { nid, error } => write!(f, "node {nid}: {error}"),
        }
    }
}

/// Verify everything after init and the allocation test: every initialised
/// page's struct page (on all of `executor`'s CPUs), then the free lists
/// and per-zone counts with the untouched pool accounted from its claim
/// counters, then the alloc/free self-test on every node that has free
/// pages. `buddy` is the page allocator's free lists, `di` the deferred
/// init that frees into them and keeps the pool. Costs O(initialised
/// pages and sections): untouched struct pages are never read. `huge`:
/// the huge pages taken from the allocator, each checked as the compound
/// page it must be and left out of the free pages. The preconditions are
/// the module's: nothing allocates or frees meanwhile.
pub fn check_all<B: MemmapBacking>(
    executor: &dyn Executor,
    memmap: &Memmap<B>,
    mb: &Memblock,
    layout: &ZoneLayout,
    buddy: &BuddyAllocator<'_, B>,
    di: &DeferredInit<'_, B>,
    huge: HugeCheck<'_>,
) -> Result<Verified, CheckFailure> {
    let pool = PoolCheck::new(di);
    let pages = scan_on_every_cpu(executor, memmap, mb, layout, huge, &pool);
    if !pages.is_ok() {
        return Err(CheckFailure::Pages(pages));
    }
    let summary = verify_buddy_with_pool(buddy, memmap, layout, mb, &pages, &pool)
        .map_err(CheckFailure::Buddy)?;
    let mut selftests = Vec::new();
    for node in layout.nodes() {
        let expected_free: u64 = summary
            .zones
            .iter()
            .filter(|z| z.nid == node.nid)
            .map(|z| z.expected_free)
            .sum();
        if expected_free == 0 {
            selftests.push(NodeSelftest::NoFreePages(node.nid));
            continue;
        }
        let report = alloc_free_selftest(buddy, di, memmap, node.nid).map_err(|error| {
            CheckFailure::Selftest {
                nid: node.nid,
                error,
            }
        })?;
        selftests.push(NodeSelftest::Ran(report));
    }
    Ok(Verified {
        pages_checked: pages.pages_checked,
        untouched_pages: pool.pages(),
        buddy: summary,
        selftests,
    })
}

/// The page scan over every initialised page (the present sections minus
/// the untouched pool), the CPUs claiming [`SECTIONS_PER_CLAIM`] ranges at
/// a time from one cursor.
fn scan_on_every_cpu<B: MemmapBacking>(
    executor: &dyn Executor,
    memmap: &Memmap<B>,
    mb: &Memblock,
    layout: &ZoneLayout,
    huge: HugeCheck<'_>,
    pool: &PoolCheck,
) -> PageCheck {
    let ranges: Vec<ScanRange> = pool.scan_ranges(layout);
    let cursor = AtomicUsize::new(0);
    let results: spin::Mutex<Vec<PageCheck>> = spin::Mutex::new(Vec::new());
    executor.on_each_cpu(&|_| {
        let mut check = PageCheck::new(layout);
        loop {
            let first = cursor.fetch_add(SECTIONS_PER_CLAIM, Ordering::Relaxed);
            if first >= ranges.len() {
                break;
            }
            let last = (first + SECTIONS_PER_CLAIM).min(ranges.len());
            for range in &ranges[first..last] {
                check.merge(verify_scan_range(memmap, mb, layout, huge, *range));
            }
        }
        results.lock().push(check);
    });
    let mut pages = PageCheck::new(layout);
    for c in results.into_inner() {
        pages.merge(c);
    }
    pages
}
