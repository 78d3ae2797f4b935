//! The whole memory-init pipeline on the host, against real boots.
//!
//! Each fixture is the serial log of a real boot (`fixtures/capture.sh`).
//! The test rebuilds that machine from the log's `memboot-input:` line —
//! the bootloader's memory map, SRAT affinity, the heap, the node of each
//! CPU, the command line: the pipeline's typed input as the kernel had it
//! (`memboot_kernel::boot_input`) — runs
//! the library pipeline with host seams (std threads as CPUs, an `mmap`
//! area with `MAP_NORESERVE` as the vmemmap, so only written struct pages
//! cost memory) and checks that it computes exactly the figures the
//! kernel's summary line reports.
//!
//! The kernel's summary was produced by the same `pipeline::run`, so that
//! comparison alone would re-approve any bug a regenerated fixture carries.
//! Each fixture is therefore also checked against an independent oracle,
//! `common::model`: a page-by-page model computed from the fixture's own
//! firmware map, SRAT, heap and options by the README's rules (present,
//! reserved and hole pages per node and zone, zone spans, sections, the
//! vmemmap's placement by memblock's top-down rule, the eager/deferred
//! split, memory blocks). The pipeline's facts, its zone layout, its
//! memblock reservations and its per-zone verification lines must equal
//! the model, and so must the kernel's summary.

mod common;

use common::model::{Model, VerifyZoneLine, Walk};
use common::{load, run_on_host, Fixture};
use memboot_contract::option_values::BlockLookup;
use memboot_contract::option_values::StructPageSize;
use memboot_kernel::pipeline::error::PipelineError;
use memboot_kernel::pipeline::facts::{MmFacts, VerifyOutcome};
use memboot_kernel::pipeline::host_seams::{HostMapper, VecLog};
use memboot_kernel::pipeline::{eager_memmap, memblock, memory_blocks, vmemmap, zones};
use memboot_kernel::smp_error::SmpError;
use memmap::memblock::Memblock;
use memmap::page::{PageLayout, StructPage};
use memmap::page32::StructPage32;
use memmap::page8::StructPage8;
use memmap::pageblock::PageblockMaps;
use memmap::store::Memmap;
use memmap::zones::ZoneLayout;
use memmap::NodeId;

const ALL_FIXTURES: [&str; 8] = [
    "4g-deferred",
    "4g-regions",
    "4g-perpfn",
    "4g-touch",
    "16g-4nodes",
    "64g",
    "1t",
    "32t-16nodes-ondemand",
];

/// The model of a fixture (see `common::model`), checked against what the
/// kernel reported and against the pipeline's memblock, zones and vmemmap
/// steps on the host:
/// - the summary's map-derived figures, every one (`Facts::by_key`);
/// - nodes (span, present pages), zones (span, present pages, highest
///   zone), hole pages per zone (`ZoneLayout::unavailable_ranges`), present
///   sections;
/// - vmemmap: sections, bytes per node, page-table pages, and memblock's
///   reserved table afterwards, range for range: every struct-page block
///   and page table where the model's top-down rule puts it.
fn checked_model(fx: &Fixture) -> Model {
    let model = Model::compute(&fx.model_map(), Walk::Runs);
    let name = fx.name;
    for (key, want) in model.facts().by_key() {
        assert_eq!(
            fx.kernel(key),
            want,
            "{name}: {key}: kernel summary vs model"
        );
    }
    check_stages::<StructPage>(fx, &model);
    model
}

/// The memblock, zones and vmemmap steps on the host for `fx` with struct
/// pages of layout `P`, against `model`: nodes, zones, holes, present sections, and
/// the vmemmap's sections, bytes per node, page tables and memblock
/// reservations.
fn check_stages<P: PageLayout>(fx: &Fixture, model: &Model) {
    let reserve = fx.reserve();
    let (mut mb, _) = memblock::build(
        &fx.input.map,
        fx.input.srat.as_deref(),
        fx.input.phys_addr_bits,
        &reserve,
    )
    .unwrap();
    let layout = zones::layout(&mb, &VecLog::default(), P::BYTES);
    check_zone_layout(fx.name, &layout, model);
    check_vmemmap::<P>(fx, &mut mb, &layout, model);
}

