//! Tests of the per-CPU page caches (`pcp`): what a cache takes and gives
//! back, that a round trip through caches leaves the free blocks as they
//! were, refusals, and CPUs allocating from one zone at once.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Barrier;
use std::vec::Vec;

use memmap::page::PageLayout;
use memmap::store::Memmap;
use memmap::{Pfn, PfnRange, ZoneType, MAX_ORDER, PAGES_PER_SECTION};

use super::tests::{buddy_fixture, init_section, race_loop_done, TestBacking, TestPage};
use crate::*;

const S: u64 = PAGES_PER_SECTION;
const NORMAL: ZoneType = ZoneType::Normal;

fn free_blocks(buddy: &BuddyAllocator<'_, TestBacking>) -> BTreeSet<(Pfn, u32)> {
    let mut v = BTreeSet::new();
    buddy.for_each_free_block(|_, _, p, o| {
        v.insert((p, o));
    });
    v
}

/// Section 33, every struct page initialised (Normal memory of node 0).
fn initialised_section() -> Memmap<TestBacking> {
    let mut mm = Memmap::new(TestBacking::new([33]));
    init_section(&mut mm, 33);
    mm
}

/// A buddy allocator over `ranges` of `mm`, every page of them freed.
fn filled_buddy<'m>(
    mm: &'m Memmap<TestBacking>,
    ranges: &[ManagedRange],
) -> BuddyAllocator<'m, TestBacking> {
    let buddy = super::tests::test_buddy(mm, ranges.iter().copied()).unwrap();
    for r in ranges {
        // SAFETY: single-threaded; the caller initialised the pages.
        unsafe { buddy.free_initialised_range(r.pfns) }.unwrap();
    }
    buddy
}

/// The page's (refcount, is_buddy) as the allocator left it.
fn state(mm: &Memmap<TestBacking>, pfn: Pfn) -> (i32, bool) {
    let p: &TestPage = mm.page(pfn).unwrap();
    (p.refcount(), p.is_buddy())
}

/// Order-0 pages through one CPU's cache: distinct, allocated (refcount
/// 1), the store short by whole batches; freed and drained, the free
/// blocks are exactly those before.
#[test]
fn a_round_trip_through_a_cache_restores_the_free_blocks() {
    let mm = initialised_section();
    let (buddy, runs) = buddy_fixture(&mm);
    let total: u64 = runs.iter().map(|r| r.nr_pages()).sum();
    let before = free_blocks(&buddy);
    let caches = PerCpuPages::new(2);
    let pages = PageAllocator::new(&buddy, None)
        .with_cpu_caches(&caches)
        .on_cpu(1);
    let n = 1000u64;
    let got: Vec<Pfn> = (0..n)
        .map(|_| pages.alloc_pages(0, NORMAL, 0).unwrap())
        .collect();
    let distinct: BTreeSet<Pfn> = got.iter().copied().collect();
    assert_eq!(distinct.len() as u64, n);
    assert!(got.iter().all(|&p| runs.iter().any(|r| r.contains(p))));
    assert!(got.iter().all(|&p| state(&mm, p) == (1, false)));
    // A refill takes whole blocks (32 + 16 + 8 + 4 + 2 + 1 pages while
    // the store has them): a batch is runs of consecutive PFNs, the
    // first 32 pages one aligned block.
    let first: Vec<Pfn> = got[..32].to_vec();
    assert_eq!(first[0] % 32, 0, "{first:?}");
    assert!(first.windows(2).all(|w| w[1] == w[0] + 1), "{first:?}");
    let taken = n.div_ceil(PCP_BATCH as u64) * PCP_BATCH as u64;
    assert_eq!(caches.nr_cached_pages(), taken - n);
    assert_eq!(buddy.nr_free_pages(0, NORMAL), total - taken);
    for &p in &got {
        pages.free_pages(p, 0).unwrap();
        assert_eq!(state(&mm, p), (0, false), "cached or merged, never held");
    }
    let cached = caches.nr_cached_pages();
    assert!(cached <= PCP_HIGH as u64, "{cached}");
    assert_eq!(buddy.nr_free_pages(0, NORMAL) + cached, total);
    pages.drain_cpu_cache();
    assert_eq!(caches.nr_cached_pages(), 0);
    assert_eq!(free_blocks(&buddy), before);
    // A copy not told its CPU goes straight to the lists.
    let boot = PageAllocator::new(&buddy, None).with_cpu_caches(&caches);
    let p = boot.alloc_pages(0, NORMAL, 0).unwrap();
    assert_eq!(caches.nr_cached_pages(), 0);
    boot.free_pages(p, 0).unwrap();
    assert_eq!(free_blocks(&buddy), before);
}

