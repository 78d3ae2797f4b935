//! The buddy allocator's free blocks kept out of the struct pages: per
//! (node, zone), a [`Group`] of bits per `MAX_ORDER` block (4 MiB), a bit
//! for each naturally aligned block of every order inside it (set: the
//! block is free and not part of a larger free block), and per order a
//! summary with a bit per group (set: the group has a free block of that
//! order), scanned from the lowest word that may be set.
//!
//! Why bitmaps and not per-block descriptors: a free block needs no data
//! but its order, which the head's 8-byte page holds; what the allocator
//! needs is "is this buddy free?" (one bit) and "any free block of this
//! order?" (the summary), both O(1) for the lowest-address block, the
//! memory is fixed and small (a 272-byte group per 4 MiB: about RAM/15000,
//! 0.5 GiB at 8 TiB), and nothing is allocated per free or merge. Lowest
//! address first also keeps allocations together, as a sorted free list
//! would.
//!
//! Why every order's bits of a 4 MiB block sit together: a split or a
//! merge never leaves its `MAX_ORDER` block, so all the bits one
//! allocation or free reads and writes lie in one group, a few cache lines
//! of one page, beside the struct pages it types. Under TCG each page an
//! operation touches costs a software-TLB lookup, and one bitmap per order
//! would touch a page per order.
//!
//! Why each group is written on first use: zeroing every group before the
//! hand-off (~66 MiB at 1 TiB) was a pass of the boot CPU's over memory no
//! one had used yet. A group's words are now written by the CPU that first
//! frees into it — for deferred memory that node's workers, in the same
//! pass that initialises the struct pages — and a free of a whole 4 MiB
//! block writes one word of it ([`LAST_WORD`]). Only a byte per group
//! saying how much of it holds data, and the summaries, are zeroed up front.

use alloc::vec::Vec;
use core::mem::MaybeUninit;

use memmap::{Pfn, PfnRange, MAX_ORDER, NR_ORDERS};

/// Pages of a group: one `MAX_ORDER` block.
const GROUP_NR_PAGES: u64 = 1 << MAX_ORDER;

/// The bits of one `MAX_ORDER` block: order `k`'s `1024 >> k` bits start
/// at bit [`order_offset`]`(k)`, orders one after another (2047 bits).
#[repr(C)]
struct Group {
    bits: [u64; 32],
    /// Bit `w`: `bits[w] != 0`, for the words of orders 0–3 (30 words),
    /// so finding an order's first block reads one word, not up to 16.
    nonzero: u32,
}

const _: () = assert!(order_offset(MAX_ORDER + 1) as usize <= 32 * 64);

/// The last order whose bits fill whole words of a group; the higher ones
/// share the last word (bits from 31 × 64 on).
const SHARED_WORD_ORDER: u32 = 4;
const _: () = assert!(order_offset(SHARED_WORD_ORDER + 1) == 31 * 64);

/// Per order up to [`SHARED_WORD_ORDER`]: the words of a group holding its bits.
const ORDER_WORDS: [u32; SHARED_WORD_ORDER as usize + 1] = {
    let mut masks = [0; SHARED_WORD_ORDER as usize + 1];
    let mut order = 0;
    while order <= SHARED_WORD_ORDER {
        let first = order_offset(order) / 64;
        let end = order_offset(order + 1) / 64;
        masks[order as usize] = ((1u64 << end) - (1u64 << first)) as u32;
        order += 1;
    }
    masks
};

/// Per order above [`SHARED_WORD_ORDER`]: its bits in the group's last word.
const SHARED_BITS: [u64; NR_ORDERS] = {
    let mut masks = [0; NR_ORDERS];
    let mut order = SHARED_WORD_ORDER + 1;
    while order <= MAX_ORDER {
        let first = order_offset(order) - 31 * 64;
        let end = order_offset(order + 1) - 31 * 64;
        masks[order as usize] = (1u64 << end) - (1u64 << first);
        order += 1;
    }
    masks
};

/// First bit of order `order`'s bits in a group.
const fn order_offset(order: u32) -> u32 {
    2 * GROUP_NR_PAGES as u32 - ((2 * GROUP_NR_PAGES as u32) >> order)
}

impl Group {
    #[inline]
    fn bit(order: u32, index: u64) -> usize {
        (order_offset(order) as u64 + index) as usize
    }
}

