//! Pageblock migratetype bits: 4 bits per 512-page pageblock in a per-zone
//! bitmap (Linux `NR_PAGEBLOCK_BITS`, `zone->pageblock_flags`,
//! `get_pfnblock_flags_mask()` / `set_pfnblock_flags_mask()` in
//! mm/page_alloc.c). Bits 0..=2 hold the migratetype, bit 3 is
//! `PB_migrate_skip`. Memmap init marks every pageblock it reaches
//! `MIGRATE_MOVABLE` (`memmap_init_range()` calls
//! `set_pageblock_migratetype(page, MIGRATE_MOVABLE)` on each
//! pageblock-aligned PFN), and so do the deferred workers, in parallel:
//! words are atomics updated by compare-exchange, as Linux's `try_cmpxchg`
//! loop does, so a shared reference is enough to write.

use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use crate::zones::ZoneLayout;
use crate::{NodeId, Pfn, PfnRange, ZoneType, PAGEBLOCK_NR_PAGES, PAGEBLOCK_ORDER};

/// Bits per pageblock.
pub(crate) const NR_PAGEBLOCK_BITS: u32 = 4;
/// Mask of the migratetype bits (`MIGRATETYPE_MASK`).
pub(crate) const MIGRATETYPE_MASK: u64 = 0b111;
/// `PB_migrate_skip` (compaction hint).
#[allow(dead_code)] // documents bit 3: memboot never sets it
pub(crate) const PB_MIGRATE_SKIP: u64 = 0b1000;

const PAGEBLOCKS_PER_WORD: u64 = 64 / NR_PAGEBLOCK_BITS as u64;

/// Linux 6.1 `enum migratetype` (without CMA, with memory isolation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
#[allow(dead_code)] // Linux's numbering in full: boot writes only `Movable`
pub(crate) enum MigrateType {
    Unmovable = 0,
    Movable = 1,
    Reclaimable = 2,
    HighAtomic = 3,
    Isolate = 4,
}

impl MigrateType {
    #[cfg(test)]
    pub(crate) const fn from_bits(bits: u64) -> Option<Self> {
        match bits {
            0 => Some(MigrateType::Unmovable),
            1 => Some(MigrateType::Movable),
            2 => Some(MigrateType::Reclaimable),
            3 => Some(MigrateType::HighAtomic),
            4 => Some(MigrateType::Isolate),
            _ => None,
        }
    }
}

/// One zone's pageblock bitmap.
#[derive(Debug)]
pub struct PageblockFlags {
    /// Zone start rounded down to a pageblock (`pfn_to_bitidx()`).
    base_pfn: Pfn,
    nr_pageblocks: u64,
    words: Vec<AtomicU64>,
}

impl PageblockFlags {
    /// A zeroed (all `MIGRATE_UNMOVABLE`) bitmap covering `span`
    /// (`usemap_size()`).
    pub(crate) fn new(span: PfnRange) -> Self {
        let base_pfn = span.start & !(PAGEBLOCK_NR_PAGES - 1);
        let nr_pageblocks = span
            .end
            .saturating_sub(base_pfn)
            .div_ceil(PAGEBLOCK_NR_PAGES);
        let nr_words = nr_pageblocks.div_ceil(PAGEBLOCKS_PER_WORD) as usize;
        let words = (0..nr_words).map(|_| AtomicU64::new(0)).collect();
        Self {
            base_pfn,
            nr_pageblocks,
            words,
        }
    }

    pub fn nr_pageblocks(&self) -> u64 {
        self.nr_pageblocks
    }

    fn locate(&self, pfn: Pfn) -> Option<(usize, u32)> {
        let idx = pfn.checked_sub(self.base_pfn)? >> PAGEBLOCK_ORDER;
        (idx < self.nr_pageblocks).then(|| {
            (
                (idx / PAGEBLOCKS_PER_WORD) as usize,
                ((idx % PAGEBLOCKS_PER_WORD) as u32) * NR_PAGEBLOCK_BITS,
            )
        })
    }

    /// The 4 flag bits of `pfn`'s pageblock, `None` outside the zone.
    pub fn get_bits(&self, pfn: Pfn) -> Option<u64> {
        let (word, shift) = self.locate(pfn)?;
        Some((self.words[word].load(Ordering::Relaxed) >> shift) & 0xf)
    }

