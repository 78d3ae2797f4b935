//! 1 GiB (gigantic) huge pages reserved from memblock at boot, and their
//! struct pages written as Linux's compound pages.
//!
//! # Reservation ([`reserve_gigantic`])
//! Linux's `hugetlb_hstate_alloc_pages` → `alloc_bootmem_huge_page`
//! (mm/hugetlb.c): each page is one `memblock_alloc_try_nid_raw(1 GiB,
//! 1 GiB, …, nid)`, the highest 1 GiB-aligned frame of free memory.
//! - A total ([`Request::Total`]) goes round-robin over the nodes with
//!   memory (`for_each_node_mask_to_alloc` from the first), each page on
//!   its turn's node or, when that node has no room, on any node (the
//!   `try_nid` fallback); the first page that fits nowhere ends it.
//! - Per node ([`Request::PerNode`]) each node gets its count on that node
//!   only, as Linux since 6.15 allocates it (`memblock_alloc_exact_nid_raw`;
//!   6.1 and 6.12 fall back to any node here too).
//!
//! What does not fit is a [`Shortfall`], printed as Linux's warning line;
//! the boot goes on with what fitted. Since the frames are 1 GiB-aligned
//! and a page takes one frame of one node's free memory, the pages granted
//! are `min(asked, frames free)` per node, or over all nodes for a total.
//!
//! The reservation is made before the zones and the vmemmap, as Linux 7.3
//! makes it (6.1 and 6.12 make it after `sparse_init()`, when the vmemmap
//! already holds the top of each node), and marked `MEMBLOCK_RSRV_NOINIT`
//! whole ([`Memblock::reserve_noinit`]): memmap init, the deferred workers
//! and the on-demand pool leave the pages alone, and the huge-page phase
//! writes every struct page of them once ([`prep_gigantic`]), as Linux
//! 6.12's `gather_bootmem_prealloc` writes the tails (6.12 still has
//! `memmap_init_reserved_pages` write the head first; here one writer
//! owns all of it).
//!
//! # The record
//! Linux ≤ 6.12 keeps each page's `struct huge_bootmem_page` in the first
//! bytes of the huge page itself. memboot writes nothing inside a huge
//! page: its record is [`Reservation::pages`], a vector on the kernel heap
//! (16 bytes a page), and the `RSRV_NOINIT` regions of memblock.
//!
//! # Compound pages ([`PageLayout::prep_compound_head`] and `_tail`)
//! As Linux 6.1's `prep_compound_gigantic_page` and `prep_new_huge_page`
//! leave them before `free_huge_page` queues them: the head has `PG_head`
//! and `_refcount` 0; every tail has `compound_head` = the head's address
//! | 1 and `_refcount` 0, `PG_reserved` clear; the first tail holds the
//! folio's destructor (`HUGETLB_PAGE_DTOR`), order 18, `compound_mapcount`
//! −1, `compound_pincount` 0 and `compound_nr` 262144 where the layout has
//! room ([`crate::page`], [`crate::page32`], [`crate::page8`] say where).

use alloc::vec::Vec;
use core::fmt;

/// Linux's `HugeTLB: registered …` line, as the bench reads it back.
pub use memboot_contract::hugepage_forms::report::RegisteredLine;
use memboot_contract::hugepage_forms::HugePageSize;

use crate::memblock::{Memblock, MemblockError};
use crate::page::{page_links, PageLayout};
use crate::store::{Memmap, MemmapBacking};
use crate::{NodeId, Pfn, PfnRange, ZoneType, PAGE_SHIFT};

/// The order of a 1 GiB page: 2^18 pages of 4 KiB.
pub const GIGANTIC_ORDER: u32 = 18;
/// Base pages in a 1 GiB page.
pub const GIGANTIC_NR_PAGES: u64 = 1 << GIGANTIC_ORDER;
/// Bytes in a 1 GiB page.
pub const GIGANTIC_BYTES: u64 = GIGANTIC_NR_PAGES << PAGE_SHIFT;
/// The order of a huge page of `size` (9 for 2 MiB, 18 for 1 GiB).
pub fn order_of(size: HugePageSize) -> u32 {
    (size.bytes() >> PAGE_SHIFT).trailing_zeros()
}
/// Linux 6.1's `HUGETLB_PAGE_DTOR` (`enum compound_dtor_id`), the first
/// tail's `compound_dtor` once `prep_new_huge_page` ran.
pub const HUGETLB_PAGE_DTOR: u8 = 2;

/// How many 1 GiB pages the command line asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Spread round-robin over the nodes with memory.
    Total(u64),
    /// `(node, pages)`, each on that node only.
    PerNode(Vec<(NodeId, u64)>),
}

/// One reserved 1 GiB page: its first PFN (1 GiB-aligned) and its node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct HugePage {
    pub pfn: Pfn,
    pub nid: NodeId,
}

impl HugePage {
    pub fn pfns(&self) -> PfnRange {
        PfnRange::new(self.pfn, self.pfn + GIGANTIC_NR_PAGES)
    }
}

