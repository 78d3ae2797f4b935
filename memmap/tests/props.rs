//! Property tests over random firmware maps: normalisation, iterators,
//! `next_valid_pfn`, deferral split, strategy equivalence, memory blocks.
//! Reference models here are deliberately naive (elementary intervals,
//! per-PFN arrays, linear scans) so they share no code with the crate.

use memboot_contract::option_values::BlockLookup;
use memmap::firmware::{FirmwareEntry, NodeAffinity, RegionKind};
use memmap::init::{
    init_memmap, init_pfn_range, sections_to_back, split_deferred, Strategy as InitStrategy,
};
use memmap::memblock::{Memblock, MemblockConfig, MemblockRegion, NUMA_NO_NODE};
use memmap::memory_block::{probe_memory_block_size, MemoryBlockSize, MemoryBlocks};
use memmap::page::{PageLayout, StructPage};
use memmap::page32::StructPage32;
use memmap::page8::StructPage8;
use memmap::pageblock::PageblockMaps;
use memmap::sections::{present_sections, vmemmap_backing_ranges, Vmemmap};
use memmap::store::{Memmap, VecBacking};
use memmap::zones::ZoneLayout;
use memmap::{section_nr_to_pfn, DeferredRange, PfnRange, ZoneType, PAGES_PER_SECTION, PAGE_SIZE};
use proptest::collection::vec;
use proptest::prelude::*;

const PAGE: u64 = PAGE_SIZE;

/// `n` cases, unless `PROPTEST_CASES` is set: a mutation-testing run
/// (`PROPTEST_CASES=... cargo mutants`) trades strength for speed, while a
/// plain `cargo test` keeps the full counts below. (`with_cases` alone would
/// override the variable, which proptest reads only into its default.)
fn cases(n: u32) -> ProptestConfig {
    match std::env::var("PROPTEST_CASES") {
        Ok(v) => {
            ProptestConfig::with_cases(v.parse().expect("PROPTEST_CASES must be a number of cases"))
        }
        Err(_) => ProptestConfig::with_cases(n),
    }
}

fn arb_kind() -> impl Strategy<Value = RegionKind> {
    prop_oneof![
        6 => Just(RegionKind::Usable),
        1 => Just(RegionKind::Bootloader),
        1 => Just(RegionKind::AcpiReclaimable),
        1 => Just(RegionKind::AcpiNvs),
        1 => Just(RegionKind::Reserved),
        1 => Just(RegionKind::Unusable),
    ]
}

/// An entry in a `2^space_bits` address space: log-uniform length, page
/// aligned or not, occasionally running to 2^64.
fn arb_entry(space_bits: u32) -> impl Strategy<Value = FirmwareEntry> {
    (
        0..(1u64 << space_bits),
        0..=space_bits,
        any::<u64>(),
        arb_kind(),
        0u8..10,
    )
        .prop_map(move |(start, len_bits, r, kind, shape)| {
            let len = if len_bits == 0 {
                0
            } else {
                r % (1u64 << len_bits)
            };
            match shape {
                0..=5 => FirmwareEntry::new(start & !(PAGE - 1), len & !(PAGE - 1), kind),
                6..=8 => FirmwareEntry::new(start, len, kind),
                _ => FirmwareEntry::new(start, u64::MAX - (r % 3), kind),
            }
        })
}

/// Node affinity: cut the space at random points, node per piece, ~10% gaps.
fn arb_affinity(space_bits: u32) -> impl Strategy<Value = Vec<NodeAffinity>> {
    (
        vec(0..(1u64 << space_bits), 0..8),
        vec(0u8..10, 9),
        1u32..=8,
    )
        .prop_map(move |(mut cuts, gaps, nr_nodes)| {
            cuts.push(0);
            cuts.push(1u64 << space_bits);
            cuts.sort_unstable();
            cuts.dedup();
            cuts.windows(2)
                .enumerate()
                .filter(|(i, _)| gaps[*i] != 0)
                .map(|(i, w)| NodeAffinity::new(w[0], w[1] - w[0], i as u32 % nr_nodes))
                .collect()
        })
}

/// (phys bits, entries, affinity) over up to 2^max_bits bytes.
fn arb_map(
    min_bits: u32,
    max_bits: u32,
    max_entries: usize,
) -> impl Strategy<Value = (u32, Vec<FirmwareEntry>, Vec<NodeAffinity>)> {
    (min_bits..=max_bits).prop_flat_map(move |bits| {
        (
            prop_oneof![Just(46u32), (bits.max(32)..=46)],
            vec(arb_entry(bits), 1..max_entries),
            arb_affinity(bits),
        )
    })
}

/// Naive reference: worst kind per elementary interval, RAM runs rounded
/// inward, in-use RAM rounded outward (then unioned).
type ByteRanges = Vec<(u64, u64)>;

