//! A binary buddy allocator over struct pages, per (node, zone), orders
//! `0..=MAX_ORDER` (order 10: 1024 pages, 4 MiB), keeping its free blocks
//! in one of two stores ([`BuddyStore`], `buddy=`): doubly linked lists
//! through the heads' struct pages, as Linux does, or bitmaps out of the
//! page (the private `free_bitmap` module), the only store an 8-byte struct page,
//! which has no room for links, can use. Both type the pages alike, so
//! verification checks either against the same page states.
//!
//! # Free lists in struct pages (`buddy=lists`)
//! A free block is represented by its head page: `PageBuddy` set in
//! `_mapcount` and the order in `private` (Linux `set_buddy_order`), and
//! `_refcount == 0` on every page of the block (Linux `__free_pages_core`).
//! The head's `lru` links it into the doubly linked list of its order.
//! **The link words hold PFNs, not addresses**: `lru.next` / `lru.prev` are
//! the PFNs of the neighbouring heads, [`PFN_NONE`] at either end; the list
//! head (first PFN and block count) lives in the allocator. PFNs survive any
//! remapping of the vmemmap and make corruption easy to spot. A page taken off
//! a list gets a self-linked `lru` again (`INIT_LIST_HEAD`), as after init.
//!
//! # Free bitmaps (`buddy=bitmaps`)
//! The head page is typed the same (`PageBuddy` and the order); the block
//! is a set bit in its order's bitmap, and the bitmap, not the page, says
//! whether a buddy is free. Allocation takes the lowest-address block of
//! the smallest order that has one.
//!
//! # Allocation and free
//! `alloc` takes the first block of the smallest non-empty order ≥ the
//! request and splits it, returning upper halves to lower lists (Linux
//! `expand`); the returned head gets `_refcount = 1`, tails keep 0. `free`
//! merges with the buddy (`pfn ^ (1 << order)`) while the buddy is a free
//! block of the same order in the same (node, zone) (Linux `__free_one_page`).
//!
//! # Managed ranges and concurrency
//! The allocator is told up front which PFN ranges it manages per (node,
//! zone). It only ever reads a buddy's struct page when the buddy lies in a
//! managed range of the same (node, zone); reserved pages, holes and other
//! nodes' pages are never touched. Each (node, zone) has one spin lock ([`spin::Mutex`])
//! taken per block allocated or freed, never per page. Since merging stops
//! at `MAX_ORDER`, a buddy always lies in the same 1024-aligned block, hence
//! in the same section, which is why deferred-init workers can free into the
//! lists while other sections are still being initialised (see
//! [`crate::plan`]).
//!
//! Contract for users: the struct pages of an allocated block belong to its
//! owner, but its head's `_mapcount`, `private` and `_refcount` must only be
//! changed through this allocator while the block may be freed.

use alloc::vec::Vec;

use memboot_contract::option_values::BuddyStore;
use memmap::page::{ListHead, PageLayout, MAX_NUMNODES};
use memmap::store::{Memmap, MemmapBacking};
use memmap::{NodeId, Pfn, PfnRange, ZoneType, MAX_ORDER, NR_ORDERS};

use spin::Mutex;

use crate::free_bitmap::FreeBitmaps;

mod bulk;
mod errors;
pub(crate) mod walk;

pub use errors::{AllocError, BuddyError, FreeError, ManageError};

/// End-of-list marker in the PFN-valued `lru` link words.
pub const PFN_NONE: Pfn = u64::MAX;

pub(crate) const NR_ZONES: usize = ZoneType::ALL.len();

/// A PFN range whose free pages a (node, zone) of the allocator may hold.
pub type ManagedRange = memmap::ZoneRange;

/// Where one (node, zone) keeps its free blocks.
// One per (node, zone), so size does not matter; kept inline so the
// allocation path follows no pointer to reach the bitmaps' vectors.
#[allow(clippy::large_enum_variant)]
enum FreeIndex {
    /// Each order's first block (`PFN_NONE`: empty); the links are in the
    /// heads' struct pages.
    Lists([Pfn; NR_ORDERS]),
    Bitmaps(FreeBitmaps),
}

