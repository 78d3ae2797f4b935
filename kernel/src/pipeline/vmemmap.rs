//! The vmemmap: struct-page storage for every present section, and what
//! first use mapped of it ([`report_first_use`]).
//!
//! Each present 128 MiB section's 32768 struct pages (2 MiB at 64 bytes,
//! 1 MiB at 32) come from its own node's memory (Linux `sparse_init_nid()`
//! allocates per node), one contiguous memblock block per run of sections
//! when the node has it, else one 2 MiB block per huge page, and are mapped
//! at `area + section_nr * section bytes` with 2 MiB pages
//! (`vmemmap_populate_hugepages()`). Sections without memory cost nothing.
//!
//! With 32-byte struct pages two sections share a huge page, as sub-PMD
//! sections do in Linux: a run of one node's sections is widened to whole
//! huge pages, and a huge page that the previous run already holds (a run
//! starting at an odd section) is that run's: it is mapped once, from the
//! node of its lower present section, as Linux's first
//! `vmemmap_populate()` of it places it. A section that is not present
//! but shares a huge page with one that is gets no struct pages of its
//! own: nothing initialises or reads them.
//!
//! The page-table frames the mapping needs are planned here too, from the
//! x86-64 4-level layout with 2 MiB leaves: the area starts in unused
//! top-level slots, so every page-directory-pointer table (one per 512 GiB
//! of area) and page directory (one per 1 GiB) is new, and each is
//! allocated from memblock on the node of the first section it maps. The
//! mapper only writes entries, so the host reserves exactly the memory the
//! kernel does and the pipeline's figures agree on both.
//!
//! # Mapped on first use (`memmap=ondemand`)
//! The faithful modes map every present section here, as Linux's
//! `sparse_init()` does. With a pool, boot only *reserves*: one memblock
//! block of struct pages per run of sections (O(memory ranges)) and, per
//! node, the page-table frames its sections could need; a section's 2 MiB
//! page (and any page directory or PDPT it needs, from its node's frames)
//! is mapped by [`SectionMapper`] the first time anyone asks the backing
//! for one of its struct pages, on whichever CPU that is. A section nobody
//! initialises is never mapped.

use alloc::collections::BTreeSet;
use alloc::vec::Vec;
use core::ops::Range;

use memmap::hugetlb::hvo::{self, HvoPage};
use memmap::memblock::Memblock;
use memmap::page::PageLayout;
use memmap::sections::{
    section_memmap_bytes, vmemmap_backing_ranges, Vmemmap, VmemmapRange, VMEMMAP_HUGE_PAGE_BYTES,
};
use memmap::store::{Memmap, SectionPopulator, SectionSet, VmemmapBacking};
use memmap::zones::ZoneLayout;
use memmap::{section_nr_to_pfn, NodeId, PAGES_PER_SECTION, PAGE_SIZE};

use super::context::Ctx;
use super::error::{PipelineError, VmemmapError};
use super::facts::Phase;
use super::mode::VmemmapMapping;
use super::seams::{Log, MapError, VmemmapMapper};

/// Struct-page storage (of layout `P`) for every present
/// section, mapped now or on first use as the mode says.
/// `hvo`: the 1 GiB pages whose vmemmap HVO maps, at boot in either mode.
pub fn run<M: VmemmapMapper, P: PageLayout>(
    cx: &Ctx<'_>,
    mb: &mut Memblock,
    layout: &ZoneLayout,
    sections: &SectionMapper<'_, M>,
    hvo: &[HvoPage],
) -> Result<Memmap<VmemmapBacking<P>>, PipelineError> {
    let (mapped, vmemmap_ns) = cx.timed(Phase::Vmemmap, || match cx.mode.vmemmap {
        VmemmapMapping::AtBoot => populate::<M, P>(mb, &mut *sections.state.lock().mapper, hvo),
        VmemmapMapping::OnFirstUse => sections.reserve::<P>(mb, layout, hvo),
    });
    let (backing, stats) = mapped.map_err(PipelineError::Vmemmap)?;
    log(cx.log, &stats, vmemmap_ns, cx.mode.vmemmap);
    cx.facts.record(|f| {
        f.vmemmap_ns = vmemmap_ns;
        f.vmemmap_bytes = stats.bytes;
    });
    Ok(Memmap::new(backing))
}

