//! HVO for the 2 MiB pages (`hugetlb_free_vmemmap=on`), once the huge-page
//! phase took them from the page allocator and wrote them as compound
//! pages, as Linux's `hugetlb_vmemmap_optimize` applies it after
//! allocation: each 2 MiB vmemmap mapping holding their struct pages is
//! split into a page table taken from the allocator (order 0, the huge
//! page's node), each page's vmemmap base pages after the kept one are
//! remapped read-only onto it, and the frames they had go back to the
//! allocator. Those frames are memblock-reserved vmemmap memory (their
//! struct pages `PG_reserved`), freed as Linux frees bootmem pages: the
//! allocator manages them from now on
//! ([`manage`](deferred_init::BuddyAllocator::manage)), memblock forgets
//! them, and
//! [`free_initialised_range`](deferred_init::BuddyAllocator::free_initialised_range)
//! clears `PG_reserved` and frees them. Under `memmap=ondemand` they may
//! still lie in the pool, their struct pages unwritten: they are taken out
//! of it first ([`DeferredInit::take_from_pool`]), which writes those. The
//! plan is `memmap::hugetlb::hvo_2m`; here are only the calls.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::fmt;

use deferred_init::hugetlb_pool::HugePool;
use deferred_init::{
    DeferredInit, DeferredInitError, FreeError, ManageError, ManagedRange, PageAllocator,
};
use memmap::hugetlb::hvo_2m::{self, Plan};
use memmap::memblock::{Memblock, MemblockError};
use memmap::page::PageLayout;
use memmap::store::{Memmap, VmemmapBacking};
use memmap::zones::ZoneLayout;
use memmap::{Pfn, PfnRange, ZoneType, PAGE_SHIFT, PAGE_SIZE};

use super::context::Ctx;
use super::error::PipelineError;
use super::seams::{MapError, VmemmapMapper};
use super::vmemmap::SectionMapper;

/// What HVO did to the 2 MiB pages, for verification and the fault hook.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hvo2m {
    /// The pages it remapped, ascending (all of the pool's, or none).
    pub heads: Vec<Pfn>,
    /// The page tables it took from the allocator, ascending.
    pub tables: Vec<Pfn>,
    pub freed_pages: u64,
}

/// Why HVO of the 2 MiB pages failed midway.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HvoError {
    Map(MapError),
    Manage(ManageError),
    Free(FreeError),
    Memblock(MemblockError),
    Pool(DeferredInitError),
    /// A freed frame lies in no memory memblock knows.
    NotMemory {
        pfn: Pfn,
    },
}

impl fmt::Display for HvoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HVO of the 2 MiB pages: ")?;
        match self {
            HvoError::Map(e) => write!(f, "{e}"),
            HvoError::Manage(e) => write!(f, "{e}"),
            HvoError::Free(e) => write!(f, "freeing the vmemmap pages: {e}"),
            HvoError::Memblock(e) => write!(f, "forgetting the freed vmemmap pages: {e}"),
            HvoError::Pool(e) => write!(f, "taking the freed vmemmap pages out of the pool: {e}"),
            HvoError::NotMemory { pfn } => write!(
                f,
                "the vmemmap page {pfn:#x} lies in no memory memblock knows; a memboot bug, report it with the log"
            ),
        }
    }
}

/// Apply HVO to `pool`'s pages when the command line asks for it
/// (`hvo`), with struct pages of layout `P`; a line says what it did, or
/// why it did nothing.
#[allow(clippy::too_many_arguments)]
pub fn run<M: VmemmapMapper, P: PageLayout>(
    cx: &Ctx<'_>,
    sections: &SectionMapper<'_, M>,
    memmap: &Memmap<VmemmapBacking<P>>,
    di: &DeferredInit<'_, VmemmapBacking<P>>,
    pages: PageAllocator<'_, '_, VmemmapBacking<P>>,
    mb: &mut Memblock,
    layout: &ZoneLayout,
    pool: Option<&HugePool>,
    hvo: bool,
) -> Result<Hvo2m, PipelineError> {
    let Some(pool) = pool.filter(|p| hvo && !p.pages.is_empty()) else {
        return Ok(Hvo2m::default());
    };
    if hvo_2m::freed_pages(P::BYTES) == 0 {
        cx.log.line(format_args!(
            "HugeTLB: HVO of the 2.00 MiB pages frees nothing at {}-byte struct pages: a page's 512 struct pages fill the one vmemmap page it keeps",
            P::BYTES
        ));
        return Ok(Hvo2m::default());
    }
    let heads: Vec<Pfn> = pool.pages.iter().map(|p| p.pfn).collect();
    let plan = hvo_2m::plan(&memmap.backing().area(), &heads, P::BYTES);
    let Some(tables) = take_tables(&plan, pool, pages, layout) else {
        cx.log.line(format_args!(
            "HugeTLB: HVO of the 2.00 MiB pages not applied: no page for its {} page tables",
            plan.splits.len()
        ));
        return Ok(Hvo2m::default());
    };
    let phys = sections
        .lend_mapper(|mapper| remap(mapper, &plan, &tables))
        .map_err(|e| PipelineError::Hvo(HvoError::Map(e)))?;
    let freed = hvo_2m::freed_frames(&plan, |split| phys[&split]);
    let given = give_back(di, mb, &freed).map_err(PipelineError::Hvo)?;
    let freed_pages = given.nr_pages;
    cx.log.line(format_args!(
        "HugeTLB: HVO: the vmemmap of {} pages of 2.00 MiB remapped onto one kept page each, {} vmemmap mappings split, {} KiB freed to the page allocator{}",
        heads.len(),
        plan.splits.len(),
        (freed_pages * PAGE_SIZE) >> 10,
        match given.nr_taken_from_pool {
            0 => alloc::string::String::new(),
            n => alloc::format!(" ({n} of them taken out of the pool first)"),
        }
    ));
    cx.facts
        .record(|f| f.hvo_2m_vmemmap_bytes_freed = freed_pages * PAGE_SIZE);
    let mut tables: Vec<Pfn> = tables.iter().map(|t| t >> PAGE_SHIFT).collect();
    tables.sort_unstable();
    Ok(Hvo2m {
        heads,
        tables,
        freed_pages,
    })
}