fn reference_tables(entries: &[FirmwareEntry], phys_bits: u32) -> (ByteRanges, ByteRanges) {
    let limit = 1u64 << phys_bits;
    let clipped: Vec<(u64, u64, RegionKind)> = entries
        .iter()
        .filter(|e| e.len_bytes > 0)
        .map(|e| {
            (
                e.start,
                e.start.saturating_add(e.len_bytes).min(limit),
                e.kind,
            )
        })
        .filter(|(s, e, _)| s < e)
        .collect();
    let mut points: Vec<u64> = clipped.iter().flat_map(|(s, e, _)| [*s, *e]).collect();
    points.sort_unstable();
    points.dedup();
    let mut ram_runs: Vec<(u64, u64)> = Vec::new();
    let mut rsv: Vec<(u64, u64)> = Vec::new();
    for w in points.windows(2) {
        let (a, b) = (w[0], w[1]);
        let worst = clipped
            .iter()
            .filter(|(s, e, _)| *s <= a && b <= *e)
            .map(|(_, _, k)| *k)
            .max();
        let Some(kind) = worst else { continue };
        if matches!(kind, RegionKind::Usable | RegionKind::Bootloader) {
            match ram_runs.last_mut() {
                Some(last) if last.1 == a => last.1 = b,
                _ => ram_runs.push((a, b)),
            }
        }
        if kind == RegionKind::Bootloader {
            rsv.push((a & !(PAGE - 1), b.div_ceil(PAGE) * PAGE));
        }
    }
    let memory = ram_runs
        .into_iter()
        .map(|(s, e)| (s.div_ceil(PAGE) * PAGE, e & !(PAGE - 1)))
        .filter(|(s, e)| s < e)
        .collect();
    rsv.sort_unstable();
    let mut reserved: Vec<(u64, u64)> = Vec::new();
    for (s, e) in rsv {
        match reserved.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => reserved.push((s, e)),
        }
    }
    (memory, reserved)
}

/// Regions merged regardless of node (what the table covers).
fn coverage(regions: &[MemblockRegion]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for r in regions {
        match out.last_mut() {
            Some(last) if last.1 == r.base => last.1 = r.end(),
            _ => out.push((r.base, r.end())),
        }
    }
    out
}

fn check_table_invariants(regions: &[MemblockRegion], limit: u64) -> Result<(), TestCaseError> {
    for r in regions {
        prop_assert!(
            r.size > 0 && r.base % PAGE == 0 && r.size % PAGE == 0,
            "{r:?}"
        );
        prop_assert!(r.end() <= limit);
    }
    for w in regions.windows(2) {
        prop_assert!(w[0].end() <= w[1].base, "sorted and disjoint: {:?}", w);
        prop_assert!(
            !(w[0].end() == w[1].base && w[0].nid == w[1].nid && w[0].flags == w[1].flags),
            "mergeable neighbours left unmerged: {:?}",
            w
        );
    }
    Ok(())
}

fn build(phys_bits: u32, entries: &[FirmwareEntry], affinity: &[NodeAffinity]) -> Option<Memblock> {
    let cfg = MemblockConfig {
        phys_addr_bits: phys_bits,
        ..Default::default()
    };
    let (mut mb, mut report) = Memblock::from_firmware(entries, cfg).ok()?;
    mb.apply_affinity(affinity.iter().copied(), &mut report)
        .unwrap();
    Some(mb)
}

fn pfn_ranges(mb: &Memblock) -> Vec<PfnRange> {
    mb.mem_pfn_ranges(None).map(|(r, _)| r).collect()
}

/// Pages of `a ∩ b` for two sorted disjoint lists, by brute force pairs.
fn overlap_pages(a: &[PfnRange], b: &[PfnRange]) -> u64 {
    a.iter()
        .flat_map(|x| b.iter().filter_map(move |y| x.intersect(y)))
        .map(|r| r.nr_pages())
        .sum()
}

proptest! {
    #![proptest_config(cases(1000))]

    /// The vmemmap's backing runs (built per memory region) are the
    /// present sections (one at a time) merged into runs of one node.
    #[test]
    fn backing_ranges_are_the_present_sections_in_runs((phys_bits, entries, affinity) in arb_map(20, 40, 24)) {
        let Some(mb) = build(phys_bits, &entries, &affinity) else { return Ok(()) };
        let vm = Vmemmap::linux_default();
        let mut runs: Vec<(u32, u64, u64)> = Vec::new();
        for s in present_sections(&mb) {
            match runs.last_mut() {
                Some(last) if last.0 == s.nid && last.2 == s.section_nr => last.2 += 1,
                _ => runs.push((s.nid, s.section_nr, s.section_nr + 1)),
            }
        }
        let got: Vec<(u32, u64, u64)> = vmemmap_backing_ranges(&mb, &vm, 64)
            .iter()
            .map(|r| (r.nid, r.section_nrs.start, r.section_nrs.end))
            .collect();
        prop_assert_eq!(got, runs);
        for r in vmemmap_backing_ranges(&mb, &vm, 64) {
            prop_assert_eq!(r.bytes(), r.nr_sections() * (2 << 20));
        }
        for r in vmemmap_backing_ranges(&mb, &vm, 32) {
            prop_assert_eq!(r.bytes(), r.nr_sections() * (1 << 20));
        }
    }
}

