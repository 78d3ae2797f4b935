//! Region iterators and PFN validity over memblock.
//!
//! * [`Memblock::mem_pfn_ranges`]: Linux `for_each_mem_pfn_range()`, each
//!   memory region as a PFN range with its node.
//! * [`Memblock::free_ranges`]: Linux `for_each_free_mem_pfn_range_in_zone()`
//!   / `__next_mem_range()`, memory minus reserved, by a two-pointer walk
//!   over the two sorted tables (no allocation).
//! * [`Memblock::reserved_mem_ranges`]: memory ∩ reserved within a window, the
//!   pages `memmap_init_reserved_pages()` → `reserve_bootmem_region()` marks.
//! * [`Memblock::pfn_valid`]: binary search, as arm64's memblock-based
//!   `pfn_valid()` (`memblock_is_map_memory()`).
//! * [`ValidPfnCursor::next_valid_pfn`]: the arm64 series' proposed
//!   `memblock_next_valid_pfn()` (mm/memblock.c), which caches the index of
//!   the last region hit so sequential walks avoid the binary search. Two
//!   bugs sank earlier versions and are tested here: reading
//!   `regions[cnt]` once the cache reached the last region (Hanjun Guo's
//!   out-of-bounds report), and skipping valid PFNs, the reason
//!   b92df1de5d28 ("mm: page_alloc: skip over regions of invalid pfns where
//!   possible") was reverted. This cursor only trusts the cached region when
//!   the previous region ends at or before the queried PFN, so the answer is
//!   always the first region ending after it, exactly what binary search gives.

use crate::memblock::{Memblock, MemblockRegion};
use crate::{NodeId, Pfn, PfnRange};

/// Iterator over memory regions as `(pfns, nid)`, optionally of one node.
#[derive(Clone)]
pub struct MemPfnRanges<'a> {
    regions: core::slice::Iter<'a, MemblockRegion>,
    nid: Option<NodeId>,
}

impl Iterator for MemPfnRanges<'_> {
    type Item = (PfnRange, NodeId);
    fn next(&mut self) -> Option<Self::Item> {
        let nid = self.nid;
        self.regions
            .by_ref()
            .find(|r| nid.is_none_or(|n| n == r.nid))
            .map(|r| (r.pfns(), r.nid))
    }
}

/// Iterator over free (memory and not reserved) PFN ranges as `(pfns, nid)`.
#[derive(Clone)]
pub struct FreeRanges<'a> {
    memory: &'a [MemblockRegion],
    reserved: &'a [MemblockRegion],
    mem_idx: usize,
    rsv_idx: usize,
    cursor_pfn: Pfn,
    nid: Option<NodeId>,
}

impl Iterator for FreeRanges<'_> {
    type Item = (PfnRange, NodeId);
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let region = self.memory.get(self.mem_idx)?;
            if self.nid.is_some_and(|n| n != region.nid) {
                self.mem_idx += 1;
                continue;
            }
            let mem = region.pfns();
            let start = self.cursor_pfn.max(mem.start);
            if start >= mem.end {
                self.mem_idx += 1;
                continue;
            }
            while self
                .reserved
                .get(self.rsv_idx)
                .is_some_and(|r| r.pfns().end <= start)
            {
                self.rsv_idx += 1;
            }
            let out = match self.reserved.get(self.rsv_idx).map(|r| r.pfns()) {
                Some(rsv) if rsv.start <= start => {
                    self.cursor_pfn = rsv.end;
                    continue;
                }
                Some(rsv) if rsv.start < mem.end => {
                    self.cursor_pfn = rsv.end;
                    PfnRange::new(start, rsv.start)
                }
                _ => {
                    self.cursor_pfn = mem.end;
                    PfnRange::new(start, mem.end)
                }
            };
            return Some((out, region.nid));
        }
    }
}

/// Intersection of two ascending, disjoint range sequences.
pub fn intersect_sorted(
    a: impl IntoIterator<Item = PfnRange>,
    b: impl IntoIterator<Item = PfnRange>,
) -> impl Iterator<Item = PfnRange> {
    let mut a = a.into_iter().peekable();
    let mut b = b.into_iter().peekable();
    core::iter::from_fn(move || loop {
        let (x, y) = (*a.peek()?, *b.peek()?);
        let hit = x.intersect(&y);
        if x.end <= y.end {
            a.next();
        } else {
            b.next();
        }
        if hit.is_some() {
            return hit;
        }
    })
}