/// The zones step against `model`: nodes (span, present pages), zones (span,
/// present pages), each node's highest zone, hole pages per zone and the
/// present sections.
fn check_zone_layout(name: &str, layout: &ZoneLayout, model: &Model) {
    let nodes: Vec<_> = layout
        .nodes()
        .iter()
        .map(|n| (n.nid, (n.span.start, n.span.end), n.present_pages))
        .collect();
    let want: Vec<_> = model
        .nodes
        .iter()
        .map(|n| (n.nid, n.span, n.present))
        .collect();
    assert_eq!(
        nodes, want,
        "{name}: nodes (nid, span, present): pipeline vs model"
    );
    let zones: Vec<_> = layout
        .zones()
        .iter()
        .map(|z| {
            (
                z.nid,
                z.zone.name(),
                (z.span.start, z.span.end),
                z.present_pages,
            )
        })
        .collect();
    let want: Vec<_> = model
        .zones
        .iter()
        .map(|z| (z.nid, z.zone().name(), z.span, z.present))
        .collect();
    assert_eq!(
        zones, want,
        "{name}: zones (nid, zone, span, present): pipeline vs model"
    );
    for n in &model.nodes {
        assert_eq!(
            layout.highest_zone(n.nid).map(|z| z.zone.name()),
            Some(n.highest_zone.name()),
            "{name}: node {}'s highest zone",
            n.nid
        );
    }
    for z in &model.zones {
        let holes: u64 = layout
            .unavailable_ranges()
            .iter()
            .filter(|u| u.nid == z.nid && u.zone.name() == z.zone().name())
            .map(|u| u.nr_pages)
            .sum();
        assert_eq!(
            holes,
            z.holes,
            "{name}: node {} zone {}: hole pages in unavailable ranges",
            z.nid,
            z.zone().name()
        );
    }
    let section_pages: u64 = layout
        .present_section_ranges()
        .iter()
        .map(|r| r.end - r.start)
        .sum();
    assert_eq!(
        section_pages,
        model.present_sections * common::model::SECTION_PAGES
    );
}

/// The vmemmap step against `model`: sections mapped (none at boot with
/// `memmap=ondemand`), page tables, struct-page bytes per node and
/// memblock's reserved table afterwards, each block on its own node.
fn check_vmemmap<P: PageLayout>(
    fx: &Fixture,
    mb: &mut Memblock,
    layout: &ZoneLayout,
    model: &Model,
) {
    let name = fx.name;
    let mut mapper = HostMapper::new();
    let vstats = if fx.opts.memmap == memboot_contract::options::MemmapMode::OnDemand {
        let sections = vmemmap::SectionMapper::new(&mut mapper);
        let (backing, vstats) = sections.reserve::<P>(mb, layout, &[]).unwrap();
        assert_eq!(backing.nr_populated(), 0, "{name}: nothing mapped at boot");
        assert_eq!(
            backing.hole_pages_on_first_use(),
            0,
            "{name}: no hole written"
        );
        vstats
    } else {
        vmemmap::populate::<_, P>(mb, &mut mapper, &[]).unwrap().1
    };
    assert_eq!(vstats.sections, model.present_sections, "{name}: sections");
    assert_eq!(
        vstats.table_frames, model.table_frames,
        "{name}: page tables"
    );
    for n in &model.nodes {
        let bytes = vstats.node_bytes.iter().find(|b| b.0 == n.nid).map(|b| b.1);
        let want = n.memmap_bytes;
        assert_eq!(bytes, Some(want), "{name}: node {}'s struct pages", n.nid);
    }
    let reserved: Vec<(u64, u64)> = mb
        .reserved()
        .regions()
        .iter()
        .map(|r| (r.pfns().start, r.pfns().end))
        .collect();
    assert_eq!(
        reserved, model.reserved,
        "{name}: memblock.reserved (PFN ranges) after the vmemmap: pipeline vs model\n{:#?}",
        model.allocations
    );
    assert!(
        model.allocations.iter().all(|a| a.nid == a.nid_asked),
        "{name}: every struct page and table on its own node"
    );
}

/// The pipeline's facts equal the model's, figure by figure.
fn assert_facts_match_model(fx: &Fixture, mm: &MmFacts, model: &Model) {
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
        ("nodes", mm.nr_nodes() as u64),
    ];
    let want = model.facts().by_key();
    assert_eq!(host.map(|h| h.0), want.map(|w| w.0));
    for ((key, got), (_, want)) in host.into_iter().zip(want) {
        assert_eq!(got, want, "{}: {key}: pipeline vs model", fx.name);
    }
}

