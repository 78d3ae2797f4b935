//! The whole memory-init pipeline on the host, against real boots.
//!
//! Each fixture is the serial log of a real boot (`fixtures/capture.sh`).
//! The test rebuilds that machine from the log — the bootloader's memory
//! map, SRAT affinity, the heap, the CPUs per node, the command line — runs
//! the library pipeline with host seams (std threads as CPUs, an `mmap`
//! window with `MAP_NORESERVE` as the vmemmap, so only written struct pages
//! cost memory) and checks that it computes exactly the figures the
//! kernel's summary line reports. The expected values come from the kernel,
//! not from the code under test.

mod common;

use common::{load, run_on_host, Fixture};
use memboot_kernel::pipeline::facts::{MmFacts, VerifyOutcome};
use memboot_kernel::pipeline::host::{HostMapper, VecLog};
use memboot_kernel::pipeline::{s1_memblock, s2_zones, s3_vmemmap, s4_eager, s7_memory_blocks};
use memmap::pageblock::PageblockMaps;
use memmap::store::Memmap;
use memmap::NodeId;

/// The summary keys that depend on the map and the code, not on time.
fn assert_same_figures(fx: &Fixture, mm: &MmFacts) {
    let host = [
        ("present_pages", mm.present_pages),
        ("eager_pages", mm.eager_pages),
        ("low_zone_pages", mm.low_zone_pages),
        ("deferred_pages", mm.deferred_pages),
        ("reserved_pages", mm.reserved_pages),
        ("hole_pages", mm.hole_pages),
        ("vmemmap_bytes", mm.vmemmap_bytes),
        ("memory_block_size", mm.memory_block_size),
        ("nr_memory_blocks", mm.nr_memory_blocks),
        ("free_pages", mm.free_pages),
        ("deferred_workers", mm.deferred_workers),
    ];
    for (key, value) in host {
        assert_eq!(value, fx.kernel(key), "{}: {key}: host vs kernel", fx.name);
    }
    assert_eq!(mm.strategy, fx.summary["strategy"], "{}", fx.name);
    assert_eq!(mm.verify.name(), fx.summary["verify"], "{}", fx.name);
    let nodes = fx.summary["node_deferred_ns"].as_array().unwrap().len();
    assert_eq!(mm.nr_nodes, nodes, "{}: nodes", fx.name);
}

#[test]
fn every_strategy_at_4g_matches_the_kernel() {
    for name in ["4g-deferred", "4g-regions", "4g-perpfn", "4g-touch"] {
        let fx = load(name);
        let (mm, lines, _) = run_on_host(&fx);
        assert_same_figures(&fx, &mm);
        let verified = name != "4g-touch";
        assert_eq!(mm.verify == VerifyOutcome::Ok, verified, "{name}");
        assert!(
            lines.iter().any(|l| l.starts_with("memmap: strategy ")),
            "{name}: the stage lines are logged"
        );
    }
}

#[test]
fn deferred_at_64g_matches_the_kernel_and_writes_only_struct_pages_it_owns() {
    let fx = load("64g");
    let (mm, _, mapper) = run_on_host(&fx);
    assert_same_figures(&fx, &mm);
    assert_eq!(mm.verify, VerifyOutcome::Ok);
    // Every present section's struct pages were written (deferred init is
    // complete) and nothing beyond them: resident ≤ the mapped sections.
    let (sections, _) = mapper.counts();
    assert_eq!(sections * (2 << 20), mm.vmemmap_bytes);
    assert!(mapper.resident_bytes() <= mm.vmemmap_bytes);
    assert!(mapper.resident_bytes() >= mm.present_pages * 64);
}

#[test]
fn four_nodes_two_of_them_memory_only_match_the_kernel() {
    let fx = load("16g-4nodes");
    let mut nids: Vec<NodeId> = fx.affinity.iter().flatten().map(|a| a.nid).collect();
    nids.dedup();
    assert_eq!(nids, [0, 1, 2, 3], "SRAT: 4 nodes");
    assert_eq!(fx.cpu_nodes, [0, 1], "CPUs on nodes 0 and 1 only");
    let (mm, lines, _) = run_on_host(&fx);
    assert_same_figures(&fx, &mm);
    for nid in 0..4 {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&format!("node {nid} deferred pages initialised"))),
            "node {nid} got deferred init"
        );
    }
}

