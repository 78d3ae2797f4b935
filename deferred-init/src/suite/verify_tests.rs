//! Tests of `verify`: a clean two-node boot passes, deliberate corruptions
//! are found, split scans merge to the single scan.

use std::string::ToString;
use std::vec::Vec;

use memboot_contract::option_values::BuddyStore;
use memmap::firmware::{FirmwareEntry, NodeAffinity, RegionKind::*};
use memmap::init::{init_memmap, Strategy};
use memmap::memblock::{Memblock, MemblockConfig};
use memmap::page::{PageLayout, PageWords};
use memmap::pageblock::PageblockMaps;
use memmap::store::Memmap;
use memmap::zones::ZoneLayout;
use memmap::{DeferredRange, NodeId, Pfn, PfnRange, ZoneType, MAX_ORDER, PAGES_PER_SECTION};

use super::tests::{cpus, dr, memmap_for, new_di, TestBacking, TestPage, TEST_CPUS};
use crate::std_seams::{StdClock, ThreadExecutor};
use crate::test_damage::TestDamage;
use crate::*;
use crate::hugetlb_pool::HugeCheck;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const S: u64 = PAGES_PER_SECTION;

/// Node 0: DMA + DMA32 up to 300 MiB (a firmware hole below 1 MiB, holes
/// 300..384 MiB in a present section); node 1: Normal 4 GiB..4.5 GiB with a
/// 10 MiB hole. Reserved: page 0, an unaligned range in node 0's deferred
/// memory and one in node 1's.
fn memblock() -> Memblock {
    memblock_with(300 * MIB, 1)
}

/// [`memblock`] with node 0's memory ending at `node0_end` (bytes) and the
/// memory of SRAT's second node numbered `node1`.
fn memblock_with(node0_end: u64, node1: NodeId) -> Memblock {
    let (mut mb, mut report) = Memblock::from_firmware(
        [
            FirmwareEntry::new(0, 0x9fc00, Usable),
            FirmwareEntry::new(0x9fc00, 0x60400, Reserved),
            FirmwareEntry::new(MIB, node0_end - MIB, Usable),
            FirmwareEntry::new(4 * GIB, 200 * MIB, Usable),
            FirmwareEntry::new(4 * GIB + 210 * MIB, 302 * MIB, Usable),
        ],
        MemblockConfig::default(),
    )
    .unwrap();
    mb.reserve(0, 0x1000).unwrap();
    mb.reserve(20 * MIB + 0x3000, 0x5000).unwrap();
    mb.reserve(270 * MIB + 0x1000, 0x22000).unwrap();
    mb.reserve(4 * GIB + 300 * MIB + 0x3000, MIB + 0x2000)
        .unwrap();
    mb.apply_affinity(
        [
            NodeAffinity::new(0, 4 * GIB, 0),
            NodeAffinity::new(4 * GIB, 4 * GIB, node1),
        ],
        &mut report,
    )
    .unwrap();
    mb
}

struct World<'a> {
    mb: &'a Memblock,
    layout: &'a ZoneLayout,
    mm: &'a Memmap<TestBacking>,
    di: DeferredInit<'a, TestBacking>,
}

