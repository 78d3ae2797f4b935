//! Grow on demand: deferred init as the page allocator's [`Grow`] source.

use core::sync::atomic::Ordering;

use memmap::store::MemmapBacking;
use memmap::{NodeId, ZoneType};

use super::{Claim, DeferredInit, GROW_CLAIM_WINDOWS};
use crate::page_alloc::Grow;

impl<B: MemmapBacking> DeferredInit<'_, B> {
    /// One growth step: process `claim` on this CPU and count it.
    fn grow(&self, pos: usize, claim: &Claim) {
        let rt = &self.nodes[pos];
        let (nr_pages, contended) = self.process_claim(pos, claim);
        rt.nr_grown_windows
            .fetch_add(claim.windows.len() as u64, Ordering::Relaxed);
        rt.nr_grown_pages.fetch_add(nr_pages, Ordering::Relaxed);
        if contended {
            rt.nr_contended_growth_steps.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Growth from the pool: a step claims [`GROW_CLAIM_WINDOWS`] block windows
/// of the zone on the node and initialises them on the calling CPU, exactly
/// as a worker would (Linux `deferred_grow_zone`, 4 MiB a step instead of a
/// section).
impl<B: MemmapBacking> Grow for DeferredInit<'_, B> {
    fn zone_done(&self, nid: NodeId, zone: ZoneType) -> bool {
        self.plan
            .node_pos(nid)
            .is_none_or(|pos| self.nodes[pos].zone_done(zone))
    }

    fn grow_step(&self, nid: NodeId, zone: ZoneType) -> bool {
        let Some(pos) = self.plan.node_pos(nid) else {
            return false;
        };
        match self.claim_in_zone(pos, zone, GROW_CLAIM_WINDOWS) {
            Some(claim) => {
                self.grow(pos, &claim);
                true
            }
            None => false,
        }
    }

    fn windows_in_flight(&self, nid: NodeId, zones: &mut dyn Iterator<Item = ZoneType>) -> u64 {
        self.plan.node_pos(nid).map_or(0, |pos| {
            let rt = &self.nodes[pos];
            zones
                .map(|z| {
                    rt.nr_windows[z as usize] - rt.windows_done[z as usize].load(Ordering::Acquire)
                })
                .sum()
        })
    }
}
