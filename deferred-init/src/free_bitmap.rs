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

use alloc::vec::Vec;

use memmap::{Pfn, PfnRange, MAX_ORDER, NR_ORDERS};

/// Pages of a group: one `MAX_ORDER` block.
const GROUP_NR_PAGES: u64 = 1 << MAX_ORDER;

/// The bits of one `MAX_ORDER` block: order `k`'s `1024 >> k` bits start
/// at bit [`order_offset`]`(k)`, orders one after another (2047 bits).
#[derive(Clone, Copy)]
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
    const EMPTY: Group = Group {
        bits: [0; 32],
        nonzero: 0,
    };

    #[inline]
    fn bit(order: u32, index: u64) -> usize {
        (order_offset(order) as u64 + index) as usize
    }

    #[inline]
    fn set(&mut self, b: usize) {
        self.bits[b / 64] |= 1 << (b % 64);
        self.nonzero |= 1 << (b / 64);
    }

    /// Clear bit `b`; true if the group then has no block of `order` left.
    #[inline]
    fn clear(&mut self, b: usize, order: u32) -> bool {
        let w = b / 64;
        self.bits[w] &= !(1 << (b % 64));
        if self.bits[w] == 0 {
            self.nonzero &= !(1 << w);
        }
        self.first(order).is_none()
    }

    #[inline]
    fn test(&self, b: usize) -> bool {
        self.bits[b / 64] & (1 << (b % 64)) != 0
    }

    /// Index (within the group) of the lowest free block of `order`: the
    /// hot path, a mask and two bit scans. Orders 0–4 fill whole words
    /// (found through `nonzero`), orders 5–10 share the last word.
    #[inline]
    fn first(&self, order: u32) -> Option<u64> {
        let start = order_offset(order) as u64;
        let at = if order <= SHARED_WORD_ORDER {
            let words = self.nonzero & ORDER_WORDS[order as usize];
            if words == 0 {
                return None;
            }
            let w = words.trailing_zeros() as usize;
            w as u64 * 64 + self.bits[w].trailing_zeros() as u64
        } else {
            let word = self.bits[31] & SHARED_BITS[order as usize];
            if word == 0 {
                return None;
            }
            31 * 64 + word.trailing_zeros() as u64
        };
        Some(at - start)
    }

    /// Index of the lowest free block of `order` at or above `from`.
    fn first_from(&self, order: u32, from: u64) -> Option<u64> {
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
        let mut candidates = self.nonzero as u64 & span;
        while candidates != 0 {
            let w = candidates.trailing_zeros() as u64;
            let mut word = self.bits[w as usize];
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
    groups: Vec<Group>,
    summaries: Summaries,
}

impl FreeBitmaps {
    /// Bitmaps for the blocks of `span`; `Err(bytes)` when the heap cannot
    /// hold them.
    pub(crate) fn new(span: PfnRange) -> Result<Self, usize> {
        let base = span.start & !(GROUP_NR_PAGES - 1);
        let nr_groups = (span.end.max(base) - base).div_ceil(GROUP_NR_PAGES) as usize;
        let groups = zeroed(nr_groups, Group::EMPTY)?;
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
        nr_groups * core::mem::size_of::<Group>() as u64
            + NR_ORDERS as u64 * nr_groups.div_ceil(64) * 8
    }

    pub(crate) fn bytes(&self) -> u64 {
        (self.groups.len() * core::mem::size_of::<Group>() + self.summaries.words.len() * 8) as u64
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
        self.groups[g].set(Group::bit(order, i));
        self.summaries.set(order, g);
    }

    #[inline]
    pub(crate) fn remove(&mut self, pfn: Pfn, order: u32) {
        let (g, i) = self.locate(pfn, order);
        if self.groups[g].clear(Group::bit(order, i), order) {
            self.summaries.clear(order, g);
        }
    }

    /// Is `pfn` the head of a free block of `order`? (`false` outside the span.)
    #[inline]
    pub(crate) fn contains(&self, pfn: Pfn, order: u32) -> bool {
        if pfn < self.base {
            return false;
        }
        let (g, i) = self.locate(pfn, order);
        self.groups
            .get(g)
            .is_some_and(|grp| grp.test(Group::bit(order, i)))
    }

    /// The lowest free block of `order`.
    #[inline]
    pub(crate) fn first(&mut self, order: u32) -> Option<Pfn> {
        let g = self.summaries.first(order)?;
        let i = self.groups[g].first(order)?;
        Some(self.base + g as u64 * GROUP_NR_PAGES + (i << order))
    }

    /// Take the lowest free block of order `found` and split it down to
    /// `order` (Linux `expand`): the upper halves stay free, one of each
    /// order from `order` to `found - 1`. Returns the block's PFN. Every
    /// bit this reads or writes lies in one group.
    #[inline]
    pub(crate) fn take(&mut self, found: u32, order: u32) -> Option<Pfn> {
        let g = self.summaries.first(found)?;
        let group = &mut self.groups[g];
        let i = group.first(found)?;
        if group.clear(Group::bit(found, i), found) {
            self.summaries.clear(found, g);
        }
        let off = i << found;
        for cur in order..found {
            group.set(Group::bit(cur, (off >> cur) + 1));
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
        let group = &mut self.groups[g];
        while order < MAX_ORDER {
            let buddy = pfn ^ (1 << order);
            let b = Group::bit(order, (buddy % GROUP_NR_PAGES) >> order);
            if !range.contains(buddy) || !group.test(b) {
                break;
            }
            if group.clear(b, order) {
                self.summaries.clear(order, g);
            }
            pfn &= !(1 << order);
            order += 1;
        }
        let i = ((pfn - self.base) % GROUP_NR_PAGES) >> order;
        group.set(Group::bit(order, i));
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
            if let Some(at) = self.groups[g].first_from(order, i) {
                return Some(self.base + g as u64 * GROUP_NR_PAGES + (at << order));
            }
            g += 1;
            i = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use alloc::collections::BTreeSet;
    use proptest::prelude::*;

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
            // The contract's bound, which sizes the heap, holds for one zone.
            prop_assert!(
                bm.bytes() <= memboot_contract::host_memory::free_bitmap_bytes(start + len, 1)
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
