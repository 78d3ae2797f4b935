//! Tests of `verify`: a clean two-node boot passes, deliberate corruptions
//! are found, split scans merge to the single scan.

use std::string::ToString;
use std::vec::Vec;

use memmap::firmware::{FirmwareEntry, NodeAffinity, RegionKind::*};
use memmap::init::{init_memmap, Strategy};
use memmap::memblock::{Memblock, MemblockConfig};
use memmap::page::{StructPage, NODES_PGSHIFT};
use memmap::pageblock::PageblockMaps;
use memmap::store::{Memmap, VecBacking};
use memmap::zones::ZoneLayout;
use memmap::{NodeId, Pfn, PfnRange, ZoneType, MAX_ORDER, PAGES_PER_SECTION};

use crate::host::{StdClock, ThreadExecutor};
use crate::tests::TEST_CPUS;
use crate::*;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const S: u64 = PAGES_PER_SECTION;

/// Node 0: DMA + DMA32 up to 300 MiB (a firmware hole below 1 MiB, holes
/// 300..384 MiB in a present section); node 1: Normal 4 GiB..4.5 GiB with a
/// 10 MiB hole. Reserved: page 0, an unaligned range in node 0's deferred
/// memory and one in node 1's.
fn memblock() -> Memblock {
    let (mut mb, mut report) = Memblock::from_firmware(
        [
            FirmwareEntry::new(0, 0x9fc00, Usable),
            FirmwareEntry::new(0x9fc00, 0x60400, Reserved),
            FirmwareEntry::new(MIB, 300 * MIB - MIB, Usable),
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
            NodeAffinity::new(4 * GIB, 4 * GIB, 1),
        ],
        &mut report,
    )
    .unwrap();
    mb
}

struct World<'a> {
    mb: &'a Memblock,
    layout: &'a ZoneLayout,
    mm: &'a Memmap<VecBacking>,
    di: DeferredInit<'a, VecBacking>,
}

/// Boot the map: memmap init (Deferred), hand the eager free pages to the
/// buddy, run deferred init with threads, then call `f`.
fn with_world<R>(f: impl FnOnce(&World<'_>) -> R) -> R {
    let mb = memblock();
    let layout = ZoneLayout::new(&mb);
    let mut mm = Memmap::new(VecBacking::for_ranges(layout.present_section_ranges()));
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
    let di = DeferredInit::new(&mm, plan, InitMode::InitAndFree, &out.eager).unwrap();
    // SAFETY: the eager pages were initialised by init_memmap, are on no
    // list, and nothing else touches them.
    unsafe { crate::handoff::free_eager_pages(di.buddy(), &mb, &out.eager) }.unwrap();
    di.run(&ThreadExecutor::new(TEST_CPUS), &StdClock::new())
        .unwrap();
    assert!(di.is_done());
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
        verify_pages(self.mm, self.mb, self.layout, range)
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
    /// Corrupt one struct page.
    fn corrupt(&self, pfn: Pfn, f: impl FnOnce(&mut StructPage)) {
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
            let rep = alloc_free_selftest(&w.di, w.mm, nid).unwrap_or_else(|e| panic!("{e}"));
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
        w.corrupt(head + 100, |p| p.refcount = 1);
        w.corrupt(head + 700, |p| p.refcount = 1);
        w.corrupt(HOLE, StructPage::clear_reserved);
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
    corrupt: impl FnOnce(&mut StructPage),
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

#[test]
fn wrong_node_bits_detected() {
    let (_, f) = expect_detected(
        |_| NODE1_RSV + 3,
        |p| p.flags ^= 1 << NODES_PGSHIFT,
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
        |p| p.flags ^= 1 << NODES_PGSHIFT,
        0,
        Problem::WrongLinks,
    );
    assert!(f.to_string().contains("initialised"), "{f}");
}

#[test]
fn reserved_page_without_pg_reserved_detected() {
    let (_, f) = expect_detected(
        |_| NODE1_RSV,
        StructPage::clear_reserved,
        0,
        Problem::ReservedClear,
    );
    assert!(f
        .mismatches
        .iter()
        .any(|m| matches!(m, BuddyMismatch::Reserved { nid: 1, .. })));
    // An eagerly initialised reserved page (page 0).
    expect_detected(|_| 0, StructPage::clear_reserved, 0, Problem::ReservedClear);
}

#[test]
fn free_page_with_refcount_one_detected() {
    let (m, f) = expect_detected(
        |w| a_max_order_head(w, 0) + 5,
        |p| p.refcount = 1,
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
        |p| p.private = 3,
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
        |p| p.private = 11,
        0,
        Problem::BadOrder,
    );
}

#[test]
fn cleared_page_buddy_detected() {
    let (_, f) = expect_detected(
        |w| a_max_order_head(w, 0),
        StructPage::clear_buddy,
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
        StructPage::clear_reserved,
        0,
        Problem::ReservedClear,
    );
    assert!(
        f.mismatches[0].to_string().contains("page scan found 1"),
        "{f}"
    );
    with_world(|w| {
        w.corrupt(HOLE, StructPage::clear_reserved);
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
            w.corrupt(head + 1 + i, |p| p.refcount = 2);
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
