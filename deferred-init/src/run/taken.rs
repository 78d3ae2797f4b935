//! Reserved memory taken out of the pool before anyone claims it: HVO
//! frees vmemmap frames that lie in reserved memory `ondemand` has not
//! reached. Their struct pages are written now, as a claim would write
//! them (`PG_reserved`), so that the caller can free them; the pool leaves
//! them out from then on, and the claim that later reaches their window
//! initialises the rest of it and leaves them alone.

use core::sync::atomic::Ordering;

use memmap::store::MemmapBacking;
use memmap::{NodeId, Pfn, PfnRange};

use super::{DeferredInit, DeferredInitError};

impl<B: MemmapBacking> DeferredInit<'_, B> {
    /// Take the pages of `pfns` on node `nid` that are still in the pool
    /// out of it, writing their struct pages `PG_reserved`; returns how
    /// many. Pages of claimed windows, or outside the node's deferred
    /// memory, are already initialised and stay as they are. Only reserved
    /// memory may be taken (free memory in the pool is the allocator's to
    /// hand out). Call it while nothing claims (the boot CPU between jobs):
    /// a window claimed meanwhile could write the same struct pages.
    pub fn take_from_pool(&self, nid: NodeId, pfns: PfnRange) -> Result<u64, DeferredInitError> {
        let Some(pos) = self.plan.node_pos(nid) else {
            return Ok(0);
        };
        let (plan, rt) = (&self.plan.nodes()[pos], &self.nodes[pos]);
        let mut taken = alloc::vec::Vec::new();
        for chunk in plan.first_chunk_ending_above(pfns.start)..plan.nr_chunks() {
            let windows = plan.chunk_windows(chunk);
            if windows.base >= pfns.end {
                break;
            }
            let claimed = rt.next[chunk].load(Ordering::Acquire).min(windows.nr);
            let Some(untouched) = windows.from(claimed).intersect(&pfns) else {
                continue;
            };
            for p in plan.chunk_pieces(chunk) {
                let Some(r) = p.pfns.intersect(&untouched) else {
                    continue;
                };
                if !p.reserved {
                    return Err(DeferredInitError::TakesFreeMemory { nid, pfn: r.start });
                }
                taken.extend(self.untaken(nid, r).map(|seg| (*p, seg)));
            }
        }
        if taken.is_empty() {
            return Ok(0);
        }
        for (p, seg) in &taken {
            self.init_range(p, *seg, nid, false);
        }
        let mut all = self.taken.lock();
        for &(_, seg) in &taken {
            // Kept sorted by (node, PFN) for `Untaken`'s binary search;
            // HVO takes its runs ascending, so this appends.
            let at = all.partition_point(|(n, t)| (*n, t.start) < (nid, seg.start));
            all.insert(at, (nid, seg));
        }
        drop(all);
        // Pairs with the Acquire in `has_taken`: whoever sees the flag sees
        // the ranges (they are read under the lock anyway).
        self.has_taken.store(true, Ordering::Release);
        let nr_pages = taken.iter().map(|(_, seg)| seg.nr_pages()).sum();
        rt.nr_taken_pages.fetch_add(nr_pages, Ordering::Relaxed);
        Ok(nr_pages)
    }

    /// Has anything been taken out of the pool? (Until then nothing needs
    /// the lock.)
    #[inline]
    pub(super) fn has_taken(&self) -> bool {
        self.has_taken.load(Ordering::Acquire)
    }

    /// The parts of `r` (on node `nid`) not taken, ascending.
    pub(super) fn untaken(&self, nid: NodeId, r: PfnRange) -> Untaken<'_, '_, B> {
        Untaken {
            di: self,
            nid,
            r,
            at: r.start,
        }
    }
}

/// [`DeferredInit::untaken`]: each step looks up the lowest taken range
/// left in what remains (a binary search: HVO frees a run per huge page).
pub(super) struct Untaken<'a, 'm, B> {
    di: &'a DeferredInit<'m, B>,
    nid: NodeId,
    r: PfnRange,
    at: Pfn,
}

impl<B: MemmapBacking> Iterator for Untaken<'_, '_, B> {
    type Item = PfnRange;

    fn next(&mut self) -> Option<PfnRange> {
        while self.at < self.r.end {
            let rest = PfnRange::new(self.at, self.r.end);
            let cut = if self.di.has_taken() {
                // Taken ranges of a node are disjoint and sorted, so by
                // end too: the first ending above `at` is the one to cut.
                let taken = self.di.taken.lock();
                let i = taken.partition_point(|(n, t)| (*n, t.end) <= (self.nid, self.at));
                taken
                    .get(i)
                    .filter(|(n, _)| *n == self.nid)
                    .and_then(|(_, t)| t.intersect(&rest))
            } else {
                None
            };
            match cut {
                None => {
                    self.at = rest.end;
                    return Some(rest);
                }
                Some(c) if c.start > self.at => {
                    self.at = c.end;
                    return Some(PfnRange::new(rest.start, c.start));
                }
                Some(c) => self.at = c.end,
            }
        }
        None
    }
}
