//! Unit tests of `memblock` (its private helpers included).

use super::*;
use crate::firmware::FirmwareEntry;
use RegionKind::*;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn build(map: &[FirmwareEntry]) -> (Memblock, FirmwareReport) {
    Memblock::from_firmware(map, MemblockConfig::default()).unwrap()
}

fn spans(t: &RegionTable) -> Vec<(u64, u64)> {
    t.regions().iter().map(|r| (r.base, r.end())).collect()
}

#[test]
fn typical_e820_map() {
    let (mb, report) = build(&[
        FirmwareEntry::new(0x100000, 2 * GIB - 0x100000, Usable),
        FirmwareEntry::new(0, 0x9fc00, Usable),
        FirmwareEntry::new(0x9fc00, 0x400, Reserved),
        FirmwareEntry::new(0xf0000, 0x10000, Reserved),
        FirmwareEntry::new(4 * GIB, 4 * GIB, Usable),
        FirmwareEntry::new(0x200000, 0x200000, Bootloader),
    ]);
    // 0x9fc00 is unaligned: RAM rounds inward to 0x9f000.
    assert_eq!(
        spans(mb.memory()),
        [(0, 0x9f000), (0x100000, 2 * GIB), (4 * GIB, 8 * GIB)]
    );
    assert_eq!(spans(mb.reserved()), [(0x200000, 0x400000)]);
    assert_eq!(report.unaligned_ram_bytes, 0xc00);
    assert_eq!(report.entries, 6);
    assert_eq!(report.overlap_bytes, 0x200000);
}

#[test]
fn least_usable_kind_wins_and_adjacent_ram_merges_before_rounding() {
    let (mb, _) = build(&[
        FirmwareEntry::new(0, 0x1800, Usable),
        FirmwareEntry::new(0x1800, 0x1800, Usable),
        FirmwareEntry::new(16 * MIB, 16 * MIB, Usable),
        FirmwareEntry::new(20 * MIB, MIB, Unusable),
        FirmwareEntry::new(24 * MIB, 0x800, Bootloader),
    ]);
    // The two halves of page 1 make a whole page together.
    assert_eq!(
        spans(mb.memory()),
        [(0, 0x3000), (16 * MIB, 20 * MIB), (21 * MIB, 32 * MIB)]
    );
    // Reserved RAM rounds outward.
    assert_eq!(spans(mb.reserved()), [(24 * MIB, 24 * MIB + 0x1000)]);
}

#[test]
fn clipping_and_empty_input_are_reported() {
    let cfg = MemblockConfig {
        phys_addr_bits: 36,
        ..Default::default()
    };
    let (mb, report) = Memblock::from_firmware(
        [
            FirmwareEntry::new(0, 0, Usable),
            FirmwareEntry::new(63 * GIB, 2 * GIB, Usable),
            FirmwareEntry::new(u64::MAX - 5, 100, Usable),
        ],
        cfg,
    )
    .unwrap();
    assert_eq!(spans(mb.memory()), [(63 * GIB, 64 * GIB)]);
    assert_eq!(report.zero_length_entries, 1);
    assert_eq!(report.beyond_phys_bytes, GIB + 6);
    let err = Memblock::from_firmware([FirmwareEntry::new(0, 0xfff, Usable)], cfg).unwrap_err();
    assert_eq!(err, MemblockError::NoUsableMemory);
    assert!(err.to_string().contains("no whole page"));
    let err = Memblock::new(MemblockConfig {
        phys_addr_bits: 64,
        ..Default::default()
    })
    .unwrap_err();
    assert!(err.to_string().contains("64 bits"));
}

#[test]
fn capacity_overflow_is_an_error_and_leaves_table_intact() {
    let cfg = MemblockConfig {
        max_regions: 3,
        ..Default::default()
    };
    let map: Vec<_> = (0..4)
        .map(|i| FirmwareEntry::new(i * 2 * MIB, MIB, Usable))
        .collect();
    let err = Memblock::from_firmware(&map, cfg).unwrap_err();
    assert!(matches!(
        err,
        MemblockError::TooManyRegions {
            table: TableKind::Memory,
            needed: 4,
            max_regions: 3
        }
    ));
    let (mut mb, _) = Memblock::from_firmware(&map[..3], cfg).unwrap();
    let before = spans(mb.memory());
    // Splitting the middle region would need a fourth.
    assert!(mb.remove(2 * MIB + 0x1000, 0x1000).is_err());
    assert_eq!(spans(mb.memory()), before);
    // Filling a gap merges, shrinking the table.
    mb.add(MIB, MIB, 0).unwrap();
    assert_eq!(spans(mb.memory()), [(0, 3 * MIB), (4 * MIB, 5 * MIB)]);
}

