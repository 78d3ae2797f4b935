//! The boot CPU's part of `memblock_free_all()`: the pages memmap init
//! initialised eagerly are handed to the buddy allocator, free memory only
//! (memblock-reserved pages keep `PG_reserved` and stay out), in the largest
//! aligned blocks (`__free_pages_core()`). Memmap init left them ready
//! (`_refcount` 0), so this writes each block's head, not every page.
//!
//! Deferred memory reaches the allocator through the workers instead
//! ([`crate::DeferredInit`]); the allocator is told about both up front, since it
//! only merges buddies within memory it manages.

use memmap::init::EagerRange;
use memmap::memblock::Memblock;
use memmap::store::MemmapBacking;

use crate::buddy::{BuddyAllocator, FreeError};

/// Free pages of `eager`, freed into `buddy`. Returns the number of pages.
///
/// # Safety
/// Every struct page of `eager` must have been initialised by memmap init
/// (`memmap::init::init_memmap`: free pages `_refcount` 0), be on no free list, and not be accessed by anyone else during and after
/// the call (the allocator owns the free ones afterwards). `buddy` must
/// manage every range of `eager` (e.g. built with them as managed ranges).
///
/// Never inlined: the instruction profile's `buddy_handoff` phase opens
/// here.
#[inline(never)]
pub unsafe fn free_eager_pages<B: MemmapBacking>(
    buddy: &BuddyAllocator<'_, B>,
    mb: &Memblock,
    eager: &[EagerRange],
) -> Result<u64, FreeError> {
    let mut nr_pages = 0;
    for e in eager {
        for (free, _) in mb.free_ranges(Some(e.nid)) {
            if free.start >= e.pfns.end {
                break;
            }
            if let Some(piece) = free.intersect(&e.pfns) {
                // SAFETY: initialised ready to free, on no list and ours
                // alone (caller's contract); `piece` is free memory of a
                // managed eager range.
                unsafe { buddy.free_ready_range(piece) }?;
                nr_pages += piece.nr_pages();
            }
        }
    }
    Ok(nr_pages)
}