/// How much of a group holds data ([`Groups::written`]); what is not
/// written reads as zero. A group is written as it is first used, by
/// whichever CPU first frees into it (a node's deferred-init workers, the
/// boot CPU for its own pages), not all at once before the hand-off: a
/// whole-block free, a deferred worker's usual one, writes only the
/// shared last word, and the other 31 words are written the first time a
/// bit of orders 0–4 is set.
const UNWRITTEN: u8 = 0;
/// The last word (orders above [`SHARED_WORD_ORDER`]) holds data; the rest
/// reads as zero, `nonzero` as that word's own bit.
const LAST_WORD: u8 = 1;
/// Every word and `nonzero` hold data.
const WHOLE: u8 = 2;

/// What must be written for bit `b` to hold data.
#[inline]
fn part_of(b: usize) -> u8 {
    if b >= 31 * 64 {
        LAST_WORD
    } else {
        WHOLE
    }
}

/// The groups of one (node, zone), each written on first use.
struct Groups {
    mem: Vec<MaybeUninit<Group>>,
    /// Per group: [`UNWRITTEN`], [`LAST_WORD`] or [`WHOLE`]; only grows.
    written: Vec<u8>,
}

impl Groups {
    fn new(nr_groups: usize) -> Result<Self, usize> {
        let mut mem = Vec::new();
        mem.try_reserve_exact(nr_groups)
            .map_err(|_| nr_groups * core::mem::size_of::<Group>())?;
        // SAFETY: the capacity was reserved just now, and a `MaybeUninit`
        // needs no initialisation: `written` says which words hold data.
        unsafe { mem.set_len(nr_groups) };
        Ok(Self {
            mem,
            written: zeroed(nr_groups, UNWRITTEN)?,
        })
    }

    fn len(&self) -> usize {
        self.mem.len()
    }

    /// Word `w` of group `g` (zero where not written).
    #[inline]
    fn word(&self, g: usize, w: usize) -> u64 {
        if self.written[g] < part_of(w * 64) {
            return 0;
        }
        // SAFETY: `written` says word `w` of this group holds data; the
        // place is read through the raw pointer, without a reference to
        // the rest of the group.
        unsafe { (*self.mem[g].as_ptr()).bits[w] }
    }

    /// Group `g`'s `nonzero`: bit `w` set when word `w` is not zero.
    #[inline]
    fn nonzero(&self, g: usize) -> u32 {
        match self.written[g] {
            WHOLE => {
                // SAFETY: a whole group's `nonzero` holds data.
                unsafe { (*self.mem[g].as_ptr()).nonzero }
            }
            _ => u32::from(self.word(g, 31) != 0) << 31,
        }
    }

    /// Group `g` with every word `b`'s part needs written, as a pointer
    /// whose fields up to that part hold data.
    #[inline]
    fn writable(&mut self, g: usize, b: usize) -> *mut Group {
        let need = part_of(b);
        if self.written[g] < need {
            self.write_out(g, need);
        }
        self.mem[g].as_mut_ptr()
    }

    /// Write group `g`'s zeros up to `need`: its last word, then the rest.
    #[inline(never)]
    fn write_out(&mut self, g: usize, need: u8) {
        let p = self.mem[g].as_mut_ptr();
        // SAFETY: `p` points at group `g`'s memory, which this `&mut self`
        // owns; each field is written through the raw pointer before
        // `written` says it holds data, and only words already written are
        // read (the last word, when it is).
        unsafe {
            if self.written[g] == UNWRITTEN {
                (*p).bits[31] = 0;
            }
            if need == WHOLE {
                for w in 0..31 {
                    (*p).bits[w] = 0;
                }
                (*p).nonzero = u32::from((*p).bits[31] != 0) << 31;
            }
        }
        self.written[g] = need;
    }

    #[inline]
    fn set(&mut self, g: usize, b: usize) {
        let whole = self.written[g] == WHOLE || part_of(b) == WHOLE;
        let p = self.writable(g, b);
        // SAFETY: `writable` wrote every field bit `b`'s part has, and
        // `nonzero` when the group is whole.
        unsafe {
            (*p).bits[b / 64] |= 1 << (b % 64);
            if whole {
                (*p).nonzero |= 1 << (b / 64);
            }
        }
    }

