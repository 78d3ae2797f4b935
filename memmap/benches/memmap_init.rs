//! Memmap init strategies, next_valid_pfn and memory-block lookup, side by
//! side, on host buffers. Criterion reports elements (pages / queries /
//! lookups) per second; a short manual timing pass at the end prints the
//! summary table with each strategy's ratio to the 64-byte-store floor.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion, Throughput};
use memmap::firmware::{FirmwareEntry, NodeAffinity, RegionKind};
use memmap::init::{init_memmap, sections_to_back, touch_present_pages, Strategy};
use memmap::memblock::{Memblock, MemblockConfig};
use memmap::memory_block::{MemoryBlockSize, MemoryBlocks};
use memmap::pageblock::PageblockMaps;
use memmap::store::{Memmap, VecBacking};
use memmap::zones::ZoneLayout;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

struct Setup {
    name: &'static str,
    mb: Memblock,
    layout: ZoneLayout,
    pageblocks: PageblockMaps,
    memmap: Memmap<VecBacking>,
}

fn setup(name: &'static str, map: &[FirmwareEntry], affinity: &[NodeAffinity]) -> Setup {
    let cfg = MemblockConfig::default();
    let (mut mb, mut report) = Memblock::from_firmware(map, cfg).expect("bench map");
    mb.apply_affinity(affinity.iter().copied(), &mut report)
        .expect("bench affinity");
    let layout = ZoneLayout::new(&mb);
    let pageblocks = PageblockMaps::new(&layout);
    let memmap = Memmap::new(VecBacking::new(sections_to_back(&layout)));
    Setup {
        name,
        mb,
        layout,
        pageblocks,
        memmap,
    }
}

/// Dense: 8 GiB on 2 nodes, one hole below 4 GiB (2M pages, 128 MiB of memmap).
fn dense() -> Setup {
    setup(
        "dense 8GiB",
        &[
            FirmwareEntry::new(0x1000, 0x9e000, RegionKind::Usable),
            FirmwareEntry::new(MIB, 3 * GIB - MIB, RegionKind::Usable),
            FirmwareEntry::new(4 * GIB, 5 * GIB, RegionKind::Usable),
            FirmwareEntry::new(16 * MIB, 32 * MIB, RegionKind::Bootloader),
        ],
        &[
            NodeAffinity::new(0, 5 * GIB, 0),
            NodeAffinity::new(5 * GIB, 4 * GIB, 1),
        ],
    )
}

/// Sparse: 1,000 regions of 2 MiB with 1 MiB (plus a page) gaps.
fn sparse() -> Setup {
    let map: Vec<FirmwareEntry> = (0..1000u64)
        .map(|i| FirmwareEntry::new(GIB + i * (3 * MIB + 4096), 2 * MIB, RegionKind::Usable))
        .collect();
    setup(
        "sparse 1000 regions",
        &map,
        &[
            NodeAffinity::new(0, 2 * GIB + GIB / 2, 0),
            NodeAffinity::new(2 * GIB + GIB / 2, 2 * GIB, 1),
        ],
    )
}

#[derive(Clone, Copy)]
enum Job {
    Floor,
    Run(Strategy),
}

impl Job {
    const ALL: [Job; 4] = [
        Job::Floor,
        Job::Run(Strategy::PerPfn),
        Job::Run(Strategy::Regions),
        Job::Run(Strategy::Deferred),
    ];
    fn name(self) -> &'static str {
        match self {
            Job::Floor => "touch (floor)",
            Job::Run(s) => s.name(),
        }
    }
    fn run(self, s: &mut Setup) -> u64 {
        match self {
            Job::Floor => touch_present_pages(&mut s.memmap, &s.mb).unwrap(),
            Job::Run(st) => {
                init_memmap(st, &mut s.memmap, &s.mb, &s.layout, &s.pageblocks)
                    .unwrap()
                    .stats
                    .eager_pages
            }
        }
    }
}

fn strategies(c: &mut Criterion) {
    for mut s in [dense(), sparse()] {
        let present = s.mb.memory().total_pages();
        let mut g = c.benchmark_group(format!("memmap_init/{}", s.name));
        g.throughput(Throughput::Elements(present));
        for job in Job::ALL {
            g.bench_function(job.name(), |b| b.iter(|| black_box(job.run(&mut s))));
        }
        g.finish();
    }
}

/// PFNs queried sequentially over the sparse map's span, the memmap walk's pattern.
fn next_valid(c: &mut Criterion) {
    let s = sparse();
    let span = s.mb.min_pfn().unwrap()..s.mb.max_pfn().unwrap();
    let mut g = c.benchmark_group("next_valid_pfn/sparse 1000 regions");
    g.throughput(Throughput::Elements(span.end - span.start));
    g.bench_function("cached cursor", |b| {
        b.iter(|| {
            let mut cur = s.mb.valid_pfn_cursor();
            span.clone()
                .map(|p| cur.next_valid_pfn(p).unwrap_or(0))
                .fold(0u64, u64::wrapping_add)
        })
    });
    g.bench_function("binary search", |b| {
        b.iter(|| {
            span.clone()
                .map(|p| s.mb.next_valid_pfn(p).unwrap_or(0))
                .fold(0u64, u64::wrapping_add)
        })
    });
    g.finish();
}

