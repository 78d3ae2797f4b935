//! What the pipeline measured, recorded as it goes so that a boot that fails
//! part-way still reports what was known in its summary line.

use alloc::borrow::Cow;
use alloc::vec;
use alloc::vec::Vec;
use core::ops::{Deref, DerefMut};

use memmap::page::MAX_NUMNODES;
use memmap::NodeId;

use deferred_init::{Clock, DeferredReport};

use memmap::MAX_ORDER;

use memboot_contract::summary::Summary;
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

/// Everything the memory-init part of the summary line reports: the
/// contract's [`Summary`] itself, so that a fact is declared once, as a key
/// of the schema, and each step records it under the key's name
/// (`f.free_pages = …`, through `DerefMut`). The keys the pipeline does not
/// measure (the boot facts, `status`, `total_ns`, `summary_version`) stay
/// as [`MmFacts::EMPTY`] has them: `report::write_summary_line` sets them
/// on the line it writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MmFacts(Summary<'static>);

impl Deref for MmFacts {
    type Target = Summary<'static>;
    fn deref(&self) -> &Summary<'static> {
        &self.0
    }
}

impl DerefMut for MmFacts {
    fn deref_mut(&mut self) -> &mut Summary<'static> {
        &mut self.0
    }
}

/// [`ORDERS`] as the summary's numbers (`alloc_orders`).
const ORDERS_U64: [u64; 4] = [
    ORDERS[0] as u64,
    ORDERS[1] as u64,
    ORDERS[2] as u64,
    ORDERS[3] as u64,
];

/// A by-order figure of a test that did not run.
const NONE_BY_ORDER: [u64; 4] = [0; 4];

impl MmFacts {
    /// The facts of a boot that measured nothing: every number 0, `none`
    /// for the choices not made yet, and the allocation test's keys as
    /// [`AllocTestReport::NOT_RUN`] records them.
    pub const EMPTY: MmFacts = MmFacts(Summary {
        strategy: Cow::Borrowed("none"),
        verify: Cow::Borrowed(VerifyOutcome::NotRun.name()),
        memory_block_lookup: Cow::Borrowed("none"),
        buddy_store: Cow::Borrowed("none"),
        alloc_orders: Cow::Borrowed(&ORDERS_U64),
        alloc_count: Cow::Borrowed(&NONE_BY_ORDER),
        alloc_p50_ns: Cow::Borrowed(&NONE_BY_ORDER),
        alloc_p99_ns: Cow::Borrowed(&NONE_BY_ORDER),
        alloc_max_ns: Cow::Borrowed(&NONE_BY_ORDER),
        alloc_grow_steps: Cow::Borrowed(&NONE_BY_ORDER),
        ..Summary::ZERO
    });

    /// Nodes with memory: the length of the by-node keys.
    pub fn nr_nodes(&self) -> usize {
        self.node_deferred_ns.len()
    }

    /// The by-node keys (`node_deferred_ns`, `node_drain_ns`), 0 for each
    /// of `nr_nodes` nodes, at most [`MAX_NUMNODES`]: the nodes a struct
    /// page can name, and all the later steps can have figures for.
    pub fn set_nodes(&mut self, nr_nodes: usize) {
        let nr_nodes = nr_nodes.min(MAX_NUMNODES as usize);
        self.0.node_deferred_ns = vec![0; nr_nodes].into();
        self.0.node_drain_ns = vec![0; nr_nodes].into();
    }

    /// Struct pages written so far: the boot CPU's (eager pages and the
    /// hole pages it initialised as reserved), the holes a lazy vmemmap
    /// wrote with their sections, and those of deferred-init workers,
    /// drain workers, growth and pages taken out of the pool (`report`).
    pub fn pages_initialised(&self, report: &DeferredReport) -> u64 {
        let after_boot_cpu: u64 = report
            .nodes
            .iter()
            .map(|n| n.nr_worker_pages + n.nr_grown_pages + n.nr_taken_pages)
            .sum();
        self.eager_pages + self.hole_pages + self.hole_pages_on_first_use + after_boot_cpu
    }