proptest! {
    #![proptest_config(cases(3000))]

    /// Normalised tables are sorted, disjoint, merged and cover exactly the
    /// usable input; affinity keeps coverage and tags each piece right.
    #[test]
    fn normalisation_matches_reference((phys_bits, entries, affinity) in arb_map(20, 46, 48)) {
        let (ref_mem, ref_rsv) = reference_tables(&entries, phys_bits);
        let cfg = MemblockConfig { phys_addr_bits: phys_bits, ..Default::default() };
        let built = Memblock::from_firmware(&entries, cfg);
        let Ok((mut mb, mut report)) = built else {
            prop_assert!(ref_mem.is_empty(), "error {:?} but reference has memory", built.err());
            return Ok(());
        };
        let limit = 1u64 << phys_bits;
        check_table_invariants(mb.memory().regions(), limit)?;
        check_table_invariants(mb.reserved().regions(), u64::MAX)?;
        prop_assert_eq!(coverage(mb.memory().regions()), ref_mem.clone());
        prop_assert_eq!(coverage(mb.reserved().regions()), ref_rsv);
        prop_assert_eq!(report.zero_length_entries, entries.iter().filter(|e| e.len_bytes == 0).count());

        mb.apply_affinity(affinity.iter().copied(), &mut report).unwrap();
        check_table_invariants(mb.memory().regions(), limit)?;
        prop_assert_eq!(coverage(mb.memory().regions()), ref_mem);
        for r in mb.memory().regions() {
            // The node of every byte of the region is its nid (or 0 if no
            // affinity covers it): check both ends and every cut inside.
            let node_at = |addr: u64| {
                affinity.iter().find(|a| a.start & !(PAGE - 1) <= addr && addr < (a.start + a.len_bytes) & !(PAGE - 1)).map_or(0, |a| a.nid)
            };
            prop_assert_eq!(node_at(r.base), r.nid);
            prop_assert_eq!(node_at(r.end() - PAGE), r.nid);
            for a in &affinity {
                let cut = a.start & !(PAGE - 1);
                if r.base < cut && cut < r.end() {
                    prop_assert_eq!(node_at(cut), r.nid, "region {:?} crosses a node boundary", r);
                }
            }
        }
        // Generated affinity entries are disjoint: covered = Σ overlaps.
        let covered: u64 = mb.memory().regions().iter().flat_map(|r| affinity.iter().map(move |a| {
            let (s, e) = (a.start & !(PAGE - 1), (a.start + a.len_bytes) & !(PAGE - 1));
            r.end().min(e).saturating_sub(r.base.max(s))
        })).sum();
        prop_assert_eq!(report.no_affinity_bytes, mb.memory().total_bytes() - covered);
    }
}

