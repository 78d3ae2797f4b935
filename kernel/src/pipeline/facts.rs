//! What the pipeline measured, recorded as it goes so that a boot that fails
//! part-way still reports what was known in its summary line.

use alloc::vec::Vec;

use memmap::page::MAX_NUMNODES;
use memmap::NodeId;

use deferred_init::DeferredReport;

use memmap::MAX_ORDER;

/// The summary's timeline entries: the schema's own types.
pub use memboot_contract::summary::{Phase, PhaseSpan};

/// How verification ended (`verify` in the summary).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerifyOutcome {
    /// The boot failed before verification.
    NotRun,
    Ok,
    Failed,
    /// `verify=off`, or a mode without Linux state (`touch`).
    Off,
}

impl VerifyOutcome {
    pub const fn name(self) -> &'static str {
        match self {
            VerifyOutcome::NotRun => "none",
            VerifyOutcome::Ok => "ok",
            VerifyOutcome::Failed => "failed",
            VerifyOutcome::Off => "off",
        }
    }
}

/// Everything the memory-init part of the summary line reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MmFacts {
    /// The `memmap=` mode (`none` if the boot failed before memory init).
    /// The summary key keeps the name `strategy` (the summary is a
    /// contract), but it holds the mode: `ondemand` and `touch` are modes,
    /// not `memmap::Strategy` values.
    pub strategy: &'static str,
    pub present_pages: u64,
    pub eager_pages: u64,
    /// Present pages of every zone below its node's highest zone.
    pub low_zone_pages: u64,
    pub deferred_pages: u64,
    pub reserved_pages: u64,
    /// Hole pages the boot CPU initialised as reserved (`eager_memmap`).
    pub hole_pages: u64,
    /// Hole pages a lazy vmemmap initialised with their sections, as each
    /// was first mapped (`ondemand`, whose boot writes no hole page).
    pub hole_pages_on_first_use: u64,
    pub memmap_boot_ns: u64,
    /// Building the free-block store (the bitmaps) before the hand-off.
    pub free_bitmaps_ns: u64,
    pub buddy_eager_ns: u64,
    pub deferred_ns: u64,
    /// Nodes with memory; `node_deferred_ns[..nr_nodes]` is by node index.
    pub nr_nodes: usize,
    pub node_deferred_ns: [u64; MAX_NUMNODES as usize],
    pub memblock_ns: u64,
    pub vmemmap_ns: u64,
    pub vmemmap_bytes: u64,
    /// Bytes per struct page (`struct_page=`).
    pub struct_page_bytes: u64,
    /// Where the buddy allocator keeps free blocks (`lists`, `bitmaps`;
    /// `none` before it exists).
    pub buddy_store: &'static str,
    /// Bytes of the allocator's structures beyond the struct pages.
    pub buddy_index_bytes: u64,
    /// Sections whose struct pages are mapped at the end of the boot: all
    /// present ones when mapped at boot, those first use needed otherwise.
    pub vmemmap_sections_mapped: u64,
    pub memory_block_ns: u64,
    pub memory_block_size: u64,
    /// How each section's block was found (`memory_block_lookup=`:
    /// `indexed` or `linear`; `none` before the blocks were created).
    pub memory_block_lookup: &'static str,
    pub nr_memory_blocks: u64,
    pub free_pages: u64,
    pub deferred_workers: u64,
    pub grown_pages: u64,
    pub verify: VerifyOutcome,
    pub verify_ns: u64,
    pub phases: Vec<PhaseSpan>,
    /// Kernel entry → memory is ready. The one definition, in every mode
    /// and for the bench's Linux figure (README "Output"): memory init has
    /// stopped blocking the boot and every present, non-reserved page can
    /// be had from the allocator, initialised or claimable by growth.
    /// - `deferred`: the boot CPU is back from waiting for the deferred-init
    ///   workers (Linux: `page_alloc_init_late()` returns from its wait for
    ///   the `pgdatinit` threads);
    /// - `regions`, `perpfn`: the boot CPU has handed its pages to the
    ///   buddy allocator (it did all the work itself);
    /// - `ondemand`: the untouched pool is handed to the allocator, which
    ///   grows into it (`ondemand_drain=on` drains it after this point);
    /// - `touch`: never, it has no allocator: 0, as for a failed boot.
    pub allocatable_ns: u64,
    /// Struct pages written when memory was ready: eager pages, hole pages
    /// initialised as reserved, and whatever workers and growth had done by
    /// then (0 where `allocatable_ns` is 0).
    pub pages_initialised_at_allocatable: u64,
    /// Struct pages written by the end of the boot (the same three parts).
    pub pages_initialised: u64,
    /// `ondemand_drain=on`: the drain's first claim → the pool empty, over
    /// all nodes / per node (by node index), and the workers that ran.
    pub drain_ns: u64,
    pub node_drain_ns: [u64; MAX_NUMNODES as usize],
    pub drain_workers: u64,
    /// Present pages still uninitialised at the end (`ondemand`).
    pub pool_pages: u64,
    /// Pages initialised by drain workers after boot (`ondemand_drain=on`).
    pub drained_pages: u64,
    pub alloc_test: AllocTestReport,
}