/// A page table for each split, order 0 from its first huge page's node
/// (physical addresses, in `plan.splits` order); `None`, with whatever was
/// taken given back, when the allocator has too few.
fn take_tables<B: memmap::store::MemmapBacking>(
    plan: &Plan,
    pool: &HugePool,
    pages: PageAllocator<'_, '_, B>,
    layout: &ZoneLayout,
) -> Option<Vec<u64>> {
    let mut tables = Vec::with_capacity(plan.splits.len());
    let mut next = plan.pages.iter().zip(&pool.pages).peekable();
    for &split in &plan.splits {
        let nid = next
            .find(|(p, _)| p.split == split)
            .map_or(0, |(_, huge)| huge.nid);
        let got = layout
            .highest_zone(nid)
            .and_then(|z| pages.alloc_pages(nid, z.zone, 0).ok());
        match got {
            Some(pfn) => tables.push(pfn << PAGE_SHIFT),
            None => {
                for t in tables {
                    // Allocated just now, ours alone: it goes back whole.
                    let _ = pages.free_pages(t >> PAGE_SHIFT, 0);
                }
                return None;
            }
        }
    }
    Some(tables)
}

/// Split each mapping of `plan` into its table and remap every page's
/// tails onto its kept page. Returns each split mapping's physical base.
fn remap<M: VmemmapMapper>(
    mapper: &mut M,
    plan: &Plan,
    tables: &[u64],
) -> Result<BTreeMap<u64, u64>, MapError> {
    let mut phys = BTreeMap::new();
    for (&split, &table) in plan.splits.iter().zip(tables) {
        // SAFETY: `table` was just allocated to us alone, order 0; from
        // now on it is a page table nothing else refers to (it never
        // returns to the allocator).
        phys.insert(split, unsafe { mapper.split_2mib(split, table) }?);
    }
    for p in &plan.pages {
        let kept = hvo_2m::frame_in(p.split, phys[&p.split], p.kept);
        for tail in p.tail_pages() {
            // SAFETY: the tails are struct pages of a 2 MiB page of the
            // pool, which the huge-page phase wrote and nothing holds a
            // reference to or writes after it; no job runs (the pipeline
            // runs on the boot CPU here). From now on they read as the
            // kept page's struct pages, read-only, and the backing's
            // promise of writable struct pages no longer holds for them:
            // nothing writes a huge page's tails (verification reads
            // them; `test_fault=hvo_tail` writes one to fault).
            unsafe { mapper.remap_4k(tail, kept, false) }?;
        }
    }
    Ok(phys)
}

/// What [`give_back`] did.
struct Given {
    nr_pages: u64,
    /// Pages taken out of the pool so that their struct pages exist.
    nr_taken_from_pool: u64,
}

/// Give the frames of `freed` (ascending PFN runs, no longer mapped) to
/// the allocator, as Linux frees bootmem pages, their struct pages first
/// written if they are still in `di`'s pool. Runs on the boot CPU alone.
fn give_back<B: memmap::store::MemmapBacking>(
    di: &DeferredInit<'_, B>,
    mb: &mut Memblock,
    freed: &[PfnRange],
) -> Result<Given, HvoError> {
    let buddy = di.buddy();
    let mut given = Given {
        nr_pages: 0,
        nr_taken_from_pool: 0,
    };
    for &run in freed {
        let nid = mb
            .memory()
            .regions()
            .iter()
            .find(|r| r.pfns().start <= run.start && run.end <= r.pfns().end)
            .map(|r| r.nid)
            .ok_or(HvoError::NotMemory { pfn: run.start })?;
        given.nr_taken_from_pool += di.take_from_pool(nid, run).map_err(HvoError::Pool)?;
        let zone = ZoneType::of_pfn(run.start);
        buddy
            .manage(ManagedRange {
                nid,
                zone,
                pfns: run,
            })
            .map_err(HvoError::Manage)?;
        mb.free(run.start << PAGE_SHIFT, run.nr_pages() << PAGE_SHIFT)
            .map_err(HvoError::Memblock)?;
        // SAFETY: the frames held struct pages of the huge pages' tails,
        // which no mapping names any more (`remap`), and their own struct
        // pages were initialised as reserved memory when memory was made
        // ready or just now, taken out of the pool; no one else refers to them,
        // and the allocator owns them from now on.
        unsafe { buddy.free_initialised_range(run) }.map_err(HvoError::Free)?;
        given.nr_pages += run.nr_pages();
    }
    Ok(given)
}