    /// Clear bit `b`, which is set; true if the group then has no block of
    /// `order` left.
    #[inline]
    fn clear(&mut self, g: usize, b: usize, order: u32) -> bool {
        let whole = self.written[g] == WHOLE;
        let p = self.writable(g, b);
        let w = b / 64;
        // SAFETY: as in `set`.
        unsafe {
            (*p).bits[w] &= !(1 << (b % 64));
            if whole && (*p).bits[w] == 0 {
                (*p).nonzero &= !(1 << w);
            }
        }
        self.first(g, order).is_none()
    }

    #[inline]
    fn test(&self, g: usize, b: usize) -> bool {
        self.word(g, b / 64) & (1 << (b % 64)) != 0
    }

    /// Index (within group `g`) of the lowest free block of `order`: the
    /// hot path, a mask and two bit scans. Orders 0–4 fill whole words
    /// (found through `nonzero`), orders 5–10 share the last word.
    #[inline]
    fn first(&self, g: usize, order: u32) -> Option<u64> {
        let start = order_offset(order) as u64;
        let at = if order <= SHARED_WORD_ORDER {
            let words = self.nonzero(g) & ORDER_WORDS[order as usize];
            if words == 0 {
                return None;
            }
            let w = words.trailing_zeros() as usize;
            w as u64 * 64 + self.word(g, w).trailing_zeros() as u64
        } else {
            let word = self.word(g, 31) & SHARED_BITS[order as usize];
            if word == 0 {
                return None;
            }
            31 * 64 + word.trailing_zeros() as u64
        };
        Some(at - start)
    }

    /// Index of the lowest free block of `order` at or above `from` in
    /// group `g`.
    fn first_from(&self, g: usize, order: u32, from: u64) -> Option<u64> {
        let n = GROUP_NR_PAGES >> order;
        let start = order_offset(order) as u64;
        let (lo, hi) = (start + from, start + n);
        if lo >= hi {
            return None;
        }
        // Words of this order's bits that may hold one at or after `lo`.
        let first_w = (lo / 64) as u32;
        let last_w = ((hi - 1) / 64) as u32;
        let span = (u64::MAX >> (63 - (last_w - first_w))) << first_w;
        let mut candidates = self.nonzero(g) as u64 & span;
        while candidates != 0 {
            let w = candidates.trailing_zeros() as u64;
            let mut word = self.word(g, w as usize);
            if w * 64 < lo {
                word &= u64::MAX << (lo - w * 64);
            }
            if (w + 1) * 64 > hi {
                word &= u64::MAX >> ((w + 1) * 64 - hi);
            }
            if word != 0 {
                return Some(w * 64 + word.trailing_zeros() as u64 - start);
            }
            candidates &= candidates - 1;
        }
        None
    }
}

/// Per order, a bit per group: set when the group has a free block of
/// that order. One vector for every order and the hints beside the zone's
/// counters, so an allocation touches few cache lines that the other CPUs
/// contending for the zone's lock then have to fetch back.
struct Summaries {
    /// Word `w` of order `k` is `words[w * NR_ORDERS + k]`: the words of
    /// one group's orders side by side, as a split or merge touches them.
    words: Vec<u64>,
    nr_words: usize,
    /// Per order: no word below this one is non-zero.
    first: [u32; NR_ORDERS],
}

impl Summaries {
    fn new(nr_groups: usize) -> Result<Self, usize> {
        let nr_words = nr_groups.div_ceil(64);
        Ok(Self {
            words: zeroed(nr_words * NR_ORDERS, 0u64)?,
            nr_words,
            first: [nr_words as u32; NR_ORDERS],
        })
    }

    #[inline]
    fn word(&mut self, order: u32, w: usize) -> &mut u64 {
        &mut self.words[w * NR_ORDERS + order as usize]
    }

    #[inline]
    fn get(&self, order: u32, w: usize) -> Option<u64> {
        (w < self.nr_words).then(|| self.words[w * NR_ORDERS + order as usize])
    }

    #[inline]
    fn set(&mut self, order: u32, g: usize) {
        *self.word(order, g / 64) |= 1 << (g % 64);
        let hint = &mut self.first[order as usize];
        if ((g / 64) as u32) < *hint {
            *hint = (g / 64) as u32;
        }
    }

    #[inline]
    fn clear(&mut self, order: u32, g: usize) {
        *self.word(order, g / 64) &= !(1 << (g % 64));
    }