impl MmFacts {
    /// Struct pages written so far: the boot CPU's (eager pages and the
    /// hole pages it initialised as reserved), the holes a lazy vmemmap
    /// wrote with their sections, and those of deferred-init workers,
    /// drain workers and growth (`report`).
    pub fn pages_initialised(&self, report: &DeferredReport) -> u64 {
        let after_boot_cpu: u64 = report
            .nodes
            .iter()
            .map(|n| n.nr_worker_pages + n.nr_grown_pages)
            .sum();
        self.eager_pages + self.hole_pages + self.hole_pages_on_first_use + after_boot_cpu
    }

    pub const EMPTY: MmFacts = MmFacts {
        strategy: "none",
        present_pages: 0,
        eager_pages: 0,
        low_zone_pages: 0,
        deferred_pages: 0,
        reserved_pages: 0,
        hole_pages: 0,
        hole_pages_on_first_use: 0,
        memmap_boot_ns: 0,
        free_bitmaps_ns: 0,
        buddy_eager_ns: 0,
        deferred_ns: 0,
        nr_nodes: 0,
        node_deferred_ns: [0; MAX_NUMNODES as usize],
        memblock_ns: 0,
        vmemmap_ns: 0,
        vmemmap_bytes: 0,
        struct_page_bytes: 0,
        buddy_store: "none",
        buddy_index_bytes: 0,
        vmemmap_sections_mapped: 0,
        memory_block_ns: 0,
        memory_block_size: 0,
        memory_block_lookup: "none",
        nr_memory_blocks: 0,
        free_pages: 0,
        deferred_workers: 0,
        grown_pages: 0,
        verify: VerifyOutcome::NotRun,
        verify_ns: 0,
        phases: Vec::new(),
        allocatable_ns: 0,
        pages_initialised_at_allocatable: 0,
        pages_initialised: 0,
        drain_ns: 0,
        node_drain_ns: [0; MAX_NUMNODES as usize],
        drain_workers: 0,
        pool_pages: 0,
        drained_pages: 0,
        alloc_test: AllocTestReport::NOT_RUN,
    };
}

/// The facts behind a lock that is held only for the moment of a record,
/// so the panic path can still read them (with `try_lock`).
pub struct Facts(spin::Mutex<MmFacts>);

impl Facts {
    pub const fn new() -> Self {
        Facts(spin::Mutex::new(MmFacts::EMPTY))
    }

    /// Update some facts.
    pub fn record(&self, f: impl FnOnce(&mut MmFacts)) {
        f(&mut self.0.lock());
    }

    /// Record that `phase` ran on `cpu` from `start_ns` to `end_ns`.
    pub fn phase(&self, phase: Phase, cpu: u32, node: Option<NodeId>, start_ns: u64, end_ns: u64) {
        self.record(|f| {
            f.phases.push(PhaseSpan {
                phase,
                cpu,
                node,
                nodes: None,
                start_ns,
                end_ns,
            })
        });
    }