proptest! {
    #![proptest_config(cases(3000))]

    /// Small maps, checked PFN by PFN: pfn_valid, next_valid_pfn (plain and
    /// cached, against a brute-force scan), and that the iterators visit
    /// every present PFN exactly once; after random reserve/remove edits.
    #[test]
    fn small_maps_pfn_by_pfn(
        (phys_bits, entries, affinity) in arb_map(16, 23, 24),
        edits in vec((any::<bool>(), 0u64..(1 << 23), 0u64..(1 << 20)), 0..8),
        queries in vec(0u64..4200, 0..64),
    ) {
        // Keep everything below 16 MiB so per-PFN arrays stay small.
        let entries: Vec<FirmwareEntry> = entries.into_iter().map(|e| FirmwareEntry { len_bytes: e.len_bytes.min(1 << 23), ..e }).collect();
        let Some(mut mb) = build(phys_bits, &entries, &affinity) else { return Ok(()) };
        for &(is_remove, base, size) in &edits {
            if is_remove { mb.remove(base, size).unwrap() } else { mb.reserve(base, size).unwrap() }
        }
        let nr_pfns = (1usize << 24) / PAGE as usize + 8;
        let mut valid = vec![false; nr_pfns];
        let mut nid_of = vec![u32::MAX; nr_pfns];
        for r in mb.memory().regions() {
            for pfn in r.pfns().start..r.pfns().end { valid[pfn as usize] = true; nid_of[pfn as usize] = r.nid; }
        }
        let mut reserved = vec![false; nr_pfns];
        for r in mb.reserved().regions() {
            for pfn in r.pfns().start..r.pfns().end.min(nr_pfns as u64) { reserved[pfn as usize] = true; }
        }
        // Iterators: each memory pfn exactly once overall and once per its node.
        let mut seen = vec![0u8; nr_pfns];
        for (r, nid) in mb.mem_pfn_ranges(None) {
            for pfn in r.start..r.end { seen[pfn as usize] += 1; prop_assert_eq!(nid_of[pfn as usize], nid); }
        }
        prop_assert!((0..nr_pfns).all(|p| seen[p] == valid[p] as u8));
        let mut seen_by_node = vec![0u8; nr_pfns];
        for nid in mb.node_ids() {
            for (r, _) in mb.mem_pfn_ranges(Some(nid)) { for pfn in r.start..r.end { seen_by_node[pfn as usize] += 1; } }
        }
        prop_assert_eq!(&seen_by_node, &seen);
        let mut free_seen = vec![0u8; nr_pfns];
        let mut last_end = 0;
        for (r, nid) in mb.free_ranges(None) {
            prop_assert!(!r.is_empty() && r.start >= last_end);
            last_end = r.end;
            for pfn in r.start..r.end { free_seen[pfn as usize] += 1; prop_assert_eq!(nid_of[pfn as usize], nid); }
        }
        for p in 0..nr_pfns {
            prop_assert_eq!(free_seen[p], (valid[p] && !reserved[p]) as u8, "free pfn {}", p);
        }
        let mut rsv_seen = vec![0u8; nr_pfns];
        for r in mb.reserved_mem_ranges(PfnRange::new(0, u64::MAX)) { for pfn in r.start..r.end { rsv_seen[pfn as usize] += 1; } }
        prop_assert!((0..nr_pfns).all(|p| rsv_seen[p] == (valid[p] && reserved[p]) as u8));

        // pfn_valid and next_valid_pfn against a brute-force scan.
        // Brute-force scan, done once from the top so each query is O(1).
        let mut next_from = vec![None; nr_pfns + 1];
        for q in (0..nr_pfns).rev() {
            next_from[q] = if valid[q] { Some(q as u64) } else { next_from[q + 1] };
        }
        let brute_next = |p: usize| next_from[p.min(nr_pfns)];
        let mut cursor = mb.valid_pfn_cursor();
        for (p, &is_valid) in valid.iter().enumerate() {
            prop_assert_eq!(mb.pfn_valid(p as u64), is_valid);
            let expect = brute_next(p);
            prop_assert_eq!(mb.next_valid_pfn(p as u64), expect, "plain at {}", p);
            prop_assert_eq!(cursor.next_valid_pfn(p as u64), expect, "cached, sequential, at {}", p);
            prop_assert!(cursor.cached_idx() < mb.memory().len().max(1));
        }
        for &q in &queries {
            prop_assert_eq!(cursor.next_valid_pfn(q), brute_next(q as usize), "cached, random, at {}", q);
        }
        // The Linux-style walk: pfn++ over valid, jump with next_valid_pfn
        // over invalid; it must visit exactly the valid pfns.
        let mut cursor = mb.valid_pfn_cursor();
        let mut walked = vec![false; nr_pfns];
        let mut pfn = 0u64;
        while let Some(next) = cursor.next_valid_pfn(pfn) {
            walked[next as usize] = true;
            pfn = next + 1;
        }
        prop_assert_eq!(walked, valid);
    }
}

