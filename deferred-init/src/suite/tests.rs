//! Host tests with real threads: exactly-once init, free-list coverage,
//! grow-on-demand races, buddy properties, plan and report.

use alloc::sync::Arc;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Barrier;
use std::vec::Vec;

use memboot_contract::option_values::BuddyStore;
use memmap::page::PageLayout;
use memmap::store::{Memmap, VecBacking};

/// The struct page layout this copy of the suite runs with (`suite_64`,
/// `suite_32` in lib.rs).
pub(crate) use super::TestPage;
/// Host backing of [`TestPage`]s.
pub(crate) type TestBacking = VecBacking<TestPage>;
use memmap::{DeferredRange, NodeId, Pfn, PfnRange, ZoneType, MAX_ORDER, PAGES_PER_SECTION};
use proptest::prelude::*;

use crate::buddy::{max_blocks, PFN_NONE};
use crate::std_seams::{StdClock, ThreadExecutor};
use crate::test_damage::TestDamage;
use crate::*;

const S: u64 = PAGES_PER_SECTION;

/// Where this suite's buddy allocators keep free blocks: its `TEST_STORE`,
/// else the layout's default.
pub(crate) fn test_store() -> BuddyStore {
    super::TEST_STORE.unwrap_or(BuddyStore::default_for(TestPage::HAS_LIST_LINK))
}

/// A buddy allocator in this suite's store.
pub(crate) fn test_buddy<'m>(
    mm: &'m Memmap<TestBacking>,
    managed: impl IntoIterator<Item = ManagedRange>,
) -> Result<BuddyAllocator<'m, TestBacking>, BuddyError> {
    BuddyAllocator::with_store(mm, managed, [], test_store())
}

/// CPUs of the host executor: more than any scenario's highest CPU number.
pub(crate) const TEST_CPUS: usize = 16;

/// `MEMBOOT_MUTATION_PROFILE=1`: the cheap profile of a cargo-mutants run
/// (README "Mutation testing"), which builds and tests hundreds of
/// mutants. The race tests' loops stop after a tenth of their runs once
/// they have seen their race, and the property tests run a quarter of their
/// cases; a plain `cargo test` keeps full strength.
pub(crate) fn mutation_profile() -> bool {
    std::env::var_os("MEMBOOT_MUTATION_PROFILE").is_some_and(|v| v == "1")
}

/// Whether a race loop of `full` runs may stop after `runs_done`: only in
/// the mutation profile, once it ran a tenth of them and has seen the race it
/// asserts on (`race_seen`). One that has not goes on to its full count, so
/// the profile cannot make a "the race happened" assertion flaky (how often
/// a race happens varies a lot with the host's load).
pub(crate) fn race_loop_done(runs_done: u64, full: u64, race_seen: bool) -> bool {
    mutation_profile() && race_seen && runs_done >= full / 10
}

/// Cases of a property test: `PROPTEST_CASES` if set, else `full`, or a
/// quarter of it in the mutation profile. (`cases: n` alone would override
/// the variable, which proptest reads only into its default.)
pub(crate) fn proptest_cases(full: u32) -> u32 {
    match std::env::var("PROPTEST_CASES") {
        Ok(v) => v.parse().expect("PROPTEST_CASES must be a number of cases"),
        Err(_) if mutation_profile() => full / 4,
        Err(_) => full,
    }
}

/// Deferred init of `plan` over `mm`, freeing into a buddy allocator that
/// manages the plan's ranges and `eager`, as the pipeline sets them up. The
/// allocator is leaked, so the `DeferredInit` can be returned from helpers
/// and live as long as `mm` (tests only; the kernel's pipeline owns its
/// allocator).
pub(crate) fn new_di<'m>(
    mm: &'m Memmap<TestBacking>,
    plan: DeferredPlan,
    mode: InitMode,
    eager: &[ManagedRange],
) -> Result<DeferredInit<'m, TestBacking>, DeferredInitError> {
    let buddy = test_buddy(mm, plan.managed_ranges().chain(eager.iter().copied()))?;
    DeferredInit::new(mm, Box::leak(Box::new(buddy)), plan, mode)
}

pub(crate) fn dr(nid: NodeId, start: Pfn, end: Pfn) -> DeferredRange {
    DeferredRange {
        nid,
        zone: ZoneType::of_pfn(start),
        pfns: PfnRange::new(start, end),
    }
}

pub(crate) fn cpus(nid: NodeId, c: &[CpuId]) -> NodeCpus {
    NodeCpus {
        nid,
        cpus: c.to_vec(),
    }
}

/// Per-PFN count of how often a worker or grower initialised the page.
pub(crate) struct InitCounter {
    base: Pfn,
    counts: Vec<AtomicU32>,
}

impl InitCounter {
    fn new(span: PfnRange) -> Self {
        Self {
            base: span.start,
            counts: (0..span.nr_pages()).map(|_| AtomicU32::new(0)).collect(),
        }
    }
    fn record(&self, r: PfnRange) {
        for pfn in r.start..r.end {
            self.counts[(pfn - self.base) as usize].fetch_add(1, Ordering::Relaxed);
        }
    }
    pub(crate) fn get(&self, pfn: Pfn) -> u32 {
        self.counts[(pfn - self.base) as usize].load(Ordering::Relaxed)
    }
}

pub(crate) fn span_of(ranges: &[DeferredRange]) -> PfnRange {
    let start = ranges.iter().map(|r| r.pfns.start).min().unwrap();
    let end = ranges.iter().map(|r| r.pfns.end).max().unwrap();
    PfnRange::new(start, end)
}

pub(crate) fn memmap_for(ranges: &[DeferredRange]) -> Memmap<TestBacking> {
    let pfns: Vec<PfnRange> = ranges.iter().map(|r| r.pfns).collect();
    Memmap::new(TestBacking::for_ranges(&pfns))
}

pub(crate) fn with_counter<'m>(
    di: &mut DeferredInit<'m, TestBacking>,
    span: PfnRange,
) -> Arc<InitCounter> {
    let counter = Arc::new(InitCounter::new(span));
    let c = counter.clone();
    di.init_hook = Some(Arc::new(move |r| c.record(r)));
    counter
}

pub(crate) fn is_reserved_pfn(reserved: &[PfnRange], pfn: Pfn) -> bool {
    reserved.iter().any(|r| r.contains(pfn))
}

/// Check everything the issue promises after a completed `InitAndFree` run
/// in which `allocated` blocks are still held by callers.
fn verify_complete(
    mm: &Memmap<TestBacking>,
    di: &DeferredInit<'_, TestBacking>,
    ranges: &[DeferredRange],
    reserved: &[PfnRange],
    counter: &InitCounter,
    allocated: &[(Pfn, u32)],
) {
    assert!(di.is_done(), "all chunks processed");
    let mut cover = Cover::new(span_of(ranges));
    let alloc_head = cover_allocated(&mut cover, allocated);
    cover_free_lists(mm, di, &mut cover);
    let mut expect_free = check_deferred_pages(mm, ranges, reserved, counter, &cover, &alloc_head);
    for &(pfn, order) in allocated {
        let r = ranges.iter().find(|r| r.pfns.contains(pfn)).unwrap();
        *expect_free.get_mut(&(r.nid, r.zone)).unwrap() -= 1 << order;
    }
    check_nothing_outside_deferred_covered(ranges, reserved, &cover);
    for (&(nid, zone), &n) in &expect_free {
        assert_eq!(
            di.buddy().nr_free_pages(nid, zone),
            n,
            "free pages of node {nid} {zone:?}"
        );
    }
    check_statistics_add_up(di);
}

/// How many free or allocated blocks hold each page of `span`.
struct Cover {
    span: PfnRange,
    counts: Vec<u8>,
}

impl Cover {
    fn new(span: PfnRange) -> Self {
        Self {
            span,
            counts: vec![0u8; span.nr_pages() as usize],
        }
    }
    fn add(&mut self, pfn: Pfn) {
        self.counts[(pfn - self.span.start) as usize] += 1;
    }
    fn get(&self, pfn: Pfn) -> u8 {
        self.counts[(pfn - self.span.start) as usize]
    }
    fn total(&self) -> u64 {
        self.counts.iter().map(|&c| c as u64).sum()
    }
}

/// Count the callers' blocks in `cover`, each handed out once; their
/// heads, by order.
fn cover_allocated(cover: &mut Cover, allocated: &[(Pfn, u32)]) -> HashMap<Pfn, u32> {
    let mut alloc_head: HashMap<Pfn, u32> = HashMap::new();
    for &(pfn, order) in allocated {
        assert!(
            alloc_head.insert(pfn, order).is_none(),
            "block {pfn:#x} handed out twice"
        );
        for p in pfn..pfn + (1 << order) {
            cover.add(p);
        }
    }
    alloc_head
}

/// Free lists: heads, links and block counts right; their pages counted in
/// `cover`.
fn cover_free_lists(
    mm: &Memmap<TestBacking>,
    di: &DeferredInit<'_, TestBacking>,
    cover: &mut Cover,
) {
    let mut lists: HashMap<(NodeId, ZoneType, u32), Vec<Pfn>> = HashMap::new();
    di.buddy().for_each_free_block(|nid, zone, pfn, order| {
        lists.entry((nid, zone, order)).or_default().push(pfn);
    });
    for (&(nid, zone, order), heads) in &lists {
        for (i, &h) in heads.iter().enumerate() {
            let p = mm.page(h).unwrap();
            assert!(
                p.is_buddy() && p.buddy_order() == order,
                "head {h:#x} is PageBuddy order {order}"
            );
            assert_eq!(h & ((1 << order) - 1), 0, "head {h:#x} aligned");
            assert!(
                p.links_match(h, zone, nid),
                "head {h:#x} on list of its own node/zone"
            );
            let prev = if i == 0 { PFN_NONE } else { heads[i - 1] };
            let next = heads.get(i + 1).copied().unwrap_or(PFN_NONE);
            if let Some(l) = p.list_link().filter(|_| test_store() == BuddyStore::Lists) {
                assert_eq!((l.prev, l.next), (prev, next), "links of {h:#x}");
            }
            for q in h..h + (1 << order) {
                cover.add(q);
                assert_eq!(
                    mm.page(q).unwrap().refcount(),
                    0,
                    "free page {q:#x} refcount"
                );
                if q != h {
                    assert!(
                        !mm.page(q).unwrap().is_buddy(),
                        "tail {q:#x} is not PageBuddy"
                    );
                }
            }
        }
        assert_eq!(
            di.buddy().nr_free_blocks(nid, zone, order),
            heads.len() as u64,
            "block count of ({nid}, {zone:?}, {order})"
        );
    }
}

