//! The runtime: claiming block windows, workers, grow-on-demand, the pool
//! of untouched memory, the executor seam.
//!
//! # Claims
//! Each node's deferred memory is a list of chunks (a section each by
//! default, see [`crate::plan`]), and each chunk a run of block windows:
//! `MAX_ORDER`-aligned 1024-page ranges, the largest buddy block. A window
//! is the unit of claiming. A node's chunks ascend by PFN, so each zone's
//! chunks form one run ([`NodePlan::zone_chunks`](crate::NodePlan::zone_chunks)).
//! Every chunk has an atomic `next` counter of its windows and every (node,
//! zone) a `cursor`, the first chunk of the zone's run that may still have
//! unclaimed windows. Claiming `k` windows of a zone is
//! `next[cursor].fetch_add(k)`: the returned index `w` hands windows
//! `w..w+k` (clipped to the chunk) to the claimant alone; if `w` is past the
//! chunk's end the claimant moves `cursor` on with a compare-exchange and
//! tries again. The read-modify-write gives every window to exactly one
//! claimant, so none is initialised twice, and since the cursor passes a
//! chunk only after all of its windows were handed out and workers claim
//! (zone by zone) until every cursor runs off its run, none is missed.
//! Unclaimed windows are always a suffix of each chunk: that suffix *is*
//! the pool of untouched memory ([`DeferredInit::pool_pages`]), O(one
//! counter per chunk), and nothing reads its struct pages.
//!
//! Workers claim [`WORKER_CLAIM_WINDOWS`] windows (a section) at a time,
//! allocations one. Finishing a window bumps its (node, zone)'s
//! `windows_done` with `Release`; `windows_done == nr_windows` read with
//! `Acquire` means every page of that zone of the node is initialised and
//! freed.
//!
//! # Counting initialisations
//! The claim protocol is what makes init exactly-once; the count makes it
//! checkable. Every window goes through one init path
//! (`DeferredInit::init_window`), which bumps its chunk's `initialised`
//! counter; verification checks, per chunk, initialised = claimed
//! ([`DeferredInit::chunk_inits`]), so a window initialised twice (which
//! writes the same bytes and is invisible to a page scan) or a claimed one
//! never initialised fails the boot, naming the section.
//!
//! # Work per window ([`InitMode::InitAndFree`])
//! As Linux's `deferred_init_maxorder`: first every page of the window is
//! initialised (`__init_single_page`, then `PG_reserved` on reserved pieces
//! or `_refcount = 0` on free ones, the latter being `__free_pages_core`'s
//! per-page step fused into the same pass), then the free pieces are freed
//! in the largest aligned blocks. A block's buddies all lie in its window,
//! so merging only ever reads pages the claimant has just initialised.
//!
//! # Grow on demand
//! [`PageAllocator::alloc_pages`](crate::PageAllocator::alloc_pages), with
//! this deferred init as its [`Grow`] source, serves a request of a zone from that zone
//! or a lower one, in Linux's fallback order (Normal, then DMA32, then
//! DMA). For each zone it first tries the buddy lists; if they are empty
//! for the request it claims one window of *that zone* of the node (Linux
//! `deferred_grow_zone`, but at most 4 MiB per step instead of a section),
//! initialises and frees it on the calling CPU, and retries, until the
//! allocation succeeds or the zone has nothing left to claim; then it falls
//! back to the next lower zone. It never claims a window of a zone above
//! the request's, so a request no pool can serve fails at once, having
//! initialised nothing. Growers and workers race on the same claims. When
//! nothing is left the caller gets
//! [`AllocError::InitInProgress`](crate::buddy::AllocError::InitInProgress)
//! if some claimed windows of those zones are not done (their pages will
//! appear), else
//! [`AllocError::OutOfMemory`](crate::buddy::AllocError::OutOfMemory); a
//! zone's `windows_done` is read
//! *before* its last allocation attempt so "out of memory" is never
//! reported while a worker's frees could have been missed.
//!
//! # Executor and clock
//! Workers are plain calls of [`DeferredInit::run_worker`] (or, one claim at
//! a time, [`DeferredInit::worker_step`]) on shared state: no allocation, no
//! lock per page. [`Executor`] runs them on the CPUs the plan chose. Time
//! comes from a [`Clock`]: the logic never reads one.

use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use memmap::init::InitAs;
use memmap::store::{Memmap, MemmapBacking};
use memmap::{NodeId, Pfn, PfnRange, ZoneType};

