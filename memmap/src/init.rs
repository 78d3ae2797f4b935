//! Memmap init strategies: writing every present page's struct page through
//! a [`Memmap`], three ways Linux has done it.
//!
//! * [`Strategy::PerPfn`]: pre-5.8 `memmap_init_zone()`: for every node and
//!   zone, walk each PFN of the zone *span*, skip it unless it is memory
//!   (`early_pfn_valid()`) of this node (`early_pfn_in_nid()`), both by
//!   binary search: O(n log m) over the span, holes included.
//! * [`Strategy::Regions`]: 73a6e474cb37 ("mm: memmap_init: iterate over
//!   memblock regions rather that check each PFN", 5.8): walk memblock
//!   regions clipped to each zone and initialise every PFN of them. As
//!   merged, the deferral check compared the *region* end with the node end,
//!   so every region but the last was initialised eagerly: the 1 TB VMware
//!   boot regression. `Regions` here initialises everything, which is that
//!   behaviour in the common case.
//! * [`Strategy::Deferred`]: region walk with dc2da7b45ffe ("mm: memmap
//!   defer init doesn't work as expected"): `defer_init()` judges against
//!   the *zone* end, so low zones are always done and in a node's highest
//!   zone only the first section's worth is initialised eagerly: deferral
//!   starts at the first section-aligned present PFN after more than
//!   `PAGES_PER_SECTION` pages have been initialised in that zone. The rest
//!   is returned as [`DeferredRange`]s for `deferred-init`.
//! * [`Strategy::OnDemand`]: nothing eagerly (as FreeBSD's lazy
//!   `vm_phys` init): every memory page is returned as a [`DeferredRange`],
//!   for an allocator that initialises a block window the first time it
//!   needs one. Only holes and their bookkeeping are written at boot,
//!   and with a lazy vmemmap (the one `ondemand` runs on) not even those:
//!   the backing writes a section's holes when it first maps the section
//!   (`holes::init_holes_in`, [`MemmapBacking::initialises_holes`]).
//!
//! All then fill the gaps of [`ZoneLayout::unavailable_ranges`] with
//! reserved pages (`init_unavailable_range()`), mark each initialised
//! pageblock `MIGRATE_MOVABLE`, and leave each memory page they initialised
//! as the buddy hand-off takes it: memblock-reserved ones `PG_reserved`
//! (`memmap_init_reserved_pages()` → `reserve_bootmem_region()`), the
//! others `_refcount` 0, to be freed. The region walks write each page once
//! ([`init_pfn_range`]); `PerPfn` makes the two extra passes pre-5.8 Linux
//! made. The struct pages the three write are byte-identical.
//!
//! [`touch_present_pages`] is the floor they are measured against: one
//! 64-byte store per present page and nothing else.

use alloc::vec::Vec;
use core::fmt;

use crate::holes::init_hole_pages;
use crate::memblock::Memblock;
use crate::page::{page_links, PageLayout};
use crate::pageblock::PageblockMaps;
use crate::store::{Memmap, MemmapBacking};
use crate::zones::ZoneLayout;
use crate::{
    pfn_to_section_nr, DeferredRange, NodeId, Pfn, PfnRange, ZoneType, PAGEBLOCK_NR_PAGES,
    PAGES_PER_SECTION,
};

/// Which memmap init to run, chosen at run time (e.g. from the kernel
/// command line).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Strategy {
    PerPfn,
    Regions,
    Deferred,
    OnDemand,
}

impl Strategy {
    pub const ALL: [Strategy; 4] = [
        Strategy::PerPfn,
        Strategy::Regions,
        Strategy::Deferred,
        Strategy::OnDemand,
    ];
    /// Does the strategy initialise memory pages on the boot CPU (and so
    /// mark their pageblocks)? Only `OnDemand` does not.
    pub const fn initialises_memory_at_boot(self) -> bool {
        !matches!(self, Strategy::OnDemand)
    }
    /// The strategy's name, as the `memmap=` kernel option spells it.
    pub const fn name(self) -> &'static str {
        match self {
            Strategy::PerPfn => "perpfn",
            Strategy::Regions => "regions",
            Strategy::Deferred => "deferred",
            Strategy::OnDemand => "ondemand",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why memmap init could not run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemmapInitError {
    /// A PFN to initialise has no struct-page backing.
    Unbacked { pfn: Pfn, section_nr: u64 },
    /// The pageblock maps were not built from this layout.
    NoPageblockMap { nid: NodeId, zone: ZoneType },
}

impl fmt::Display for MemmapInitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            MemmapInitError::Unbacked { pfn, section_nr } => write!(
                f,
                "memmap init: struct pages of section {section_nr} (pfn {pfn:#x}) have no backing; \
                 populate every range of vmemmap_backing_ranges() before running memmap init"
            ),
            MemmapInitError::NoPageblockMap { nid, zone } => write!(
                f,
                "memmap init: no pageblock bitmap for node {nid} zone {}; build PageblockMaps from the same ZoneLayout",
                zone.name()
            ),
        }
    }
}