/// A cache at `PCP_HIGH` pages gives its oldest batch back before it
/// takes one more; the pages freed last stay.
#[test]
fn a_full_cache_gives_its_oldest_batch_back() {
    let mm = initialised_section();
    let (buddy, runs) = buddy_fixture(&mm);
    let total: u64 = runs.iter().map(|r| r.nr_pages()).sum();
    let caches = PerCpuPages::new(2);
    let plain = PageAllocator::new(&buddy, None);
    let got: Vec<Pfn> = (0..PCP_HIGH + 1)
        .map(|_| plain.alloc_pages(0, NORMAL, 0).unwrap())
        .collect();
    let cpu0 = plain.with_cpu_caches(&caches).on_cpu(0);
    for &p in &got[..PCP_HIGH] {
        cpu0.free_pages(p, 0).unwrap();
    }
    assert_eq!(caches.nr_cached_pages(), PCP_HIGH as u64);
    assert_eq!(buddy.nr_free_pages(0, NORMAL), total - got.len() as u64);
    cpu0.free_pages(got[PCP_HIGH], 0).unwrap();
    assert_eq!(caches.nr_cached_pages(), (PCP_HIGH - PCP_BATCH + 1) as u64);
    assert_eq!(
        buddy.nr_free_pages(0, NORMAL),
        total - got.len() as u64 + PCP_BATCH as u64
    );
    // The next allocation is the page freed last.
    assert_eq!(cpu0.alloc_pages(0, NORMAL, 0), Ok(got[PCP_HIGH]));
}

/// Frees through a cache are checked as the store checks them: a double
/// free, a tail page and memory nobody manages are refused, and nothing
/// is cached twice.
#[test]
fn a_cache_refuses_what_the_store_refuses() {
    let mm = initialised_section();
    let (buddy, _) = buddy_fixture(&mm);
    let before = free_blocks(&buddy);
    let caches = PerCpuPages::new(1);
    let pages = PageAllocator::new(&buddy, None)
        .with_cpu_caches(&caches)
        .on_cpu(0);
    let p = pages.alloc_pages(0, NORMAL, 0).unwrap();
    pages.free_pages(p, 0).unwrap();
    let cached = caches.nr_cached_pages();
    assert_eq!(
        pages.free_pages(p, 0),
        Err(FreeError::NotAllocated { pfn: p })
    );
    let b = pages.alloc_pages(0, NORMAL, 2).unwrap();
    assert_eq!(
        pages.free_pages(b + 1, 0),
        Err(FreeError::NotAllocated { pfn: b + 1 })
    );
    assert_eq!(
        pages.free_pages(33 * S, 0),
        Err(FreeError::NotManaged {
            pfn: 33 * S,
            order: 0
        })
    );
    assert_eq!(caches.nr_cached_pages(), cached);
    // A block of order 2 goes to the lists whole, not to the cache.
    pages.free_pages(b, 2).unwrap();
    assert_eq!(caches.nr_cached_pages(), cached);
    pages.drain_cpu_cache();
    assert_eq!(free_blocks(&buddy), before);
}