/// Fewer pages of `size` than asked: Linux's warning, as its line reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shortfall {
    /// A total: `asked`, `allocated` over all nodes.
    Total {
        size: HugePageSize,
        asked: u64,
        allocated: u64,
    },
    /// One node of a per-node request.
    Node {
        size: HugePageSize,
        nid: NodeId,
        asked: u64,
        allocated: u64,
    },
}

impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (size, asked, allocated, node) = match *self {
            Shortfall::Total {
                size,
                asked,
                allocated,
            } => (size, asked, allocated, None),
            Shortfall::Node {
                size,
                nid,
                asked,
                allocated,
            } => (size, asked, allocated, Some(nid)),
        };
        write!(
            f,
            "HugeTLB: allocating {asked} of page size {} failed",
            size.label()
        )?;
        if let Some(nid) = node {
            write!(f, " node{nid}")?;
        }
        write!(f, ".  Only allocated {allocated} hugepages.")
    }
}

/// What [`reserve_gigantic`] reserved: memboot's record of the pages.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reservation {
    /// The pages, ascending by PFN.
    pub pages: Vec<HugePage>,
    /// What did not fit, in Linux's order (per node: by node).
    pub shortfalls: Vec<Shortfall>,
}

impl Reservation {
    /// Pages per node, `nr_nodes` entries (node ids `0..nr_nodes`).
    pub fn per_node(&self, nr_nodes: usize) -> Vec<u64> {
        count_per_node(self.pages.iter().map(|p| p.nid), nr_nodes)
    }
}

/// How many of `nids` name each node, `nr_nodes` entries (node ids
/// `0..nr_nodes`; others are not counted): huge pages per node.
pub fn count_per_node(nids: impl Iterator<Item = NodeId>, nr_nodes: usize) -> Vec<u64> {
    let mut out = alloc::vec![0u64; nr_nodes];
    for nid in nids {
        if let Some(n) = out.get_mut(nid as usize) {
            *n += 1;
        }
    }
    out
}

/// One `memblock_alloc_*_nid_raw(1 GiB, 1 GiB)`: the highest aligned free
/// frame on `nid` (then anywhere, unless `exact`), reserved no-init.
fn alloc_one(
    mb: &mut Memblock,
    nid: NodeId,
    exact: bool,
) -> Result<Option<HugePage>, MemblockError> {
    let limit = 1u64 << mb.phys_addr_bits();
    let found = mb
        .find_top_down(GIGANTIC_BYTES, GIGANTIC_BYTES, 0, limit, Some(nid))
        .or_else(|| {
            (!exact)
                .then(|| mb.find_top_down(GIGANTIC_BYTES, GIGANTIC_BYTES, 0, limit, None))
                .flatten()
        });
    let Some(base) = found else {
        return Ok(None);
    };
    mb.reserve_noinit(base, GIGANTIC_BYTES)?;
    let pfn = base >> PAGE_SHIFT;
    let nid = mb.pfn_to_nid(pfn).unwrap_or(nid);
    Ok(Some(HugePage { pfn, nid }))
}

/// Reserve the 1 GiB pages `request` asks for from `mb` (module docs).
/// Never fails for lack of room: that is a [`Shortfall`]; an error is a
/// memblock table that cannot take another region.
// Out of line: it opens the profile's `vmemmap` phase.
#[inline(never)]
pub fn reserve_gigantic(
    mb: &mut Memblock,
    request: &Request,
) -> Result<Reservation, MemblockError> {
    let nodes = mb.node_ids();
    let (mut pages, shortfalls) = take_pages(request, &nodes, HugePageSize::Gib1, |nid, exact| {
        alloc_one(mb, nid, exact)
    })?;
    pages.sort_unstable();
    Ok(Reservation { pages, shortfalls })
}

/// Take the pages of `size` that `request` asks for, one `take(nid,
/// exact)` a try, as Linux's `for_each_node_mask_to_alloc` walks `nodes`:
/// a total tries each page on the next node in turn (`exact` false: the
/// taker may fall back as its allocator does), then on the ones after it,
/// the turn moving on with every try; the first page no node gives ends
/// it. Per node, each node's count on that node (`exact` true), by node.
/// What falls short is Linux's warning for `size`.
pub fn take_pages<T, E>(
    request: &Request,
    nodes: &[NodeId],
    size: HugePageSize,
    mut take: impl FnMut(NodeId, bool) -> Result<Option<T>, E>,
) -> Result<(Vec<T>, Vec<Shortfall>), E> {
    let mut pages = Vec::new();
    let mut shortfalls = Vec::new();
    match request {
        Request::Total(asked) => {
            let mut next = 0;
            'pages: while (pages.len() as u64) < *asked {
                for _ in 0..nodes.len() {
                    let nid = nodes[next % nodes.len()];
                    next += 1;
                    if let Some(page) = take(nid, false)? {
                        pages.push(page);
                        continue 'pages;
                    }
                }
                break;
            }
            let allocated = pages.len() as u64;
            if allocated < *asked {
                shortfalls.push(Shortfall::Total {
                    size,
                    asked: *asked,
                    allocated,
                });
            }
        }
        Request::PerNode(per_node) => {
            let mut per_node = per_node.clone();
            per_node.sort_unstable();
            for (nid, asked) in per_node {
                let mut allocated = 0;
                while allocated < asked {
                    let Some(page) = take(nid, true)? else { break };
                    pages.push(page);
                    allocated += 1;
                }
                if allocated < asked {
                    shortfalls.push(Shortfall::Node {
                        size,
                        nid,
                        asked,
                        allocated,
                    });
                }
            }
        }
    }
    Ok((pages, shortfalls))
}