use crate::buddy::{max_blocks, BuddyAllocator, BuddyError, NR_ZONES};
use crate::claim_hooks::{ClaimHooks, NoClaimHooks};
use crate::clock::Clock;
use crate::page_alloc::{Grow, PageAllocator};
use crate::plan::{CpuId, DeferredPlan, Piece, WINDOW_NR_PAGES};
use crate::stats::{DeferredReport, NodeStats, WorkerStats};

/// Windows a worker claims at once: one section, as Linux's padata jobs.
pub const WORKER_CLAIM_WINDOWS: u32 = (memmap::PAGES_PER_SECTION / WINDOW_NR_PAGES) as u32;
/// Windows an allocation claims per growth step: one 4 MiB window, so no
/// allocation pays for more than one max-order block of init per step.
pub const GROW_CLAIM_WINDOWS: u32 = 1;

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
    /// Per zone: the first chunk of the zone's run
    /// ([`NodePlan::zone_chunks`](crate::NodePlan::zone_chunks)) that may
    /// still have unclaimed windows.
    cursors: [AtomicUsize; NR_ZONES],
    /// Per chunk: the next window index to hand out (may run past the end).
    next: Vec<AtomicU32>,
    /// Per chunk: windows initialised, counted by the one init path
    /// ([`DeferredInit::init_window`]); verification checks it equals the
    /// windows claimed, so a window initialised twice (or never) shows.
    initialised: Vec<AtomicU32>,
    /// Per zone: block windows, and those processed (initialised and freed).
    nr_windows: [u64; NR_ZONES],
    windows_done: [AtomicU64; NR_ZONES],
    /// Claims of this node being processed right now (by anyone).
    claims_in_flight: AtomicU32,
    nr_grown_windows: AtomicU64,
    nr_grown_pages: AtomicU64,
    /// Growth steps that began while another claim of the node was being
    /// processed: the grower raced a worker or another grower.
    nr_contended_growth_steps: AtomicU64,
}

impl NodeRuntime {
    fn new(plan: &crate::NodePlan) -> Self {
        let mut nr_windows = [0; NR_ZONES];
        for zone in ZoneType::ALL {
            nr_windows[zone as usize] = plan
                .zone_chunks(zone)
                .map(|c| plan.chunk_windows(c).nr as u64)
                .sum();
        }
        NodeRuntime {
            cursors: ZoneType::ALL.map(|z| AtomicUsize::new(plan.zone_chunks(z).start)),
            next: (0..plan.nr_chunks()).map(|_| AtomicU32::new(0)).collect(),
            initialised: (0..plan.nr_chunks()).map(|_| AtomicU32::new(0)).collect(),
            nr_windows,
            windows_done: ZoneType::ALL.map(|_| AtomicU64::new(0)),
            claims_in_flight: AtomicU32::new(0),
            nr_grown_windows: AtomicU64::new(0),
            nr_grown_pages: AtomicU64::new(0),
            nr_contended_growth_steps: AtomicU64::new(0),
        }
    }

    fn nr_windows_total(&self) -> u64 {
        self.nr_windows.iter().sum()
    }

    fn windows_done_total(&self) -> u64 {
        self.windows_done
            .iter()
            .map(|d| d.load(Ordering::Acquire))
            .sum()
    }

    /// Every window of `zone` processed (true for a zone without windows).
    fn zone_done(&self, zone: ZoneType) -> bool {
        self.windows_done[zone as usize].load(Ordering::Acquire) == self.nr_windows[zone as usize]
    }
}

struct WorkerRuntime {
    /// Set by the first call of the worker, which stamps `start_ns`.
    started: AtomicBool,
    start_ns: AtomicU64,
    end_ns: AtomicU64,
    nr_pages: AtomicU64,
    nr_claims: AtomicU64,
    /// Found nothing left to claim.
    finished: AtomicBool,
}

/// Windows `windows` of chunk `chunk`, handed to one claimant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    pub chunk: usize,
    pub windows: core::ops::Range<u32>,
    /// The zone the chunk serves ([`crate::NodePlan::chunk_zone`]).
    pub zone: ZoneType,
}

/// One chunk's claimed windows and how often the init path ran on them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkInits {
    pub nid: NodeId,
    /// The PFNs of the chunk's block windows.
    pub windows: PfnRange,
    pub nr_windows: u32,
    /// Windows handed out by claims.
    pub claimed: u32,
    /// Windows the init path initialised (once per claimed window).
    pub initialised: u32,
}