#[test]
fn errors_name_the_table_that_overflowed() {
    // The message is all an operator sees on a failed boot: it must say
    // which of the two tables hit its cap.
    let cfg = MemblockConfig {
        max_regions: 2,
        ..Default::default()
    };
    let (mut mb, _) =
        Memblock::from_firmware([FirmwareEntry::new(0, 16 * MIB, Usable)], cfg).unwrap();
    mb.reserve(MIB, 0x1000).unwrap();
    mb.reserve(3 * MIB, 0x1000).unwrap();
    let err = mb.reserve(5 * MIB, 0x1000).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("memblock: the reserved table would need 3 regions but holds at most 2;"),
        "{err}"
    );
    mb.remove(MIB, 0x1000).unwrap();
    let err = mb.remove(3 * MIB, 0x1000).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("memblock: the memory table would need 3 regions but holds at most 2;"),
        "{err}"
    );
    let err = MemblockError::OutOfMemory {
        table: TableKind::Reserved,
    };
    assert!(
        err.to_string()
            .contains("out of heap memory growing the reserved table"),
        "{err}"
    );
}

#[test]
fn unaligned_ram_report_counts_every_lost_byte() {
    // Three RAM runs, hand-rounded inward: [0, 0x1800) keeps page 0 and
    // loses 0x800; [0x10000, 0x10800) is under a page and loses all
    // 0x800; [0x20400, 0x21c00) crosses a page boundary without holding a
    // whole page and loses all 0x1800.
    let (mb, report) = build(&[
        FirmwareEntry::new(0, 0x1800, Usable),
        FirmwareEntry::new(0x10000, 0x800, Usable),
        FirmwareEntry::new(0x20400, 0x1800, Bootloader),
    ]);
    assert_eq!(spans(mb.memory()), [(0, 0x1000)]);
    assert_eq!(report.unaligned_ram_bytes, 0x800 + 0x800 + 0x1800);
    // In-use RAM still rounds outward, whole page or not.
    assert_eq!(spans(mb.reserved()), [(0x20000, 0x22000)]);
}

#[test]
fn ranges_may_end_exactly_at_the_phys_addr_width() {
    let mut mb = Memblock::new(MemblockConfig {
        phys_addr_bits: 40,
        ..Default::default()
    })
    .unwrap();
    assert_eq!(mb.phys_addr_bits(), 40);
    assert_eq!(mb.phys_limit_bytes(), 1 << 40);
    let limit = 1u64 << 40;
    mb.add(limit - 2 * MIB, 2 * MIB, 0).unwrap();
    mb.reserve(limit - 0x1000, 0x1000).unwrap();
    mb.free(limit - 0x1000, 0x1000).unwrap();
    mb.remove(limit - MIB, MIB).unwrap();
    assert_eq!(spans(mb.memory()), [(limit - 2 * MIB, limit - MIB)]);
    // One byte more is past the width.
    assert_eq!(
        mb.reserve(limit - 0x1000, 0x1001),
        Err(MemblockError::BeyondPhysAddrWidth {
            base: limit - 0x1000,
            size: 0x1001,
            phys_addr_bits: 40
        })
    );
}

#[test]
fn alloc_range_skips_free_ranges_outside_the_limits() {
    // Free: [1, 2) MiB below the limits, [4, 8) MiB across them, [16, 32)
    // MiB above them. Only [4, 5) MiB is inside [3, 5) MiB, and top-down
    // takes its last page.
    let (mut mb, _) = build(&[
        FirmwareEntry::new(MIB, MIB, Usable),
        FirmwareEntry::new(4 * MIB, 4 * MIB, Usable),
        FirmwareEntry::new(16 * MIB, 16 * MIB, Usable),
    ]);
    assert_eq!(
        mb.alloc_range(0x1000, 0, 3 * MIB, 5 * MIB, None),
        Ok(5 * MIB - 0x1000)
    );
    // Limits that hold no free byte at all fail.
    assert!(matches!(
        mb.alloc_range(0x1000, 0, 2 * MIB, 4 * MIB, None),
        Err(MemblockError::AllocFailed { .. })
    ));
}