/// The caches' sizes are Linux's for a large zone: `zone_batchsize()`
/// gives 63 from 1 MiB of 4 KiB pages (a quarter of 256, plus half,
/// rounded down to a power of two, less one), and `high` is six batches.
/// An allocator reports them only when it has caches.
#[test]
fn cache_sizes_are_linux_large_zone_ones() {
    let batch: usize = 256 / 4;
    let linux_batch = (1usize << (batch + batch / 2).ilog2()) - 1;
    assert_eq!((PCP_BATCH, PCP_HIGH), (linux_batch, 6 * linux_batch));
    let mm = Memmap::new(TestBacking::new([33]));
    let buddy = super::tests::test_buddy(&mm, []).unwrap();
    let caches = PerCpuPages::new(1);
    let plain = PageAllocator::new(&buddy, None);
    assert_eq!(plain.cpu_cache_pages(), (0, 0));
    assert_eq!(
        plain.with_cpu_caches(&caches).cpu_cache_pages(),
        (linux_batch as u64, 6 * linux_batch as u64)
    );
}

/// A cache holds one (node, zone) at a time: a request of another node
/// gives the first node's pages back and is served from its own node.
#[test]
fn a_cache_serves_one_zone_at_a_time() {
    let base = 33 * S;
    let mut mm = Memmap::new(TestBacking::new([33]));
    for pfn in base..base + S {
        let nid = u32::from(pfn >= base + S / 2);
        mm.page_mut(pfn).unwrap().init_single_page(pfn, NORMAL, nid);
    }
    let halves =
        [(0, base, base + S / 2), (1, base + S / 2, base + S)].map(|(nid, s, e)| ManagedRange {
            nid,
            zone: NORMAL,
            pfns: PfnRange::new(s, e),
        });
    let buddy = filled_buddy(&mm, &halves);
    let caches = PerCpuPages::new(1);
    let pages = PageAllocator::new(&buddy, None)
        .with_cpu_caches(&caches)
        .on_cpu(0);
    let a = pages.alloc_pages(0, NORMAL, 0).unwrap();
    assert!(halves[0].pfns.contains(a));
    assert_eq!(buddy.nr_free_pages(0, NORMAL), S / 2 - PCP_BATCH as u64);
    let b = pages.alloc_pages(1, NORMAL, 0).unwrap();
    assert!(halves[1].pfns.contains(b));
    assert_eq!(
        buddy.nr_free_pages(0, NORMAL),
        S / 2 - 1,
        "node 0's batch back"
    );
    assert_eq!(buddy.nr_free_pages(1, NORMAL), S / 2 - PCP_BATCH as u64);
    // Freeing node 0's page takes the cache back to node 0.
    pages.free_pages(a, 0).unwrap();
    assert_eq!(buddy.nr_free_pages(1, NORMAL), S / 2 - 1);
    assert_eq!(caches.nr_cached_pages(), 1);
    pages.free_pages(b, 0).unwrap();
    pages.drain_cpu_cache();
    for nid in [0, 1] {
        assert_eq!(buddy.nr_free_pages(nid, NORMAL), S / 2);
    }
}