/// What a strategy did, in pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct InitStats {
    /// Present (memory) pages initialised now: the sum of
    /// [`InitOutcome::eager_inits`], counted where they were written.
    pub eager_pages: u64,
    /// Present pages left to `deferred-init`.
    pub deferred_pages: u64,
    /// Memory pages among the eager ones that got `PG_reserved` because
    /// memblock reserves them.
    pub reserved_pages: u64,
    /// Hole pages (in present sections) initialised as reserved.
    pub hole_pages: u64,
}

/// Statistics plus what was initialised and what is left over.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct InitOutcome {
    pub stats: InitStats,
    /// Present memory the boot CPU initialised, split at zone boundaries and
    /// ascending: what it hands to the buddy allocator.
    pub eager: Vec<EagerRange>,
    /// Struct pages of memory the boot CPU wrote, per node and zone,
    /// counted by the loops that write them (one per
    /// `__init_single_page()`), not taken from the ranges: verification
    /// compares them with [`eager`](Self::eager), so a page written twice
    /// (the same bytes: invisible to a page scan) or skipped shows, as the
    /// deferred windows' init counters show it for deferred memory.
    pub eager_inits: Vec<ZoneInits>,
    /// Per-node ranges for `deferred-init` (empty unless `Deferred`).
    pub deferred: Vec<DeferredRange>,
}

/// A piece of present memory the eager part of a strategy initialises.
pub type EagerRange = crate::ZoneRange;

/// Struct pages written in one zone of one node ([`InitOutcome::eager_inits`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZoneInits {
    pub nid: NodeId,
    pub zone: ZoneType,
    pub nr_pages: u64,
}

/// Add `nr_pages` written in (`nid`, `zone`) to `inits`.
fn count_inits(inits: &mut Vec<ZoneInits>, nid: NodeId, zone: ZoneType, nr_pages: u64) {
    match inits.iter_mut().find(|c| c.nid == nid && c.zone == zone) {
        Some(c) => c.nr_pages += nr_pages,
        None => inits.push(ZoneInits {
            nid,
            zone,
            nr_pages,
        }),
    }
}

/// How the `Deferred` strategy splits present memory into what the boot CPU
/// initialises now and what it leaves, computed without touching struct
/// pages (so it can be checked on maps too big to back).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct DeferralSplit {
    pub eager: Vec<EagerRange>,
    pub deferred: Vec<DeferredRange>,
}

/// First PFN `defer_init()` defers in the node's highest zone, or `None`
/// when the zone never passes a section's worth of pages followed by a
/// section-aligned present PFN.
pub(crate) fn first_deferred_pfn(mb: &Memblock, layout: &ZoneLayout, nid: NodeId) -> Option<Pfn> {
    let zone = layout.highest_zone(nid)?;
    let mut initialised = 0u64;
    for (range, _) in mb.mem_pfn_ranges(Some(nid)) {
        let Some(piece) = range.intersect(&zone.span) else {
            continue;
        };
        // defer_init() increments before testing `> PAGES_PER_SECTION`: at
        // PFN p the count is (pages before p) + 1.
        let need_before = PAGES_PER_SECTION.saturating_sub(initialised);
        let candidate = (piece.start + need_before).next_multiple_of(PAGES_PER_SECTION);
        if candidate < piece.end {
            return Some(candidate);
        }
        initialised += piece.nr_pages();
    }
    None
}

/// The region walk in zone order, each piece tagged with its zone: what
/// `memmap_init()` hands to `memmap_init_zone_range()`, less the
/// `MEMBLOCK_RSRV_NOINIT` reservations, whose struct pages their owner
/// writes (the 1 GiB huge pages, [`crate::hugetlb`]).
fn region_pieces<'a>(
    mb: &'a Memblock,
    layout: &'a ZoneLayout,
) -> impl Iterator<Item = EagerRange> + 'a {
    let noinit: Vec<PfnRange> = mb.noinit_ranges().collect();
    mb.mem_pfn_ranges(None)
        .flat_map(move |(range, nid)| {
            layout
                .node_zones(nid)
                .filter(|z| z.is_populated())
                .filter_map(move |z| {
                    range.intersect(&z.span).map(|pfns| EagerRange {
                        nid,
                        zone: z.zone,
                        pfns,
                    })
                })
        })
        .flat_map(move |piece| {
            without(piece.pfns, &noinit)
                .map(move |pfns| EagerRange { pfns, ..piece })
                .collect::<Vec<_>>()
        })
}

