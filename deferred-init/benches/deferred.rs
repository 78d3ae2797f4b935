//! Deferred init throughput on a 4 GiB-equivalent host buffer (1 Mi struct
//! pages = 64 MiB): the bare store floor, touch mode, init only and init +
//! free to the buddy allocator, with 1 and 2 worker threads.
//!
//! Criterion measures each configuration; a summary table (median of a few
//! extra runs, pages/s and ratios) is printed at the end.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use deferred_init::std_seams::{StdClock, ThreadExecutor};
use deferred_init::{BuddyAllocator, DeferredInit, DeferredPlan, InitMode, NodeCpus, PlanOptions};
use memmap::store::{Memmap, VecBacking};
use memmap::{DeferredRange, PfnRange, ZoneType, PAGES_PER_SECTION};

const NR_SECTIONS: u64 = 32;
const NR_PAGES: u64 = NR_SECTIONS * PAGES_PER_SECTION; // 1 Mi pages = 4 GiB of RAM
const FIRST_SECTION: u64 = 32; // 4 GiB: ZONE_NORMAL

fn range() -> PfnRange {
    PfnRange::new(
        FIRST_SECTION * PAGES_PER_SECTION,
        (FIRST_SECTION + NR_SECTIONS) * PAGES_PER_SECTION,
    )
}

fn plan(nr_threads: u32) -> DeferredPlan {
    let ranges = [DeferredRange {
        nid: 0,
        zone: ZoneType::Normal,
        pfns: range(),
    }];
    let node_cpus = [NodeCpus {
        nid: 0,
        cpus: (0..nr_threads).collect(),
    }];
    DeferredPlan::new(&ranges, &[], &node_cpus, PlanOptions::default()).expect("valid bench plan")
}

/// The floor: one thread storing 64 bytes per page straight through the store.
fn bare_store(mm: &mut Memmap<VecBacking>) {
    let pages = memmap::init::touch_ranges(mm, [range()]).expect("backed bench range");
    black_box(pages);
}

fn deferred(mm: &Memmap<VecBacking>, plan: &DeferredPlan, mode: InitMode, clock: &StdClock) {
    let buddy = BuddyAllocator::new(mm, plan.managed_ranges()).expect("bench setup");
    let di = DeferredInit::new(mm, &buddy, plan.clone(), mode).expect("bench setup");
    di.run(&ThreadExecutor::new(2), clock)
        .expect("plan CPUs 0..2");
    assert!(di.is_done());
    if mode == InitMode::InitAndFree {
        assert_eq!(di.buddy().nr_free_pages_total(), NR_PAGES);
    }
    black_box(di.report());
}

#[derive(Clone, Copy)]
enum Config {
    Floor,
    Deferred(InitMode, u32),
}

impl Config {
    const ALL: [Config; 7] = [
        Config::Floor,
        Config::Deferred(InitMode::Touch, 1),
        Config::Deferred(InitMode::Touch, 2),
        Config::Deferred(InitMode::InitOnly, 1),
        Config::Deferred(InitMode::InitOnly, 2),
        Config::Deferred(InitMode::InitAndFree, 1),
        Config::Deferred(InitMode::InitAndFree, 2),
    ];

    fn name(self) -> String {
        match self {
            Config::Floor => "bare store 1T".into(),
            Config::Deferred(m, t) => {
                let m = match m {
                    InitMode::Touch => "touch",
                    InitMode::InitOnly => "init only",
                    InitMode::InitAndFree => "init + free",
                };
                format!("{m} {t}T")
            }
        }
    }
}

fn run_config(
    cfg: Config,
    mm: &mut Memmap<VecBacking>,
    plans: &[DeferredPlan; 2],
    clock: &StdClock,
) {
    match cfg {
        Config::Floor => bare_store(mm),
        Config::Deferred(mode, t) => deferred(mm, &plans[t as usize - 1], mode, clock),
    }
}

fn main() {
    let mut criterion = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    let mut mm = Memmap::new(VecBacking::for_ranges(&[range()]));
    let plans = [plan(1), plan(2)];
    let clock = StdClock::new();
    // Fault the buffer in once so no configuration pays for first touch.
    bare_store(&mut mm);

    {
        let mut group = criterion.benchmark_group("deferred_init_4GiB");
        group.throughput(Throughput::Elements(NR_PAGES));
        for cfg in Config::ALL {
            group.bench_function(BenchmarkId::from_parameter(cfg.name()), |b| {
                b.iter(|| run_config(cfg, &mut mm, &plans, &clock))
            });
        }
        group.finish();
    }
    criterion.final_summary();

    // Summary table: median of extra runs per configuration.
    const RUNS: usize = 15;
    let mut medians_ns = Vec::new();
    for cfg in Config::ALL {
        let mut t: Vec<u64> = (0..RUNS)
            .map(|_| {
                let s = Instant::now();
                run_config(cfg, &mut mm, &plans, &clock);
                s.elapsed().as_nanos() as u64
            })
            .collect();
        t.sort_unstable();
        medians_ns.push(t[RUNS / 2]);
    }
    let floor_ns = medians_ns[0] as f64;
    println!();
    println!("summary: {NR_PAGES} struct pages (4 GiB of RAM, 64 MiB of struct pages), median of {RUNS} runs");
    println!(
        "| {:<15} | {:>9} | {:>11} | {:>11} | {:>14} | {:>12} |",
        "config", "ms", "Mpages/s", "GB/s store", "x floor time", "2T speedup"
    );
    println!(
        "|{:-<17}|{:->11}|{:->13}|{:->13}|{:->16}|{:->14}|",
        "", "", "", "", "", ""
    );
    for (i, cfg) in Config::ALL.iter().enumerate() {
        let ns = medians_ns[i] as f64;
        let speedup = match cfg {
            Config::Deferred(_, 2) => format!("{:.2}", medians_ns[i - 1] as f64 / ns),
            _ => "-".into(),
        };
        println!(
            "| {:<15} | {:>9.2} | {:>11.1} | {:>11.2} | {:>14.2} | {:>12} |",
            cfg.name(),
            ns / 1e6,
            NR_PAGES as f64 / ns * 1e3,
            (NR_PAGES * 64) as f64 / ns,
            ns / floor_ns,
            speedup
        );
    }
}