/// A piece of deferred memory still in the pool: nobody has claimed it, its
/// struct pages are untouched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolPiece {
    pub nid: NodeId,
    pub piece: Piece,
}

#[cfg(test)]
pub(crate) type InitHook = alloc::sync::Arc<dyn Fn(PfnRange) + Send + Sync>;

/// Deferred struct-page init of all nodes: a client of the page allocator,
/// whose free lists receive the pages and whose growth source it is.
pub struct DeferredInit<'m, B> {
    memmap: &'m Memmap<B>,
    plan: DeferredPlan,
    mode: InitMode,
    buddy: &'m BuddyAllocator<'m, B>,
    nodes: Vec<NodeRuntime>,
    workers: Vec<WorkerRuntime>,
    /// What a test fault does in the claim loop; nothing unless given
    /// ([`DeferredInit::set_claim_hooks`]).
    hooks: &'m dyn ClaimHooks,
    /// Test-only: called with every range a worker or grower initialises.
    #[cfg(test)]
    pub(crate) init_hook: Option<InitHook>,
}

impl<'m, B: MemmapBacking> DeferredInit<'m, B> {
    /// Set up deferred init of `plan` over `memmap`, freeing into `buddy`:
    /// O(chunks), no struct page touched. `buddy` must manage the plan's
    /// ranges ([`DeferredPlan::managed_ranges`], plus whatever else its
    /// owner hands it, such as the boot CPU's pages).
    pub fn new(
        memmap: &'m Memmap<B>,
        buddy: &'m BuddyAllocator<'m, B>,
        plan: DeferredPlan,
        mode: InitMode,
    ) -> Result<Self, DeferredInitError> {
        for node in plan.nodes() {
            for p in node.pieces() {
                if let Some(section_nr) = memmap.first_unbacked_section(p.pfns) {
                    return Err(DeferredInitError::SectionNotBacked {
                        nid: node.nid(),
                        section_nr,
                    });
                }
            }
        }
        let nodes = plan.nodes().iter().map(NodeRuntime::new).collect();
        let workers = plan
            .workers()
            .iter()
            .map(|_| WorkerRuntime {
                started: AtomicBool::new(false),
                start_ns: AtomicU64::new(0),
                end_ns: AtomicU64::new(0),
                nr_pages: AtomicU64::new(0),
                nr_claims: AtomicU64::new(0),
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
            hooks: &NoClaimHooks,
            #[cfg(test)]
            init_hook: None,
        })
    }

    /// Run the claim loop through `hooks` (the seam a test fault acts
    /// through: see [`crate::faults::DoubleInit`]).
    pub fn set_claim_hooks(&mut self, hooks: &'m dyn ClaimHooks) {
        self.hooks = hooks;
    }

    pub fn plan(&self) -> &DeferredPlan {
        &self.plan
    }

    pub fn mode(&self) -> InitMode {
        self.mode
    }

    /// The buddy allocator the pages are freed into.
    pub fn buddy(&self) -> &'m BuddyAllocator<'m, B> {
        self.buddy
    }

    /// This deferred init as the free lists' growth source: only when its
    /// pages go to the allocator ([`InitMode::InitAndFree`]).
    pub fn growth(&self) -> Option<&dyn Grow> {
        (self.mode == InitMode::InitAndFree).then_some(self as &dyn Grow)
    }

    /// The page allocator over the same free lists, growing from this
    /// deferred init's pool.
    pub fn allocator(&self) -> PageAllocator<'_, 'm, B> {
        PageAllocator::new(self.buddy, self.growth())
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

    /// Indices of the workers the plan put on `cpu`.
    pub fn cpu_workers(&self, cpu: CpuId) -> impl Iterator<Item = usize> + '_ {
        self.plan
            .workers()
            .iter()
            .enumerate()
            .filter(move |(_, w)| w.cpu == cpu)
            .map(|(i, _)| i)
    }

    /// Run, one after the other, the workers the plan put on `cpu`: the body
    /// of an [`Executor::on_each_cpu`] job. Out of line: the instruction
    /// profile's deferred-init phase starts at this function's entry
    /// (`memboot-profile`'s phase table).
    #[inline(never)]
    pub fn run_cpu_workers(&self, cpu: CpuId, clock: &dyn Clock) {
        for i in self.cpu_workers(cpu).collect::<Vec<_>>() {
            // Indices come from the plan's own worker list, so this cannot fail.
            let _ = self.run_worker(i, clock);
        }
    }