impl Memblock {
    /// `for_each_mem_pfn_range(i, nid, ...)`: memory regions ascending, of
    /// node `nid` or of all nodes.
    pub fn mem_pfn_ranges(&self, nid: Option<NodeId>) -> MemPfnRanges<'_> {
        MemPfnRanges {
            regions: self.memory().regions().iter(),
            nid,
        }
    }

    /// Free ranges: memory minus reserved, ascending, of one node or all.
    pub fn free_ranges(&self, nid: Option<NodeId>) -> FreeRanges<'_> {
        FreeRanges {
            memory: self.memory().regions(),
            reserved: self.reserved().regions(),
            mem_idx: 0,
            rsv_idx: 0,
            cursor_pfn: 0,
            nid,
        }
    }

    /// Reserved regions as PFN ranges, ascending.
    pub fn reserved_pfn_ranges(&self) -> impl Iterator<Item = PfnRange> + '_ {
        self.reserved().regions().iter().map(|r| r.pfns())
    }

    /// Reserved pages that are memory, within `window`, ascending: the pages
    /// that get `PG_reserved` (`reserve_bootmem_region()`).
    pub fn reserved_mem_ranges(&self, window: PfnRange) -> impl Iterator<Item = PfnRange> + '_ {
        let rsv = self.reserved().regions();
        let first = rsv.partition_point(|r| r.pfns().end <= window.start);
        let reserved = rsv[first..]
            .iter()
            .map(|r| r.pfns())
            .take_while(move |r| r.start < window.end)
            .filter_map(move |r| r.intersect(&window));
        let mem = self.memory().regions();
        let first = mem.partition_point(|r| r.pfns().end <= window.start);
        let memory = mem[first..]
            .iter()
            .map(|r| r.pfns())
            .take_while(move |r| r.start < window.end);
        intersect_sorted(reserved, memory)
    }

    /// The memory region holding `pfn`, by binary search.
    pub(crate) fn memory_region_of(&self, pfn: Pfn) -> Option<&MemblockRegion> {
        let regions = self.memory().regions();
        let i = regions.partition_point(|r| r.pfns().end <= pfn);
        regions.get(i).filter(|r| r.pfns().start <= pfn)
    }

    /// Is `pfn` memory? (binary search over the memory table)
    pub fn pfn_valid(&self, pfn: Pfn) -> bool {
        self.memory_region_of(pfn).is_some()
    }

    /// `early_pfn_to_nid()`: the node of `pfn`, if it is memory.
    pub fn pfn_to_nid(&self, pfn: Pfn) -> Option<NodeId> {
        self.memory_region_of(pfn).map(|r| r.nid)
    }

    /// Smallest valid PFN `>= pfn`, by plain binary search.
    pub fn next_valid_pfn(&self, pfn: Pfn) -> Option<Pfn> {
        let regions = self.memory().regions();
        let i = regions.partition_point(|r| r.pfns().end <= pfn);
        regions.get(i).map(|r| r.pfns().start.max(pfn))
    }

    /// A cursor answering [`next_valid_pfn`](ValidPfnCursor::next_valid_pfn)
    /// with a cached region index.
    pub fn valid_pfn_cursor(&self) -> ValidPfnCursor<'_> {
        ValidPfnCursor {
            regions: self.memory().regions(),
            cached_idx: 0,
        }
    }
}

/// `next_valid_pfn` with a cached region index (no globals: the cache lives
/// in the cursor, which borrows the table so it can never go stale).
#[derive(Clone)]
pub struct ValidPfnCursor<'a> {
    regions: &'a [MemblockRegion],
    cached_idx: usize,
}