    /// `get_pageblock_migratetype()`.
    #[cfg(test)]
    pub(crate) fn get_migratetype(&self, pfn: Pfn) -> Option<MigrateType> {
        MigrateType::from_bits(self.get_bits(pfn)? & MIGRATETYPE_MASK)
    }

    /// `set_pageblock_migratetype()`; returns false (and writes nothing) when
    /// `pfn` is outside the zone.
    pub(crate) fn set_migratetype(&self, pfn: Pfn, mt: MigrateType) -> bool {
        let Some((word, shift)) = self.locate(pfn) else {
            return false;
        };
        let mask = MIGRATETYPE_MASK << shift;
        let value = (mt as u64) << shift;
        // The closure always returns Some, so fetch_update cannot fail.
        let _ = self.words[word].fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| {
            Some((w & !mask) | value)
        });
        true
    }

    /// Mark every pageblock whose first PFN lies in `range` movable, as
    /// memmap init does for the pages it initialises. Returns how many.
    pub(crate) fn mark_movable(&self, range: PfnRange) -> u64 {
        let mut pfn = range.start.next_multiple_of(PAGEBLOCK_NR_PAGES);
        let mut n = 0;
        while pfn < range.end {
            n += self.set_migratetype(pfn, MigrateType::Movable) as u64;
            pfn += PAGEBLOCK_NR_PAGES;
        }
        n
    }
}

/// Pageblock bitmaps for every zone of a [`ZoneLayout`].
#[derive(Debug)]
pub struct PageblockMaps {
    maps: Vec<(NodeId, ZoneType, PageblockFlags)>,
}

impl PageblockMaps {
    pub fn new(layout: &ZoneLayout) -> Self {
        Self {
            maps: layout
                .zones()
                .iter()
                .map(|z| (z.nid, z.zone, PageblockFlags::new(z.span)))
                .collect(),
        }
    }
    /// No bitmaps: for a strategy that initialises no memory page at boot
    /// ([`Strategy::OnDemand`](crate::init::Strategy::OnDemand)), which
    /// would otherwise allocate and zero 4 bits per pageblock of RAM (15
    /// MiB at 59T) for nothing.
    pub fn none() -> Self {
        Self { maps: Vec::new() }
    }
    pub fn get(&self, nid: NodeId, zone: ZoneType) -> Option<&PageblockFlags> {
        self.maps
            .iter()
            .find(|(n, z, _)| *n == nid && *z == zone)
            .map(|(_, _, m)| m)
    }
    #[cfg(test)]
    pub(crate) fn iter(&self) -> impl Iterator<Item = (NodeId, ZoneType, &PageblockFlags)> {
        self.maps.iter().map(|(n, z, m)| (*n, *z, m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_bits_per_pageblock() {
        let pb = PageblockFlags::new(PfnRange::new(100, 100 + 40 * 512));
        assert_eq!(pb.nr_pageblocks(), 41, "start rounds down to a pageblock");
        assert_eq!(pb.get_migratetype(100), Some(MigrateType::Unmovable));
        assert!(pb.set_migratetype(512 * 17 + 3, MigrateType::Movable));
        assert_eq!(pb.get_migratetype(512 * 17), Some(MigrateType::Movable));
        assert_eq!(pb.get_migratetype(512 * 16), Some(MigrateType::Unmovable));
        assert_eq!(pb.get_migratetype(512 * 18), Some(MigrateType::Unmovable));
        assert!(pb.set_migratetype(512 * 17, MigrateType::Isolate));
        assert_eq!(pb.get_bits(512 * 17), Some(4));
        assert!(!pb.set_migratetype(512 * 41, MigrateType::Movable));
        assert_eq!(pb.mark_movable(PfnRange::new(1, 512 * 3 + 1)), 3);
        assert_eq!(
            pb.get_migratetype(0),
            Some(MigrateType::Unmovable),
            "pageblock 0's first pfn is not in range"
        );
        assert_eq!(pb.get_migratetype(512), Some(MigrateType::Movable));
    }
}
