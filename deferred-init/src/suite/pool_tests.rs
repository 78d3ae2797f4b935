//! On-demand init: allocations grow nodes out of the untouched pool while
//! draining workers race them for the same claims. Every page is
//! initialised exactly once or still untouched, none is lost or handed out
//! twice, and once everything is freed and drained the lists are the
//! maximal aligned blocks.

use std::collections::HashMap;
use std::sync::Barrier;
use std::vec::Vec;

use memmap::page::PageLayout;
use memmap::store::Memmap;
use memmap::{DeferredRange, NodeId, Pfn, PfnRange, ZoneType, MAX_ORDER, PAGES_PER_SECTION};
use proptest::prelude::*;

use super::tests::{
    assert_fully_merged, cpus, dr, is_reserved_pfn, memmap_for, new_di, proptest_cases,
    race_loop_done, span_of, with_counter, InitCounter, TestBacking, TestPage, TEST_CPUS,
};
use crate::std_seams::{StdClock, ThreadExecutor};
use crate::*;

const S: u64 = PAGES_PER_SECTION;
/// The orders the boot's allocation test mixes.
const ORDERS: [u32; 4] = [0, 3, 9, MAX_ORDER];

/// Check a quiescent on-demand state in which `allocated` blocks are held:
/// every deferred page is either untouched (in the pool, struct page still
/// all zero) or initialised exactly once; every initialised free page is in
/// exactly one free or held block; no block touches the pool; and
/// free + held + pool = the deferred pages that are not reserved.
fn check_pool_state(
    mm: &Memmap<TestBacking>,
    di: &DeferredInit<'_, TestBacking>,
    ranges: &[DeferredRange],
    reserved: &[PfnRange],
    counter: &InitCounter,
    allocated: &[(Pfn, u32)],
) {
    let pool = PoolCheck::new(di);
    let span = span_of(ranges);
    let idx = |pfn: Pfn| (pfn - span.start) as usize;
    let mut cover = vec![0u8; span.nr_pages() as usize];
    let mut held_pages = 0;
    for &(pfn, order) in allocated {
        held_pages += 1 << order;
        for p in pfn..pfn + (1 << order) {
            assert!(!pool.contains(p), "held block {pfn:#x} overlaps the pool");
            cover[idx(p)] += 1;
        }
    }
    di.buddy().for_each_free_block(|_, _, pfn, order| {
        for p in pfn..pfn + (1 << order) {
            assert!(!pool.contains(p), "free block {pfn:#x} overlaps the pool");
            cover[idx(p)] += 1;
        }
    });
    let (mut pool_free, mut nonreserved) = (0, 0);
    for r in ranges {
        for pfn in r.pfns.start..r.pfns.end {
            let reserved_pfn = is_reserved_pfn(reserved, pfn);
            nonreserved += u64::from(!reserved_pfn);
            let p = mm.page(pfn).unwrap();
            if pool.contains(pfn) {
                assert_eq!(counter.get(pfn), 0, "pool pfn {pfn:#x} never initialised");
                assert_eq!(*p, TestPage::ZERO, "pool pfn {pfn:#x} untouched");
                assert_eq!(cover[idx(pfn)], 0);
                pool_free += u64::from(!reserved_pfn);
                continue;
            }
            assert_eq!(counter.get(pfn), 1, "pfn {pfn:#x} initialised exactly once");
            assert!(p.links_match(pfn, r.zone, r.nid), "pfn {pfn:#x} links");
            assert_eq!(p.is_reserved(), reserved_pfn, "pfn {pfn:#x} PG_reserved");
            let expect = u8::from(!reserved_pfn);
            assert_eq!(
                cover[idx(pfn)],
                expect,
                "pfn {pfn:#x} in one block iff free memory"
            );
        }
    }
    let free = di.buddy().nr_free_pages_total();
    assert_eq!(free + held_pages + pool_free, nonreserved, "nothing lost");
    assert_eq!(pool.pages(), di.pool_pages());
}