/// Every deferred page: initialised once, right links, right ownership.
/// Returns the pages each (node, zone) gave to free or allocated blocks.
fn check_deferred_pages(
    mm: &Memmap<TestBacking>,
    ranges: &[DeferredRange],
    reserved: &[PfnRange],
    counter: &InitCounter,
    cover: &Cover,
    alloc_head: &HashMap<Pfn, u32>,
) -> HashMap<(NodeId, ZoneType), u64> {
    let mut expect_free: HashMap<(NodeId, ZoneType), u64> = HashMap::new();
    for r in ranges {
        for pfn in r.pfns.start..r.pfns.end {
            assert_eq!(counter.get(pfn), 1, "pfn {pfn:#x} initialised exactly once");
            let p = mm.page(pfn).unwrap();
            assert!(p.links_match(pfn, r.zone, r.nid), "pfn {pfn:#x} links");
            assert!(
                !p.has_stray_state(),
                "pfn {pfn:#x}: state init never writes"
            );
            if is_reserved_pfn(reserved, pfn) {
                assert!(p.is_reserved(), "reserved pfn {pfn:#x} has PG_reserved");
                assert_eq!(
                    (p.refcount(), p.is_buddy()),
                    (1, false),
                    "reserved pfn {pfn:#x} untouched by buddy"
                );
                assert_eq!(
                    p.list_link().map(|l| l.next),
                    p.list_link_addr(),
                    "reserved pfn {pfn:#x} self-linked"
                );
                assert_eq!(cover.get(pfn), 0, "reserved pfn {pfn:#x} never freed");
            } else {
                assert!(!p.is_reserved());
                assert_eq!(
                    cover.get(pfn),
                    1,
                    "pfn {pfn:#x} in exactly one free or allocated block"
                );
                let held = alloc_head.contains_key(&pfn);
                assert_eq!(p.refcount(), held as i32, "pfn {pfn:#x} refcount");
                *expect_free.entry((r.nid, r.zone)).or_default() += 1;
            }
        }
    }
    expect_free
}

/// Nothing outside deferred memory was covered.
fn check_nothing_outside_deferred_covered(
    ranges: &[DeferredRange],
    reserved: &[PfnRange],
    cover: &Cover,
) {
    let span = cover.span;
    let deferred_pages: u64 = ranges.iter().map(|r| r.pfns.nr_pages()).sum();
    let reserved_in: u64 = (span.start..span.end)
        .filter(|&p| ranges.iter().any(|r| r.pfns.contains(p)) && is_reserved_pfn(reserved, p))
        .count() as u64;
    assert_eq!(
        cover.total(),
        deferred_pages - reserved_in,
        "no page outside deferred memory on a list"
    );
}

/// Statistics add up.
fn check_statistics_add_up(di: &DeferredInit<'_, TestBacking>) {
    let rep = di.report();
    for n in &rep.nodes {
        assert!(n.done);
        assert_eq!(
            n.nr_worker_pages + n.nr_grown_pages,
            n.nr_pages,
            "node {} pages accounted",
            n.nid
        );
        assert_eq!(
            n.nr_claimed_windows, n.nr_windows,
            "node {}: pool empty",
            n.nid
        );
        assert!(n.nr_grown_windows <= n.nr_windows);
    }
}

struct Scenario {
    ranges: Vec<DeferredRange>,
    reserved: Vec<PfnRange>,
    node_cpus: Vec<NodeCpus>,
    opts: PlanOptions,
}

/// One node, 4 sections, 2 CPUs, a few reserved ranges.
fn one_node() -> Scenario {
    Scenario {
        ranges: vec![dr(0, 33 * S, 37 * S)],
        reserved: vec![
            PfnRange::new(34 * S + 100, 34 * S + 300),
            PfnRange::new(36 * S + 5, 36 * S + 6),
        ],
        node_cpus: vec![cpus(0, &[0, 1])],
        opts: PlanOptions::default(),
    }
}

/// Two nodes with holes, unaligned ends, DMA/DMA32/Normal, 4 workers.
fn two_nodes_with_holes() -> Scenario {
    Scenario {
        ranges: vec![
            dr(0, 256, 4096),
            dr(0, 4096, S + 77),
            dr(0, S + 4000, 3 * S - 5),
            dr(0, 32 * S, 33 * S + 1000),
            dr(0, 33 * S + 5000, 34 * S),
            dr(1, 40 * S + 3, 42 * S + 77),
            dr(1, 43 * S, 44 * S),
        ],
        reserved: vec![
            PfnRange::new(0, 300),
            PfnRange::new(S + 70, S + 4100), // straddles a hole and a range end
            PfnRange::new(41 * S - 10, 41 * S + 10), // straddles a section boundary
            PfnRange::new(43 * S + 1024, 43 * S + 2048),
        ],
        node_cpus: vec![cpus(0, &[0, 1]), cpus(1, &[2, 3])],
        opts: PlanOptions::default(),
    }
}

/// Four nodes, node 2 memory-only, capped at 2 threads per node: 8 workers.
fn four_nodes_memory_only() -> Scenario {
    Scenario {
        ranges: vec![
            dr(0, 33 * S, 35 * S),
            dr(1, 35 * S, 36 * S + 999),
            dr(2, 37 * S, 40 * S),
            dr(3, 40 * S + 512, 41 * S),
            dr(3, 41 * S + 100, 42 * S),
        ],
        reserved: vec![
            PfnRange::new(38 * S, 38 * S + 4096),
            PfnRange::new(41 * S + 99, 41 * S + 101),
        ],
        node_cpus: vec![
            cpus(0, &[0, 1, 2]),
            cpus(1, &[3, 8]),
            cpus(2, &[]),
            cpus(3, &[4, 5, 6, 7]),
        ],
        opts: PlanOptions {
            max_threads_per_node: Some(2),
            sections_per_chunk: 1,
        },
    }
}

fn run_scenario(sc: &Scenario, iterations: usize) {
    let mm = memmap_for(&sc.ranges);
    for _ in 0..iterations {
        let plan = DeferredPlan::new(&sc.ranges, &sc.reserved, &sc.node_cpus, sc.opts).unwrap();
        let mut di = new_di(&mm, plan, InitMode::InitAndFree, &[]).unwrap();
        let counter = with_counter(&mut di, span_of(&sc.ranges));
        di.run(&ThreadExecutor::new(TEST_CPUS), &StdClock::new())
            .unwrap();
        verify_complete(&mm, &di, &sc.ranges, &sc.reserved, &counter, &[]);
    }
}

#[test]
fn one_node_two_workers_complete() {
    run_scenario(&one_node(), 5);
}

#[test]
fn two_nodes_with_holes_complete() {
    run_scenario(&two_nodes_with_holes(), 5);
}

#[test]
fn four_nodes_with_memory_only_node_complete() {
    let sc = four_nodes_memory_only();
    let plan = DeferredPlan::new(&sc.ranges, &sc.reserved, &sc.node_cpus, sc.opts).unwrap();
    assert_eq!(plan.workers().len(), 8);
    run_scenario(&sc, 5);
}

#[test]
fn multi_section_chunks_complete() {
    let mut sc = two_nodes_with_holes();
    sc.opts.sections_per_chunk = 2;
    run_scenario(&sc, 3);
    sc.opts.sections_per_chunk = PlanOptions::WHOLE_ZONES;
    run_scenario(&sc, 3);
}

/// A worker claims one section (32 windows) at a time, as Linux's padata
/// jobs do, also out of a chunk of two sections: that chunk takes two
/// claims, each leaving a section less in the pool.
#[test]
fn workers_claim_one_section_at_a_time() {
    // Sections 34 and 35: one pair-aligned chunk.
    let ranges = [dr(0, 34 * S, 36 * S)];
    let mm = memmap_for(&ranges);
    let opts = PlanOptions {
        sections_per_chunk: 2,
        ..PlanOptions::default()
    };
    let plan = DeferredPlan::new(&ranges, &[], &[cpus(0, &[0])], opts).unwrap();
    assert_eq!(plan.node(0).unwrap().nr_chunks(), 1);
    let di = new_di(&mm, plan, InitMode::InitAndFree, &[]).unwrap();
    let clock = StdClock::new();
    assert!(di.worker_step(0, &clock).unwrap());
    assert_eq!(di.pool_pages(), S, "the first section claimed and done");
    assert_eq!(di.buddy().nr_free_pages(0, ZoneType::Normal), S);
    assert!(di.worker_step(0, &clock).unwrap());
    assert_eq!(di.pool_pages(), 0);
    assert!(!di.worker_step(0, &clock).unwrap(), "nothing left to claim");
    let w = &di.report().workers[0];
    assert_eq!((w.nr_claims, w.nr_pages, w.finished), (2, 2 * S, true));
}

/// A node's wall time spans only the workers that claimed something: a
/// worker that started after everything was claimed (no claims) does not
/// stretch it.
#[test]
fn a_node_s_wall_time_counts_only_workers_that_claimed() {
    let ranges = [dr(0, 34 * S, 35 * S)];
    let mm = memmap_for(&ranges);
    let plan =
        DeferredPlan::new(&ranges, &[], &[cpus(0, &[0, 1])], PlanOptions::default()).unwrap();
    let di = new_di(&mm, plan, InitMode::InitAndFree, &[]).unwrap();
    let ticks = std::sync::atomic::AtomicU64::new(0);
    let clock = || ticks.fetch_add(10, std::sync::atomic::Ordering::Relaxed) + 10;
    while di.worker_step(0, &clock).unwrap() {}
    assert!(
        !di.worker_step(1, &clock).unwrap(),
        "nothing left for worker 1"
    );
    let report = di.report();
    let (w0, w1) = (&report.workers[0], &report.workers[1]);
    assert_eq!((w0.nr_claims, w1.nr_claims), (1, 0));
    assert!(w1.end_ns > w0.end_ns, "worker 1 ran last");
    assert_eq!(report.nodes[0].wall_ns, w0.end_ns - w0.start_ns);
}