proptest! {
    #![proptest_config(cases(3000))]

    /// Large sparse maps (to 64 TiB): free ranges = memory − reserved by
    /// interval arithmetic; next_valid_pfn at boundaries vs a linear scan of
    /// the region list; the deferred plan partitions present pages; holes and
    /// zones add up.
    #[test]
    fn large_maps_iterators_zones_and_deferral(
        (phys_bits, entries, affinity) in arb_map(30, 46, 64),
        random_pfns in vec(any::<u64>(), 16),
    ) {
        let Some(mb) = build(phys_bits, &entries, &affinity) else { return Ok(()) };
        let mem = pfn_ranges(&mb);
        let rsv: Vec<PfnRange> = mb.reserved_pfn_ranges().collect();
        let free: Vec<PfnRange> = mb.free_ranges(None).map(|(r, _)| r).collect();
        let mem_pages: u64 = mem.iter().map(|r| r.nr_pages()).sum();
        prop_assert_eq!(free.iter().map(|r| r.nr_pages()).sum::<u64>(), mem_pages - overlap_pages(&mem, &rsv));
        prop_assert_eq!(overlap_pages(&free, &rsv), 0);
        prop_assert_eq!(overlap_pages(&free, &mem), free.iter().map(|r| r.nr_pages()).sum::<u64>());

        let linear_next = |p: u64| mem.iter().find(|r| r.end > p).map(|r| r.start.max(p));
        let mut probes: Vec<u64> = mem.iter().flat_map(|r| [r.start.saturating_sub(1), r.start, r.end - 1, r.end]).collect();
        let max = mb.max_pfn().unwrap_or(1) + 2;
        probes.extend(random_pfns.iter().map(|r| r % max));
        let mut cursor = mb.valid_pfn_cursor();
        for &p in &probes {
            let expect = linear_next(p);
            prop_assert_eq!(mb.next_valid_pfn(p), expect);
            prop_assert_eq!(cursor.next_valid_pfn(p), expect);
            prop_assert_eq!(mb.pfn_valid(p), expect == Some(p));
        }

        let layout = ZoneLayout::new(&mb);
        prop_assert_eq!(layout.present_pages(), mem_pages);
        // Nodes and zones against a scan of each node's ranges (the layout
        // gathers every node in one pass over the regions).
        let mut nids: Vec<u32> = mb.mem_pfn_ranges(None).map(|(_, nid)| nid).collect();
        nids.sort_unstable();
        nids.dedup();
        prop_assert_eq!(layout.nodes().iter().map(|n| n.nid).collect::<Vec<_>>(), nids);
        let mut zones = Vec::new();
        for n in layout.nodes() {
            let node_mem: Vec<PfnRange> = mb.mem_pfn_ranges(Some(n.nid)).map(|(r, _)| r).collect();
            prop_assert_eq!(n.span, PfnRange::new(node_mem[0].start, node_mem[node_mem.len() - 1].end));
            prop_assert_eq!(n.present_pages, node_mem.iter().map(|r| r.nr_pages()).sum::<u64>());
            for zone in ZoneType::ALL {
                if let Some(span) = n.span.intersect(&zone.pfn_limit()) {
                    let present: u64 = node_mem.iter().filter_map(|r| r.intersect(&span)).map(|r| r.nr_pages()).sum();
                    zones.push((n.nid, zone, span, present));
                    prop_assert_eq!(layout.zone(n.nid, zone).map(|z| (z.span, z.present_pages)), Some((span, present)));
                }
            }
        }
        prop_assert_eq!(layout.zones().iter().map(|z| (z.nid, z.zone, z.span, z.present_pages)).collect::<Vec<_>>(), zones);
        prop_assert_eq!(layout.zones().iter().map(|z| z.present_pages).sum::<u64>(), mem_pages);
        for z in layout.zones() {
            prop_assert!(z.span.start >= z.zone.pfn_limit().start && z.span.end <= z.zone.pfn_limit().end);
            prop_assert_eq!(z.spanned_pages(), z.present_pages + z.absent_pages());
        }
        // Holes fill present sections exactly: sections × 32768 = present + holes.
        let section_pages: u64 = layout.present_section_ranges().iter().map(|r| r.nr_pages()).sum();
        prop_assert_eq!(section_pages, mem_pages + layout.hole_pages());
        prop_assert_eq!(present_sections(&mb).count() as u64 * PAGES_PER_SECTION, section_pages);

        // Deferral: eager ∪ deferred = present, disjoint, in order.
        let plan = split_deferred(&mb, &layout);
        let mut all: Vec<(PfnRange, bool)> = plan.eager.iter().map(|e| (e.pfns, true)).chain(plan.deferred.iter().map(|d| (d.pfns, false))).collect();
        all.sort_by_key(|(r, _)| r.start);
        for w in all.windows(2) { prop_assert!(w[0].0.end <= w[1].0.start, "overlap {:?}", w); }
        let ranges: Vec<PfnRange> = all.iter().map(|(r, _)| *r).collect();
        let total: u64 = ranges.iter().map(|r| r.nr_pages()).sum();
        prop_assert_eq!(total, mem_pages);
        prop_assert_eq!(overlap_pages(&ranges, &mem), mem_pages);
        for node in layout.nodes() {
            let highest = layout.highest_zone(node.nid).unwrap();
            let deferred: Vec<_> = plan.deferred.iter().filter(|d| d.nid == node.nid).collect();
            for d in &deferred {
                prop_assert_eq!(d.zone, highest.zone, "only the highest zone defers");
                prop_assert_eq!(mb.pfn_to_nid(d.pfns.start), Some(node.nid));
            }
            // defer_init(): deferral starts at the first section-aligned
            // present PFN with at least PAGES_PER_SECTION present pages of
            // the zone before it. Check against a direct count.
            let zone_mem: Vec<PfnRange> = mb.mem_pfn_ranges(Some(node.nid)).filter_map(|(r, _)| r.intersect(&highest.span)).collect();
            let count_before = |q: u64| -> u64 { zone_mem.iter().map(|r| r.end.min(q).saturating_sub(r.start)).sum() };
            let boundary = deferred.first().map_or(highest.span.end, |d| d.pfns.start);
            if !deferred.is_empty() {
                prop_assert_eq!(boundary % PAGES_PER_SECTION, 0);
                prop_assert!(count_before(boundary) >= PAGES_PER_SECTION);
                let eager_in_zone: u64 = plan.eager.iter().filter(|e| e.nid == node.nid && e.zone == highest.zone).map(|e| e.pfns.nr_pages()).sum();
                prop_assert_eq!(eager_in_zone, count_before(boundary));
            }
            // The last present section-aligned PFN below the boundary must
            // not have qualified (count_before is monotone).
            let prev_aligned = zone_mem.iter().filter(|r| r.start < boundary).filter_map(|r| {
                let q = (r.end.min(boundary) - 1) / PAGES_PER_SECTION * PAGES_PER_SECTION;
                (q >= r.start).then_some(q)
            }).max();
            if let Some(q) = prev_aligned {
                prop_assert!(count_before(q) < PAGES_PER_SECTION, "pfn {:#x} should have been the boundary", q);
            }
        }
    }
}