/// `range` less the ascending, disjoint `cut` ranges, ascending.
fn without(range: PfnRange, cut: &[PfnRange]) -> impl Iterator<Item = PfnRange> + '_ {
    let first = cut.partition_point(|c| c.end <= range.start);
    let mut cursor = range.start;
    let mut rest = cut[first..].iter().take_while(move |c| c.start < range.end);
    core::iter::from_fn(move || loop {
        if cursor >= range.end {
            return None;
        }
        match rest.next() {
            Some(c) if c.start > cursor => {
                let out = PfnRange::new(cursor, c.start);
                cursor = c.end;
                return Some(out);
            }
            Some(c) => cursor = cursor.max(c.end),
            None => {
                let out = PfnRange::new(cursor, range.end);
                cursor = range.end;
                return Some(out);
            }
        }
    })
}

/// Split the region walk at each node's deferral boundary.
pub fn split_deferred(mb: &Memblock, layout: &ZoneLayout) -> DeferralSplit {
    let boundaries: Vec<(NodeId, Option<Pfn>, Option<ZoneType>)> = layout
        .nodes()
        .iter()
        .map(|n| {
            (
                n.nid,
                first_deferred_pfn(mb, layout, n.nid),
                layout.highest_zone(n.nid).map(|z| z.zone),
            )
        })
        .collect();
    let mut plan = DeferralSplit::default();
    for piece in region_pieces(mb, layout) {
        let boundary = boundaries
            .iter()
            .find(|b| b.0 == piece.nid)
            .and_then(|b| (b.2 == Some(piece.zone)).then_some(b.1).flatten());
        let split = boundary.map_or(piece.pfns.end, |b| {
            b.clamp(piece.pfns.start, piece.pfns.end)
        });
        if split > piece.pfns.start {
            plan.eager.push(EagerRange {
                pfns: PfnRange::new(piece.pfns.start, split),
                ..piece
            });
        }
        if split < piece.pfns.end {
            plan.deferred.push(DeferredRange {
                nid: piece.nid,
                zone: piece.zone,
                pfns: PfnRange::new(split, piece.pfns.end),
            });
        }
    }
    plan
}

fn unbacked(pfn: Pfn) -> MemmapInitError {
    MemmapInitError::Unbacked {
        pfn,
        section_nr: pfn_to_section_nr(pfn),
    }
}

/// What [`init_pfn_range`] wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RangeInit {
    /// Struct pages written, as [`init_pages`] counts them.
    pub written: u64,
    /// Of them, memblock-reserved pages given `PG_reserved`.
    pub reserved: u64,
}

/// `memmap_init_range()` for one zone-clipped range of memory, with each
/// page left as the buddy hand-off takes it, in one store of a whole
/// struct page: memblock-reserved pages `PG_reserved`
/// (`reserve_bootmem_region()`), the others `_refcount` 0 (what
/// `__free_pages_core()` writes before freeing them), so the hand-off frees
/// blocks without another pass over their pages, where Linux writes each
/// free page twice. Marks each pageblock `MIGRATE_MOVABLE`. Usable by
/// deferred workers for the ranges they own.
pub fn init_pfn_range<B: MemmapBacking>(
    memmap: &mut Memmap<B>,
    pageblocks: &PageblockMaps,
    mb: &Memblock,
    range: PfnRange,
    zone: ZoneType,
    nid: NodeId,
) -> Result<RangeInit, MemmapInitError> {
    let pb = pageblocks
        .get(nid, zone)
        .ok_or(MemmapInitError::NoPageblockMap { nid, zone })?;
    let mut done = RangeInit::default();
    let mut cursor = range.start;
    for rsv in mb.reserved_mem_ranges(range) {
        // Reserved PFN ranges can share a page (regions rounded outwards).
        let rsv = PfnRange::new(rsv.start.max(cursor), rsv.end.max(cursor));
        let free = PfnRange::new(cursor, rsv.start);
        done.written += init_pieces(memmap, free, zone, nid, InitAs::Free)?;
        let reserved = init_pieces(memmap, rsv, zone, nid, InitAs::Reserved)?;
        done.written += reserved;
        done.reserved += reserved;
        cursor = rsv.end;
    }
    let free = PfnRange::new(cursor, range.end);
    done.written += init_pieces(memmap, free, zone, nid, InitAs::Free)?;
    pb.mark_movable(range);
    Ok(done)
}

/// [`init_pages`] over each section piece of `range`. Returns the pages
/// written.
fn init_pieces<B: MemmapBacking>(
    memmap: &mut Memmap<B>,
    range: PfnRange,
    zone: ZoneType,
    nid: NodeId,
    as_: InitAs,
) -> Result<u64, MemmapInitError> {
    let mut written = 0;
    for piece in range.section_pieces() {
        let pages = memmap
            .pages_mut(piece)
            .ok_or_else(|| unbacked(piece.start))?;
        written += init_pages(pages, piece.start, zone, nid, as_);
    }
    Ok(written)
}

