//! The free lists walked block by block, for verification, and a block
//! recorded without typing its page, for the faults it must catch.

use memmap::page::PageLayout;
use memmap::store::MemmapBacking;
use memmap::{NodeId, Pfn, ZoneType, MAX_ORDER};

use super::{slot, slot_key, BuddyAllocator, FreeIndex, PFN_NONE};

impl<B: MemmapBacking> BuddyAllocator<'_, B> {
    /// Walk every free list, calling `f(nid, zone, head_pfn, order)` per
    /// block, one zone lock at a time. `f` must not call the allocator.
    /// A list whose links leave its (node, zone) is walked up to that link.
    pub fn for_each_free_block(&self, mut f: impl FnMut(NodeId, ZoneType, Pfn, u32)) {
        for s in 0..self.zones.len() {
            let (nid, zone) = slot_key(s);
            for order in 0..=MAX_ORDER {
                self.walk_free_list(nid, zone, order, |pfn| {
                    f(nid, zone, pfn, order);
                    true
                });
            }
        }
    }

    /// Walk the order-`order` list of (nid, zone) under its lock, calling
    /// `visit(head_pfn)` per block; `visit` returns whether to follow that
    /// block's `lru.next` (verification stops at a head it does not trust).
    /// Never reads a struct page outside the list's (node, zone) and never
    /// visits more than one block past the list's block counter: a corrupt
    /// list ends the walk and says how ([`ListEnd`]).
    pub fn walk_free_list(
        &self,
        nid: NodeId,
        zone: ZoneType,
        order: u32,
        mut visit: impl FnMut(Pfn) -> bool,
    ) -> ListEnd {
        let s = slot(nid, zone);
        let Some(zl) = self.zones.get(s).filter(|_| order <= MAX_ORDER) else {
            return ListEnd::Complete;
        };
        let zf = zl.lock();
        let nr_blocks = zf.nr_blocks[order as usize];
        let mut pfn = match &zf.index {
            FreeIndex::Lists(heads) => heads[order as usize],
            FreeIndex::Bitmaps(bits) => bits.next_from(0, order).unwrap_or(PFN_NONE),
        };
        let mut walked = 0;
        let mut from = PFN_NONE;
        while pfn != PFN_NONE {
            if self.range_of(pfn).is_none_or(|(_, ps)| ps != s) {
                return ListEnd::BadLink { from, to: pfn };
            }
            // One block past the count is still visited, so the visitor sees
            // what a bad link points at; a second one is a runaway list.
            if walked > nr_blocks {
                return ListEnd::TooLong { after: from };
            }
            walked += 1;
            if !visit(pfn) {
                return ListEnd::Stopped { at: pfn };
            }
            from = pfn;
            pfn = match &zf.index {
                // SAFETY: `pfn` is managed by this (node, zone) (checked
                // above), so its struct page is backed; it is on this zone's
                // list, whose lock we hold.
                FreeIndex::Lists(_) => unsafe {
                    self.with_page(pfn, |p| p.list_link().map_or(PFN_NONE, |l| l.next))
                },
                FreeIndex::Bitmaps(bits) => bits.next_from(pfn + 1, order).unwrap_or(PFN_NONE),
            };
        }
        if walked < nr_blocks {
            ListEnd::TooShort { walked }
        } else {
            ListEnd::Complete
        }
    }

    /// Record `pfn`/`order` as a free block in the store without typing
    /// its page or counting it: what a corrupted list link or bitmap bit
    /// amounts to (`test_fault=list_corrupt`; see [`crate::faults`]).
    pub(crate) fn record_stray_block(&self, pfn: Pfn, order: u32) -> bool {
        let Some((_, s)) = self.range_of(pfn) else {
            return false;
        };
        match &mut self.zones[s].lock().index {
            FreeIndex::Bitmaps(bits) => {
                bits.insert(pfn, order);
                true
            }
            FreeIndex::Lists(_) => false,
        }
    }
}

/// How a walk of one free list ended ([`BuddyAllocator::walk_free_list`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListEnd {
    /// `PFN_NONE` after exactly the list's block count.
    Complete,
    /// The visitor stopped at `at`.
    Stopped { at: Pfn },
    /// Head `from`'s `lru.next` (or the list head, `from == PFN_NONE`)
    /// points at `to`, which is not memory of this (node, zone).
    BadLink { from: Pfn, to: Pfn },
    /// Blocks still linked after one past the counter (a cycle?); `after`
    /// is the last block visited.
    TooLong { after: Pfn },
    /// The list ended after `walked` blocks, fewer than the counter says.
    TooShort { walked: u64 },
}