    /// Record that `phase` ran on `cpu` for `nodes` nodes in turn, the
    /// first starting at `start_ns`, the last ending at `end_ns`.
    pub fn phase_over_nodes(&self, phase: Phase, cpu: u32, nodes: u32, start_ns: u64, end_ns: u64) {
        self.record(|f| {
            f.phases.push(PhaseSpan {
                phase,
                cpu,
                node: None,
                nodes: Some(nodes),
                start_ns,
                end_ns,
            })
        });
    }

    /// Memory is ready at `now_ns` (the definition: [`MmFacts::allocatable_ns`]),
    /// with the struct pages `report` says were written by then, and the
    /// `holes_on_first_use` a lazy vmemmap had written. Never inlined: its
    /// first instruction ends the instruction profile's `to_ready` phase.
    #[inline(never)]
    pub fn memory_ready(&self, now_ns: u64, report: &DeferredReport, holes_on_first_use: u64) {
        self.record(|f| {
            f.allocatable_ns = now_ns;
            f.hole_pages_on_first_use = holes_on_first_use;
            f.pages_initialised_at_allocatable = f.pages_initialised(report);
        });
    }

    /// Read the facts, unless the lock is held (a fault during a record):
    /// then `None`, and the caller reports [`MmFacts::EMPTY`].
    pub fn with<R>(&self, f: impl FnOnce(&MmFacts) -> R) -> Option<R> {
        self.0.try_lock().map(|g| f(&g))
    }
}

impl Default for Facts {
    fn default() -> Self {
        Self::new()
    }
}

/// The orders the allocation test mixes, and the summary's `alloc_orders`.
pub const ORDERS: [u32; 4] = [0, 3, 9, MAX_ORDER];

/// One order's figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OrderFigures {
    pub order: u32,
    pub count: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    /// Block windows the allocations of this order initialised.
    pub growth_steps: u64,
}

impl OrderFigures {
    pub const fn none(order: u32) -> Self {
        OrderFigures {
            order,
            count: 0,
            p50_ns: 0,
            p99_ns: 0,
            max_ns: 0,
            growth_steps: 0,
        }
    }
}

/// The growth steps the test's allocations took (`ondemand`): how long
/// each took, one block window of struct pages initialised per step
/// (`deferred_init::GROW_CLAIM_WINDOWS`). The cost `ondemand` moves from
/// boot to the allocations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GrowthFigures {
    pub count: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

impl GrowthFigures {
    pub const NONE: GrowthFigures = GrowthFigures {
        count: 0,
        p50_ns: 0,
        p99_ns: 0,
        max_ns: 0,
    };
}

/// What the allocation test did (`alloc_test`, which fills it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllocTestReport {
    /// Bytes asked for per node (the option), and allocated on all nodes.
    pub bytes_per_node: u64,
    pub allocated_pages: u64,
    pub nr_nodes: usize,
    pub failed: u64,
    pub orders: [OrderFigures; 4],
    pub growth: GrowthFigures,
    pub wall_ns: u64,
    /// The per-CPU caches order-0 pages went through: pages per batch and
    /// the most a cache held (0 without caches).
    pub pcp_batch: u64,
    pub pcp_high: u64,
}

impl AllocTestReport {
    /// The figures of a test that did not run.
    pub const NOT_RUN: AllocTestReport = AllocTestReport {
        bytes_per_node: 0,
        allocated_pages: 0,
        nr_nodes: 0,
        failed: 0,
        orders: [
            OrderFigures::none(ORDERS[0]),
            OrderFigures::none(ORDERS[1]),
            OrderFigures::none(ORDERS[2]),
            OrderFigures::none(ORDERS[3]),
        ],
        growth: GrowthFigures::NONE,
        wall_ns: 0,
        pcp_batch: 0,
        pcp_high: 0,
    };
}
