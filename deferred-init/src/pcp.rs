//! Per-CPU caches of order-0 pages (Linux's per-CPU pagesets, `struct
//! per_cpu_pages`): the order-0 fast path. A CPU allocates from and frees
//! into its own cache and reaches the zone lock once per batch: to refill
//! the cache from the buddy store (Linux `rmqueue_bulk`), or to give its
//! oldest batch back when it holds [`PCP_HIGH`] pages (`free_pcppages_bulk`).
//! So CPUs allocating from one zone at once do not queue on its lock page
//! by page, whichever store ([`memboot_contract::option_values::BuddyStore`]) keeps the free blocks.
//!
//! A cache holds the pages of one (node, zone) at a time, where Linux has
//! one per zone per CPU: a request or a free of another (node, zone) first
//! gives the cache back. That keeps the caches at 3 KiB per CPU however
//! many nodes there are; the allocation test, their caller, works one node
//! at a time.
//!
//! Cached pages have `_refcount` 0 and are not typed free: the store
//! counts them allocated, as Linux leaves pages on its per-CPU lists out
//! of `NR_FREE_PAGES`. A page left in a cache is therefore a free page in
//! no free block, which verification reports: the caches are drained
//! before it runs ([`PerCpuPages::drain_cpu`] on each CPU). And an
//! allocation the lists cannot serve drains every cache and tries once
//! more before it fails ([`PerCpuPages::drain_all`], Linux's slow path).

use alloc::vec::Vec;

use memmap::store::MemmapBacking;
use memmap::{NodeId, Pfn, ZoneType};
use spin::Mutex;

use crate::buddy::{slot, AllocError, BuddyAllocator, FreeError};
use crate::plan::CpuId;

/// Pages a cache takes from, or gives back to, the store at once: Linux's
/// `zone_batchsize()` for a zone of 256 MiB or more with 4 KiB pages.
pub const PCP_BATCH: usize = 63;
/// The most pages a cache holds: Linux's `pcp->high = 6 * batch` (its
/// fixed rule before the high mark was tuned from the watermarks).
pub const PCP_HIGH: usize = 6 * PCP_BATCH;

/// One CPU's cache: a stack of PFNs, the most recently freed on top.
/// Aligned so two CPUs' caches never share a cache line.
#[repr(align(64))]
struct CpuCache {
    /// The (node, zone) slot of the cached pages (any value when empty).
    slot: usize,
    count: usize,
    pfns: [Pfn; PCP_HIGH],
}

/// A cache per CPU, each only ever used by its CPU but for a drain.
pub struct PerCpuPages {
    cpus: Vec<Mutex<CpuCache>>,
}

impl PerCpuPages {
    /// Empty caches for CPUs `0..nr_cpus`.
    pub fn new(nr_cpus: usize) -> Self {
        Self {
            cpus: (0..nr_cpus)
                .map(|_| {
                    Mutex::new(CpuCache {
                        slot: 0,
                        count: 0,
                        pfns: [0; PCP_HIGH],
                    })
                })
                .collect(),
        }
    }

    /// Pages in all caches.
    pub fn nr_cached_pages(&self) -> u64 {
        self.cpus.iter().map(|c| c.lock().count as u64).sum()
    }

    fn cache(&self, cpu: CpuId) -> &Mutex<CpuCache> {
        self.cpus.get(cpu as usize).unwrap_or_else(|| {
            panic!(
                "CPU {cpu} has no page cache: build PerCpuPages for all {} CPUs of the executor",
                self.cpus.len()
            )
        })
    }

    /// An order-0 page of (nid, zone) for `cpu`: off the top of its cache,
    /// refilled with up to a batch when empty. `OutOfMemory` when the
    /// zone's store has no page either. Never inlined, nor is `free`: the
    /// instruction profile counts their calls (`pcp_alloc`, `pcp_free`).
    #[inline(never)]
    pub(crate) fn alloc<B: MemmapBacking>(
        &self,
        buddy: &BuddyAllocator<'_, B>,
        cpu: CpuId,
        nid: NodeId,
        zone: ZoneType,
    ) -> Result<Pfn, AllocError> {
        let mut c = self.cache(cpu).lock();
        let s = slot(nid, zone);
        if c.slot != s || c.count == 0 {
            give_back(buddy, &mut c);
            let n = buddy.alloc_bulk(nid, zone, &mut c.pfns[..PCP_BATCH])?;
            if n == 0 {
                return Err(AllocError::OutOfMemory {
                    nid,
                    zone,
                    order: 0,
                });
            }
            // Popped from the top: in the order the store gave them.
            c.pfns[..n].reverse();
            (c.slot, c.count) = (s, n);
        }
        c.count -= 1;
        let pfn = c.pfns[c.count];
        buddy.allocate_cached(pfn);
        Ok(pfn)
    }

    /// Free the order-0 page `pfn` into `cpu`'s cache, after the store's
    /// checks (a double free is refused here, not found later).
    #[inline(never)]
    pub(crate) fn free<B: MemmapBacking>(
        &self,
        buddy: &BuddyAllocator<'_, B>,
        cpu: CpuId,
        pfn: Pfn,
    ) -> Result<(), FreeError> {
        let s = buddy.release_to_cache(pfn)?;
        let mut c = self.cache(cpu).lock();
        if c.slot != s {
            give_back(buddy, &mut c);
            c.slot = s;
        }
        if c.count == PCP_HIGH {
            // The oldest batch goes: the pages freed last stay hot.
            buddy.free_bulk(s, &mut c.pfns[..PCP_BATCH]);
            c.pfns.copy_within(PCP_BATCH.., 0);
            c.count -= PCP_BATCH;
        }
        let n = c.count;
        c.pfns[n] = pfn;
        c.count += 1;
        Ok(())
    }

    /// Give every CPU's cached pages back to the store, one cache at a
    /// time (Linux `drain_all_pages`); returns how many. A CPU working
    /// meanwhile may refill its cache at once.
    pub fn drain_all<B: MemmapBacking>(&self, buddy: &BuddyAllocator<'_, B>) -> u64 {
        self.cpus
            .iter()
            .map(|c| {
                let mut c = c.lock();
                let n = c.count as u64;
                give_back(buddy, &mut c);
                n
            })
            .sum()
    }

    /// Give `cpu`'s cached pages back to the store (Linux
    /// `drain_local_pages`).
    pub fn drain_cpu<B: MemmapBacking>(&self, buddy: &BuddyAllocator<'_, B>, cpu: CpuId) {
        give_back(buddy, &mut self.cache(cpu).lock());
    }
}

/// Every page of cache `c` back to the store; the cache is left empty.
fn give_back<B: MemmapBacking>(buddy: &BuddyAllocator<'_, B>, c: &mut CpuCache) {
    if c.count > 0 {
        let slot = c.slot;
        let n = c.count;
        buddy.free_bulk(slot, &mut c.pfns[..n]);
        c.count = 0;
    }
}