/// CPUs allocating order-0 pages of one zone at once, each through its
/// own cache and the shared store, never get the same page; freed and
/// drained, the free blocks are as before. The run asserts that the CPUs
/// did overlap: one refilled its cache while another held pages.
#[test]
fn cpus_allocating_from_one_zone_at_once_get_distinct_pages() {
    let mm = initialised_section();
    let (buddy, _) = buddy_fixture(&mm);
    let before = free_blocks(&buddy);
    const CPUS: u32 = 4;
    const EACH: usize = 2000;
    let full = 50;
    let mut overlapped = false;
    for run in 0..full {
        if race_loop_done(run, full, overlapped) || (overlapped && run >= 5) {
            break;
        }
        let caches = PerCpuPages::new(CPUS as usize);
        let base = PageAllocator::new(&buddy, None).with_cpu_caches(&caches);
        let start = Barrier::new(CPUS as usize);
        let running = AtomicU32::new(0);
        let seen = AtomicBool::new(false);
        let got: Vec<Vec<Pfn>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..CPUS)
                .map(|cpu| {
                    let (start, running, seen) = (&start, &running, &seen);
                    s.spawn(move || {
                        let pages = base.on_cpu(cpu);
                        start.wait();
                        running.fetch_add(1, Ordering::SeqCst);
                        let mut v = Vec::with_capacity(EACH);
                        for i in 0..EACH {
                            v.push(pages.alloc_pages(0, NORMAL, 0).unwrap());
                            if i % PCP_BATCH == 0 && running.load(Ordering::SeqCst) > 1 {
                                seen.store(true, Ordering::Relaxed);
                            }
                        }
                        running.fetch_sub(1, Ordering::SeqCst);
                        v
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        overlapped |= seen.load(Ordering::Relaxed);
        let all: BTreeSet<Pfn> = got.iter().flatten().copied().collect();
        assert_eq!(all.len(), CPUS as usize * EACH, "a page went to two CPUs");
        for (cpu, v) in got.iter().enumerate() {
            let pages = base.on_cpu(cpu as u32);
            for &p in v {
                pages.free_pages(p, 0).unwrap();
            }
            pages.drain_cpu_cache();
        }
        assert_eq!(caches.nr_cached_pages(), 0);
        assert_eq!(free_blocks(&buddy), before);
    }
    assert!(overlapped, "the CPUs never allocated at the same time");
}

/// Before an allocation fails, every CPU's cache is given back: pages
/// another CPU cached make up a max-order block again, and a request
/// that nothing can serve still fails, with the caches emptied.
#[test]
fn an_allocation_drains_all_caches_before_it_fails() {
    let base = 33 * S;
    let mut mm = Memmap::new(TestBacking::new([33]));
    for pfn in base..base + 1024 {
        mm.page_mut(pfn).unwrap().init_single_page(pfn, NORMAL, 0);
    }
    let one_block = ManagedRange {
        nid: 0,
        zone: NORMAL,
        pfns: PfnRange::new(base, base + 1024),
    };
    let buddy = filled_buddy(&mm, &[one_block]);
    let caches = PerCpuPages::new(2);
    let base_alloc = PageAllocator::new(&buddy, None).with_cpu_caches(&caches);
    let cpu1 = base_alloc.on_cpu(1);
    let p = cpu1.alloc_pages(0, NORMAL, 0).unwrap();
    cpu1.free_pages(p, 0).unwrap();
    assert_eq!(caches.nr_cached_pages(), PCP_BATCH as u64);
    assert_eq!(buddy.nr_free_blocks(0, NORMAL, MAX_ORDER), 0);
    // CPU 0's request for the whole block: out of memory in the lists
    // until CPU 1's cache is back.
    let cpu0 = base_alloc.on_cpu(0);
    let block = cpu0.alloc_pages(0, NORMAL, MAX_ORDER).unwrap();
    assert_eq!(block, base);
    assert_eq!(caches.nr_cached_pages(), 0);
    // Now CPU 1 caches a batch again; what nobody can serve still fails.
    cpu0.free_pages(block, MAX_ORDER).unwrap();
    let q = cpu1.alloc_pages(0, NORMAL, 0).unwrap();
    assert_eq!(
        cpu0.alloc_pages(0, NORMAL, MAX_ORDER),
        Err(AllocError::OutOfMemory {
            nid: 0,
            zone: NORMAL,
            order: MAX_ORDER
        })
    );
    assert_eq!(caches.nr_cached_pages(), 0, "drained before failing");
    assert_eq!(buddy.nr_free_pages(0, NORMAL), 1023);
    cpu1.free_pages(q, 0).unwrap();
    cpu1.drain_cpu_cache();
    assert_eq!(buddy.nr_free_blocks(0, NORMAL, MAX_ORDER), 1);
}
