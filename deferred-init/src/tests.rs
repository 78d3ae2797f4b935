//! Host tests with real threads: exactly-once init, free-list coverage,
//! grow-on-demand races, buddy properties, plan and report.

use alloc::sync::Arc;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Barrier;
use std::vec::Vec;

use memmap::page::StructPage;
use memmap::store::{Memmap, VecBacking};
use memmap::{DeferredRange, NodeId, Pfn, PfnRange, ZoneType, MAX_ORDER, PAGES_PER_SECTION};
use proptest::prelude::*;

use crate::buddy::{for_each_max_block, PFN_NONE};
use crate::host::{StdClock, ThreadExecutor};
use crate::*;

const S: u64 = PAGES_PER_SECTION;

fn dr(nid: NodeId, start: Pfn, end: Pfn) -> DeferredRange {
    DeferredRange {
        nid,
        zone: ZoneType::of_pfn(start),
        pfns: PfnRange::new(start, end),
    }
}

fn cpus(nid: NodeId, c: &[CpuId]) -> NodeCpus {
    NodeCpus {
        nid,
        cpus: c.to_vec(),
    }
}

/// Per-PFN count of how often a worker or grower initialised the page.
struct InitCounter {
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
    fn get(&self, pfn: Pfn) -> u32 {
        self.counts[(pfn - self.base) as usize].load(Ordering::Relaxed)
    }
}

fn span_of(ranges: &[DeferredRange]) -> PfnRange {
    let start = ranges.iter().map(|r| r.pfns.start).min().unwrap();
    let end = ranges.iter().map(|r| r.pfns.end).max().unwrap();
    PfnRange::new(start, end)
}

fn memmap_for(ranges: &[DeferredRange]) -> Memmap<VecBacking> {
    let pfns: Vec<PfnRange> = ranges.iter().map(|r| r.pfns).collect();
    Memmap::new(VecBacking::for_ranges(&pfns))
}

fn with_counter<'m>(di: &mut DeferredInit<'m, VecBacking>, span: PfnRange) -> Arc<InitCounter> {
    let counter = Arc::new(InitCounter::new(span));
    let c = counter.clone();
    di.init_hook = Some(Arc::new(move |r| c.record(r)));
    counter
}

fn is_reserved_pfn(reserved: &[PfnRange], pfn: Pfn) -> bool {
    reserved.iter().any(|r| r.contains(pfn))
}