/// Zero every backed struct page.
fn clear<P: PageLayout>(mm: &mut Memmap<VecBacking<P>>) {
    let nrs: Vec<u64> = mm.backing().section_nrs().collect();
    for nr in nrs {
        mm.pages_mut(PfnRange::new(
            section_nr_to_pfn(nr),
            section_nr_to_pfn(nr + 1),
        ))
        .unwrap()
        .fill(P::ZERO);
    }
}

/// A copy of every backed struct page.
fn snapshot<P: PageLayout>(mm: &Memmap<VecBacking<P>>) -> Vec<P> {
    mm.backing()
        .section_nrs()
        .flat_map(|nr| {
            mm.pages(PfnRange::new(
                section_nr_to_pfn(nr),
                section_nr_to_pfn(nr + 1),
            ))
            .unwrap()
            .to_vec()
        })
        .collect()
}

fn pageblock_bits(pb: &PageblockMaps, layout: &ZoneLayout) -> Vec<Option<u64>> {
    layout
        .zones()
        .iter()
        .flat_map(|z| {
            let m = pb.get(z.nid, z.zone).unwrap();
            (0..m.nr_pageblocks()).map(move |i| m.get_bits((z.span.start & !511) + i * 512))
        })
        .collect()
}

/// Small maps for byte-level comparison: a few regions below 6 GiB, so that
/// DMA, DMA32 and Normal all occur but few sections need backing.
fn arb_small_real_map(
) -> impl Strategy<Value = (Vec<FirmwareEntry>, Vec<NodeAffinity>, Vec<(u64, u64)>)> {
    (
        vec(
            (
                0u64..(6u64 << 30),
                1u64..(160 << 20),
                arb_kind(),
                any::<bool>(),
            ),
            1..6,
        ),
        arb_affinity(33),
        vec((0u64..(6u64 << 30), 0u64..(8 << 20)), 0..6),
    )
        .prop_map(|(raw, aff, rsv)| {
            let entries = raw
                .into_iter()
                .map(|(s, l, k, aligned)| {
                    if aligned {
                        FirmwareEntry::new(s & !0x1f_ffff, l & !0xfff, k)
                    } else {
                        FirmwareEntry::new(s, l, k)
                    }
                })
                .collect();
            (entries, aff, rsv)
        })
}

proptest! {
    #![proptest_config(cases(160))]

    /// All strategies write byte-identical struct pages (same store, so even
    /// the self-linked `lru` addresses match) and pageblock bits; Deferred
    /// leaves exactly its deferred ranges untouched, and with those ranges
    /// done as a worker would, matches fully.
    #[test]
    fn strategies_are_byte_identical(
        (entries, affinity, reservations) in arb_small_real_map(),
        layout in 0..3u8,
    ) {
        match layout {
            0 => strategies_are_byte_identical_at::<StructPage>(&entries, &affinity, reservations)?,
            1 => strategies_are_byte_identical_at::<StructPage32>(&entries, &affinity, reservations)?,
            _ => strategies_are_byte_identical_at::<StructPage8>(&entries, &affinity, reservations)?,
        }
    }
}

