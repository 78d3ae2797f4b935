//! The alloc/free self-test: a few blocks allocated and freed on one node,
//! each checked on the way out and back.

use alloc::vec::Vec;
use core::fmt;

use memmap::page::PageLayout;
use memmap::store::{Memmap, MemmapBacking};
use memmap::{NodeId, Pfn, ZoneType, MAX_ORDER};

use crate::buddy::{AllocError, BuddyAllocator, FreeError};
use crate::run::DeferredInit;
use memmap::NR_ORDERS;

use memmap::page::PageWords;

/// Orders [`alloc_free_selftest`] allocates, in this order.
pub const SELFTEST_ORDERS: [u32; 3] = [0, 3, MAX_ORDER];

/// What the self-test did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelftestReport {
    pub nid: NodeId,
    pub zone: ZoneType,
    /// `(head pfn, order)` of the blocks allocated (and freed again).
    pub blocks: Vec<(Pfn, u32)>,
    /// Orders of [`SELFTEST_ORDERS`] not tried because the zone had no
    /// free block that large (a small node: 8 MiB has no 4 MiB block).
    pub skipped: Vec<u32>,
    pub free_pages: u64,
}

impl fmt::Display for SelftestReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "verify: node {} zone {}: allocated and freed orders",
            self.nid,
            self.zone.name()
        )?;
        for (pfn, order) in &self.blocks {
            write!(f, " {order}@{pfn:#x}")?;
        }
        if !self.skipped.is_empty() {
            write!(
                f,
                " (orders {:?} skipped: no free block that large)",
                self.skipped
            )?;
        }
        write!(f, "; {} free pages before and after", self.free_pages)
    }
}

/// Why the self-test failed (blocks it had allocated are freed first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SelftestError {
    /// Claimed windows of the node are still being initialised.
    InFlight {
        nid: NodeId,
    },
    /// The node has no free page in any zone.
    NoFreeMemory {
        nid: NodeId,
    },
    Alloc {
        order: u32,
        err: AllocError,
    },
    /// The head is not aligned to the order.
    Misaligned {
        pfn: Pfn,
        order: u32,
    },
    /// Two allocated blocks overlap.
    Overlap {
        pfn: Pfn,
        order: u32,
        other: Pfn,
    },
    /// A page of an allocated block is wrong.
    BadPage {
        pfn: Pfn,
        what: &'static str,
        found: PageWords,
    },
    /// `nr_free_pages` did not move as it should.
    FreeCount {
        stage: &'static str,
        expected: u64,
        found: u64,
    },
    /// Per-order block counts differ after freeing everything back.
    BlockCounts {
        order: u32,
        before: u64,
        after: u64,
    },
    Free {
        err: FreeError,
    },
}

impl fmt::Display for SelftestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SelftestError::InFlight { nid } => write!(
                f,
                "verify: selftest: windows of node {nid} are still being initialised; run it after all workers and allocations returned"
            ),
            SelftestError::NoFreeMemory { nid } => {
                write!(f, "verify: selftest: node {nid} has no free pages")
            }
            SelftestError::Alloc { order, err } => {
                write!(f, "verify: selftest: order-{order} allocation failed: {err}")
            }
            SelftestError::Misaligned { pfn, order } => write!(
                f,
                "verify: selftest: order-{order} block {pfn:#x} is not aligned to its order"
            ),
            SelftestError::Overlap { pfn, order, other } => write!(
                f,
                "verify: selftest: order-{order} block {pfn:#x} overlaps block {other:#x} allocated before"
            ),
            SelftestError::BadPage { pfn, what, found } => write!(
                f,
                "verify: selftest: pfn {pfn:#x}: expected {what}, found {found}"
            ),
            SelftestError::FreeCount {
                stage,
                expected,
                found,
            } => write!(
                f,
                "verify: selftest: {stage}: expected {expected} free pages, found {found}"
            ),
            SelftestError::BlockCounts {
                order,
                before,
                after,
            } => write!(
                f,
                "verify: selftest: {before} free order-{order} blocks before, {after} after freeing everything"
            ),
            SelftestError::Free { err } => write!(f, "verify: selftest: free failed: {err}"),
        }
    }
}

