//! Claiming block windows: the per-node cursor and per-chunk counters of
//! the claim protocol (see the parent module's docs).

use core::sync::atomic::Ordering;

use memmap::store::MemmapBacking;
use memmap::ZoneType;

use super::{Claim, DeferredInit};

impl<B: MemmapBacking> DeferredInit<'_, B> {
    /// Claim up to `k` windows of node position `pos`, of any zone, lowest
    /// zone first (workers: they initialise everything).
    #[inline]
    pub(crate) fn claim(&self, pos: usize, k: u32) -> Option<Claim> {
        ZoneType::ALL
            .into_iter()
            .find_map(|zone| self.claim_in_zone(pos, zone, k))
    }

    /// Claim up to `k` windows of zone `zone`'s run of chunks of node
    /// position `pos` (see the module docs).
    #[inline]
    pub(crate) fn claim_in_zone(&self, pos: usize, zone: ZoneType, k: u32) -> Option<Claim> {
        let plan = &self.plan.nodes()[pos];
        let rt = &self.nodes[pos];
        let run_end = plan.zone_chunks(zone).end;
        let cursor = &rt.cursors[zone as usize];
        loop {
            let chunk = cursor.load(Ordering::Acquire);
            if chunk >= run_end {
                return None;
            }
            let nr = plan.chunk_windows(chunk).nr;
            // An exhausted chunk's counter runs past its end by at most one
            // failed claim per claimant before the cursor leaves it (readers
            // clip it to the chunk's windows).
            let w = rt.next[chunk].fetch_add(k, Ordering::AcqRel);
            if w < nr {
                return Some(Claim {
                    chunk,
                    windows: w..(w + k).min(nr),
                    zone,
                });
            }
            // A failed exchange means another claimant moved the cursor on.
            let _ = cursor.compare_exchange(chunk, chunk + 1, Ordering::AcqRel, Ordering::Acquire);
        }
    }
}