/// What memmap init leaves a memory page as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitAs {
    /// `PG_reserved`, `_refcount` 1: memblock-reserved memory, never freed
    /// at boot.
    Reserved,
    /// `_refcount` 0: to be freed to the buddy allocator next (what
    /// `__free_pages_core()` writes before freeing).
    Free,
    /// `_refcount` 1, as `__init_single_page()` alone leaves it.
    Allocated,
}

/// `__init_single_page()` over a slice of one section whose first page is
/// `start_pfn`, each page left `as_`: the links are the same for every
/// page of it, so the whole slice takes one flags word and each page one
/// store. Returns the pages initialised.
#[inline]
pub fn init_pages<P: PageLayout>(
    pages: &mut [P],
    start_pfn: Pfn,
    zone: ZoneType,
    nid: NodeId,
    as_: InitAs,
) -> u64 {
    debug_assert!(
        pages.is_empty()
            || pfn_to_section_nr(start_pfn)
                == pfn_to_section_nr(start_pfn + pages.len() as u64 - 1),
        "init_pages over more than one section"
    );
    let links = page_links(start_pfn, zone, nid);
    let (flags, refcount) = match as_ {
        InitAs::Reserved => (links | 1 << crate::page::pg::RESERVED, 1),
        InitAs::Free => (links, 0),
        InitAs::Allocated => (links, 1),
    };
    P::init_all_with_flags(pages, flags, refcount);
    pages.len() as u64
}

/// `init_unavailable_range()` for every gap, section pieces present only.
fn init_holes<B: MemmapBacking>(
    memmap: &mut Memmap<B>,
    layout: &ZoneLayout,
) -> Result<u64, MemmapInitError> {
    let mut n = 0;
    for u in layout.unavailable_ranges() {
        for present in layout.present_section_pieces(u.pfns) {
            for piece in present.section_pieces() {
                let pages = memmap
                    .pages_mut(piece)
                    .ok_or_else(|| unbacked(piece.start))?;
                init_hole_pages(pages, piece.start, u);
                n += piece.nr_pages();
            }
        }
    }
    Ok(n)
}

/// Set `PG_reserved` on memblock-reserved memory pages inside `range`
/// (`reserve_bootmem_region()`); the pages must already be initialised.
/// Returns the number marked.
fn mark_reserved_pages<B: MemmapBacking>(
    memmap: &mut Memmap<B>,
    mb: &Memblock,
    range: PfnRange,
) -> Result<u64, MemmapInitError> {
    let mut n = 0;
    for rsv in mb.reserved_mem_ranges(range) {
        for piece in rsv.section_pieces() {
            let pages = memmap
                .pages_mut(piece)
                .ok_or_else(|| unbacked(piece.start))?;
            pages.iter_mut().for_each(PageLayout::set_reserved);
            n += piece.nr_pages();
        }
    }
    Ok(n)
}

/// Pre-5.8 per-PFN loop over each zone span; counts each page it writes
/// into `inits`.
fn init_per_pfn<B: MemmapBacking>(
    memmap: &mut Memmap<B>,
    mb: &Memblock,
    layout: &ZoneLayout,
    pageblocks: &PageblockMaps,
    inits: &mut Vec<ZoneInits>,
) -> Result<(), MemmapInitError> {
    let noinit: Vec<PfnRange> = mb.noinit_ranges().collect();
    for z in layout.zones().iter().filter(|z| z.is_populated()) {
        let mut n = 0;
        let mut cut = noinit.iter().peekable();
        let pb = pageblocks
            .get(z.nid, z.zone)
            .ok_or(MemmapInitError::NoPageblockMap {
                nid: z.nid,
                zone: z.zone,
            })?;
        for pfn in z.span.start..z.span.end {
            // early_pfn_valid() + early_pfn_in_nid(): one binary search
            // answers both.
            if mb.pfn_to_nid(pfn) != Some(z.nid) {
                continue;
            }
            // Struct pages a NOINIT reservation's owner writes (huge pages).
            while cut.next_if(|c| c.end <= pfn).is_some() {}
            if cut.peek().is_some_and(|c| c.start <= pfn) {
                continue;
            }
            memmap
                .page_mut(pfn)
                .ok_or_else(|| unbacked(pfn))?
                .init_single_page(pfn, z.zone, z.nid);
            if pfn % PAGEBLOCK_NR_PAGES == 0 {
                pb.set_migratetype(pfn, crate::pageblock::MigrateType::Movable);
            }
            n += 1;
        }
        count_inits(inits, z.nid, z.zone, n);
    }
    Ok(())
}

