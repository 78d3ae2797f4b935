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
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use memmap::store::{Memmap, MemmapBacking};
use memmap::{NodeId, PfnRange, ZoneType};

use crate::buddy::{BuddyAllocator, NR_ZONES};
use crate::claim_hooks::{ClaimHooks, NoClaimHooks};
use crate::clock::Clock;
use crate::page_alloc::{Grow, PageAllocator};
use crate::plan::{CpuId, DeferredPlan, Piece, WINDOW_NR_PAGES};

mod claims;
mod errors;
mod grow;
mod pool;
mod report;
mod taken;
mod window_init;
mod workers;

pub use errors::DeferredInitError;

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
    /// Pages taken out of the pool ([`DeferredInit::take_from_pool`]).
    nr_taken_pages: AtomicU64,
}

impl NodeRuntime {
    fn new(plan: &crate::plan::NodePlan) -> Self {
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
            nr_taken_pages: AtomicU64::new(0),
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
    /// Reserved ranges taken out of the pool, sorted by (node, PFN)
    /// ([`DeferredInit::take_from_pool`]); `has_taken` says whether any is.
    taken: spin::Mutex<Vec<(NodeId, PfnRange)>>,
    has_taken: AtomicBool,
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
            taken: spin::Mutex::new(Vec::new()),
            has_taken: AtomicBool::new(false),
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

    // Here, in the module that defines `DeferredInit`: the phase table
    // names this function by its symbol, which an impl block in a submodule
    // would change (`run::workers::<impl …>::run_cpu_workers`).
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
}