/// Check everything the issue promises after a completed `InitAndFree` run
/// in which `allocated` blocks are still held by callers.
fn verify_complete(
    mm: &Memmap<VecBacking>,
    di: &DeferredInit<'_, VecBacking>,
    ranges: &[DeferredRange],
    reserved: &[PfnRange],
    counter: &InitCounter,
    allocated: &[(Pfn, u32)],
) {
    assert!(di.is_done(), "all chunks processed");
    let span = span_of(ranges);
    let idx = |pfn: Pfn| (pfn - span.start) as usize;
    let mut cover = vec![0u8; span.nr_pages() as usize];
    let mut alloc_head: HashMap<Pfn, u32> = HashMap::new();
    for &(pfn, order) in allocated {
        assert!(
            alloc_head.insert(pfn, order).is_none(),
            "block {pfn:#x} handed out twice"
        );
        for p in pfn..pfn + (1 << order) {
            cover[idx(p)] += 1;
        }
    }
    // Free lists: heads, links, coverage.
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
            assert_eq!((p.lru.prev, p.lru.next), (prev, next), "links of {h:#x}");
            for q in h..h + (1 << order) {
                cover[idx(q)] += 1;
                assert_eq!(mm.page(q).unwrap().refcount, 0, "free page {q:#x} refcount");
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
    // Every deferred page: initialised once, right links, right ownership.
    let mut expect_free: HashMap<(NodeId, ZoneType), u64> = HashMap::new();
    for r in ranges {
        for pfn in r.pfns.start..r.pfns.end {
            assert_eq!(counter.get(pfn), 1, "pfn {pfn:#x} initialised exactly once");
            let p = mm.page(pfn).unwrap();
            assert!(p.links_match(pfn, r.zone, r.nid), "pfn {pfn:#x} links");
            assert_eq!(p.mapping | p.index | p.memcg_data, 0);
            if is_reserved_pfn(reserved, pfn) {
                assert!(p.is_reserved(), "reserved pfn {pfn:#x} has PG_reserved");
                assert_eq!(
                    (p.refcount, p.mapcount),
                    (1, -1),
                    "reserved pfn {pfn:#x} untouched by buddy"
                );
                assert_eq!(
                    p.lru.next,
                    p.lru_addr(),
                    "reserved pfn {pfn:#x} self-linked"
                );
                assert_eq!(cover[idx(pfn)], 0, "reserved pfn {pfn:#x} never freed");
            } else {
                assert!(!p.is_reserved());
                assert_eq!(
                    cover[idx(pfn)],
                    1,
                    "pfn {pfn:#x} in exactly one free or allocated block"
                );
                let held = alloc_head.get(&pfn).is_some();
                assert_eq!(p.refcount, held as i32, "pfn {pfn:#x} refcount");
                *expect_free.entry((r.nid, r.zone)).or_default() += 1;
            }
        }
    }
    for &(pfn, order) in allocated {
        let p = mm.page(pfn).unwrap();
        *expect_free.get_mut(&(p.nid(), p.zone().unwrap())).unwrap() -= 1 << order;
    }
    // Nothing outside deferred memory was covered.
    let deferred_pages: u64 = ranges.iter().map(|r| r.pfns.nr_pages()).sum();
    let reserved_in: u64 = (span.start..span.end)
        .filter(|&p| ranges.iter().any(|r| r.pfns.contains(p)) && is_reserved_pfn(reserved, p))
        .count() as u64;
    let covered: u64 = cover.iter().map(|&c| c as u64).sum();
    assert_eq!(
        covered,
        deferred_pages - reserved_in,
        "no page outside deferred memory on a list"
    );
    for (&(nid, zone), &n) in &expect_free {
        assert_eq!(
            di.buddy().nr_free_pages(nid, zone),
            n,
            "free pages of node {nid} {zone:?}"
        );
    }
    // Statistics add up.
    let rep = di.report();
    for n in &rep.nodes {
        assert!(n.done);
        assert_eq!(
            n.nr_worker_pages + n.nr_grown_pages,
            n.nr_pages,
            "node {} pages accounted",
            n.nid
        );
        let chunks: u64 = rep
            .workers
            .iter()
            .filter(|w| w.nid == n.nid)
            .map(|w| w.nr_chunks)
            .sum();
        assert_eq!(chunks + n.nr_grown_chunks, n.nr_chunks);
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
            cpus(1, &[3]),
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
        let mut di = DeferredInit::new(&mm, plan, InitMode::InitAndFree, &[]).unwrap();
        let counter = with_counter(&mut di, span_of(&sc.ranges));
        di.run(&ThreadExecutor, &StdClock::new());
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
}

#[test]
fn fully_aligned_memory_ends_as_max_order_blocks() {
    let ranges = [dr(0, 33 * S, 35 * S)];
    let mm = memmap_for(&ranges);
    let plan =
        DeferredPlan::new(&ranges, &[], &[cpus(0, &[0, 1])], PlanOptions::default()).unwrap();
    let di = DeferredInit::new(&mm, plan, InitMode::InitAndFree, &[]).unwrap();
    di.run(&ThreadExecutor, &StdClock::new());
    let nr_blocks = 2 * S >> MAX_ORDER;
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
    let mut nr_grown_total = 0;
    for run in 0..200u64 {
        let mm = memmap_for(&ranges);
        let plan =
            DeferredPlan::new(&ranges, &reserved, &node_cpus, PlanOptions::default()).unwrap();
        let nr_workers = plan.workers().len();
        let mut di = DeferredInit::new(&mm, plan, InitMode::InitAndFree, &[]).unwrap();
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
                        let mut held: Vec<(Pfn, u32)> = Vec::new();
                        let mut seed = run * 31 + t as u64 + 1;
                        barrier.wait();
                        let mut max_order = MAX_ORDER;
                        loop {
                            seed = seed
                                .wrapping_mul(6364136223846793005)
                                .wrapping_add(1442695040888963407);
                            let order = ((seed >> 33) % (max_order as u64 + 1)) as u32;
                            match di.alloc_pages(nid, zone, order) {
                                Ok(pfn) => {
                                    held.push((pfn, order));
                                    if held.len() % 3 == 0 {
                                        let (p, o) =
                                            held.swap_remove((seed >> 40) as usize % held.len());
                                        di.free_pages(p, o).unwrap();
                                    }
                                }
                                Err(AllocError::InitInProgress { .. }) => std::thread::yield_now(),
                                // Larger orders run out first; go on with smaller ones.
                                Err(AllocError::OutOfMemory { .. }) if order > 0 => {
                                    max_order = order - 1
                                }
                                Err(AllocError::OutOfMemory { .. }) => break,
                                Err(e) => panic!("{e}"),
                            }
                        }
                        held
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        });
        nr_grown_total += di
            .report()
            .nodes
            .iter()
            .map(|n| n.nr_grown_chunks)
            .sum::<u64>();
        verify_complete(&mm, &di, &ranges, &reserved, &counter, &allocated);
        for &(pfn, order) in &allocated {
            di.free_pages(pfn, order).unwrap();
        }
        assert_fully_merged(&di, &ranges, &reserved);
    }
    std::println!("grow-on-demand race: {nr_grown_total} chunks grown by allocators over 200 runs");
}

/// With every page free, the lists hold exactly the largest aligned blocks
/// of each maximal free run (everything merged back).
fn assert_fully_merged(
    di: &DeferredInit<'_, VecBacking>,
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
        for_each_max_block(m.pfns, |_, order| {
            *expect.entry((m.nid, m.zone, order)).or_default() += 1
        });
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
