//! The buddy free lists against the struct pages and the counters: every
//! listed block is a valid head of its list's order, node and zone, each
//! list is a consistent doubly linked list, and per zone the listed pages
//! equal the free pages the page scan found plus the untouched pool's.

use alloc::vec::Vec;

use memmap::iter::intersect_sorted;
use memmap::memblock::Memblock;
use memmap::page::PageLayout;
use memmap::store::{Memmap, MemmapBacking};
use memmap::zones::ZoneLayout;
use memmap::{NodeId, Pfn, ZoneType, MAX_ORDER};

use crate::buddy::walk::ListEnd;
use crate::buddy::{slot, slot_key, BuddyAllocator, PFN_NONE};
use memboot_contract::option_values::BuddyStore;
use memmap::NR_ORDERS;

use super::list_report::{
    BuddyFailure, BuddyMismatch, BuddySummary, HeadProblem, ListProblem, ZoneSummary,
};
use super::pages::{PageCheck, ZoneCheck};
use super::pool::PoolCheck;
use memmap::page::PageWords;

/// Check the free lists against the struct pages and `pages` (the merged
/// [`verify_pages`] result over all of `layout.present_section_ranges()`),
/// and the zones' totals against memblock. `memmap` must be the allocator's.
/// Equivalent to [`verify_buddy_with_pool`] with an empty pool.
///
/// [`verify_pages`]: crate::verify::verify_pages
pub fn verify_buddy<B: MemmapBacking>(
    buddy: &BuddyAllocator<'_, B>,
    memmap: &Memmap<B>,
    layout: &ZoneLayout,
    mb: &Memblock,
    pages: &PageCheck,
) -> Result<BuddySummary, BuddyFailure> {
    verify_buddy_with_pool(buddy, memmap, layout, mb, pages, &PoolCheck::default())
}

/// [`verify_buddy`] when part of the memory is still in an untouched pool:
/// `pages` covers [`PoolCheck::scan_ranges`] and the pool makes up the rest.
/// Per zone: initialised + untouched = present, scanned reserved + pool
/// reserved = memblock's, free = initialised − scanned reserved; no listed
/// block lies in the pool, and the claims add up.
pub fn verify_buddy_with_pool<B: MemmapBacking>(
    buddy: &BuddyAllocator<'_, B>,
    memmap: &Memmap<B>,
    layout: &ZoneLayout,
    mb: &Memblock,
    pages: &PageCheck,
    pool: &PoolCheck,
) -> Result<BuddySummary, BuddyFailure> {
    let mut fail = BuddyFailure {
        summary: BuddySummary {
            zones: Vec::new(),
            pages_checked: pages.pages_checked,
            listed_blocks: 0,
        },
        mismatches: Vec::new(),
        nr_mismatches: 0,
    };
    if pages.nr_mismatches > 0 {
        fail.record(BuddyMismatch::PageScan {
            nr_mismatches: pages.nr_mismatches,
        });
    }
    let present_section_pages: u64 = layout
        .present_section_ranges()
        .iter()
        .map(|r| r.nr_pages())
        .sum();
    if pages.pages_checked + pool.pages() != present_section_pages {
        fail.record(BuddyMismatch::ScanIncomplete {
            checked: pages.pages_checked,
            expected: present_section_pages - pool.pages(),
        });
    }
    for m in &pool.problems {
        fail.record(*m);
    }

    let listed = walk_free_lists(buddy, memmap, pool, &mut fail);
    fail.summary.listed_blocks = listed.iter().flatten().sum();

    // Every (nid, zone) that the layout, the scan or the lists know.
    let nr_slots = listed.len().max(pages.zones.len()).max(
        layout
            .zones()
            .iter()
            .map(|z| slot(z.nid, z.zone) + 1)
            .max()
            .unwrap_or(0),
    );
    for s in 0..nr_slots {
        let scan = pages
            .zones
            .get(s)
            .copied()
            .unwrap_or_else(|| ZoneCheck::empty(s));
        let lists = listed.get(s).copied().unwrap_or([0; NR_ORDERS]);
        check_zone(s, &scan, lists, buddy, layout, mb, pool, &mut fail);
    }
    if fail.nr_mismatches == 0 {
        Ok(fail.summary)
    } else {
        Err(fail)
    }
}