/// Claimants racing for single windows where every chunk is one window, so
/// every claim is at a chunk's end: each window goes to exactly one claim,
/// and no claim is empty (one whose `fetch_add` lands on or past the end
/// moves the cursor on instead of returning nothing to process). The
/// threads go through many instances in step, so they meet on the same
/// counters often.
#[test]
fn racing_claims_hand_out_each_window_once_and_none_empty() {
    let ranges: Vec<DeferredRange> = (33..49)
        .map(|sec| dr(0, sec * S, sec * S + WINDOW_NR_PAGES))
        .collect();
    let mm = memmap_for(&ranges);
    for _ in 0..10 {
        let instances: Vec<DeferredInit<'_, TestBacking>> = (0..2000)
            .map(|_| {
                let plan =
                    DeferredPlan::new(&ranges, &[], &[cpus(0, &[0])], PlanOptions::default())
                        .unwrap();
                new_di(&mm, plan, InitMode::InitAndFree, &[]).unwrap()
            })
            .collect();
        let nr_threads = 4;
        let barrier = Barrier::new(nr_threads);
        let per_thread: Vec<Vec<Vec<Claim>>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..nr_threads)
                .map(|_| {
                    let (instances, barrier) = (&instances, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        instances
                            .iter()
                            .map(|di| {
                                let mut mine = Vec::new();
                                while let Some(c) = di.claim_in_zone(0, ZoneType::Normal, 1) {
                                    mine.push(c);
                                }
                                mine
                            })
                            .collect()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for i in 0..instances.len() {
            let claims: Vec<&Claim> = per_thread.iter().flat_map(|t| &t[i]).collect();
            assert!(
                claims.iter().all(|c| c.windows == (0..1)),
                "every claim is the one window of its chunk: {claims:?}"
            );
            let mut chunks: Vec<usize> = claims.iter().map(|c| c.chunk).collect();
            chunks.sort_unstable();
            assert_eq!(chunks, (0..ranges.len()).collect::<Vec<_>>());
        }
    }
}

/// What each setup or run error tells the operator, word for word.
#[test]
fn deferred_init_errors_say_what_to_do() {
    let cases = [
        (
            DeferredInitError::SectionNotBacked {
                nid: 1,
                section_nr: 34,
            },
            "node 1: deferred memory in section 34 has no struct-page backing; populate the vmemmap of every section with present memory before deferred init",
        ),
        (
            DeferredInitError::from(BuddyError::NodeIdTooLarge { nid: 70 }),
            "buddy allocator setup: node id 70 exceeds the 64 nodes struct-page flags can hold; renumber nodes densely",
        ),
        (
            DeferredInitError::NoSuchWorker {
                worker: 7,
                nr_workers: 2,
            },
            "worker 7 does not exist (plan has 2); use indices of DeferredPlan::workers()",
        ),
        (
            DeferredInitError::NoSuchCpu {
                worker: 1,
                cpu: 5,
                nr_cpus: 2,
            },
            "worker 1 is planned on CPU 5 but the executor has 2 CPUs; build the plan's NodeCpus from the CPUs that are online",
        ),
    ];
    for (e, text) in cases {
        assert_eq!(e.to_string(), text);
    }
}

#[test]
fn fully_aligned_memory_ends_as_max_order_blocks() {
    let ranges = [dr(0, 33 * S, 35 * S)];
    let mm = memmap_for(&ranges);
    let plan =
        DeferredPlan::new(&ranges, &[], &[cpus(0, &[0, 1])], PlanOptions::default()).unwrap();
    let di = new_di(&mm, plan, InitMode::InitAndFree, &[]).unwrap();
    di.run(&ThreadExecutor::new(TEST_CPUS), &StdClock::new())
        .unwrap();
    let nr_blocks = (2 * S) >> MAX_ORDER;
    assert_eq!(
        di.buddy().nr_free_blocks(0, ZoneType::Normal, MAX_ORDER),
        nr_blocks
    );
    assert_eq!(di.buddy().nr_free_pages(0, ZoneType::Normal), 2 * S);
}

/// Workers and allocating callers race; allocators also free some blocks
/// back. Nothing may be lost or handed out twice.
#[test]
fn grow_on_demand_races_with_workers() {
    let ranges = vec![
        dr(0, 2 * S + 11, 4 * S),
        dr(0, 33 * S, 34 * S + 3000),
        dr(1, 36 * S, 38 * S + 1),
    ];
    let reserved = vec![
        PfnRange::new(3 * S, 3 * S + 700),
        PfnRange::new(37 * S + 1, 37 * S + 2),
    ];
    let node_cpus = vec![cpus(0, &[0, 1]), cpus(1, &[2, 3])];
    let targets = [
        (0, ZoneType::Dma32),
        (0, ZoneType::Normal),
        (1, ZoneType::Normal),
    ];
    let (mut nr_grown_total, mut nr_contended) = (0, 0);
    let (full_runs, mut nr_runs) = (200, 0);
    for run in 0..full_runs {
        let mm = memmap_for(&ranges);
        let plan =
            DeferredPlan::new(&ranges, &reserved, &node_cpus, PlanOptions::default()).unwrap();
        let nr_workers = plan.workers().len();
        let mut di = new_di(&mm, plan, InitMode::InitAndFree, &[]).unwrap();
        let counter = with_counter(&mut di, span_of(&ranges));
        let clock = StdClock::new();
        let barrier = Barrier::new(nr_workers + targets.len());
        let allocated: Vec<(Pfn, u32)> = std::thread::scope(|s| {
            for w in 0..nr_workers {
                let (di, barrier, clock) = (&di, &barrier, &clock);
                s.spawn(move || {
                    barrier.wait();
                    di.run_worker(w, clock).unwrap();
                });
            }
            let handles: Vec<_> = targets
                .iter()
                .enumerate()
                .map(|(t, &(nid, zone))| {
                    let (di, barrier) = (&di, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        alloc_and_free_until_out_of_memory(di, nid, zone, run * 31 + t as u64 + 1)
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        });
        let report = di.report();
        nr_grown_total += report.nodes.iter().map(|n| n.nr_grown_windows).sum::<u64>();
        nr_contended += report
            .nodes
            .iter()
            .map(|n| n.nr_contended_growth_steps)
            .sum::<u64>();
        verify_complete(&mm, &di, &ranges, &reserved, &counter, &allocated);
        for &(pfn, order) in &allocated {
            di.allocator().free_pages(pfn, order).unwrap();
        }
        assert_fully_merged(&di, &ranges, &reserved);
        nr_runs = run + 1;
        if race_loop_done(nr_runs, full_runs, nr_contended > 0) {
            break;
        }
    }
    // The race this test is named for: growth steps that ran while a worker
    // or another grower was initialising a claim of the same node.
    std::println!(
        "grow-on-demand race: {nr_grown_total} windows grown by allocators, {nr_contended} growth steps contended, over {nr_runs} runs"
    );
    assert!(
        nr_contended > 0,
        "no growth step overlapped another claim of its node in {nr_runs} runs ({nr_grown_total} grown): the race was not exercised"
    );
}

/// Allocate blocks of random orders from (`nid`, `zone`) until even order 0
/// is out of memory, giving every third back (merging while workers free);
/// returns the blocks still held. `seed` picks the orders.
fn alloc_and_free_until_out_of_memory(
    di: &DeferredInit<'_, TestBacking>,
    nid: NodeId,
    zone: ZoneType,
    mut seed: u64,
) -> Vec<(Pfn, u32)> {
    let mut held: Vec<(Pfn, u32)> = Vec::new();
    let mut max_order = MAX_ORDER;
    let mut nr_allocs = 0u64;
    loop {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let order = ((seed >> 33) % (max_order as u64 + 1)) as u32;
        match di.allocator().alloc_pages(nid, zone, order) {
            Ok(pfn) => {
                held.push((pfn, order));
                nr_allocs += 1;
                // Give every third block back (merging while workers free).
                if nr_allocs.is_multiple_of(3) {
                    let (p, o) = held.swap_remove((seed >> 40) as usize % held.len());
                    di.allocator().free_pages(p, o).unwrap();
                }
            }
            Err(AllocError::InitInProgress { .. }) => std::thread::yield_now(),
            // Larger orders run out first; go on with smaller ones.
            Err(AllocError::OutOfMemory { .. }) if order > 0 => max_order = order - 1,
            Err(AllocError::OutOfMemory { .. }) => break,
            Err(e) => panic!("{e}"),
        }
    }
    held
}

/// With every page free, the lists hold exactly the largest aligned blocks
/// of each maximal free run (everything merged back).
pub(crate) fn assert_fully_merged(
    di: &DeferredInit<'_, TestBacking>,
    ranges: &[DeferredRange],
    reserved: &[PfnRange],
) {
    let mut expect: HashMap<(NodeId, ZoneType, u32), u64> = HashMap::new();
    let managed: Vec<ManagedRange> = di.plan().managed_ranges().collect();
    let mut runs: Vec<ManagedRange> = Vec::new();
    for m in managed {
        match runs.last_mut() {
            Some(l) if l.nid == m.nid && l.zone == m.zone && l.pfns.end == m.pfns.start => {
                l.pfns.end = m.pfns.end
            }
            _ => runs.push(m),
        }
    }
    for m in &runs {
        for (_, order) in max_blocks(m.pfns) {
            *expect.entry((m.nid, m.zone, order)).or_default() += 1
        }
    }
    let mut got: HashMap<(NodeId, ZoneType, u32), u64> = HashMap::new();
    di.buddy().for_each_free_block(|nid, zone, _, order| {
        *got.entry((nid, zone, order)).or_default() += 1
    });
    assert_eq!(got, expect, "free lists fully merged");
    let total: u64 = ranges.iter().map(|r| r.pfns.nr_pages()).sum::<u64>()
        - ranges
            .iter()
            .flat_map(|r| r.pfns.start..r.pfns.end)
            .filter(|&p| is_reserved_pfn(reserved, p))
            .count() as u64;
    assert_eq!(di.buddy().nr_free_pages_total(), total);
}

// ---------------------------------------------------------------- plan

#[test]
fn plan_chunks_are_section_aligned_and_cover_ranges_once() {
    let sc = two_nodes_with_holes();
    let plan = DeferredPlan::new(&sc.ranges, &sc.reserved, &sc.node_cpus, sc.opts).unwrap();
    for node in plan.nodes() {
        let mut pfns: Vec<Pfn> = Vec::new();
        for c in 0..node.nr_chunks() {
            let pieces = node.chunk_pieces(c);
            assert!(!pieces.is_empty());
            let section = memmap::pfn_to_section_nr(pieces[0].pfns.start);
            for p in pieces {
                assert!(!p.pfns.is_empty());
                assert_eq!(
                    memmap::pfn_to_section_nr(p.pfns.start),
                    section,
                    "chunk within one section"
                );
                assert_eq!(memmap::pfn_to_section_nr(p.pfns.end - 1), section);
                assert_eq!(ZoneType::of_pfn(p.pfns.start), p.zone);
                for pfn in p.pfns.start..p.pfns.end {
                    assert_eq!(
                        is_reserved_pfn(&sc.reserved, pfn),
                        p.reserved,
                        "piece reserved flag at {pfn:#x}"
                    );
                }
                pfns.extend(p.pfns.start..p.pfns.end);
            }
        }
        let mut expect: Vec<Pfn> = sc
            .ranges
            .iter()
            .filter(|r| r.nid == node.nid())
            .flat_map(|r| r.pfns.start..r.pfns.end)
            .collect();
        expect.sort_unstable();
        assert_eq!(
            pfns,
            expect,
            "node {} pieces cover its ranges exactly once, in order",
            node.nid()
        );
        assert_eq!(node.nr_pages(), expect.len() as u64);
        let nr_res = expect
            .iter()
            .filter(|&&p| is_reserved_pfn(&sc.reserved, p))
            .count() as u64;
        assert_eq!(node.nr_reserved_pages(), nr_res);
    }
    // Node 0 spans sections 0 (DMA and DMA32: a chunk each), 1, 2, 32,
    // 33: six chunks.
    assert_eq!(plan.node(0).unwrap().nr_chunks(), 6);
    let mut sc2 = two_nodes_with_holes();
    sc2.opts.sections_per_chunk = 2;
    let plan2 = DeferredPlan::new(&sc2.ranges, &sc2.reserved, &sc2.node_cpus, sc2.opts).unwrap();
    // Section pairs {0,1} (its DMA and its DMA32 part), {2}, {32,33}.
    assert_eq!(plan2.node(0).unwrap().nr_chunks(), 4);
    // One chunk per zone: node 0's DMA, DMA32 and Normal, node 1's Normal.
    let mut whole = two_nodes_with_holes();
    whole.opts.sections_per_chunk = PlanOptions::WHOLE_ZONES;
    let plan3 =
        DeferredPlan::new(&whole.ranges, &whole.reserved, &whole.node_cpus, whole.opts).unwrap();
    let zones = |nid| {
        let n = plan3.node(nid).unwrap();
        (0..n.nr_chunks())
            .map(|c| n.chunk_zone(c))
            .collect::<Vec<_>>()
    };
    assert_eq!(zones(0), [ZoneType::Dma, ZoneType::Dma32, ZoneType::Normal]);
    assert_eq!(zones(1), [ZoneType::Normal]);
}

#[test]
fn plan_threads_default_cap_and_memory_only_node() {
    let sc = four_nodes_memory_only();
    let uncapped = DeferredPlan::new(
        &sc.ranges,
        &sc.reserved,
        &sc.node_cpus,
        PlanOptions::default(),
    )
    .unwrap();
    let per_node = |p: &DeferredPlan, nid| p.workers().iter().filter(|w| w.nid == nid).count();
    assert_eq!(
        per_node(&uncapped, 0),
        3,
        "default: one worker per node CPU"
    );
    assert_eq!(per_node(&uncapped, 1), 2);
    assert_eq!(per_node(&uncapped, 3), 4);
    assert_eq!(
        per_node(&uncapped, 2),
        9,
        "memory-only node: served by all CPUs of the system"
    );
    for w in uncapped.workers() {
        if w.nid == 2 {
            assert_ne!(w.cpu_nid, 2, "memory-only node runs on other nodes' CPUs");
        } else {
            assert_eq!(w.cpu_nid, w.nid, "node with CPUs runs locally");
        }
    }
    assert!(!uncapped.node(2).unwrap().has_local_cpus());
    let capped = DeferredPlan::new(&sc.ranges, &sc.reserved, &sc.node_cpus, sc.opts).unwrap();
    for nid in 0..4 {
        assert_eq!(per_node(&capped, nid), 2);
    }
    // A missing CPU entry is a memory-only node too.
    let no_entry =
        DeferredPlan::new(&sc.ranges, &[], &sc.node_cpus[..2], PlanOptions::default()).unwrap();
    assert_eq!(
        per_node(&no_entry, 3),
        5,
        "served by the 5 CPUs of nodes 0 and 1"
    );
}

#[test]
fn plan_rejects_bad_input_with_actionable_errors() {
    let c = [cpus(0, &[0])];
    let overlap = DeferredPlan::new(
        &[dr(0, 33 * S, 34 * S), dr(0, 34 * S - 1, 35 * S)],
        &[],
        &c,
        PlanOptions::default(),
    );
    assert!(matches!(overlap, Err(PlanError::OverlappingRanges { .. })));
    let cross = DeferredRange {
        nid: 0,
        zone: ZoneType::Dma32,
        pfns: PfnRange::new(31 * S, 33 * S),
    };
    let e = DeferredPlan::new(&[cross], &[], &c, PlanOptions::default()).unwrap_err();
    assert!(matches!(e, PlanError::RangeCrossesZone { .. }));
    assert!(
        e.to_string().contains("split ranges at zone boundaries"),
        "{e}"
    );
    let e =
        DeferredPlan::new(&[dr(0, 33 * S, 34 * S)], &[], &[], PlanOptions::default()).unwrap_err();
    assert_eq!(e, PlanError::NoCpus { nid: 0 });
    assert!(e.to_string().contains("boot CPU"));
    let dup = [cpus(0, &[0]), cpus(0, &[1])];
    assert!(matches!(
        DeferredPlan::new(&[dr(0, 33 * S, 34 * S)], &[], &dup, PlanOptions::default()),
        Err(PlanError::DuplicateNodeCpus { nid: 0 })
    ));
    let zero = PlanOptions {
        max_threads_per_node: Some(0),
        ..PlanOptions::default()
    };
    assert_eq!(
        DeferredPlan::new(&[], &[], &c, zero).unwrap_err(),
        PlanError::ZeroThreadCap
    );
    assert!(matches!(
        DeferredPlan::new(&[dr(64, 33 * S, 34 * S)], &[], &c, PlanOptions::default()),
        Err(PlanError::NodeIdTooLarge { nid: 64 })
    ));
}

#[test]
fn init_rejects_unbacked_sections() {
    let ranges = [dr(0, 33 * S, 35 * S)];
    let mm = Memmap::new(TestBacking::new([33]));
    let plan = DeferredPlan::new(&ranges, &[], &[cpus(0, &[0])], PlanOptions::default()).unwrap();
    // The allocator refuses the plan's ranges for the same reason, so give
    // deferred init one that manages nothing: its own check must refuse.
    let buddy = test_buddy(&mm, core::iter::empty()).unwrap();
    let e = DeferredInit::new(&mm, &buddy, plan, InitMode::InitAndFree)
        .err()
        .unwrap();
    assert_eq!(
        e,
        DeferredInitError::SectionNotBacked {
            nid: 0,
            section_nr: 34
        }
    );
}

// ---------------------------------------------------------------- grow on demand

#[test]
fn grow_on_demand_without_workers_then_workers_finish() {
    let sc = two_nodes_with_holes();
    let mm = memmap_for(&sc.ranges);
    let plan = DeferredPlan::new(&sc.ranges, &sc.reserved, &sc.node_cpus, sc.opts).unwrap();
    let mut di = new_di(&mm, plan, InitMode::InitAndFree, &[]).unwrap();
    let counter = with_counter(&mut di, span_of(&sc.ranges));
    // Nothing initialised yet: the allocation initialises windows itself.
    // Node 1's first window, [40 S, 40 S + 1024), has free pages 40 S + 3…:
    // one step serves an order-3 request.
    let a = di
        .allocator()
        .alloc_pages_counted(1, ZoneType::Normal, 3)
        .unwrap();
    assert_eq!(a.growth_steps, 1);
    let a = a.pfn;
    let rep = di.report();
    assert_eq!(rep.nodes[1].nr_grown_windows, 1);
    assert_eq!(rep.nodes[1].nr_grown_pages, 1024 - 3);
    assert_eq!(rep.nodes[0].nr_grown_windows, 0);
    // Node 0's Normal memory starts at section 32, after 3 DMA/DMA32
    // chunks: a Normal request grows the Normal zone it tries first
    // (Linux's order), one window of section 32 holding a free 4 MiB
    // block, and leaves the DMA32 windows in the pool.
    let dma32_pool = di.pool_free_pages(0, ZoneType::Dma32);
    assert!(dma32_pool > 0);
    let b = di
        .allocator()
        .alloc_pages_counted(0, ZoneType::Normal, MAX_ORDER)
        .unwrap();
    assert_eq!(b.growth_steps, 1);
    let b = b.pfn;
    assert_eq!(b, 32 * S, "the first window of Normal memory");
    assert_eq!(di.report().nodes[0].nr_grown_windows, 1);
    assert_eq!(di.buddy().nr_free_pages(0, ZoneType::Dma32), 0);
    assert_eq!(di.pool_free_pages(0, ZoneType::Dma32), dma32_pool);
    di.run(&ThreadExecutor::new(TEST_CPUS), &StdClock::new())
        .unwrap();
    verify_complete(
        &mm,
        &di,
        &sc.ranges,
        &sc.reserved,
        &counter,
        &[(a, 3), (b, MAX_ORDER)],
    );
    di.allocator().free_pages(a, 3).unwrap();
    di.allocator().free_pages(b, MAX_ORDER).unwrap();
    assert_fully_merged(&di, &sc.ranges, &sc.reserved);
}

/// Free pages a request of `zone` on `nid` could ever get, counted per PFN
/// from the ranges under Linux's fallback rule (the zone or a lower one):
/// the model [`PageAllocator::alloc_pages`] must agree with.
fn servable_pages(
    ranges: &[DeferredRange],
    reserved: &[PfnRange],
    nid: NodeId,
    zone: ZoneType,
) -> u64 {
    ranges
        .iter()
        .filter(|r| r.nid == nid)
        .flat_map(|r| r.pfns.start..r.pfns.end)
        .filter(|&pfn| ZoneType::of_pfn(pfn) <= zone && !is_reserved_pfn(reserved, pfn))
        .count() as u64
}

/// The page allocator grows only through its source: without one it
/// serves what the lists hold (here nothing: the pool is untouched) and
/// fails with `OutOfMemory`, initialising nothing; with deferred init as
/// its source the same request grows one window. A deferred init that does
/// not free its pages (`InitOnly`) is no source.
#[test]
fn the_allocator_grows_only_through_its_source() {
    let ranges = [dr(0, 33 * S, 34 * S)];
    let mm = memmap_for(&ranges);
    let plan = DeferredPlan::new(&ranges, &[], &[cpus(0, &[0])], PlanOptions::default()).unwrap();
    let di = new_di(&mm, plan, InitMode::InitAndFree, &[]).unwrap();
    assert!(
        !di.is_done() && !di.is_node_done(0),
        "nothing processed yet"
    );
    assert!(di.is_node_done(5), "a node without deferred memory is done");
    let lists_only = PageAllocator::new(di.buddy(), None);
    assert_eq!(
        lists_only.alloc_pages(0, ZoneType::Normal, 0),
        Err(AllocError::OutOfMemory {
            nid: 0,
            zone: ZoneType::Normal,
            order: 0
        })
    );
    assert_eq!(di.report().nodes[0].nr_grown_pages, 0);
    assert_eq!(di.pool_pages(), S);
    let a = di
        .allocator()
        .alloc_pages_counted(0, ZoneType::Normal, 0)
        .unwrap();
    assert_eq!(a.growth_steps, 1);
    assert_eq!(di.pool_pages(), S - WINDOW_NR_PAGES);
    // The step claimed the first block window, and only it.
    let first = 33 * S;
    for (pfn, claimed) in [
        (first, true),
        (first + WINDOW_NR_PAGES - 1, true),
        (first + WINDOW_NR_PAGES, false),
        (first + 5 * WINDOW_NR_PAGES + 3, false),
        (34 * S - 1, false),
    ] {
        assert_eq!(di.is_claimed(0, pfn), claimed, "pfn {pfn:#x}");
    }
    assert!(!di.is_claimed(1, first), "no such node");
    assert!(!di.is_claimed(0, 32 * S), "not deferred memory");
    assert!(!di.is_done());
    // The pages growth freed are on the lists for every allocator.
    assert!(lists_only.alloc_pages(0, ZoneType::Normal, 0).is_ok());

    let plan = DeferredPlan::new(&ranges, &[], &[cpus(0, &[0])], PlanOptions::default()).unwrap();
    let init_only = new_di(&mm, plan, InitMode::InitOnly, &[]).unwrap();
    assert!(init_only.growth().is_none());
}

/// Growth claims only windows that can serve the request: a DMA32 request
/// never initialises Normal memory, and once DMA32 is used up it fails at
/// once, initialising nothing, while Normal's pool is still full. A Normal
/// request falls back to DMA32 (never the other way round).
#[test]
fn growth_respects_the_zone_fallback_order() {
    let ranges = [dr(0, 2 * S, 4 * S), dr(0, 33 * S, 35 * S)];
    let reserved = [PfnRange::new(3 * S, 3 * S + 5)];
    let mm = memmap_for(&ranges);
    let plan =
        DeferredPlan::new(&ranges, &reserved, &[cpus(0, &[0])], PlanOptions::default()).unwrap();
    let di = new_di(&mm, plan, InitMode::InitAndFree, &[]).unwrap();
    let normal_pool = di.pool_free_pages(0, ZoneType::Normal);
    assert_eq!(normal_pool, 2 * S);
    // Exhaust DMA32 with order-0 requests: exactly its free pages, by growth.
    let mut held = Vec::new();
    while let Ok(pfn) = di.allocator().alloc_pages(0, ZoneType::Dma32, 0) {
        assert_eq!(ZoneType::of_pfn(pfn), ZoneType::Dma32, "{pfn:#x}");
        held.push(pfn);
    }
    assert_eq!(
        held.len() as u64,
        servable_pages(&ranges, &reserved, 0, ZoneType::Dma32)
    );
    assert_eq!(di.pool_free_pages(0, ZoneType::Normal), normal_pool);
    // Normal's pool is full; a DMA32 request fails at once and grows nothing.
    let grown = di.report().nodes[0].nr_grown_pages;
    assert_eq!(
        di.allocator().alloc_pages_counted(0, ZoneType::Dma32, 0),
        Err(AllocError::OutOfMemory {
            nid: 0,
            zone: ZoneType::Dma32,
            order: 0
        })
    );
    assert_eq!(di.report().nodes[0].nr_grown_pages, grown);
    assert_eq!(di.pool_free_pages(0, ZoneType::Normal), normal_pool);
    assert_eq!(
        di.allocator().alloc_pages_counted(0, ZoneType::Dma, 3),
        Err(AllocError::OutOfMemory {
            nid: 0,
            zone: ZoneType::Dma,
            order: 3
        })
    );
    // Give DMA32 back; a Normal request now takes Normal memory first (it
    // grows its own zone before falling back), then DMA32's free pages.
    for pfn in held.drain(..) {
        di.allocator().free_pages(pfn, 0).unwrap();
    }
    let mut zones = HashMap::new();
    while let Ok(pfn) = di.allocator().alloc_pages(0, ZoneType::Normal, 0) {
        *zones.entry(ZoneType::of_pfn(pfn)).or_insert(0u64) += 1;
        // No DMA32 page before Normal is exhausted.
        if ZoneType::of_pfn(pfn) == ZoneType::Dma32 {
            assert_eq!(zones.get(&ZoneType::Normal), Some(&normal_pool));
        }
        held.push(pfn);
    }
    assert_eq!(
        held.len() as u64,
        servable_pages(&ranges, &reserved, 0, ZoneType::Normal)
    );
    assert!(di.is_done());
}

/// Each growth step is timed on its own: with a clock that advances 1000
/// ns per read, every step reports 1000 ns, one per window grown, and an
/// allocation served from the lists reports none.
#[test]
fn growth_steps_are_timed_one_by_one() {
    let ranges = [dr(0, 33 * S, 34 * S)];
    let mm = memmap_for(&ranges);
    let plan = DeferredPlan::new(&ranges, &[], &[cpus(0, &[0])], PlanOptions::default()).unwrap();
    let di = new_di(&mm, plan, InitMode::InitAndFree, &[]).unwrap();
    let ticks = AtomicU64::new(0);
    let clock = || ticks.fetch_add(1000, Ordering::Relaxed);
    let mut steps = Vec::new();
    let a = di
        .allocator()
        .alloc_pages_timed(0, ZoneType::Normal, MAX_ORDER, &clock, &mut |ns| {
            steps.push(ns)
        })
        .unwrap();
    assert_eq!((a.growth_steps, steps.as_slice()), (1, &[1000][..]));
    let b = di
        .allocator()
        .alloc_pages_timed(0, ZoneType::Normal, 0, &clock, &mut |ns| steps.push(ns))
        .unwrap();
    assert_eq!(b.growth_steps, 1, "the first window went whole to a");
    let c = di
        .allocator()
        .alloc_pages_timed(0, ZoneType::Normal, 0, &clock, &mut |ns| steps.push(ns))
        .unwrap();
    assert_eq!(c.growth_steps, 0, "served from b's window");
    assert_eq!(steps, [1000, 1000]);
    assert_eq!(di.report().nodes[0].nr_grown_windows, steps.len() as u64);
}

/// A growth step counts as contended exactly when another claim of the
/// node is being processed as it begins: here a worker held inside its
/// first window (by the init hook) while an allocation grows the next
/// section's first window; a growth step with nobody else at work does not
/// count.
#[test]
fn growth_steps_count_as_contended_only_while_another_claim_runs() {
    let ranges = [dr(0, 33 * S, 35 * S)];
    let mm = memmap_for(&ranges);
    let fresh_di = || {
        let plan =
            DeferredPlan::new(&ranges, &[], &[cpus(0, &[0])], PlanOptions::default()).unwrap();
        new_di(&mm, plan, InitMode::InitAndFree, &[]).unwrap()
    };
    let contended =
        |di: &DeferredInit<'_, TestBacking>| di.report().nodes[0].nr_contended_growth_steps;
    // Alone: one growth step, not contended.
    let di = fresh_di();
    let a = di
        .allocator()
        .alloc_pages_counted(0, ZoneType::Normal, 0)
        .unwrap();
    assert_eq!((a.growth_steps, contended(&di)), (1, 0));
    // Against a worker in the middle of section 33.
    let mut di = fresh_di();
    let in_window = Arc::new(Barrier::new(2));
    let release = Arc::new(Barrier::new(2));
    let held = Arc::new(AtomicU32::new(0));
    let (w, r, h) = (in_window.clone(), release.clone(), held.clone());
    di.init_hook = Some(Arc::new(move |range: PfnRange| {
        if range.start < 34 * S && h.fetch_add(1, Ordering::Relaxed) == 0 {
            w.wait();
            r.wait();
        }
    }));
    let clock = StdClock::new();
    std::thread::scope(|s| {
        let worker = s.spawn(|| di.worker_step(0, &clock).unwrap());
        in_window.wait();
        // The worker holds all of section 33: growth takes section 34's
        // first window.
        let a = di
            .allocator()
            .alloc_pages_counted(0, ZoneType::Normal, 0)
            .unwrap();
        assert_eq!((a.pfn, a.growth_steps), (34 * S, 1));
        assert_eq!(contended(&di), 1);
        release.wait();
        assert!(worker.join().unwrap());
    });
    assert_eq!(di.report().nodes[0].nr_grown_windows, 1);
}

/// A lower-zone request on a node whose pool holds only a higher zone
/// initialises nothing (before the fix it initialised the whole pool, 4 MiB
/// at a time, and then failed).
#[test]
fn a_request_no_pool_can_serve_fails_at_once() {
    let ranges = [dr(0, 33 * S, 37 * S)];
    let mm = memmap_for(&ranges);
    let plan = DeferredPlan::new(&ranges, &[], &[cpus(0, &[0])], PlanOptions::default()).unwrap();
    let mut di = new_di(&mm, plan, InitMode::InitAndFree, &[]).unwrap();
    let counter = with_counter(&mut di, span_of(&ranges));
    for zone in [ZoneType::Dma, ZoneType::Dma32] {
        for order in [0, MAX_ORDER] {
            assert_eq!(
                di.allocator().alloc_pages_counted(0, zone, order),
                Err(AllocError::OutOfMemory {
                    nid: 0,
                    zone,
                    order
                })
            );
        }
    }
    assert_eq!(di.pool_pages(), 4 * S);
    assert!((33 * S..37 * S).all(|pfn| counter.get(pfn) == 0));
    assert_eq!(di.report().nodes[0].nr_grown_windows, 0);
}

#[test]
fn alloc_reports_in_progress_until_claimed_chunk_is_done() {
    let ranges = [dr(0, 33 * S, 35 * S)];
    let mm = memmap_for(&ranges);
    let plan = DeferredPlan::new(&ranges, &[], &[cpus(0, &[0])], PlanOptions::default()).unwrap();
    let di = new_di(&mm, plan, InitMode::InitAndFree, &[]).unwrap();
    // Simulate a worker that claimed chunk 0 and has not finished it.
    let claim = di.claim(0, WORKER_CLAIM_WINDOWS).unwrap();
    assert_eq!(
        claim,
        Claim {
            chunk: 0,
            windows: 0..32,
            zone: ZoneType::Normal,
        }
    );
    assert_eq!(di.pool_pages(), S, "chunk 1 is still untouched");
    let mut held = Vec::new();
    let e = loop {
        match di.allocator().alloc_pages(0, ZoneType::Normal, MAX_ORDER) {
            Ok(p) => held.push(p),
            Err(e) => break e,
        }
    };
    assert_eq!(
        held.len() as u64,
        S >> MAX_ORDER,
        "the grown chunk 1 was fully usable"
    );
    assert_eq!(
        e,
        AllocError::InitInProgress {
            nid: 0,
            zone: ZoneType::Normal,
            order: MAX_ORDER,
            windows_in_flight: 32
        }
    );
    assert!(e.to_string().contains("retry"));
    assert_eq!(di.pool_pages(), 0, "the allocations grew all of chunk 1");
    assert!(!di.is_node_quiescent(0), "the claimed chunk is not done");
    // The "worker" finishes its chunk.
    di.process_claim(0, &claim);
    assert!(di.is_node_quiescent(0));
    assert!(di.is_done());
    while let Ok(p) = di.allocator().alloc_pages(0, ZoneType::Normal, MAX_ORDER) {
        held.push(p);
    }
    assert_eq!(held.len() as u64, (2 * S) >> MAX_ORDER);
    assert_eq!(
        di.allocator().alloc_pages(0, ZoneType::Normal, 0),
        Err(AllocError::OutOfMemory {
            nid: 0,
            zone: ZoneType::Normal,
            order: 0
        })
    );
    held.sort_unstable();
    held.dedup();
    assert_eq!(
        held.len() as u64,
        (2 * S) >> MAX_ORDER,
        "no block handed out twice"
    );
}

// ---------------------------------------------------------------- modes

#[test]
fn touch_mode_writes_each_page_once_and_frees_nothing() {
    let sc = four_nodes_memory_only();
    let mm = memmap_for(&sc.ranges);
    let plan = DeferredPlan::new(&sc.ranges, &sc.reserved, &sc.node_cpus, sc.opts).unwrap();
    let mut di = new_di(&mm, plan, InitMode::Touch, &[]).unwrap();
    let counter = with_counter(&mut di, span_of(&sc.ranges));
    di.run(&ThreadExecutor::new(TEST_CPUS), &StdClock::new())
        .unwrap();
    for r in &sc.ranges {
        for pfn in r.pfns.start..r.pfns.end {
            assert_eq!(counter.get(pfn), 1);
            let p = mm.page(pfn).unwrap();
            assert_eq!(*p, TestPage::touched(pfn));
        }
    }
    assert_eq!(di.buddy().nr_free_pages_total(), 0);
    assert!(matches!(
        di.allocator().alloc_pages(0, ZoneType::Normal, 0),
        Err(AllocError::OutOfMemory { .. })
    ));
    let rep = di.report();
    assert_eq!(
        rep.workers.iter().map(|w| w.nr_pages).sum::<u64>(),
        rep.nr_pages
    );
}

#[test]
fn init_only_mode_initialises_without_freeing() {
    let sc = one_node();
    let mm = memmap_for(&sc.ranges);
    let plan = DeferredPlan::new(&sc.ranges, &sc.reserved, &sc.node_cpus, sc.opts).unwrap();
    let mut di = new_di(&mm, plan, InitMode::InitOnly, &[]).unwrap();
    let counter = with_counter(&mut di, span_of(&sc.ranges));
    di.run(&ThreadExecutor::new(TEST_CPUS), &StdClock::new())
        .unwrap();
    for r in &sc.ranges {
        for pfn in r.pfns.start..r.pfns.end {
            assert_eq!(counter.get(pfn), 1);
            let mut expect = TestPage::ZERO;
            let p = mm.page(pfn).unwrap();
            expect.init_single_page(pfn, r.zone, r.nid);
            if is_reserved_pfn(&sc.reserved, pfn) {
                expect.set_reserved();
            }
            assert_eq!(p.words().flags, expect.words().flags);
            assert_eq!((p.refcount(), p.is_buddy()), (1, false));
            assert_eq!(p.list_link().map(|l| l.next), p.list_link_addr());
        }
    }
    assert_eq!(di.buddy().nr_free_pages_total(), 0);
}

/// Pages the boot CPU initialised are handed over and merge with deferred
/// ones in the same section.
#[test]
fn eager_pages_merge_with_deferred_pages() {
    let deferred = [dr(0, 33 * S + 100, 35 * S)];
    let eager = ManagedRange {
        nid: 0,
        zone: ZoneType::Normal,
        pfns: PfnRange::new(33 * S, 33 * S + 100),
    };
    let mut mm = memmap_for(&deferred);
    for pfn in eager.pfns.start..eager.pfns.end {
        mm.page_mut(pfn)
            .unwrap()
            .init_single_page(pfn, ZoneType::Normal, 0);
    }
    let plan =
        DeferredPlan::new(&deferred, &[], &[cpus(0, &[0, 1])], PlanOptions::default()).unwrap();
    let di = new_di(&mm, plan, InitMode::InitAndFree, &[eager]).unwrap();
    // SAFETY: the eager pages are initialised, on no list, and no one else uses them.
    unsafe { di.buddy().free_initialised_range(eager.pfns) }.unwrap();
    assert_eq!(di.buddy().nr_free_pages(0, ZoneType::Normal), 100);
    di.run(&ThreadExecutor::new(TEST_CPUS), &StdClock::new())
        .unwrap();
    assert_eq!(
        di.buddy().nr_free_blocks(0, ZoneType::Normal, MAX_ORDER),
        (2 * S) >> MAX_ORDER
    );
    assert_eq!(di.buddy().nr_free_pages(0, ZoneType::Normal), 2 * S);
    // Overlapping eager and deferred memory is refused.
    let plan = DeferredPlan::new(&deferred, &[], &[cpus(0, &[0])], PlanOptions::default()).unwrap();
    let bad = ManagedRange {
        pfns: PfnRange::new(33 * S + 50, 33 * S + 150),
        ..eager
    };
    assert!(matches!(
        new_di(&mm, plan, InitMode::InitAndFree, &[bad]),
        Err(DeferredInitError::Buddy(
            BuddyError::OverlappingRanges { .. }
        ))
    ));
}

// ---------------------------------------------------------------- report

/// Runs workers one after another on the calling thread, as a kernel that
/// has a single CPU would.
struct SerialExecutor {
    nr_cpus: usize,
}

impl Executor for SerialExecutor {
    fn nr_cpus(&self) -> usize {
        self.nr_cpus
    }
    fn on_each_cpu(&self, job: &(dyn Fn(CpuId) + Sync)) {
        for cpu in 0..self.nr_cpus {
            job(cpu as CpuId);
        }
    }
}

#[test]
fn report_lines_and_statistics() {
    let sc = two_nodes_with_holes();
    let mm = memmap_for(&sc.ranges);
    let node_cpus = [cpus(0, &[0]), cpus(1, &[1])];
    let plan = DeferredPlan::new(&sc.ranges, &sc.reserved, &node_cpus, sc.opts).unwrap();
    let di = new_di(&mm, plan, InitMode::InitAndFree, &[]).unwrap();
    // Every reading advances the fake clock by 1.5 ms.
    let ticks = AtomicU64::new(0);
    let clock = || ticks.fetch_add(1_500_000, Ordering::Relaxed);
    assert_eq!(
        di.run(&SerialExecutor { nr_cpus: 1 }, &clock),
        Err(DeferredInitError::NoSuchCpu {
            worker: 1,
            cpu: 1,
            nr_cpus: 1
        }),
        "a plan with a worker on CPU 1 needs two CPUs"
    );
    di.run(&SerialExecutor { nr_cpus: 2 }, &clock).unwrap();
    let rep = di.report();
    assert_eq!(rep.workers.len(), 2);
    for (i, w) in rep.workers.iter().enumerate() {
        assert!(w.finished);
        assert_eq!(w.wall_ns, 1_500_000);
        assert_eq!(w.start_ns, 3_000_000 * i as u64);
        assert_eq!(w.nr_pages, rep.nodes[i].nr_pages);
        assert_eq!(w.nr_claims, rep.nodes[i].nr_chunks, "one claim per section");
    }
    let text = rep.to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "node 0 deferred pages initialised in 1ms");
    assert_eq!(lines[1], "node 1 deferred pages initialised in 1ms");
    let total: u64 = sc.ranges.iter().map(|r| r.pfns.nr_pages()).sum();
    assert_eq!(
        lines[2],
        format!("deferred pages initialised: {total} pages on 2 nodes by 2 workers (0 pages grown on demand) in 4 ms")
    );
    assert_eq!(rep.total_wall_ns, 4_500_000);
    assert_eq!(
        di.run_worker(7, &clock),
        Err(DeferredInitError::NoSuchWorker {
            worker: 7,
            nr_workers: 2
        })
    );
}

// ---------------------------------------------------------------- buddy

/// One section of Normal memory with two managed runs, all pages initialised
/// and handed to the allocator.
pub(crate) fn buddy_fixture(
    mm: &Memmap<TestBacking>,
) -> (BuddyAllocator<'_, TestBacking>, Vec<PfnRange>) {
    let base = 33 * S;
    let runs = vec![
        PfnRange::new(base + 3, base + 5000),
        PfnRange::new(base + 6000, base + S),
    ];
    let managed = runs.iter().map(|&pfns| ManagedRange {
        nid: 0,
        zone: ZoneType::Normal,
        pfns,
    });
    let buddy = test_buddy(mm, managed).unwrap();
    for r in &runs {
        // SAFETY: single-threaded; the pages were initialised by the caller.
        unsafe { buddy.free_initialised_range(*r) }.unwrap();
    }
    (buddy, runs)
}

pub(crate) fn init_section(mm: &mut Memmap<TestBacking>, section_nr: u64) {
    let start = section_nr * S;
    for pfn in start..start + S {
        mm.page_mut(pfn)
            .unwrap()
            .init_single_page(pfn, ZoneType::of_pfn(pfn), 0);
    }
}

#[test]
fn buddy_free_errors() {
    let mut mm = Memmap::new(TestBacking::new([33]));
    init_section(&mut mm, 33);
    let (buddy, _) = buddy_fixture(&mm);
    let p = buddy.alloc(0, ZoneType::Normal, 2).unwrap();
    assert_eq!(
        buddy.free(p + 1, 2),
        Err(FreeError::Misaligned {
            pfn: p + 1,
            order: 2
        })
    );
    assert_eq!(
        buddy.free(p, MAX_ORDER + 1),
        Err(FreeError::OrderTooLarge {
            order: MAX_ORDER + 1
        })
    );
    assert_eq!(
        buddy.free(33 * S, 0),
        Err(FreeError::NotManaged {
            pfn: 33 * S,
            order: 0
        })
    );
    // A block running past the managed run.
    assert_eq!(
        buddy.free(33 * S + 4096, MAX_ORDER),
        Err(FreeError::NotManaged {
            pfn: 33 * S + 4096,
            order: MAX_ORDER
        })
    );
    // A tail page of an allocated block is not a head.
    assert_eq!(
        buddy.free(p + 1, 0),
        Err(FreeError::NotAllocated { pfn: p + 1 })
    );
    buddy.free(p, 2).unwrap();
    let e = buddy.free(p, 2).unwrap_err();
    assert_eq!(e, FreeError::NotAllocated { pfn: p });
    assert!(e.to_string().contains("double free"));
    assert_eq!(
        buddy.alloc(0, ZoneType::Normal, 11),
        Err(AllocError::OrderTooLarge { order: 11 })
    );
    assert_eq!(
        buddy.alloc(5, ZoneType::Normal, 0),
        Err(AllocError::UnknownNode { nid: 5 })
    );
}

fn managed(nid: NodeId, zone: ZoneType, start: Pfn, end: Pfn) -> ManagedRange {
    ManagedRange {
        nid,
        zone,
        pfns: PfnRange::new(start, end),
    }
}

/// Each refusal of `BuddyAllocator::new` names the range or node and says
/// what to do about it (the boot prints these verbatim).
#[test]
fn buddy_setup_errors_name_the_range_and_the_fix() {
    let mm = Memmap::new(TestBacking::new([33]));
    let refusal = |m: Vec<ManagedRange>| match test_buddy(&mm, m) {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    };
    // 33 S = 0x108000: Normal memory, labelled DMA32.
    assert_eq!(
        refusal(vec![managed(0, ZoneType::Dma32, 33 * S, 33 * S + 8)]),
        "managed range 0x108000..0x108008 of node 0 is labelled DMA32 but leaves that zone; split it at zone boundaries"
    );
    assert_eq!(
        refusal(vec![managed(64, ZoneType::Normal, 33 * S, 33 * S + 8)]),
        "node id 64 exceeds the 64 nodes struct-page flags can hold; renumber nodes densely"
    );
    assert_eq!(
        refusal(vec![
            managed(1, ZoneType::Normal, 33 * S + 4, 33 * S + 16),
            managed(0, ZoneType::Normal, 33 * S, 33 * S + 8),
        ]),
        "managed ranges 0x108000..0x108008 (node 0) and 0x108004..0x108010 (node 1) overlap; give each PFN to one (node, zone) once"
    );
    // Only section 33 is backed; the range runs one page into section 34.
    assert_eq!(
        refusal(vec![managed(0, ZoneType::Normal, 34 * S - 1, 34 * S + 1)]),
        "section 34 of managed range 0x10ffff..0x110001 (node 0) has no struct-page backing; populate the vmemmap for every section with present memory first"
    );
}

/// Two nodes meet in the middle of one 1024-page block: each half is an
/// order-9 free block of its own node. Merging must stay inside a (node,
/// zone), so the halves never become one order-10 block, whichever frees
/// last.
#[test]
fn buddies_of_different_nodes_never_merge() {
    let base = 33 * S;
    let mut mm = Memmap::new(TestBacking::new([33]));
    for pfn in base..base + 1024 {
        let nid = if pfn < base + 512 { 0 } else { 1 };
        mm.page_mut(pfn)
            .unwrap()
            .init_single_page(pfn, ZoneType::Normal, nid);
    }
    let halves = [
        managed(0, ZoneType::Normal, base, base + 512),
        managed(1, ZoneType::Normal, base + 512, base + 1024),
    ];
    let buddy = test_buddy(&mm, halves).unwrap();
    let expect_halves = |buddy: &BuddyAllocator<'_, TestBacking>| {
        for nid in [0, 1] {
            assert_eq!(buddy.nr_free_blocks(nid, ZoneType::Normal, 9), 1);
            assert_eq!(buddy.nr_free_blocks(nid, ZoneType::Normal, MAX_ORDER), 0);
            assert_eq!(buddy.nr_free_pages(nid, ZoneType::Normal), 512);
        }
    };
    for h in halves {
        // SAFETY: single-threaded; the pages were initialised above.
        unsafe { buddy.free_initialised_range(h.pfns) }.unwrap();
    }
    expect_halves(&buddy);
    // Allocated and freed again, in both orders of freeing.
    for first in [0, 1] {
        let a = buddy.alloc(0, ZoneType::Normal, 9).unwrap();
        let b = buddy.alloc(1, ZoneType::Normal, 9).unwrap();
        assert_eq!((a, b), (base, base + 512));
        let (x, y) = if first == 0 { (a, b) } else { (b, a) };
        buddy.free(x, 9).unwrap();
        buddy.free(y, 9).unwrap();
        expect_halves(&buddy);
    }
}

/// The other side of `buddies_of_different_nodes_never_merge`: two managed
/// ranges of the same (node, zone) that split one `MAX_ORDER` block (as the
/// boot CPU's share and a deferred chunk may) merge into that block, freed
/// either way round.
#[test]
fn buddies_in_adjacent_ranges_of_one_zone_merge() {
    let base = 33 * S;
    let mut mm = Memmap::new(TestBacking::new([33]));
    for pfn in base..base + 1024 {
        mm.page_mut(pfn)
            .unwrap()
            .init_single_page(pfn, ZoneType::Normal, 0);
    }
    let halves = [
        managed(0, ZoneType::Normal, base, base + 512),
        managed(0, ZoneType::Normal, base + 512, base + 1024),
    ];
    let buddy = test_buddy(&mm, halves).unwrap();
    for h in halves.iter().rev() {
        // SAFETY: single-threaded; the pages were initialised above.
        unsafe { buddy.free_initialised_range(h.pfns) }.unwrap();
    }
    assert_eq!(buddy.nr_free_blocks(0, ZoneType::Normal, MAX_ORDER), 1);
    assert_eq!(buddy.nr_free_blocks(0, ZoneType::Normal, 9), 0);
    for first in [0, 1] {
        let a = buddy.alloc(0, ZoneType::Normal, 9).unwrap();
        let b = buddy.alloc(0, ZoneType::Normal, 9).unwrap();
        let (x, y) = if first == 0 { (a, b) } else { (b, a) };
        buddy.free(x, 9).unwrap();
        buddy.free(y, 9).unwrap();
        assert_eq!(buddy.nr_free_blocks(0, ZoneType::Normal, MAX_ORDER), 1);
    }
}

/// The allocator's counters: free pages per (node, zone), per node over
/// its zones and in total, and blocks per order, where an order above
/// `MAX_ORDER` (no such list) has no blocks rather than a panic.
#[test]
fn free_counters_per_zone_node_and_order() {
    let mut mm = Memmap::new(TestBacking::new([31, 33]));
    init_section(&mut mm, 31);
    init_section(&mut mm, 33);
    for pfn in 33 * S + 4096..33 * S + 5120 {
        mm.page_mut(pfn)
            .unwrap()
            .init_single_page(pfn, ZoneType::Normal, 1);
    }
    let ranges = [
        managed(0, ZoneType::Dma32, 31 * S, 31 * S + 100),
        managed(0, ZoneType::Normal, 33 * S, 33 * S + 2048),
        managed(1, ZoneType::Normal, 33 * S + 4096, 33 * S + 5120),
    ];
    let buddy = test_buddy(&mm, ranges).unwrap();
    for r in ranges {
        // SAFETY: single-threaded; the pages were initialised above.
        unsafe { buddy.free_initialised_range(r.pfns) }.unwrap();
    }
    assert_eq!(buddy.nr_free_pages(0, ZoneType::Dma32), 100);
    assert_eq!(buddy.nr_free_pages(0, ZoneType::Normal), 2048);
    assert_eq!(buddy.nr_free_pages_node(0), 100 + 2048);
    assert_eq!(buddy.nr_free_pages_node(1), 1024);
    assert_eq!(buddy.nr_free_pages_node(2), 0, "a node without lists");
    assert_eq!(buddy.nr_free_pages_total(), 100 + 2048 + 1024);
    // 100 = 64 + 32 + 4 from an aligned start.
    let dma32: Vec<u64> = (0..=MAX_ORDER)
        .map(|o| buddy.nr_free_blocks(0, ZoneType::Dma32, o))
        .collect();
    assert_eq!(dma32, [0, 0, 1, 0, 0, 1, 1, 0, 0, 0, 0]);
    assert_eq!(buddy.nr_free_blocks(0, ZoneType::Normal, MAX_ORDER), 2);
    assert_eq!(buddy.nr_free_blocks(1, ZoneType::Normal, MAX_ORDER), 1);
    assert_eq!(buddy.nr_free_blocks(0, ZoneType::Normal, MAX_ORDER + 1), 0);
    assert_eq!(buddy.nr_free_blocks(2, ZoneType::Normal, 0), 0);
}

/// How a walk of a corrupt free list ends: it visits at most one block past
/// the list's counter (so the visitor sees what a bad link points at), then
/// calls the rest a runaway list; a list that ends early, a link out of the
/// (node, zone) and a visitor that stops are each named.
#[test]
fn free_list_walk_reports_how_a_corrupt_list_ends() {
    if test_store() != BuddyStore::Lists {
        // Bitmaps have no links to corrupt: their walk is checked against
        // a set in `free_bitmap`, a stray bit in `stray_bitmap_bit_is_caught`.
        return;
    }
    let (a, b) = (33 * S, 33 * S + 1024);
    let mut mm = Memmap::new(TestBacking::new([33]));
    init_section(&mut mm, 33);
    let buddy = test_buddy(&mm, [managed(0, ZoneType::Normal, a, a + 2048)]).unwrap();
    // SAFETY: single-threaded; the pages were initialised above.
    unsafe { buddy.free_initialised_range(PfnRange::new(a, a + 2048)) }.unwrap();
    let set_next = |pfn: Pfn, next: Pfn| {
        // SAFETY: single-threaded; nothing else holds this struct page.
        let pages = unsafe { mm.pages_mut_unchecked(PfnRange::new(pfn, pfn + 1)) };
        pages.unwrap()[0].set_next_link(next);
    };
    let walk = |stop_at: Option<Pfn>| {
        let mut seen = Vec::new();
        let end = buddy.walk_free_list(0, ZoneType::Normal, MAX_ORDER, |pfn| {
            seen.push(pfn);
            Some(pfn) != stop_at
        });
        (seen, end)
    };
    // Freed in ascending order, each pushed at the head: b, then a.
    assert_eq!(walk(None), (vec![b, a], ListEnd::Complete));
    assert_eq!(walk(Some(b)), (vec![b], ListEnd::Stopped { at: b }));
    // A cycle a -> b: b, a, then b once more (one past the count of 2).
    set_next(a, b);
    assert_eq!(walk(None), (vec![b, a, b], ListEnd::TooLong { after: b }));
    // Cut after b: one block of two.
    set_next(a, PFN_NONE);
    set_next(b, PFN_NONE);
    assert_eq!(walk(None), (vec![b], ListEnd::TooShort { walked: 1 }));
    // b links to a backed page of the section that this zone does not manage.
    set_next(b, a + 5000);
    assert_eq!(
        walk(None),
        (
            vec![b],
            ListEnd::BadLink {
                from: b,
                to: a + 5000
            }
        )
    );
    set_next(b, a);
    assert_eq!(walk(None), (vec![b, a], ListEnd::Complete), "repaired");
}

#[derive(Clone, Debug)]
enum Op {
    Alloc(u32),
    Free(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..=MAX_ORDER).prop_map(Op::Alloc),
        2 => any::<usize>().prop_map(Op::Free),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: proptest_cases(256), ..ProptestConfig::default() })]

    /// Random alloc/free sequences keep the free count, never hand out a
    /// page twice, and merge back to the maximal blocks when all is freed.
    #[test]
    fn buddy_alloc_free_properties(ops in proptest::collection::vec(op(), 1..300)) {
        let mut mm = Memmap::new(TestBacking::new([33]));
        init_section(&mut mm, 33);
        let (buddy, runs) = buddy_fixture(&mm);
        let total: u64 = runs.iter().map(|r| r.nr_pages()).sum();
        let mut owned = vec![false; S as usize];
        let mut held: Vec<(Pfn, u32)> = Vec::new();
        let mut held_pages = 0u64;
        for op in ops {
            match op {
                Op::Alloc(order) => match buddy.alloc(0, ZoneType::Normal, order) {
                    Ok(pfn) => {
                        prop_assert_eq!(pfn & ((1 << order) - 1), 0);
                        for q in pfn..pfn + (1 << order) {
                            prop_assert!(runs.iter().any(|r| r.contains(q)), "page {:#x} is managed", q);
                            let slot = &mut owned[(q - 33 * S) as usize];
                            prop_assert!(!*slot, "page {:#x} handed out twice", q);
                            *slot = true;
                        }
                        prop_assert_eq!(mm.page(pfn).unwrap().refcount(), 1);
                        prop_assert!(!mm.page(pfn).unwrap().is_buddy());
                        held.push((pfn, order));
                        held_pages += 1 << order;
                    }
                    Err(AllocError::OutOfMemory { .. }) => {
                        // Only when no free block of that order or larger exists.
                        for o in order..=MAX_ORDER {
                            prop_assert_eq!(buddy.nr_free_blocks(0, ZoneType::Normal, o), 0);
                        }
                    }
                    Err(e) => prop_assert!(false, "unexpected {}", e),
                },
                Op::Free(i) if !held.is_empty() => {
                    let (pfn, order) = held.swap_remove(i % held.len());
                    buddy.free(pfn, order).unwrap();
                    for q in pfn..pfn + (1 << order) {
                        owned[(q - 33 * S) as usize] = false;
                    }
                    held_pages -= 1 << order;
                }
                Op::Free(_) => {}
            }
            prop_assert_eq!(buddy.nr_free_pages(0, ZoneType::Normal) + held_pages, total);
        }
        for (pfn, order) in held.drain(..) {
            buddy.free(pfn, order).unwrap();
        }
        prop_assert_eq!(buddy.nr_free_pages(0, ZoneType::Normal), total);
        let mut expect: HashMap<u32, u64> = HashMap::new();
        for r in &runs {
            for (_, o) in max_blocks(*r) {
                *expect.entry(o).or_default() += 1;
            }
        }
        let mut got: HashMap<u32, u64> = HashMap::new();
        buddy.for_each_free_block(|_, _, _, o| *got.entry(o).or_default() += 1);
        prop_assert_eq!(got, expect);
        prop_assert_eq!(buddy.nr_free_blocks(0, ZoneType::Normal, MAX_ORDER), 3 + 26, "blocks 1024..4096 and 6144..32768 of the section");
    }
}

