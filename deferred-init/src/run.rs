//! The runtime: chunk claiming, workers, grow-on-demand, the executor seam.
//!
//! # Chunk claiming
//! Each node has one atomic cursor over its chunk list. Claiming is
//! `cursor.fetch_add(1)`: the returned index is the claimed chunk if it is in
//! range. The read-modify-write hands every index to exactly one claimant, so
//! no chunk is initialised twice and, since every claimant processes what it
//! claims and workers claim until the cursor runs past the end, none is
//! missed. Nothing else is shared while initialising: a chunk's struct pages
//! belong to its claimant. Finishing a chunk bumps the node's `done` counter
//! with `Release`; observing `done == nr_chunks` with `Acquire` therefore
//! means every page of the node is initialised and freed.
//!
//! # Work per chunk ([`InitMode::InitAndFree`])
//! The chunk is walked in `MAX_ORDER`-aligned windows of 1024 pages (64 KiB
//! of struct pages, cache resident), like Linux's `deferred_init_maxorder`:
//! first every page of the window is initialised (`__init_single_page`, then
//! `PG_reserved` on reserved pieces or `_refcount = 0` on free ones, the
//! latter being `__free_pages_core`'s per-page step fused into the same
//! pass), then the free pieces are freed in the largest aligned blocks. A
//! block's buddies all lie in its window, so merging only ever reads pages
//! this worker has just initialised.
//!
//! # Grow on demand
//! [`DeferredInit::alloc_pages`] first tries the buddy lists. If they are
//! empty for the request it claims the node's next chunk through the same
//! cursor (Linux `deferred_grow_zone`), initialises and frees it on the
//! calling CPU, and retries, until the allocation succeeds or the cursor is
//! exhausted. The race with the workers is settled by the cursor: whoever
//! gets an index owns that chunk. When nothing is left to claim the caller
//! gets [`AllocError::InitInProgress`] if some claimed chunks are not done
//! (their pages will appear), else [`AllocError::OutOfMemory`]; `done` is
//! read *before* the last allocation attempt so "out of memory" is never
//! reported while a worker's frees could still have been missed.
//!
//! # Executor and clock
//! Workers are plain calls of [`DeferredInit::run_worker`] on shared state
//! (no allocation, no lock per page). [`Executor`] runs them on the CPUs the
//! plan chose; the kernel can also call `run_worker` from its APs directly and
//! go on booting. Time comes from a [`Clock`]: the logic never reads one.

use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use memmap::page::StructPage;
use memmap::store::{Memmap, MemmapBacking};
use memmap::{pfn_to_section_nr, NodeId, Pfn, PfnRange, ZoneType, MAX_ORDER};

use crate::buddy::{
    for_each_max_block, AllocError, BuddyAllocator, BuddyError, FreeError, ManagedRange,
};
use crate::plan::{CpuId, DeferredPlan, Piece};
use crate::stats::{DeferredReport, NodeStats, WorkerStats};

/// Pages in the largest buddy block: the init/free window.
const MAX_BLOCK_NR_PAGES: u64 = 1 << MAX_ORDER;

/// A monotonic nanosecond clock (the kernel: TSC; tests: `Instant`).
pub trait Clock: Sync {
    fn now_ns(&self) -> u64;
}

impl<F: Fn() -> u64 + Sync> Clock for F {
    fn now_ns(&self) -> u64 {
        self()
    }
}

/// The machine's CPUs, as the logic sees them: run one job on every CPU at
/// once. The kernel implements it with its APs (the boot CPU runs its own
/// call inline, after dispatching the others); the host with `std` threads.
pub trait Executor {
    /// CPUs jobs run on: `0..nr_cpus()`, 0 being the boot CPU (the caller).
    fn nr_cpus(&self) -> usize;
    /// Call `job(cpu)` exactly once for every `cpu in 0..nr_cpus()`, each on
    /// that CPU, concurrently; return once every call has returned.
    fn on_each_cpu(&self, job: &(dyn Fn(CpuId) + Sync));
}