    /// Body of worker `worker` (index into [`DeferredPlan::workers`]): claim
    /// and process windows of its node until none is left. Callable from any
    /// CPU; running a worker twice is harmless (it finds nothing to claim).
    pub fn run_worker(&self, worker: usize, clock: &dyn Clock) -> Result<(), DeferredInitError> {
        let rt = self.worker_start(worker, clock)?;
        while self.claim_for(worker)? {}
        rt.end_ns.fetch_max(clock.now_ns(), Ordering::Relaxed);
        Ok(())
    }

    /// One claim of worker `worker` ([`WORKER_CLAIM_WINDOWS`] windows),
    /// processed; false once nothing is left to claim. Interleaving steps
    /// with other work is how a CPU drains the pool in the background.
    pub fn worker_step(&self, worker: usize, clock: &dyn Clock) -> Result<bool, DeferredInitError> {
        let rt = self.worker_start(worker, clock)?;
        let more = self.claim_for(worker)?;
        rt.end_ns.fetch_max(clock.now_ns(), Ordering::Relaxed);
        Ok(more)
    }

    /// The worker's runtime, its start time stamped on first use.
    fn worker_start(
        &self,
        worker: usize,
        clock: &dyn Clock,
    ) -> Result<&WorkerRuntime, DeferredInitError> {
        let rt = self
            .workers
            .get(worker)
            .ok_or(DeferredInitError::NoSuchWorker {
                worker,
                nr_workers: self.workers.len(),
            })?;
        if !rt.started.swap(true, Ordering::Relaxed) {
            rt.start_ns.store(clock.now_ns(), Ordering::Relaxed);
        }
        Ok(rt)
    }