/// Run `strategy` over `memmap`. Every present section must be backed
/// (see `sections::vmemmap_backing_ranges`), and `pageblocks` must come
/// from `layout`, which must come from `mb`.
pub fn init_memmap<B: MemmapBacking>(
    strategy: Strategy,
    memmap: &mut Memmap<B>,
    mb: &Memblock,
    layout: &ZoneLayout,
    pageblocks: &PageblockMaps,
) -> Result<InitOutcome, MemmapInitError> {
    let mut out = InitOutcome::default();
    match strategy {
        Strategy::PerPfn => {
            init_per_pfn(memmap, mb, layout, pageblocks, &mut out.eager_inits)?;
            // The per-PFN walk initialises exactly the region walk's pages.
            out.eager = region_pieces(mb, layout).collect();
        }
        Strategy::Regions => {
            out.eager = region_pieces(mb, layout).collect();
        }
        Strategy::Deferred => {
            let split = split_deferred(mb, layout);
            out.stats.deferred_pages = split.deferred.iter().map(|d| d.pfns.nr_pages()).sum();
            out.eager = split.eager;
            out.deferred = split.deferred;
        }
        Strategy::OnDemand => {
            out.deferred = region_pieces(mb, layout)
                .map(|piece| DeferredRange {
                    nid: piece.nid,
                    zone: piece.zone,
                    pfns: piece.pfns,
                })
                .collect();
            out.stats.deferred_pages = out.deferred.iter().map(|d| d.pfns.nr_pages()).sum();
        }
    }
    if strategy == Strategy::PerPfn {
        // Pre-5.8 marked reserved pages and readied free ones in passes of
        // their own (`reserve_bootmem_region()`, then `free_all_bootmem()`).
        for e in &out.eager {
            out.stats.reserved_pages += mark_reserved_pages(memmap, mb, e.pfns)?;
        }
        ready_free_pages(memmap, mb)?;
    } else {
        for piece in &out.eager {
            let done = init_pfn_range(memmap, pageblocks, mb, piece.pfns, piece.zone, piece.nid)?;
            count_inits(&mut out.eager_inits, piece.nid, piece.zone, done.written);
            out.stats.reserved_pages += done.reserved;
        }
    }
    out.stats.eager_pages = out.eager_inits.iter().map(|c| c.nr_pages).sum();
    // A lazy vmemmap writes each section's holes when it maps the section.
    if !memmap.backing().initialises_holes() {
        out.stats.hole_pages = init_holes(memmap, layout)?;
    }
    Ok(out)
}

/// `_refcount` 0 on every free memory page (memory not memblock-reserved),
/// as `__free_pages_core()` writes it before freeing.
fn ready_free_pages<B: MemmapBacking>(
    memmap: &mut Memmap<B>,
    mb: &Memblock,
) -> Result<(), MemmapInitError> {
    for (free, _) in mb.free_ranges(None) {
        for piece in free.section_pieces() {
            let pages = memmap
                .pages_mut(piece)
                .ok_or_else(|| unbacked(piece.start))?;
            pages.iter_mut().for_each(|p| p.set_refcount(0));
        }
    }
    Ok(())
}

/// The store floor (`memmap=touch`) over a slice whose first page is
/// `start_pfn`: one store of a whole struct page per page
/// ([`PageLayout::touched`]) and
/// nothing else. Every touch path (eager, workers, bench) goes through here.
#[inline]
pub fn touch_pages<P: PageLayout>(pages: &mut [P], start_pfn: Pfn) {
    P::touch_all(pages, start_pfn);
}

/// The floor over `ranges`: [`touch_pages`] on every page. Returns the
/// number of pages written.
pub fn touch_ranges<B: MemmapBacking>(
    memmap: &mut Memmap<B>,
    ranges: impl IntoIterator<Item = PfnRange>,
) -> Result<u64, MemmapInitError> {
    let mut n = 0;
    for range in ranges {
        for piece in range.section_pieces() {
            let pages = memmap
                .pages_mut(piece)
                .ok_or_else(|| unbacked(piece.start))?;
            touch_pages(pages, piece.start);
            n += piece.nr_pages();
        }
    }
    Ok(n)
}

/// The floor over every present page (what the benches compare against).
pub fn touch_present_pages<B: MemmapBacking>(
    memmap: &mut Memmap<B>,
    mb: &Memblock,
) -> Result<u64, MemmapInitError> {
    touch_ranges(memmap, mb.mem_pfn_ranges(None).map(|(range, _)| range))
}

