//! Processing a claim: the one init path of its windows' struct pages, and
//! the frees into the buddy allocator.

use core::sync::atomic::Ordering;

use memmap::init::InitAs;
use memmap::store::MemmapBacking;
use memmap::{NodeId, PfnRange};

use super::{Claim, DeferredInit, InitMode};
use crate::buddy::max_blocks;
use crate::plan::Piece;

impl<B: MemmapBacking> DeferredInit<'_, B> {
    /// Initialise (and free) the windows of a claim; returns its present
    /// pages and whether another claim of the node was being processed
    /// when this one began (a race between claimants).
    pub(crate) fn process_claim(&self, pos: usize, claim: &Claim) -> (u64, bool) {
        let node = &self.plan.nodes()[pos];
        let rt = &self.nodes[pos];
        let contended = rt.claims_in_flight.fetch_add(1, Ordering::AcqRel) > 0;
        let mut nr_pages = 0;
        for w in claim.windows.clone() {
            let (window, pieces) = node.window_pieces(claim.chunk, w);
            nr_pages += self.init_window(pos, claim.chunk, window, pieces);
            if self.hooks.init_again(window) {
                self.init_window(pos, claim.chunk, window, pieces);
            }
        }
        if self.mode == InitMode::InitAndFree {
            self.free_windows(pos, claim);
        }
        let nr_windows = claim.windows.len() as u64;
        rt.windows_done[claim.zone as usize].fetch_add(nr_windows, Ordering::Release);
        rt.claims_in_flight.fetch_sub(1, Ordering::AcqRel);
        (nr_pages, contended)
    }

    /// The one init path of claimed memory: write the struct pages of the
    /// pieces in `window` (of chunk `chunk` of node position `pos`) as the
    /// mode says, and count the window in the chunk's init counter.
    /// Returns the pages it initialised (present, not taken out of the
    /// pool before).
    fn init_window(&self, pos: usize, chunk: usize, window: PfnRange, pieces: &[Piece]) -> u64 {
        let nid = self.plan.nodes()[pos].nid();
        let mut nr_pages = 0;
        for p in pieces {
            let Some(r) = p.pfns.intersect(&window) else {
                continue;
            };
            let will_free = match self.mode {
                InitMode::Touch => {
                    nr_pages += r.nr_pages();
                    self.touch_range(r);
                    continue;
                }
                InitMode::InitOnly => false,
                InitMode::InitAndFree => true,
            };
            if p.reserved && self.has_taken() {
                // Parts of it were taken out of the pool, written then.
                for part in self.untaken(nid, r) {
                    nr_pages += part.nr_pages();
                    self.init_range(p, part, nid, will_free);
                }
            } else {
                nr_pages += r.nr_pages();
                self.init_range(p, r, nid, will_free);
            }
        }
        self.nodes[pos].initialised[chunk].fetch_add(1, Ordering::Relaxed);
        nr_pages
    }

    /// Free the free pieces of the claim's windows in the largest aligned
    /// blocks, right after [`init_window`](Self::init_window) wrote them
    /// (Linux's `deferred_init_maxorder` frees what it initialised the same
    /// way): only each block's head is written, and the zone's lock is taken
    /// once for the claim, not once a block, so a node's workers meet at
    /// their zone's lock (and its cache lines) once a section.
    fn free_windows(&self, pos: usize, claim: &Claim) {
        let node = &self.plan.nodes()[pos];
        let mut frees = self.buddy.prepared_frees();
        for w in claim.windows.clone() {
            let (window, pieces) = node.window_pieces(claim.chunk, w);
            for p in pieces.iter().filter(|p| !p.reserved) {
                if let Some(r) = p.pfns.intersect(&window) {
                    for (pfn, order) in max_blocks(r) {
                        frees.free(pfn, order);
                    }
                }
            }
        }
    }

    /// `__init_single_page` over `r` (part of piece `p`), then `PG_reserved`
    /// for reserved pieces or, with `will_free`, `_refcount = 0`.
    #[inline]
    pub(super) fn init_range(&self, p: &Piece, r: PfnRange, nid: NodeId, will_free: bool) {
        // SAFETY: `r` is part of a window claimed by this thread (or of the
        // eager ranges, never passed here); no other reference to these
        // struct pages exists until the window is done.
        let Some(pages) = (unsafe { self.memmap.pages_mut_unchecked(r) }) else {
            debug_assert!(false, "piece {r:?} without backing (checked in new)");
            return;
        };
        let as_ = match (p.reserved, will_free) {
            (true, _) => InitAs::Reserved,
            (false, true) => InitAs::Free,
            (false, false) => InitAs::Allocated,
        };
        // One piece lies in one section: `init_pages` writes it with one
        // flags word, one store of a whole struct page per page.
        memmap::init::init_pages(pages, r.start, p.zone, nid, as_);
        #[cfg(test)]
        if let Some(hook) = &self.init_hook {
            hook(r);
        }
    }

    /// Touch mode: one 64-byte store per page.
    #[inline]
    fn touch_range(&self, r: PfnRange) {
        // SAFETY: as in `init_range`: the window is ours alone.
        let Some(pages) = (unsafe { self.memmap.pages_mut_unchecked(r) }) else {
            return;
        };
        memmap::init::touch_pages(pages, r.start);
        #[cfg(test)]
        if let Some(hook) = &self.init_hook {
            hook(r);
        }
    }
}