/// Aligned to a cache line so the lock word its `Mutex` puts beside it
/// sits on a line of its own: CPUs spinning on the lock then do not take
/// away, write by write, the lines the holder is updating.
#[repr(align(64))]
struct ZoneFree {
    nr_blocks: [u64; NR_ORDERS],
    nr_free_pages: u64,
    index: FreeIndex,
}

impl ZoneFree {
    fn new(index: FreeIndex) -> Self {
        Self {
            nr_blocks: [0; NR_ORDERS],
            nr_free_pages: 0,
            index,
        }
    }
}

/// Per-(node, zone) buddy free blocks over the struct pages of `memmap`.
pub struct BuddyAllocator<'m, B> {
    memmap: &'m Memmap<B>,
    /// Managed ranges: sorted, disjoint, adjacent ones of the same slot merged.
    ranges: Vec<(PfnRange, u32)>,
    /// Ranges managed since [`manage`](Self::manage) (reserved memory
    /// given back once memory is ready), sorted, disjoint from `ranges`:
    /// looked up only when `ranges` has no hit, so the hot paths never
    /// take this lock.
    late: Mutex<Vec<(PfnRange, u32)>>,
    /// Slot `nid * NR_ZONES + zone`.
    zones: Vec<Mutex<ZoneFree>>,
    store: BuddyStore,
}

/// Index of the free lists of (nid, zone): `nid * NR_ZONES + zone`. The one
/// (node, zone) numbering of the crate (verification counts per slot too).
#[inline]
pub(crate) fn slot(nid: NodeId, zone: ZoneType) -> usize {
    nid as usize * NR_ZONES + zone as usize
}

/// The (nid, zone) of slot `s`, the inverse of [`slot`].
#[inline]
pub(crate) fn slot_key(s: usize) -> (NodeId, ZoneType) {
    ((s / NR_ZONES) as NodeId, ZoneType::ALL[s % NR_ZONES])
}

impl<'m, B: MemmapBacking> BuddyAllocator<'m, B> {
    /// An allocator with no free blocks for the given managed ranges, in
    /// the layout's default store ([`BuddyStore::default_for`]). Pages join
    /// it through [`free_initialised_range`](Self::free_initialised_range)
    /// or deferred-init workers.
    pub fn new(
        memmap: &'m Memmap<B>,
        managed: impl IntoIterator<Item = ManagedRange>,
    ) -> Result<Self, BuddyError> {
        let store = BuddyStore::default_for(<B::Page as PageLayout>::HAS_LIST_LINK);
        Self::with_store(memmap, managed, [], store)
    }