#[test]
fn alloc_takes_a_free_range_of_exactly_the_size() {
    let (mut mb, _) = build(&[FirmwareEntry::new(MIB, 0x2000, Usable)]);
    assert_eq!(mb.alloc(0x2000, 0, None), Ok(MIB));
    assert_eq!(spans(mb.reserved()), [(MIB, MIB + 0x2000)]);
}

#[test]
fn sub_page_affinity_entry_vanishes() {
    // An SRAT entry that holds no whole page once rounded down is
    // dropped: it neither claims memory nor conflicts with the entry
    // around it.
    let (mut mb, mut report) = build(&[FirmwareEntry::new(0, 2 * GIB, Usable)]);
    mb.apply_affinity(
        [
            NodeAffinity::new(0, 2 * GIB, 0),
            NodeAffinity::new(GIB + 0x100, 0x100, 1),
        ],
        &mut report,
    )
    .unwrap();
    let nodes: Vec<_> = mb.memory().regions().iter().map(|r| r.nid).collect();
    assert_eq!(nodes, [0]);
    assert_eq!(mb.node_ids(), [0]);
    assert_eq!(report.no_affinity_bytes, 0);
}

#[test]
fn min_and_max_pfn_bound_present_memory() {
    // Linux memblock_start_of_DRAM() and max_pfn: the first and one past
    // the last page of memory, holes and reservations aside.
    let (mb, _) = build(&[
        FirmwareEntry::new(4 * GIB, 4 * GIB, Usable),
        FirmwareEntry::new(MIB, 2 * GIB - MIB, Usable),
        FirmwareEntry::new(MIB, MIB, Bootloader),
    ]);
    assert_eq!(mb.min_pfn(), Some(0x100));
    assert_eq!(mb.max_pfn(), Some(0x200000));
    let empty = Memblock::new(MemblockConfig::default()).unwrap();
    assert_eq!((empty.min_pfn(), empty.max_pfn()), (None, None));
}

#[test]
fn add_remove_reserve_free() {
    let mut mb = Memblock::new(MemblockConfig::default()).unwrap();
    mb.add(0x1800, 0x3000, 0).unwrap(); // inward: [0x2000, 0x4000)
    assert_eq!(spans(mb.memory()), [(0x2000, 0x4000)]);
    mb.add(0, 0x10000, 1).unwrap(); // existing memory keeps node 0
    let r = mb.memory().regions();
    assert_eq!((r[0].nid, r[1].nid, r[2].nid), (1, 0, 1));
    mb.remove(0x2fff, 2).unwrap(); // outward: pages 2 and 3
    assert_eq!(spans(mb.memory()), [(0, 0x2000), (0x4000, 0x10000)]);
    mb.reserve(0x5001, 1).unwrap();
    mb.reserve(0x6000, 0x1000).unwrap();
    assert_eq!(spans(mb.reserved()), [(0x5000, 0x7000)]);
    mb.free(0x5000, 0x800).unwrap(); // outward, as reserve: page 5
    assert_eq!(spans(mb.reserved()), [(0x6000, 0x7000)]);
    assert!(mb.is_region_reserved(0x6fff, 1));
    assert!(matches!(
        mb.add(0, 1 << 47, 0),
        Err(MemblockError::BeyondPhysAddrWidth { .. })
    ));
    assert!(matches!(
        mb.reserve(u64::MAX, 2),
        Err(MemblockError::RangeOverflow { .. })
    ));
    assert!(matches!(
        mb.add(0, 0x1000, 64),
        Err(MemblockError::InvalidNode { nid: 64 })
    ));
}

