//! The reservation against Linux's rules and a brute-force model, and the
//! compound pages each layout writes.

use super::*;
use crate::memblock::{Memblock, MemblockConfig};
use crate::page::StructPage;
use crate::page32::StructPage32;
use crate::page8::StructPage8;
use crate::store::VecBacking;
use proptest::prelude::*;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// Node 0: [0, 3 GiB) and [4, 5 GiB); node 1: [5, 9 GiB): QEMU's 8G over
/// two nodes. The low MiB and a heap in node 1's top are reserved.
fn qemu_8g_two_nodes() -> Memblock {
    let mut mb = Memblock::new(MemblockConfig::default()).unwrap();
    mb.add(0, 3 * GIB, 0).unwrap();
    mb.add(4 * GIB, GIB, 0).unwrap();
    mb.add(5 * GIB, 4 * GIB, 1).unwrap();
    mb.reserve(0, MIB).unwrap();
    mb.reserve(9 * GIB - 64 * MIB, 16 * MIB).unwrap();
    mb
}

fn bases(r: &Reservation) -> Vec<(u64, NodeId)> {
    r.pages
        .iter()
        .map(|p| (p.pfn << PAGE_SHIFT, p.nid))
        .collect()
}

#[test]
fn a_total_alternates_nodes_from_the_top_of_each() {
    let mut mb = qemu_8g_two_nodes();
    let r = reserve_gigantic(&mut mb, &Request::Total(4)).unwrap();
    // Node 1's top GiB holds the heap: its highest free frame is 7 GiB.
    assert_eq!(
        bases(&r),
        [(2 * GIB, 0), (4 * GIB, 0), (6 * GIB, 1), (7 * GIB, 1)]
    );
    assert_eq!(r.per_node(2), [2, 2]);
    assert!(r.shortfalls.is_empty());
    assert_eq!(
        mb.noinit_ranges().collect::<Vec<_>>(),
        [
            PfnRange::new((2 * GIB) >> 12, (3 * GIB) >> 12),
            PfnRange::new((4 * GIB) >> 12, (5 * GIB) >> 12),
            PfnRange::new((6 * GIB) >> 12, (8 * GIB) >> 12),
        ]
    );
    assert_eq!(
        RegisteredLine {
            size: HugePageSize::Gib1,
            pages: r.pages.len() as u64
        }
        .to_string(),
        "HugeTLB: registered 1.00 GiB page size, pre-allocated 4 pages"
    );
}

#[test]
fn a_total_falls_back_to_any_node_then_stops_with_linux_warning() {
    let mut mb = qemu_8g_two_nodes();
    // Node 0 has 3 free frames (1, 2, 4 GiB), node 1 has 3 (5, 6, 7 GiB).
    let r = reserve_gigantic(&mut mb, &Request::Total(9)).unwrap();
    assert_eq!(r.pages.len(), 6);
    assert_eq!(r.per_node(2), [3, 3]);
    assert_eq!(
        r.shortfalls,
        [Shortfall::Total {
            size: HugePageSize::Gib1,
            asked: 9,
            allocated: 6
        }]
    );
    assert_eq!(
        r.shortfalls[0].to_string(),
        "HugeTLB: allocating 9 of page size 1.00 GiB failed.  Only allocated 6 hugepages."
    );
}

#[test]
fn per_node_counts_stay_on_their_node() {
    let mut mb = qemu_8g_two_nodes();
    let r = reserve_gigantic(&mut mb, &Request::PerNode(vec![(1, 5), (0, 1)])).unwrap();
    assert_eq!(r.per_node(2), [1, 3]);
    assert_eq!(
        r.shortfalls,
        [Shortfall::Node {
            size: HugePageSize::Gib1,
            nid: 1,
            asked: 5,
            allocated: 3
        }]
    );
    assert_eq!(
        r.shortfalls[0].to_string(),
        "HugeTLB: allocating 5 of page size 1.00 GiB failed node1.  Only allocated 3 hugepages."
    );
}