    /// [`new`](Self::new) with the free blocks kept in `store`, and
    /// `may_manage`: memory not managed now that may be later
    /// ([`manage`](Self::manage): reserved memory given back), which the
    /// free bitmaps of its (node, zone) cover too, as Linux's zone spans
    /// cover its reserved pages. Never inlined: the instruction profile's
    /// `free_bitmaps` phase opens here.
    #[inline(never)]
    pub fn with_store(
        memmap: &'m Memmap<B>,
        managed: impl IntoIterator<Item = ManagedRange>,
        may_manage: impl IntoIterator<Item = ManagedRange>,
        store: BuddyStore,
    ) -> Result<Self, BuddyError> {
        if store == BuddyStore::Lists && !<B::Page as PageLayout>::HAS_LIST_LINK {
            return Err(BuddyError::NoListLink {
                page_bytes: <B::Page as PageLayout>::BYTES,
            });
        }
        let mut v: Vec<ManagedRange> = managed.into_iter().filter(|m| !m.pfns.is_empty()).collect();
        sort_by_start(&mut v);
        let mut max_nid = 0;
        for m in &v {
            if m.nid >= MAX_NUMNODES {
                return Err(BuddyError::NodeIdTooLarge { nid: m.nid });
            }
            max_nid = max_nid.max(m.nid);
            if ZoneType::of_pfn(m.pfns.start) != m.zone
                || ZoneType::of_pfn(m.pfns.end - 1) != m.zone
            {
                return Err(BuddyError::RangeCrossesZone { range: *m });
            }
            if let Some(section_nr) = memmap.first_unbacked_section(m.pfns) {
                return Err(BuddyError::SectionNotBacked {
                    section_nr,
                    range: *m,
                });
            }
        }
        for w in v.windows(2) {
            if w[1].pfns.start < w[0].pfns.end {
                return Err(BuddyError::OverlappingRanges {
                    first: w[0],
                    second: w[1],
                });
            }
        }
        let mut ranges: Vec<(PfnRange, u32)> = Vec::with_capacity(v.len());
        for m in &v {
            let s = slot(m.nid, m.zone) as u32;
            match ranges.last_mut() {
                Some((last, ls)) if *ls == s && last.end == m.pfns.start => last.end = m.pfns.end,
                _ => ranges.push((m.pfns, s)),
            }
        }
        let nr_slots = if v.is_empty() {
            0
        } else {
            (max_nid as usize + 1) * NR_ZONES
        };
        let may_manage: Vec<(PfnRange, u32)> = match store {
            BuddyStore::Lists => Vec::new(),
            BuddyStore::Bitmaps => may_manage
                .into_iter()
                .filter(|m| !m.pfns.is_empty() && slot(m.nid, m.zone) < nr_slots)
                .map(|m| (m.pfns, slot(m.nid, m.zone) as u32))
                .collect(),
        };
        let mut zones = Vec::with_capacity(nr_slots);
        for s in 0..nr_slots {
            let index = match store {
                BuddyStore::Lists => FreeIndex::Lists([PFN_NONE; NR_ORDERS]),
                BuddyStore::Bitmaps => {
                    FreeIndex::Bitmaps(slot_bitmaps(ranges.iter().chain(&may_manage), s)?)
                }
            };
            zones.push(Mutex::new(ZoneFree::new(index)));
        }
        Ok(Self {
            memmap,
            ranges,
            late: Mutex::new(Vec::new()),
            zones,
            store,
        })
    }

    /// Where the free blocks are kept.
    pub fn store(&self) -> BuddyStore {
        self.store
    }

    /// Bytes of the allocator's own structures beyond the struct pages
    /// (the bitmaps; free lists need none).
    pub fn index_bytes(&self) -> u64 {
        self.zones
            .iter()
            .map(|z| match &z.lock().index {
                FreeIndex::Lists(_) => 0,
                FreeIndex::Bitmaps(b) => b.bytes(),
            })
            .sum()
    }

    /// The managed range holding `pfn` and its slot.
    #[inline]
    fn range_of(&self, pfn: Pfn) -> Option<(PfnRange, usize)> {
        match find_range(&self.ranges, pfn) {
            Some(hit) => Some(hit),
            None => self.late_range_of(pfn),
        }
    }

    /// [`range_of`](Self::range_of) among the ranges managed late.
    #[cold]
    fn late_range_of(&self, pfn: Pfn) -> Option<(PfnRange, usize)> {
        find_range(&self.late.lock(), pfn)
    }