/// How much of the vmemmap first use mapped (`memmap=ondemand`), once
/// everything that allocates has run; an error if a mapping failed.
pub fn report_first_use<M: VmemmapMapper, P: PageLayout>(
    cx: &Ctx<'_>,
    memmap: &Memmap<VmemmapBacking<P>>,
    sections: &SectionMapper<'_, M>,
) -> Result<(), PipelineError> {
    if cx.mode.vmemmap != VmemmapMapping::OnFirstUse {
        return Ok(());
    }
    let backing = memmap.backing();
    let (mapped, table_frames, error) = sections.first_use();
    cx.log.line(format_args!(
        "vmemmap: {mapped} of {} sections mapped on first use, with {table_frames} page-table pages and {} hole pages written",
        backing.mapped().len() - sections.hvo_sections(),
        backing.hole_pages_on_first_use()
    ));
    match error {
        Some(e) => Err(PipelineError::Vmemmap(VmemmapError::Map(e))),
        None => Ok(()),
    }
}

/// Area bytes one page directory maps with 2 MiB entries.
pub const PD_SPAN_BYTES: u64 = 1 << 30;
/// Area bytes one page-directory-pointer table maps (one top-level slot).
pub const PDPT_SPAN_BYTES: u64 = 512 << 30;

/// The page tables a 2 MiB mapping adds, given the previous one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TablesNeeded {
    pub pdpt: bool,
    pub pd: bool,
}

impl TablesNeeded {
    pub fn count(self) -> usize {
        self.pdpt as usize + self.pd as usize
    }
}

/// Which new tables mapping the 2 MiB page at area offset `offset` needs
/// when the previously mapped page (mappings ascend) was at `prev`: a page
/// directory when it enters a new 1 GiB region, a PDPT when it enters a new
/// 512 GiB slot. Offsets count from the area base, which the kernel
/// places on a top-level slot boundary.
pub fn tables_needed(prev: Option<u64>, offset: u64) -> TablesNeeded {
    let new_region = |span: u64| prev.is_none_or(|p| p / span != offset / span);
    TablesNeeded {
        pdpt: new_region(PDPT_SPAN_BYTES),
        pd: new_region(PD_SPAN_BYTES),
    }
}

/// What populating the vmemmap did, for the log and the summary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmemmapStats {
    pub base: u64,
    /// Bytes per struct page.
    pub page_bytes: u64,
    pub sections: u64,
    pub bytes: u64,
    pub table_frames: u64,
    /// `(nid, bytes)` of struct pages placed for each node's sections.
    pub node_bytes: Vec<(NodeId, u64)>,
    /// Huge pages of struct pages that had to come from another node.
    pub off_node_huge_pages: u64,
    /// 1 GiB pages whose vmemmap HVO maps onto one kept page each.
    pub hvo_pages: u64,
}

/// The vmemmap area for `mb`'s present sections' struct pages of
/// `page_bytes` (chosen by `mapper`), its backing runs, and stats with
/// nothing placed yet.
fn plan_area<M: VmemmapMapper>(
    mb: &Memblock,
    mapper: &mut M,
    page_bytes: u64,
) -> Result<(Vmemmap, Vec<VmemmapRange>, VmemmapStats), VmemmapError> {
    let probe = Vmemmap::linux_default();
    let max_section_end = vmemmap_backing_ranges(mb, &probe, page_bytes)
        .last()
        .map_or(0, |r| r.section_nrs.end);
    let area_bytes = (max_section_end * section_memmap_bytes(page_bytes))
        .next_multiple_of(VMEMMAP_HUGE_PAGE_BYTES);
    let area = mapper.choose_area(area_bytes)?;
    let ranges = vmemmap_backing_ranges(mb, &area, page_bytes);
    let stats = VmemmapStats {
        base: area.base(),
        page_bytes,
        sections: 0,
        bytes: 0,
        table_frames: 0,
        node_bytes: Vec::new(),
        off_node_huge_pages: 0,
        hvo_pages: 0,
    };
    Ok((area, ranges, stats))
}