/// Allocate mixed orders from `nid` until `budget` allocations or out of
/// memory, freeing every fourth block back; returns what is still held.
fn allocate(
    di: &DeferredInit<'_, TestBacking>,
    nid: NodeId,
    seed: u64,
    budget: usize,
) -> Vec<(Pfn, u32)> {
    let mut held = Vec::new();
    let mut seed = seed;
    for i in 0..budget {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let order = ORDERS[(seed >> 33) as usize % ORDERS.len()];
        match di
            .allocator()
            .alloc_pages_counted(nid, ZoneType::Normal, order)
        {
            Ok(a) => {
                assert!(
                    a.growth_steps <= 64,
                    "one window per step, few steps per call"
                );
                held.push((a.pfn, order));
            }
            Err(AllocError::OutOfMemory { .. }) | Err(AllocError::InitInProgress { .. }) => {
                std::thread::yield_now()
            }
            Err(e) => panic!("{e}"),
        }
        if i % 4 == 3 && !held.is_empty() {
            let (p, o) = held.swap_remove((seed >> 40) as usize % held.len());
            di.allocator().free_pages(p, o).unwrap();
        }
    }
    held
}

/// Start `nr_workers` drain workers (`drain_steps` claims each) and the
/// `allocators` (node, seed offset; seeded by `run`) at once; returns the
/// blocks the allocators still hold.
fn drain_while_allocating(
    di: &DeferredInit<'_, TestBacking>,
    clock: &StdClock,
    nr_workers: usize,
    drain_steps: usize,
    allocators: &[(NodeId, u64)],
    run: u64,
) -> Vec<(Pfn, u32)> {
    let barrier = Barrier::new(nr_workers + allocators.len());
    std::thread::scope(|s| {
        for w in 0..nr_workers {
            let barrier = &barrier;
            s.spawn(move || {
                barrier.wait();
                for _ in 0..drain_steps {
                    if !di.worker_step(w, clock).unwrap() {
                        break;
                    }
                }
            });
        }
        let handles: Vec<_> = allocators
            .iter()
            .map(|&(nid, k)| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    allocate(di, nid, run * 7 + k, 120)
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    })
}

#[test]
fn allocations_race_draining_workers_on_the_pool() {
    let ranges = vec![
        dr(0, 33 * S + 11, 36 * S),
        dr(0, 37 * S, 38 * S + 3000),
        dr(1, 40 * S, 43 * S + 1),
    ];
    let reserved = vec![
        PfnRange::new(34 * S, 34 * S + 700),
        PfnRange::new(41 * S + 1, 41 * S + 2050),
    ];
    let node_cpus = vec![cpus(0, &[0, 1]), cpus(1, &[2])];
    // Two allocating threads per node, so growers race each other on a
    // node's claims as well as the drain workers.
    let allocators: [(NodeId, u64); 4] = [(0, 1), (0, 2), (1, 3), (1, 4)];
    let (mut partial_runs, mut contended) = (0, 0);
    let (full_runs, mut nr_runs) = (200, 0);
    for run in 0..full_runs {
        let mm = memmap_for(&ranges);
        let plan =
            DeferredPlan::new(&ranges, &reserved, &node_cpus, PlanOptions::default()).unwrap();
        let nr_workers = plan.workers().len();
        let mut di = new_di(&mm, plan, InitMode::InitAndFree, &[]).unwrap();
        let counter = with_counter(&mut di, span_of(&ranges));
        let clock = StdClock::new();
        // Drain a few claims per worker, varying by run: some runs leave
        // most of the pool, some drain it all.
        let drain_steps = (run % 7) as usize;
        let allocated =
            drain_while_allocating(&di, &clock, nr_workers, drain_steps, &allocators, run);
        partial_runs += u64::from(di.pool_pages() > 0);
        contended += di
            .report()
            .nodes
            .iter()
            .map(|n| n.nr_contended_growth_steps)
            .sum::<u64>();
        check_pool_state(&mm, &di, &ranges, &reserved, &counter, &allocated);
        for &(pfn, order) in &allocated {
            di.allocator().free_pages(pfn, order).unwrap();
        }
        check_pool_state(&mm, &di, &ranges, &reserved, &counter, &[]);
        di.run(&ThreadExecutor::new(TEST_CPUS), &clock).unwrap();
        assert_eq!(di.pool_pages(), 0, "drained");
        check_pool_state(&mm, &di, &ranges, &reserved, &counter, &[]);
        assert_fully_merged(&di, &ranges, &reserved);
        nr_runs = run + 1;
        if race_loop_done(
            nr_runs,
            full_runs,
            partial_runs >= nr_runs / 10 && contended > 0,
        ) {
            break;
        }
    }
    // Whether a run ends with pool left depends on how the host schedules
    // the threads; the race is only exercised when some do. A loaded host
    // lets workers finish first more often, so ask for a tenth, not most.
    std::println!(
        "pool race: {partial_runs} of {nr_runs} runs ended with pool left, {contended} growth steps contended"
    );
    assert!(
        partial_runs >= nr_runs / 10,
        "runs that ended with pool left: {partial_runs} of {nr_runs}"
    );
    // The race itself: growth steps that ran while another claim of the same
    // node (a drain worker's or the other allocator's) was in progress.
    assert!(
        contended > 0,
        "no growth step overlapped another claim of its node in {nr_runs} runs: the race was not exercised"
    );
}

#[test]
fn pool_setup_touches_no_struct_page_and_growth_is_one_window_per_step() {
    let ranges = [dr(0, 33 * S, 41 * S)];
    let mm = memmap_for(&ranges);
    let plan = DeferredPlan::new(&ranges, &[], &[cpus(0, &[0])], PlanOptions::default()).unwrap();
    let mut di = new_di(&mm, plan, InitMode::InitAndFree, &[]).unwrap();
    let counter = with_counter(&mut di, span_of(&ranges));
    assert_eq!(di.pool_pages(), 8 * S);
    check_pool_state(&mm, &di, &ranges, &[], &counter, &[]);
    // An order-0 allocation initialises one window: 1024 pages, not a section.
    let a = di
        .allocator()
        .alloc_pages_counted(0, ZoneType::Normal, 0)
        .unwrap();
    assert_eq!((a.pfn, a.growth_steps), (33 * S, 1));
    assert_eq!(di.pool_pages(), 8 * S - 1024);
    // The next 1023 order-0 allocations come from that window, no growth.
    let mut held = vec![(a.pfn, 0)];
    for _ in 0..1023 {
        let b = di
            .allocator()
            .alloc_pages_counted(0, ZoneType::Normal, 0)
            .unwrap();
        assert_eq!(b.growth_steps, 0);
        held.push((b.pfn, 0));
    }
    let c = di
        .allocator()
        .alloc_pages_counted(0, ZoneType::Normal, MAX_ORDER)
        .unwrap();
    assert_eq!((c.pfn, c.growth_steps), (33 * S + 1024, 1));
    held.push((c.pfn, MAX_ORDER));
    check_pool_state(&mm, &di, &ranges, &[], &counter, &held);
    let rep = di.report();
    assert_eq!(
        (rep.nodes[0].nr_grown_windows, rep.nodes[0].nr_grown_pages),
        (2, 2048)
    );
}

/// [`DeferredInit::take_from_pool`] on the reserved pages of `pfns`: it
/// takes exactly those of them still in the pool (its count, and the pool
/// after), and refuses free memory still in the pool.
fn take(
    di: &DeferredInit<'_, TestBacking>,
    ranges: &[DeferredRange],
    reserved: &[PfnRange],
    pfns: PfnRange,
) {
    let before = PoolCheck::new(di);
    for r in ranges {
        let Some(part) = r.pfns.intersect(&pfns) else {
            continue;
        };
        let reserved_parts = reserved.iter().filter_map(|res| res.intersect(&part));
        for res in reserved_parts {
            // Reserved ranges may overlap: count against the pool as it is.
            let now = PoolCheck::new(di);
            let expected = (res.start..res.end).filter(|&p| now.contains(p)).count() as u64;
            assert_eq!(di.take_from_pool(r.nid, res), Ok(expected), "{res:?}");
        }
        let free_in_pool = (part.start..part.end)
            .find(|&p| before.contains(p) && !is_reserved_pfn(reserved, p));
        if let Some(pfn) = free_in_pool {
            let one = PfnRange::new(pfn, pfn + 1);
            assert_eq!(
                di.take_from_pool(r.nid, one),
                Err(DeferredInitError::TakesFreeMemory { nid: r.nid, pfn })
            );
        }
    }
    let after = PoolCheck::new(di);
    for pfn in pfns.start..pfns.end {
        let in_pool = before.contains(pfn) && !is_reserved_pfn(reserved, pfn);
        assert_eq!(after.contains(pfn), in_pool, "pfn {pfn:#x}");
    }
}

/// Taking reserved runs out of the pool in any order (HVO frees one run
/// per huge page, not always ascending across nodes' calls): the pool
/// lists none of them, and the drain that later claims their window writes
/// each of its other pages once and none of theirs again.
#[test]
fn taken_runs_stay_out_of_the_pool_in_any_order() {
    let ranges = [dr(0, 33 * S, 34 * S)];
    let reserved = [PfnRange::new(33 * S + 100, 33 * S + 5000)];
    let mm = memmap_for(&ranges);
    let plan =
        DeferredPlan::new(&ranges, &reserved, &[cpus(0, &[0])], PlanOptions::default()).unwrap();
    let mut di = new_di(&mm, plan, InitMode::InitAndFree, &[]).unwrap();
    let counter = with_counter(&mut di, span_of(&ranges));
    let runs = [(3000, 3007), (200, 207), (1000, 1001), (4990, 5000), (2000, 2010)]
        .map(|(a, b)| PfnRange::new(33 * S + a, 33 * S + b));
    for r in runs {
        assert_eq!(di.take_from_pool(0, r), Ok(r.nr_pages()));
    }
    let pool = PoolCheck::new(&di);
    let taken: u64 = runs.iter().map(|r| r.nr_pages()).sum();
    assert_eq!(pool.pages(), S - taken);
    for r in runs {
        assert!((r.start..r.end).all(|p| !pool.contains(p)), "{r:?}");
        assert!(pool.contains(r.start - 1) && pool.contains(r.end), "{r:?}");
        assert_eq!(di.take_from_pool(0, r), Ok(0), "taken twice: {r:?}");
    }
    check_pool_state(&mm, &di, &ranges, &reserved, &counter, &[]);
    di.run(&ThreadExecutor::new(TEST_CPUS), &StdClock::new()).unwrap();
    check_pool_state(&mm, &di, &ranges, &reserved, &counter, &[]);
    assert_eq!(di.report().nodes[0].nr_taken_pages, taken);
}

fn arb_world() -> impl Strategy<Value = (Vec<DeferredRange>, Vec<PfnRange>)> {
    // Up to 3 ranges over sections 33..45 with unaligned ends, per node.
    let range = (0u32..2, 33u64..44, 1u64..3, 0u64..3000, 0u64..3000);
    (
        proptest::collection::vec(range, 1..4),
        proptest::collection::vec((33u64..45, 0u64..S, 1u64..3000), 0..4),
    )
        .prop_map(|(rs, res)| {
            let mut ranges: Vec<DeferredRange> = Vec::new();
            let mut next_free = 0;
            let mut sorted = rs;
            sorted.sort_by_key(|r| r.1);
            for (nid, sec, len, head, tail) in sorted {
                let start = (sec * S + head).max(next_free);
                let end = ((sec + len) * S).saturating_sub(tail);
                if end > start {
                    ranges.push(dr(nid, start, end));
                    next_free = end;
                }
            }
            let reserved = res
                .into_iter()
                .map(|(sec, off, len)| PfnRange::new(sec * S + off, sec * S + off + len))
                .collect();
            (ranges, reserved)
        })
        .prop_filter("some memory", |(r, _)| !r.is_empty())
}

/// One step of a serial on-demand session.
#[derive(Clone, Debug)]
enum Op {
    Alloc { nid: NodeId, order_idx: usize },
    Free { idx: usize },
    Drain { worker: usize },
    /// Take the reserved pages among `len` pages from `start` out of the
    /// pool (as HVO takes freed vmemmap frames).
    Take { start: Pfn, len: u64 },
}

fn arb_ops() -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(
        prop_oneof![
            6 => (0u32..2, 0usize..4).prop_map(|(nid, order_idx)| Op::Alloc { nid, order_idx }),
            3 => (0usize..64).prop_map(|idx| Op::Free { idx }),
            1 => (0usize..4).prop_map(|worker| Op::Drain { worker }),
            1 => (33 * S..45 * S, 1u64..3000).prop_map(|(start, len)| Op::Take { start, len }),
        ],
        1..80,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(proptest_cases(64)))]

    /// Random maps and random sequences of allocations, frees and drain
    /// steps: the state is consistent after every step, and the end state
    /// drains to the maximal aligned blocks.
    #[test]
    fn random_maps_and_allocation_sequences((ranges, reserved) in arb_world(), ops in arb_ops()) {
        let mm = memmap_for(&ranges);
        let node_cpus = [cpus(0, &[0, 1]), cpus(1, &[1])];
        let plan = DeferredPlan::new(&ranges, &reserved, &node_cpus, PlanOptions::default()).unwrap();
        let nr_workers = plan.workers().len();
        let mut di = new_di(&mm, plan, InitMode::InitAndFree, &[]).unwrap();
        let counter = with_counter(&mut di, span_of(&ranges));
        let clock = StdClock::new();
        let mut held: Vec<(Pfn, u32)> = Vec::new();
        let mut heads: HashMap<Pfn, u32> = HashMap::new();
        for op in &ops {
            match *op {
                Op::Alloc { nid, order_idx } => {
                    let zone = ranges.iter().find(|r| r.nid == nid).map_or(ZoneType::Normal, |r| r.zone);
                    if let Ok(a) = di.allocator().alloc_pages_counted(nid, zone, ORDERS[order_idx]) {
                        prop_assert!(heads.insert(a.pfn, ORDERS[order_idx]).is_none(), "handed out twice");
                        held.push((a.pfn, ORDERS[order_idx]));
                    }
                }
                Op::Free { idx } if !held.is_empty() => {
                    let (p, o) = held.swap_remove(idx % held.len());
                    heads.remove(&p);
                    di.allocator().free_pages(p, o).unwrap();
                }
                Op::Free { .. } => {}
                Op::Drain { worker } if nr_workers > 0 => {
                    di.worker_step(worker % nr_workers, &clock).unwrap();
                }
                Op::Drain { .. } => {}
                Op::Take { start, len } => take(&di, &ranges, &reserved, PfnRange::new(start, start + len)),
            }
        }
        check_pool_state(&mm, &di, &ranges, &reserved, &counter, &held);
        for &(p, o) in &held {
            di.allocator().free_pages(p, o).unwrap();
        }
        di.run(&ThreadExecutor::new(TEST_CPUS), &clock).unwrap();
        check_pool_state(&mm, &di, &ranges, &reserved, &counter, &[]);
        assert_fully_merged(&di, &ranges, &reserved);
    }
}