    /// Manage `range` of (nid, zone) from now on: reserved memory that is
    /// given back once memory is ready (Linux frees such pages into their
    /// zone, `free_reserved_page`), which then joins the allocator through
    /// [`free_initialised_range`](Self::free_initialised_range). A range
    /// managed already is left as it is. Its pages merge only with each
    /// other: a buddy outside it is never read.
    pub fn manage(&self, m: ManagedRange) -> Result<(), ManageError> {
        let s = slot(m.nid, m.zone);
        let refuse = |why| Err(ManageError { range: m, why });
        if m.pfns.is_empty() || self.check_managed(m.pfns).is_ok() {
            return Ok(());
        }
        if ZoneType::of_pfn(m.pfns.start) != m.zone || ZoneType::of_pfn(m.pfns.end - 1) != m.zone {
            return refuse("it leaves the zone it is labelled with");
        }
        if self.memmap.first_unbacked_section(m.pfns).is_some() {
            return refuse("a section of it has no struct-page backing");
        }
        let overlaps = |(r, _): &(PfnRange, u32)| r.intersect(&m.pfns).is_some();
        if self.ranges.iter().any(overlaps) {
            return refuse("part of it is managed already");
        }
        let Some(zone) = self.zones.get(s) else {
            return refuse("the allocator has no free lists for its (node, zone)");
        };
        if let FreeIndex::Bitmaps(bits) = &zone.lock().index {
            if !bits.covers(m.pfns) {
                return refuse("it lies outside its zone's free bitmaps");
            }
        }
        let mut late = self.late.lock();
        if late.iter().any(overlaps) {
            return refuse("part of it is managed already");
        }
        let at = late.partition_point(|(r, _)| r.start < m.pfns.start);
        late.insert(at, (m.pfns, s as u32));
        Ok(())
    }

    /// Run `f` on the struct page of `pfn`.
    ///
    /// # Safety
    /// `pfn` must be managed (so its section is backed, checked in `new`) and
    /// the caller must have exclusive access to that struct page for the call:
    /// it is on a free list of a zone whose lock the caller holds, or it is in
    /// a block the caller owns (allocated to it, or being freed by it).
    #[inline]
    unsafe fn with_page<R>(&self, pfn: Pfn, f: impl FnOnce(&mut B::Page) -> R) -> R {
        let mut page = self
            .memmap
            .page_ptr(pfn)
            .expect("managed PFN without struct-page backing (checked in BuddyAllocator::new)");
        // SAFETY: valid per the backing contract; exclusivity is the
        // caller's obligation (see above).
        f(unsafe { page.as_mut() })
    }

    /// Make the block `pfn`/`order` free: head typed, then in its order's
    /// list or bitmap. Caller holds the zone lock and owns the block.
    fn push(&self, zf: &mut ZoneFree, pfn: Pfn, order: u32) {
        match &mut zf.index {
            FreeIndex::Lists(heads) => {
                let old = heads[order as usize];
                // SAFETY: the caller owns the block being pushed.
                unsafe {
                    self.with_page(pfn, |p| {
                        p.set_buddy(order);
                        set_link(p, |l| {
                            *l = ListHead {
                                next: old,
                                prev: PFN_NONE,
                            }
                        });
                    })
                };
                if old != PFN_NONE {
                    // SAFETY: `old` heads a block on this zone's list; we hold its lock.
                    unsafe { self.with_page(old, |p| set_link(p, |l| l.prev = pfn)) };
                }
                heads[order as usize] = pfn;
            }
            FreeIndex::Bitmaps(bits) => {
                // SAFETY: the caller owns the block being pushed.
                unsafe { self.with_page(pfn, |p| p.set_buddy(order)) };
                bits.insert(pfn, order);
            }
        }
        zf.nr_blocks[order as usize] += 1;
        zf.nr_free_pages += 1 << order;
    }

    /// Take the free block `pfn`/`order` out; its head becomes a page of
    /// the block like any other (`clear_buddy`), or, with `allocate`, the
    /// head of an allocated block (`_refcount` 1) in the same write.
    /// Caller holds the lock.
    fn unlink(&self, zf: &mut ZoneFree, pfn: Pfn, order: u32, allocate: bool) {
        let retype = |p: &mut B::Page| {
            p.clear_buddy();
            if allocate {
                p.set_refcount(1);
            }
        };
        match &mut zf.index {
            FreeIndex::Lists(heads) => {
                // SAFETY: `pfn` heads a block on this zone's list; we hold its lock.
                let ListHead { next, prev } = unsafe {
                    self.with_page(pfn, |p| {
                        retype(p);
                        let own = p.list_link_addr().unwrap_or_default();
                        let links = p.list_link().unwrap_or_default();
                        set_link(p, |l| {
                            *l = ListHead {
                                next: own,
                                prev: own,
                            }
                        });
                        links
                    })
                };
                if prev == PFN_NONE {
                    heads[order as usize] = next;
                } else {
                    // SAFETY: neighbours on this zone's list; we hold its lock.
                    unsafe { self.with_page(prev, |p| set_link(p, |l| l.next = next)) };
                }
                if next != PFN_NONE {
                    // SAFETY: as above.
                    unsafe { self.with_page(next, |p| set_link(p, |l| l.prev = prev)) };
                }
            }
            FreeIndex::Bitmaps(bits) => {
                bits.remove(pfn, order);
                // SAFETY: `pfn` heads a free block of this zone; we hold its lock.
                unsafe { self.with_page(pfn, retype) };
            }
        }
        zf.nr_blocks[order as usize] -= 1;
        zf.nr_free_pages -= 1 << order;
    }