/// The huge pages (virtual, 2 MiB apart) holding `range`'s struct pages
/// that are not already held by the run before it, whose last huge page
/// starts at `prev_last`: the run widened to whole huge pages, less a
/// first huge page it shares with that run.
fn own_huge_pages(range: &VmemmapRange, prev_last: Option<u64>) -> Range<u64> {
    let mut start = range.virt_start - range.virt_start % VMEMMAP_HUGE_PAGE_BYTES;
    let end = range.virt_end.next_multiple_of(VMEMMAP_HUGE_PAGE_BYTES);
    if prev_last == Some(start) {
        start += VMEMMAP_HUGE_PAGE_BYTES;
    }
    start..end.max(start)
}

impl VmemmapStats {
    fn add_node_bytes(&mut self, nid: NodeId, bytes: u64) {
        match self.node_bytes.iter_mut().find(|(n, _)| *n == nid) {
            Some((_, b)) => *b += bytes,
            None => self.node_bytes.push((nid, bytes)),
        }
    }
}

/// Map struct pages (of layout `P`) for every present section of `mb`,
/// node-local; the sections of the 1 GiB pages in `hvo` (ascending) as
/// HVO maps them (`map_hvo`).
// Out of line: it opens the profile's `vmemmap` phase.
#[inline(never)]
pub fn populate<M: VmemmapMapper, P: PageLayout>(
    mb: &mut Memblock,
    mapper: &mut M,
    hvo: &[HvoPage],
) -> Result<(VmemmapBacking<P>, VmemmapStats), VmemmapError> {
    let (area, ranges, mut stats) = plan_area(mb, mapper, P::BYTES)?;
    let hvo_sections: Vec<Range<u64>> = hvo.iter().map(|h| hvo::page_sections(&h.huge)).collect();
    let ranges = hvo::without_sections(&ranges, &hvo_sections, &area, P::BYTES);
    let mut mapped = SectionSet::new();
    let mut prev_offset = None;
    let mut last_huge_page = None;
    let mut next_hvo = hvo.iter().peekable();
    for range in &ranges {
        // Mappings ascend (`tables_needed`): the HVO pages below this run
        // first.
        while let Some(h) = next_hvo.next_if(|h| hvo_virt::<P>(&area, h) < range.virt_start) {
            let ascending = &mut |offset| ascend(&mut prev_offset, offset);
            map_hvo::<M, P>(mb, mapper, &area, h, ascending, &mut stats)?;
        }
        let huge_pages = own_huge_pages(range, last_huge_page);
        let (first, bytes) = (huge_pages.start, huge_pages.end - huge_pages.start);
        // One contiguous block per run when the node has it.
        let block = (bytes > 0)
            .then(|| {
                mb.alloc(bytes, VMEMMAP_HUGE_PAGE_BYTES, Some(range.nid))
                    .ok()
            })
            .flatten();
        for virt in huge_pages.step_by(VMEMMAP_HUGE_PAGE_BYTES as usize) {
            let phys = match block {
                Some(base) => base + (virt - first),
                None => alloc_on(mb, VMEMMAP_HUGE_PAGE_BYTES, range.nid, "struct pages")?,
            };
            let needed = ascend(&mut prev_offset, virt - area.base());
            map_huge_page(mb, mapper, range, virt, phys, needed, &mut stats)?;
            last_huge_page = Some(virt);
        }
        mapped.insert_range(range.section_nrs.clone());
        stats.sections += range.nr_sections();
        stats.add_node_bytes(range.nid, bytes);
    }
    for h in next_hvo {
        let ascending = &mut |offset| ascend(&mut prev_offset, offset);
        map_hvo::<M, P>(mb, mapper, &area, h, ascending, &mut stats)?;
    }
    for s in hvo_sections {
        stats.sections += s.end - s.start;
        mapped.insert_range(s);
    }
    // SAFETY: every section in `mapped` has its struct pages at
    // `area.page_addr(first pfn of the section, P::BYTES)`, inside a huge
    // page mapped by `mapper.map_2mib` (its run's, or the previous run's
    // for a shared first huge page), which the mapper's contract makes
    // valid, exclusive memory for as long as the mapper lives, or, for an
    // HVO page's sections, mapped by `mapper.map_table` onto the page's
    // kept page: readable, writable in the kept page only (writes
    // elsewhere fault; nothing writes there), the caller keeps the backing
    // no longer than the mapper.
    let backing = unsafe { VmemmapBacking::new(area, mapped) };
    Ok((backing, stats))
}