/// At 1 TiB the host runs the stages up to the eager init and the memory
/// blocks (deferred init would write 16 GiB): the same figures as the
/// kernel, with only the eager struct pages written.
#[test]
fn the_1t_map_up_to_eager_init_matches_the_kernel() {
    let fx = load("1t");
    let reserve = fx.reserve();
    let log = VecLog::default();
    let (mut mb, _) =
        s1_memblock::build(&fx.map, fx.affinity.as_deref(), fx.phys_addr_bits, &reserve).unwrap();
    let layout = s2_zones::layout(&mb, &log);
    let mut mapper = HostMapper::new();
    let (backing, vstats) = s3_vmemmap::populate(&mut mb, &mut mapper).unwrap();
    let mut memmap = Memmap::new(backing);
    let pageblocks = PageblockMaps::new(&layout);
    let mode = memboot_kernel::pipeline::mode::ModePlan::of(fx.opts.memmap);
    let outcome = s4_eager::init(mode.eager, &mut memmap, &mb, &layout, &pageblocks).unwrap();
    let blocks = s7_memory_blocks::create(&mb, fx.opts.memory_block_size).unwrap();
    for (key, value) in [
        ("present_pages", layout.present_pages()),
        ("low_zone_pages", layout.low_zone_pages()),
        ("eager_pages", outcome.stats.eager_pages),
        ("deferred_pages", outcome.stats.deferred_pages),
        ("reserved_pages", outcome.stats.reserved_pages),
        ("hole_pages", outcome.stats.hole_pages),
        ("vmemmap_bytes", vstats.bytes),
        ("nr_memory_blocks", blocks.len() as u64),
        ("memory_block_size", blocks.block_size().bytes()),
    ] {
        assert_eq!(value, fx.kernel(key), "1t: {key}: host vs kernel");
    }
    assert_eq!(
        vstats.table_frames, 18,
        "1 PDPT and 17 page directories, as logged"
    );
    // Only the eager and hole struct pages were written: 64 B each, plus at
    // most one partial 4 KiB page at each end of each initialised range.
    let written = (outcome.stats.eager_pages + outcome.stats.hole_pages) * 64;
    let slack = 2 * 4096 * (outcome.eager.len() as u64 + layout.unavailable_ranges().len() as u64);
    let resident = mapper.resident_bytes();
    assert!(
        resident <= written + slack,
        "resident {resident} B > {written} B written + {slack} B of page rounding"
    );
    drop(memmap);
}

/// A real 32 TiB, 16-node boot with `memmap=ondemand` replayed on the host:
/// the same figures as the kernel, and only the eager and grown struct
/// pages of a 512 GiB memmap ever written.
#[test]
fn ondemand_at_32t_with_16_nodes_matches_the_kernel_and_touches_only_what_it_initialises() {
    let fx = load("32t-16nodes-ondemand");
    assert_eq!(fx.summary["strategy"], "ondemand");
    let (mm, lines, mapper) = run_on_host(&fx);
    assert_same_figures(&fx, &mm);
    assert_eq!(mm.verify, VerifyOutcome::Ok);
    assert_eq!(mm.nr_nodes, 16);
    // Growth: at most what the allocation test allocated, plus one window
    // per CPU and node that was mid-claim when the lists ran dry.
    let window_pages = 1024;
    let slack = window_pages * fx.cpu_nodes.len() as u64 * 16;
    assert!(mm.alloc_test.allocated_pages > 0);
    assert!(
        mm.grown_pages <= mm.alloc_test.allocated_pages + slack,
        "grown {} > allocated {} + {slack}",
        mm.grown_pages,
        mm.alloc_test.allocated_pages
    );
    assert_eq!(mm.pool_pages + mm.grown_pages, mm.deferred_pages);
    // Written struct pages: eager, holes and grown windows, 64 B each, plus
    // rounding to 4 KiB host pages at the ends of each initialised run.
    let written = (mm.eager_pages + mm.hole_pages + mm.grown_pages) * 64;
    let runs = 64 + mm.grown_pages / window_pages;
    let resident = mapper.resident_bytes();
    assert!(
        resident <= written + runs * 2 * 4096,
        "resident {resident} B, written {written} B: untouched struct pages were touched"
    );
    assert!(
        mm.vmemmap_bytes == 512 << 30,
        "the whole 512 GiB memmap is mapped"
    );
    assert!(lines.iter().any(|l| l.starts_with("ondemand: ")));
}

