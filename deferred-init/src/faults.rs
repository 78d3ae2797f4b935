//! Deliberate corruptions (`test_fault=` in the kernel), one per kind of
//! damage verification claims to catch. Each leaves the allocator's state
//! wrong in exactly one way and returns where, so a test can check that
//! verification names that PFN or section:
//!
//! | fault | damage | caught by |
//! |---|---|---|
//! | [`corrupt_page`] | a node bit of one free page's struct page (the type of an 8-byte one) | the page scan (`links`; `refcount` or `not in block` at 8 bytes) |
//! | [`DoubleInit`] | one window initialised twice, bypassing the claim (identical bytes) | the per-chunk init counter ([`BuddyMismatch::WindowInits`](crate::BuddyMismatch::WindowInits)) |
//! | [`corrupt_list_link`] | a free-list link (or a bitmap bit) pointing at a page that is not a free block head | the list walk ([`HeadProblem::NotBuddy`](crate::HeadProblem::NotBuddy)) |
//! | [`place_free_block_in_pool`] | a free block inside the untouched pool | the list walk ([`BuddyMismatch::PoolOverlap`](crate::BuddyMismatch::PoolOverlap)) |
//!
//! Preconditions for all of them: every worker and allocation has
//! returned, verification has not started, and nothing else touches the
//! allocator or the struct pages meanwhile.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use memmap::page::PageLayout;
use memmap::store::{Memmap, MemmapBacking};
use memmap::{Pfn, PfnRange};

use crate::buddy::BuddyAllocator;
use crate::claim_hooks::ClaimHooks;
use crate::run::DeferredInit;

/// Damage the struct page of `pfn` as a stray write would
/// ([`PageLayout::corrupt`]: a node bit, or an 8-byte page's type).
/// Returns false if `pfn` has no struct-page backing.
///
/// # Safety
/// No other reference to that struct page may exist during the call
/// (see the module preconditions).
pub unsafe fn corrupt_page<B: MemmapBacking>(memmap: &Memmap<B>, pfn: Pfn) -> bool {
    // SAFETY: exclusivity is the caller's obligation.
    match unsafe { memmap.pages_mut_unchecked(PfnRange::new(pfn, pfn + 1)) } {
        Some(pages) => {
            pages[0].corrupt();
            true
        }
        None => false,
    }
}

/// Claim hooks (given with [`DeferredInit::set_claim_hooks`]) that, when
/// armed, have the next window processed initialised a second time
/// through the counted init path, bypassing its claim, as a claim bug
/// would. The bytes come out identical; only the window's chunk, which
/// counts one initialisation more than it has claims, can tell.
pub struct DoubleInit {
    armed: AtomicBool,
    /// The doubled window's first PFN; [`Self::NOT_DOUBLED`] before.
    window_start: AtomicU64,
}

impl DoubleInit {
    const NOT_DOUBLED: Pfn = Pfn::MAX;

    /// Hooks that double the next window if `armed`, else do nothing.
    pub const fn new(armed: bool) -> Self {
        Self {
            armed: AtomicBool::new(armed),
            window_start: AtomicU64::new(Self::NOT_DOUBLED),
        }
    }

    /// The first PFN of the window initialised twice, once there is one.
    pub fn window(&self) -> Option<Pfn> {
        let pfn = self.window_start.load(Ordering::Acquire);
        (pfn != Self::NOT_DOUBLED).then_some(pfn)
    }
}

impl ClaimHooks for DoubleInit {
    fn init_again(&self, window: PfnRange) -> bool {
        let again = self.armed.load(Ordering::Relaxed) && self.armed.swap(false, Ordering::AcqRel);
        if again {
            self.window_start.store(window.start, Ordering::Release);
        }
        again
    }
}

/// The last page of the highest free block that lies in a claimed window
/// of deferred memory: under `memmap=ondemand` a page initialised by
/// growth (or by a drain worker), in the faithful modes by a deferred
/// worker. `None` if no claimed window holds a free block.
pub fn free_page_in_claimed_windows<B: MemmapBacking>(di: &DeferredInit<'_, B>) -> Option<Pfn> {
    let mut last = None;
    di.buddy().for_each_free_block(|nid, _, pfn, order| {
        if di.is_claimed(nid, pfn) {
            last = last.max(Some(pfn + (1 << order) - 1));
        }
    });
    last
}

/// Point the allocator at the page after the first free block of order
/// ≥ 1's head as if it were a free block: a tail of the same block,
/// initialised, managed by the same zone, but not the head of a free block.
/// With free lists the head's `lru.next` points at it; with bitmaps its
/// order-0 bit is set. Returns (head, target).
///
/// # Safety
/// See the module preconditions: nothing may use `buddy` during or after
/// the call until verification has reported (the list is broken on purpose).
pub unsafe fn corrupt_list_link<B: MemmapBacking>(
    buddy: &BuddyAllocator<'_, B>,
    memmap: &Memmap<B>,
) -> Option<(Pfn, Pfn)> {
    let mut head = None;
    buddy.for_each_free_block(|_, _, pfn, order| {
        if order >= 1 && head.is_none() {
            head = Some(pfn);
        }
    });
    let head = head?;
    let target = head + 1;
    if buddy.record_stray_block(target, 0) {
        return Some((head, target));
    }
    // SAFETY: `head` heads a free block; nothing else runs (caller's
    // contract), so this is the only reference to its struct page.
    let pages = unsafe { memmap.pages_mut_unchecked(PfnRange::new(head, head + 1)) }?;
    pages[0].list_link_mut()?.next = target;
    Some((head, target))
}

/// Initialise the first free (non-reserved) page of the untouched pool and
/// free it into the buddy lists, while the pool's claim counters still say
/// it is untouched: a free block inside the pool. Returns its PFN.
///
/// # Safety
/// See the module preconditions.
pub unsafe fn place_free_block_in_pool<B: MemmapBacking>(
    di: &DeferredInit<'_, B>,
    memmap: &Memmap<B>,
) -> Option<Pfn> {
    let piece = di.pool_pieces().find(|p| !p.piece.reserved)?;
    let pfn = piece.piece.pfns.start;
    // SAFETY: a pool page: nobody has claimed it, so nobody references its
    // struct page; writing it is the deliberate damage.
    let pages = unsafe { memmap.pages_mut_unchecked(PfnRange::new(pfn, pfn + 1)) }?;
    pages[0].init_single_page(pfn, piece.piece.zone, piece.nid);
    // SAFETY: the page was just initialised, is on no list, and is managed
    // by the allocator (pool memory is); handing it over is the fault.
    unsafe {
        di.buddy()
            .free_initialised_range(PfnRange::new(pfn, pfn + 1))
    }
    .ok()?;
    Some(pfn)
}