/// Where the struct pages of HVO page `h` start in `area`.
fn hvo_virt<P: PageLayout>(area: &Vmemmap, h: &HvoPage) -> u64 {
    area.page_addr(h.huge.pfn, P::BYTES).unwrap_or(u64::MAX)
}

/// The tables a mapping at area offset `offset` needs when mappings ascend
/// ([`tables_needed`]), noting it as the previous one.
fn ascend(prev_offset: &mut Option<u64>, offset: u64) -> TablesNeeded {
    let needed = tables_needed(*prev_offset, offset);
    *prev_offset = Some(offset);
    needed
}

/// Map the vmemmap of one 1 GiB page as HVO does (`memmap::hugetlb::hvo`):
/// its tables filled, each 2 MiB of it through one, with the upper tables
/// `needed` says a mapping at that area offset needs.
fn map_hvo<M: VmemmapMapper, P: PageLayout>(
    mb: &mut Memblock,
    mapper: &mut M,
    area: &Vmemmap,
    h: &HvoPage,
    needed: &mut dyn FnMut(u64) -> TablesNeeded,
    stats: &mut VmemmapStats,
) -> Result<(), VmemmapError> {
    mapper.fill_table(h.first_table, &|i| hvo::entry(true, i, h.kept));
    if let Some(rest) = h.rest_table {
        mapper.fill_table(rest, &|i| hvo::entry(false, i, h.kept));
    }
    let first = hvo_virt::<P>(area, h);
    for i in 0..hvo::vmemmap_2mib_pages(P::BYTES) {
        let virt = first + i * VMEMMAP_HUGE_PAGE_BYTES;
        let needed = needed(virt - area.base());
        let mut tables = [0u64; 2];
        for slot in tables.iter_mut().take(needed.count()) {
            *slot = alloc_on(mb, PAGE_SIZE, h.huge.nid, "page tables")?;
        }
        let table = h.table(i).unwrap_or(h.first_table);
        mapper.map_table(virt, table, &tables[..needed.count()])?;
        stats.table_frames += needed.count() as u64;
    }
    stats.table_frames += hvo::frames_per_page(P::BYTES) - 1;
    stats.bytes += hvo::KEPT_BYTES;
    stats.add_node_bytes(h.huge.nid, hvo::KEPT_BYTES);
    stats.hvo_pages += 1;
    Ok(())
}

fn alloc_on(
    mb: &mut Memblock,
    bytes: u64,
    nid: NodeId,
    what: &'static str,
) -> Result<u64, VmemmapError> {
    mb.alloc(bytes, bytes, Some(nid))
        .map_err(|err| VmemmapError::OutOfMemory { what, err })
}

/// Allocate the page tables mapping `virt` needs and map its huge page
/// to `phys`.
fn map_huge_page<M: VmemmapMapper>(
    mb: &mut Memblock,
    mapper: &mut M,
    range: &VmemmapRange,
    virt: u64,
    phys: u64,
    needed: TablesNeeded,
    stats: &mut VmemmapStats,
) -> Result<(), VmemmapError> {
    let mut tables = [0u64; 2];
    for slot in tables.iter_mut().take(needed.count()) {
        *slot = alloc_on(mb, PAGE_SIZE, range.nid, "page tables")?;
    }
    mapper.map_2mib(virt, phys, &tables[..needed.count()])?;
    stats.table_frames += needed.count() as u64;
    if mb
        .memory()
        .regions()
        .iter()
        .any(|r| r.base <= phys && phys < r.end() && r.nid != range.nid)
    {
        stats.off_node_huge_pages += 1;
    }
    stats.bytes += VMEMMAP_HUGE_PAGE_BYTES;
    Ok(())
}

