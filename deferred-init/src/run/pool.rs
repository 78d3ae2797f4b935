//! What the claims have left: each node's progress, the pool of untouched
//! memory, and each chunk's claims against its initialisations.

use core::sync::atomic::Ordering;

use memmap::store::MemmapBacking;
use memmap::{NodeId, Pfn, ZoneType};

use super::{ChunkInits, DeferredInit, PoolPiece};
use crate::plan::{Piece, WINDOW_NR_PAGES};

impl<B: MemmapBacking> DeferredInit<'_, B> {
    /// Has every window of `nid` been processed? (True for nodes without
    /// deferred memory.)
    pub fn is_node_done(&self, nid: NodeId) -> bool {
        self.plan.node_pos(nid).is_none_or(|pos| {
            let rt = &self.nodes[pos];
            rt.windows_done_total() == rt.nr_windows_total()
        })
    }

    /// Has every node been processed?
    pub fn is_done(&self) -> bool {
        self.plan.nodes().iter().all(|n| self.is_node_done(n.nid()))
    }

    /// Windows of node position `pos` handed out so far (O(chunks)).
    pub(super) fn claimed_windows(&self, pos: usize) -> u64 {
        let plan = &self.plan.nodes()[pos];
        let rt = &self.nodes[pos];
        (0..plan.nr_chunks())
            .map(|c| {
                rt.next[c]
                    .load(Ordering::Acquire)
                    .min(plan.chunk_windows(c).nr) as u64
            })
            .sum()
    }

    /// Is every claimed window of `nid` processed, i.e. is nobody working
    /// on the node right now? (Verification and the self-test need that.)
    pub fn is_node_quiescent(&self, nid: NodeId) -> bool {
        self.plan
            .node_pos(nid)
            .is_none_or(|pos| self.nodes[pos].windows_done_total() == self.claimed_windows(pos))
    }

    /// The pool: every deferred piece nobody has claimed, ascending per node,
    /// less what was taken out of it (O(chunks); reads no struct page).
    /// Only stable while nothing claims.
    pub fn pool_pieces(&self) -> impl Iterator<Item = PoolPiece> + '_ {
        self.plan
            .nodes()
            .iter()
            .zip(&self.nodes)
            .flat_map(move |(plan, rt)| {
                ZoneType::ALL.into_iter().flat_map(move |zone| {
                    let first = rt.cursors[zone as usize].load(Ordering::Acquire);
                    (first..plan.zone_chunks(zone).end).flat_map(move |c| {
                        let windows = plan.chunk_windows(c);
                        let claimed = rt.next[c].load(Ordering::Acquire).min(windows.nr);
                        let untouched = windows.from(claimed);
                        plan.chunk_pieces(c).iter().flat_map(move |p| {
                            let nid = plan.nid();
                            let parts = p.pfns.intersect(&untouched);
                            let parts = parts.map(|r| self.untaken(nid, r));
                            parts.into_iter().flatten().map(move |pfns| PoolPiece {
                                nid,
                                piece: Piece { pfns, ..*p },
                            })
                        })
                    })
                })
            })
    }

    /// Is `pfn` in a window of `nid`'s deferred memory that someone claimed
    /// (so its struct page was initialised by a worker or a grower)?
    pub fn is_claimed(&self, nid: NodeId, pfn: Pfn) -> bool {
        let Some(pos) = self.plan.node_pos(nid) else {
            return false;
        };
        let plan = &self.plan.nodes()[pos];
        let Some(chunk) = plan.chunk_of(pfn) else {
            return false;
        };
        let windows = plan.chunk_windows(chunk);
        let w = (pfn - windows.base) / WINDOW_NR_PAGES;
        let claimed = self.nodes[pos].next[chunk]
            .load(Ordering::Acquire)
            .min(windows.nr);
        w < claimed as u64
    }

    /// Every chunk's claims against its initialisations (O(chunks); reads
    /// no struct page), for verification: they must be equal.
    pub fn chunk_inits(&self) -> impl Iterator<Item = ChunkInits> + '_ {
        self.plan
            .nodes()
            .iter()
            .zip(&self.nodes)
            .flat_map(|(plan, rt)| {
                (0..plan.nr_chunks()).map(move |c| {
                    let windows = plan.chunk_windows(c);
                    ChunkInits {
                        nid: plan.nid(),
                        windows: windows.from(0),
                        nr_windows: windows.nr,
                        claimed: rt.next[c].load(Ordering::Acquire).min(windows.nr),
                        initialised: rt.initialised[c].load(Ordering::Acquire),
                    }
                })
            })
    }

    /// Present pages still in the pool (uninitialised).
    pub fn pool_pages(&self) -> u64 {
        self.pool_pieces().map(|p| p.piece.pfns.nr_pages()).sum()
    }

    /// Pool pages of (nid, zone) that will be free once initialised.
    pub fn pool_free_pages(&self, nid: NodeId, zone: ZoneType) -> u64 {
        self.pool_pieces()
            .filter(|p| p.nid == nid && p.piece.zone == zone && !p.piece.reserved)
            .map(|p| p.piece.pfns.nr_pages())
            .sum()
    }
}