/// What workers do with each page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitMode {
    /// Linux semantics: `__init_single_page`, `PG_reserved` on reserved
    /// pages, free pages handed to the buddy allocator.
    InitAndFree,
    /// `__init_single_page` and `PG_reserved` only; nothing freed (pages keep
    /// `_refcount = 1`). Grow-on-demand is off.
    InitOnly,
    /// Store floor: write 64 bytes per page (flags = PFN, rest 0), no Linux
    /// semantics, no buddy. Same work split, for comparison.
    Touch,
}

/// Why deferred init could not be set up or a worker not run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeferredInitError {
    /// A deferred piece lies in a section without struct-page backing.
    SectionNotBacked { nid: NodeId, section_nr: u64 },
    /// The buddy allocator refused the managed ranges.
    Buddy(BuddyError),
    /// `run_worker` was given an index the plan does not have.
    NoSuchWorker { worker: usize, nr_workers: usize },
    /// The plan puts a worker on a CPU the executor does not have.
    NoSuchCpu {
        worker: usize,
        cpu: CpuId,
        nr_cpus: usize,
    },
}

impl fmt::Display for DeferredInitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeferredInitError::SectionNotBacked { nid, section_nr } => write!(
                f,
                "node {nid}: deferred memory in section {section_nr} has no struct-page backing; populate the vmemmap of every section with present memory before deferred init"
            ),
            DeferredInitError::Buddy(e) => write!(f, "buddy allocator setup: {e}"),
            DeferredInitError::NoSuchWorker { worker, nr_workers } => write!(
                f,
                "worker {worker} does not exist (plan has {nr_workers}); use indices of DeferredPlan::workers()"
            ),
            DeferredInitError::NoSuchCpu { worker, cpu, nr_cpus } => write!(
                f,
                "worker {worker} is planned on CPU {cpu} but the executor has {nr_cpus} CPUs; build the plan's NodeCpus from the CPUs that are online"
            ),
        }
    }
}

impl From<BuddyError> for DeferredInitError {
    fn from(e: BuddyError) -> Self {
        DeferredInitError::Buddy(e)
    }
}

struct NodeRuntime {
    cursor: AtomicUsize,
    done: AtomicUsize,
    nr_grown_chunks: AtomicU64,
    nr_grown_pages: AtomicU64,
}

struct WorkerRuntime {
    start_ns: AtomicU64,
    end_ns: AtomicU64,
    nr_pages: AtomicU64,
    nr_chunks: AtomicU64,
    finished: AtomicBool,
}

#[cfg(test)]
pub(crate) type InitHook = alloc::sync::Arc<dyn Fn(PfnRange) + Send + Sync>;

/// Deferred struct-page init of all nodes, plus the buddy allocator that
/// receives the pages.
pub struct DeferredInit<'m, B> {
    memmap: &'m Memmap<B>,
    plan: DeferredPlan,
    mode: InitMode,
    buddy: BuddyAllocator<'m, B>,
    nodes: Vec<NodeRuntime>,
    workers: Vec<WorkerRuntime>,
    /// Test-only: called with every range a worker or grower initialises.
    #[cfg(test)]
    pub(crate) init_hook: Option<InitHook>,
}

impl<'m, B: MemmapBacking> DeferredInit<'m, B> {
    /// Set up deferred init of `plan` over `memmap`. `eager` lists pages the
    /// boot CPU initialised that the buddy allocator should also manage (hand
    /// them over with [`BuddyAllocator::free_initialised_range`] before
    /// starting workers, or pass `&[]`).
    pub fn new(
        memmap: &'m Memmap<B>,
        plan: DeferredPlan,
        mode: InitMode,
        eager: &[ManagedRange],
    ) -> Result<Self, DeferredInitError> {
        for node in plan.nodes() {
            for p in node.pieces() {
                if !memmap.has_pfn(p.pfns.start) {
                    return Err(DeferredInitError::SectionNotBacked {
                        nid: node.nid(),
                        section_nr: pfn_to_section_nr(p.pfns.start),
                    });
                }
            }
        }
        let buddy =
            BuddyAllocator::new(memmap, plan.managed_ranges().chain(eager.iter().copied()))?;
        let nodes = plan
            .nodes()
            .iter()
            .map(|_| NodeRuntime {
                cursor: AtomicUsize::new(0),
                done: AtomicUsize::new(0),
                nr_grown_chunks: AtomicU64::new(0),
                nr_grown_pages: AtomicU64::new(0),
            })
            .collect();
        let workers = plan
            .workers()
            .iter()
            .map(|_| WorkerRuntime {
                start_ns: AtomicU64::new(0),
                end_ns: AtomicU64::new(0),
                nr_pages: AtomicU64::new(0),
                nr_chunks: AtomicU64::new(0),
                finished: AtomicBool::new(false),
            })
            .collect();
        Ok(Self {
            memmap,
            plan,
            mode,
            buddy,
            nodes,
            workers,
            #[cfg(test)]
            init_hook: None,
        })
    }