/// Boot the map: memmap init (Deferred), hand the eager free pages to the
/// buddy, run deferred init with threads, then call `f`.
fn with_world<R>(f: impl FnOnce(&World<'_>) -> R) -> R {
    with_world_setup(|_| {}, true, f)
}

/// [`with_world`] with `before_run` called on the deferred-init state before
/// the workers start, and the workers run only if `run_workers` (otherwise
/// the deferred memory stays an untouched pool, as `memmap=ondemand`).
fn with_world_setup<R>(
    before_run: impl FnOnce(&mut DeferredInit<'_, TestBacking>),
    run_workers: bool,
    f: impl FnOnce(&World<'_>) -> R,
) -> R {
    with_world_on(memblock(), before_run, run_workers, f)
}

/// [`with_world_setup`] on the memory of `mb` (nodes 0 and 1).
fn with_world_on<R>(
    mb: Memblock,
    before_run: impl FnOnce(&mut DeferredInit<'_, TestBacking>),
    run_workers: bool,
    f: impl FnOnce(&World<'_>) -> R,
) -> R {
    let layout = ZoneLayout::new(&mb);
    let mut mm = Memmap::new(TestBacking::for_ranges(layout.present_section_ranges()));
    let pageblocks = PageblockMaps::new(&layout);
    let out = init_memmap(Strategy::Deferred, &mut mm, &mb, &layout, &pageblocks).unwrap();
    let reserved: Vec<PfnRange> = mb.reserved_pfn_ranges().collect();
    let node_cpus = [
        NodeCpus {
            nid: 0,
            cpus: vec![0, 1],
        },
        NodeCpus {
            nid: 1,
            cpus: vec![2],
        },
    ];
    let plan =
        DeferredPlan::new(&out.deferred, &reserved, &node_cpus, PlanOptions::default()).unwrap();
    let mut di = new_di(&mm, plan, InitMode::InitAndFree, &out.eager).unwrap();
    // SAFETY: the eager pages were initialised by init_memmap, are on no
    // list, and nothing else touches them.
    unsafe { crate::handoff::free_eager_pages(di.buddy(), &mb, &out.eager) }.unwrap();
    before_run(&mut di);
    if run_workers {
        di.run(&ThreadExecutor::new(TEST_CPUS), &StdClock::new())
            .unwrap();
        assert!(di.is_done());
    }
    let w = World {
        mb: &mb,
        layout: &layout,
        mm: &mm,
        di,
    };
    f(&w)
}

impl World<'_> {
    fn scan(&self, range: PfnRange) -> PageCheck {
        verify_pages(self.mm, self.mb, self.layout, HugeCheck::NONE, range)
    }
    /// Scan all present ranges, one section-aligned slice per thread.
    fn scan_all_parallel(&self) -> PageCheck {
        let slices: Vec<PfnRange> = self
            .layout
            .present_section_ranges()
            .iter()
            .flat_map(|r| r.section_pieces())
            .collect();
        let parts: Vec<PageCheck> = std::thread::scope(|s| {
            let hs: Vec<_> = slices
                .iter()
                .map(|&r| s.spawn(move || self.scan(r)))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut all = PageCheck::new(self.layout);
        // Merge in reverse to show order does not matter.
        for p in parts.into_iter().rev() {
            all.merge(p);
        }
        all
    }
    fn scan_all(&self) -> PageCheck {
        let mut all = PageCheck::new(self.layout);
        for r in self.layout.present_section_ranges() {
            all.merge(self.scan(*r));
        }
        all
    }
    fn verify(&self, pages: &PageCheck) -> Result<BuddySummary, BuddyFailure> {
        verify_buddy(self.di.buddy(), self.mm, self.layout, self.mb, pages)
    }
    /// Everything the kernel's verification stage checks, pool and claims
    /// included: the scan over the non-pool memory, then the lists.
    fn verify_with_pool(&self) -> Result<BuddySummary, BuddyFailure> {
        let pool = PoolCheck::new(&self.di);
        let mut pages = PageCheck::new(self.layout);
        for r in pool.scan_ranges(self.layout) {
            pages.merge(verify_scan_range(self.mm, self.mb, self.layout, HugeCheck::NONE, r));
        }
        verify_buddy_with_pool(
            self.di.buddy(),
            self.mm,
            self.layout,
            self.mb,
            &pages,
            &pool,
        )
    }
    /// Corrupt one struct page.
    fn corrupt(&self, pfn: Pfn, f: impl FnOnce(&mut TestPage)) {
        // SAFETY: workers have returned and no allocator call is running; no
        // other reference to this struct page exists during the write.
        let pages = unsafe { self.mm.pages_mut_unchecked(PfnRange::new(pfn, pfn + 1)) };
        f(&mut pages.unwrap()[0]);
    }
    /// Listed free blocks `(nid, zone, pfn, order)`.
    fn blocks(&self) -> Vec<(NodeId, ZoneType, Pfn, u32)> {
        let mut v = Vec::new();
        self.di
            .buddy()
            .for_each_free_block(|n, z, p, o| v.push((n, z, p, o)));
        v
    }
}

const NODE1_RSV: Pfn = (4 * GIB + 300 * MIB + 0x3000) >> 12;
const HOLE: Pfn = ((300 * MIB) >> 12) + 7;

#[test]
fn clean_boot_verifies_and_selftest_passes() {
    with_world(|w| {
        let pages = w.scan_all_parallel();
        assert!(pages.is_ok(), "{pages}");
        assert_eq!(pages, w.scan_all(), "parallel merge = serial merge");
        let present_section_pages: u64 = w
            .layout
            .present_section_ranges()
            .iter()
            .map(|r| r.nr_pages())
            .sum();
        assert_eq!(pages.pages_checked, present_section_pages);
        let summary = w.verify(&pages).unwrap_or_else(|e| panic!("{e}"));
        let text = summary.to_string();
        // Node 1 Normal: 502 MiB present, 1 MiB + 8 KiB reserved.
        let n1 = w.layout.zone(1, ZoneType::Normal).unwrap();
        let rsv1 = (MIB + 0x2000) >> 12;
        assert_eq!(n1.present_pages, (502 * MIB) >> 12);
        let line = format!(
            "verify: node 1 zone Normal: {} present, {} initialised, {rsv1} reserved, {} free (expected {})",
            n1.present_pages,
            n1.present_pages,
            n1.present_pages - rsv1,
            n1.present_pages - rsv1
        );
        assert!(text.contains(&line), "{text}");
        assert!(text.contains("verify: node 0 zone DMA: "), "{text}");
        assert!(text.contains("verify: node 0 zone DMA32: "), "{text}");
        for z in &summary.zones {
            assert_eq!(z.initialised, z.present);
            assert_eq!(z.free, z.expected_free);
            assert_eq!(z.buddy_free, z.free);
        }
        assert_eq!(
            pages.zone(0, ZoneType::Dma).unwrap().holes,
            0x100 - 0x9f,
            "firmware hole below 1 MiB"
        );
        // The gap after node 0's memory belongs to the piece after it
        // (node 1 Normal), as in Linux's memmap_init().
        assert_eq!(pages.zone(0, ZoneType::Dma32).unwrap().holes, 0);
        assert_eq!(
            pages.zone(1, ZoneType::Normal).unwrap().holes,
            ((384 - 300) * MIB + 10 * MIB) >> 12
        );
        for nid in [0, 1] {
            let rep = alloc_free_selftest(w.di.buddy(), &w.di, w.mm, nid)
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(rep.zone, [ZoneType::Dma32, ZoneType::Normal][nid as usize]);
            assert_eq!(rep.blocks.len(), 3);
            assert!(rep.to_string().starts_with("verify: node "), "{rep}");
        }
        // Everything was freed back: still clean.
        let again = w.scan_all();
        assert!(again.is_ok(), "{again}");
        w.verify(&again).unwrap_or_else(|e| panic!("{e}"));
    });
}

#[test]
fn merged_splits_equal_single_scan() {
    with_world(|w| {
        let ranges = w.layout.present_section_ranges().to_vec();
        // Corrupt a few pages so the mismatch lists take part too.
        let (_, _, head, order) = *w
            .blocks()
            .iter()
            .find(|b| b.0 == 1 && b.3 == MAX_ORDER)
            .unwrap();
        assert_eq!(order, MAX_ORDER);
        w.corrupt(head + 100, |p| p.set_refcount_raw(1));
        w.corrupt(head + 700, |p| p.set_refcount_raw(1));
        w.corrupt(HOLE, TestPage::clear_reserved);
        let whole: Vec<PageCheck> = ranges.iter().map(|r| w.scan(*r)).collect();
        for (r, single) in ranges.iter().zip(&whole) {
            // Cut points: section aligned, block aligned, and mid-block
            // (inside the corrupted block, between its two bad pages).
            for cut in [
                r.start + S,
                r.start + 3 * 1024,
                r.start + 12345,
                head + 500,
                r.end - 1,
            ] {
                if !(r.start < cut && cut < r.end) {
                    continue;
                }
                let mut a = w.scan(PfnRange::new(r.start, cut));
                let b = w.scan(PfnRange::new(cut, r.end));
                a.merge(b);
                assert_eq!(&a, single, "range {r:?} cut at {cut:#x}");
            }
            // Many small unaligned slices, merged in reverse.
            let mut parts = Vec::new();
            let mut s = r.start;
            while s < r.end {
                let e = (s + 7777).min(r.end);
                parts.push(w.scan(PfnRange::new(s, e)));
                s = e;
            }
            let mut m = PageCheck::new(w.layout);
            for p in parts.into_iter().rev() {
                m.merge(p);
            }
            assert_eq!(&m, single, "range {r:?} in 7777-page slices");
        }
        let mut all = PageCheck::new(w.layout);
        for p in whole {
            all.merge(p);
        }
        assert_eq!(all.nr_mismatches, 3);
        let pfns: Vec<Pfn> = all.mismatches.iter().map(|m| m.pfn).collect();
        assert_eq!(pfns, vec![HOLE, head + 100, head + 700]);
    });
}

/// Apply `corrupt`, then expect the page scan's first mismatch at `pfn` with
/// `problem`, and `verify_buddy` to fail; returns the failure.
fn expect_detected(
    pick: impl FnOnce(&World<'_>) -> Pfn,
    corrupt: impl FnOnce(&mut TestPage),
    pfn_off: u64,
    problem: Problem,
) -> (PageMismatch, BuddyFailure) {
    with_world(|w| {
        let pfn = pick(w);
        w.corrupt(pfn, corrupt);
        let pages = w.scan_all_parallel();
        assert!(!pages.is_ok());
        let m = pages.mismatches[0];
        assert_eq!(
            (m.pfn, m.problem),
            (pfn + pfn_off, problem),
            "first mismatch: {m}\n{pages}"
        );
        assert!(m.to_string().starts_with("verify: pfn 0x"), "{m}");
        (m, w.verify(&pages).expect_err("verify_buddy must fail"))
    })
}

fn a_max_order_head(w: &World<'_>, nid: NodeId) -> Pfn {
    w.blocks()
        .iter()
        .find(|b| b.0 == nid && b.3 == MAX_ORDER)
        .unwrap()
        .2
}

/// `check_all` (what the kernel's verify stage calls) runs every part: a
/// clean world passes with as many pages checked as the serial scan and a
/// self-test per node; a damaged page fails at the scan, before the lists.
#[test]
fn check_all_runs_every_part_and_stops_at_the_first_failure() {
    with_world(|w| {
        let executor = ThreadExecutor::new(TEST_CPUS);
        let verified = verify::check_all(&executor, w.mm, w.mb, w.layout, w.di.buddy(), &w.di, HugeCheck::NONE)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(verified.pages_checked, w.scan_all().pages_checked);
        assert_eq!(verified.untouched_pages, 0, "the workers ran: no pool");
        assert_eq!(verified.buddy, w.verify(&w.scan_all()).unwrap());
        assert_eq!(verified.selftests.len(), 2, "a self-test per node");
        assert!(verified
            .selftests
            .iter()
            .all(|t| matches!(t, verify::NodeSelftest::Ran(_))));
        w.corrupt(NODE1_RSV + 3, |p| p.break_links());
        match verify::check_all(&executor, w.mm, w.mb, w.layout, w.di.buddy(), &w.di, HugeCheck::NONE) {
            Err(verify::CheckFailure::Pages(pages)) => {
                assert_eq!(pages.mismatches[0].pfn, NODE1_RSV + 3, "{pages}");
            }
            other => panic!("expected a page failure, got {other:?}"),
        }
    });
}

#[test]
fn wrong_node_bits_detected() {
    let (_, f) = expect_detected(
        |_| NODE1_RSV + 3,
        |p| p.break_links(),
        0,
        Problem::WrongLinks,
    );
    assert!(f
        .mismatches
        .iter()
        .any(|m| matches!(m, BuddyMismatch::Initialised { nid: 1, .. })));
    // Free page with wrong node bits too.
    let (_, f) = expect_detected(
        |w| a_max_order_head(w, 1) + 9,
        |p| p.break_links(),
        0,
        Problem::WrongLinks,
    );
    assert!(f.to_string().contains("initialised"), "{f}");
}

#[test]
fn reserved_page_without_pg_reserved_detected() {
    let (_, f) = expect_detected(
        |_| NODE1_RSV,
        TestPage::clear_reserved,
        0,
        Problem::ReservedClear,
    );
    assert!(f
        .mismatches
        .iter()
        .any(|m| matches!(m, BuddyMismatch::Reserved { nid: 1, .. })));
    // An eagerly initialised reserved page (page 0).
    expect_detected(|_| 0, TestPage::clear_reserved, 0, Problem::ReservedClear);
}

#[test]
fn free_page_with_refcount_one_detected() {
    let (m, f) = expect_detected(
        |w| a_max_order_head(w, 0) + 5,
        |p| p.set_refcount_raw(1),
        0,
        Problem::Refcount,
    );
    let text = m.to_string();
    assert!(text.contains("expected free tail of buddy block"), "{text}");
    assert!(
        text.contains("found refcount 1 mapcount -1 flags 0x"),
        "{text}"
    );
    assert!(f
        .mismatches
        .iter()
        .any(|m| matches!(m, BuddyMismatch::FreePages { nid: 0, .. })));
}

#[test]
fn buddy_head_with_wrong_order_detected() {
    // Order 10 → 3: the scan sees an order-3 block, then a free page at +8
    // not in any block; the list walk sees the wrong order.
    let (_, f) = expect_detected(
        |w| a_max_order_head(w, 1),
        |p| p.set_buddy(3),
        8,
        Problem::NotInBlock,
    );
    assert!(f.mismatches.iter().any(|m| matches!(
        m,
        BuddyMismatch::ListedHead {
            problem: HeadProblem::WrongOrder,
            ..
        }
    )));
    // An order above MAX_ORDER.
    expect_detected(
        |w| a_max_order_head(w, 1),
        |p| p.set_buddy(11),
        0,
        Problem::BadOrder,
    );
}

#[test]
fn cleared_page_buddy_detected() {
    let (_, f) = expect_detected(
        |w| a_max_order_head(w, 0),
        TestPage::clear_buddy,
        0,
        Problem::NotInBlock,
    );
    assert!(f.mismatches.iter().any(|m| matches!(
        m,
        BuddyMismatch::ListedHead {
            problem: HeadProblem::NotBuddy,
            ..
        }
    )));
    assert!(f.mismatches.iter().any(|m| matches!(
        m,
        BuddyMismatch::BlockCount {
            nid: 0,
            order: 10,
            ..
        }
    )));
    // PageBuddy on a tail.
    expect_detected(
        |w| a_max_order_head(w, 0) + 64,
        |p| p.set_buddy(6),
        0,
        Problem::UnexpectedBuddy,
    );
}

#[test]
fn hole_page_not_reserved_detected() {
    let (_, f) = expect_detected(
        |_| HOLE,
        TestPage::clear_reserved,
        0,
        Problem::ReservedClear,
    );
    assert!(
        f.mismatches[0].to_string().contains("page scan found 1"),
        "{f}"
    );
    with_world(|w| {
        w.corrupt(HOLE, TestPage::clear_reserved);
        let pages = w.scan(PfnRange::new(2 * S, 3 * S));
        let m = pages.mismatches[0];
        assert_eq!(
            m.expected,
            Expected::Hole {
                nid: 1,
                zone: ZoneType::Normal
            }
        );
        assert!(
            m.to_string().starts_with(&format!(
                "verify: pfn {HOLE:#x}: expected hole page of node 1 zone Normal"
            )),
            "{m}"
        );
    });
}

#[test]
fn incomplete_scan_and_mismatch_cap() {
    with_world(|w| {
        let half = w.scan(w.layout.present_section_ranges()[0]);
        let f = w.verify(&half).unwrap_err();
        assert!(matches!(
            f.mismatches[0],
            BuddyMismatch::ScanIncomplete { .. }
        ));
        // 40 bad pages: 16 kept, all counted, lowest PFNs first.
        let head = a_max_order_head(w, 1);
        for i in 0..40 {
            w.corrupt(head + 1 + i, |p| p.set_refcount_raw(2));
        }
        let pages = w.scan_all_parallel();
        assert_eq!(pages.nr_mismatches, 40);
        assert_eq!(pages.mismatches.len(), MAX_RECORDED_MISMATCHES);
        assert!(pages
            .mismatches
            .iter()
            .enumerate()
            .all(|(i, m)| m.pfn == head + 1 + i as u64));
        assert!(pages
            .to_string()
            .ends_with("40 mismatches (first 16 shown)"));
    });
}

// ------------------------------------------------------------ test faults

/// One window initialised twice through the init path writes the same
/// bytes, so the page scan passes; the per-chunk init counter must not.
#[test]
fn double_init_is_caught_by_the_init_counter() {
    static DOUBLE: faults::DoubleInit = faults::DoubleInit::new(true);
    with_world_setup(
        |di| di.set_claim_hooks(&DOUBLE),
        true,
        |w| {
            let doubled_pfn = DOUBLE.window().expect("a window was processed");
            let pages = w.scan_all_parallel();
            assert!(
                pages.is_ok(),
                "identical bytes: the scan cannot see it\n{pages}"
            );
            let doubled: Vec<ChunkInits> =
                w.di.chunk_inits()
                    .filter(|c| c.initialised != c.claimed)
                    .collect();
            assert_eq!(doubled.len(), 1, "{doubled:?}");
            let c = doubled[0];
            assert_eq!(c.initialised, c.claimed + 1);
            assert!(c.windows.contains(doubled_pfn), "{c:?}");
            let f = w
                .verify_with_pool()
                .expect_err("verification must catch it");
            assert!(f.mismatches.contains(&BuddyMismatch::WindowInits {
                nid: c.nid,
                windows: c.windows,
                claimed: c.claimed,
                initialised: c.initialised,
            }));
            let text = f.to_string();
            let want = format!(
                "verify: node {} chunk {:#x}..{:#x}: ",
                c.nid, c.windows.start, c.windows.end
            );
            assert!(
                text.contains(&want) && text.contains("initialised twice"),
                "{text}"
            );
        },
    );
    // Not armed: every chunk's count equals its claims.
    with_world(|w| {
        assert!(w
            .di
            .chunk_inits()
            .all(|c| c.initialised == c.claimed && c.claimed == c.nr_windows));
        w.verify_with_pool().unwrap_or_else(|e| panic!("{e}"));
    });
}

/// A free-list link to a page that is not a free block head (a tail of the
/// same block): the walk names that page and does not follow its links.
#[test]
fn list_link_to_a_non_head_is_caught() {
    with_world(|w| {
        // SAFETY: workers have returned; nothing else uses the allocator.
        let (head, target) = unsafe { faults::corrupt_list_link(w.di.buddy(), w.mm) }.unwrap();
        assert_eq!(target, head + 1);
        let f = w
            .verify_with_pool()
            .expect_err("verification must catch it");
        assert!(
            f.mismatches.iter().any(|m| matches!(
                m,
                BuddyMismatch::ListedHead {
                    pfn,
                    problem: HeadProblem::NotBuddy,
                    ..
                } if *pfn == target
            )),
            "{f}"
        );
        assert!(
            f.to_string()
                .contains(&format!("verify: pfn {target:#x}: ")),
            "{f}"
        );
    });
}

/// A link leaving the zone's memory (here: into the other node) ends the
/// walk with a list problem naming both PFNs, without reading the target.
#[test]
fn list_link_out_of_the_zone_is_caught() {
    if super::tests::test_store() != BuddyStore::Lists {
        return; // a list-link fault: the bitmap store's own is tested in buddy's tests
    }
    with_world(|w| {
        let blocks = w.blocks();
        let from = blocks.iter().find(|b| b.0 == 0).unwrap().2;
        let to = blocks.iter().find(|b| b.0 == 1).unwrap().2;
        w.corrupt(from, |p| p.set_next_link(to));
        let f = w
            .verify_with_pool()
            .expect_err("verification must catch it");
        let text = f.to_string();
        assert!(
            f.mismatches.iter().any(|m| matches!(
                m,
                BuddyMismatch::List {
                    nid: 0,
                    problem: ListProblem::LeavesZone { from: a, to: b },
                    ..
                } if (*a, *b) == (from, to)
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!("pfn {from:#x}'s lru.next points at pfn {to:#x}")),
            "{text}"
        );
    });
}

/// A free block inside the untouched pool: the walk names it, and reads
/// nothing else of the pool.
#[test]
fn free_block_in_the_pool_is_caught() {
    with_world_setup(
        |_| {},
        false,
        |w| {
            w.verify_with_pool()
                .unwrap_or_else(|e| panic!("clean pool state: {e}"));
            // SAFETY: nothing runs: no workers were started, no allocation is made.
            let pfn = unsafe { faults::place_free_block_in_pool(&w.di, w.mm) }.unwrap();
            let f = w
                .verify_with_pool()
                .expect_err("verification must catch it");
            assert!(
                f.mismatches.iter().any(|m| matches!(
                    m,
                    BuddyMismatch::PoolOverlap { pfn: p, order: 0, .. } if *p == pfn
                )),
                "{f}"
            );
            assert!(
                f.to_string().contains(&format!(
                    "free order-0 block {pfn:#x} lies in untouched pool memory"
                )),
                "{f}"
            );
        },
    );
}

/// A page initialised by growth, corrupted after it was freed back: the
/// page scan (over initialised memory only) names it.
#[test]
fn corrupt_grown_page_is_caught() {
    with_world_setup(
        |_| {},
        false,
        |w| {
            // Node 1's eager section serves the first blocks; allocate until
            // one block needs a growth step.
            let mut held = Vec::new();
            let a = loop {
                let a =
                    w.di.allocator()
                        .alloc_pages_counted(1, ZoneType::Normal, MAX_ORDER)
                        .unwrap();
                held.push(a.pfn);
                if a.growth_steps > 0 {
                    break a;
                }
            };
            assert_eq!(a.growth_steps, 1, "one window grown");
            for pfn in held {
                w.di.allocator().free_pages(pfn, MAX_ORDER).unwrap();
            }
            let pfn = faults::free_page_in_claimed_windows(&w.di).unwrap();
            assert_eq!(
                pfn,
                a.pfn + (1 << MAX_ORDER) - 1,
                "the last page of the grown window"
            );
            w.verify_with_pool()
                .unwrap_or_else(|e| panic!("clean: {e}"));
            // SAFETY: nothing else runs.
            assert!(unsafe { faults::corrupt_page(w.mm, pfn) });
            let f = w
                .verify_with_pool()
                .expect_err("verification must catch it");
            assert!(
                f.mismatches
                    .iter()
                    .any(|m| matches!(m, BuddyMismatch::PageScan { .. })),
                "{f}"
            );
            let pool = PoolCheck::new(&w.di);
            let mut pages = PageCheck::new(w.layout);
            for r in pool.scan_ranges(w.layout) {
                pages.merge(verify_scan_range(w.mm, w.mb, w.layout, HugeCheck::NONE, r));
            }
            assert_eq!(pages.mismatches[0].pfn, pfn, "{pages}");
            // The 8-byte page's fault flips its type: a free page reads allocated.
            let problem = if TestPage::STORES_LINKS {
                Problem::WrongLinks
            } else {
                Problem::Refcount
            };
            assert_eq!(pages.mismatches[0].problem, problem);
        },
    );
}

/// A zone without a free block of some self-test order (an 8 MiB node has
/// no 4 MiB block) skips that order instead of failing verification; the
/// orders it has blocks for are still allocated and checked.
#[test]
fn selftest_skips_orders_the_zone_has_no_block_for() {
    with_world(|w| {
        let buddy = w.di.buddy();
        let mut held = Vec::new();
        while buddy.nr_free_blocks(1, ZoneType::Normal, MAX_ORDER) > 0 {
            held.push(buddy.alloc(1, ZoneType::Normal, MAX_ORDER).unwrap());
        }
        let rep =
            alloc_free_selftest(w.di.buddy(), &w.di, w.mm, 1).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(rep.skipped, [MAX_ORDER]);
        let orders: Vec<u32> = rep.blocks.iter().map(|b| b.1).collect();
        assert_eq!(orders, [0, 3]);
        assert!(
            rep.to_string()
                .contains("(orders [10] skipped: no free block that large)"),
            "{rep}"
        );
        for pfn in held {
            buddy.free(pfn, MAX_ORDER).unwrap();
        }
        let rep = alloc_free_selftest(w.di.buddy(), &w.di, w.mm, 1).unwrap();
        assert!(rep.skipped.is_empty(), "{rep}");
    });
}

// ------------------------------------------------------------ self-test

/// Node 0 whose only memory is the deferred (Normal) ranges `free`,
/// initialised and freed by its worker, so the free lists are exactly the
/// maximal aligned blocks of `free`; `corrupt` then damages struct pages
/// before `f` runs.
fn with_small_node<R>(
    free: &[PfnRange],
    corrupt: impl FnOnce(&mut dyn FnMut(Pfn, &dyn Fn(&mut TestPage))),
    f: impl FnOnce(&DeferredInit<'_, TestBacking>, &Memmap<TestBacking>) -> R,
) -> R {
    let ranges: Vec<DeferredRange> = free.iter().map(|r| dr(0, r.start, r.end)).collect();
    let mm = memmap_for(&ranges);
    let plan = DeferredPlan::new(&ranges, &[], &[cpus(0, &[0])], PlanOptions::default()).unwrap();
    let di = new_di(&mm, plan, InitMode::InitAndFree, &[]).unwrap();
    di.run(&ThreadExecutor::new(TEST_CPUS), &StdClock::new())
        .unwrap();
    corrupt(&mut |pfn, damage| {
        // SAFETY: the worker has returned and nothing else runs; no other
        // reference to this struct page exists during the write.
        let pages = unsafe { mm.pages_mut_unchecked(PfnRange::new(pfn, pfn + 1)) };
        damage(&mut pages.unwrap()[0]);
    });
    f(&di, &mm)
}

/// The self-test checks every page of each block it allocates. With one
/// free order-4 block B, it gets B for order 0 (splitting B, Linux
/// `expand`) and B + 8 for order 3 (the upper half of B's first 16 pages);
/// order 10 is skipped. A page damaged before the test is named with what
/// it should have been.
#[test]
fn selftest_names_a_bad_page_of_an_allocated_block() {
    let b = 33 * S;
    let free = [PfnRange::new(b, b + 16)];
    let selftest = |damaged: Pfn, damage: &dyn Fn(&mut TestPage)| {
        with_small_node(
            &free,
            |c| c(damaged, damage),
            |di, mm| alloc_free_selftest(di.buddy(), di, mm, 0),
        )
    };
    let clean = with_small_node(
        &free,
        |_| {},
        |di, mm| alloc_free_selftest(di.buddy(), di, mm, 0),
    )
    .unwrap();
    assert_eq!(clean.blocks, [(b, 0), (b + 8, 3)]);
    assert_eq!(clean.skipped, [MAX_ORDER]);
    assert_eq!(clean.free_pages, 16);
    let node_bit = |p: &mut TestPage| p.break_links();
    type Damage<'a> = &'a dyn Fn(&mut TestPage);
    let cases: [(Pfn, Damage<'_>, &str); 7] = [
        (b, &node_bit, "a page of the requested node and zone"),
        (b + 10, &node_bit, "a page of the requested node and zone"),
        (
            b,
            &TestPage::set_reserved,
            "an allocated page (not PG_reserved)",
        ),
        (b + 8, &node_bit, "a page of the requested node and zone"),
        (
            b + 9,
            &|p| p.set_buddy(0),
            "an allocated page (not PageBuddy)",
        ),
        (
            b + 15,
            &TestPage::set_reserved,
            "an allocated page (not PG_reserved)",
        ),
        (b + 9, &|p| p.set_refcount_raw(1), "tail refcount 0"),
    ];
    // An 8-byte page is one word: the allocator rewrites the whole of each
    // head it splits off or hands out (B and B + 8), damage included.
    let rewritten = |pfn: Pfn| !TestPage::STORES_LINKS && (pfn == b || pfn == b + 8);
    for (pfn, damage, what) in cases.into_iter().filter(|c| !rewritten(c.0)) {
        match selftest(pfn, damage) {
            Err(SelftestError::BadPage {
                pfn: p, what: w, ..
            }) => {
                assert_eq!((p, w), (pfn, what))
            }
            other => panic!("damage at {pfn:#x} ({what}): {other:?}"),
        }
    }
}

/// Blocks that touch without overlapping are not an overlap: an order-0
/// block right before, or right after, the order-3 block.
#[test]
fn selftest_accepts_adjacent_blocks() {
    let x = 33 * S + 8;
    // The order-0 block ends where the order-3 block starts...
    let before = with_small_node(
        &[PfnRange::new(x - 1, x + 8)],
        |_| {},
        |di, mm| alloc_free_selftest(di.buddy(), di, mm, 0),
    );
    assert_eq!(before.unwrap().blocks, [(x - 1, 0), (x, 3)]);
    // ... or starts where it ends.
    let after = with_small_node(
        &[PfnRange::new(x, x + 9)],
        |_| {},
        |di, mm| alloc_free_selftest(di.buddy(), di, mm, 0),
    );
    assert_eq!(after.unwrap().blocks, [(x + 8, 0), (x, 3)]);
}

/// A free list corrupted so the allocator hands out a misaligned block: two
/// order-3 blocks, each with `lru.next` pointing at its own second page.
/// The order-0 request splits the listed head H and leaves H + 1 at the
/// head of the order-3 list (and as a free order-0 block); the order-3
/// request gets H + 1, which the self-test must reject.
#[test]
fn selftest_rejects_a_misaligned_block() {
    if super::tests::test_store() != BuddyStore::Lists {
        return; // a list-link fault: the bitmap store's own is tested in buddy's tests
    }
    let (a, b) = (33 * S, 33 * S + 16);
    let r = with_small_node(
        &[PfnRange::new(a, a + 8), PfnRange::new(b, b + 8)],
        |c| {
            c(a, &|p| p.set_next_link(a + 1));
            c(b, &|p| p.set_next_link(b + 1));
        },
        |di, mm| alloc_free_selftest(di.buddy(), di, mm, 0),
    );
    match r {
        Err(SelftestError::Misaligned { pfn, order: 3 }) if pfn == a + 1 || pfn == b + 1 => {}
        other => panic!("{other:?}"),
    }
}

/// What each self-test failure tells the operator, word for word.
#[test]
fn selftest_errors_say_what_went_wrong() {
    let found = PageWords {
        flags: 0x40,
        refcount: 2,
        mapcount: -1,
        private: 0,
        lru: Some((5, 6)),
    };
    let cases = [
        (
            SelftestError::InFlight { nid: 1 },
            "verify: selftest: windows of node 1 are still being initialised; run it after all workers and allocations returned",
        ),
        (
            SelftestError::NoFreeMemory { nid: 2 },
            "verify: selftest: node 2 has no free pages",
        ),
        (
            SelftestError::Alloc {
                order: 3,
                err: AllocError::OrderTooLarge { order: 3 },
            },
            "verify: selftest: order-3 allocation failed: order 3 exceeds MAX_ORDER 10 (4 MiB); allocate several blocks instead",
        ),
        (
            SelftestError::Misaligned { pfn: 0x1001, order: 3 },
            "verify: selftest: order-3 block 0x1001 is not aligned to its order",
        ),
        (
            SelftestError::Overlap {
                pfn: 0x1000,
                order: 3,
                other: 0x1004,
            },
            "verify: selftest: order-3 block 0x1000 overlaps block 0x1004 allocated before",
        ),
        (
            SelftestError::BadPage {
                pfn: 0x1009,
                what: "tail refcount 0",
                found,
            },
            "verify: selftest: pfn 0x1009: expected tail refcount 0, found refcount 2 mapcount -1 flags 0x40 private 0x0 lru 0x5/0x6",
        ),
        (
            SelftestError::FreeCount {
                stage: "after freeing",
                expected: 16,
                found: 15,
            },
            "verify: selftest: after freeing: expected 16 free pages, found 15",
        ),
        (
            SelftestError::BlockCounts {
                order: 4,
                before: 1,
                after: 0,
            },
            "verify: selftest: 1 free order-4 blocks before, 0 after freeing everything",
        ),
        (
            SelftestError::Free {
                err: FreeError::NotAllocated { pfn: 0x1000 },
            },
            "verify: selftest: free failed: pfn 0x1000 is not the head of an allocated block (refcount != 1 or already free): double free?",
        ),
    ];
    for (e, text) in cases {
        assert_eq!(e.to_string(), text);
    }
}

// The wording of verification's reports, the parts no failing boot above
// reaches: every head problem, a list that leaves its zone from the list
// head, a zone with untouched pages, a failure with more mismatches than
// it keeps, a node skipped by the self-test, and `check_all`'s failures.

/// A block-count mismatch of node 2's DMA32 order-4 list.
fn block_count_mismatch() -> BuddyMismatch {
    BuddyMismatch::BlockCount {
        nid: 2,
        zone: ZoneType::Dma32,
        order: 4,
        listed: 1,
        scanned: 2,
        counter: 3,
    }
}

/// Every head problem ends the listed-head message it is part of.
#[test]
fn report_wording_of_head_problems() {
    let head = |problem| {
        BuddyMismatch::ListedHead {
            nid: 1,
            zone: ZoneType::Normal,
            pfn: 0x4000,
            order: 3,
            problem,
            found: PageWords::default(),
        }
        .to_string()
    };
    for (problem, text) in [
        (HeadProblem::NotBuddy, "not PageBuddy)"),
        (HeadProblem::WrongOrder, "wrong order)"),
        (HeadProblem::Misaligned, "not aligned to its order)"),
        (HeadProblem::WrongLinks, "section/node/zone bits wrong)"),
        (HeadProblem::Refcount, "wrong refcount)"),
        (
            HeadProblem::BrokenList {
                expected_prev: 0x3ff8,
            },
            "lru.prev should be 0x3ff8)",
        ),
        (HeadProblem::Unbacked, "no struct-page backing)"),
    ] {
        let line = head(problem);
        assert!(line.ends_with(text), "{line}");
        assert!(
            line.starts_with(
                "verify: pfn 0x4000: expected head of a free order-3 block of node 1 zone Normal"
            ),
            "{line}"
        );
    }
}

/// A block count that differs, and a list that leaves its zone from the
/// list head or from a page.
#[test]
fn report_wording_of_block_counts_and_lists() {
    let count = block_count_mismatch();
    assert_eq!(
        count.to_string(),
        "verify: node 2 zone DMA32 order 4: 1 blocks listed, 2 heads in the page scan, list counter 3"
    );
    assert_eq!(
        ListProblem::LeavesZone {
            from: PFN_NONE,
            to: 0x77
        }
        .to_string(),
        "the list head points at pfn 0x77, outside the zone's memory"
    );
    assert_eq!(
        ListProblem::LeavesZone {
            from: 0x10,
            to: 0x77
        }
        .to_string(),
        "pfn 0x10's lru.next points at pfn 0x77, outside the zone's memory"
    );
}

/// A zone with untouched pages says how many (and how many reserved).
#[test]
fn report_wording_of_untouched_zones() {
    let zone = |untouched, untouched_reserved| ZoneSummary {
        nid: 0,
        zone: ZoneType::Normal,
        present: 100,
        initialised: 60,
        expected_reserved: 5,
        reserved: 5,
        expected_free: 55,
        free: 55,
        buddy_free: 55,
        listed_blocks: [0; memmap::NR_ORDERS],
        untouched,
        untouched_reserved,
        huge: 0,
    };
    assert!(!zone(0, 0).to_string().contains("untouched"));
    assert!(
        zone(40, 2)
            .to_string()
            .ends_with(", 40 untouched (2 of them reserved)"),
        "{}",
        zone(40, 2)
    );
}

/// A failure says how many mismatches it has and how many it shows; a
/// node skipped by the self-test, and `check_all`'s failures.
#[test]
fn report_wording_of_failures() {
    let count = block_count_mismatch();
    let failure = |nr_mismatches| BuddyFailure {
        summary: BuddySummary {
            zones: Vec::new(),
            pages_checked: 0,
            listed_blocks: 0,
        },
        mismatches: vec![count; 2],
        nr_mismatches,
    };
    assert!(failure(2)
        .to_string()
        .ends_with("verify: FAILED, 2 mismatches"));
    assert!(failure(9)
        .to_string()
        .ends_with("verify: FAILED, 9 mismatches (first 2 shown)"));

    assert_eq!(
        verify::NodeSelftest::NoFreePages(3).to_string(),
        "verify: node 3: no free pages (all reserved): alloc/free self-test skipped"
    );
    let selftest = verify::CheckFailure::Selftest {
        nid: 3,
        error: SelftestError::NoFreeMemory { nid: 3 },
    };
    assert!(selftest.to_string().starts_with("node 3: "), "{selftest}");
    assert!(verify::CheckFailure::Buddy(failure(2))
        .to_string()
        .ends_with("verify: FAILED, 2 mismatches"));
}

/// More head problems than a failure keeps: the first
/// `MAX_RECORDED_MISMATCHES` are kept, every one is counted, and the report
/// says how many it shows. (Scanned before the damage, so the heads are the
/// only mismatches.)
#[test]
fn head_problems_past_the_cap_are_counted_not_kept() {
    with_world(|w| {
        let pages = w.scan_all();
        let heads: Vec<Pfn> = w
            .blocks()
            .into_iter()
            .filter(|&(_, _, _, order)| order >= 1)
            .map(|(_, _, pfn, _)| pfn)
            .take(MAX_RECORDED_MISMATCHES + 4)
            .collect();
        assert_eq!(heads.len(), MAX_RECORDED_MISMATCHES + 4);
        for &pfn in &heads {
            w.corrupt(pfn, TestPage::clear_buddy);
        }
        let f = w.verify(&pages).expect_err("damaged heads must fail");
        assert_eq!(f.mismatches.len(), MAX_RECORDED_MISMATCHES);
        // Each head counted (the damaged heads also make the list walk
        // and the scan disagree on a count or two).
        assert!(f.nr_mismatches >= heads.len() as u64, "{f}");
        assert!(f.mismatches.iter().any(|m| matches!(
            m,
            BuddyMismatch::ListedHead {
                problem: HeadProblem::NotBuddy,
                ..
            }
        )));
        assert!(
            f.to_string().ends_with(&format!(
                "verify: FAILED, {} mismatches (first {MAX_RECORDED_MISMATCHES} shown)",
                f.nr_mismatches
            )),
            "{f}"
        );
    });
}

/// A PageBuddy head whose block would cover memblock-reserved memory (or a
/// hole) is refused at the head, whatever its pages look like: a free
/// block must be wholly free memory of its node and zone.
#[test]
fn a_head_whose_block_covers_reserved_memory_is_refused() {
    let base = NODE1_RSV & !((1 << MAX_ORDER) - 1);
    assert!(base < NODE1_RSV, "the reserved page lies inside the block");
    expect_detected(
        |_| base,
        |p| p.set_buddy(MAX_ORDER),
        0,
        Problem::BlockOutsideFree,
    );
    // Over the firmware hole below 1 MiB (DMA): pages 0x9f.. are a hole.
    expect_detected(|_| 0x80, |p| p.set_buddy(7), 0, Problem::BlockOutsideFree);
}

/// Damage to state no boot-time writer sets, per layout: what
/// verification must report as stray.
trait StrayDamage: Sized {
    fn stray_damage() -> Vec<fn(&mut Self)>;
}

/// Any of `mapping`, `index` and `memcg_data` set (Linux leaves all three
/// zero at init): one field at a time, and two with equal values (which
/// an xor of the fields would miss).
impl StrayDamage for memmap::page::StructPage {
    fn stray_damage() -> Vec<fn(&mut Self)> {
        vec![
            |p| p.mapping = 0x10,
            |p| p.index = 0x20,
            |p| p.memcg_data = 0x40,
            |p| (p.mapping, p.index) = (0x10, 0x10),
            |p| (p.index, p.memcg_data) = (0x20, 0x20),
        ]
    }
}

/// Type data on a page with no type, or another page type than buddy.
impl StrayDamage for memmap::page32::StructPage32 {
    fn stray_damage() -> Vec<fn(&mut Self)> {
        vec![
            |p| p.page_type = 0xffff_fffe,
            |p| p.page_type = 0xff00_0000,
            |p| p.page_type = 0xf1ff_ffff,
        ]
    }
}

/// A type number memboot never writes, or data on a type that has none.
impl StrayDamage for memmap::page8::StructPage8 {
    fn stray_damage() -> Vec<fn(&mut Self)> {
        vec![|p| p.memdesc = 5, |p| p.memdesc |= 1 << 40, |p| {
            p.memdesc = (p.memdesc & !0xf) | 11
        }]
    }
}

/// Stray state on a free or a reserved page is caught, in every layout.
#[test]
fn stray_state_is_caught() {
    for set in TestPage::stray_damage() {
        // A free tail page, and a reserved one.
        expect_detected(|w| a_max_order_head(w, 0) + 9, set, 0, Problem::StrayState);
        expect_detected(|_| NODE1_RSV + 1, set, 0, Problem::StrayState);
    }
}

// ------------------------------------------- gaps found by cargo-mutants

/// Node 0 reserved whole: `check_all` proves its free pages are 0 and
/// skips its self-test, and runs node 1's; each node's expected free pages
/// are its own zones' (not the other node's).
#[test]
fn check_all_skips_the_selftest_of_a_node_without_free_pages() {
    let mut mb = memblock();
    mb.reserve(0, 4 * GIB).unwrap();
    with_world_on(
        mb,
        |_| {},
        true,
        |w| {
            let executor = ThreadExecutor::new(TEST_CPUS);
            let verified = verify::check_all(&executor, w.mm, w.mb, w.layout, w.di.buddy(), &w.di, HugeCheck::NONE)
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(verified.selftests.len(), 2, "{:?}", verified.selftests);
            assert_eq!(verified.selftests[0], verify::NodeSelftest::NoFreePages(0));
            assert!(
                matches!(&verified.selftests[1], verify::NodeSelftest::Ran(r) if r.nid == 1),
                "{:?}",
                verified.selftests[1]
            );
        },
    );
}

/// A scan that misses part of the initialised memory while a pool holds
/// the rest: the failure says how many pages it should have covered, the
/// present sections' pages less the pool's.
#[test]
fn an_incomplete_scan_beside_a_pool_names_what_it_should_cover() {
    with_world_setup(
        |_| {},
        false,
        |w| {
            let pool = PoolCheck::new(&w.di);
            let first = pool.scan_ranges(w.layout)[0];
            let pages = verify_scan_range(w.mm, w.mb, w.layout, HugeCheck::NONE, first);
            let f = verify_buddy_with_pool(w.di.buddy(), w.mm, w.layout, w.mb, &pages, &pool)
                .expect_err("half a scan must fail");
            let present: u64 = w
                .layout
                .present_section_ranges()
                .iter()
                .map(|r| r.nr_pages())
                .sum();
            assert!(w.di.pool_pages() > 0);
            assert_eq!(
                f.mismatches[0],
                BuddyMismatch::ScanIncomplete {
                    checked: first.pfns.nr_pages(),
                    expected: present - w.di.pool_pages(),
                }
            );
        },
    );
}

/// The last block of a list unlinked and no longer a head: the list walk
/// and the page scan agree on one block fewer, the list's counter does
/// not, and that alone is a block-count mismatch.
#[test]
fn a_block_count_differing_only_from_the_counter_is_caught() {
    if super::tests::test_store() != BuddyStore::Lists {
        return; // a list-link fault: the bitmap store's own is tested in buddy's tests
    }
    with_world(|w| {
        let blocks = w.blocks();
        let (nid, zone, order) = blocks
            .iter()
            .map(|&(n, z, _, o)| (n, z, o))
            .find(|&k| {
                blocks
                    .iter()
                    .filter(|&&(n, z, _, o)| (n, z, o) == k)
                    .count()
                    >= 2
            })
            .expect("a list with two blocks");
        let list: Vec<Pfn> = blocks
            .iter()
            .filter(|&&(n, z, _, o)| (n, z, o) == (nid, zone, order))
            .map(|b| b.2)
            .collect();
        let n = list.len() as u64;
        let (before_last, last) = (list[list.len() - 2], list[list.len() - 1]);
        w.corrupt(before_last, |p| p.set_next_link(crate::buddy::PFN_NONE));
        w.corrupt(last, TestPage::clear_buddy);
        let f = w.verify(&w.scan_all()).expect_err("must fail");
        let expected = BuddyMismatch::BlockCount {
            nid,
            zone,
            order,
            listed: n - 1,
            scanned: n - 1,
            counter: n,
        };
        assert!(f.mismatches.contains(&expected), "{f}");
    });
}

/// Each page problem has its own description (the report names what is
/// wrong, not one word for all).
#[test]
fn every_page_problem_is_described_differently() {
    let all = [
        Problem::Unbacked,
        Problem::UnlistedHole,
        Problem::WrongLinks,
        Problem::StrayState,
        Problem::ReservedClear,
        Problem::ReservedSet,
        Problem::Refcount,
        Problem::UnexpectedBuddy,
        Problem::NotInBlock,
        Problem::BadOrder,
        Problem::Misaligned,
        Problem::BlockOutsideFree,
    ];
    let texts: std::collections::BTreeSet<&str> = all.iter().map(|p| p.describe()).collect();
    assert_eq!(texts.len(), all.len(), "{texts:?}");
    assert!(texts.iter().all(|t| t.len() > 4), "{texts:?}");
}

/// The scan's zones are exactly those it saw pages of (from the fixture:
/// node 0 DMA and DMA32, node 1 Normal); an empty result has none.
#[test]
fn a_scan_lists_exactly_the_zones_it_saw() {
    with_world(|w| {
        let empty = PageCheck::new(w.layout);
        assert_eq!(empty.zones().count(), 0);
        let pages = w.scan_all();
        let seen: Vec<(NodeId, ZoneType)> = pages.zones().map(|z| (z.nid, z.zone)).collect();
        assert_eq!(
            seen,
            [
                (0, ZoneType::Dma),
                (0, ZoneType::Dma32),
                (1, ZoneType::Normal)
            ]
        );
        assert!(pages.zone(0, ZoneType::Normal).is_none());
        assert!(pages.zone(1, ZoneType::Dma32).is_none());
    });
}

/// Merging a scan of more nodes into a result sized for fewer grows it:
/// nothing of the larger scan is lost.
#[test]
fn merging_a_scan_of_more_nodes_keeps_all_of_it() {
    let (node0_only, _) = Memblock::from_firmware(
        [FirmwareEntry::new(MIB, 300 * MIB - MIB, Usable)],
        MemblockConfig::default(),
    )
    .unwrap();
    let small = ZoneLayout::new(&node0_only);
    with_world(|w| {
        let mut merged = PageCheck::new(&small);
        merged.merge(w.scan_all());
        assert_eq!(merged, w.scan_all());
        assert!(merged.zone(1, ZoneType::Normal).is_some());
    });
}

/// A scan whose memblock numbers node 1's memory as node 3 (a node the
/// layout's result was not sized for) counts it there, every memory page
/// with wrong node links.
#[test]
fn a_scan_counts_memory_of_a_node_the_layout_lacks() {
    let renumbered = memblock_with(300 * MIB, 3);
    with_world(|w| {
        let node1 = *w.layout.present_section_ranges().last().unwrap();
        let pages = verify_pages(w.mm, &renumbered, w.layout, HugeCheck::NONE, node1);
        let memory = ((200 + 302) * MIB) >> 12;
        let z = pages.zone(3, ZoneType::Normal).expect("node 3 counted");
        if !TestPage::STORES_LINKS {
            // The page does not name its node: nothing to mismatch.
            assert_eq!((z.memory_pages, z.initialised), (memory, memory));
            assert_eq!(pages.nr_mismatches, 0);
            return;
        }
        assert_eq!((z.memory_pages, z.initialised), (memory, 0));
        assert_eq!(pages.nr_mismatches, memory);
        assert!(pages
            .mismatches
            .iter()
            .all(|m| m.problem == Problem::WrongLinks));
    });
}

/// One scan (no merge) keeps exactly the first `MAX_RECORDED_MISMATCHES`
/// mismatches and counts all of them.
#[test]
fn one_scan_keeps_the_first_mismatches_and_counts_all() {
    with_world(|w| {
        let head = a_max_order_head(w, 1);
        for i in 0..40 {
            w.corrupt(head + 1 + i, |p| p.set_refcount_raw(2));
        }
        let one = w.scan(PfnRange::new(head, head + (1 << MAX_ORDER)));
        assert_eq!(one.nr_mismatches, 40);
        assert_eq!(one.mismatches.len(), MAX_RECORDED_MISMATCHES);
    });
}

/// The scan's last line: no verdict when clean, `FAILED:` with any
/// mismatch, and "(first N shown)" only when some were not kept.
#[test]
fn the_scan_report_ends_with_its_verdict() {
    with_world(|w| {
        let clean = w.scan_all();
        let text = clean.to_string();
        assert!(
            text.ends_with(&format!(
                "\nverify: {} pages checked, 0 mismatches",
                clean.pages_checked
            )),
            "{text}"
        );
        assert!(!text.contains("FAILED"), "{text}");
        w.corrupt(a_max_order_head(w, 1) + 5, |p| p.set_refcount_raw(2));
        let one = w.scan_all();
        let text = one.to_string();
        assert!(
            text.ends_with(&format!(
                "\nverify: FAILED: {} pages checked, 1 mismatches",
                one.pages_checked
            )),
            "{text}"
        );
    });
}

/// Memory memblock no longer has, which the layout still counts as
/// memory: not a hole listed in any unavailable range, so its pages are
/// refused as unlisted holes (not taken for the next listed hole).
#[test]
fn memory_gone_from_memblock_is_an_unlisted_hole() {
    let larger = ZoneLayout::new(&memblock_with(310 * MIB, 1));
    with_world(|w| {
        let gone = PfnRange::new((300 * MIB) >> 12, (310 * MIB) >> 12);
        let pages = verify_pages(w.mm, w.mb, &larger, HugeCheck::NONE, gone);
        assert_eq!(pages.nr_mismatches, gone.nr_pages(), "{pages}");
        assert!(pages
            .mismatches
            .iter()
            .all(|m| m.problem == Problem::UnlistedHole));
        assert_eq!(pages.mismatches[0].pfn, gone.start);
    });
}

/// A free block may span two memblock regions of its node that merely
/// differ in flags (here the upper one is hotpluggable): it is one block
/// of free memory, and the scan accepts it.
#[test]
fn a_free_block_across_two_adjacent_regions_is_valid() {
    let split = 4 * GIB + 102 * MIB; // inside the 4 MiB block at 4 GiB + 100 MiB
    let mut mb = Memblock::new(MemblockConfig::default()).unwrap();
    mb.add(0, 0x9f000, 0).unwrap();
    mb.add(MIB, 300 * MIB - MIB, 0).unwrap();
    mb.add(4 * GIB, split - 4 * GIB, 1).unwrap();
    mb.add_with_flags(
        split,
        4 * GIB + 200 * MIB - split,
        1,
        memmap::memblock::RegionFlags::HOTPLUG,
    )
    .unwrap();
    mb.reserve(0, 0x1000).unwrap();
    assert_eq!(mb.memory().len(), 4, "the regions at {split:#x} stay apart");
    with_world_on(
        mb,
        |_| {},
        true,
        |w| {
            let head = (4 * GIB + 100 * MIB) >> 12;
            assert!(w.blocks().contains(&(1, ZoneType::Normal, head, MAX_ORDER)));
            let pages = w.scan_all();
            assert!(pages.is_ok(), "{pages}");
            w.verify(&pages).unwrap_or_else(|e| panic!("{e}"));
        },
    );
}

/// A present section without struct-page backing: every one of its pages
/// is checked, and each is a mismatch.
#[test]
fn every_page_of_an_unbacked_section_is_checked() {
    with_world(|w| {
        let unbacked: Memmap<TestBacking> = Memmap::new(TestBacking::for_ranges(&[]));
        let node1 = *w.layout.present_section_ranges().last().unwrap();
        let pages = verify_pages(&unbacked, w.mb, w.layout, HugeCheck::NONE, node1);
        assert_eq!(pages.pages_checked, node1.nr_pages());
        assert_eq!(pages.nr_mismatches, node1.nr_pages());
        assert_eq!(pages.mismatches[0].problem, Problem::Unbacked);
    });
}

/// A page left in a per-CPU cache is free memory in no free block:
/// verification fails until the cache is drained.
#[test]
fn a_page_left_in_a_cpu_cache_fails_verification() {
    with_world(|w| {
        let executor = ThreadExecutor::new(TEST_CPUS);
        let caches = PerCpuPages::new(1);
        let pages = w.di.allocator().with_cpu_caches(&caches).on_cpu(0);
        let p = pages.alloc_pages(1, ZoneType::Normal, 0).unwrap();
        pages.free_pages(p, 0).unwrap();
        assert_eq!(caches.nr_cached_pages(), PCP_BATCH as u64);
        let check = || verify::check_all(&executor, w.mm, w.mb, w.layout, w.di.buddy(), &w.di, HugeCheck::NONE);
        match check() {
            Err(verify::CheckFailure::Pages(pages)) => {
                assert_eq!(pages.nr_mismatches, PCP_BATCH as u64, "{pages}");
            }
            other => panic!("expected the cached pages found, got {other:?}"),
        }
        pages.drain_cpu_cache();
        check().unwrap_or_else(|e| panic!("{e}"));
    });
}

/// Huge pages of 2 MiB taken from the allocator (`hugepagesz=2M
/// hugepages=5`), round-robin over the two nodes and written as compound
/// pages: verification checks each and leaves them out of the free pages
/// (the zones' counts add up without them); told nothing of them, it finds
/// pages that are neither free nor reserved; a damaged tail trips it.
#[test]
fn huge_pages_from_the_allocator_verify_and_a_damaged_tail_trips() {
    use memboot_contract::hugepage_forms::HugePageSize;
    use memmap::hugetlb::{prep_compound, Request};

    use crate::hugetlb_pool::alloc_pool;

    with_world(|w| {
        let executor = ThreadExecutor::new(TEST_CPUS);
        let free_before = w.di.buddy().nr_free_pages_total();
        let pool = alloc_pool(
            &w.di.allocator(),
            w.layout,
            &Request::Total(5),
            HugePageSize::Mib2,
        );
        assert_eq!(pool.per_node(2), [3, 2], "node 0 first, then in turn");
        assert!(pool.shortfalls.is_empty());
        for p in &pool.pages {
            assert_eq!(p.pfn % 512, 0, "{p:?}");
            // SAFETY: the pages are allocated to the pool; nothing else
            // touches their struct pages.
            assert_eq!(unsafe { prep_compound(w.mm, p.pfn, p.nid, 9) }, Ok(512));
        }
        let free_after = w.di.buddy().nr_free_pages_total();
        assert_eq!(free_before - free_after, 5 * 512);
        let check = |huge| verify::check_all(&executor, w.mm, w.mb, w.layout, w.di.buddy(), &w.di, HugeCheck { pool: huge, hvo_kept_struct_pages: None, pool_hvo: None });
        let verified = check(Some(&pool)).unwrap_or_else(|e| panic!("{e}"));
        let huge: u64 = verified.buddy.zones.iter().map(|z| z.huge).sum();
        assert_eq!(huge, 5 * 512);
        assert!(check(None).is_err(), "a huge page is neither free nor reserved");
        let tail = pool.pages[1].pfn + 7;
        w.corrupt(tail, |p| p.break_links());
        match check(Some(&pool)) {
            Err(verify::CheckFailure::Pages(pages)) => {
                let m = pages.mismatches[0];
                assert_eq!(m.pfn, tail, "{pages}");
                assert!(
                    matches!(m.expected, Expected::CompoundTail { order: 9, .. }),
                    "{m}"
                );
            }
            other => panic!("expected a page failure, got {other:?}"),
        }
    });
}

/// More 2 MiB pages than fit: as many as fit, then Linux's warning; per
/// node, each node's count on that node only.
#[test]
fn huge_pages_beyond_what_fits_are_a_shortfall() {
    use memboot_contract::hugepage_forms::HugePageSize;
    use memmap::hugetlb::{Request, Shortfall};

    use crate::hugetlb_pool::alloc_pool;

    with_world(|w| {
        let pages = w.di.allocator();
        let pool = alloc_pool(&pages, w.layout, &Request::PerNode(vec![(1, 1_000_000)]), HugePageSize::Mib2);
        assert_eq!(pool.per_node(2)[0], 0);
        let got = pool.per_node(2)[1];
        assert!(got > 0, "{pool:?}");
        assert_eq!(
            pool.shortfalls,
            [Shortfall::Node {
                size: HugePageSize::Mib2,
                nid: 1,
                asked: 1_000_000,
                allocated: got
            }]
        );
        assert_eq!(
            pool.shortfalls[0].to_string(),
            format!("HugeTLB: allocating 1000000 of page size 2.00 MiB failed node1.  Only allocated {got} hugepages.")
        );
    });
}

/// HVO of the 2 MiB pages, as the struct pages read once it remapped
/// them: every tail beyond the kept vmemmap page reads as the kept struct
/// page at the same offset (written here as the aliases would read), and
/// a page table taken from the allocator is held. Told of both
/// (`PoolHvo`), verification passes, counting the table with the huge
/// pages; a damaged alias and a table given back each trip it.
#[test]
fn hvo_of_2m_pages_verifies_and_damage_trips() {
    use memboot_contract::hugepage_forms::HugePageSize;
    use memmap::hugetlb::{prep_compound, Request};

    use crate::hugetlb_pool::{alloc_pool, PoolHvo};

    with_world(|w| {
        let executor = ThreadExecutor::new(TEST_CPUS);
        let pages = w.di.allocator();
        let pool = alloc_pool(&pages, w.layout, &Request::Total(3), HugePageSize::Mib2);
        let kept = 4096 / TestPage::BYTES;
        for p in &pool.pages {
            // SAFETY: the pages are allocated to the pool; nothing else
            // touches their struct pages.
            unsafe { prep_compound(w.mm, p.pfn, p.nid, 9) }.unwrap();
            for i in kept..512 {
                let alias = *w.mm.page(p.pfn + i % kept).unwrap();
                w.corrupt(p.pfn + i, |t| *t = alias);
            }
        }
        let nid = pool.pages[0].nid;
        let zone = w.layout.highest_zone(nid).unwrap().zone;
        let table = pages.alloc_pages(nid, zone, 0).unwrap();
        let tables = [table];
        let hvo = |tables| HugeCheck {
            pool: Some(&pool),
            hvo_kept_struct_pages: None,
            pool_hvo: Some(PoolHvo {
                kept_struct_pages: kept,
                tables,
            }),
        };
        let check = |huge| verify::check_all(&executor, w.mm, w.mb, w.layout, w.di.buddy(), &w.di, huge);
        let verified = check(hvo(&tables)).unwrap_or_else(|e| panic!("{e}"));
        let huge: u64 = verified.buddy.zones.iter().map(|z| z.huge).sum();
        assert_eq!(huge, 3 * 512 + 1);
        assert!(check(hvo(&[])).is_err(), "an allocated page nobody holds");
        let first_fails = |huge| match check(huge) {
            Err(verify::CheckFailure::Pages(pages)) => pages.mismatches[0],
            other => panic!("expected a page failure, got {other:?}"),
        };
        if kept < 512 {
            let tail = pool.pages[1].pfn + kept + 3;
            w.corrupt(tail, |p| p.break_links());
            let m = first_fails(hvo(&tables));
            assert_eq!(m.pfn, tail, "{m}");
            assert!(matches!(m.expected, Expected::HvoAlias { index: 3, .. }), "{m}");
            let alias = *w.mm.page(pool.pages[1].pfn + 3).unwrap();
            w.corrupt(tail, |t| *t = alias);
        }
        pages.free_pages(table, 0).unwrap();
        let m = first_fails(hvo(&tables));
        assert_eq!(m.pfn, table, "{m}");
        assert!(matches!(m.expected, Expected::HvoTable { .. }), "{m}");
    });
}
