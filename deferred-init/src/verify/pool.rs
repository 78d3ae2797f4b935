//! The untouched pool (`ondemand`) as verification accounts for it: from the
//! claim counters alone, without reading a struct page.

use alloc::vec::Vec;

use memmap::store::MemmapBacking;
use memmap::zones::ZoneLayout;
use memmap::{NodeId, Pfn, PfnRange, ZoneType};

use crate::buddy::slot;
use crate::run::DeferredInit;

use super::list_report::BuddyMismatch;
use super::pages::ScanRange;

/// The untouched pool as verification sees it, built in O(chunks) from the
/// claim counters without reading a struct page: which PFNs must not be
/// scanned, how many pages of each zone are in it, and whether the claims
/// add up. `PoolCheck::default()` is no pool: every present page must be
/// initialised.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct PoolCheck {
    /// Pool PFN ranges, ascending, merged.
    ranges: Vec<PfnRange>,
    /// Per (node, zone) slot: (memory pages, memblock-reserved among them).
    zones: Vec<(u64, u64)>,
    /// Claims that do not add up (see [`BuddyMismatch::ClaimedPages`]).
    pub(super) problems: Vec<BuddyMismatch>,
}

impl PoolCheck {
    /// The pool of `di`, and its claims accounting. Nothing may claim
    /// meanwhile.
    pub fn new<B: MemmapBacking>(di: &DeferredInit<'_, B>) -> Self {
        let mut pool = Self::default();
        let mut node_pool_pages: Vec<(NodeId, u64)> = Vec::new();
        for p in di.pool_pieces() {
            let s = slot(p.nid, p.piece.zone);
            if pool.zones.len() <= s {
                pool.zones.resize(s + 1, (0, 0));
            }
            let n = p.piece.pfns.nr_pages();
            pool.zones[s].0 += n;
            if p.piece.reserved {
                pool.zones[s].1 += n;
            }
            match node_pool_pages.last_mut() {
                Some((nid, pages)) if *nid == p.nid => *pages += n,
                _ => node_pool_pages.push((p.nid, n)),
            }
            match pool.ranges.last_mut() {
                Some(last) if last.end == p.piece.pfns.start => last.end = p.piece.pfns.end,
                _ => pool.ranges.push(p.piece.pfns),
            }
        }
        pool.ranges.sort_unstable();
        for c in di.chunk_inits().filter(|c| c.claimed != c.initialised) {
            pool.problems.push(BuddyMismatch::WindowInits {
                nid: c.nid,
                windows: c.windows,
                claimed: c.claimed,
                initialised: c.initialised,
            });
        }
        for n in di.report().nodes {
            if !di.is_node_quiescent(n.nid) {
                pool.problems.push(BuddyMismatch::InFlight { nid: n.nid });
            }
            let in_pool = node_pool_pages
                .iter()
                .find(|(nid, _)| *nid == n.nid)
                .map_or(0, |(_, p)| *p);
            // Out of the pool: claimed windows, and pages taken out alone.
            let claimed = n.nr_pages - in_pool;
            let initialised = n.nr_worker_pages + n.nr_grown_pages + n.nr_taken_pages;
            if claimed != initialised {
                pool.problems.push(BuddyMismatch::ClaimedPages {
                    nid: n.nid,
                    claimed,
                    initialised,
                });
            }
        }
        pool
    }

    /// Pages in the pool.
    pub fn pages(&self) -> u64 {
        self.ranges.iter().map(|r| r.nr_pages()).sum()
    }

    /// (memory pages, reserved among them) of (nid, zone) in the pool.
    pub fn zone_pages(&self, nid: NodeId, zone: ZoneType) -> (u64, u64) {
        self.zones.get(slot(nid, zone)).copied().unwrap_or((0, 0))
    }

    /// Is `pfn` in the pool?
    pub fn contains(&self, pfn: Pfn) -> bool {
        let i = self.ranges.partition_point(|r| r.end <= pfn);
        self.ranges.get(i).is_some_and(|r| r.contains(pfn))
    }

    /// Everything the page scan must cover: the present sections minus the
    /// pool, cut at section boundaries (for parallel claiming).
    pub fn scan_ranges(&self, layout: &ZoneLayout) -> Vec<ScanRange> {
        let mut out = Vec::new();
        let mut pool = self.ranges.iter().peekable();
        for present in layout.present_section_ranges() {
            let mut at = present.start;
            let mut after_pool = false;
            while at < present.end {
                while pool.next_if(|r| r.end <= at).is_some() {}
                // The next pool range ahead (or this present range's end).
                let end = match pool.peek() {
                    Some(r) if r.start <= at => {
                        // In the pool: skip it.
                        after_pool = true;
                        at = r.end.min(present.end);
                        continue;
                    }
                    Some(r) => r.start.min(present.end),
                    None => present.end,
                };
                for (i, pfns) in PfnRange::new(at, end).section_pieces().enumerate() {
                    out.push(ScanRange {
                        pfns,
                        after_pool: after_pool && i == 0,
                    });
                }
                at = end;
                after_pool = false;
            }
        }
        out
    }
}