/// The stage's log lines (after `populate` and its timing).
pub fn log(log: &dyn Log, stats: &VmemmapStats, vmemmap_ns: u64, mapping: VmemmapMapping) {
    match mapping {
        VmemmapMapping::AtBoot => log.line(format_args!(
            "vmemmap: {} sections, {} MiB of {}-byte struct pages at {:#x}, {} page-table pages, mapped in {} us",
            stats.sections,
            stats.bytes >> 20,
            stats.page_bytes,
            stats.base,
            stats.table_frames,
            vmemmap_ns / 1000
        )),
        VmemmapMapping::OnFirstUse => log.line(format_args!(
            "vmemmap: {} sections, {} MiB of {}-byte struct pages at {:#x} and up to {} page-table pages reserved in {} us, each section mapped on first use",
            stats.sections,
            stats.bytes >> 20,
            stats.page_bytes,
            stats.base,
            stats.table_frames,
            vmemmap_ns / 1000
        )),
    }
    for (nid, bytes) in &stats.node_bytes {
        log.line(format_args!(
            "vmemmap: node {nid}: {} MiB of struct pages",
            bytes >> 20
        ));
    }
    if stats.hvo_pages > 0 {
        log.line(format_args!(
            "vmemmap: HVO: the struct pages of {} pages of 1.00 GiB mapped onto one kept page each, {} MiB not backed",
            stats.hvo_pages,
            (stats.hvo_pages * hvo::bytes_not_backed(stats.page_bytes)) >> 20
        ));
    }
    if stats.off_node_huge_pages > 0 {
        log.line(format_args!(
            "vmemmap: {} huge pages of struct pages could not be placed on their own node",
            stats.off_node_huge_pages
        ));
    }
}

/// The mapper behind a lock: [`run`] maps every section through it at
/// boot, or reserves and leaves it to map each section on first use (a
/// [`SectionPopulator`] the backing calls, on any CPU).
pub struct SectionMapper<'m, M> {
    state: spin::Mutex<LazyState<'m, M>>,
}

struct LazyState<'m, M> {
    mapper: &'m mut M,
    area: Option<Vmemmap>,
    /// Runs of sections of one node and where their struct pages are.
    runs: Vec<LazyRun>,
    /// Per node: the page-table frames reserved for its sections.
    frames: Vec<FramePool>,
    /// Area regions that have their page directory / PDPT already.
    pd_regions: BTreeSet<u64>,
    pdpt_regions: BTreeSet<u64>,
    mapped: SectionSet,
    /// Sections of `mapped` HVO mapped at boot, not on first use.
    hvo_sections: u64,
    table_frames_used: u64,
    /// The first mapping that failed, for the report.
    error: Option<MapError>,
}

struct LazyRun {
    section_nrs: Range<u64>,
    nid: NodeId,
    /// The huge pages (virtual) this run reserved memory for
    /// ([`own_huge_pages`]); may be empty.
    huge_pages: Range<u64>,
    /// Physical address of the first of them.
    phys: u64,
}

struct FramePool {
    nid: NodeId,
    next: u64,
    end: u64,
}

impl<'m, M: VmemmapMapper> SectionMapper<'m, M> {
    pub fn new(mapper: &'m mut M) -> Self {
        Self {
            state: spin::Mutex::new(LazyState {
                mapper,
                area: None,
                runs: Vec::new(),
                frames: Vec::new(),
                pd_regions: BTreeSet::new(),
                pdpt_regions: BTreeSet::new(),
                mapped: SectionSet::new(),
                hvo_sections: 0,
                table_frames_used: 0,
                error: None,
            }),
        }
    }

    /// Lend the mapper to `f` (CPU bring-up's own mappings), holding the
    /// lock: nothing maps a section meanwhile.
    pub fn lend_mapper<R>(&self, f: impl FnOnce(&mut M) -> R) -> R {
        f(self.state.lock().mapper)
    }

    /// Sections mapped on first use so far, page-table frames they took,
    /// and the first mapping error, if any.
    pub fn first_use(&self) -> (u64, u64, Option<MapError>) {
        let st = self.state.lock();
        (
            st.mapped.len() - st.hvo_sections,
            st.table_frames_used,
            st.error,
        )
    }

    /// Sections HVO mapped at boot.
    pub fn hvo_sections(&self) -> u64 {
        self.state.lock().hvo_sections
    }