proptest! {
    #![proptest_config(cases(1500))]

    /// Block size rules and the registry: O(1) lookup agrees with linear
    /// search for every id, each present section has its block, and node
    /// links are exactly the nodes with memory in the block.
    #[test]
    fn memory_blocks((phys_bits, entries, affinity) in arb_map(30, 37, 24), order in 0u32..5, end_pages in any::<u64>()) {
        let end = (end_pages % (1u64 << 34)) << 12;
        let bz = probe_memory_block_size(end, true).bytes();
        prop_assert!(bz.is_power_of_two() && ((128u64 << 20)..=(2u64 << 30)).contains(&bz));
        if end < (64u64 << 30) { prop_assert_eq!(bz, 128u64 << 20); }
        else if !end.is_multiple_of(128u64 << 20) { prop_assert_eq!(bz, 128u64 << 20); }
        else { prop_assert!(end.is_multiple_of(bz) && (bz == 2u64 << 30 || !end.is_multiple_of(2 * bz))); }
        let metal = probe_memory_block_size(end, false).bytes();
        prop_assert_eq!(metal, if end < (64u64 << 30) { 128u64 << 20 } else { 2u64 << 30 });

        // At most 2^37 bytes (1024 blocks), so the linear baseline stays cheap.
        let entries: Vec<FirmwareEntry> = entries.into_iter().map(|e| FirmwareEntry { len_bytes: e.len_bytes.min(1 << 36), ..e }).collect();
        let Some(mb) = build(phys_bits, &entries, &affinity) else { return Ok(()) };
        let size = MemoryBlockSize::new((128u64 << 20) << order).unwrap();
        let blocks = MemoryBlocks::new(&mb, size).unwrap();
        let max_id = blocks.blocks().last().map_or(0, |b| b.id);
        for id in 0..=max_id + 2 {
            prop_assert_eq!(blocks.find_block(id), blocks.find_block_linear(id));
        }
        for s in present_sections(&mb) {
            let b = blocks.block_of_pfn(section_nr_to_pfn(s.section_nr));
            prop_assert!(b.is_some_and(|b| b.nids.contains(s.nid)));
        }
        for b in blocks.blocks() {
            let mut expect = 0u64;
            for (r, nid) in mb.mem_pfn_ranges(None) {
                if r.intersect(&b.pfns).is_some() { expect |= 1 << nid; }
            }
            prop_assert_eq!(b.nids.0, expect, "block {}", b.id);
        }
        prop_assert!(mb.reserved().regions().iter().all(|r| r.nid == NUMA_NO_NODE));
    }
}

/// [`strategies_are_byte_identical`] with struct pages of layout `P`.
fn strategies_are_byte_identical_at<P: PageLayout>(
    entries: &[FirmwareEntry],
    affinity: &[NodeAffinity],
    reservations: Vec<(u64, u64)>,
) -> Result<(), TestCaseError> {
    let Some(mut mb) = build(46, entries, affinity) else {
        // Not a passed case: proptest counts it as a rejection (and fails
        // the test if the generator makes too many of them).
        return Err(TestCaseError::reject("the map builds no memblock"));
    };
    for (base, size) in reservations {
        mb.reserve(base, size).unwrap();
    }
    let layout = ZoneLayout::new(&mb);
    let mut mm = Memmap::new(VecBacking::<P>::new(sections_to_back(&layout)));
    let mut results = Vec::new();
    for strategy in InitStrategy::ALL {
        clear(&mut mm);
        let pb = PageblockMaps::new(&layout);
        let out = init_memmap(strategy, &mut mm, &mb, &layout, &pb).unwrap();
        prop_assert_eq!(
            out.stats.eager_pages + out.stats.deferred_pages,
            mb.memory().total_pages()
        );
        prop_assert_eq!(out.stats.hole_pages, layout.hole_pages());
        results.push((snapshot(&mm), pageblock_bits(&pb, &layout), out.clone()));
        if matches!(strategy, InitStrategy::Deferred | InitStrategy::OnDemand) {
            // Untouched exactly on deferred pages.
            for d in &out.deferred {
                for pfn in d.pfns.start..d.pfns.end {
                    prop_assert_eq!(*mm.page(pfn).unwrap(), P::ZERO);
                }
            }
            // Eager pages equal the Regions result.
            check_eager_pages_equal(
                &mm,
                &out.deferred,
                &results[results.len() - 1].0,
                &results[1].0,
            )?;
            let mut reserved_in_deferred = 0;
            for d in &out.deferred {
                reserved_in_deferred += init_pfn_range(&mut mm, &pb, &mb, d.pfns, d.zone, d.nid)
                    .unwrap()
                    .reserved;
            }
            prop_assert_eq!(
                out.stats.reserved_pages + reserved_in_deferred,
                results[1].2.stats.reserved_pages
            );
            results.push((snapshot(&mm), pageblock_bits(&pb, &layout), out));
        }
    }
    prop_assert!(results[0].0 == results[1].0, "PerPfn and Regions differ");
    prop_assert_eq!(&results[0].1, &results[1].1);
    prop_assert!(
        results[3].0 == results[1].0,
        "Deferred + workers and Regions differ"
    );
    prop_assert_eq!(&results[3].1, &results[1].1);
    // OnDemand leaves every memory page; with them done, it is Regions.
    prop_assert_eq!(results[4].2.stats.eager_pages, 0);
    prop_assert!(
        results[5].0 == results[1].0,
        "OnDemand + workers and Regions differ"
    );
    prop_assert_eq!(&results[5].1, &results[1].1);
    prop_assert_eq!(results[0].2.stats, results[1].2.stats);
    check_reserved_flags_and_links(&mm, &mb)
}