/// Check one allocated block: aligned, disjoint from the others, its pages
/// are this node's and zone's, not PageBuddy, head refcount 1, tails 0.
fn check_allocated<B: MemmapBacking>(
    memmap: &Memmap<B>,
    nid: NodeId,
    zone: ZoneType,
    pfn: Pfn,
    order: u32,
    earlier: &[(Pfn, u32)],
) -> Result<(), SelftestError> {
    let n = 1u64 << order;
    if pfn & (n - 1) != 0 {
        return Err(SelftestError::Misaligned { pfn, order });
    }
    if let Some(&(other, _)) = earlier
        .iter()
        .find(|&&(q, o)| q < pfn + n && pfn < q + (1 << o))
    {
        return Err(SelftestError::Overlap { pfn, order, other });
    }
    for q in pfn..pfn + n {
        let Some(p) = memmap.page(q) else {
            return Err(SelftestError::BadPage {
                pfn: q,
                what: "struct-page backing",
                found: PageWords::default(),
            });
        };
        let (what, ok) = if !p.links_match(q, zone, nid) {
            ("a page of the requested node and zone", false)
        } else if p.is_buddy() {
            ("an allocated page (not PageBuddy)", false)
        } else if p.is_reserved() {
            ("an allocated page (not PG_reserved)", false)
        } else if q == pfn {
            ("head refcount 1", p.refcount() == 1)
        } else {
            ("tail refcount 0", p.refcount() == 0)
        };
        if !ok {
            return Err(SelftestError::BadPage {
                pfn: q,
                what,
                found: p.words(),
            });
        }
    }
    Ok(())
}

/// After the self-test freed its blocks: the zone's free pages and its
/// free blocks of every order are what they were before it.
fn check_restored<B: MemmapBacking>(
    buddy: &BuddyAllocator<'_, B>,
    nid: NodeId,
    zone: ZoneType,
    free_before: u64,
    blocks_before: &[u64; NR_ORDERS],
) -> Result<(), SelftestError> {
    let found = buddy.nr_free_pages(nid, zone);
    if found != free_before {
        return Err(SelftestError::FreeCount {
            stage: "after freeing",
            expected: free_before,
            found,
        });
    }
    for (o, &before) in blocks_before.iter().enumerate() {
        let after = buddy.nr_free_blocks(nid, zone, o as u32);
        if after != before {
            return Err(SelftestError::BlockCounts {
                order: o as u32,
                before,
                after,
            });
        }
    }
    Ok(())
}