    /// Reserve every present section's struct pages (one memblock block
    /// per run of sections, on its node) and each node's page-table frames
    /// (one per 1 GiB and per 512 GiB of area its runs touch), and return a
    /// backing that maps each section the first time it is asked for, and
    /// then writes the section's holes of `layout`: boot writes no struct
    /// page. The sections of the 1 GiB pages in `hvo` (ascending) are
    /// mapped now, as HVO maps them (`map_hvo`): their struct pages are
    /// written in the huge-page phase, never by first use.
    // Out of line: it opens the profile's `vmemmap` phase.
    #[inline(never)]
    pub fn reserve<P: PageLayout>(
        &self,
        mb: &mut Memblock,
        layout: &ZoneLayout,
        hvo: &[HvoPage],
    ) -> Result<(VmemmapBacking<P>, VmemmapStats), VmemmapError> {
        let mut st = self.state.lock();
        let (area, ranges, mut stats) = plan_area(mb, &mut *st.mapper, P::BYTES)?;
        let hvo_sections: Vec<Range<u64>> =
            hvo.iter().map(|h| hvo::page_sections(&h.huge)).collect();
        let ranges = hvo::without_sections(&ranges, &hvo_sections, &area, P::BYTES);
        let mut allowed = SectionSet::new();
        let mut node_frames: Vec<(NodeId, u64)> = Vec::new();
        let mut last_huge_page = None;
        for range in &ranges {
            let huge_pages = own_huge_pages(range, last_huge_page);
            let bytes = huge_pages.end - huge_pages.start;
            let phys = if bytes == 0 {
                0
            } else {
                last_huge_page = Some(huge_pages.end - VMEMMAP_HUGE_PAGE_BYTES);
                mb.alloc(bytes, VMEMMAP_HUGE_PAGE_BYTES, Some(range.nid))
                    .map_err(|err| VmemmapError::OutOfMemory {
                        what: "struct pages",
                        err,
                    })?
            };
            allowed.insert_range(range.section_nrs.clone());
            stats.sections += range.nr_sections();
            stats.bytes += bytes;
            stats.add_node_bytes(range.nid, bytes);
            if bytes > 0 {
                let (first, last) = (
                    huge_pages.start - area.base(),
                    huge_pages.end - 1 - area.base(),
                );
                let tables = (last / PD_SPAN_BYTES - first / PD_SPAN_BYTES + 1)
                    + (last / PDPT_SPAN_BYTES - first / PDPT_SPAN_BYTES + 1);
                match node_frames.iter_mut().find(|(n, _)| *n == range.nid) {
                    Some((_, f)) => *f += tables,
                    None => node_frames.push((range.nid, tables)),
                }
            }
            st.runs.push(LazyRun {
                section_nrs: range.section_nrs.clone(),
                nid: range.nid,
                huge_pages,
                phys,
            });
        }
        st.reserve_frames(mb, node_frames, &mut stats)?;
        st.area = Some(area);
        st.map_hvo::<P>(mb, &area, hvo, &mut stats)?;
        for s in hvo_sections {
            stats.sections += s.end - s.start;
            st.hvo_sections += s.end - s.start;
            allowed.insert_range(s.clone());
            st.mapped.insert_range(s);
        }
        drop(st);
        let holes = layout.unavailable_ranges().to_vec();
        // SAFETY: `self` maps each section of `allowed` at its place in
        // `area` (see `populate`), and the pipeline keeps the section
        // mapper alive longer than the memmap over this backing (`run`
        // declares it first).
        let backing = unsafe { VmemmapBacking::new_lazy(area, allowed, self, holes) };
        Ok((backing, stats))
    }
}