    /// The lowest group with a block of `order`, moving its hint past
    /// zero words.
    #[inline]
    fn first(&mut self, order: u32) -> Option<usize> {
        let mut at = self.first[order as usize] as usize;
        while let Some(w) = self.get(order, at) {
            if w != 0 {
                self.first[order as usize] = at as u32;
                return Some(at * 64 + w.trailing_zeros() as usize);
            }
            at += 1;
        }
        self.first[order as usize] = at as u32;
        None
    }

    /// The lowest group with a block of `order` at or above `from`.
    fn next_from(&self, order: u32, from: usize) -> Option<usize> {
        let mut w = from / 64;
        let mut word = self.get(order, w)? & (u64::MAX << (from % 64));
        loop {
            if word != 0 {
                return Some(w * 64 + word.trailing_zeros() as usize);
            }
            w += 1;
            word = self.get(order, w)?;
        }
    }
}

/// A vector of `len` copies of `value`, or the bytes it needed when the
/// heap cannot hold it.
fn zeroed<T: Copy>(len: usize, value: T) -> Result<Vec<T>, usize> {
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|_| len * core::mem::size_of::<T>())?;
    v.resize(len, value);
    Ok(v)
}

/// The free blocks of one (node, zone), every order.
pub(crate) struct FreeBitmaps {
    /// First PFN of the span, aligned down to a `MAX_ORDER` block.
    base: Pfn,
    groups: Groups,
    summaries: Summaries,
}

impl FreeBitmaps {
    /// Bitmaps for the blocks of `span`; `Err(bytes)` when the heap cannot
    /// hold them.
    pub(crate) fn new(span: PfnRange) -> Result<Self, usize> {
        let base = span.start & !(GROUP_NR_PAGES - 1);
        let nr_groups = (span.end.max(base) - base).div_ceil(GROUP_NR_PAGES) as usize;
        let groups = Groups::new(nr_groups)?;
        let summaries = Summaries::new(nr_groups)?;
        Ok(Self {
            base,
            groups,
            summaries,
        })
    }

    /// Bytes the bitmaps of `span` take: what [`new`](Self::new) allocates.
    #[cfg(test)]
    pub(crate) fn bytes_for(span: PfnRange) -> u64 {
        let base = span.start & !(GROUP_NR_PAGES - 1);
        let nr_groups = (span.end.max(base) - base).div_ceil(GROUP_NR_PAGES);
        nr_groups * (core::mem::size_of::<Group>() as u64 + 1)
            + NR_ORDERS as u64 * nr_groups.div_ceil(64) * 8
    }

    pub(crate) fn bytes(&self) -> u64 {
        (self.groups.len() * (core::mem::size_of::<Group>() + 1) + self.summaries.words.len() * 8)
            as u64
    }

    /// The group of `pfn` and the block's index in it at `order`.
    #[inline]
    fn locate(&self, pfn: Pfn, order: u32) -> (usize, u64) {
        let off = pfn - self.base;
        (
            (off / GROUP_NR_PAGES) as usize,
            (off % GROUP_NR_PAGES) >> order,
        )
    }

    #[inline]
    pub(crate) fn insert(&mut self, pfn: Pfn, order: u32) {
        let (g, i) = self.locate(pfn, order);
        self.groups.set(g, Group::bit(order, i));
        self.summaries.set(order, g);
    }

    #[inline]
    pub(crate) fn remove(&mut self, pfn: Pfn, order: u32) {
        let (g, i) = self.locate(pfn, order);
        if self.groups.clear(g, Group::bit(order, i), order) {
            self.summaries.clear(order, g);
        }
    }

    /// Do the bitmaps have bits for every block of `range`?
    pub(crate) fn covers(&self, range: PfnRange) -> bool {
        range.start >= self.base
            && ((range.end - 1 - self.base) / GROUP_NR_PAGES) < self.groups.len() as u64
    }

    /// Is `pfn` the head of a free block of `order`? (`false` outside the span.)
    #[inline]
    pub(crate) fn contains(&self, pfn: Pfn, order: u32) -> bool {
        if pfn < self.base {
            return false;
        }
        let (g, i) = self.locate(pfn, order);
        g < self.groups.len() && self.groups.test(g, Group::bit(order, i))
    }

    /// The lowest free block of `order`.
    #[inline]
    pub(crate) fn first(&mut self, order: u32) -> Option<Pfn> {
        let g = self.summaries.first(order)?;
        let i = self.groups.first(g, order)?;
        Some(self.base + g as u64 * GROUP_NR_PAGES + (i << order))
    }