/// Walk every free list once, counting blocks per (node, zone) slot and
/// order and recording each listed head that is wrong in `fail`, without
/// reading struct pages that lie in the pool and without following links
/// out of a head that is not a proper one.
fn walk_free_lists<B: MemmapBacking>(
    buddy: &BuddyAllocator<'_, B>,
    memmap: &Memmap<B>,
    pool: &PoolCheck,
    fail: &mut BuddyFailure,
) -> Vec<[u64; NR_ORDERS]> {
    let mut listed = alloc::vec![[0; NR_ORDERS]; buddy.nr_slots()];
    for (s, listed) in listed.iter_mut().enumerate() {
        let (nid, zone) = slot_key(s);
        // Bitmaps keep no links in the pages: nothing to check them against.
        let linked = buddy.store() == BuddyStore::Lists;
        for order in 0..=MAX_ORDER {
            let mut expected_prev = PFN_NONE;
            let end = buddy.walk_free_list(nid, zone, order, |pfn| {
                listed[order as usize] += 1;
                let prev = linked.then_some(expected_prev);
                let problem = listed_head_problem(memmap, pool, nid, zone, pfn, order, prev);
                expected_prev = pfn;
                let ok = problem.is_none();
                if let Some(m) = problem {
                    fail.record(m);
                }
                ok
            });
            let link = match end {
                ListEnd::Complete | ListEnd::Stopped { .. } => None,
                ListEnd::BadLink { from, to } => Some(ListProblem::LeavesZone { from, to }),
                ListEnd::TooLong { after } => Some(ListProblem::TooLong { after }),
                ListEnd::TooShort { walked } => Some(ListProblem::TooShort { walked }),
            };
            if let Some(problem) = link {
                fail.record(BuddyMismatch::List {
                    nid,
                    zone,
                    order,
                    problem,
                });
            }
        }
    }
    listed
}

/// What is wrong with listed block `pfn`, if anything: it lies in the pool
/// (its struct page is then not read), has no backing, or is not a proper
/// head of a free block of its list.
fn listed_head_problem<B: MemmapBacking>(
    memmap: &Memmap<B>,
    pool: &PoolCheck,
    nid: NodeId,
    zone: ZoneType,
    pfn: Pfn,
    order: u32,
    expected_prev: Option<Pfn>,
) -> Option<BuddyMismatch> {
    if pool.contains(pfn) {
        return Some(BuddyMismatch::PoolOverlap {
            nid,
            zone,
            pfn,
            order,
        });
    }
    let (problem, found) = match memmap.page(pfn) {
        None => (Some(HeadProblem::Unbacked), PageWords::default()),
        Some(p) => (
            head_problem(p, pfn, nid, zone, order, expected_prev),
            p.words(),
        ),
    };
    problem.map(|problem| BuddyMismatch::ListedHead {
        nid,
        zone,
        pfn,
        order,
        problem,
        found,
    })
}

/// What is wrong with the struct page of a listed block head, if anything.
fn head_problem<P: PageLayout>(
    p: &P,
    pfn: Pfn,
    nid: NodeId,
    zone: ZoneType,
    order: u32,
    expected_prev: Option<Pfn>,
) -> Option<HeadProblem> {
    if !p.is_buddy() {
        Some(HeadProblem::NotBuddy)
    } else if p.buddy_order() != order {
        Some(HeadProblem::WrongOrder)
    } else if pfn & ((1 << order) - 1) != 0 {
        Some(HeadProblem::Misaligned)
    } else if !p.links_match(pfn, zone, nid) {
        Some(HeadProblem::WrongLinks)
    } else if p.refcount() != 0 {
        Some(HeadProblem::Refcount)
    } else {
        expected_prev
            .filter(|&want| p.list_link().is_some_and(|l| l.prev != want))
            .map(|expected_prev| HeadProblem::BrokenList { expected_prev })
    }
}