    pub fn plan(&self) -> &DeferredPlan {
        &self.plan
    }

    pub fn mode(&self) -> InitMode {
        self.mode
    }

    /// The buddy allocator the pages are freed into.
    pub fn buddy(&self) -> &BuddyAllocator<'m, B> {
        &self.buddy
    }

    /// Keep only the allocator once deferred init is over.
    pub fn into_buddy(self) -> BuddyAllocator<'m, B> {
        self.buddy
    }

    /// Run every worker of the plan on `executor` (each CPU runs its
    /// workers one after the other); returns when all are done.
    pub fn run(&self, executor: &dyn Executor, clock: &dyn Clock) -> Result<(), DeferredInitError> {
        self.check_cpus(executor.nr_cpus())?;
        executor.on_each_cpu(&|cpu| self.run_cpu_workers(cpu, clock));
        Ok(())
    }

    /// Fail unless every worker's CPU is one of `0..nr_cpus`.
    pub fn check_cpus(&self, nr_cpus: usize) -> Result<(), DeferredInitError> {
        match self
            .plan
            .workers()
            .iter()
            .position(|w| w.cpu as usize >= nr_cpus)
        {
            Some(worker) => Err(DeferredInitError::NoSuchCpu {
                worker,
                cpu: self.plan.workers()[worker].cpu,
                nr_cpus,
            }),
            None => Ok(()),
        }
    }

    /// Run, one after the other, the workers the plan put on `cpu`: the body
    /// of an [`Executor::on_each_cpu`] job.
    pub fn run_cpu_workers(&self, cpu: CpuId, clock: &dyn Clock) {
        for (i, _) in self
            .plan
            .workers()
            .iter()
            .enumerate()
            .filter(|(_, w)| w.cpu == cpu)
        {
            // Indices come from the plan's own worker list, so this cannot fail.
            let _ = self.run_worker(i, clock);
        }
    }

    /// Body of worker `worker` (index into [`DeferredPlan::workers`]): claim
    /// and process chunks of its node until none is left. Callable from any
    /// CPU; running a worker twice is harmless (it finds nothing to claim)
    /// but overwrites its statistics.
    pub fn run_worker(&self, worker: usize, clock: &dyn Clock) -> Result<(), DeferredInitError> {
        let nr_workers = self.plan.workers().len();
        let a = self
            .plan
            .workers()
            .get(worker)
            .ok_or(DeferredInitError::NoSuchWorker { worker, nr_workers })?;
        let pos = self
            .plan
            .node_pos(a.nid)
            .expect("plan assigns workers only to planned nodes");
        let rt = &self.workers[worker];
        let start_ns = clock.now_ns();
        rt.start_ns.store(start_ns, Ordering::Relaxed);
        let (mut nr_pages, mut nr_chunks) = (0u64, 0u64);
        while let Some(chunk) = self.claim(pos) {
            nr_pages += self.process_chunk(pos, chunk);
            nr_chunks += 1;
        }
        let end_ns = clock.now_ns();
        rt.end_ns.store(end_ns, Ordering::Relaxed);
        rt.nr_pages.store(nr_pages, Ordering::Relaxed);
        rt.nr_chunks.store(nr_chunks, Ordering::Relaxed);
        rt.finished.store(true, Ordering::Release);
        Ok(())
    }

    /// Claim the next chunk of node position `pos`.
    #[inline]
    pub(crate) fn claim(&self, pos: usize) -> Option<usize> {
        let nr_chunks = self.plan.nodes()[pos].nr_chunks();
        let cursor = &self.nodes[pos].cursor;
        // Cheap check first so finished nodes do not keep bumping the cursor.
        if cursor.load(Ordering::Relaxed) >= nr_chunks {
            return None;
        }
        let c = cursor.fetch_add(1, Ordering::Relaxed);
        (c < nr_chunks).then_some(c)
    }

    /// Initialise (and free) one claimed chunk; returns its page count.
    pub(crate) fn process_chunk(&self, pos: usize, chunk: usize) -> u64 {
        let node = &self.plan.nodes()[pos];
        let nid = node.nid();
        let pieces = node.chunk_pieces(chunk);
        let nr_pages: u64 = pieces.iter().map(|p| p.pfns.nr_pages()).sum();
        match self.mode {
            InitMode::Touch => {
                for p in pieces {
                    self.touch_range(p.pfns);
                }
            }
            InitMode::InitOnly => {
                for p in pieces {
                    self.init_range(p, p.pfns, nid, false);
                }
            }
            InitMode::InitAndFree => self.init_and_free(pieces, nid),
        }
        self.nodes[pos].done.fetch_add(1, Ordering::Release);
        nr_pages
    }

    /// The windowed init-then-free walk described in the module docs.
    fn init_and_free(&self, pieces: &[Piece], nid: NodeId) {
        let Some(first_piece) = pieces.first() else {
            return;
        };
        let mut first = 0;
        let mut w_start = first_piece.pfns.start & !(MAX_BLOCK_NR_PAGES - 1);
        while first < pieces.len() {
            let window = PfnRange::new(w_start, w_start + MAX_BLOCK_NR_PAGES);
            for p in &pieces[first..] {
                if p.pfns.start >= window.end {
                    break;
                }
                if let Some(r) = p.pfns.intersect(&window) {
                    self.init_range(p, r, nid, true);
                }
            }
            for p in &pieces[first..] {
                if p.pfns.start >= window.end {
                    break;
                }
                if let (false, Some(r)) = (p.reserved, p.pfns.intersect(&window)) {
                    for_each_max_block(r, |pfn, order| self.buddy.free_prepared_block(pfn, order));
                }
            }
            while first < pieces.len() && pieces[first].pfns.end <= window.end {
                first += 1;
            }
            if let Some(next) = pieces.get(first) {
                w_start = window.end.max(next.pfns.start & !(MAX_BLOCK_NR_PAGES - 1));
            }
        }
    }

    /// `__init_single_page` over `r` (part of piece `p`), then `PG_reserved`
    /// for reserved pieces or, with `will_free`, `_refcount = 0`.
    #[inline]
    fn init_range(&self, p: &Piece, r: PfnRange, nid: NodeId, will_free: bool) {
        // SAFETY: `r` is part of a chunk claimed by this thread through the
        // node cursor (or of the eager ranges, never passed here); no other
        // reference to these struct pages exists until the chunk is done.
        let Some(pages) = (unsafe { self.memmap.pages_mut_unchecked(r) }) else {
            debug_assert!(false, "piece {r:?} without backing (checked in new)");
            return;
        };
        // One 64-byte store per page: the flags word is the same for the
        // whole piece (one section, zone and node). Byte-identical to
        // `init_single_page` followed by `set_reserved` or `_refcount = 0`
        // (tested), with fewer instructions, which matters under TCG.
        let mut flags = StructPage::page_links(r.start, p.zone, nid);
        if p.reserved {
            flags |= 1 << memmap::page::pg::RESERVED;
        }
        let refcount = if !p.reserved && will_free { 0 } else { 1 };
        for page in pages.iter_mut() {
            page.init_with_flags(flags, refcount);
        }
        #[cfg(test)]
        if let Some(hook) = &self.init_hook {
            hook(r);
        }
    }

    /// Touch mode: one 64-byte store per page.
    #[inline]
    fn touch_range(&self, r: PfnRange) {
        // SAFETY: as in `init_range`: the chunk is ours alone.
        let Some(pages) = (unsafe { self.memmap.pages_mut_unchecked(r) }) else {
            return;
        };
        memmap::init::touch_pages(pages, r.start);
        #[cfg(test)]
        if let Some(hook) = &self.init_hook {
            hook(r);
        }
    }

    /// Allocate `1 << order` pages of (nid, zone), initialising further
    /// chunks of the node on this CPU if the free lists cannot serve it yet.
    pub fn alloc_pages(&self, nid: NodeId, zone: ZoneType, order: u32) -> Result<Pfn, AllocError> {
        let Some(pos) = self.plan.node_pos(nid) else {
            return self.buddy.alloc(nid, zone, order);
        };
        let nr_chunks = self.plan.nodes()[pos].nr_chunks();
        let rt = &self.nodes[pos];
        loop {
            let all_done = rt.done.load(Ordering::Acquire) == nr_chunks;
            match self.buddy.alloc(nid, zone, order) {
                Err(AllocError::OutOfMemory { .. }) => {}
                other => return other,
            }
            if self.mode == InitMode::InitAndFree {
                if let Some(chunk) = self.claim(pos) {
                    let nr_pages = self.process_chunk(pos, chunk);
                    rt.nr_grown_chunks.fetch_add(1, Ordering::Relaxed);
                    rt.nr_grown_pages.fetch_add(nr_pages, Ordering::Relaxed);
                    continue;
                }
            }
            return Err(if all_done || self.mode != InitMode::InitAndFree {
                AllocError::OutOfMemory { nid, zone, order }
            } else {
                AllocError::InitInProgress {
                    nid,
                    zone,
                    order,
                    chunks_in_flight: nr_chunks - rt.done.load(Ordering::Acquire).min(nr_chunks),
                }
            });
        }
    }

    /// Free pages allocated with [`alloc_pages`](Self::alloc_pages).
    pub fn free_pages(&self, pfn: Pfn, order: u32) -> Result<(), FreeError> {
        self.buddy.free(pfn, order)
    }

    /// Has every chunk of `nid` been processed? (True for nodes without
    /// deferred memory.)
    pub fn is_node_done(&self, nid: NodeId) -> bool {
        self.plan.node_pos(nid).is_none_or(|pos| {
            self.nodes[pos].done.load(Ordering::Acquire) == self.plan.nodes()[pos].nr_chunks()
        })
    }

    /// Has every node been processed?
    pub fn is_done(&self) -> bool {
        self.plan.nodes().iter().all(|n| self.is_node_done(n.nid()))
    }

    /// Statistics so far (complete once every worker has returned).
    pub fn report(&self) -> DeferredReport {
        let workers: Vec<WorkerStats> = self
            .plan
            .workers()
            .iter()
            .zip(&self.workers)
            .enumerate()
            .map(|(i, (a, rt))| {
                let finished = rt.finished.load(Ordering::Acquire);
                let (s, e) = (
                    rt.start_ns.load(Ordering::Relaxed),
                    rt.end_ns.load(Ordering::Relaxed),
                );
                WorkerStats {
                    worker: i,
                    nid: a.nid,
                    cpu: a.cpu,
                    cpu_nid: a.cpu_nid,
                    nr_pages: rt.nr_pages.load(Ordering::Relaxed),
                    nr_chunks: rt.nr_chunks.load(Ordering::Relaxed),
                    start_ns: s,
                    end_ns: e,
                    wall_ns: if finished { e.saturating_sub(s) } else { 0 },
                    finished,
                }
            })
            .collect();
        let nodes = self
            .plan
            .nodes()
            .iter()
            .zip(&self.nodes)
            .map(|(n, rt)| {
                let mine = || workers.iter().filter(|w| w.nid == n.nid() && w.finished);
                let start = mine().map(|w| w.start_ns).min();
                let end = mine().map(|w| w.end_ns).max();
                NodeStats {
                    nid: n.nid(),
                    nr_pages: n.nr_pages(),
                    nr_reserved_pages: n.nr_reserved_pages(),
                    nr_chunks: n.nr_chunks() as u64,
                    nr_workers: n.nr_workers(),
                    has_local_cpus: n.has_local_cpus(),
                    nr_worker_pages: mine().map(|w| w.nr_pages).sum(),
                    nr_grown_chunks: rt.nr_grown_chunks.load(Ordering::Relaxed),
                    nr_grown_pages: rt.nr_grown_pages.load(Ordering::Relaxed),
                    wall_ns: match (start, end) {
                        (Some(s), Some(e)) => e.saturating_sub(s),
                        _ => 0,
                    },
                    done: rt.done.load(Ordering::Acquire) == n.nr_chunks(),
                }
            })
            .collect();
        DeferredReport::new(nodes, workers)
    }
}