impl ValidPfnCursor<'_> {
    /// Smallest valid PFN `>= pfn`, or `None` past the last region.
    pub fn next_valid_pfn(&mut self, pfn: Pfn) -> Option<Pfn> {
        // Sequential walks hit the cached region or the one after it.
        for probe in [self.cached_idx, self.cached_idx + 1] {
            // `get` rather than indexing: the cache may point at the last
            // region, and `probe + 1` then is one past the end.
            let Some(region) = self.regions.get(probe) else {
                break;
            };
            let pfns = region.pfns();
            if pfn >= pfns.end {
                continue;
            }
            let prev_end = probe
                .checked_sub(1)
                .map_or(0, |p| self.regions[p].pfns().end);
            if pfn < prev_end {
                // An earlier region may hold `pfn`: do not skip it.
                break;
            }
            self.cached_idx = probe;
            return Some(pfns.start.max(pfn));
        }
        let i = self.regions.partition_point(|r| r.pfns().end <= pfn);
        let region = self.regions.get(i)?;
        self.cached_idx = i;
        Some(region.pfns().start.max(pfn))
    }

    /// The cached index (for tests: it never exceeds the last region).
    pub fn cached_idx(&self) -> usize {
        self.cached_idx
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memblock::MemblockConfig;

    fn mb_with(ranges: &[(u64, u64, NodeId)]) -> Memblock {
        let mut mb = Memblock::new(MemblockConfig::default()).unwrap();
        for &(s, e, nid) in ranges {
            mb.add(s << 12, (e - s) << 12, nid).unwrap();
        }
        mb
    }

    #[test]
    fn mem_and_free_ranges() {
        let mut mb = mb_with(&[(1, 10, 0), (20, 30, 1), (30, 40, 1)]);
        mb.reserve(0, 2 << 12).unwrap();
        mb.reserve(5 << 12, 1 << 12).unwrap();
        mb.reserve(9 << 12, 12 << 12).unwrap();
        mb.reserve(39 << 12, 1 << 12).unwrap();
        let mem: Vec<_> = mb.mem_pfn_ranges(None).collect();
        assert_eq!(mem, [(PfnRange::new(1, 10), 0), (PfnRange::new(20, 40), 1)]);
        let free: Vec<_> = mb
            .free_ranges(None)
            .map(|(r, _)| (r.start, r.end))
            .collect();
        assert_eq!(free, [(2, 5), (6, 9), (21, 39)]);
        let free1: Vec<_> = mb.free_ranges(Some(1)).collect();
        assert_eq!(free1, [(PfnRange::new(21, 39), 1)]);
        let rsv: Vec<_> = mb
            .reserved_mem_ranges(PfnRange::new(0, 100))
            .map(|r| (r.start, r.end))
            .collect();
        assert_eq!(rsv, [(1, 2), (5, 6), (9, 10), (20, 21), (39, 40)]);
        let rsv: Vec<_> = mb
            .reserved_mem_ranges(PfnRange::new(5, 21))
            .map(|r| (r.start, r.end))
            .collect();
        assert_eq!(rsv, [(5, 6), (9, 10), (20, 21)]);
    }

    #[test]
    fn pfn_valid_and_next_valid() {
        let mb = mb_with(&[(1, 10, 0), (20, 30, 1)]);
        assert!(!mb.pfn_valid(0));
        assert!(mb.pfn_valid(1) && mb.pfn_valid(9) && !mb.pfn_valid(10));
        assert_eq!(mb.pfn_to_nid(25), Some(1));
        assert_eq!(mb.next_valid_pfn(0), Some(1));
        assert_eq!(mb.next_valid_pfn(10), Some(20));
        assert_eq!(mb.next_valid_pfn(29), Some(29));
        assert_eq!(mb.next_valid_pfn(30), None);
    }

    #[test]
    fn cursor_never_reads_past_last_region() {
        // Hanjun Guo's report: with the cache at the last region, the next
        // query past it read regions[cnt].
        let mb = mb_with(&[(1, 10, 0), (20, 30, 0)]);
        let mut c = mb.valid_pfn_cursor();
        assert_eq!(c.next_valid_pfn(25), Some(25));
        assert_eq!(c.cached_idx(), 1);
        assert_eq!(c.next_valid_pfn(30), None);
        assert_eq!(c.next_valid_pfn(u64::MAX), None);
        assert!(c.cached_idx() < mb.memory().len());
    }

    #[test]
    fn cursor_never_skips_a_valid_pfn_after_a_backwards_query() {
        // b92df1de5d28's failure mode: a stale "current region" made the walk
        // jump past valid PFNs. Query high, then low.
        let mb = mb_with(&[(1, 10, 0), (20, 30, 0), (40, 50, 0)]);
        let mut c = mb.valid_pfn_cursor();
        assert_eq!(c.next_valid_pfn(45), Some(45));
        assert_eq!(c.next_valid_pfn(12), Some(20));
        assert_eq!(c.next_valid_pfn(0), Some(1));
        assert_eq!(c.next_valid_pfn(10), Some(20));
        assert_eq!(c.next_valid_pfn(31), Some(40));
    }
}