#[test]
fn affinity_splits_at_node_boundaries() {
    let (mut mb, mut report) = build(&[FirmwareEntry::new(0, 8 * GIB, Usable)]);
    mb.apply_affinity(
        [
            NodeAffinity::new(4 * GIB, 2 * GIB, 1),
            NodeAffinity::new(0, 4 * GIB, 0),
            NodeAffinity::new(6 * GIB, GIB, 2),
        ],
        &mut report,
    )
    .unwrap();
    let got: Vec<_> = mb
        .memory()
        .regions()
        .iter()
        .map(|r| (r.base, r.end(), r.nid))
        .collect();
    assert_eq!(
        got,
        [
            (0, 6 * GIB - 2 * GIB, 0),
            (4 * GIB, 6 * GIB, 1),
            (6 * GIB, 7 * GIB, 2),
            (7 * GIB, 8 * GIB, 0)
        ]
    );
    assert_eq!(report.no_affinity_bytes, GIB);
    // Node 0's span covers node 1's and 2's memory between its pieces.
    let layout = crate::zones::ZoneLayout::new(&mb);
    assert_eq!(layout.nodes()[0].span, PfnRange::new(0, (8 * GIB) >> 12));
    let err = mb
        .apply_affinity(
            [
                NodeAffinity::new(0, 2 * GIB, 0),
                NodeAffinity::new(GIB, 2 * GIB, 1),
            ],
            &mut report,
        )
        .unwrap_err();
    assert!(matches!(
        err,
        MemblockError::AffinityOverlap {
            first_nid: 0,
            second_nid: 1,
            ..
        }
    ));
}

#[test]
fn alloc_prefers_node_then_falls_back_top_down() {
    let (mut mb, mut report) = build(&[FirmwareEntry::new(0, 4 * GIB, Usable)]);
    mb.apply_affinity(
        [
            NodeAffinity::new(0, 2 * GIB, 0),
            NodeAffinity::new(2 * GIB, 2 * GIB, 1),
        ],
        &mut report,
    )
    .unwrap();
    mb.reserve(2 * GIB - 0x1000, 0x1000).unwrap();
    let a = mb.alloc(2 * MIB, 2 * MIB, Some(0)).unwrap();
    assert_eq!(
        a,
        2 * GIB - 2 * MIB - 2 * MIB,
        "highest 2 MiB-aligned fit below the reserved page"
    );
    let b = mb.alloc(100, 0, Some(1)).unwrap();
    assert_eq!(b, 4 * GIB - 0x1000);
    // Node 1 cannot hold 3 GiB, nor can any node: fails with a message.
    let err = mb.alloc(3 * GIB, 0, Some(1)).unwrap_err();
    assert!(err.to_string().contains("on node 1 or any other node"));
    let c = mb.alloc(GIB + GIB / 2, 0, Some(1)).unwrap();
    assert!(c >= 2 * GIB, "fits on the requested node");
    // Node 1 has under 0.5 GiB left: the next 1 GiB falls back to node 0.
    let d = mb.alloc(GIB, 0, Some(1)).unwrap();
    assert!(d + GIB <= 2 * GIB);
    assert!(matches!(mb.alloc(0, 0, None), Err(MemblockError::ZeroSize)));
    assert!(matches!(
        mb.alloc(1, 3, None),
        Err(MemblockError::BadAlign { align: 3 })
    ));
}

#[test]
fn alloc_never_returns_the_first_page() {
    // Only [0, 8K) is free: the top-down fit for 4 KiB is page 1; after
    // that nothing is left, because page 0 is never handed out.
    let (mut mb, _) = build(&[FirmwareEntry::new(0, 0x2000, Usable)]);
    assert_eq!(mb.alloc(0x1000, 0, None), Ok(0x1000));
    assert!(matches!(
        mb.alloc(0x1000, 0, None),
        Err(MemblockError::AllocFailed { .. })
    ));
    assert!(!mb.is_region_reserved(0, 0x1000), "page 0 stays free");
    // alloc_range with min_addr 0 is clamped the same way.
    let (mut mb, _) = build(&[FirmwareEntry::new(0, 0x1000, Usable)]);
    assert!(mb.alloc_range(0x100, 0, 0, 0x1000, None).is_err());
}

#[test]
fn free_with_the_allocated_size_releases_the_pages() {
    let (mut mb, _) = build(&[FirmwareEntry::new(0, 16 * MIB, Usable)]);
    for size in [1, 100, 0x1000, 0x1001, 3 * 0x1000 + 7] {
        let p = mb.alloc(size, 0, None).unwrap();
        assert!(mb.is_region_reserved(p, size));
        mb.free(p, size).unwrap();
        assert!(
            mb.reserved().regions().is_empty(),
            "free({p:#x}, {size}) after alloc({size}) left {:?}",
            spans(mb.reserved())
        );
    }
}

