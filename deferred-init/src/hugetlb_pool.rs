//! Huge pages taken from the buddy allocator once memory is ready
//! (`hugepagesz=2M hugepages=N`), as Linux's `hugetlb_init` →
//! `hugetlb_hstate_alloc_pages` takes every size it can allocate from the
//! page allocator (mm/hugetlb.c):
//! - A total goes round-robin over the nodes
//!   (`alloc_pool_huge_folio` → `for_each_node_mask_to_alloc`): each page is
//!   tried on the next node in turn, then on the ones after it, and the
//!   first page no node can give ends it.
//! - Per node (`hugepages=0:N,1:M`, `hugetlb_hstate_alloc_pages_onenode`)
//!   each node gets its count on that node only.
//!
//! A node's pages come from its highest populated zone, falling back to
//! the zones below it, as the allocator's fallback order has it. What does
//! not fit is a [`Shortfall`], Linux's warning; the boot goes on. The pages
//! stay allocated: they never return to the free lists, and what the
//! allocation test and the self-test allocate is what is left.
//! [`HugePool::pages`] is memboot's record of them, which verification
//! checks every page against.

use alloc::vec::Vec;
use core::convert::Infallible;

use memboot_contract::hugepage_forms::HugePageSize;
use memmap::hugetlb::{count_per_node, order_of, take_pages, Request, Shortfall};
use memmap::store::MemmapBacking;
use memmap::zones::ZoneLayout;
use memmap::{NodeId, Pfn};

use crate::PageAllocator;

/// One huge page of the pool: its head PFN (aligned to its order) and node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PoolPage {
    pub pfn: Pfn,
    pub nid: NodeId,
}

/// The huge pages of one size taken from the allocator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HugePool {
    pub size: HugePageSize,
    /// Ascending by PFN.
    pub pages: Vec<PoolPage>,
    /// What did not fit, in Linux's order (per node: by node).
    pub shortfalls: Vec<Shortfall>,
}

impl HugePool {
    /// The order of its pages.
    pub fn order(&self) -> u32 {
        order_of(self.size)
    }

    /// Pages per node, `nr_nodes` entries (node ids `0..nr_nodes`).
    pub fn per_node(&self, nr_nodes: usize) -> Vec<u64> {
        count_per_node(self.pages.iter().map(|p| p.nid), nr_nodes)
    }
}

/// One page of `order` on node `nid`, from its highest zone down.
fn alloc_on<B: MemmapBacking>(
    pages: &PageAllocator<'_, '_, B>,
    layout: &ZoneLayout,
    nid: NodeId,
    order: u32,
) -> Option<PoolPage> {
    let zone = layout.highest_zone(nid)?.zone;
    // Any error is "not on this node": out of memory, or (never once
    // memory is ready) init still in progress.
    pages
        .alloc_pages(nid, zone, order)
        .ok()
        .map(|pfn| PoolPage { pfn, nid })
}

/// Take the pages `request` asks for, of `size`, from `pages` (module
/// docs). Runs on one CPU once memory is ready.
pub fn alloc_pool<B: MemmapBacking>(
    pages: &PageAllocator<'_, '_, B>,
    layout: &ZoneLayout,
    request: &Request,
    size: HugePageSize,
) -> HugePool {
    let order = order_of(size);
    let nodes: Vec<NodeId> = layout.nodes().iter().map(|n| n.nid).collect();
    // Each try on that node alone (Linux's `__GFP_THISNODE`).
    let take = |nid, _exact| Ok::<_, Infallible>(alloc_on(pages, layout, nid, order));
    let Ok((mut pool_pages, shortfalls)) = take_pages(request, &nodes, size, take);
    pool_pages.sort_unstable();
    HugePool {
        size,
        pages: pool_pages,
        shortfalls,
    }
}

/// What verification must know of the huge pages: the pool taken from the
/// allocator, and how many struct pages of each 1 GiB page are written when
/// HVO maps its vmemmap (the kept page's; every other tail reads as one of
/// them); and HVO of the pool's pages, if applied.
#[derive(Clone, Copy, Debug, Default)]
pub struct HugeCheck<'a> {
    pub pool: Option<&'a HugePool>,
    pub hvo_kept_struct_pages: Option<u64>,
    pub pool_hvo: Option<PoolHvo<'a>>,
}

/// HVO of every page of the pool: the struct pages of each page's kept
/// vmemmap page (every other tail reads as one of them), and the page
/// tables it took from the allocator (ascending PFNs; allocated order-0
/// pages, held for good).
#[derive(Clone, Copy, Debug)]
pub struct PoolHvo<'a> {
    pub kept_struct_pages: u64,
    pub tables: &'a [Pfn],
}

impl HugeCheck<'_> {
    /// No pool, no HVO.
    pub const NONE: HugeCheck<'static> = HugeCheck {
        pool: None,
        hvo_kept_struct_pages: None,
        pool_hvo: None,
    };
}