/// Memory above every managed range of its zone (a node's vmemmap, which
/// memblock places at the node's top) joins late only where the allocator
/// was told it may: the free bitmaps must cover it, the lists need not.
#[test]
fn a_range_beyond_the_managed_span_joins_where_it_may() {
    let a = 33 * S;
    let mut mm = Memmap::new(TestBacking::new([33]));
    init_section(&mut mm, 33);
    let range = |start, end| ManagedRange {
        nid: 0,
        zone: ZoneType::Normal,
        pfns: PfnRange::new(start, end),
    };
    let managed = [range(a, a + 1024)];
    let top = range(a + S - 8, a + S);
    let told = BuddyAllocator::with_store(&mm, managed, [range(a + 1024, a + S)], test_store())
        .unwrap();
    told.manage(top).unwrap();
    // SAFETY: single-threaded; the section's pages were initialised above.
    unsafe { told.free_initialised_range(top.pfns) }.unwrap();
    assert_eq!(told.nr_free_pages(0, ZoneType::Normal), 8);
    assert_eq!(told.alloc(0, ZoneType::Normal, 3).unwrap(), a + S - 8);

    let untold = test_buddy(&mm, managed).unwrap();
    let managed_late = untold.manage(top);
    match test_store() {
        BuddyStore::Lists => assert!(managed_late.is_ok()),
        BuddyStore::Bitmaps => assert!(managed_late.is_err(), "{managed_late:?}"),
    }
}

