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

use deferred_init::host::{StdClock, ThreadExecutor};
use memboot_kernel::bootmap::kind_of_name;
use memboot_kernel::options::{self, Options};
use memboot_kernel::pipeline::facts::{Facts, MmFacts, VerifyOutcome};
use memboot_kernel::pipeline::host::{HostMapper, VecLog};
use memboot_kernel::pipeline::s1_memblock::EarlyReservation;
use memboot_kernel::pipeline::{
    self, s1_memblock, s2_zones, s3_vmemmap, s4_eager, s7_memory_blocks,
};
use memboot_kernel::pipeline::{Input, Machine};
use memmap::firmware::{FirmwareEntry, NodeAffinity};
use memmap::pageblock::PageblockMaps;
use memmap::store::Memmap;
use memmap::NodeId;

/// A boot as its serial log describes it.
struct Fixture {
    name: &'static str,
    map: Vec<FirmwareEntry>,
    affinity: Option<Vec<NodeAffinity>>,
    heap: EarlyReservation,
    phys_addr_bits: u32,
    /// Node of each CPU, BSP first (the kernel's CPU order).
    cpu_nodes: Vec<NodeId>,
    opts: Options,
    summary: serde_json::Value,
}

/// `[    1.234567] message` → `message`.
fn message(line: &str) -> &str {
    line.split_once("] ").map_or(line, |(_, m)| m)
}

/// `[mem 0xSTART-0xEND] rest` → (start, end + 1, rest).
fn mem_range(msg: &str) -> Option<(u64, u64, &str)> {
    let rest = &msg[msg.find("[mem ")? + 5..];
    let (start, rest) = rest.split_once('-')?;
    let (end, rest) = rest.split_once(']')?;
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
    Some((hex(start)?, hex(end)? + 1, rest.trim()))
}

fn load(name: &'static str) -> Fixture {
    let path = format!("{}/tests/fixtures/{name}.log", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let msgs: Vec<&str> = text
        .lines()
        .map(|l| message(l.trim_end_matches('\r')))
        .collect();
    let header = msgs
        .iter()
        .position(|m| m.contains("physical RAM map"))
        .unwrap_or_else(|| panic!("{name}: no memory-map header"));
    let map: Vec<FirmwareEntry> = msgs[header + 1..]
        .iter()
        .map_while(|m| mem_range(m))
        .map(|(start, end, kind)| {
            let kind = kind.split(" (e820 type").next().unwrap();
            let kind = kind.split(" (EFI type").next().unwrap();
            let kind = kind_of_name(kind).unwrap_or_else(|| panic!("{name}: kind '{kind}'"));
            FirmwareEntry::new(start, end - start, kind)
        })
        .collect();
    assert!(map.len() >= 3, "{name}: memory map too short");
    let affinity: Vec<NodeAffinity> = msgs
        .iter()
        .filter(|m| m.starts_with("NUMA:") && m.contains("-> node "))
        .map(|m| {
            let (start, end, rest) = mem_range(m).unwrap();
            let nid = rest.trim_start_matches("-> node ").parse().unwrap();
            NodeAffinity::new(start, end - start, nid)
        })
        .collect();
    let find = |prefix: &str| {
        msgs.iter()
            .find(|m| m.starts_with(prefix))
            .unwrap_or_else(|| panic!("{name}: no '{prefix}' line"))
    };
    let (heap_start, heap_end, _) = mem_range(find("heap: ")).unwrap();
    let phys_addr_bits = find("memblock: ")
        .split("phys bits ")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .unwrap()
        .parse()
        .unwrap();
    let mut cpu_nodes = Vec::new();
    for m in msgs.iter().filter(|m| m.starts_with("NUMA: node ")) {
        // "NUMA: node N: X MiB usable RAM, K CPUs (APIC ids [...])"
        let nid: NodeId = m["NUMA: node ".len()..]
            .split(':')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let k: usize = m
            .split(", ")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        cpu_nodes.extend(std::iter::repeat_n(nid, k));
    }
    let cmdline = find("Kernel command line: ")["Kernel command line: ".len()..].to_string();
    let opts = options::parse(&cmdline).expect("the kernel accepted this command line");
    let summary: serde_json::Value = text
        .lines()
        .find_map(|l| l.strip_prefix("memboot-summary: "))
        .map(|j| serde_json::from_str(j).unwrap())
        .unwrap_or_else(|| panic!("{name}: no summary"));
    assert_eq!(
        summary["status"], "ok",
        "{name}: the fixture boot succeeded"
    );
    Fixture {
        name,
        map,
        affinity: (!affinity.is_empty()).then_some(affinity),
        heap: EarlyReservation {
            base: heap_start,
            size: heap_end - heap_start,
            what: "kernel heap",
        },
        phys_addr_bits,
        cpu_nodes,
        opts,
        summary,
    }
}

impl Fixture {
    fn reserve(&self) -> [EarlyReservation; 2] {
        [
            EarlyReservation {
                base: 0,
                size: 1 << 20,
                what: "low 1 MiB",
            },
            self.heap,
        ]
    }
    fn input<'a>(&'a self, reserve: &'a [EarlyReservation]) -> Input<'a> {
        Input {
            opts: &self.opts,
            map: &self.map,
            affinity: self.affinity.as_deref(),
            phys_addr_bits: self.phys_addr_bits,
            reserve,
        }
    }
    fn kernel(&self, key: &str) -> u64 {
        self.summary[key]
            .as_u64()
            .unwrap_or_else(|| panic!("{}: summary key {key}", self.name))
    }
}

/// Run the whole pipeline as the kernel did; return its facts and log.
fn run_on_host(fx: &Fixture) -> (MmFacts, Vec<String>, HostMapper) {
    let reserve = fx.reserve();
    let input = fx.input(&reserve);
    let mut mapper = HostMapper::new();
    let executor = ThreadExecutor::new(fx.cpu_nodes.len());
    let (clock, log, facts) = (StdClock::new(), VecLog::default(), Facts::new());
    let machine = Machine {
        mapper: &mut mapper,
        executor: &executor,
        clock: &clock,
        log: &log,
        cpu_nodes: &fx.cpu_nodes,
    };
    pipeline::run(&input, machine, &facts)
        .unwrap_or_else(|e| panic!("{}: host pipeline failed: {e}\n{:#?}", fx.name, log.lines()));
    let mm = facts.with(|f| f.clone()).unwrap();
    (mm, log.lines(), mapper)
}

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
    let mode = s4_eager::ModePlan::of(fx.opts.memmap);
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