#[test]
fn memmap_init_leaves_the_pages_to_hugetlb() {
    use crate::init::split_deferred;
    use crate::zones::ZoneLayout;
    let mut mb = qemu_8g_two_nodes();
    let r = reserve_gigantic(&mut mb, &Request::Total(2)).unwrap();
    let layout = ZoneLayout::new(&mb);
    let split = split_deferred(&mb, &layout);
    for page in &r.pages {
        let hp = page.pfns();
        assert!(split.eager.iter().all(|e| e.pfns.intersect(&hp).is_none()));
        assert!(split
            .deferred
            .iter()
            .all(|d| d.pfns.intersect(&hp).is_none()));
    }
    let covered: u64 = split.eager.iter().map(|e| e.pfns.nr_pages()).sum::<u64>()
        + split
            .deferred
            .iter()
            .map(|d| d.pfns.nr_pages())
            .sum::<u64>();
    assert_eq!(
        covered + 2 * GIGANTIC_NR_PAGES,
        mb.memory().total_bytes() >> 12
    );
}

/// A head and its tails as Linux 6.1 leaves them, at every layout.
fn compound_pages_in<P: PageLayout>() {
    let mut mb = Memblock::new(MemblockConfig::default()).unwrap();
    mb.add(0, 2 * GIB, 0).unwrap();
    mb.reserve(0, MIB).unwrap();
    let r = reserve_gigantic(&mut mb, &Request::Total(1)).unwrap();
    let page = r.pages[0];
    assert_eq!(page.pfn, GIB >> 12);
    let sections = crate::pfn_to_section_nr(page.pfn)..crate::pfn_to_section_nr(page.pfns().end);
    let mm = Memmap::new(VecBacking::<P>::new(sections));
    // SAFETY: nothing else refers to the test's memmap.
    assert_eq!(unsafe { prep_gigantic(&mm, &page) }, Ok(GIGANTIC_NR_PAGES));
    let head = compound_head_of(&mm, &page).unwrap();
    let links = page_links(page.pfn, ZoneType::Dma32, 0);
    let h = mm.page(page.pfn).unwrap();
    assert!(h.is_compound_head(links) && !h.is_reserved() && h.refcount() == 0);
    for i in [1, 2, 4095, GIGANTIC_NR_PAGES - 1] {
        let pfn = page.pfn + i;
        let mut want = P::ZERO;
        want.prep_compound_tail(page_links(pfn, ZoneType::Dma32, 0), head, i);
        let p = mm.page(pfn).unwrap();
        assert_eq!(*p, want, "tail {i}");
        assert!(!p.is_reserved() && !p.is_buddy() && p.refcount() == 0);
        assert!(!p.is_compound_head(page_links(pfn, ZoneType::Dma32, 0)));
    }
    assert!(!mm.page(page.pfn + 1).unwrap().is_compound_head(links));
}

#[test]
fn compound_pages_at_every_layout() {
    compound_pages_in::<StructPage>();
    compound_pages_in::<StructPage32>();
    compound_pages_in::<StructPage8>();
}

#[test]
fn first_tail_holds_linux_6_1_folio_fields_at_64_bytes() {
    let head = CompoundHead {
        pfn: 1 << 18,
        addr: 0xffff_ea00_0100_0000,
        order: GIGANTIC_ORDER,
    };
    let mut p = StructPage::ZERO;
    p.prep_compound_tail(0, head, 1);
    // SAFETY: `StructPage` is 64 bytes of integers, any bytes are valid to read.
    let bytes: [u8; 64] = unsafe { core::mem::transmute(p) };
    assert_eq!(
        u64::from_le_bytes(bytes[8..16].try_into().unwrap()),
        head.addr | 1
    );
    assert_eq!(bytes[16], HUGETLB_PAGE_DTOR);
    assert_eq!(bytes[17], 18);
    assert_eq!(i32::from_le_bytes(bytes[20..24].try_into().unwrap()), -1);
    assert_eq!(i32::from_le_bytes(bytes[24..28].try_into().unwrap()), 0);
    assert_eq!(
        u32::from_le_bytes(bytes[28..32].try_into().unwrap()),
        262144
    );
    assert_eq!(i32::from_le_bytes(bytes[52..56].try_into().unwrap()), 0);
}