/// The head of a compound page, as its tails name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompoundHead {
    pub pfn: Pfn,
    /// The head struct page's address (what `compound_head` holds, | 1).
    pub addr: u64,
    pub order: u32,
}

/// Why a huge page's struct pages could not be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnbackedHugePage {
    pub pfn: Pfn,
}

impl fmt::Display for UnbackedHugePage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "hugetlb: the struct pages of pfn {:#x} have no backing; map the vmemmap of every present section before preparing huge pages",
            self.pfn
        )
    }
}

/// The head's address as its tails must name it, if backed.
pub fn compound_head_of<B: MemmapBacking>(
    memmap: &Memmap<B>,
    page: &HugePage,
) -> Option<CompoundHead> {
    let head = memmap.page(page.pfn)?;
    Some(CompoundHead {
        pfn: page.pfn,
        addr: head as *const B::Page as u64,
        order: GIGANTIC_ORDER,
    })
}

/// Write every struct page of `page` as Linux's compound page of order 18
/// (`prep_compound_gigantic_page` + `prep_new_huge_page`, module docs).
/// Returns the struct pages written.
///
/// # Safety
/// As for [`prep_compound`].
pub unsafe fn prep_gigantic<B: MemmapBacking>(
    memmap: &Memmap<B>,
    page: &HugePage,
) -> Result<u64, UnbackedHugePage> {
    // SAFETY: the caller's guarantee, passed on.
    unsafe { prep_compound(memmap, page.pfn, page.nid, GIGANTIC_ORDER) }
}

/// [`prep_gigantic`] for a page whose vmemmap HVO maps
/// ([`hvo`]): only the struct pages of the kept vmemmap page, the head and
/// the first tails, as Linux's `hugetlb_folio_init_vmemmap` writes only
/// those of an HVO page; every other tail reads as one of them.
///
/// # Safety
/// As for [`prep_compound`].
pub unsafe fn prep_gigantic_hvo<B: MemmapBacking>(
    memmap: &Memmap<B>,
    page: &HugePage,
) -> Result<u64, UnbackedHugePage> {
    let kept = hvo::kept_struct_pages(<B::Page as PageLayout>::BYTES);
    // SAFETY: the caller's guarantee, passed on.
    unsafe { prep_compound_first(memmap, page.pfn, page.nid, GIGANTIC_ORDER, kept) }
}

/// Write the `1 << order` struct pages from `head_pfn` (aligned to the
/// order) as Linux's compound page of that order, node `nid`: the head,
/// then each tail, a section piece at a time. Returns the struct pages
/// written. Takes the memmap shared, as the deferred workers do: the pages
/// belong to no chunk, pool or free block, so nothing else writes them.
///
/// # Safety
/// While it runs, no other reference to a struct page of the compound page
/// may exist or be created.
pub unsafe fn prep_compound<B: MemmapBacking>(
    memmap: &Memmap<B>,
    head_pfn: Pfn,
    nid: NodeId,
    order: u32,
) -> Result<u64, UnbackedHugePage> {
    // SAFETY: the caller's guarantee, passed on.
    unsafe { prep_compound_first(memmap, head_pfn, nid, order, 1 << order) }
}

/// [`prep_compound`] of only the first `nr_pages` struct pages.
///
/// # Safety
/// As for [`prep_compound`].
unsafe fn prep_compound_first<B: MemmapBacking>(
    memmap: &Memmap<B>,
    head_pfn: Pfn,
    nid: NodeId,
    order: u32,
    nr_pages: u64,
) -> Result<u64, UnbackedHugePage> {
    let unbacked = |pfn| UnbackedHugePage { pfn };
    let head = memmap.page(head_pfn).ok_or(unbacked(head_pfn))?;
    let head = CompoundHead {
        pfn: head_pfn,
        addr: head as *const B::Page as u64,
        order,
    };
    let mut written = 0;
    let end = head_pfn + nr_pages.min(1 << order);
    for piece in PfnRange::new(head_pfn, end).section_pieces() {
        let zone = ZoneType::of_pfn(piece.start);
        let links = page_links(piece.start, zone, nid);
        // SAFETY: the caller guarantees no other reference to these pages;
        // `head` is a copy, not a reference.
        let pages = unsafe { memmap.pages_mut_unchecked(piece) }.ok_or(unbacked(piece.start))?;
        for (pfn, p) in (piece.start..).zip(pages.iter_mut()) {
            if pfn == head.pfn {
                p.prep_compound_head(links);
            } else {
                p.prep_compound_tail(links, head, pfn - head.pfn);
            }
        }
        written += piece.nr_pages();
    }
    Ok(written)
}

pub mod hvo;
pub mod hvo_2m;
#[cfg(test)]
mod tests;