impl<M: VmemmapMapper> LazyState<'_, M> {
    /// Reserve each node's page-table frames (`(node, frames)`) as one
    /// memblock block on that node, for first use to take from.
    fn reserve_frames(
        &mut self,
        mb: &mut Memblock,
        node_frames: Vec<(NodeId, u64)>,
        stats: &mut VmemmapStats,
    ) -> Result<(), VmemmapError> {
        for (nid, n) in node_frames {
            let base = mb
                .alloc(n * PAGE_SIZE, PAGE_SIZE, Some(nid))
                .map_err(|err| VmemmapError::OutOfMemory {
                    what: "page tables",
                    err,
                })?;
            self.frames.push(FramePool {
                nid,
                next: base,
                end: base + n * PAGE_SIZE,
            });
            stats.table_frames += n;
        }
        Ok(())
    }

    /// Map the vmemmap of the 1 GiB pages in `hvo` as HVO does, noting the
    /// page directories and PDPTs it adds so first use finds them.
    fn map_hvo<P: PageLayout>(
        &mut self,
        mb: &mut Memblock,
        area: &Vmemmap,
        hvo: &[HvoPage],
        stats: &mut VmemmapStats,
    ) -> Result<(), VmemmapError> {
        let (pd_regions, pdpt_regions) = (&mut self.pd_regions, &mut self.pdpt_regions);
        let mut needed = |offset: u64| TablesNeeded {
            pdpt: pdpt_regions.insert(offset / PDPT_SPAN_BYTES),
            pd: pd_regions.insert(offset / PD_SPAN_BYTES),
        };
        for h in hvo {
            map_hvo::<M, P>(mb, &mut *self.mapper, area, h, &mut needed, stats)?;
        }
        Ok(())
    }

    /// Map `section_nr` now (it must be in a run): its huge page unless a
    /// section sharing it mapped it already, and the page directory / PDPT
    /// that needs from its node's frames; then `prepare` its struct pages
    /// (of layout `P`).
    fn map<P: PageLayout>(
        &mut self,
        section_nr: u64,
        prepare: &mut dyn FnMut(&mut [P]),
    ) -> Result<(), MapError> {
        if self.mapped.contains(section_nr) {
            return Ok(());
        }
        let not_reserved = MapError::NotReserved { section_nr };
        let area = self.area.ok_or(not_reserved)?;
        let virt = area
            .page_addr(section_nr_to_pfn(section_nr), P::BYTES)
            .ok_or(not_reserved)?;
        let i = self
            .runs
            .partition_point(|r| r.section_nrs.start <= section_nr);
        i.checked_sub(1)
            .map(|i| &self.runs[i])
            .filter(|r| r.section_nrs.contains(&section_nr))
            .ok_or(not_reserved)?;
        let huge_page = virt - virt % VMEMMAP_HUGE_PAGE_BYTES;
        if !self.huge_page_mapped(area, huge_page, P::BYTES) {
            self.map_huge_page(area, huge_page, section_nr)?;
        }
        self.mapped.insert(section_nr);
        // SAFETY: the huge page holding the section's struct pages is
        // mapped (`map_2mib` returned Ok for it, now or for the section
        // sharing it), so the mapper's contract makes it valid, exclusive
        // memory; the section's `PAGES_PER_SECTION * P::BYTES` bytes from
        // `virt` lie in it (sections never straddle a huge page: their
        // memmap size divides 2 MiB) and no other reference to them exists
        // yet: callers get the section only after `populate`, which holds
        // our lock, returns.
        let pages =
            unsafe { core::slice::from_raw_parts_mut(virt as *mut P, PAGES_PER_SECTION as usize) };
        prepare(pages);
        Ok(())
    }

    /// Is the huge page at `huge_page` mapped: has a section whose struct
    /// pages (of `page_bytes`) lie in it been mapped?
    fn huge_page_mapped(&self, area: Vmemmap, huge_page: u64, page_bytes: u64) -> bool {
        let section_bytes = section_memmap_bytes(page_bytes);
        let first = (huge_page - area.base()) / section_bytes;
        (first..first + VMEMMAP_HUGE_PAGE_BYTES / section_bytes).any(|nr| self.mapped.contains(nr))
    }

    /// Map the huge page at `huge_page` from the reservation of the run
    /// holding it, with the tables it needs from that run's node.
    fn map_huge_page(
        &mut self,
        area: Vmemmap,
        huge_page: u64,
        section_nr: u64,
    ) -> Result<(), MapError> {
        let j = self
            .runs
            .partition_point(|r| r.huge_pages.start <= huge_page);
        let run = j
            .checked_sub(1)
            .map(|j| &self.runs[j])
            .filter(|r| r.huge_pages.contains(&huge_page))
            .ok_or(MapError::NotReserved { section_nr })?;
        let (virt, phys) = (huge_page, run.phys + (huge_page - run.huge_pages.start));
        let offset = virt - area.base();
        let needed = TablesNeeded {
            pdpt: !self.pdpt_regions.contains(&(offset / PDPT_SPAN_BYTES)),
            pd: !self.pd_regions.contains(&(offset / PD_SPAN_BYTES)),
        };
        let pool = self
            .frames
            .iter_mut()
            .find(|p| p.nid == run.nid)
            .filter(|p| p.next + needed.count() as u64 * PAGE_SIZE <= p.end)
            .ok_or(MapError::TablesExhausted { virt })?;
        let mut tables = [0u64; 2];
        for t in tables.iter_mut().take(needed.count()) {
            *t = pool.next;
            pool.next += PAGE_SIZE;
        }
        self.mapper
            .map_2mib(virt, phys, &tables[..needed.count()])?;
        self.pdpt_regions.insert(offset / PDPT_SPAN_BYTES);
        self.pd_regions.insert(offset / PD_SPAN_BYTES);
        self.table_frames_used += needed.count() as u64;
        Ok(())
    }
}