/// Check one (node, zone) slot: the scan, the lists and the counters agree
/// with each other, and with the layout, memblock and the pool.
#[allow(clippy::too_many_arguments)]
fn check_zone<B: MemmapBacking>(
    s: usize,
    scan: &ZoneCheck,
    lists: [u64; NR_ORDERS],
    buddy: &BuddyAllocator<'_, B>,
    layout: &ZoneLayout,
    mb: &Memblock,
    pool: &PoolCheck,
    fail: &mut BuddyFailure,
) {
    let (nid, zone) = slot_key(s);
    let counter = buddy.nr_free_pages(nid, zone);
    let Some(info) = layout.zone(nid, zone) else {
        if let Some(m) = unknown_zone(nid, zone, scan, counter, &lists) {
            fail.record(m);
        }
        return;
    };
    let node_mem = mb.mem_pfn_ranges(Some(nid)).map(|(r, _)| r);
    let expected_reserved: u64 = intersect_sorted(mb.reserved_mem_ranges(info.span), node_mem)
        .map(|r| r.nr_pages())
        .sum();
    let (untouched, untouched_reserved) = pool.zone_pages(nid, zone);
    // The huge pages taken from the allocator are neither reserved nor
    // free: the scan counted those that are the compound pages they must be.
    let expected_free = (info.present_pages + untouched_reserved)
        .saturating_sub(expected_reserved + untouched + scan.huge);
    let zs = ZoneSummary {
        nid,
        zone,
        present: info.present_pages,
        initialised: scan.initialised,
        expected_reserved,
        reserved: scan.reserved,
        expected_free,
        free: scan.free,
        buddy_free: counter,
        listed_blocks: lists,
        untouched,
        untouched_reserved,
        huge: scan.huge,
    };
    record_zone_mismatches(&zs, &scan.heads, buddy, fail);
    if is_reported(info.present_pages, scan, counter) {
        fail.summary.zones.push(zs);
    }
}

/// Pages in blocks of `lists` (blocks per order).
fn listed_pages(lists: &[u64; NR_ORDERS]) -> u64 {
    lists.iter().enumerate().map(|(o, &n)| n << o).sum()
}

/// The mismatch of a (node, zone) the layout does not have, if anything
/// counted pages for it: the scan (memory or holes), the allocator's
/// counter or its lists.
fn unknown_zone(
    nid: NodeId,
    zone: ZoneType,
    scan: &ZoneCheck,
    counter: u64,
    lists: &[u64; NR_ORDERS],
) -> Option<BuddyMismatch> {
    let pages = scan.memory_pages + scan.holes + counter + listed_pages(lists);
    (pages > 0).then_some(BuddyMismatch::UnknownZone { nid, zone, pages })
}

/// Does a zone of the layout get a summary line? When it has present pages,
/// or the scan or the allocator found any.
fn is_reported(present_pages: u64, scan: &ZoneCheck, counter: u64) -> bool {
    present_pages > 0 || !scan.is_empty() || counter > 0
}

