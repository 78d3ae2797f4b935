//! Replaying real boots on the host: a fixture log (`fixtures/capture.sh`)
//! parsed back into the machine it describes, and the pipeline run on it
//! with host seams.
#![allow(dead_code)]

pub mod model;

use deferred_init::host::{StdClock, ThreadExecutor};
use memboot_kernel::bootmap::kind_of_e820_name;
use memboot_kernel::options::{self, BlockSizeOption, Options};
use memboot_kernel::pipeline::error::PipelineError;
use memboot_kernel::pipeline::facts::{Facts, MmFacts};
use memboot_kernel::pipeline::host::{HostMapper, VecLog};
use memboot_kernel::pipeline::s1_memblock::EarlyReservation;
use memboot_kernel::pipeline::{self, Input, Machine};
use memmap::firmware::{FirmwareEntry, NodeAffinity, RegionKind};
use memmap::NodeId;

/// A boot as its serial log describes it.
pub struct Fixture {
    pub name: &'static str,
    pub map: Vec<FirmwareEntry>,
    pub affinity: Option<Vec<NodeAffinity>>,
    pub heap: EarlyReservation,
    pub phys_addr_bits: u32,
    /// Node of each CPU, BSP first (the kernel's CPU order).
    pub cpu_nodes: Vec<NodeId>,
    pub opts: Options,
    pub summary: serde_json::Value,
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

pub fn load(name: &'static str) -> Fixture {
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
    let mut map: Vec<FirmwareEntry> = msgs[header + 1..]
        .iter()
        .map_while(|m| m.strip_prefix("BIOS-e820: ").and_then(mem_range))
        .map(|(start, end, kind)| {
            let kind = kind_of_e820_name(kind).unwrap_or_else(|| panic!("{name}: kind '{kind}'"));
            FirmwareEntry::new(start, end - start, kind)
        })
        .collect();
    // `bootloader: [mem …] in use` marks RAM regions of the map as the
    // bootloader's.
    for (start, end, _) in msgs
        .iter()
        .filter_map(|m| m.strip_prefix("bootloader: ").and_then(mem_range))
    {
        let entry = map
            .iter_mut()
            .find(|e| e.start == start && e.start + e.len_bytes == end)
            .unwrap_or_else(|| {
                panic!("{name}: bootloader region {start:#x}-{end:#x} not in the map")
            });
        *entry = FirmwareEntry::new(start, end - start, RegionKind::Bootloader);
    }
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
    pub fn reserve(&self) -> [EarlyReservation; 2] {
        [
            EarlyReservation {
                base: 0,
                size: 1 << 20,
                what: "low 1 MiB",
            },
            self.heap,
        ]
    }
    pub fn input<'a>(&'a self, reserve: &'a [EarlyReservation]) -> Input<'a> {
        Input {
            opts: &self.opts,
            map: &self.map,
            affinity: self.affinity.as_deref(),
            phys_addr_bits: self.phys_addr_bits,
            // Every fixture is a QEMU guest.
            under_hypervisor: true,
            reserve,
            // Host replays have no kernel image; only the Memory: line shows it.
            image: Default::default(),
        }
    }
    /// The model's input: the fixture's firmware map and options as plain
    /// byte ranges (see `model`), nothing the pipeline computed.
    pub fn model_map(&self) -> model::Map {
        let range = |e: &FirmwareEntry| (e.start, e.start + e.len_bytes);
        let is = |e: &&FirmwareEntry, kinds: &[RegionKind]| kinds.contains(&e.kind);
        let ram = [RegionKind::Usable, RegionKind::Bootloader];
        model::Map {
            usable: self.map.iter().filter(|e| is(e, &ram)).map(range).collect(),
            other: self
                .map
                .iter()
                .filter(|e| !is(e, &ram))
                .map(range)
                .collect(),
            in_use: self
                .map
                .iter()
                .filter(|e| is(e, &[RegionKind::Bootloader]))
                .map(range)
                .collect(),
            srat: self.affinity.as_ref().map(|a| {
                a.iter()
                    .map(|a| (a.start, a.start + a.len_bytes, a.nid))
                    .collect()
            }),
            heap: (self.heap.base, self.heap.base + self.heap.size),
            phys_addr_bits: self.phys_addr_bits,
            mode: model::Mode::from_name(self.opts.memmap.name()).expect("a memmap= mode"),
            memory_block_size: match self.opts.memory_block_size {
                BlockSizeOption::Auto => None,
                BlockSizeOption::Bytes(b) => Some(b),
            },
        }
    }
    pub fn kernel(&self, key: &str) -> u64 {
        self.summary[key]
            .as_u64()
            .unwrap_or_else(|| panic!("{}: summary key {key}", self.name))
    }
}

/// Run the whole pipeline as the kernel did; return its facts and log.
pub fn run_on_host(fx: &Fixture) -> (MmFacts, Vec<String>, HostMapper) {
    let (result, mm, lines, mapper) = try_run_on_host(fx);
    result.unwrap_or_else(|e| panic!("{}: host pipeline failed: {e}\n{lines:#?}", fx.name));
    (mm, lines, mapper)
}

/// [`run_on_host`] for runs that may fail: the pipeline's result too.
pub fn try_run_on_host(
    fx: &Fixture,
) -> (Result<(), PipelineError>, MmFacts, Vec<String>, HostMapper) {
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
    let result = pipeline::run(&input, machine, &facts);
    let mm = facts.with(|f| f.clone()).unwrap();
    (result, mm, log.lines(), mapper)
}