// SAFETY: `populate` maps section `nr`'s struct pages at
// `area.page_addr(first pfn of nr, P::BYTES)`, inside a huge page mapped
// once, to memblock-reserved memory of the run holding that huge page
// (reserved for it alone in `reserve`), through the mapper whose contract
// makes it valid, exclusive memory for as long as the mapper lives; the
// lock makes concurrent calls one at a time, and a mapped section is found
// in `mapped` and left alone; `prepare` runs once per section, in the call
// that maps it, under the lock, before that call returns.
unsafe impl<M: VmemmapMapper, P: PageLayout> SectionPopulator<P> for SectionMapper<'_, M> {
    fn populate(&self, section_nr: u64, prepare: &mut dyn FnMut(&mut [P])) -> bool {
        let mut st = self.state.lock();
        match st.map(section_nr, prepare) {
            Ok(()) => true,
            Err(e) => {
                st.error.get_or_insert(e);
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;
    const MIB2: u64 = 2 << 20;

    #[test]
    fn first_mapping_needs_both_tables() {
        assert_eq!(
            tables_needed(None, 5 * GIB),
            TablesNeeded {
                pdpt: true,
                pd: true
            }
        );
    }

    #[test]
    fn tables_follow_1g_and_512g_boundaries() {
        let base = 0u64;
        // Next 2 MiB page in the same GiB: nothing new.
        assert_eq!(tables_needed(Some(base), base + MIB2).count(), 0);
        // Crossing into the next GiB: a page directory.
        assert_eq!(
            tables_needed(Some(base + GIB - MIB2), base + GIB),
            TablesNeeded {
                pdpt: false,
                pd: true
            }
        );
        // A hole skipping GiBs still needs one directory only.
        assert_eq!(tables_needed(Some(base), base + 7 * GIB).count(), 1);
        // Crossing a 512 GiB slot: both.
        assert_eq!(
            tables_needed(Some(base + 511 * GIB), base + 512 * GIB),
            TablesNeeded {
                pdpt: true,
                pd: true
            }
        );
    }

    #[test]
    fn a_1tib_guest_needs_18_table_frames() {
        // QEMU's 1 TiB layout: 3 GiB below 4 GiB (sections 0..24), RAM moved
        // to [1 TiB, 2 TiB - 3 GiB) (sections 8192..16360). 2 MiB of area
        // per section: the low part is 48 MiB in one GiB; the high part
        // starts at 16 GiB of area and spans 16 GiB - 48 MiB, i.e. 16 GiB
        // regions: 1 PDPT + 1 + 16 PDs = 18, as the kernel logged it.
        let mut prev = None;
        let mut frames = 0;
        for nr in (0..24).chain(8192..16360) {
            let offset = nr * MIB2;
            frames += tables_needed(prev, offset).count();
            prev = Some(offset);
        }
        assert_eq!(frames, 18);
    }
}