/// Outside the `deferred` ranges, the pages of `snap` (every backed
/// section's, in order) equal those of `regions`.
fn check_eager_pages_equal<P: PageLayout>(
    mm: &Memmap<VecBacking<P>>,
    deferred: &[DeferredRange],
    snap: &[P],
    regions: &[P],
) -> Result<(), TestCaseError> {
    let mut idx = 0usize;
    for nr in mm.backing().section_nrs() {
        for off in 0..PAGES_PER_SECTION {
            let pfn = section_nr_to_pfn(nr) + off;
            if !deferred.iter().any(|d| d.pfns.contains(pfn)) {
                prop_assert_eq!(snap[idx], regions[idx], "eager pfn {:#x}", pfn);
            }
            idx += 1;
        }
    }
    Ok(())
}

/// PG_reserved exactly on holes and reserved memory; the links of every
/// present page name its zone and node.
fn check_reserved_flags_and_links<P: PageLayout>(
    mm: &Memmap<VecBacking<P>>,
    mb: &Memblock,
) -> Result<(), TestCaseError> {
    for nr in mm.backing().section_nrs() {
        for pfn in section_nr_to_pfn(nr)..section_nr_to_pfn(nr + 1) {
            let p = mm.page(pfn).unwrap();
            let expect = !mb.pfn_valid(pfn)
                || mb
                    .reserved_mem_ranges(PfnRange::new(pfn, pfn + 1))
                    .next()
                    .is_some();
            prop_assert_eq!(p.is_reserved(), expect, "pfn {:#x}", pfn);
            // Left as the hand-off takes it: free memory to be freed.
            prop_assert_eq!(p.refcount(), i32::from(expect), "pfn {:#x}", pfn);
            if mb.pfn_valid(pfn) {
                prop_assert!(p.links_match(
                    pfn,
                    ZoneType::of_pfn(pfn),
                    mb.pfn_to_nid(pfn).unwrap()
                ));
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(cases(1000))]

    /// `memory_block_lookup=linear` (Linux before 4fb6eabf1037) builds the
    /// same registry as the indexed walk, and both are what a brute-force
    /// model of the memory regions says: a block for every block-sized
    /// range with memory, its present sections counted one by one, linked
    /// to every node with memory in it, nothing else.
    #[test]
    fn linear_lookup_builds_the_model_s_blocks((phys_bits, entries, affinity) in arb_map(30, 37, 24), order in 0u32..5) {
        let entries: Vec<FirmwareEntry> = entries.into_iter().map(|e| FirmwareEntry { len_bytes: e.len_bytes.min(1 << 36), ..e }).collect();
        let Some(mb) = build(phys_bits, &entries, &affinity) else { return Ok(()) };
        let bytes = (128u64 << 20) << order;
        let size = MemoryBlockSize::new(bytes).unwrap();
        // The model: per 128 MiB section, the nodes of the regions that
        // touch it; per block, its sections with any memory.
        const SECTION: u64 = 128 << 20;
        let mut model: std::collections::BTreeMap<u64, (u32, u64)> = Default::default();
        let regions = mb.memory().regions();
        let last = regions.iter().map(|r| r.base + r.size).max().unwrap_or(0);
        for sec in 0..last.div_ceil(SECTION) {
            let (lo, hi) = (sec * SECTION, (sec + 1) * SECTION);
            let nids = regions.iter().filter(|r| r.size > 0 && r.base < hi && r.base + r.size > lo)
                .fold(0u64, |m, r| m | 1 << r.nid);
            if nids != 0 {
                let e = model.entry(sec * SECTION / bytes).or_default();
                e.0 += 1;
                e.1 |= nids;
            }
        }
        let got: std::collections::BTreeMap<u64, (u32, u64)> = MemoryBlocks::new_linear(&mb, size).unwrap()
            .blocks().iter().map(|b| (b.id, (b.nr_present_sections, b.nids.0))).collect();
        prop_assert_eq!(&got, &model);
        let linear = MemoryBlocks::with_lookup(&mb, size, BlockLookup::Linear).unwrap();
        let indexed = MemoryBlocks::with_lookup(&mb, size, BlockLookup::Indexed).unwrap();
        prop_assert_eq!(linear.blocks(), indexed.blocks());
        for b in linear.blocks() {
            prop_assert_eq!(b.pfns.start, b.id * (bytes >> 12));
            prop_assert_eq!(b.pfns.end, (b.id + 1) * (bytes >> 12));
            prop_assert_eq!(linear.find_block(b.id), Some(b));
        }
    }
}