    /// Take the lowest free block of order `found` and split it down to
    /// `order` (Linux `expand`): the upper halves stay free, one of each
    /// order from `order` to `found - 1`. Returns the block's PFN. Every
    /// bit this reads or writes lies in one group.
    #[inline]
    pub(crate) fn take(&mut self, found: u32, order: u32) -> Option<Pfn> {
        let g = self.summaries.first(found)?;
        let groups = &mut self.groups;
        let i = groups.first(g, found)?;
        if groups.clear(g, Group::bit(found, i), found) {
            self.summaries.clear(found, g);
        }
        let off = i << found;
        for cur in order..found {
            groups.set(g, Group::bit(cur, (off >> cur) + 1));
            self.summaries.set(cur, g);
        }
        Some(self.base + g as u64 * GROUP_NR_PAGES + off)
    }

    /// Make `pfn`/`order` free, merged with every free buddy that lies in
    /// `range` (Linux `__free_one_page`). Returns the merged block's head
    /// and order; the buddies merged are those of the orders in between.
    #[inline]
    pub(crate) fn merge(&mut self, range: PfnRange, mut pfn: Pfn, mut order: u32) -> (Pfn, u32) {
        let (g, _) = self.locate(pfn, order);
        let groups = &mut self.groups;
        while order < MAX_ORDER {
            let buddy = pfn ^ (1 << order);
            let b = Group::bit(order, (buddy % GROUP_NR_PAGES) >> order);
            if !range.contains(buddy) || !groups.test(g, b) {
                break;
            }
            if groups.clear(g, b, order) {
                self.summaries.clear(order, g);
            }
            pfn &= !(1 << order);
            order += 1;
        }
        let i = ((pfn - self.base) % GROUP_NR_PAGES) >> order;
        groups.set(g, Group::bit(order, i));
        self.summaries.set(order, g);
        (pfn, order)
    }

    /// The lowest free block of `order` at or above `from`.
    pub(crate) fn next_from(&self, from: Pfn, order: u32) -> Option<Pfn> {
        let from = from.max(self.base) - self.base;
        let (mut g, mut i) = (
            (from / GROUP_NR_PAGES) as usize,
            (from % GROUP_NR_PAGES).div_ceil(1 << order),
        );
        loop {
            g = self.summaries.next_from(order, g)?;
            if let Some(at) = self.groups.first_from(g, order, i) {
                return Some(self.base + g as u64 * GROUP_NR_PAGES + (at << order));
            }
            g += 1;
            i = 0;
        }
    }
}

