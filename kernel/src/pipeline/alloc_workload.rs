//! The allocation workload, once memory is ready (`alloc_test=`, whose
//! name its log lines and summary phase keep): what allocations pay for
//! how memory was initialised. On every node, in turn, all CPUs at once allocate the
//! node's share in a mix of orders (0, 3, 9 and 10: 4 MiB of each per
//! round of 16 MiB, interleaved), timing every allocation, then free
//! everything back. Each CPU allocates and frees order-0 pages through its
//! own cache (`deferred_init::pcp`), as Linux does, and drains it at the end. Under `ondemand` the first allocations of a node grow
//! it out of the untouched pool; with `ondemand_drain=on` every CPU also
//! takes one drain claim after each of its rounds, so growth and draining
//! race on the same claims.
//!
//! Latencies go into log-linear histograms (64 sub-buckets per power of
//! two: p50/p99 within 1.6 %, the maximum exact), shared by all CPUs with
//! atomic counters, so the test needs no memory per allocation beyond the
//! list of blocks to free.

use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use deferred_init::{Clock, CpuId, DeferredInit, Executor, PageAllocator};
use memmap::store::MemmapBacking;
use memmap::zones::ZoneLayout;
use memmap::{NodeId, Pfn, ZoneType, PAGE_SHIFT};

use memboot_contract::options::ALLOC_TEST_ROUND_BYTES;

use super::context::Ctx;
use super::error::{AllocTestError, PipelineError};
use super::facts::{AllocTestReport, Facts, GrowthFigures, OrderFigures, Phase, ORDERS};
use super::seams::Log;

/// The allocation test, if `alloc_test=` asks for one and the
/// mode has an allocator; logged and recorded.
pub fn run<B: MemmapBacking>(
    cx: &Ctx<'_>,
    pages: PageAllocator<'_, '_, B>,
    di: &DeferredInit<'_, B>,
    layout: &ZoneLayout,
) -> Result<(), PipelineError> {
    if cx.opts.alloc_test_bytes == 0 || !cx.mode.has_allocator() {
        return Ok(());
    }
    let drain = cx.drains();
    let workload = Workload {
        bytes_per_node: cx.opts.alloc_test_bytes,
        drain,
    };
    let report = test(pages, di, layout, cx.executor, cx.clock, workload, cx.facts)
        .map_err(PipelineError::AllocTest)?;
    log(cx.log, &report, cx.executor.nr_cpus(), drain);
    cx.facts.record(|f| f.record_alloc_test(&report));
    Ok(())
}

/// The first error any CPU met (the rest would repeat it).
struct FirstError(spin::Mutex<Option<AllocTestError>>);

impl FirstError {
    fn set(&self, e: AllocTestError) {
        self.0.lock().get_or_insert(e);
    }
}

/// Per round, 4 MiB of each order.
const ROUND_PAGES: u64 = ALLOC_TEST_ROUND_BYTES >> PAGE_SHIFT;
const PAGES_PER_ORDER_PER_ROUND: u64 = ROUND_PAGES / ORDERS.len() as u64;

/// Sub-buckets per power of two (2^6: relative error below 1/64).
const SUB_BITS: u32 = 6;
const SUB: u64 = 1 << SUB_BITS;
/// Values up to 2^40 ns (18 minutes) are bucketed; larger ones clamp.
const MAX_EXP: u32 = 40;
const NR_BUCKETS: usize = (SUB + (MAX_EXP - SUB_BITS + 1) as u64 * SUB) as usize;

/// A log-linear histogram of nanosecond latencies, shared between CPUs.
pub struct Histogram {
    buckets: Vec<AtomicU32>,
    count: AtomicU64,
    max: AtomicU64,
}

impl Histogram {
    pub fn new() -> Self {
        Self {
            buckets: (0..NR_BUCKETS).map(|_| AtomicU32::new(0)).collect(),
            count: AtomicU64::new(0),
            max: AtomicU64::new(0),
        }
    }

