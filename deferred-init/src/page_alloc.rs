//! The page allocator: what every stage that allocates or frees pages calls.
//!
//! A request for `2^order` pages of (node, zone) is served in Linux's zone
//! fallback order (`ZONELIST_FALLBACK` within a node): `zone` first, then
//! each lower zone, so a Normal request may be served from DMA32 or DMA,
//! never the other way round. The pages come from the per-(node, zone)
//! buddy free lists ([`BuddyAllocator`]); when a zone's lists cannot serve
//! the request, the allocator asks its [`Grow`] source to initialise more
//! of that zone on this CPU, one growth step at a time, and retries before
//! it falls back to the next lower zone (Linux `_deferred_grow_zone`).
//!
//! Deferred init is a client on both sides: its workers free the pages
//! they initialise into the free lists, and its untouched pool is the
//! [`Grow`] source (`DeferredInit` implements it). An allocator without a
//! source serves what the lists hold.
//!
//! An allocator given per-CPU caches ([`PerCpuPages`]) and told which CPU
//! it runs on ([`PageAllocator::on_cpu`]) serves and takes back order-0
//! pages through that CPU's cache ([`crate::pcp`]), as Linux's
//! `rmqueue_pcplist` / `free_unref_page` do; other orders, and callers
//! that name no CPU, go to the lists. A request no zone can serve drains
//! every CPU's cache into the lists and tries once more before it fails.

use memmap::store::MemmapBacking;
use memmap::{NodeId, Pfn, ZoneType};

use crate::buddy::{AllocError, BuddyAllocator, FreeError};
use crate::clock::Clock;
use crate::pcp::{PerCpuPages, PCP_BATCH, PCP_HIGH};
use crate::plan::CpuId;

/// Where more free pages of a zone come from when its lists run dry.
pub trait Grow: Sync {
    /// Has every page of (`nid`, `zone`) been initialised and freed? Read
    /// before an attempt on the lists: if it was true then, a failed
    /// attempt cannot have missed pages still on their way.
    fn zone_done(&self, nid: NodeId, zone: ZoneType) -> bool;
    /// One growth step on this CPU: initialise more of (`nid`, `zone`) and
    /// free it into the lists. False if nothing of the zone is left to
    /// claim (others may still be initialising what they claimed).
    fn grow_step(&self, nid: NodeId, zone: ZoneType) -> bool;
    /// Block windows of `nid` in `zones` claimed but not yet initialised.
    fn windows_in_flight(&self, nid: NodeId, zones: &mut dyn Iterator<Item = ZoneType>) -> u64;
}

/// An allocation and how many growth steps it took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allocation {
    pub pfn: Pfn,
    /// Growth steps this allocation took (0: served from the free lists).
    pub growth_steps: u32,
}

/// How a timed allocation reports each growth step's duration.
type StepTimer<'a> = (&'a dyn Clock, &'a mut dyn FnMut(u64));

/// The buddy free lists and, if there is one, the source that grows them.
pub struct PageAllocator<'a, 'm, B> {
    buddy: &'a BuddyAllocator<'m, B>,
    grow: Option<&'a dyn Grow>,
    caches: Option<&'a PerCpuPages>,
    cpu: Option<CpuId>,
}

impl<B> Clone for PageAllocator<'_, '_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B> Copy for PageAllocator<'_, '_, B> {}

impl<'a, 'm, B: MemmapBacking> PageAllocator<'a, 'm, B> {
    pub fn new(buddy: &'a BuddyAllocator<'m, B>, grow: Option<&'a dyn Grow>) -> Self {
        Self {
            buddy,
            grow,
            caches: None,
            cpu: None,
        }
    }

    /// This allocator with per-CPU caches for order-0 pages, used by the
    /// copies told their CPU ([`on_cpu`](Self::on_cpu)).
    pub fn with_cpu_caches(self, caches: &'a PerCpuPages) -> Self {
        Self {
            caches: Some(caches),
            ..self
        }
    }

    /// This allocator for a caller running on `cpu`: order-0 pages go
    /// through that CPU's cache, if there are caches.
    pub fn on_cpu(self, cpu: CpuId) -> Self {
        Self {
            cpu: Some(cpu),
            ..self
        }
    }

    /// Pages per batch and the most a CPU's cache holds, `(0, 0)` without
    /// caches.
    pub fn cpu_cache_pages(&self) -> (u64, u64) {
        match self.caches {
            Some(_) => (PCP_BATCH as u64, PCP_HIGH as u64),
            None => (0, 0),
        }
    }

    /// The CPU's cache, if this copy has one.
    fn cpu_cache(&self) -> Option<(&'a PerCpuPages, CpuId)> {
        Some((self.caches?, self.cpu?))
    }

    /// Give every CPU's cached pages back to the lists; how many.
    fn drain_all_caches(&self) -> u64 {
        self.caches.map_or(0, |c| c.drain_all(self.buddy))
    }

    /// Give this CPU's cached pages back to the lists (Linux
    /// `drain_local_pages`); nothing without a cache.
    pub fn drain_cpu_cache(&self) {
        if let Some((caches, cpu)) = self.cpu_cache() {
            caches.drain_cpu(self.buddy, cpu);
        }
    }

    /// The free lists themselves (counts, verification, the hand-off).
    pub fn buddy(&self) -> &'a BuddyAllocator<'m, B> {
        self.buddy
    }