/// `memblock_add_range()` semantics for a range that covers existing
/// regions with gaps before, between and after them: only the gaps are
/// added, each exactly its size, and the result merges into one region.
/// (Firmware maps reach memblock without overlaps, so only direct adds and
/// reservations exercise this.)
#[test]
fn add_over_existing_regions_fills_only_the_gaps() {
    let mut mb = Memblock::new(MemblockConfig::default()).unwrap();
    mb.reserve(3 * MIB, MIB).unwrap();
    mb.reserve(6 * MIB, MIB).unwrap();
    assert_eq!(
        spans(mb.reserved()),
        [(3 * MIB, 4 * MIB), (6 * MIB, 7 * MIB)]
    );
    mb.reserve(MIB, 8 * MIB).unwrap();
    assert_eq!(spans(mb.reserved()), [(MIB, 9 * MIB)]);
    assert_eq!(mb.reserved().total_bytes(), 8 * MIB);
    // Memory of another node is kept where it was, the gaps take the new
    // node.
    mb.add(2 * MIB, MIB, 1).unwrap();
    mb.add(0, 4 * MIB, 0).unwrap();
    let pieces: Vec<(u64, u64, NodeId)> = mb
        .memory()
        .regions()
        .iter()
        .map(|r| (r.base, r.end(), r.nid))
        .collect();
    assert_eq!(
        pieces,
        [
            (0, 2 * MIB, 0),
            (2 * MIB, 3 * MIB, 1),
            (3 * MIB, 4 * MIB, 0)
        ]
    );
}

proptest::proptest! {
    /// The top-down search from the top equals taking the highest fit over
    /// the free ranges in ascending order (`free_ranges`), for any node,
    /// size, alignment and limits, on maps whose nodes interleave.
    #[test]
    fn find_top_down_equals_the_last_fit_of_the_ascending_free_ranges(
        ram in proptest::collection::vec((0u64..64, 1u64..16), 1..8),
        nodes in proptest::collection::vec((0u64..64, 0u32..3), 0..6),
        reserve in proptest::collection::vec((0u64..1024, 1u64..48), 0..10),
        size in 1u64..(8 * MIB),
        align_shift in 12u32..23,
        limits in (0u64..(64 * 16 * MIB), 0u64..(64 * 16 * MIB)),
        nid in proptest::option::of(0u32..3),
        tight in proptest::option::of(proptest::prelude::any::<proptest::sample::Index>()),
    ) {
        // RAM in 16 MiB units, nodes in 16 MiB units, reservations in 1 MiB
        // units: ranges that share, split and straddle each other.
        let map: Vec<FirmwareEntry> = ram.iter().map(|&(at, len)| FirmwareEntry::new(at * 16 * MIB, len * 16 * MIB, Usable)).collect();
        let (mut mb, mut report) = build(&map);
        let affinity: Vec<NodeAffinity> = nodes.iter().map(|&(at, n)| NodeAffinity::new(at * 16 * MIB, 8 * 16 * MIB, n)).collect();
        if mb.apply_affinity(affinity, &mut report).is_err() {
            return Ok(()); // overlapping entries of two nodes: refused, nothing to search
        }
        for &(at, len) in &reserve {
            mb.reserve(at * MIB + 0x800, len * MIB).unwrap();
        }
        let (min_addr, max_addr) = (limits.0.min(limits.1), limits.0.max(limits.1));
        // Half the searches ask for exactly one free range's size: a fit
        // with no page to spare, where an edge off by one shows.
        let free: Vec<PfnRange> = mb.free_ranges(nid).map(|(r, _)| r).collect();
        let (size, align) = match tight.filter(|_| !free.is_empty()) {
            Some(i) => (i.get(&free).nr_pages() << PAGE_SHIFT, PAGE_SIZE),
            None => (page_round_up(size), 1u64 << align_shift),
        };
        let (min_addr, max_addr) = if tight.is_some() { (0, u64::MAX) } else { (min_addr, max_addr) };
        let mut expect = None;
        for (free, _) in mb.free_ranges(nid) {
            let lo = (free.start << PAGE_SHIFT).max(min_addr.max(PAGE_SIZE));
            let hi = (free.end << PAGE_SHIFT).min(max_addr);
            if hi >= lo && hi - lo >= size {
                let candidate = (hi - size) & !(align - 1);
                if candidate >= lo {
                    expect = Some(candidate);
                }
            }
        }
        proptest::prop_assert_eq!(mb.find_top_down(size, align, min_addr, max_addr, nid), expect);
    }
}
