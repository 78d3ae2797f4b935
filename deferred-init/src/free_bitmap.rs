//! The buddy allocator's free blocks kept out of the struct pages: per
//! (node, zone), one bitmap per order with a bit per naturally aligned
//! block of that order (set: the block is free and not part of a larger
//! free block), and over each bitmap a summary with a bit per bitmap word
//! (set: the word is not zero).
//!
//! Why bitmaps and not per-block descriptors: a free block needs no data
//! but its order, which the head's 8-byte page holds; what the allocator
//! needs is "is this buddy free?" (one bit) and "any free block of this
//! order?" (the summary, scanned from the lowest word that may be set).
//! Both are O(1) for the lowest-address block, the memory is fixed and
//! small (about two bits per page of the zone's span, 1/64 more for the
//! summaries: RAM/16384 bytes, 0.5 GiB at 8 TiB), and nothing is allocated
//! per free or merge. Lowest address first also keeps allocations
//! together, as a sorted free list would.

use alloc::vec::Vec;

use memmap::{Pfn, PfnRange, MAX_ORDER};

use crate::buddy::NR_ORDERS;

/// One order's bitmap and its summary.
struct OrderBits {
    /// Bit `i`: the block at `base + (i << order)` is a free block head.
    words: Vec<u64>,
    /// Bit `j`: `words[j] != 0`.
    summary: Vec<u64>,
    /// No summary word below this one is non-zero.
    first_summary: usize,
}

impl OrderBits {
    fn new(nr_bits: u64) -> Result<Self, usize> {
        let nr_words = nr_bits.div_ceil(64) as usize;
        let nr_summary = nr_words.div_ceil(64);
        Ok(Self {
            words: zeroed(nr_words)?,
            summary: zeroed(nr_summary)?,
            first_summary: nr_summary,
        })
    }

    #[inline]
    fn set(&mut self, i: usize) {
        let w = i / 64;
        self.words[w] |= 1 << (i % 64);
        self.summary[w / 64] |= 1 << (w % 64);
        self.first_summary = self.first_summary.min(w / 64);
    }

    #[inline]
    fn clear(&mut self, i: usize) {
        let w = i / 64;
        self.words[w] &= !(1 << (i % 64));
        if self.words[w] == 0 {
            self.summary[w / 64] &= !(1 << (w % 64));
        }
    }

    #[inline]
    fn test(&self, i: usize) -> bool {
        self.words
            .get(i / 64)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    /// The lowest set bit, moving `first_summary` past the zero words.
    #[inline]
    fn first(&mut self) -> Option<usize> {
        while let Some(&s) = self.summary.get(self.first_summary) {
            if s != 0 {
                let w = self.first_summary * 64 + s.trailing_zeros() as usize;
                return Some(w * 64 + self.words[w].trailing_zeros() as usize);
            }
            self.first_summary += 1;
        }
        None
    }

    /// The lowest set bit at or above `from`.
    fn next_from(&self, from: usize) -> Option<usize> {
        let mut w = from / 64;
        let mut word = *self.words.get(w)? & (u64::MAX << (from % 64));
        loop {
            if word != 0 {
                return Some(w * 64 + word.trailing_zeros() as usize);
            }
            w += 1;
            // Skip whole zero summary words.
            while w.is_multiple_of(64) && self.summary.get(w / 64) == Some(&0) {
                w += 64;
            }
            word = *self.words.get(w)?;
        }
    }

    fn bytes(&self) -> u64 {
        ((self.words.len() + self.summary.len()) * 8) as u64
    }
}

/// A zero-filled vector, or the bytes it needed when the heap cannot hold it.
fn zeroed(len: usize) -> Result<Vec<u64>, usize> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| len * 8)?;
    v.resize(len, 0);
    Ok(v)
}

/// The free blocks of one (node, zone), every order.
pub(crate) struct FreeBitmaps {
    /// First PFN of the span, aligned down to a `MAX_ORDER` block.
    base: Pfn,
    orders: [OrderBits; NR_ORDERS],
}

impl FreeBitmaps {
    /// Bitmaps for the blocks of `span`; `Err(bytes)` when the heap cannot
    /// hold them.
    pub(crate) fn new(span: PfnRange) -> Result<Self, usize> {
        let base = span.start & !((1 << MAX_ORDER) - 1);
        let nr_pages = span.end - base;
        let mut orders = Vec::with_capacity(NR_ORDERS);
        for order in 0..NR_ORDERS {
            orders.push(OrderBits::new(nr_pages.div_ceil(1 << order))?);
        }
        let orders = orders
            .try_into()
            .unwrap_or_else(|_| unreachable!("NR_ORDERS bitmaps"));
        Ok(Self { base, orders })
    }

    /// Bytes the bitmaps of `span` take: what [`new`](Self::new) allocates.
    #[cfg(test)]
    pub(crate) fn bytes_for(span: PfnRange) -> u64 {
        let nr_pages = span.end - (span.start & !((1 << MAX_ORDER) - 1));
        (0..NR_ORDERS as u32)
            .map(|order| {
                let words = nr_pages.div_ceil(1 << order).div_ceil(64);
                (words + words.div_ceil(64)) * 8
            })
            .sum()
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.orders.iter().map(OrderBits::bytes).sum()
    }

    #[inline]
    fn bit(&self, pfn: Pfn, order: u32) -> usize {
        ((pfn - self.base) >> order) as usize
    }

    #[inline]
    fn pfn(&self, bit: usize, order: u32) -> Pfn {
        self.base + ((bit as u64) << order)
    }

    #[inline]
    pub(crate) fn insert(&mut self, pfn: Pfn, order: u32) {
        let i = self.bit(pfn, order);
        self.orders[order as usize].set(i);
    }

    #[inline]
    pub(crate) fn remove(&mut self, pfn: Pfn, order: u32) {
        let i = self.bit(pfn, order);
        self.orders[order as usize].clear(i);
    }

    /// Is `pfn` the head of a free block of `order`? (`false` outside the span.)
    #[inline]
    pub(crate) fn contains(&self, pfn: Pfn, order: u32) -> bool {
        pfn >= self.base && self.orders[order as usize].test(self.bit(pfn, order))
    }

    /// The lowest free block of `order`.
    #[inline]
    pub(crate) fn first(&mut self, order: u32) -> Option<Pfn> {
        let i = self.orders[order as usize].first()?;
        Some(self.pfn(i, order))
    }

    /// The lowest free block of `order` at or above `from`.
    pub(crate) fn next_from(&self, from: Pfn, order: u32) -> Option<Pfn> {
        let start = if from <= self.base {
            0
        } else {
            (from - self.base).div_ceil(1 << order) as usize
        };
        let i = self.orders[order as usize].next_from(start)?;
        Some(self.pfn(i, order))
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