    fn bucket(v: u64) -> usize {
        if v < SUB {
            return v as usize;
        }
        let exp = (63 - v.leading_zeros()).min(MAX_EXP);
        let v = v.min((1 << (MAX_EXP + 1)) - 1);
        let sub = (v >> (exp - SUB_BITS)) & (SUB - 1);
        (SUB + (exp - SUB_BITS) as u64 * SUB + sub) as usize
    }

    /// The largest value bucket `b` holds (what percentiles report).
    fn bucket_top(b: usize) -> u64 {
        let b = b as u64;
        if b < SUB {
            return b;
        }
        let exp = (b - SUB) / SUB + SUB_BITS as u64;
        let sub = (b - SUB) % SUB;
        ((SUB + sub + 1) << (exp - SUB_BITS as u64)) - 1
    }

    pub fn record(&self, ns: u64) {
        self.buckets[Self::bucket(ns)].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.max.fetch_max(ns, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    pub fn max(&self) -> u64 {
        self.max.load(Ordering::Relaxed)
    }

    /// The value at or below which a fraction `per_mille / 1000` of the
    /// samples lie (the top of that sample's bucket, capped at the max).
    pub fn percentile(&self, per_mille: u64) -> u64 {
        let count = self.count();
        if count == 0 {
            return 0;
        }
        let rank = (count * per_mille).div_ceil(1000).max(1);
        let mut seen = 0;
        for (b, n) in self.buckets.iter().enumerate() {
            seen += n.load(Ordering::Relaxed) as u64;
            if seen >= rank {
                return Self::bucket_top(b).min(self.max());
            }
        }
        self.max()
    }
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

/// The growth steps' figures from their histogram.
fn growth_figures(h: &Histogram) -> GrowthFigures {
    GrowthFigures {
        count: h.count(),
        p50_ns: h.percentile(500),
        p99_ns: h.percentile(990),
        max_ns: h.max(),
    }
}

/// A held block: head PFN and order, packed (orders fit in 6 bits).
fn pack(pfn: Pfn, order: u32) -> u64 {
    (pfn << 6) | order as u64
}

fn unpack(v: u64) -> (Pfn, u32) {
    (v >> 6, (v & 63) as u32)
}

/// The shared state of one node's run.
struct NodeRun<'a, B> {
    pages: PageAllocator<'a, 'a, B>,
    /// Deferred init, for the drain's workers and the pool's size.
    di: &'a DeferredInit<'a, B>,
    clock: &'a dyn Clock,
    nid: NodeId,
    zone: ZoneType,
    nr_rounds: u64,
    next_round: AtomicU64,
    histograms: &'a [Histogram; 4],
    growth_steps: &'a [AtomicU64; 4],
    /// Every growth step's duration, all orders.
    step_histogram: &'a Histogram,
    failed: AtomicU64,
    drain: bool,
    error: &'a FirstError,
}

impl<B: MemmapBacking> NodeRun<'_, B> {
    /// One timed allocation through `pages`, this CPU's allocator.
    fn alloc(&self, pages: PageAllocator<'_, '_, B>, slot: usize, held: &mut Vec<u64>) {
        let order = ORDERS[slot];
        let t0 = self.clock.now_ns();
        let steps = self.step_histogram;
        let r = pages.alloc_pages_timed(self.nid, self.zone, order, self.clock, &mut |ns| {
            steps.record(ns)
        });
        let ns = self.clock.now_ns().saturating_sub(t0);
        match r {
            Ok(a) => {
                self.histograms[slot].record(ns);
                self.growth_steps[slot].fetch_add(a.growth_steps.into(), Ordering::Relaxed);
                held.push(pack(a.pfn, order));
            }
            Err(_) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// One round: 4 MiB of each order, interleaved.
    fn round(&self, pages: PageAllocator<'_, '_, B>, held: &mut Vec<u64>) {
        let per = |slot: usize| PAGES_PER_ORDER_PER_ROUND >> ORDERS[slot];
        let n0 = per(0);
        for i in 0..n0 {
            self.alloc(pages, 0, held);
            for slot in 1..ORDERS.len() {
                if i % (n0 / per(slot)) == 0 {
                    self.alloc(pages, slot, held);
                }
            }
        }
    }

    /// This CPU's share: rounds until none is left, a drain claim after each.
    fn cpu_share(&self, cpu: CpuId, held: &mut Vec<u64>) {
        let drainers: Vec<usize> = self.di.cpu_workers(cpu).collect();
        let pages = self.pages.on_cpu(cpu);
        let mut turn = 0;
        while self.next_round.fetch_add(1, Ordering::Relaxed) < self.nr_rounds {
            self.round(pages, held);
            if self.drain && !drainers.is_empty() {
                let worker = drainers[turn % drainers.len()];
                if let Err(e) = self.di.worker_step(worker, self.clock) {
                    self.error.set(AllocTestError::DrainStep(e));
                }
                turn += 1;
            }
        }
    }
}

/// Allocations one round makes.
const ALLOCS_PER_ROUND: u64 = {
    let mut n = 0;
    let mut i = 0;
    while i < ORDERS.len() {
        n += PAGES_PER_ORDER_PER_ROUND >> ORDERS[i];
        i += 1;
    }
    n
};

/// The most alloc_test phases recorded one per (CPU, node); on a machine
/// with more CPUs × nodes, each CPU gets one phase over all nodes instead
/// ([`Facts::phase_over_nodes`]; README "phases"). Why: each phase is ~90
/// bytes of the summary line, and serial output under TCG costs ~1 µs a
/// byte, far more with hundreds of vCPUs on a few host cores: 255 CPUs ×
/// 64 nodes unfolded is 16,320 phases, ~1.45 MB, which took over 15
/// minutes to send on the 2-core build machine. 1024 keeps every machine
/// up to 32 × 32 (and 16 × 16, the largest tested) per node.
pub const MAX_NODE_SPANS: u64 = 1024;

/// One CPU's alloc_test spans of all nodes, folded: first start, last end.
struct FoldedSpan {
    start_ns: AtomicU64,
    end_ns: AtomicU64,
    nodes: AtomicU32,
}

impl FoldedSpan {
    fn new() -> Self {
        Self {
            start_ns: AtomicU64::new(u64::MAX),
            end_ns: AtomicU64::new(0),
            nodes: AtomicU32::new(0),
        }
    }

    fn add(&self, start_ns: u64, end_ns: u64) {
        self.start_ns.fetch_min(start_ns, Ordering::Relaxed);
        self.end_ns.fetch_max(end_ns, Ordering::Relaxed);
        self.nodes.fetch_add(1, Ordering::Relaxed);
    }
}

/// Where each CPU's span of a node goes.
enum Spans<'a> {
    /// One phase per (CPU, node), recorded as it ends.
    PerNode(&'a Facts),
    /// Folded per CPU (indexed by CPU), recorded after the last node.
    PerCpu(&'a [FoldedSpan]),
}

/// What the test asks of each node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Workload {
    /// At most this much per node (and at most half the node).
    pub bytes_per_node: u64,
    /// Each CPU takes a drain claim of `di`'s pool after each round
    /// (`ondemand_drain=on`).
    pub drain: bool,
}

/// Run the test on every node of `layout`: at most `bytes_per_node` each,
/// and at most half of what the node can allocate, so it never drives a
/// node out of memory.
pub fn test<B: MemmapBacking>(
    pages: PageAllocator<'_, '_, B>,
    di: &DeferredInit<'_, B>,
    layout: &ZoneLayout,
    executor: &dyn Executor,
    clock: &dyn Clock,
    workload: Workload,
    facts: &Facts,
) -> Result<AllocTestReport, AllocTestError> {
    let Workload {
        bytes_per_node,
        drain,
    } = workload;
    let error = FirstError(spin::Mutex::new(None));
    let histograms: [Histogram; 4] = core::array::from_fn(|_| Histogram::new());
    let growth_steps: [AtomicU64; 4] = core::array::from_fn(|_| AtomicU64::new(0));
    let step_histogram = Histogram::new();
    let (pcp_batch, pcp_high) = pages.cpu_cache_pages();
    let mut report = AllocTestReport {
        bytes_per_node,
        nr_nodes: layout.nodes().len(),
        pcp_batch,
        pcp_high,
        ..AllocTestReport::NOT_RUN
    };
    let nr_cpus = executor.nr_cpus();
    let folded: Vec<FoldedSpan> = if nr_cpus as u64 * layout.nodes().len() as u64 > MAX_NODE_SPANS {
        (0..nr_cpus).map(|_| FoldedSpan::new()).collect()
    } else {
        Vec::new()
    };
    let spans = if folded.is_empty() {
        Spans::PerNode(facts)
    } else {
        Spans::PerCpu(&folded)
    };
    let start = clock.now_ns();
    for node in layout.nodes() {
        let Some(zone) = layout.highest_zone(node.nid) else {
            continue;
        };
        let allocatable = pages.buddy().nr_free_pages(node.nid, zone.zone)
            + di.pool_free_pages(node.nid, zone.zone);
        let nr_pages = (bytes_per_node >> PAGE_SHIFT).min(allocatable / 2);
        let run = NodeRun {
            pages,
            di,
            clock,
            nid: node.nid,
            zone: zone.zone,
            nr_rounds: nr_pages / ROUND_PAGES,
            next_round: AtomicU64::new(0),
            histograms: &histograms,
            growth_steps: &growth_steps,
            step_histogram: &step_histogram,
            failed: AtomicU64::new(0),
            drain,
            error: &error,
        };
        report.allocated_pages += run_node(&run, executor, &spans);
        report.failed += run.failed.load(Ordering::Relaxed);
    }
    report.wall_ns = clock.now_ns() - start;
    record_folded_spans(&folded, facts);
    report.orders = order_figures(&histograms, &growth_steps);
    report.growth = growth_figures(&step_histogram);
    match error.0.into_inner() {
        Some(e) => Err(e),
        None => Ok(report),
    }
}

/// Each order's latencies and growth steps, from the test's histograms.
fn order_figures(histograms: &[Histogram; 4], growth_steps: &[AtomicU64; 4]) -> [OrderFigures; 4] {
    core::array::from_fn(|slot| {
        let h = &histograms[slot];
        OrderFigures {
            order: ORDERS[slot],
            count: h.count(),
            p50_ns: h.percentile(500),
            p99_ns: h.percentile(990),
            max_ns: h.max(),
            growth_steps: growth_steps[slot].load(Ordering::Relaxed),
        }
    })
}

/// The per-CPU phases, when the test folded its (CPU, node) phases per CPU:
/// one phase per CPU that took part, over the nodes it ran on.
fn record_folded_spans(folded: &[FoldedSpan], facts: &Facts) {
    for (cpu, f) in folded.iter().enumerate() {
        let nodes = f.nodes.load(Ordering::Relaxed);
        if nodes > 0 {
            let (start_ns, end_ns) = (
                f.start_ns.load(Ordering::Relaxed),
                f.end_ns.load(Ordering::Relaxed),
            );
            facts.phase_over_nodes(Phase::AllocTest, cpu as CpuId, nodes, start_ns, end_ns);
        }
    }
}

/// One node: allocate on all CPUs, then free on all CPUs. Returns the
/// pages allocated.
fn run_node<B: MemmapBacking>(
    run: &NodeRun<'_, B>,
    executor: &dyn Executor,
    spans: &Spans<'_>,
) -> u64 {
    let nr_cpus = executor.nr_cpus() as u64;
    let per_cpu = (run.nr_rounds.div_ceil(nr_cpus.max(1)) * ALLOCS_PER_ROUND) as usize;
    let lists: Vec<spin::Mutex<Vec<u64>>> = (0..nr_cpus)
        .map(|_| spin::Mutex::new(Vec::with_capacity(per_cpu)))
        .collect();
    executor.on_each_cpu(&|cpu| {
        let start = run.clock.now_ns();
        let mut held = lists[cpu as usize].lock();
        run.cpu_share(cpu, &mut held);
        let end = run.clock.now_ns();
        match spans {
            Spans::PerNode(facts) => facts.phase(Phase::AllocTest, cpu, Some(run.nid), start, end),
            Spans::PerCpu(folded) => folded[cpu as usize].add(start, end),
        }
    });
    let pages = lists
        .iter()
        .flat_map(|l| {
            l.lock()
                .iter()
                .map(|&v| 1u64 << unpack(v).1)
                .collect::<Vec<_>>()
        })
        .sum();
    executor.on_each_cpu(&|cpu| {
        let pages = run.pages.on_cpu(cpu);
        for &v in lists[cpu as usize].lock().iter() {
            let (pfn, order) = unpack(v);
            // Blocks this CPU allocated above and nobody else touched: a
            // refusal is an allocator bug, reported, not ignored.
            if let Err(err) = pages.free_pages(pfn, order) {
                run.error.set(AllocTestError::Free { pfn, order, err });
            }
        }
        // Back to the lists before the next node, and before verification,
        // which counts a cached page as lost.
        pages.drain_cpu_cache();
    });
    pages
}

/// The stage's log lines: what was allocated, then a line per order.
pub fn log(log: &dyn Log, r: &AllocTestReport, nr_cpus: usize, drain: bool) {
    log.line(format_args!(
        "alloc_test: {} MiB per node asked, {} MiB allocated on {} nodes from {} CPUs in {} ms{}{}",
        r.bytes_per_node >> 20,
        r.allocated_pages >> (20 - PAGE_SHIFT),
        r.nr_nodes,
        nr_cpus,
        r.wall_ns / 1_000_000,
        if drain {
            ", pool drained meanwhile"
        } else {
            ""
        },
        if r.failed > 0 {
            " (some allocations failed)"
        } else {
            ""
        },
    ));
    for o in &r.orders {
        log.line(format_args!(
            "alloc_test: order {:2}: {} allocations, p50 {} ns, p99 {} ns, max {} ns, {} growth steps",
            o.order, o.count, o.p50_ns, o.p99_ns, o.max_ns, o.growth_steps
        ));
    }
    let g = &r.growth;
    if g.count > 0 {
        log.line(format_args!(
            "alloc_test: growth: {} steps of one block window each, p50 {} ns, p99 {} ns, max {} ns",
            g.count, g.p50_ns, g.p99_ns, g.max_ns
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_within_one_sixty_fourth() {
        for v in [
            0u64,
            1,
            63,
            64,
            65,
            127,
            128,
            1000,
            123_456,
            1 << 30,
            (1 << 40) + 5,
        ] {
            let b = Histogram::bucket(v);
            let top = Histogram::bucket_top(b);
            assert!(top >= v.min((1 << 41) - 1), "{v}: top {top}");
            assert!(top - v.min(top) <= v / 64, "{v}: bucket top {top} too far");
            if b > 0 {
                assert!(
                    Histogram::bucket_top(b - 1) < v,
                    "{v} belongs to bucket {b}"
                );
            }
        }
        assert!(Histogram::bucket(u64::MAX) < NR_BUCKETS);
    }

    #[test]
    fn percentiles_of_a_known_distribution() {
        let h = Histogram::new();
        for v in 1..=1000u64 {
            h.record(v * 100);
        }
        // Exact p50 is 50_000 and p99 99_000; buckets round up by < 1/64.
        let (p50, p99) = (h.percentile(500), h.percentile(990));
        assert!((50_000..=50_000 + 50_000 / 64).contains(&p50), "{p50}");
        assert!((99_000..=99_000 + 99_000 / 64).contains(&p99), "{p99}");
        assert_eq!(h.max(), 100_000);
        assert_eq!(h.percentile(1000), 100_000);
        assert_eq!(Histogram::new().percentile(500), 0);
    }

    #[test]
    fn a_round_is_4mib_of_each_order() {
        for (slot, order) in ORDERS.into_iter().enumerate() {
            let n = PAGES_PER_ORDER_PER_ROUND >> order;
            assert_eq!(n << order << PAGE_SHIFT, 4 << 20, "slot {slot}");
        }
        assert_eq!(ALLOCS_PER_ROUND, 1024 + 128 + 2 + 1);
        assert_eq!(unpack(pack(0x3_ffff_ffff, 10)), (0x3_ffff_ffff, 10));
    }
}