    /// The allocation test's figures under their keys: its rows by order
    /// become the summary's arrays by order.
    pub fn record_alloc_test(&mut self, a: &AllocTestReport) {
        let by_order = |figure: fn(&OrderFigures) -> u64| -> Cow<'static, [u64]> {
            a.orders.iter().map(figure).collect::<Vec<u64>>().into()
        };
        let s = &mut self.0;
        s.alloc_test_bytes = a.bytes_per_node;
        s.alloc_test_pages = a.allocated_pages;
        s.alloc_test_ns = a.wall_ns;
        s.alloc_test_failed = a.failed;
        s.alloc_orders = by_order(|f| f.order.into());
        s.alloc_count = by_order(|f| f.count);
        s.alloc_p50_ns = by_order(|f| f.p50_ns);
        s.alloc_p99_ns = by_order(|f| f.p99_ns);
        s.alloc_max_ns = by_order(|f| f.max_ns);
        s.alloc_grow_steps = by_order(|f| f.growth_steps);
        s.grow_step_count = a.growth.count;
        s.grow_step_p50_ns = a.growth.p50_ns;
        s.grow_step_p99_ns = a.growth.p99_ns;
        s.grow_step_max_ns = a.growth.max_ns;
        s.alloc_pcp_batch = a.pcp_batch;
        s.alloc_pcp_high = a.pcp_high;
    }
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
            f.phases.to_mut().push(PhaseSpan {
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
            f.phases.to_mut().push(PhaseSpan {
                phase,
                cpu,
                node: None,
                nodes: Some(nodes),
                start_ns,
                end_ns,
            })
        });
    }

    /// Memory is ready now (the definition: [`Summary::allocatable_ns`]):
    /// stamped from `clock` and returned. Never inlined, and the clock is
    /// read first thing inside: its first instruction ends the instruction
    /// profile's `to_ready` phase, so what that phase and
    /// `tests/first-run-code.sh` count is what the stamp times.
    #[inline(never)]
    pub fn memory_ready(&self, clock: &dyn Clock) -> u64 {
        let now_ns = clock.now_ns();
        self.record(|f| f.allocatable_ns = now_ns);
        now_ns
    }

    /// The struct pages written by the time memory was ready: those
    /// `report` counts and the `holes_on_first_use` a lazy vmemmap had
    /// written.
    pub fn written_at_ready(&self, report: &DeferredReport, holes_on_first_use: u64) {
        self.record(|f| {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `EMPTY` holds the allocation test's keys as a test that did not run
    /// records them, so a boot that stops before the test and one that
    /// skips it report the same arrays.
    #[test]
    fn empty_facts_hold_the_keys_of_a_test_that_did_not_run() {
        let mut facts = MmFacts::EMPTY;
        facts.record_alloc_test(&AllocTestReport::NOT_RUN);
        assert_eq!(facts, MmFacts::EMPTY);
        assert_eq!(*facts.alloc_orders, [0, 3, 9, 10]);
    }

    /// Each allocation-test figure lands under its key: every number
    /// distinct, the rows by order as arrays by order.
    #[test]
    fn the_alloc_test_figures_land_under_their_keys() {
        let mut a = AllocTestReport {
            bytes_per_node: 82,
            allocated_pages: 83,
            nr_nodes: 3,
            failed: 85,
            growth: GrowthFigures {
                count: 86,
                p50_ns: 87,
                p99_ns: 88,
                max_ns: 89,
            },
            wall_ns: 84,
            pcp_batch: 1100,
            pcp_high: 1101,
            ..AllocTestReport::NOT_RUN
        };
        for (i, o) in a.orders.iter_mut().enumerate() {
            let i = i as u64;
            (o.count, o.p50_ns, o.p99_ns) = (10 + i, 20 + i, 30 + i);
            (o.max_ns, o.growth_steps) = (40 + i, 50 + i);
        }
        let mut f = MmFacts::EMPTY;
        f.record_alloc_test(&a);
        let numbers = [
            ("alloc_test_bytes", f.alloc_test_bytes, 82),
            ("alloc_test_pages", f.alloc_test_pages, 83),
            ("alloc_test_ns", f.alloc_test_ns, 84),
            ("alloc_test_failed", f.alloc_test_failed, 85),
            ("grow_step_count", f.grow_step_count, 86),
            ("grow_step_p50_ns", f.grow_step_p50_ns, 87),
            ("grow_step_p99_ns", f.grow_step_p99_ns, 88),
            ("grow_step_max_ns", f.grow_step_max_ns, 89),
            ("alloc_pcp_batch", f.alloc_pcp_batch, 1100),
            ("alloc_pcp_high", f.alloc_pcp_high, 1101),
        ];
        for (key, got, want) in numbers {
            assert_eq!(got, want, "{key}");
        }
        assert_eq!(*f.alloc_orders, [0, 3, 9, MAX_ORDER as u64]);
        assert_eq!(*f.alloc_count, [10, 11, 12, 13]);
        assert_eq!(*f.alloc_p50_ns, [20, 21, 22, 23]);
        assert_eq!(*f.alloc_p99_ns, [30, 31, 32, 33]);
        assert_eq!(*f.alloc_max_ns, [40, 41, 42, 43]);
        assert_eq!(*f.alloc_grow_steps, [50, 51, 52, 53]);
    }

    /// The by-node keys get an entry per node, never more than struct
    /// pages can name (a count beyond must not exhaust the heap).
    #[test]
    fn the_by_node_keys_have_an_entry_per_node_up_to_max_numnodes() {
        let mut f = MmFacts::EMPTY;
        assert_eq!(f.nr_nodes(), 0);
        f.set_nodes(3);
        assert_eq!(*f.node_deferred_ns, [0; 3]);
        assert_eq!(*f.node_drain_ns, [0; 3]);
        assert_eq!(f.nr_nodes(), 3);
        f.set_nodes(usize::MAX);
        assert_eq!(f.node_drain_ns.len(), MAX_NUMNODES as usize);
        assert_eq!(f.nr_nodes(), MAX_NUMNODES as usize);
    }
}