/// The 2 TiB server of "x86/mm: use max memory block size on bare metal":
/// 16,288 blocks at 128 MiB; look every block up once in a scrambled order.
fn blocks_2tib() -> (MemoryBlocks, Vec<u64>) {
    let mut mb = Memblock::new(MemblockConfig::default()).unwrap();
    mb.add(0, 2 * GIB, 0).unwrap();
    mb.add(4 * GIB, 1017 * GIB - 4 * GIB, 0).unwrap();
    mb.add(1017 * GIB, 2034 * GIB - 4 * MIB - 1013 * GIB, 1)
        .unwrap();
    let blocks = MemoryBlocks::new(&mb, MemoryBlockSize::new(128 * MIB).unwrap()).unwrap();
    assert_eq!(blocks.len(), 16288);
    let mut ids: Vec<u64> = blocks.blocks().iter().map(|b| b.id).collect();
    // Deterministic scramble (multiplicative hash order).
    ids.sort_by_key(|id| id.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    (blocks, ids)
}

fn block_lookup(c: &mut Criterion) {
    let (blocks, ids) = blocks_2tib();
    let mut g = c.benchmark_group("memory_block lookup/16288 blocks");
    g.throughput(Throughput::Elements(ids.len() as u64));
    g.bench_function("O(1) index", |b| {
        b.iter(|| {
            ids.iter()
                .map(|&id| blocks.find_block(id).unwrap().nids.0)
                .sum::<u64>()
        })
    });
    g.bench_function("linear search", |b| {
        b.iter(|| {
            ids.iter()
                .map(|&id| blocks.find_block_linear(id).unwrap().nids.0)
                .sum::<u64>()
        })
    });
    g.finish();
}

/// Median wall time of `reps` runs of `f`.
fn median(reps: usize, mut f: impl FnMut()) -> Duration {
    f();
    let mut t: Vec<Duration> = (0..reps)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    t.sort();
    t[reps / 2]
}

fn rate(elements: u64, d: Duration) -> String {
    let per_s = elements as f64 / d.as_secs_f64();
    if per_s >= 1e9 {
        format!("{:.2} G/s", per_s / 1e9)
    } else {
        format!("{:.1} M/s", per_s / 1e6)
    }
}

fn summary() {
    println!("\n=== summary (manual pass, median of 7) ===");
    println!(
        "{:<22} {:<14} {:>10} {:>12} {:>14} {:>9}",
        "map", "job", "time", "eager pages", "present pg/s", "x floor"
    );
    for mut s in [dense(), sparse()] {
        let present = s.mb.memory().total_pages();
        let mut floor = Duration::ZERO;
        for job in Job::ALL {
            let mut eager = 0;
            let t = median(7, || eager = black_box(job.run(&mut s)));
            if matches!(job, Job::Floor) {
                floor = t;
            }
            println!(
                "{:<22} {:<14} {:>8.2}ms {:>12} {:>14} {:>8.2}x",
                s.name,
                job.name(),
                t.as_secs_f64() * 1e3,
                eager,
                rate(present, t),
                t.as_secs_f64() / floor.as_secs_f64()
            );
        }
    }
    let s = sparse();
    let span = s.mb.min_pfn().unwrap()..s.mb.max_pfn().unwrap();
    let n = span.end - span.start;
    let cached = median(7, || {
        let mut cur = s.mb.valid_pfn_cursor();
        black_box(
            span.clone()
                .map(|p| cur.next_valid_pfn(p).unwrap_or(0))
                .fold(0u64, u64::wrapping_add),
        );
    });
    let plain = median(7, || {
        black_box(
            span.clone()
                .map(|p| s.mb.next_valid_pfn(p).unwrap_or(0))
                .fold(0u64, u64::wrapping_add),
        );
    });
    println!(
        "next_valid_pfn, {n} sequential queries: cached {} / binary search {} ({:.2}x faster)",
        rate(n, cached),
        rate(n, plain),
        plain.as_secs_f64() / cached.as_secs_f64()
    );
    let (blocks, ids) = blocks_2tib();
    let fast = median(7, || {
        black_box(
            ids.iter()
                .map(|&id| blocks.find_block(id).unwrap().nids.0)
                .sum::<u64>(),
        );
    });
    let slow = median(7, || {
        black_box(
            ids.iter()
                .map(|&id| blocks.find_block_linear(id).unwrap().nids.0)
                .sum::<u64>(),
        );
    });
    let m = ids.len() as u64;
    println!(
        "memory block lookup, {m} blocks: O(1) {} / linear {} ({:.0}x faster)",
        rate(m, fast),
        rate(m, slow),
        slow.as_secs_f64() / fast.as_secs_f64()
    );
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args()
}

criterion_group! { name = benches; config = config(); targets = strategies, next_valid, block_lookup }

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    summary();
}
