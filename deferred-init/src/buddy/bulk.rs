//! Blocks in bulk under one take of the zone lock: blocks memmap init
//! readied, freed one after another ([`PreparedFrees`]), and the per-CPU
//! caches' side of the allocator, order-0 pages taken and given back, and
//! a page freed into a cache or handed from one.

use memmap::page::PageLayout;
use memmap::store::MemmapBacking;
use memmap::{NodeId, Pfn, ZoneType, MAX_ORDER};

use super::{AllocError, BuddyAllocator, FreeError, ZoneFree};

impl<'m, B: MemmapBacking> BuddyAllocator<'m, B> {
    /// A freer of blocks whose pages all have `_refcount == 0` already
    /// (memmap init writes them so) that holds a zone's lock across the
    /// blocks of that zone freed one after another.
    pub(crate) fn prepared_frees(&self) -> PreparedFrees<'_, 'm, B> {
        PreparedFrees {
            buddy: self,
            held: None,
        }
    }

    /// Up to `out.len()` order-0 pages of (nid, zone) under one take of
    /// the zone lock, for a per-CPU cache (Linux `rmqueue_bulk`); returns
    /// how many. They keep `_refcount` 0: cached, not yet allocated.
    pub(crate) fn alloc_bulk(
        &self,
        nid: NodeId,
        zone: ZoneType,
        out: &mut [Pfn],
    ) -> Result<usize, AllocError> {
        let mut zf = self.zone_lock(nid, zone)?;
        let mut n = 0;
        while n < out.len() {
            // The largest block no bigger than what is still wanted, or a
            // smaller one: its pages go to the cache as they are (a free
            // block's tails are untyped with `_refcount` 0, as cached pages
            // are), one store operation for up to 32 of a batch's 63 pages.
            let want = out.len() - n;
            let top = (usize::BITS - 1 - want.leading_zeros()).min(MAX_ORDER);
            let Some((pfn, order)) = (0..=top)
                .rev()
                .find_map(|o| Some((self.take(&mut zf, o, false)?, o)))
            else {
                break;
            };
            for (i, slot) in out[n..n + (1 << order)].iter_mut().enumerate() {
                *slot = pfn + i as u64;
            }
            n += 1 << order;
        }
        Ok(n)
    }

    /// Free the order-0 page `pfn` into a per-CPU cache rather than the
    /// store: the checks of [`free`](Self::free), `_refcount` to 0, and
    /// the (node, zone) slot it belongs to. The zone lock is held for the
    /// check only, so a page freed twice is refused, never cached twice.
    pub(crate) fn release_to_cache(&self, pfn: Pfn) -> Result<usize, FreeError> {
        let (_, s) = self
            .range_of(pfn)
            .ok_or(FreeError::NotManaged { pfn, order: 0 })?;
        let _zf = self.zones[s].lock();
        self.release_head(pfn)?;
        Ok(s)
    }

    /// A cached page (`_refcount` 0, owned by the cache) handed to its
    /// allocator: `_refcount` 1.
    pub(crate) fn allocate_cached(&self, pfn: Pfn) {
        // SAFETY: the cache owns the page (it took it off the store or was
        // given it by `release_to_cache`) and hands it over now.
        unsafe { self.with_page(pfn, |p| p.set_refcount(1)) };
    }

    /// Order-0 pages of slot `s` back from a per-CPU cache into the store
    /// under one take of the zone lock (Linux `free_pcppages_bulk`). Every
    /// page has `_refcount` 0 and belongs to the cache. `pfns` is sorted in
    /// place, and each aligned run of 2^k consecutive pages goes back as
    /// one block of order k: one merge where a page at a time made 2^k
    /// (a refill took such blocks; the pages often come back together).
    pub(crate) fn free_bulk(&self, s: usize, pfns: &mut [Pfn]) {
        pfns.sort_unstable();
        let mut zf = self.zones[s].lock();
        let mut i = 0;
        while i < pfns.len() {
            let pfn = pfns[i];
            let Some((range, _)) = self.range_of(pfn).filter(|&(_, ps)| ps == s) else {
                debug_assert!(false, "cached pfn {pfn:#x} is not of slot {s}");
                i += 1;
                continue;
            };
            let mut order = 0;
            while order < MAX_ORDER && run_of_block(&pfns[i..], pfn, order + 1) {
                order += 1;
            }
            let last = pfn + (1 << order) - 1;
            if !range.contains(last) {
                order = 0;
            }
            self.merge_and_push(&mut zf, range, pfn, order);
            i += 1 << order;
        }
    }
}

/// Do `sorted`'s first 2^order entries, distinct and ascending, make the
/// aligned block of that order at `pfn`?
fn run_of_block(sorted: &[Pfn], pfn: Pfn, order: u32) -> bool {
    let n = 1usize << order;
    pfn.is_multiple_of(n as u64) && sorted.len() >= n && sorted[n - 1] == pfn + n as u64 - 1
}

/// Blocks freed one after another ([`BuddyAllocator::prepared_frees`]),
/// the lock of the last one's zone held until the next is another zone's
/// or the freer is dropped.
pub(crate) struct PreparedFrees<'a, 'm, B> {
    buddy: &'a BuddyAllocator<'m, B>,
    held: Option<(usize, spin::MutexGuard<'a, ZoneFree>)>,
}

impl<B: MemmapBacking> PreparedFrees<'_, '_, B> {
    /// Free the block `pfn`/`order`, every page of it `_refcount` 0, ours.
    #[inline]
    pub(crate) fn free(&mut self, pfn: Pfn, order: u32) {
        let Some((range, s)) = self.buddy.range_of(pfn) else {
            debug_assert!(false, "freed unmanaged pfn {pfn:#x}");
            return;
        };
        if self.held.as_ref().is_none_or(|(hs, _)| *hs != s) {
            drop(self.held.take()); // one zone lock at a time
            self.held = Some((s, self.buddy.zones[s].lock()));
        }
        let (_, zf) = self.held.as_mut().expect("locked above");
        self.buddy.merge_and_push(zf, range, pfn, order);
    }
}