    /// Is the managed `buddy` a free block of `order`? Caller holds the lock.
    #[inline]
    fn is_free_block(&self, zf: &ZoneFree, buddy: Pfn, order: u32) -> bool {
        match &zf.index {
            // SAFETY: the buddy is managed by this (node, zone), so it is
            // initialised (same section as the block being freed: its chunk
            // is ours, or it was handed over initialised) and, if free,
            // protected by our lock; if allocated we only read, per the
            // module contract.
            FreeIndex::Lists(_) => unsafe {
                self.with_page(buddy, |b| b.is_buddy() && b.buddy_order() == order)
            },
            FreeIndex::Bitmaps(bits) => bits.contains(buddy, order),
        }
    }

    /// The first free block of `order` (list head, or lowest address).
    #[inline]
    fn first_block(zf: &mut ZoneFree, order: u32) -> Option<Pfn> {
        match &mut zf.index {
            FreeIndex::Lists(heads) => Some(heads[order as usize]).filter(|&h| h != PFN_NONE),
            FreeIndex::Bitmaps(bits) => bits.first(order),
        }
    }

    /// Merge `pfn`/`order` with free buddies and push the result. Every page
    /// of the block has `_refcount == 0` and the block lies in `range`.
    fn merge_and_push(&self, zf: &mut ZoneFree, range: PfnRange, pfn: Pfn, order: u32) {
        if let FreeIndex::Bitmaps(bits) = &mut zf.index {
            let (head, merged) = bits.merge(range, pfn, order);
            // The merged block, our block and free buddies, is ours under
            // the lock: the buddies' heads become tails, the head the
            // merged block's, through one lookup of its struct pages.
            // SAFETY: see above; managed, so backed.
            let pages = unsafe { self.block_pages(head, merged) };
            for o in order..merged {
                pages[((pfn ^ (1 << o)) & !((1 << o) - 1)) as usize - head as usize].clear_buddy();
            }
            pages[0].set_buddy(merged);
            for o in order..merged {
                zf.nr_blocks[o as usize] -= 1;
            }
            zf.nr_blocks[merged as usize] += 1;
            zf.nr_free_pages += 1 << order;
            return;
        }
        let (mut pfn, mut order) = (pfn, order);
        while order < MAX_ORDER {
            let buddy = pfn ^ (1 << order);
            // `new` merges adjacent ranges of one (node, zone), so a free
            // buddy of this (node, zone) lies in `range`; one outside it is
            // another zone's, or not wholly free memory.
            if !range.contains(buddy) || !self.is_free_block(zf, buddy, order) {
                break;
            }
            self.unlink(zf, buddy, order, false);
            pfn &= !(1 << order);
            order += 1;
        }
        self.push(zf, pfn, order);
    }

    /// The struct pages of the block `pfn`/`order`.
    ///
    /// # Safety
    /// The block must be managed and the caller must own all of it for as
    /// long as it uses the slice (see [`with_page`](Self::with_page)).
    #[inline]
    #[allow(clippy::mut_from_ref)]
    unsafe fn block_pages(&self, pfn: Pfn, order: u32) -> &mut [B::Page] {
        // SAFETY: exclusivity is the caller's obligation; a block never
        // leaves its section (orders stop at MAX_ORDER).
        unsafe {
            self.memmap
                .pages_mut_unchecked(PfnRange::new(pfn, pfn + (1 << order)))
        }
        .expect("managed block without struct-page backing (checked in BuddyAllocator::new)")
    }