/// Reserved memory given back once memory is ready (HVO's freed vmemmap
/// pages): a range the allocator did not manage joins it through
/// `manage`, merges only within itself, and can be allocated and freed
/// again; a range managed already is left alone, one overlapping a managed
/// range is refused.
#[test]
fn a_range_managed_late_joins_the_allocator() {
    let a = 33 * S;
    let mut mm = Memmap::new(TestBacking::new([33]));
    init_section(&mut mm, 33);
    // The allocator manages [a, a + 1024) and [a + 2048, a + 4096): the
    // pages between are reserved, until seven of them are given back.
    let buddy = test_buddy(
        &mm,
        [
            managed(0, ZoneType::Normal, a, a + 1024),
            managed(0, ZoneType::Normal, a + 2048, a + 4096),
        ],
    )
    .unwrap();
    let late = PfnRange::new(a + 1025, a + 1032);
    let range = |pfns| ManagedRange {
        nid: 0,
        zone: ZoneType::Normal,
        pfns,
    };
    // SAFETY: single-threaded; the pages were initialised above.
    let free = |r| unsafe { buddy.free_initialised_range(r) };
    assert!(free(late).is_err(), "not managed yet");
    buddy.manage(range(late)).unwrap();
    buddy.manage(range(PfnRange::new(a, a + 8))).unwrap();
    assert!(buddy
        .manage(range(PfnRange::new(a + 1020, a + 1030)))
        .is_err());
    free(late).unwrap();
    assert_eq!(buddy.nr_free_pages(0, ZoneType::Normal), 7);
    // 1025 | 1026..1028 | 1028..1032: the blocks of the range alone.
    let blocks: Vec<u64> = (0..3)
        .map(|o| buddy.nr_free_blocks(0, ZoneType::Normal, o))
        .collect();
    assert_eq!(blocks, [1, 1, 1]);
    let p = buddy.alloc(0, ZoneType::Normal, 2).unwrap();
    assert_eq!(p, a + 1028);
    buddy.free(p, 2).unwrap();
    assert_eq!(buddy.nr_free_pages(0, ZoneType::Normal), 7);
}