/// Memory of up to three nodes in GiB-ish pieces, some reservations.
fn arb_memblock() -> impl Strategy<Value = Memblock> {
    let piece = (0u64..24, 1u64..2048, 0u32..3);
    let rsv = (0u64..(24 * 1024), 1u64..1536);
    (
        prop::collection::vec(piece, 1..6),
        prop::collection::vec(rsv, 0..6),
    )
        .prop_map(|(pieces, rsvs)| {
            let mut mb = Memblock::new(MemblockConfig::default()).unwrap();
            for (start_gib, len_mib, nid) in pieces {
                // Odd starts and lengths make unaligned frames.
                let base = start_gib * GIB + (start_gib % 3) * 256 * MIB;
                mb.add(base, len_mib * 4 * MIB, nid).unwrap();
            }
            for (at_mib, len_mib) in rsvs {
                mb.reserve(at_mib * MIB, len_mib * MIB).unwrap();
            }
            mb
        })
}

/// The 1 GiB frames wholly inside free memory of one node, by brute force.
fn free_frames(mb: &Memblock) -> Vec<(Pfn, NodeId)> {
    let top = mb.max_pfn().unwrap_or(0);
    (1..=top / GIGANTIC_NR_PAGES)
        .map(|k| (k - 1) * GIGANTIC_NR_PAGES)
        .filter_map(|pfn| {
            let frame = PfnRange::new(pfn, pfn + GIGANTIC_NR_PAGES);
            mb.free_ranges(None)
                .find(|(r, _)| r.start <= frame.start && frame.end <= r.end)
                .map(|(_, nid)| (pfn, nid))
        })
        .filter(|&(pfn, _)| pfn > 0)
        .collect()
}

fn check_common(before: &Memblock, after: &Memblock, r: &Reservation) {
    let frames = free_frames(before);
    for w in r.pages.windows(2) {
        assert!(w[0].pfns().end <= w[1].pfn, "disjoint");
    }
    for p in &r.pages {
        assert_eq!(p.pfn % GIGANTIC_NR_PAGES, 0, "aligned");
        assert!(
            frames.contains(&(p.pfn, p.nid)),
            "{p:?} in free memory of its node"
        );
    }
    let noinit: u64 = after.noinit_ranges().map(|r| r.nr_pages()).sum();
    assert_eq!(noinit, r.pages.len() as u64 * GIGANTIC_NR_PAGES);
}

proptest! {
    #[test]
    fn total_gets_min_of_asked_and_free_frames(mb in arb_memblock(), asked in 0u64..30) {
        let mut after = mb.clone();
        let r = reserve_gigantic(&mut after, &Request::Total(asked)).unwrap();
        check_common(&mb, &after, &r);
        let fits = free_frames(&mb).len() as u64;
        prop_assert_eq!(r.pages.len() as u64, asked.min(fits));
        prop_assert_eq!(r.shortfalls.is_empty(), asked <= fits);
    }

    #[test]
    fn per_node_gets_min_of_asked_and_its_free_frames(
        mb in arb_memblock(),
        asked in prop::collection::vec((0u32..3, 1u64..12), 0..3),
    ) {
        let mut asked = asked;
        asked.sort_unstable();
        asked.dedup_by_key(|a| a.0);
        let mut after = mb.clone();
        let r = reserve_gigantic(&mut after, &Request::PerNode(asked.clone())).unwrap();
        check_common(&mb, &after, &r);
        let frames = free_frames(&mb);
        let got = r.per_node(3);
        for (nid, n) in asked {
            let fits = frames.iter().filter(|f| f.1 == nid).count() as u64;
            prop_assert_eq!(got[nid as usize], n.min(fits), "node {}", nid);
        }
    }
}