/// Bytes of the buddy allocator's free bitmaps (`buddy=bitmaps`) for a
/// machine whose memory map ends at page `nr_pages`, with `nr_nodes` nodes
/// of up to four zones each: per (node, zone), a 272-byte group of bits per
/// 4 MiB block of the zone's span (a bit per block of each order 0..=10,
/// 2047 bits, a word of masks, and a byte saying how much of the group is
/// written yet) and, per order, a summary bit per group;
/// the span is aligned down to a 4 MiB block, which adds at most one group
/// and one summary word per zone and order. The zones' spans are disjoint
/// (each node's memory is contiguous), so the groups total under RAM/15000
/// bytes, 0.5 GiB at 8 TiB. The kernel sizes its heap with it; run-qemu.sh
/// counts it as memory the boot may write (groups are written as first
/// used, so a boot writes less of it).
pub const fn free_bitmap_bytes(nr_pages: u64, nr_nodes: u64) -> u64 {
    const GROUP_BYTES: u64 = 272;
    // A group and its state byte.
    const _: () = assert!((core::mem::size_of::<Group>() as u64) < GROUP_BYTES);
    let nr_zones = nr_nodes * memmap::ZoneType::ALL.len() as u64;
    let groups = nr_pages.div_ceil(GROUP_NR_PAGES) + 2 * nr_zones;
    let summary_words = NR_ORDERS as u64 * (groups.div_ceil(64) + nr_zones);
    groups * GROUP_BYTES + summary_words * 8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_bitmaps_are_about_two_bits_a_page() {
        let eight_tib_pages = 8u64 << (40 - 12);
        let bytes = free_bitmap_bytes(eight_tib_pages, 1);
        // Two bits a page (2047 per 4 MiB block) and a word of masks per
        // block: 0.5 GiB and 1/16 more, the summaries a few MiB.
        let two_bits = eight_tib_pages / 4;
        assert!(bytes >= two_bits, "{bytes}");
        assert!(bytes <= two_bits + two_bits / 12, "{bytes}");
    }

    use alloc::collections::BTreeSet;
    use proptest::prelude::*;

    /// A free of a whole `MAX_ORDER` block, a deferred worker's usual one,
    /// writes the group's last word only; a lower order writes the rest,
    /// and what was there stays; groups never freed into stay unwritten.
    #[test]
    fn groups_are_written_on_first_use() {
        let span = PfnRange::new(0, 4 * GROUP_NR_PAGES);
        let mut bm = FreeBitmaps::new(span).unwrap();
        assert!(bm.groups.written.iter().all(|&w| w == UNWRITTEN));
        bm.insert(GROUP_NR_PAGES, MAX_ORDER);
        assert_eq!(
            bm.groups.written,
            [UNWRITTEN, LAST_WORD, UNWRITTEN, UNWRITTEN]
        );
        assert_eq!(bm.first(MAX_ORDER), Some(GROUP_NR_PAGES));
        assert_eq!(bm.first(0), None);
        // Split it: order 0..=9 halves set, the group now whole.
        assert_eq!(bm.take(MAX_ORDER, 0), Some(GROUP_NR_PAGES));
        assert_eq!(bm.groups.written[1], WHOLE);
        assert_eq!(bm.first(0), Some(GROUP_NR_PAGES + 1));
        assert_eq!(bm.first(9), Some(GROUP_NR_PAGES + 512));
        // Merged back into the whole block.
        let whole = PfnRange::new(GROUP_NR_PAGES, 2 * GROUP_NR_PAGES);
        assert_eq!(
            bm.merge(whole, GROUP_NR_PAGES, 0),
            (GROUP_NR_PAGES, MAX_ORDER)
        );
        assert_eq!(bm.first(0), None);
        assert_eq!(bm.first(MAX_ORDER), Some(GROUP_NR_PAGES));
        // A low order first, in an unwritten group: written whole at once.
        bm.insert(3 * GROUP_NR_PAGES + 8, 3);
        assert_eq!(bm.groups.written, [UNWRITTEN, WHOLE, UNWRITTEN, WHOLE]);
        assert!(bm.contains(3 * GROUP_NR_PAGES + 8, 3));
        assert!(!bm.contains(2 * GROUP_NR_PAGES, MAX_ORDER));
        assert_eq!(bm.next_from(0, 3), Some(3 * GROUP_NR_PAGES + 8));
    }

    proptest! {
        /// Against a set: inserts and removes at random orders, then the
        /// lowest block and the in-order walk of every order agree.
        #[test]
        fn bitmaps_match_a_set(
            start in 0u64..5000,
            len in 1u64..300_000,
            ops in proptest::collection::vec((any::<bool>(), 0u32..=MAX_ORDER, any::<u64>()), 1..400),
        ) {
            let span = PfnRange::new(start, start + len);
            let mut bm = FreeBitmaps::new(span).unwrap();
            prop_assert_eq!(bm.bytes(), FreeBitmaps::bytes_for(span));
            // The bound that sizes the heap holds for one zone.
            prop_assert!(
                bm.bytes() <= free_bitmap_bytes(start + len, 1)
            );
            let mut model: [BTreeSet<Pfn>; NR_ORDERS] = Default::default();
            for (insert, order, r) in ops {
                let nr_blocks = len >> order;
                if nr_blocks == 0 {
                    continue;
                }
                let pfn = ((start >> order) + r % nr_blocks) << order;
                if pfn < start || pfn + (1 << order) > start + len {
                    continue;
                }
                if insert {
                    bm.insert(pfn, order);
                    model[order as usize].insert(pfn);
                } else {
                    bm.remove(pfn, order);
                    model[order as usize].remove(&pfn);
                }
                prop_assert_eq!(bm.contains(pfn, order), insert);
                prop_assert_eq!(bm.first(order), model[order as usize].first().copied());
            }
            for order in 0..=MAX_ORDER {
                let mut walked = Vec::new();
                let mut from = 0;
                while let Some(pfn) = bm.next_from(from, order) {
                    walked.push(pfn);
                    from = pfn + 1;
                }
                let want: Vec<Pfn> = model[order as usize].iter().copied().collect();
                prop_assert_eq!(walked, want);
            }
        }
    }
}