    /// Allocate `1 << order` pages for a request of (nid, zone) in the
    /// fallback order (module docs). Growth never initialises a zone above
    /// `zone`, so a request no zone can serve fails at once and initialises
    /// nothing. `InitInProgress` means pages of those zones were claimed
    /// by others and not yet freed: a retry may succeed.
    pub fn alloc_pages(&self, nid: NodeId, zone: ZoneType, order: u32) -> Result<Pfn, AllocError> {
        self.alloc_pages_counted(nid, zone, order).map(|a| a.pfn)
    }

    /// [`alloc_pages`](Self::alloc_pages), also saying how many growth
    /// steps the allocation took.
    pub fn alloc_pages_counted(
        &self,
        nid: NodeId,
        zone: ZoneType,
        order: u32,
    ) -> Result<Allocation, AllocError> {
        self.alloc(nid, zone, order, None)
    }

    /// [`alloc_pages_counted`](Self::alloc_pages_counted), also timing
    /// each growth step with `clock` and handing its duration (ns) to
    /// `on_step`.
    pub fn alloc_pages_timed(
        &self,
        nid: NodeId,
        zone: ZoneType,
        order: u32,
        clock: &dyn Clock,
        on_step: &mut dyn FnMut(u64),
    ) -> Result<Allocation, AllocError> {
        self.alloc(nid, zone, order, Some((clock, on_step)))
    }

    /// Free pages allocated with [`alloc_pages`](Self::alloc_pages). Never
    /// inlined, nor is `alloc`: the instruction profile counts their calls
    /// (`memboot-profile`'s `page_free`, `page_alloc`).
    #[inline(never)]
    pub fn free_pages(&self, pfn: Pfn, order: u32) -> Result<(), FreeError> {
        match self.cpu_cache() {
            Some((caches, cpu)) if order == 0 => caches.free(self.buddy, cpu, pfn),
            _ => self.buddy.free(pfn, order),
        }
    }

    /// One attempt on (nid, zone) without growth: through the CPU's cache
    /// for order 0, else the lists.
    fn take(&self, nid: NodeId, zone: ZoneType, order: u32) -> Result<Pfn, AllocError> {
        match self.cpu_cache() {
            Some((caches, cpu)) if order == 0 => caches.alloc(self.buddy, cpu, nid, zone),
            _ => self.buddy.alloc(nid, zone, order),
        }
    }

    #[inline(never)]
    fn alloc(
        &self,
        nid: NodeId,
        zone: ZoneType,
        order: u32,
        mut step_timer: Option<StepTimer<'_>>,
    ) -> Result<Allocation, AllocError> {
        // Order 0 from this CPU's cache first: what the pass below would
        // try first too, without its fallback and growth bookkeeping.
        if let Some((caches, cpu)) = self.cpu_cache().filter(|_| order == 0) {
            if let Ok(pfn) = caches.alloc(self.buddy, cpu, nid, zone) {
                return Ok(Allocation {
                    pfn,
                    growth_steps: 0,
                });
            }
        }
        let mut pass = Pass::default();
        let mut found = self.pass(nid, zone, order, &mut step_timer, &mut pass);
        // Pages in the CPUs' caches are free too: before failing, give them
        // back to the lists and try once more (Linux drains all CPUs' lists
        // in its slow path, `drain_all_pages`).
        if found.is_none() && !pass.in_flight && self.drain_all_caches() > 0 {
            found = self.pass(nid, zone, order, &mut step_timer, &mut pass);
        }
        if let Some(r) = found {
            return r.map(|pfn| Allocation {
                pfn,
                growth_steps: pass.growth_steps,
            });
        }
        if let Some(grow) = self.grow.filter(|_| pass.in_flight) {
            return Err(AllocError::InitInProgress {
                nid,
                zone,
                order,
                windows_in_flight: grow.windows_in_flight(nid, &mut zone_fallback(zone)),
            });
        }
        Err(AllocError::OutOfMemory { nid, zone, order })
    }

    /// One pass over the zones in fallback order, growing each from its
    /// source until it has nothing left: `Some` with the block or the
    /// first error other than running out, `None` if every zone ran out.
    fn pass(
        &self,
        nid: NodeId,
        zone: ZoneType,
        order: u32,
        step_timer: &mut Option<StepTimer<'_>>,
        pass: &mut Pass,
    ) -> Option<Result<Pfn, AllocError>> {
        for z in zone_fallback(zone) {
            loop {
                // Read before the attempt: if every page of the zone was
                // freed by then, a failed attempt cannot have missed any.
                let done = self.grow.is_none_or(|g| g.zone_done(nid, z));
                match self.take(nid, z, order) {
                    Err(AllocError::OutOfMemory { .. }) => {}
                    other => return Some(other),
                }
                let Some(grow) = self.grow else {
                    break;
                };
                let grew = match step_timer.as_mut() {
                    Some((clock, on_step)) => {
                        let start = clock.now_ns();
                        let grew = grow.grow_step(nid, z);
                        if grew {
                            on_step(clock.now_ns().saturating_sub(start));
                        }
                        grew
                    }
                    None => grow.grow_step(nid, z),
                };
                if !grew {
                    pass.in_flight |= !done;
                    break;
                }
                pass.growth_steps += 1;
            }
        }
        None
    }
}

/// What an allocation's passes over the zones found on the way.
#[derive(Default)]
struct Pass {
    growth_steps: u32,
    /// Some zone had windows claimed by others and not yet freed.
    in_flight: bool,
}

/// The zones a request of `zone` may be served from, in Linux's order:
/// `zone` itself, then each lower one (`ZONELIST_FALLBACK` within a node).
pub(crate) fn zone_fallback(zone: ZoneType) -> impl Iterator<Item = ZoneType> + Clone {
    ZoneType::ALL[..=zone as usize].iter().rev().copied()
}