/// The comparisons behind [`check_zone`]: per order, the lists, the scan's
/// block heads and the allocator's counters; then the page totals.
fn record_zone_mismatches<B: MemmapBacking>(
    zs: &ZoneSummary,
    scanned_heads: &[u64; NR_ORDERS],
    buddy: &BuddyAllocator<'_, B>,
    fail: &mut BuddyFailure,
) {
    let (nid, zone) = (zs.nid, zs.zone);
    let lists = zs.listed_blocks;
    for order in 0..=MAX_ORDER {
        let o = order as usize;
        let c = buddy.nr_free_blocks(nid, zone, order);
        if lists[o] != scanned_heads[o] || lists[o] != c {
            fail.record(BuddyMismatch::BlockCount {
                nid,
                zone,
                order,
                listed: lists[o],
                scanned: scanned_heads[o],
                counter: c,
            });
        }
    }
    let listed_pages = listed_pages(&lists);
    if zs.buddy_free != zs.free || zs.buddy_free != listed_pages {
        fail.record(BuddyMismatch::FreePages {
            nid,
            zone,
            counter: zs.buddy_free,
            listed: listed_pages,
            scanned: zs.free,
        });
    }
    // The page totals: initialised (or untouched) = present, reserved as
    // memblock says, free as expected.
    let (present, initialised) = (zs.present, zs.initialised);
    let (expected, reserved) = (zs.expected_reserved, zs.reserved);
    let totals = [
        (initialised + zs.untouched != present).then_some(BuddyMismatch::Initialised {
            nid,
            zone,
            present,
            initialised,
        }),
        (reserved + zs.untouched_reserved != expected).then_some(BuddyMismatch::Reserved {
            nid,
            zone,
            expected,
            found: reserved,
        }),
        (zs.free != zs.expected_free).then_some(BuddyMismatch::Free {
            nid,
            zone,
            expected: zs.expected_free,
            found: zs.free,
        }),
    ];
    for m in totals.into_iter().flatten() {
        fail.record(m);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(memory_pages: u64, holes: u64) -> ZoneCheck {
        ZoneCheck {
            memory_pages,
            holes,
            ..ZoneCheck::empty(slot(1, ZoneType::Normal))
        }
    }

    /// Every source of pages counts, each once: 1 memory + 2 hole pages, 4
    /// on the counter, and listed blocks of 8 order-0 and 1 order-4 page
    /// (16 pages) sum to 31; nothing at all is no mismatch.
    #[test]
    fn an_unknown_zone_reports_every_page_counted_for_it() {
        let mut lists = [0; NR_ORDERS];
        lists[0] = 8;
        lists[4] = 1;
        assert_eq!(
            unknown_zone(1, ZoneType::Normal, &scan(1, 2), 4, &lists),
            Some(BuddyMismatch::UnknownZone {
                nid: 1,
                zone: ZoneType::Normal,
                pages: 1 + 2 + 4 + 8 + 16
            })
        );
        for (s, counter, lists) in [
            (scan(1, 0), 0, [0; NR_ORDERS]),
            (scan(0, 1), 0, [0; NR_ORDERS]),
            (scan(0, 0), 1, [0; NR_ORDERS]),
        ] {
            assert!(unknown_zone(1, ZoneType::Normal, &s, counter, &lists).is_some());
        }
        let mut one_block = [0; NR_ORDERS];
        one_block[MAX_ORDER as usize] = 1;
        assert_eq!(
            unknown_zone(1, ZoneType::Normal, &scan(0, 0), 0, &one_block),
            Some(BuddyMismatch::UnknownZone {
                nid: 1,
                zone: ZoneType::Normal,
                pages: 1 << MAX_ORDER
            })
        );
        assert_eq!(
            unknown_zone(1, ZoneType::Normal, &scan(0, 0), 0, &[0; NR_ORDERS]),
            None
        );
    }

    /// A zone gets a summary line if any one of present pages, scanned
    /// pages (memory or holes) or free pages on the counter is non-zero.
    #[test]
    fn a_zone_is_reported_when_anything_counted_it() {
        assert!(!is_reported(0, &scan(0, 0), 0));
        assert!(is_reported(3, &scan(0, 0), 0));
        assert!(is_reported(0, &scan(2, 0), 0));
        assert!(is_reported(0, &scan(0, 2), 0));
        assert!(is_reported(0, &scan(0, 0), 5));
    }
}