/// Sections a host test or bench must back to run a strategy over `mb`.
pub fn sections_to_back(layout: &ZoneLayout) -> impl Iterator<Item = u64> + '_ {
    layout
        .present_section_ranges()
        .iter()
        .flat_map(|r| pfn_to_section_nr(r.start)..pfn_to_section_nr(r.end))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::firmware::{FirmwareEntry, NodeAffinity, RegionKind::*};
    use crate::memblock::MemblockConfig;
    use crate::page::StructPage;
    use crate::page32::StructPage32;
    use crate::page8::StructPage8;
    use crate::pageblock::MigrateType;
    use crate::section_nr_to_pfn;
    use crate::store::VecBacking;

    const MIB: u64 = 1 << 20;

    fn two_node_map() -> Memblock {
        let (mut mb, mut rep) = Memblock::from_firmware(
            [
                FirmwareEntry::new(0x1000, 0x9e000, Usable),
                FirmwareEntry::new(MIB, 255 * MIB, Usable),
                FirmwareEntry::new(8 * MIB, MIB, Bootloader),
                // Crosses the DMA/DMA32 boundary at 16 MiB.
                FirmwareEntry::new(4096 * MIB, 300 * MIB, Usable),
                FirmwareEntry::new(4500 * MIB, 100 * MIB, Usable),
            ],
            MemblockConfig::default(),
        )
        .unwrap();
        mb.apply_affinity(
            [
                NodeAffinity::new(0, 4096 * MIB, 0),
                NodeAffinity::new(4096 * MIB, 1024 * MIB, 1),
            ],
            &mut rep,
        )
        .unwrap();
        mb.reserve(4200 * MIB, 2 * MIB).unwrap();
        mb
    }

    fn run<P: PageLayout>(
        strategy: Strategy,
        mb: &Memblock,
    ) -> (Memmap<VecBacking<P>>, InitOutcome, PageblockMaps) {
        let layout = ZoneLayout::new(mb);
        let mut mm = Memmap::new(VecBacking::new(sections_to_back(&layout)));
        let pb = PageblockMaps::new(&layout);
        let out = init_memmap(strategy, &mut mm, mb, &layout, &pb).unwrap();
        (mm, out, pb)
    }

    /// `eager_inits` is what the write loops counted: per node and zone,
    /// the memory pages whose struct pages the strategy wrote (counted
    /// here from the struct pages themselves), and each rewrite counts
    /// again, so a page initialised twice is one count too many.
    #[test]
    fn eager_inits_count_every_struct_page_written_per_zone() {
        for strategy in Strategy::ALL {
            eager_inits_count_every_write::<StructPage>(strategy);
            eager_inits_count_every_write::<StructPage32>(strategy);
            eager_inits_count_every_write::<StructPage8>(strategy);
        }
    }

    fn eager_inits_count_every_write<P: PageLayout>(strategy: Strategy) {
        let mb = two_node_map();
        let (mut mm, out, pb) = run::<P>(strategy, &mb);
        let layout = ZoneLayout::new(&mb);
        // Built without `count_inits` (the code under test): the layout
        // lists each (node, zone) once, so each gets its own entry here.
        let mut written: Vec<ZoneInits> = Vec::new();
        for z in layout.zones().iter().filter(|z| z.is_populated()) {
            let n = (z.span.start..z.span.end)
                .filter(|&pfn| mb.pfn_to_nid(pfn) == Some(z.nid))
                .filter(|&pfn| {
                    mm.page(pfn)
                        .is_some_and(|p| p.links_match(pfn, z.zone, z.nid))
                })
                .filter(|&pfn| !out.deferred.iter().any(|d| d.pfns.contains(pfn)))
                .count() as u64;
            if n > 0 {
                written.push(ZoneInits {
                    nid: z.nid,
                    zone: z.zone,
                    nr_pages: n,
                });
            }
        }
        let mut counted = out.eager_inits.clone();
        for list in [&mut counted, &mut written] {
            list.sort_by_key(|c| (c.nid, c.zone as usize));
        }
        assert_eq!(counted, written, "{strategy}");
        assert_eq!(
            out.stats.eager_pages,
            written.iter().map(|c| c.nr_pages).sum::<u64>(),
            "{strategy}"
        );
        // Written again through the same path: counted again.
        if let Some(e) = out.eager.first() {
            let again = init_pfn_range(&mut mm, &pb, &mb, e.pfns, e.zone, e.nid).unwrap();
            assert_eq!(again.written, e.pfns.nr_pages(), "{strategy}");
        }
    }

    #[test]
    fn regions_initialises_all_present_pages_holes_and_reserved() {
        regions_initialises_all::<StructPage>();
        regions_initialises_all::<StructPage32>();
        regions_initialises_all::<StructPage8>();
    }

    fn regions_initialises_all<P: PageLayout>() {
        let mb = two_node_map();
        let (mm, out, pb) = run::<P>(Strategy::Regions, &mb);
        assert_eq!(out.stats.eager_pages, mb.memory().total_pages());
        assert_eq!(out.stats.deferred_pages, 0);
        assert_eq!(out.stats.reserved_pages, 256 + 512);
        // Gaps: pfn 0, [0x9f, 0x100), [256 MiB, end of section 1) is none
        // (256 MiB is section aligned), [4396 MiB, 4500 MiB), [4600 MiB, 4608 MiB).
        assert_eq!(
            out.stats.hole_pages,
            1 + 0x61 + ((104 * MIB) >> 12) + ((8 * MIB) >> 12)
        );
        let p = mm.page(0).unwrap();
        assert!(p.is_hole() && p.links_match(0, ZoneType::Dma, 0) && p.refcount() == 1);
        let p = mm.page((8 * MIB) >> 12).unwrap();
        assert!(p.is_reserved() && p.links_match((8 * MIB) >> 12, ZoneType::Dma, 0));
        let pfn = (16 * MIB) >> 12;
        assert!(mm.page(pfn).unwrap().links_match(pfn, ZoneType::Dma32, 0));
        assert!(!mm.page(pfn).unwrap().is_reserved());
        let pfn = (4200 * MIB) >> 12;
        assert!(
            mm.page(pfn).unwrap().links_match(pfn, ZoneType::Normal, 1)
                && mm.page(pfn).unwrap().is_reserved()
        );
        let pb1 = pb.get(1, ZoneType::Normal).unwrap();
        assert_eq!(pb1.get_migratetype(pfn), Some(MigrateType::Movable));
        assert_eq!(
            pb1.get_migratetype((4400 * MIB) >> 12),
            Some(MigrateType::Unmovable),
            "hole pageblock"
        );
    }

    #[test]
    fn deferred_keeps_low_zones_and_first_section_of_highest_zone() {
        deferred_keeps_low_zones::<StructPage>();
        deferred_keeps_low_zones::<StructPage32>();
        deferred_keeps_low_zones::<StructPage8>();
    }

    fn deferred_keeps_low_zones<P: PageLayout>() {
        let mb = two_node_map();
        let (mm, out, _) = run::<P>(Strategy::Deferred, &mb);
        // Node 1: Normal from 4096 MiB: 32768 pages reach 4224 MiB, which is
        // section aligned, so deferral starts there.
        let d: Vec<_> = out
            .deferred
            .iter()
            .map(|d| {
                (
                    d.nid,
                    d.zone,
                    d.pfns.start << 12 >> 20,
                    d.pfns.end << 12 >> 20,
                )
            })
            .collect();
        assert_eq!(
            d,
            [
                (1, ZoneType::Normal, 4224, 4396),
                (1, ZoneType::Normal, 4500, 4600)
            ]
        );
        // Node 0's DMA32 [16, 256) MiB never reaches a section boundary after
        // 32768 initialised pages (128 MiB has only 28672 before it): no deferral.
        assert_eq!(first_deferred_pfn(&mb, &ZoneLayout::new(&mb), 0), None);
        assert_eq!(
            out.stats.eager_pages + out.stats.deferred_pages,
            mb.memory().total_pages()
        );
        // Reserved [4200, 4202) MiB is eager: marked; the deferred part is untouched.
        assert_eq!(out.stats.reserved_pages, 256 + 512);
        assert_eq!(*mm.page((4300 * MIB) >> 12).unwrap(), P::ZERO);
    }

    #[test]
    fn deferred_plus_workers_equals_regions() {
        deferred_plus_workers_equals::<StructPage>();
        deferred_plus_workers_equals::<StructPage32>();
        deferred_plus_workers_equals::<StructPage8>();
    }

    fn deferred_plus_workers_equals<P: PageLayout>() {
        let mb = two_node_map();
        let (regions, _, pb_r) = run::<P>(Strategy::Regions, &mb);
        let (mut deferred, out, pb_d) = run::<P>(Strategy::Deferred, &mb);
        for d in &out.deferred {
            init_pfn_range(&mut deferred, &pb_d, &mb, d.pfns, d.zone, d.nid).unwrap();
        }
        for nr in deferred.backing().section_nrs() {
            let r = PfnRange::new(section_nr_to_pfn(nr), section_nr_to_pfn(nr + 1));
            let (a, b) = (regions.pages(r).unwrap(), deferred.pages(r).unwrap());
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                // lru self-links differ between stores: compare offsets.
                let offset = |p: &P| Some(p.list_link()?.next - p.list_link_addr()?);
                assert_eq!(offset(x), offset(y));
                let (mut x, mut y) = (*x, *y);
                for p in [&mut x, &mut y] {
                    if let Some(l) = p.list_link_mut() {
                        *l = Default::default();
                    }
                }
                assert_eq!(x, y, "pfn {}", r.start + i as u64);
            }
        }
        for ((_, _, a), (_, _, b)) in pb_r.iter().zip(pb_d.iter()) {
            for i in 0..a.nr_pageblocks() {
                let pfn = i * PAGEBLOCK_NR_PAGES;
                assert_eq!(a.get_bits(pfn), b.get_bits(pfn));
            }
        }
    }

    #[test]
    fn unbacked_section_is_an_error() {
        let mb = two_node_map();
        let layout = ZoneLayout::new(&mb);
        let mut mm = Memmap::new(VecBacking::<StructPage>::new([0u64]));
        let pb = PageblockMaps::new(&layout);
        let err = init_memmap(Strategy::Regions, &mut mm, &mb, &layout, &pb).unwrap_err();
        assert!(matches!(
            err,
            MemmapInitError::Unbacked { section_nr: 1, .. }
        ));
        assert!(err.to_string().contains("vmemmap_backing_ranges"));
    }

    /// Present memory of [`two_node_map`] in PFNs, read off the firmware map
    /// by hand: RAM rounded inward, node 1 from 4096 MiB.
    const TWO_NODE_PRESENT: [(Pfn, Pfn); 4] = [
        (0x1, 0x9f),
        (0x100, 0x10000),
        (4096 * 256, 4396 * 256),
        (4500 * 256, 4600 * 256),
    ];

    #[test]
    fn touch_writes_every_present_page() {
        touch_writes_every_present::<StructPage>();
        touch_writes_every_present::<StructPage32>();
        touch_writes_every_present::<StructPage8>();
    }

    fn touch_writes_every_present<P: PageLayout>() {
        let mb = two_node_map();
        let layout = ZoneLayout::new(&mb);
        let mut mm = Memmap::new(VecBacking::<P>::new(sections_to_back(&layout)));
        assert_eq!(
            touch_present_pages(&mut mm, &mb).unwrap(),
            mb.memory().total_pages()
        );
        // The floor's one store per page leaves the pfn in the first word
        // (`PageLayout::touched`); holes of backed sections stay zero.
        for (start, end) in TWO_NODE_PRESENT {
            for pfn in start..end {
                assert_eq!(
                    *mm.page(pfn).unwrap(),
                    P::touched(pfn),
                    "present pfn {pfn:#x}"
                );
            }
        }
        for hole in [0x9f, 0xff, 4396 * 256, 4600 * 256] {
            assert_eq!(*mm.page(hole).unwrap(), P::ZERO, "hole pfn {hole:#x}");
        }
    }

    #[test]
    fn deferred_split_of_two_node_map_is_exact() {
        // Node 0 defers nothing (its highest zone, DMA32, never passes a
        // section's worth of pages followed by a section boundary). Node 1's
        // Normal zone passes 32768 pages at 4224 MiB, section aligned: the
        // boundary. Its second region lies wholly past it, so it gives no
        // eager piece at all (not an empty one).
        let mb = two_node_map();
        let plan = split_deferred(&mb, &ZoneLayout::new(&mb));
        let eager: Vec<_> = plan
            .eager
            .iter()
            .map(|e| (e.nid, e.zone, e.pfns.start, e.pfns.end))
            .collect();
        assert_eq!(
            eager,
            [
                (0, ZoneType::Dma, 0x1, 0x9f),
                (0, ZoneType::Dma, 0x100, 0x1000),
                (0, ZoneType::Dma32, 0x1000, 0x10000),
                (1, ZoneType::Normal, 4096 * 256, 4224 * 256),
            ]
        );
        let deferred: Vec<_> = plan
            .deferred
            .iter()
            .map(|d| (d.nid, d.zone, d.pfns.start, d.pfns.end))
            .collect();
        assert_eq!(
            deferred,
            [
                (1, ZoneType::Normal, 4224 * 256, 4396 * 256),
                (1, ZoneType::Normal, 4500 * 256, 4600 * 256),
            ]
        );
    }

    /// Exactly the strategies that initialise no memory page at boot run
    /// without pageblock bitmaps (the others need them for what they
    /// initialise), and OnDemand then writes only the holes.
    #[test]
    fn only_a_strategy_without_boot_pages_runs_without_pageblock_bitmaps() {
        let mb = two_node_map();
        let layout = ZoneLayout::new(&mb);
        for strategy in Strategy::ALL {
            let mut mm = Memmap::new(VecBacking::<StructPage>::new(sections_to_back(&layout)));
            let out = init_memmap(strategy, &mut mm, &mb, &layout, &PageblockMaps::none());
            assert_eq!(
                out.is_ok(),
                !strategy.initialises_memory_at_boot(),
                "{strategy}"
            );
            if let Ok(out) = out {
                assert_eq!(out.stats.eager_pages, 0);
                assert_eq!(out.stats.hole_pages, layout.hole_pages());
                assert_eq!(out.stats.deferred_pages, mb.memory().total_pages());
            }
        }
    }

    #[test]
    fn strategy_names_are_the_memmap_option_values() {
        // The kernel parses `memmap=perpfn|regions|deferred|ondemand` and prints the
        // strategy with Display: both must be these exact words.
        let shown: Vec<String> = Strategy::ALL.iter().map(|s| s.to_string()).collect();
        assert_eq!(shown, ["perpfn", "regions", "deferred", "ondemand"]);
        let named: Vec<&str> = Strategy::ALL.iter().map(|s| s.name()).collect();
        assert_eq!(named, ["perpfn", "regions", "deferred", "ondemand"]);
    }
}