/// Every state-damaging `test_fault=` on the 4G map, in `deferred` and in
/// `ondemand`: the pipeline logs what it damaged, and verification fails
/// naming the same PFN or section. The expectation is read from the
/// fault's own line, not from verification's.
#[test]
fn every_test_fault_is_caught_by_verification() {
    use memboot_kernel::options::{MemmapMode, TestFault};
    use memboot_kernel::pipeline::error::PipelineError;
    let cases = [
        (MemmapMode::Deferred, TestFault::CorruptPage),
        (MemmapMode::Deferred, TestFault::DoubleInit),
        (MemmapMode::Deferred, TestFault::ListCorrupt),
        (MemmapMode::OnDemand, TestFault::CorruptPage),
        (MemmapMode::OnDemand, TestFault::DoubleInit),
        (MemmapMode::OnDemand, TestFault::ListCorrupt),
        (MemmapMode::OnDemand, TestFault::PoolOverlap),
    ];
    for (mode, fault) in cases {
        let mut fx = load("4g-deferred");
        fx.opts.memmap = mode;
        fx.opts.test_fault = fault;
        let (result, mm, lines, _) = common::try_run_on_host(&fx);
        let what = format!("{} {}", mode.name(), fault.name());
        let err = match result {
            Err(e @ PipelineError::Verify(_)) => e,
            other => panic!("{what}: expected a verification failure, got {other:?}\n{lines:#?}"),
        };
        assert_eq!(err.status(), "verify");
        assert_eq!(mm.verify, VerifyOutcome::Failed, "{what}");
        let damaged = lines
            .iter()
            .find(|l| l.starts_with("test_fault: "))
            .unwrap_or_else(|| panic!("{what}: no test_fault line\n{lines:#?}"));
        // The PFN (or section) the fault names must appear in the failure.
        let hex = |after: &str| {
            let rest = &damaged[damaged.find(after).unwrap() + after.len()..];
            let digits: String = rest.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
            u64::from_str_radix(&digits, 16).unwrap()
        };
        let text = format!("{err}");
        let needle = match fault {
            TestFault::CorruptPage => format!("verify: pfn {:#x}: ", hex("pfn 0x")),
            TestFault::ListCorrupt => format!("verify: pfn {:#x}: ", hex("at pfn 0x")),
            TestFault::PoolOverlap => format!("block {:#x} lies in untouched pool", hex("pfn 0x")),
            TestFault::DoubleInit => format!(" section {}: ", hex("pfn 0x") >> 15),
            _ => unreachable!(),
        };
        assert!(
            text.contains(&needle),
            "{what}: '{needle}' not in\n{text}\n{damaged}"
        );
        if mode == MemmapMode::OnDemand && fault == TestFault::CorruptPage {
            assert!(mm.grown_pages > 0, "{what}: growth initialised the page");
        }
    }
}

/// The allocation test records a phase per (CPU, node) up to
/// `s8_alloc_test::MAX_NODE_SPANS` (1024) of them, and one per CPU over all
/// nodes beyond: 16G over 4 nodes (CPUs on nodes 0 and 1, as booted) with
/// 256 CPUs is 1024 spans, with 257 CPUs it folds. The folded summary is
/// whole JSON with a lane's worth of phases per CPU.
#[test]
fn alloc_test_phases_fold_per_cpu_past_1024_cpu_node_pairs() {
    use memboot_kernel::report::{write_summary_line, BootFacts, SUMMARY_PREFIX};
    let mut fx = load("16g-4nodes");
    fx.opts.alloc_test_bytes = 16 << 20;
    let nodes = 4;
    for (cpus, folded) in [(256u32, false), (257, true)] {
        // Half the CPUs on node 0, the rest on node 1, BSP first.
        fx.cpu_nodes = (0..cpus).map(|c| NodeId::from(c >= cpus / 2)).collect();
        let (mm, _, _) = run_on_host(&fx);
        assert_eq!(mm.nr_nodes, nodes);
        let alloc: Vec<_> = mm
            .phases
            .iter()
            .filter(|p| p.phase.name() == "alloc_test")
            .collect();
        if folded {
            assert_eq!(alloc.len(), cpus as usize, "one per CPU");
            for p in &alloc {
                assert_eq!((p.node, p.nodes), (None, Some(nodes as u32)), "{p:?}");
                assert!(p.start_ns <= p.end_ns);
            }
        } else {
            assert_eq!(alloc.len(), cpus as usize * nodes, "one per CPU and node");
            assert!(alloc.iter().all(|p| p.node.is_some() && p.nodes.is_none()));
        }
        let mut per_cpu: Vec<u32> = alloc.iter().map(|p| p.cpu).collect();
        per_cpu.sort_unstable();
        per_cpu.dedup();
        assert_eq!(
            per_cpu,
            (0..cpus).collect::<Vec<_>>(),
            "every CPU has a lane"
        );

        let mut line = String::new();
        write_summary_line(&mut line, "ok", 1, &BootFacts::default(), &mm).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(line.strip_prefix(SUMMARY_PREFIX).unwrap()).unwrap();
        let json_alloc: Vec<&serde_json::Value> = v["phases"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["phase"] == "alloc_test")
            .collect();
        assert_eq!(json_alloc.len(), alloc.len());
        let key = if folded { "nodes" } else { "node" };
        assert!(json_alloc.iter().all(|p| p.get(key).is_some()), "{key}");
    }
}