/// When nothing is in flight on `nid`, on the node's highest zone with free
/// pages, allocate blocks of orders [`SELFTEST_ORDERS`] from the free lists
/// (no growth from the pool, so the counts below are exact), check them
/// (distinct, aligned, pages of this node and zone, not PageBuddy, head
/// refcount 1), free them, and check that the free-page count and the
/// per-order block counts are back where they were. `buddy` holds the free
/// lists `di` frees into, over `memmap`; `di` says whether the node is
/// quiescent. Nothing else may allocate from the zone meanwhile.
pub fn alloc_free_selftest<B: MemmapBacking>(
    buddy: &BuddyAllocator<'_, B>,
    di: &DeferredInit<'_, B>,
    memmap: &Memmap<B>,
    nid: NodeId,
) -> Result<SelftestReport, SelftestError> {
    if !di.is_node_quiescent(nid) {
        return Err(SelftestError::InFlight { nid });
    }
    let zone = ZoneType::ALL
        .iter()
        .rev()
        .copied()
        .find(|&z| buddy.nr_free_pages(nid, z) > 0)
        .ok_or(SelftestError::NoFreeMemory { nid })?;
    let free_before = buddy.nr_free_pages(nid, zone);
    let blocks_before: [u64; NR_ORDERS] =
        core::array::from_fn(|o| buddy.nr_free_blocks(nid, zone, o as u32));
    let mut blocks: Vec<(Pfn, u32)> = Vec::with_capacity(SELFTEST_ORDERS.len());
    let mut result = Ok(());
    let mut expected_free = free_before;
    let mut skipped = Vec::new();
    for order in SELFTEST_ORDERS {
        // An order the zone has no block for cannot be asked of it; one it
        // has a block for must be served (that is what is tested).
        if (order..=MAX_ORDER).all(|o| buddy.nr_free_blocks(nid, zone, o) == 0) {
            skipped.push(order);
            continue;
        }
        let pfn = match buddy.alloc(nid, zone, order) {
            Ok(pfn) => pfn,
            Err(err) => {
                result = Err(SelftestError::Alloc { order, err });
                break;
            }
        };
        let checked = check_allocated(memmap, nid, zone, pfn, order, &blocks);
        blocks.push((pfn, order));
        expected_free -= 1 << order;
        let found = buddy.nr_free_pages(nid, zone);
        result = checked.and(if found == expected_free {
            Ok(())
        } else {
            Err(SelftestError::FreeCount {
                stage: "after allocating",
                expected: expected_free,
                found,
            })
        });
        if result.is_err() {
            break;
        }
    }
    for &(pfn, order) in blocks.iter().rev() {
        if let Err(err) = buddy.free(pfn, order) {
            if result.is_ok() {
                result = Err(SelftestError::Free { err });
            }
        }
    }
    result?;
    check_restored(buddy, nid, zone, free_before, &blocks_before)?;
    Ok(SelftestReport {
        nid,
        zone,
        blocks,
        skipped,
        free_pages: free_before,
    })
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::plan::{DeferredPlan, PlanOptions};
    use crate::run::InitMode;
    use crate::std_seams::{StdClock, ThreadExecutor};
    use crate::suite_64::tests::{cpus, dr, memmap_for, new_di, TEST_CPUS};

    /// A block overlapping an earlier one from either side, or containing
    /// it, is refused before any page is read; a block next to it is not
    /// (it then fails on its missing struct pages instead: the memmap
    /// backs nothing).
    #[test]
    fn an_allocated_block_overlapping_an_earlier_one_is_refused() {
        let mm: Memmap<crate::suite_64::tests::TestBacking> = memmap_for(&[]);
        let check = |pfn, order, earlier: &[(Pfn, u32)]| {
            check_allocated(&mm, 0, ZoneType::Normal, pfn, order, earlier)
        };
        // The new block is [16, 24).
        for (q, o) in [(20, 2), (16, 0), (23, 0), (8, 4), (0, 5), (12, 3)] {
            assert_eq!(
                check(16, 3, &[(q, o)]),
                Err(SelftestError::Overlap {
                    pfn: 16,
                    order: 3,
                    other: q
                }),
                "earlier block {q}+{}",
                1u64 << o
            );
        }
        for (q, o) in [(8, 3), (24, 3), (15, 0), (24, 0), (32, 4)] {
            assert!(
                matches!(
                    check(16, 3, &[(q, o)]),
                    Err(SelftestError::BadPage { pfn: 16, .. })
                ),
                "earlier block {q}+{} does not overlap",
                1u64 << o
            );
        }
    }

    /// After the self-test, the zone's free pages and its blocks of every
    /// order must be what they were before; any difference is an error.
    #[test]
    fn free_lists_not_restored_are_an_error() {
        let base = 1 << 20; // 4 GiB: zone Normal
        let ranges = [dr(0, base, base + 2048)];
        let mm = memmap_for(&ranges);
        let plan =
            DeferredPlan::new(&ranges, &[], &[cpus(0, &[0])], PlanOptions::default()).unwrap();
        let di = new_di(&mm, plan, InitMode::InitAndFree, &[]).unwrap();
        di.run(&ThreadExecutor::new(TEST_CPUS), &StdClock::new())
            .unwrap();
        let buddy = di.buddy();
        let mut blocks = [0; NR_ORDERS];
        blocks[MAX_ORDER as usize] = 2;
        let restored = |free, blocks: &[u64; NR_ORDERS]| {
            check_restored(buddy, 0, ZoneType::Normal, free, blocks)
        };
        assert_eq!(restored(2048, &blocks), Ok(()));
        assert_eq!(
            restored(2047, &blocks),
            Err(SelftestError::FreeCount {
                stage: "after freeing",
                expected: 2047,
                found: 2048
            })
        );
        let mut fewer = blocks;
        fewer[MAX_ORDER as usize] = 1;
        fewer[MAX_ORDER as usize - 1] = 2;
        assert_eq!(
            restored(2048, &fewer),
            Err(SelftestError::BlockCounts {
                order: MAX_ORDER - 1,
                before: 2,
                after: 0
            })
        );
    }
}