    /// Allocate `1 << order` contiguous pages from (nid, zone); returns the
    /// head PFN. The head's `_refcount` is 1. Never inlined: the instruction
    /// profile counts its calls (`memboot-profile`'s `buddy_alloc`).
    #[inline(never)]
    pub fn alloc(&self, nid: NodeId, zone: ZoneType, order: u32) -> Result<Pfn, AllocError> {
        if order > MAX_ORDER {
            return Err(AllocError::OrderTooLarge { order });
        }
        let mut zf = self.zone_lock(nid, zone)?;
        self.take(&mut zf, order, true)
            .ok_or(AllocError::OutOfMemory { nid, zone, order })
    }

    fn zone_lock(
        &self,
        nid: NodeId,
        zone: ZoneType,
    ) -> Result<spin::MutexGuard<'_, ZoneFree>, AllocError> {
        let zl = self
            .zones
            .get(slot(nid, zone))
            .ok_or(AllocError::UnknownNode { nid })?;
        Ok(zl.lock())
    }

    /// Take a block of `order` off the store: the first block of the
    /// smallest order that has one, split (Linux `expand`). With
    /// `allocate` its head gets `_refcount` 1; without, it stays 0.
    /// Caller holds the lock.
    #[inline]
    fn take(&self, zf: &mut ZoneFree, order: u32, allocate: bool) -> Option<Pfn> {
        let ZoneFree {
            nr_blocks,
            nr_free_pages,
            index,
        } = zf;
        if let FreeIndex::Bitmaps(bits) = index {
            let found = (order..=MAX_ORDER).find(|&o| nr_blocks[o as usize] != 0)?;
            let pfn = bits.take(found, order)?;
            // SAFETY: the block is off the store and ours until we return
            // it; the split halves are free blocks of this zone, whose lock
            // we hold.
            let pages = unsafe { self.block_pages(pfn, found) };
            pages[0].clear_buddy();
            if allocate {
                pages[0].set_refcount(1);
            }
            for cur in order..found {
                pages[1 << cur].set_buddy(cur);
                nr_blocks[cur as usize] += 1;
            }
            nr_blocks[found as usize] -= 1;
            *nr_free_pages -= 1 << order;
            return Some(pfn);
        }
        let mut first = None;
        for o in order..=MAX_ORDER {
            if zf.nr_blocks[o as usize] != 0 {
                first = Self::first_block(zf, o).map(|pfn| (o, pfn));
                if first.is_some() {
                    break;
                }
            }
        }
        let (found, pfn) = first?;
        self.unlink(zf, pfn, found, allocate);
        let mut cur = found;
        while cur > order {
            cur -= 1;
            self.push(zf, pfn + (1 << cur), cur);
        }
        Some(pfn)
    }

    /// Free a block returned by [`alloc`](Self::alloc) (or any allocated,
    /// managed, aligned block whose head has `_refcount == 1`). Never
    /// inlined, as `alloc`.
    #[inline(never)]
    pub fn free(&self, pfn: Pfn, order: u32) -> Result<(), FreeError> {
        if order > MAX_ORDER {
            return Err(FreeError::OrderTooLarge { order });
        }
        if pfn & ((1 << order) - 1) != 0 {
            return Err(FreeError::Misaligned { pfn, order });
        }
        let last = pfn + (1 << order) - 1;
        let (range, s) = self
            .range_of(pfn)
            .ok_or(FreeError::NotManaged { pfn, order })?;
        if !range.contains(last) {
            return Err(FreeError::NotManaged { pfn, order });
        }
        let mut zf = self.zones[s].lock();
        self.release_head(pfn)?;
        self.merge_and_push(&mut zf, range, pfn, order);
        Ok(())
    }

    /// Drop the head `pfn`'s `_refcount` from 1 to 0: the check that
    /// refuses a double free or a tail page. Caller holds the zone lock of
    /// `pfn`'s slot.
    fn release_head(&self, pfn: Pfn) -> Result<(), FreeError> {
        // SAFETY: if the block is allocated the caller owns it; if it is
        // (wrongly) free, its head is protected by the zone lock the caller
        // holds.
        let ok = unsafe {
            self.with_page(pfn, |p| {
                let ok = !p.is_buddy() && p.refcount() == 1;
                if ok {
                    p.set_refcount(0);
                }
                ok
            })
        };
        ok.then_some(()).ok_or(FreeError::NotAllocated { pfn })
    }

    /// Hand initialised pages to the allocator: `PG_reserved` cleared and
    /// `_refcount` set to 0 on every page, then freed in the largest
    /// aligned blocks (Linux `__free_pages_core`).
    ///
    /// # Safety
    /// Every struct page of `range` must be initialised, on no free list, and
    /// not accessed by anyone else during and after the call (the allocator
    /// owns them afterwards).
    pub unsafe fn free_initialised_range(&self, range: PfnRange) -> Result<(), FreeError> {
        self.check_managed(range)?;
        for piece in range.section_pieces() {
            // SAFETY: the caller hands us exclusive ownership of these pages.
            let pages = unsafe { self.memmap.pages_mut_unchecked(piece) };
            for p in pages.expect("managed range without backing (checked in new)") {
                p.clear_reserved();
                p.set_refcount(0);
            }
        }
        self.free_max_blocks(range);
        Ok(())
    }

    /// Hand pages that memmap init left ready to be freed (`InitAs::Free`:
    /// not reserved, `_refcount` 0, as the boot CPU leaves its free pages)
    /// to the allocator in the largest aligned blocks: only each block's
    /// head is written, not every page again.
    ///
    /// # Safety
    /// Every struct page of `range` must be initialised with `_refcount` 0
    /// and without `PG_reserved`, be on no free list, and not be accessed by
    /// anyone else during and after the call (the allocator owns them
    /// afterwards).
    pub unsafe fn free_ready_range(&self, range: PfnRange) -> Result<(), FreeError> {
        self.check_managed(range)?;
        self.free_max_blocks(range);
        Ok(())
    }

    /// Free the ready pages of `range`, which one managed range holds, in
    /// the largest aligned blocks.
    fn free_max_blocks(&self, range: PfnRange) {
        let mut frees = self.prepared_frees();
        for (pfn, order) in max_blocks(range) {
            frees.free(pfn, order);
        }
    }

    /// `Ok` if one managed range holds all of `range` (empty included).
    fn check_managed(&self, range: PfnRange) -> Result<(), FreeError> {
        if range.is_empty() {
            return Ok(());
        }
        match self.range_of(range.start) {
            Some((r, _)) if r.contains(range.end - 1) => Ok(()),
            _ => Err(FreeError::NotManaged {
                pfn: range.start,
                order: 0,
            }),
        }
    }

    /// Free pages of (nid, zone).
    pub fn nr_free_pages(&self, nid: NodeId, zone: ZoneType) -> u64 {
        self.zones
            .get(slot(nid, zone))
            .map_or(0, |z| z.lock().nr_free_pages)
    }

    /// Free pages of all zones of `nid`.
    pub fn nr_free_pages_node(&self, nid: NodeId) -> u64 {
        ZoneType::ALL
            .iter()
            .map(|&z| self.nr_free_pages(nid, z))
            .sum()
    }

    /// Free pages in the whole allocator.
    pub fn nr_free_pages_total(&self) -> u64 {
        self.zones.iter().map(|z| z.lock().nr_free_pages).sum()
    }

    /// Free blocks of exactly `order` in (nid, zone).
    pub fn nr_free_blocks(&self, nid: NodeId, zone: ZoneType, order: u32) -> u64 {
        match self.zones.get(slot(nid, zone)) {
            Some(z) if order <= MAX_ORDER => z.lock().nr_blocks[order as usize],
            _ => 0,
        }
    }

    /// Number of (node, zone) slots: `slot(nid, zone) < nr_slots()` for
    /// every (node, zone) the allocator has lists for.
    pub fn nr_slots(&self) -> usize {
        self.zones.len()
    }
}