/// The host run's per-zone `verify:` lines against the model
/// (`Model::assert_zone_lines`).
fn assert_zone_lines_match_model(fx: &Fixture, lines: &[String], model: &Model) {
    let parsed: Vec<VerifyZoneLine> = lines
        .iter()
        .filter_map(|l| VerifyZoneLine::parse(l))
        .collect();
    model.assert_zone_lines(fx.name, &parsed);
}

/// The struct pages the run says it wrote by the end, against the number
/// verification's own page scan checked (`verify: N pages checked`: every
/// initialised page, holes included; the pool's are never read); and
/// memory became ready.
fn assert_counts_match_the_scan(fx: &Fixture, mm: &MmFacts, lines: &[String]) {
    let scanned: u64 = lines
        .iter()
        .find_map(|l| {
            l.strip_prefix("verify: ")?
                .strip_suffix(" free blocks listed")
        })
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{}: no `verify: N pages checked` line", fx.name));
    assert_eq!(
        mm.pages_initialised, scanned,
        "{}: pages_initialised",
        fx.name
    );
    assert!(mm.allocatable_ns > 0, "{}: memory was ready", fx.name);
}

/// The summary keys that depend on the map and the code, not on time.
fn assert_same_figures(fx: &Fixture, mm: &MmFacts) {
    let host = [
        (
            "pages_initialised_at_allocatable",
            mm.pages_initialised_at_allocatable,
        ),
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
    assert_eq!(*mm.strategy, fx.summary["strategy"], "{}", fx.name);
    // The fixtures' logs predate the key: the option they booted with.
    assert_eq!(
        mm.memory_block_lookup,
        fx.opts.memory_block_lookup.name(),
        "{}",
        fx.name
    );
    assert_eq!(*mm.verify, fx.summary["verify"], "{}", fx.name);
    let nodes = fx.summary["node_deferred_ns"].as_array().unwrap().len();
    assert_eq!(mm.nr_nodes(), nodes, "{}: nodes", fx.name);
}

#[test]
fn every_strategy_at_4g_matches_the_kernel() {
    for name in ["4g-deferred", "4g-regions", "4g-perpfn", "4g-touch"] {
        let fx = load(name);
        let model = checked_model(&fx);
        let (mm, lines, _) = run_on_host(&fx);
        assert_same_figures(&fx, &mm);
        assert_facts_match_model(&fx, &mm, &model);
        assert_zone_lines_match_model(&fx, &lines, &model);
        let verified = name != "4g-touch";
        assert_eq!(mm.verify == VerifyOutcome::Ok.name(), verified, "{name}");
        if verified {
            assert_counts_match_the_scan(&fx, &mm, &lines);
        } else {
            assert_eq!(mm.allocatable_ns, 0, "{name}: touch has no allocator");
        }
        assert!(
            lines.iter().any(|l| l.starts_with("memmap: strategy ")),
            "{name}: the stage lines are logged"
        );
    }
}

#[test]
fn deferred_at_64g_matches_the_kernel_and_writes_only_struct_pages_it_owns() {
    let fx = load("64g");
    let model = checked_model(&fx);
    let (mm, lines, mapper) = run_on_host(&fx);
    assert_same_figures(&fx, &mm);
    assert_facts_match_model(&fx, &mm, &model);
    assert_zone_lines_match_model(&fx, &lines, &model);
    assert_eq!(mm.verify, VerifyOutcome::Ok.name());
    assert_counts_match_the_scan(&fx, &mm, &lines);
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
    let mut nids: Vec<NodeId> = fx.input.srat.iter().flatten().map(|a| a.nid).collect();
    // Node ids follow the order SRAT's CPU entries name proximity domains,
    // so its memory ranges need not come in node order.
    nids.sort_unstable();
    nids.dedup();
    assert_eq!(nids, [0, 1, 2, 3], "SRAT: 4 nodes");
    assert_eq!(fx.input.cpu_nodes, [0, 1], "CPUs on nodes 0 and 1 only");
    let model = checked_model(&fx);
    let (mm, lines, _) = run_on_host(&fx);
    assert_same_figures(&fx, &mm);
    assert_facts_match_model(&fx, &mm, &model);
    assert_zone_lines_match_model(&fx, &lines, &model);
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
    let (mut mb, _) = memblock::build(
        &fx.input.map,
        fx.input.srat.as_deref(),
        fx.input.phys_addr_bits,
        &reserve,
    )
    .unwrap();
    let layout = zones::layout(&mb, &log, 64);
    let mut mapper = HostMapper::new();
    let (backing, vstats) = vmemmap::populate::<_, StructPage>(&mut mb, &mut mapper, &[]).unwrap();
    let mut memmap = Memmap::new(backing);
    let pageblocks = PageblockMaps::new(&layout);
    let mode = memboot_kernel::pipeline::mode::ModePlan::of(fx.opts.memmap);
    let outcome = eager_memmap::init(mode.eager, &mut memmap, &mb, &layout, &pageblocks).unwrap();
    let blocks = memory_blocks::create(
        &mb,
        fx.opts.memory_block_size,
        fx.opts.memory_block_lookup,
        true,
    )
    .unwrap();
    // memory_block_lookup=linear: the same blocks, found the slow way.
    for lookup in BlockLookup::ALL {
        let other = memory_blocks::create(&mb, fx.opts.memory_block_size, lookup, true).unwrap();
        assert_eq!(other.blocks(), blocks.blocks(), "{}", lookup.name());
    }
    let model = checked_model(&fx).facts();
    for (key, value, want) in [
        ("present_pages", layout.present_pages(), model.present_pages),
        (
            "low_zone_pages",
            layout.low_zone_pages(),
            model.low_zone_pages,
        ),
        ("eager_pages", outcome.stats.eager_pages, model.eager_pages),
        (
            "deferred_pages",
            outcome.stats.deferred_pages,
            model.deferred_pages,
        ),
        (
            "reserved_pages",
            outcome.stats.reserved_pages,
            model.reserved_pages,
        ),
        ("hole_pages", outcome.stats.hole_pages, model.hole_pages),
        ("vmemmap_bytes", vstats.bytes, model.vmemmap_bytes),
        (
            "nr_memory_blocks",
            blocks.len() as u64,
            model.nr_memory_blocks,
        ),
        (
            "memory_block_size",
            blocks.block_size().bytes(),
            model.memory_block_size,
        ),
    ] {
        assert_eq!(value, fx.kernel(key), "1t: {key}: host vs kernel");
        assert_eq!(value, want, "1t: {key}: host vs model");
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
    let model = checked_model(&fx);
    let (mm, lines, mapper) = run_on_host(&fx);
    assert_same_figures(&fx, &mm);
    assert_facts_match_model(&fx, &mm, &model);
    assert_zone_lines_match_model(&fx, &lines, &model);
    assert_eq!(mm.verify, VerifyOutcome::Ok.name());
    assert_counts_match_the_scan(&fx, &mm, &lines);
    assert_eq!(mm.nr_nodes(), 16);
    // Growth: at most what the allocation test allocated, plus one window
    // per CPU and node that was mid-claim when the lists ran dry, plus the
    // windows holding memblock-reserved pages (the model's reservations).
    let window_pages = 1024;
    let slack = window_pages * fx.input.cpu_nodes.len() as u64 * 16;
    let reserved_slack = window_pages * model.reserved_windows(window_pages);
    assert!(mm.alloc_test_pages > 0);
    assert!(
        mm.grown_pages <= mm.alloc_test_pages + slack + reserved_slack,
        "grown {} > allocated {} + {slack} + {reserved_slack}",
        mm.grown_pages,
        mm.alloc_test_pages
    );
    assert_eq!(mm.pool_pages + mm.grown_pages, mm.deferred_pages);
    // Written struct pages: eager, holes (at boot: none; with their
    // sections: each section's) and grown windows, 64 B each, plus
    // rounding to 4 KiB host pages at the ends of each initialised run.
    assert_eq!(mm.hole_pages, 0, "ondemand writes no hole page at boot");
    assert_eq!(mm.pages_initialised_at_allocatable, 0);
    // Verification's page scan reads every hole, which maps its section:
    // by the end every hole of the model was written, once.
    let model_holes: u64 = model.zones.iter().map(|z| z.holes).sum();
    assert_eq!(mm.hole_pages_on_first_use, model_holes);
    assert_eq!(
        fx.kernel("hole_pages_on_first_use"),
        model_holes,
        "the kernel's count"
    );
    let written = (mm.eager_pages + mm.hole_pages_on_first_use + mm.grown_pages) * 64;
    let runs = 64 + mm.grown_pages / window_pages;
    let resident = mapper.resident_bytes();
    assert!(
        resident <= written + runs * 2 * 4096,
        "resident {resident} B, written {written} B: untouched struct pages were touched"
    );
    assert!(
        mm.vmemmap_bytes == 512 << 30,
        "the whole 512 GiB memmap is reserved"
    );
    // Mapped on first use: the sections of the holes and of the grown
    // windows, each once (the mapper counts its own mappings), and a
    // page-table page only where one was new.
    let (mapped, tables) = mapper.counts();
    assert_eq!(mapped, mm.vmemmap_sections_mapped);
    assert!(
        0 < mapped && mapped <= 64 + mm.grown_pages / window_pages,
        "{mapped} sections mapped"
    );
    assert!(tables <= model.table_frames, "{tables} page-table pages");
    assert!(lines.iter().any(|l| l.starts_with("ondemand: ")));
}

/// The model's interval walk (what makes 1T and 32T affordable) is the
/// brute force: on every fixture of up to 64 GiB, classifying each PFN on
/// its own gives the identical model.
#[test]
fn the_model_walks_runs_exactly_as_it_walks_every_pfn() {
    for name in ALL_FIXTURES {
        let fx = load(name);
        if fx.kernel("present_pages") > 64 << 18 {
            continue;
        }
        let map = fx.model_map();
        assert_eq!(
            Model::compute(&map, Walk::EveryPfn),
            Model::compute(&map, Walk::Runs),
            "{name}"
        );
    }
}

/// Every state-damaging `test_fault=` on the 4G map, in `deferred` and in
/// `ondemand`: the pipeline logs what it damaged, and verification fails
/// naming the same PFN or section. The expectation is read from the
/// fault's own line, not from verification's.
#[test]
fn every_test_fault_is_caught_by_verification() {
    use memboot_contract::options::{MemmapMode, TestFault};
    let cases = [
        (MemmapMode::Deferred, TestFault::CorruptPage),
        (MemmapMode::Deferred, TestFault::DoubleInit),
        (MemmapMode::Deferred, TestFault::ListCorrupt),
        (MemmapMode::OnDemand, TestFault::CorruptPage),
        (MemmapMode::OnDemand, TestFault::DoubleInit),
        (MemmapMode::OnDemand, TestFault::ListCorrupt),
        (MemmapMode::OnDemand, TestFault::PoolOverlap),
    ];
    let layouts = [
        StructPageSize::Bytes64,
        StructPageSize::Bytes32,
        StructPageSize::Bytes8,
    ];
    for ((mode, fault), layout) in cases.into_iter().flat_map(|c| layouts.map(|l| (c, l))) {
        let mut fx = load("4g-deferred");
        fx.opts.memmap = mode;
        fx.opts.test_fault = fault;
        fx.opts.struct_page = layout;
        let (result, mm, lines, _) = common::try_run_on_host(&fx);
        let what = format!(
            "{} {} struct_page={}",
            mode.name(),
            fault.name(),
            layout.bytes()
        );
        let err = match result {
            Err(e @ PipelineError::Verify(_)) => e,
            other => panic!("{what}: expected a verification failure, got {other:?}\n{lines:#?}"),
        };
        assert_eq!(err.status(), "verify");
        assert_eq!(mm.verify, VerifyOutcome::Failed.name(), "{what}");
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
        if fault == TestFault::DoubleInit {
            // The chunk (a section with workers, a zone of the node with a
            // pool) whose windows hold the doubled window is named.
            let pfn = hex("pfn 0x");
            let named = text.lines().filter_map(|l| {
                let range = l.split(" chunk ").nth(1)?.split(':').next()?;
                let (a, b) = range.split_once("..")?;
                let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
                Some((hex(a)?, hex(b)?))
            });
            assert!(
                named.into_iter().any(|(a, b)| a <= pfn && pfn < b),
                "{what}: no chunk holding pfn {pfn:#x} in\n{text}\n{damaged}"
            );
            continue;
        }
        let needle = match fault {
            TestFault::CorruptPage => format!("verify: pfn {:#x}: ", hex("pfn 0x")),
            TestFault::ListCorrupt => format!("verify: pfn {:#x}: ", hex("list pfn 0x")),
            TestFault::PoolOverlap => format!("block {:#x} lies in untouched pool", hex("pfn 0x")),
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
/// `alloc_workload::MAX_NODE_SPANS` (1024) of them, and one per CPU over all
/// nodes beyond: 16G over 4 nodes (CPUs on nodes 0 and 1, as booted) with
/// 256 CPUs is 1024 spans, with 257 CPUs it folds. The folded summary is
/// whole JSON with a lane's worth of phases per CPU.
#[test]
fn alloc_test_phases_fold_per_cpu_past_1024_cpu_node_pairs() {
    use memboot_kernel::report::{write_summary_line, BootFacts};
    let mut fx = load("16g-4nodes");
    fx.opts.alloc_test_bytes = 16 << 20;
    let nodes = 4;
    for (cpus, folded) in [(256u32, false), (257, true)] {
        // Half the CPUs on node 0, the rest on node 1, BSP first.
        fx.input.cpu_nodes = (0..cpus).map(|c| NodeId::from(c >= cpus / 2)).collect();
        let (mm, _, _) = run_on_host(&fx);
        assert_eq!(mm.nr_nodes(), nodes);
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
            serde_json::from_str(common::log::summary_json_of(&line).unwrap()).unwrap();
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

/// The pipeline starts the other CPUs once: for `ondemand` after memory is
/// ready (nothing before it needs them, so neither bring-up nor the console
/// an idle AP writes costs the boot CPU anything first), for the worker
/// modes before the boot CPU's eager phase (its stage-4 line), which hides
/// their bring-up from the workers that need them.
#[test]
fn the_cpus_start_after_memory_is_ready_only_where_nothing_needs_them_before() {
    for (name, before_line) in [
        ("32t-16nodes-ondemand", None),
        ("4g-deferred", Some("memmap: strategy deferred:")),
        ("4g-touch", Some("memmap: strategy touch:")),
    ] {
        let run = common::run_on_host_in_full(&load(name));
        run.result.unwrap();
        let [n] = run.lines_before_cpu_start[..] else {
            panic!("{name}: started {:?}", run.lines_before_cpu_start);
        };
        let first = |prefix: &str| {
            run.lines
                .iter()
                .position(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("{name}: no `{prefix}` line"))
        };
        match before_line {
            None => assert!(
                n > first("ondemand: ")
                    && run.lines[..n]
                        .iter()
                        .any(|l| l.contains("every page allocatable")),
                "{name}: started after line {n}"
            ),
            Some(prefix) => assert!(n <= first(prefix), "{name}: started after line {n}"),
        }
        // Waited for once, after the start, before the first job.
        let [w] = run.lines_before_cpu_wait[..] else {
            panic!("{name}: waited {:?}", run.lines_before_cpu_wait);
        };
        let first_job = run.lines_before_each_job.first().copied();
        assert!(
            n <= w && first_job.is_none_or(|j| w <= j),
            "{name}: started at {n}, waited at {w}, first job at {first_job:?}"
        );
    }
}

/// A failed bring-up comes back through the pipeline as its error, with
/// the summary's `smp` status, before any job runs: it does not end the
/// boot behind the pipeline's back.
#[test]
fn a_cpu_bring_up_failure_is_the_pipelines_error() {
    let failure = SmpError::StackTakenNeverArrived { cpu: 1, apic_id: 1 };
    for name in ["4g-deferred", "32t-16nodes-ondemand"] {
        let run = common::run_on_host_with_cpus(&load(name), Some(failure.clone()));
        let err = run.result.unwrap_err();
        assert_eq!(err, PipelineError::Smp(failure.clone()), "{name}");
        assert_eq!(err.status(), "smp", "{name}");
        assert!(run.lines_before_each_job.is_empty(), "{name}: a job ran");
        assert!(
            format!("{err}").contains("took its stack but never arrived"),
            "{err}"
        );
    }
}

/// The console is told once that memory is ready, right after the step
/// that made it so logged its last line and before anything later logs:
/// until then the kernel's printer keeps still.
#[test]
fn the_console_is_let_go_once_memory_is_ready() {
    for (name, ready_line) in [
        ("32t-16nodes-ondemand", "every page allocatable at"),
        ("4g-deferred", "deferred pages initialised: "),
        ("4g-touch", "deferred pages initialised: "),
    ] {
        let run = common::run_on_host_in_full(&load(name));
        run.result.unwrap();
        let [n] = run.lines_before_memory_ready[..] else {
            panic!("{name}: told {:?}", run.lines_before_memory_ready);
        };
        let ready = run
            .lines
            .iter()
            .position(|l| l.contains(ready_line))
            .unwrap_or_else(|| panic!("{name}: no `{ready_line}` line"));
        assert_eq!(
            n,
            ready + 1,
            "{name}: told after line {n}, ready at {ready}"
        );
    }
}

/// Where the boot CPU initialised every struct page (`regions`, `perpfn`)
/// no job wakes the other CPUs before memory is ready; with deferred
/// workers one does.
#[test]
fn no_cpu_but_the_boot_cpu_is_woken_when_it_did_all_the_work() {
    for (name, jobs_before_ready) in [("4g-regions", 0), ("4g-perpfn", 0), ("4g-deferred", 1)] {
        let run = common::run_on_host_in_full(&load(name));
        run.result.unwrap();
        let [ready] = run.lines_before_memory_ready[..] else {
            panic!("{name}: told {:?}", run.lines_before_memory_ready);
        };
        let before = run
            .lines_before_each_job
            .iter()
            .filter(|&&n| n < ready)
            .count();
        assert_eq!(
            before, jobs_before_ready,
            "{name}: jobs at {:?}",
            run.lines_before_each_job
        );
        // Nor is any waited for (on the kernel the wait runs a self-test
        // job on each CPU).
        let waits = run
            .lines_before_cpu_wait
            .iter()
            .filter(|&&n| n < ready)
            .count();
        assert_eq!(
            waits, jobs_before_ready,
            "{name}: waits at {:?}",
            run.lines_before_cpu_wait
        );
    }
}

/// `fx` replayed with `struct_page=` `layout`.
fn at_bytes(mut fx: Fixture, layout: StructPageSize) -> Fixture {
    fx.opts.struct_page = layout;
    fx
}

/// Every fixture a host run can afford (all struct pages written up to
/// 64G; the 32T one is `ondemand`), replayed with 32- and 8-byte struct
/// pages: the memblock, zones and vmemmap steps and the whole run's
/// figures against the model of the same map at that size (a half or an
/// eighth of the vmemmap, placed and mapped by the same rules), the
/// per-zone verification lines, and verification over the smaller pages.
/// The kernel's summaries were 64-byte runs, so the model is the only
/// oracle here.
#[test]
fn every_fixture_replayed_with_smaller_struct_pages_matches_the_model() {
    replay_at::<StructPage32>(StructPageSize::Bytes32);
    replay_at::<StructPage8>(StructPageSize::Bytes8);
}

fn replay_at<P: PageLayout>(layout: StructPageSize) {
    let bytes = layout.bytes();
    let sections_per_huge_page = (2 << 20) / (memmap::PAGES_PER_SECTION * bytes);
    // All but 1t, whose deferred init would write 8 GiB on the host.
    for name in ALL_FIXTURES.into_iter().filter(|&n| n != "1t") {
        let fx = at_bytes(load(name), layout);
        let model = Model::compute(&fx.model_map(), Walk::Runs);
        let wide = Model::compute(&load(name).model_map(), Walk::Runs);
        assert!(
            model.facts().vmemmap_bytes * (64 / bytes) >= wide.facts().vmemmap_bytes,
            "{name}: the model shrinks the vmemmap at {bytes} bytes"
        );
        check_stages::<P>(&fx, &model);
        let (mm, lines, mapper) = run_on_host(&fx);
        assert_eq!(mm.struct_page_bytes, bytes, "{name}");
        assert_facts_match_model(&fx, &mm, &model);
        assert_zone_lines_match_model(&fx, &lines, &model);
        // Several sections per huge page: mapped at boot, every huge page
        // of the vmemmap; on first use, one per section or group of them.
        let (huge_pages, _) = mapper.counts();
        if fx.opts.memmap == memboot_contract::options::MemmapMode::OnDemand {
            let sections = mm.vmemmap_sections_mapped;
            assert!(
                sections.div_ceil(sections_per_huge_page) <= huge_pages && huge_pages <= sections,
                "{name}: {huge_pages} huge pages for {sections} sections"
            );
        } else {
            assert_eq!(huge_pages * (2 << 20), mm.vmemmap_bytes, "{name}");
        }
        if mm.verify == VerifyOutcome::Ok.name() {
            assert_counts_match_the_scan(&fx, &mm, &lines);
        } else {
            assert_eq!(name, "4g-touch", "only touch goes unverified");
        }
        let named = format!("MiB of {bytes}-byte struct pages");
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("vmemmap: ") && l.contains(&named)),
            "{name}: the vmemmap line names the layout"
        );
    }
}

/// Two nodes meeting at an odd section, and a lone section after a hole:
/// with 32-byte struct pages sections 4 (node 0) and 5 (node 1) share a
/// huge page, which is mapped once, from node 0 (whose run maps it
/// first); section 13 gets a huge page of its own. Mapped at boot or on
/// first use, every present PFN's struct page is its own: a value written
/// to each reads back unchanged.
#[test]
fn sections_sharing_a_huge_page_keep_their_own_struct_pages() {
    use memmap::memblock::{Memblock, MemblockConfig};
    use memmap::zones::ZoneLayout;
    use memmap::{section_nr_to_pfn, PfnRange};
    const SECTION: u64 = 128 << 20;
    let present: Vec<u64> = (0..10).chain([13]).collect();
    for lazy in [false, true] {
        let mut mb = Memblock::new(MemblockConfig::default()).unwrap();
        mb.add(0, 5 * SECTION, 0).unwrap();
        mb.add(5 * SECTION, 5 * SECTION, 1).unwrap();
        mb.add(13 * SECTION, SECTION, 1).unwrap();
        let layout = ZoneLayout::new(&mb);
        let mut mapper = HostMapper::new();
        let sections = vmemmap::SectionMapper::new(&mut mapper);
        let (backing, stats) = if lazy {
            sections
                .reserve::<StructPage32>(&mut mb, &layout, &[])
                .unwrap()
        } else {
            sections.lend_mapper(|m| vmemmap::populate::<_, StructPage32>(&mut mb, m, &[]).unwrap())
        };
        // Huge pages 0..=4 (sections 0-9, two each) and 6 (section 13).
        assert_eq!(stats.bytes, 6 * (2 << 20), "lazy {lazy}");
        assert_eq!(stats.sections, 11);
        assert_eq!(
            stats.node_bytes,
            [(0, 3 * (2 << 20)), (1, 3 * (2 << 20))],
            "node 0 holds the shared huge page; node 1 the rest"
        );
        let mut memmap = Memmap::new(backing);
        for &nr in &present {
            let r = PfnRange::new(section_nr_to_pfn(nr), section_nr_to_pfn(nr + 1));
            for (pfn, p) in (r.start..).zip(memmap.pages_mut(r).unwrap()) {
                *p = StructPage32::touched(pfn);
            }
        }
        for &nr in &present {
            let r = PfnRange::new(section_nr_to_pfn(nr), section_nr_to_pfn(nr + 1));
            for (pfn, p) in (r.start..).zip(memmap.pages(r).unwrap()) {
                assert_eq!(*p, StructPage32::touched(pfn), "lazy {lazy}: section {nr}");
            }
        }
        assert!(
            !memmap.has_pfn(section_nr_to_pfn(11)),
            "no struct pages for a hole"
        );
        drop(memmap);
        drop(sections);
        assert_eq!(
            mapper.counts().0,
            6,
            "lazy {lazy}: each huge page mapped once"
        );
    }
}

/// HVO of the 2 MiB pages on the host, whose mapper aliases through a
/// memfd: at 64 and 32 bytes each page's vmemmap pages after the kept one
/// are remapped onto it and freed to the allocator (7 and 3 a page), the
/// pool and the page tables verify, and the freed pages verify free; at 8
/// bytes a line says there is nothing to free.
#[test]
fn hvo_frees_the_vmemmap_of_the_2m_pages_and_verifies() {
    for (layout, freed_per_page) in [
        (StructPageSize::Bytes64, 7u64),
        (StructPageSize::Bytes32, 3),
        (StructPageSize::Bytes8, 0),
    ] {
        let mut fx = at_bytes(load("4g-deferred"), layout);
        let cmdline = "hugepagesz=2M hugepages=100 hugetlb_free_vmemmap=on";
        fx.opts.hugetlb = memboot_contract::options::parse(cmdline).unwrap().hugetlb;
        let (mm, lines, _) = common::run_on_host(&fx);
        let what = format!("struct_page={}", layout.bytes());
        assert_eq!(mm.verify, VerifyOutcome::Ok.name(), "{what}\n{lines:#?}");
        assert_eq!(mm.hugepages_2m_per_node.iter().sum::<u64>(), 100, "{what}");
        assert_eq!(
            mm.hvo_2m_vmemmap_bytes_freed,
            100 * freed_per_page * 4096,
            "{what}\n{lines:#?}"
        );
        let said = if freed_per_page > 0 {
            "HugeTLB: HVO: the vmemmap of 100 pages of 2.00 MiB remapped onto one kept page each"
        } else {
            "HugeTLB: HVO of the 2.00 MiB pages frees nothing at 8-byte struct pages"
        };
        assert!(
            lines.iter().any(|l| l.starts_with(said)),
            "{what}: {said}\n{lines:#?}"
        );
    }
}