    /// Claim and process one batch for `worker`; false when nothing is left.
    fn claim_for(&self, worker: usize) -> Result<bool, DeferredInitError> {
        let a = self.plan.workers()[worker];
        let pos = self
            .plan
            .node_pos(a.nid)
            .expect("plan assigns workers only to planned nodes");
        let rt = &self.workers[worker];
        let Some(claim) = self.claim(pos, WORKER_CLAIM_WINDOWS) else {
            rt.finished.store(true, Ordering::Release);
            return Ok(false);
        };
        let (nr_pages, _) = self.process_claim(pos, &claim);
        rt.nr_pages.fetch_add(nr_pages, Ordering::Relaxed);
        rt.nr_claims.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

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

    /// Initialise (and free) the windows of a claim; returns its present
    /// pages and whether another claim of the node was being processed
    /// when this one began (a race between claimants).
    pub(crate) fn process_claim(&self, pos: usize, claim: &Claim) -> (u64, bool) {
        let node = &self.plan.nodes()[pos];
        let rt = &self.nodes[pos];
        let contended = rt.claims_in_flight.fetch_add(1, Ordering::AcqRel) > 0;
        let mut nr_pages = 0;
        for w in claim.windows.clone() {
            let (window, pieces) = node.window_pieces(claim.chunk, w);
            nr_pages += self.init_window(pos, claim.chunk, window, pieces);
            if self.hooks.init_again(window) {
                self.init_window(pos, claim.chunk, window, pieces);
            }
        }
        if self.mode == InitMode::InitAndFree {
            self.free_windows(pos, claim);
        }
        let nr_windows = claim.windows.len() as u64;
        rt.windows_done[claim.zone as usize].fetch_add(nr_windows, Ordering::Release);
        rt.claims_in_flight.fetch_sub(1, Ordering::AcqRel);
        (nr_pages, contended)
    }

    /// The one init path of claimed memory: write the struct pages of the
    /// pieces in `window` (of chunk `chunk` of node position `pos`) as the
    /// mode says, and count the window in the chunk's init counter.
    /// Returns the window's present pages.
    fn init_window(&self, pos: usize, chunk: usize, window: PfnRange, pieces: &[Piece]) -> u64 {
        let nid = self.plan.nodes()[pos].nid();
        let mut nr_pages = 0;
        for p in pieces {
            let Some(r) = p.pfns.intersect(&window) else {
                continue;
            };
            nr_pages += r.nr_pages();
            match self.mode {
                InitMode::Touch => self.touch_range(r),
                InitMode::InitOnly => self.init_range(p, r, nid, false),
                InitMode::InitAndFree => self.init_range(p, r, nid, true),
            }
        }
        self.nodes[pos].initialised[chunk].fetch_add(1, Ordering::Relaxed);
        nr_pages
    }

    /// Free the free pieces of the claim's windows in the largest aligned
    /// blocks, right after [`init_window`](Self::init_window) wrote them
    /// (Linux's `deferred_init_maxorder` frees what it initialised the same
    /// way): only each block's head is written, and the zone's lock is taken
    /// once for the claim, not once a block, so a node's workers meet at
    /// their zone's lock (and its cache lines) once a section.
    fn free_windows(&self, pos: usize, claim: &Claim) {
        let node = &self.plan.nodes()[pos];
        let mut frees = self.buddy.prepared_frees();
        for w in claim.windows.clone() {
            let (window, pieces) = node.window_pieces(claim.chunk, w);
            for p in pieces.iter().filter(|p| !p.reserved) {
                if let Some(r) = p.pfns.intersect(&window) {
                    for (pfn, order) in max_blocks(r) {
                        frees.free(pfn, order);
                    }
                }
            }
        }
    }

    /// `__init_single_page` over `r` (part of piece `p`), then `PG_reserved`
    /// for reserved pieces or, with `will_free`, `_refcount = 0`.
    #[inline]
    fn init_range(&self, p: &Piece, r: PfnRange, nid: NodeId, will_free: bool) {
        // SAFETY: `r` is part of a window claimed by this thread (or of the
        // eager ranges, never passed here); no other reference to these
        // struct pages exists until the window is done.
        let Some(pages) = (unsafe { self.memmap.pages_mut_unchecked(r) }) else {
            debug_assert!(false, "piece {r:?} without backing (checked in new)");
            return;
        };
        let as_ = match (p.reserved, will_free) {
            (true, _) => InitAs::Reserved,
            (false, true) => InitAs::Free,
            (false, false) => InitAs::Allocated,
        };
        // One piece lies in one section: `init_pages` writes it with one
        // flags word, one store of a whole struct page per page.
        memmap::init::init_pages(pages, r.start, p.zone, nid, as_);
        #[cfg(test)]
        if let Some(hook) = &self.init_hook {
            hook(r);
        }
    }

    /// Touch mode: one 64-byte store per page.
    #[inline]
    fn touch_range(&self, r: PfnRange) {
        // SAFETY: as in `init_range`: the window is ours alone.
        let Some(pages) = (unsafe { self.memmap.pages_mut_unchecked(r) }) else {
            return;
        };
        memmap::init::touch_pages(pages, r.start);
        #[cfg(test)]
        if let Some(hook) = &self.init_hook {
            hook(r);
        }
    }

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
    fn claimed_windows(&self, pos: usize) -> u64 {
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

    /// The pool: every deferred piece nobody has claimed, ascending per node
    /// (O(chunks); reads no struct page). Only stable while nothing claims.
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
                        plan.chunk_pieces(c).iter().filter_map(move |p| {
                            p.pfns.intersect(&untouched).map(|pfns| PoolPiece {
                                nid: plan.nid(),
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
                    nr_claims: rt.nr_claims.load(Ordering::Relaxed),
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
            .enumerate()
            .map(|(pos, (n, rt))| {
                let mine = || workers.iter().filter(|w| w.nid == n.nid());
                let ran = || mine().filter(|w| w.nr_claims > 0);
                let start = ran().map(|w| w.start_ns).min();
                let end = ran().map(|w| w.end_ns).max();
                NodeStats {
                    nid: n.nid(),
                    nr_pages: n.nr_pages(),
                    nr_reserved_pages: n.nr_reserved_pages(),
                    nr_chunks: n.nr_chunks() as u64,
                    nr_windows: rt.nr_windows_total(),
                    nr_claimed_windows: self.claimed_windows(pos),
                    nr_workers: n.nr_workers(),
                    has_local_cpus: n.has_local_cpus(),
                    nr_worker_pages: mine().map(|w| w.nr_pages).sum(),
                    nr_grown_windows: rt.nr_grown_windows.load(Ordering::Relaxed),
                    nr_grown_pages: rt.nr_grown_pages.load(Ordering::Relaxed),
                    nr_contended_growth_steps: rt.nr_contended_growth_steps.load(Ordering::Relaxed),
                    wall_ns: match (start, end) {
                        (Some(s), Some(e)) => e.saturating_sub(s),
                        _ => 0,
                    },
                    done: rt.windows_done_total() == rt.nr_windows_total(),
                }
            })
            .collect();
        DeferredReport::new(nodes, workers)
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