/// Sort the managed ranges by first PFN. A few per node, nearly in order
/// (each owner's ranges come ascending), so an insertion sort: its loop is
/// a few instructions, where the library's sort runs some 500 for the
/// first time every boot, each a translation under TCG (about a
/// microsecond each, and this runs in the timed `free_bitmaps` phase).
fn sort_by_start(v: &mut [ManagedRange]) {
    for i in 1..v.len() {
        let mut j = i;
        while j > 0 && v[j - 1].pfns.start > v[j].pfns.start {
            v.swap(j - 1, j);
            j -= 1;
        }
    }
}

/// The range of sorted, disjoint `ranges` holding `pfn`, and its slot.
#[inline]
fn find_range(ranges: &[(PfnRange, u32)], pfn: Pfn) -> Option<(PfnRange, usize)> {
    let i = ranges.partition_point(|(r, _)| r.start <= pfn);
    let (r, s) = *ranges.get(i.checked_sub(1)?)?;
    r.contains(pfn).then_some((r, s as usize))
}

/// Write a page's list link (the list store only serves pages that have one).
#[inline]
fn set_link<P: PageLayout>(p: &mut P, f: impl FnOnce(&mut ListHead)) {
    if let Some(l) = p.list_link_mut() {
        f(l);
    }
}

/// The free bitmaps of slot `s`, over the span of its ranges (managed, or
/// memory it may manage later).
fn slot_bitmaps<'a>(
    ranges: impl Iterator<Item = &'a (PfnRange, u32)>,
    s: usize,
) -> Result<FreeBitmaps, BuddyError> {
    let mut mine = ranges.filter(|(_, rs)| *rs as usize == s).map(|(r, _)| *r);
    let span = match mine.next() {
        Some(first) => mine.fold(first, |span, r| {
            PfnRange::new(span.start.min(r.start), span.end.max(r.end))
        }),
        None => PfnRange::new(0, 0),
    };
    FreeBitmaps::new(span).map_err(|bytes| {
        let (nid, zone) = slot_key(s);
        BuddyError::NoMemoryForBitmaps {
            nid,
            zone,
            bytes: bytes as u64,
        }
    })
}

/// `range` as the largest naturally aligned blocks of order ≤ `MAX_ORDER`,
/// `(head, order)` ascending (Linux `deferred_free_pages` /
/// `memblock_free_pages` loop).
#[inline]
pub(crate) fn max_blocks(range: PfnRange) -> impl Iterator<Item = (Pfn, u32)> {
    let mut pfn = range.start;
    core::iter::from_fn(move || {
        if pfn >= range.end {
            return None;
        }
        let mut order = pfn.trailing_zeros().min(MAX_ORDER);
        while pfn + (1 << order) > range.end {
            order -= 1;
        }
        let block = (pfn, order);
        pfn += 1 << order;
        Some(block)
    })
}

#[cfg(test)]
mod sort_tests {
    use proptest::prelude::*;

    use super::{sort_by_start, ManagedRange};
    use memmap::{PfnRange, ZoneType};

    proptest! {
        /// The insertion sort orders like the library's sort, in any input
        /// order (starts distinct, as managed ranges' are).
        #[test]
        fn sorts_by_start_in_any_order(starts in proptest::collection::hash_set(0u64..1 << 20, 0..40)) {
            let mut v: Vec<ManagedRange> = starts
                .iter()
                .map(|&s| ManagedRange { nid: (s % 3) as u32, zone: ZoneType::Normal, pfns: PfnRange::new(s, s + 1) })
                .collect();
            let mut expected = v.clone();
            expected.sort_unstable_by_key(|m| m.pfns.start);
            sort_by_start(&mut v);
            prop_assert_eq!(v, expected);
        }
    }
}
