//! An oracle for memory init that owes nothing to the code under test: the
//! figures a boot must report, computed page by page from the firmware map
//! it logged, by the rules the README states (and Linux's, where the README
//! says memboot does what Linux does).
//!
//! It uses no type or function of `memmap`, `deferred-init` or
//! `memboot_kernel`: its input is plain byte ranges as a boot log prints
//! them ([`Map`]), so the same file serves the host pipeline tests
//! (`kernel/tests`, from a fixture) and the boot tests (`tests/`, which
//! include it by path, from a live boot's log).
//!
//! # The rules, per page frame (PFN `p` = bytes `[4096 p, 4096 p + 4096)`)
//!
//! - **present** (memblock memory, what Linux calls present): every byte of
//!   the page is in a `usable` range (the bootloader's in-use ranges are
//!   usable RAM too), no byte is in a range of any other kind (on overlap
//!   the less usable kind wins, as `e820__update_table()` decides), and the
//!   page lies below the CPU's physical address width. So RAM rounds inward
//!   to whole pages.
//! - **node**: the SRAT memory-affinity range holding the page; without
//!   SRAT, node 0. (Memory no SRAT range covers stays on node 0.)
//! - **zone** (Linux x86-64 `max_zone_pfns`): DMA below 16 MiB, DMA32 below
//!   4 GiB, Normal above.
//! - **section**: 128 MiB (32768 pages); present when any of its pages is.
//!   Its node is that of its lowest present page (the first
//!   `memory_present()` call wins). Each present section costs 2 MiB of
//!   struct pages (64 B a page): `vmemmap_bytes`.
//! - **reserved** (memblock.reserved): the first 1 MiB (Linux x86 reserves
//!   it), the bootloader's in-use ranges and the kernel heap, each rounded
//!   outward to pages; then what memblock allocates for the vmemmap:
//!   - per run of consecutive present sections of one node, one block of
//!     2 MiB per section, 2 MiB aligned, on that node; if no free range of
//!     the node holds it, one 2 MiB block per section instead;
//!   - after each section's block, the page tables its 2 MiB mapping adds
//!     (x86-64 4-level paging, 2 MiB leaves, the window starting on a
//!     top-level slot): a page directory for each new 1 GiB of window
//!     (512 sections) and a PDPT for each new 512 GiB (262144 sections),
//!     one 4 KiB page each, on the section's node;
//!   - **placed as Linux's memblock places them**: top-down (the default
//!     `memblock_find_in_range_node()` direction): the highest address
//!     that is a multiple of the alignment and leaves the whole block
//!     inside one free range (present, unreserved pages of one node), on
//!     the requested node first and on any node if it has none
//!     (`memblock_alloc_try_nid()`); never the first page. Linux also
//!     keeps vmemmap blocks above 16 MiB (`MAX_DMA_ADDRESS`); memboot does
//!     not, so the model asserts every block lands above 16 MiB, where
//!     both rules agree.
//! - **eager or deferred** (README, `memmap=deferred`; Linux's
//!   `defer_init()` after dc2da7b45ffe): the zones below each node's
//!   highest zone (the zone of its highest present page) are initialised
//!   eagerly; in the highest zone, present pages are counted in address
//!   order and deferral starts at the first present PFN that is a multiple
//!   of 32768 and has at least 32768 present pages of that zone before it;
//!   it and every later present page of the zone are deferred. (Linux
//!   keeps the counter in one static that restarts whenever the zone
//!   changes; with each node's highest-zone memory contiguous, as in every
//!   map here, that is one count per node.) `regions` and `perpfn`
//!   initialise everything eagerly; `touch` uses the same split as
//!   `deferred`; `ondemand` initialises no struct page at boot (every
//!   present page goes to the pool, and its lazy vmemmap writes a
//!   section's holes when it first maps the section).
//! - **holes** (`init_unavailable_range()`): every non-present page of a
//!   present section below the end of the last present section gets a
//!   reserved struct page; Linux attributes it to the zone and node of the
//!   next present page, and the tail after the last present page to the
//!   last one's.
//! - **memory blocks** (Linux x86 `probe_memory_block_size()` under a
//!   hypervisor, as QEMU's CPUID says): `memory_block_size=` if given,
//!   else 128 MiB when the end of the last present page is below 64 GiB,
//!   else the largest of 2 GiB, 1 GiB, 512 MiB, 256 MiB that the end is a
//!   multiple of, else 128 MiB. One block per block-sized, block-aligned
//!   range holding a present section (`memory_dev_init()`).
//!
//! The summary's figures then follow (see [`Facts`]).
//!
//! # The walk
//!
//! [`Walk::EveryPfn`] classifies every PFN below the end of the last
//! present section one by one: the brute force. [`Walk::Runs`] classifies
//! only the first PFN of each elementary interval between consecutive cut
//! points (every range boundary of the map, SRAT and reservations, rounded
//! both ways to pages, the zone limits and every section boundary), which is
//! the same classification if no rule changes inside an interval; it is
//! what makes 32 TiB (8.6 billion PFNs) affordable. The host tests run both
//! on every fixture of up to 64 GiB and require identical models.

use std::collections::BTreeMap;

pub const PAGE_SIZE: u64 = 4096;
/// Pages per 128 MiB section.
pub const SECTION_PAGES: u64 = 32768;
/// The vmemmap's 2 MiB huge page: one section's struct pages at 64 bytes
/// each (32768 × 64 B), two sections' at 32.
pub const HUGE_PAGE_BYTES: u64 = 2 << 20;
const HUGE_PAGE_PAGES: u64 = HUGE_PAGE_BYTES / PAGE_SIZE;
/// First PFN of DMA32 (16 MiB) and of Normal (4 GiB).
const DMA32_START: u64 = (16 << 20) / PAGE_SIZE;
const NORMAL_START: u64 = (4 << 30) / PAGE_SIZE;
/// Linux x86 reserves the first 1 MiB.
const LOW_RESERVED_BYTES: u64 = 1 << 20;
/// Huge pages per page directory (1 GiB of window) and per
/// page-directory-pointer table (512 GiB of window).
const PD_HUGE_PAGES: u64 = (1 << 30) / HUGE_PAGE_BYTES;
const PDPT_HUGE_PAGES: u64 = (512 << 30) / HUGE_PAGE_BYTES;
/// Memory-block sizes and the RAM from which x86 uses larger blocks.
const MIN_BLOCK: u64 = 128 << 20;
const MAX_BLOCK: u64 = 2 << 30;
const LARGE_BLOCK_RAM: u64 = 64 << 30;
/// Where Linux keeps vmemmap blocks above (`MAX_DMA_ADDRESS`).
const VMEMMAP_FLOOR_PFN: u64 = DMA32_START;

/// A zone of one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Zone {
    Dma,
    Dma32,
    Normal,
}

impl Zone {
    pub const ALL: [Zone; 3] = [Zone::Dma, Zone::Dma32, Zone::Normal];
    pub fn of(pfn: u64) -> Zone {
        if pfn < DMA32_START {
            Zone::Dma
        } else if pfn < NORMAL_START {
            Zone::Dma32
        } else {
            Zone::Normal
        }
    }
    /// The zone's PFN limits.
    pub fn limits(self) -> (u64, u64) {
        match self {
            Zone::Dma => (0, DMA32_START),
            Zone::Dma32 => (DMA32_START, NORMAL_START),
            Zone::Normal => (NORMAL_START, u64::MAX),
        }
    }
    /// Linux's name, as the log prints it.
    pub fn name(self) -> &'static str {
        match self {
            Zone::Dma => "DMA",
            Zone::Dma32 => "DMA32",
            Zone::Normal => "Normal",
        }
    }
    pub fn from_name(name: &str) -> Option<Zone> {
        Zone::ALL.into_iter().find(|z| z.name() == name)
    }
}

/// The `memmap=` mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Deferred,
    Regions,
    PerPfn,
    Touch,
    OnDemand,
}

impl Mode {
    pub fn from_name(name: &str) -> Option<Mode> {
        Some(match name {
            "deferred" => Mode::Deferred,
            "regions" => Mode::Regions,
            "perpfn" => Mode::PerPfn,
            "touch" => Mode::Touch,
            "ondemand" => Mode::OnDemand,
            _ => return None,
        })
    }
    /// The boot CPU leaves the highest zone's tail to others.
    fn splits(self) -> bool {
        matches!(self, Mode::Deferred | Mode::Touch)
    }
}

/// What the model starts from: the firmware map and the boot's options,
/// as a boot log shows them. Byte ranges are `[start, end)`.
#[derive(Clone, Debug)]
pub struct Map {
    /// `usable` RAM (the bootloader's in-use ranges among it).
    pub usable: Vec<(u64, u64)>,
    /// Every other kind (reserved, ACPI data and NVS, unusable, …).
    pub other: Vec<(u64, u64)>,
    /// The bootloader's in-use RAM (`bootloader: [mem …] in use`).
    pub in_use: Vec<(u64, u64)>,
    /// SRAT memory affinity `(start, end, node)`; `None` without SRAT.
    pub srat: Option<Vec<(u64, u64, u32)>>,
    /// The kernel heap (`heap: [mem …]`).
    pub heap: (u64, u64),
    pub phys_addr_bits: u32,
    pub mode: Mode,
    /// `memory_block_size=` in bytes; `None` for `auto`.
    pub memory_block_size: Option<u64>,
    /// `struct_page=`: bytes per struct page (64 or 32).
    pub struct_page_bytes: u64,
}

/// Which PFNs the model classifies one by one (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Walk {
    EveryPfn,
    Runs,
}

/// One zone of one node: every zone whose limits meet the node's span.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ZoneModel {
    pub nid: u32,
    pub zone: Option<Zone>,
    /// PFNs `[start, end)`: the node's span clipped to the zone's limits.
    pub span: (u64, u64),
    pub present: u64,
    pub eager: u64,
    pub deferred: u64,
    /// Present pages memblock reserves, all / the eager ones.
    pub reserved: u64,
    pub reserved_eager: u64,
    /// Hole pages attributed to the zone (Linux's unavailable ranges).
    pub holes: u64,
}

impl ZoneModel {
    pub fn zone(&self) -> Zone {
        self.zone.expect("every modelled zone has a type")
    }
}

/// One node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeModel {
    pub nid: u32,
    /// PFNs `[first present, last present + 1)`.
    pub span: (u64, u64),
    pub present: u64,
    /// Present sections whose struct pages belong to the node.
    pub sections: u64,
    /// Bytes of struct pages placed on the node: the huge pages its runs
    /// map themselves.
    pub memmap_bytes: u64,
    /// Its highest populated zone: the only one deferral touches.
    pub highest_zone: Zone,
}

/// A block memblock allocated, in PFNs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    pub what: &'static str,
    pub start: u64,
    pub pages: u64,
    /// The node asked for and the node it came from.
    pub nid_asked: u32,
    pub nid: u32,
}

/// The whole model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Model {
    pub mode: Mode,
    /// Node-major, zones in order.
    pub zones: Vec<ZoneModel>,
    pub nodes: Vec<NodeModel>,
    pub present_sections: u64,
    /// Huge pages of struct pages mapped (or reserved) in all.
    pub memmap_huge_pages: u64,
    /// Page-table pages the vmemmap mapping needs.
    pub table_frames: u64,
    pub allocations: Vec<Allocation>,
    /// memblock.reserved after the vmemmap is mapped: PFN ranges, merged
    /// where they touch (including what is not present, e.g. the holes of
    /// the first MiB).
    pub reserved: Vec<(u64, u64)>,
    pub memory_block_size: u64,
    pub nr_memory_blocks: u64,
}

/// The summary's figures, as the model has them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Facts {
    pub present_pages: u64,
    pub eager_pages: u64,
    pub low_zone_pages: u64,
    pub deferred_pages: u64,
    /// Eager pages that get `PG_reserved` (0 with `touch`, which writes no
    /// Linux state).
    pub reserved_pages: u64,
    /// Hole pages initialised as reserved at boot (0 with `touch`, which
    /// writes no Linux state, and with `ondemand`, whose holes are written
    /// with their sections on first use).
    pub hole_pages: u64,
    pub vmemmap_bytes: u64,
    pub memory_block_size: u64,
    pub nr_memory_blocks: u64,
    /// Pages on the buddy lists when memory is handed over: the
    /// initialised pages minus the reserved ones among them, i.e. present
    /// minus reserved in the faithful modes, eager minus eager reserved
    /// with `ondemand` (its pool holds the rest, untouched), 0 with
    /// `touch` (no allocator).
    pub free_pages: u64,
    pub nr_nodes: u64,
}

impl Facts {
    /// `(summary key, value)` for every figure.
    pub fn by_key(&self) -> [(&'static str, u64); 11] {
        [
            ("present_pages", self.present_pages),
            ("eager_pages", self.eager_pages),
            ("low_zone_pages", self.low_zone_pages),
            ("deferred_pages", self.deferred_pages),
            ("reserved_pages", self.reserved_pages),
            ("hole_pages", self.hole_pages),
            ("vmemmap_bytes", self.vmemmap_bytes),
            ("memory_block_size", self.memory_block_size),
            ("nr_memory_blocks", self.nr_memory_blocks),
            ("free_pages", self.free_pages),
            ("nodes", self.nr_nodes),
        ]
    }
}

impl Model {
    /// The model of `map`, walking it as `walk` says.
    pub fn compute(map: &Map, walk: Walk) -> Model {
        let mut pages = Pages::new(map);
        // 1. Present memory, by node: memblock's memory regions.
        let regions = pages.present_regions(walk);
        assert!(!regions.is_empty(), "the map has no whole page of RAM");
        let sections = present_sections(&regions);
        // 2. What memblock allocates for the struct pages.
        let runs = huge_page_runs(&sections, map.struct_page_bytes);
        let (allocations, table_frames) = if map.mode == Mode::OnDemand {
            pages.reserve_vmemmap_for_first_use(&regions, &runs)
        } else {
            pages.allocate_vmemmap(&regions, &runs)
        };
        // 3. Every page again, now with the reservations.
        let mut nodes = node_models(&regions, &sections, &runs);
        let mut zones = pages.count_zone_pages(walk, &nodes, &sections);
        for n in nodes.values_mut() {
            n.present = zones
                .iter()
                .filter(|((nid, _), _)| *nid == n.nid)
                .map(|(_, z)| z.present)
                .sum();
        }
        let out = zones_in_spans(&nodes, &mut zones);
        assert!(zones.is_empty(), "every counted page lies in a zone span");
        let end_bytes = regions.last().unwrap().1 * PAGE_SIZE;
        let block = map
            .memory_block_size
            .unwrap_or_else(|| probe_memory_block_size(end_bytes));
        Model {
            mode: map.mode,
            zones: out,
            nodes: nodes.into_values().collect(),
            present_sections: sections.len() as u64,
            memmap_huge_pages: runs
                .iter()
                .map(|r| r.huge_pages.end - r.huge_pages.start)
                .sum(),
            table_frames,
            allocations,
            reserved: pages.reserved_merged(),
            memory_block_size: block,
            nr_memory_blocks: nr_memory_blocks(&sections, block),
        }
    }

    pub fn zone(&self, nid: u32, zone: Zone) -> Option<&ZoneModel> {
        self.zones
            .iter()
            .find(|z| z.nid == nid && z.zone == Some(zone))
    }

    pub fn node(&self, nid: u32) -> Option<&NodeModel> {
        self.nodes.iter().find(|n| n.nid == nid)
    }

    fn sum(&self, f: impl Fn(&ZoneModel) -> u64) -> u64 {
        self.zones.iter().map(f).sum()
    }

    /// Present pages memblock reserves, eager or not.
    pub fn reserved_pages_all(&self) -> u64 {
        self.sum(|z| z.reserved)
    }

    /// How many `window_pages`-aligned windows hold a memblock-reserved
    /// page (of [`Model::reserved`]).
    pub fn reserved_windows(&self, window_pages: u64) -> u64 {
        let mut windows: Vec<u64> = self
            .reserved
            .iter()
            .flat_map(|&(start, end)| start / window_pages..end.div_ceil(window_pages))
            .collect();
        windows.dedup();
        windows.len() as u64
    }

    /// The summary's figures.
    pub fn facts(&self) -> Facts {
        let present = self.sum(|z| z.present);
        let eager = self.sum(|z| z.eager);
        let reserved = self.reserved_pages_all();
        let reserved_eager = self.sum(|z| z.reserved_eager);
        let low_zone_pages = self
            .zones
            .iter()
            .filter(|z| Some(z.zone()) != self.node(z.nid).map(|n| n.highest_zone))
            .map(|z| z.present)
            .sum();
        let touch = self.mode == Mode::Touch;
        Facts {
            present_pages: present,
            eager_pages: eager,
            low_zone_pages,
            deferred_pages: self.sum(|z| z.deferred),
            reserved_pages: if touch { 0 } else { reserved_eager },
            hole_pages: match self.mode {
                Mode::Touch | Mode::OnDemand => 0,
                Mode::Deferred | Mode::Regions | Mode::PerPfn => self.sum(|z| z.holes),
            },
            vmemmap_bytes: self.memmap_huge_pages * HUGE_PAGE_BYTES,
            memory_block_size: self.memory_block_size,
            nr_memory_blocks: self.nr_memory_blocks,
            free_pages: match self.mode {
                Mode::Touch => 0,
                Mode::OnDemand => eager - reserved_eager,
                Mode::Deferred | Mode::Regions | Mode::PerPfn => present - reserved,
            },
            nr_nodes: self.nodes.len() as u64,
        }
    }
}

/// Linux x86 `probe_memory_block_size()` on a guest (CPUID's hypervisor
/// bit set, as QEMU sets it), for boot memory ending at byte `end`.
pub fn probe_memory_block_size(end: u64) -> u64 {
    if end < LARGE_BLOCK_RAM {
        return MIN_BLOCK;
    }
    let mut bz = MAX_BLOCK;
    while bz > MIN_BLOCK && !end.is_multiple_of(bz) {
        bz >>= 1;
    }
    bz
}

/// Present sections `(section_nr, node)`, ascending: the node of each is
/// that of its lowest present page.
fn present_sections(regions: &[(u64, u64, u32)]) -> Vec<(u64, u32)> {
    let mut out: Vec<(u64, u32)> = Vec::new();
    for &(start, end, nid) in regions {
        for s in start / SECTION_PAGES..=(end - 1) / SECTION_PAGES {
            if out.last().is_none_or(|l| l.0 < s) {
                out.push((s, nid));
            }
        }
    }
    out
}

/// The nodes of `regions`: span, highest zone, present sections and the
/// bytes of struct pages `runs` place on each (`present` still 0).
fn node_models(
    regions: &[(u64, u64, u32)],
    sections: &[(u64, u32)],
    runs: &[HugePageRun],
) -> BTreeMap<u32, NodeModel> {
    let mut nodes: BTreeMap<u32, NodeModel> = BTreeMap::new();
    for &(start, end, nid) in regions {
        let n = nodes.entry(nid).or_insert(NodeModel {
            nid,
            span: (start, end),
            present: 0,
            sections: 0,
            memmap_bytes: 0,
            highest_zone: Zone::Dma,
        });
        n.span = (n.span.0.min(start), n.span.1.max(end));
    }
    for n in nodes.values_mut() {
        n.highest_zone = Zone::of(n.span.1 - 1);
        n.sections = sections.iter().filter(|s| s.1 == n.nid).count() as u64;
        n.memmap_bytes = runs
            .iter()
            .filter(|r| r.nid == n.nid)
            .map(|r| r.huge_pages.end - r.huge_pages.start)
            .sum::<u64>()
            * HUGE_PAGE_BYTES;
    }
    nodes
}

/// Every zone of every node: the node's span clipped to each zone's
/// limits, with the pages counted for it taken out of `counted`.
fn zones_in_spans(
    nodes: &BTreeMap<u32, NodeModel>,
    counted: &mut BTreeMap<(u32, Zone), ZoneModel>,
) -> Vec<ZoneModel> {
    let mut out = Vec::new();
    for n in nodes.values() {
        for zone in Zone::ALL {
            let (lo, hi) = zone.limits();
            let span = (n.span.0.max(lo), n.span.1.min(hi));
            if span.0 >= span.1 {
                assert!(!counted.contains_key(&(n.nid, zone)));
                continue;
            }
            let mut z = counted.remove(&(n.nid, zone)).unwrap_or_default();
            z.nid = n.nid;
            z.zone = Some(zone);
            z.span = span;
            out.push(z);
        }
    }
    out
}

/// Memory blocks of `block` bytes holding a present section.
fn nr_memory_blocks(sections: &[(u64, u32)], block: u64) -> u64 {
    let per_block = block / (SECTION_PAGES * PAGE_SIZE);
    let mut block_ids: Vec<u64> = sections.iter().map(|s| s.0 / per_block).collect();
    block_ids.dedup();
    block_ids.len() as u64
}

/// Where deferral stands in one node's highest zone.
#[derive(Default)]
struct Deferral {
    /// Present pages of the zone counted so far.
    count: u64,
    /// Whether deferral has begun.
    started: bool,
}

impl Deferral {
    /// Whether the present run of `len` pages from `start` in the node's
    /// highest zone, the next in address order, is initialised eagerly.
    fn eager(&mut self, start: u64, len: u64) -> bool {
        let last = start + len - 1;
        if !self.started && start.is_multiple_of(SECTION_PAGES) && self.count >= SECTION_PAGES {
            self.started = true;
        }
        if !self.started {
            // Only the first PFN of a run may be section aligned.
            assert_eq!(start / SECTION_PAGES, last / SECTION_PAGES);
            self.count += len;
        }
        !self.started
    }
}

/// Classifies page frames by the rules in the module docs.
struct Pages<'a> {
    map: &'a Map,
    /// Usable RAM, merged: `[start, end)` bytes, ascending, disjoint.
    ram: Vec<(u64, u64)>,
    /// One past the last byte the CPU can address.
    limit: u64,
    /// SRAT in PFNs.
    srat: Option<Vec<(u64, u64, u32)>>,
    /// Reserved PFN ranges `[start, end)`, sorted by start (may overlap).
    reserved: Vec<(u64, u64)>,
    /// End of the walk: the end of the last section with RAM.
    top: u64,
}

impl<'a> Pages<'a> {
    fn new(map: &'a Map) -> Pages<'a> {
        let limit = 1u64 << map.phys_addr_bits.clamp(32, 52);
        let mut ram: Vec<(u64, u64)> = map.usable.iter().copied().filter(|r| r.0 < r.1).collect();
        ram.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (s, e) in ram {
            match merged.last_mut() {
                Some(m) if s <= m.1 => m.1 = m.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        let srat = map.srat.as_ref().map(|srat| {
            srat.iter()
                .map(|&(s, e, nid)| {
                    assert!(
                        s % PAGE_SIZE == 0 && e % PAGE_SIZE == 0,
                        "SRAT range {s:#x}-{e:#x} is not page aligned: the model does not define it"
                    );
                    (s / PAGE_SIZE, e / PAGE_SIZE, nid)
                })
                .collect()
        });
        let ram_end = merged.last().map_or(0, |m| m.1.min(limit));
        let top = (ram_end / PAGE_SIZE).next_multiple_of(SECTION_PAGES);
        let outward = |(s, e): (u64, u64)| (s / PAGE_SIZE, e.div_ceil(PAGE_SIZE));
        let mut reserved: Vec<(u64, u64)> = [(0, LOW_RESERVED_BYTES), map.heap]
            .into_iter()
            .chain(map.in_use.iter().copied())
            .map(outward)
            .collect();
        reserved.sort_unstable();
        Pages {
            map,
            ram: merged,
            limit,
            srat,
            reserved,
            top,
        }
    }

    /// The node of `pfn` if it is present, by the rules, brute force.
    /// Present memory, by node: memblock's memory regions `(start, end,
    /// node)` in PFNs, ascending, runs of one node merged.
    fn present_regions(&self, walk: Walk) -> Vec<(u64, u64, u32)> {
        let mut regions: Vec<(u64, u64, u32)> = Vec::new();
        self.walk(walk, |start, len| {
            if let Some(nid) = self.node(start) {
                match regions.last_mut() {
                    Some(r) if r.1 == start && r.2 == nid => r.1 += len,
                    _ => regions.push((start, start + len, nid)),
                }
            }
        });
        regions
    }

    /// Present, eager, deferred, reserved and hole pages of every
    /// (node, zone) that has present pages. A hole inside a present
    /// section counts for the zone of the next present page (the last
    /// one's for holes after it).
    fn count_zone_pages(
        &self,
        walk: Walk,
        nodes: &BTreeMap<u32, NodeModel>,
        sections: &[(u64, u32)],
    ) -> BTreeMap<(u32, Zone), ZoneModel> {
        let mode = self.map.mode;
        let mut zones: BTreeMap<(u32, Zone), ZoneModel> = BTreeMap::new();
        let mut deferral: BTreeMap<u32, Deferral> = BTreeMap::new();
        let mut pending_holes = 0u64;
        let mut last_present: Option<(u32, Zone)> = None;
        let section_present = |pfn: u64| {
            sections
                .binary_search_by_key(&(pfn / SECTION_PAGES), |s| s.0)
                .is_ok()
        };
        self.walk(walk, |start, len| {
            let last = start + len - 1;
            let Some(nid) = self.node(start) else {
                if section_present(start) {
                    assert!(section_present(last), "a run leaves its section");
                    pending_holes += len;
                }
                return;
            };
            let zone = Zone::of(start);
            assert_eq!(zone, Zone::of(last), "a run crosses a zone limit");
            let z = zones.entry((nid, zone)).or_default();
            z.holes += std::mem::take(&mut pending_holes);
            last_present = Some((nid, zone));
            let eager = if mode == Mode::OnDemand {
                false
            } else if !mode.splits() || zone != nodes[&nid].highest_zone {
                true
            } else {
                deferral.entry(nid).or_default().eager(start, len)
            };
            z.present += len;
            if eager {
                z.eager += len;
            } else {
                z.deferred += len;
            }
            if self.reserved(start) {
                z.reserved += len;
                if eager {
                    z.reserved_eager += len;
                }
            }
        });
        let tail = last_present.expect("some page is present");
        zones.get_mut(&tail).unwrap().holes += pending_holes;
        zones
    }

    fn node(&self, pfn: u64) -> Option<u32> {
        let (a, b) = (pfn * PAGE_SIZE, (pfn + 1) * PAGE_SIZE);
        let ram = self.ram.iter().any(|&(s, e)| s <= a && b <= e);
        let other = self.map.other.iter().any(|&(s, e)| s < b && a < e);
        if !ram || other || b > self.limit {
            return None;
        }
        Some(match &self.srat {
            None => 0,
            Some(srat) => srat
                .iter()
                .find(|&&(s, e, _)| s <= pfn && pfn < e)
                .map_or(0, |r| r.2),
        })
    }

    fn reserved_merged(&self) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        for &(s, e) in &self.reserved {
            match out.last_mut() {
                Some(m) if s <= m.1 => m.1 = m.1.max(e),
                _ => out.push((s, e)),
            }
        }
        out
    }

    fn reserved(&self, pfn: u64) -> bool {
        self.reserved.iter().any(|&(s, e)| s <= pfn && pfn < e)
    }

    /// Call `f(start, len)` over `[0, top)`: every PFN alone, or each
    /// interval between cut points.
    fn walk(&self, walk: Walk, mut f: impl FnMut(u64, u64)) {
        match walk {
            Walk::EveryPfn => (0..self.top).for_each(|pfn| f(pfn, 1)),
            Walk::Runs => {
                for pair in self.cuts().windows(2) {
                    f(pair[0], pair[1] - pair[0]);
                }
            }
        }
    }

    /// Every PFN where a rule may change, ascending, within `[0, top]`.
    fn cuts(&self) -> Vec<u64> {
        let mut cuts = vec![
            0,
            self.top,
            DMA32_START,
            NORMAL_START,
            self.limit / PAGE_SIZE,
        ];
        let map = self.map;
        for &(s, e) in map.usable.iter().chain(&map.other).chain(&map.in_use) {
            cuts.extend([s / PAGE_SIZE, s.div_ceil(PAGE_SIZE)]);
            cuts.extend([e / PAGE_SIZE, e.div_ceil(PAGE_SIZE)]);
        }
        for &(s, e, _) in self.srat.iter().flatten() {
            cuts.extend([s, e]);
        }
        for &(s, e) in &self.reserved {
            cuts.extend([s, e]);
        }
        cuts.extend((0..=self.top / SECTION_PAGES).map(|s| s * SECTION_PAGES));
        cuts.retain(|&c| c <= self.top);
        cuts.sort_unstable();
        cuts.dedup();
        cuts
    }

    /// memblock's top-down allocation of `pages` aligned to `align`, on
    /// `nid` first, then anywhere; reserves and returns the first PFN.
    fn alloc(
        &mut self,
        regions: &[(u64, u64, u32)],
        what: &'static str,
        pages: u64,
        align: u64,
        nid: u32,
    ) -> Option<Allocation> {
        let found = self
            .find_top_down(regions, pages, align, Some(nid))
            .or_else(|| self.find_top_down(regions, pages, align, None))?;
        let (start, landed) = found;
        let at = self
            .reserved
            .partition_point(|r| *r < (start, start + pages));
        self.reserved.insert(at, (start, start + pages));
        Some(Allocation {
            what,
            start,
            pages,
            nid_asked: nid,
            nid: landed,
        })
    }

    /// The highest aligned start that fits in a free range (present,
    /// unreserved pages of one node; never PFN 0).
    fn find_top_down(
        &self,
        regions: &[(u64, u64, u32)],
        pages: u64,
        align: u64,
        nid: Option<u32>,
    ) -> Option<(u64, u32)> {
        let mut best: Option<(u64, u32)> = None;
        for &(start, end, rnid) in regions.iter().filter(|r| nid.is_none_or(|n| n == r.2)) {
            // Free gaps of [start, end): the reservations cut it.
            let mut cursor = start.max(1);
            let mut gaps = Vec::new();
            for &(s, e) in &self.reserved {
                if e <= cursor || s >= end {
                    continue;
                }
                if s > cursor {
                    gaps.push((cursor, s));
                }
                cursor = cursor.max(e);
            }
            if cursor < end {
                gaps.push((cursor, end));
            }
            for (lo, hi) in gaps {
                if hi - lo < pages {
                    continue;
                }
                let candidate = (hi - pages) / align * align;
                if candidate >= lo && best.is_none_or(|b| candidate > b.0) {
                    best = Some((candidate, rnid));
                }
            }
        }
        best
    }

    /// Struct pages and page tables for every run's huge pages, in the
    /// kernel's order: per run one block when it fits, else one huge page
    /// at a time, each followed by the tables it needs; returns the
    /// allocations and the table count.
    fn allocate_vmemmap(
        &mut self,
        regions: &[(u64, u64, u32)],
        runs: &[HugePageRun],
    ) -> (Vec<Allocation>, u64) {
        let mut out = Vec::new();
        let mut tables = 0;
        let mut prev: Option<u64> = None;
        for run in runs {
            let (nid, count) = (run.nid, run.huge_pages.end - run.huge_pages.start);
            if count == 0 {
                continue;
            }
            let block = self.alloc(
                regions,
                "struct pages",
                count * HUGE_PAGE_PAGES,
                HUGE_PAGE_PAGES,
                nid,
            );
            let whole = block.is_some();
            out.extend(block);
            for h in run.huge_pages.clone() {
                if !whole {
                    let one = self.alloc(
                        regions,
                        "struct pages",
                        HUGE_PAGE_PAGES,
                        HUGE_PAGE_PAGES,
                        nid,
                    );
                    out.push(one.unwrap_or_else(|| {
                        panic!("no 2 MiB for huge page {h}'s struct pages: the boot would fail")
                    }));
                }
                let pdpt = prev.is_none_or(|p| p / PDPT_HUGE_PAGES != h / PDPT_HUGE_PAGES);
                let pd = prev.is_none_or(|p| p / PD_HUGE_PAGES != h / PD_HUGE_PAGES);
                for _ in 0..(pdpt as u64 + pd as u64) {
                    let t = self.alloc(regions, "page table", 1, 1, nid);
                    out.push(t.expect("a page for a page table: else the boot would fail"));
                    tables += 1;
                }
                prev = Some(h);
            }
        }
        assert_above_floor(&out);
        (out, tables)
    }

    /// `ondemand`: nothing mapped at boot, everything reserved: one block
    /// of struct pages per run (it must fit), then per node, in the order
    /// nodes first appear, one block of page-table frames: for each of its
    /// runs, one per 1 GiB and one per 512 GiB of area the run touches.
    fn reserve_vmemmap_for_first_use(
        &mut self,
        regions: &[(u64, u64, u32)],
        runs: &[HugePageRun],
    ) -> (Vec<Allocation>, u64) {
        let mut out = Vec::new();
        let mut node_frames: Vec<(u32, u64)> = Vec::new();
        for run in runs {
            let (nid, first, end) = (run.nid, run.huge_pages.start, run.huge_pages.end);
            if first == end {
                continue;
            }
            let block = self.alloc(
                regions,
                "struct pages",
                (end - first) * HUGE_PAGE_PAGES,
                HUGE_PAGE_PAGES,
                nid,
            );
            out.push(block.expect("one block per run: else the boot would fail"));
            let last = end - 1;
            let frames = (last / PD_HUGE_PAGES - first / PD_HUGE_PAGES + 1)
                + (last / PDPT_HUGE_PAGES - first / PDPT_HUGE_PAGES + 1);
            match node_frames.iter_mut().find(|(n, _)| *n == nid) {
                Some((_, f)) => *f += frames,
                None => node_frames.push((nid, frames)),
            }
        }
        let mut tables = 0;
        for (nid, n) in node_frames {
            let t = self.alloc(regions, "page tables", n, 1, nid);
            out.push(t.expect("page-table frames: else the boot would fail"));
            tables += n;
        }
        assert_above_floor(&out);
        (out, tables)
    }
}

/// A run of consecutive present sections of one node and the huge pages
/// (indices from the vmemmap base) it maps itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HugePageRun {
    pub nid: u32,
    pub huge_pages: std::ops::Range<u64>,
}

/// The runs of `sections` (ascending `(section, nid)`) with their huge
/// pages at `struct_page_bytes` per struct page: every huge page one of the
/// run's sections' struct pages lie in, less the first when the run before
/// already maps it (two 32-byte sections share a huge page; Linux maps a
/// PMD once, from the node that populated it first).
fn huge_page_runs(sections: &[(u64, u32)], struct_page_bytes: u64) -> Vec<HugePageRun> {
    let huge_page = |s: u64| s * SECTION_PAGES * struct_page_bytes / HUGE_PAGE_BYTES;
    let mut out: Vec<HugePageRun> = Vec::new();
    let mut last_mapped: Option<u64> = None;
    for (i, j) in section_runs(sections) {
        let mut first = huge_page(sections[i].0);
        let end = huge_page(sections[j - 1].0) + 1;
        if last_mapped == Some(first) {
            first += 1;
        }
        if first < end {
            last_mapped = Some(end - 1);
        }
        out.push(HugePageRun {
            nid: sections[i].1,
            huge_pages: first..end.max(first),
        });
    }
    out
}

/// Runs of `sections` (ascending `(section, nid)`): index ranges `i..j` of
/// consecutive sections of one node.
fn section_runs(sections: &[(u64, u32)]) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < sections.len() {
        let mut j = i + 1;
        while j < sections.len()
            && sections[j].1 == sections[i].1
            && sections[j].0 == sections[j - 1].0 + 1
        {
            j += 1;
        }
        runs.push((i, j));
        i = j;
    }
    runs
}

fn assert_above_floor(allocations: &[Allocation]) {
    for a in allocations {
        assert!(
            a.start >= VMEMMAP_FLOOR_PFN,
            "{} at pfn {:#x}: below 16 MiB, where Linux's and memboot's placement differ",
            a.what,
            a.start
        );
    }
}

impl Model {
    /// Check a boot's per-zone `verify:` lines (`what` names the boot in
    /// messages): one line per populated zone, in node and zone order
    /// (none with `touch`, which is not verified), each with the model's
    /// present and reserved pages. Exact, except what allocations decide
    /// under `ondemand` (which block windows growth initialised): there the
    /// split between initialised and untouched pages is bounded below by
    /// the model's eager part, and the sums are exact: initialised +
    /// untouched = present, reserved either way = reserved, and, the
    /// allocation test having freed everything, free + untouched
    /// unreserved = present - reserved.
    pub fn assert_zone_lines(&self, what: &str, lines: &[VerifyZoneLine]) {
        let populated: Vec<&ZoneModel> = self.zones.iter().filter(|z| z.present > 0).collect();
        let got: Vec<(u32, Zone)> = lines.iter().map(|l| (l.nid, l.zone)).collect();
        let want: Vec<(u32, Zone)> = if self.mode == Mode::Touch {
            Vec::new()
        } else {
            populated.iter().map(|z| (z.nid, z.zone())).collect()
        };
        assert_eq!(got, want, "{what}: a verify line per populated zone");
        for (l, z) in lines.iter().zip(populated) {
            let what = format!("{what}: node {} zone {}", z.nid, z.zone().name());
            assert_eq!(l.present, z.present, "{what}: present");
            assert_eq!(l.expected_free, l.free, "{what}: free as expected");
            if self.mode == Mode::OnDemand {
                let sum = l.initialised + l.untouched;
                assert_eq!(sum, z.present, "{what}: initialised + untouched");
                let reserved = l.reserved + l.untouched_reserved;
                assert_eq!(reserved, z.reserved, "{what}: reserved");
                assert!(
                    l.initialised >= z.eager,
                    "{what}: the eager part initialised"
                );
                assert!(
                    l.reserved >= z.reserved_eager,
                    "{what}: reserved eager pages"
                );
                assert_eq!(
                    l.free + (l.untouched - l.untouched_reserved),
                    z.present - z.reserved,
                    "{what}: every unreserved page free or untouched"
                );
            } else {
                assert_eq!(l.initialised, z.present, "{what}: initialised");
                assert_eq!(l.reserved, z.reserved, "{what}: reserved");
                assert_eq!(l.free, z.present - z.reserved, "{what}: free");
                assert_eq!(l.untouched, 0, "{what}: no pool");
            }
        }
    }
}

/// A per-zone `verify:` line of a boot log: `verify: node N zone Z: P
/// present, I initialised, R reserved, F free (expected E)[, U untouched
/// (UR of them reserved)]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerifyZoneLine {
    pub nid: u32,
    pub zone: Zone,
    pub present: u64,
    pub initialised: u64,
    pub reserved: u64,
    pub free: u64,
    pub expected_free: u64,
    /// 0 without a pool part.
    pub untouched: u64,
    pub untouched_reserved: u64,
}

impl VerifyZoneLine {
    /// Parse one log message (without its timestamp); `None` if it is not
    /// a per-zone count line.
    pub fn parse(msg: &str) -> Option<VerifyZoneLine> {
        let rest = msg.strip_prefix("verify: node ")?;
        let (nid, rest) = rest.split_once(" zone ")?;
        let (zone, rest) = rest.split_once(": ")?;
        if !rest.contains(" present, ") {
            return None;
        }
        // The number right before `word`.
        let count = |word: &str| -> Option<u64> {
            let at = rest.find(word)?;
            rest[..at]
                .trim_end()
                .rsplit([' ', '('])
                .next()?
                .parse()
                .ok()
        };
        let pool = rest.contains(" untouched");
        Some(VerifyZoneLine {
            nid: nid.parse().ok()?,
            zone: Zone::from_name(zone)?,
            present: count(" present,")?,
            initialised: count(" initialised,")?,
            reserved: count(" reserved,")?,
            free: count(" free")?,
            expected_free: count(")")?,
            untouched: if pool { count(" untouched")? } else { 0 },
            untouched_reserved: if pool { count(" of them reserved")? } else { 0 },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    fn map(usable: &[(u64, u64)], mode: Mode) -> Map {
        Map {
            usable: usable.to_vec(),
            other: vec![(0x9fc00, 0xa0000), (0xf0000, 0x100000)],
            in_use: vec![(16 * MIB, 17 * MIB)],
            srat: None,
            heap: (24 * MIB, 42 * MIB),
            phys_addr_bits: 44,
            mode,
            memory_block_size: None,
            struct_page_bytes: 64,
        }
    }

    #[test]
    fn small_map_by_hand() {
        // 0..0x9fc00 and 1 MiB..3 GiB + 4..5 GiB: QEMU's 4G layout.
        let m = map(
            &[(0, 0x9fc00), (MIB, 3 * GIB), (4 * GIB, 5 * GIB)],
            Mode::Deferred,
        );
        for walk in [Walk::Runs, Walk::EveryPfn] {
            let model = Model::compute(&m, walk);
            let f = model.facts();
            let low = 0x9f + (3 * GIB - MIB) / PAGE_SIZE;
            assert_eq!(f.present_pages, low + GIB / PAGE_SIZE);
            assert_eq!(f.low_zone_pages, low);
            assert_eq!(
                f.eager_pages,
                low + SECTION_PAGES,
                "4 GiB is section aligned"
            );
            // Holes: pfns 0x9f..0x100 in section 0; none past 3 GiB (the
            // section ends there) or past 5 GiB.
            assert_eq!(f.hole_pages, 0x61);
            assert_eq!(model.present_sections, 24 + 8);
            assert_eq!(model.table_frames, 2, "one PDPT and one PD");
            // Reserved: 0x9f of the low MiB, 256 in use, 18 MiB of heap,
            // 64 MiB of struct pages and 2 tables (at the top of 5 GiB).
            let early = 0x9f + 256 + 18 * 256;
            assert_eq!(f.reserved_pages, early);
            assert_eq!(model.reserved_pages_all(), early + 64 * 256 + 2);
            assert_eq!(model.allocations[0].start, (5 * GIB - 48 * MIB) / PAGE_SIZE);
            assert_eq!(f.free_pages, f.present_pages - early - 64 * 256 - 2);
            assert_eq!((f.memory_block_size, f.nr_memory_blocks), (128 * MIB, 32));
        }
    }

    #[test]
    fn deferral_waits_for_a_full_section_then_an_aligned_pfn() {
        // 1 GiB: the highest zone is DMA32, from 16 MiB. The first aligned
        // PFN, 128 MiB, has only 28672 of its pages before it; 256 MiB has
        // enough, so everything below it but the hole is eager.
        let m = map(&[(0, 0x9fc00), (MIB, GIB)], Mode::Deferred);
        let f = Model::compute(&m, Walk::EveryPfn).facts();
        let dma = 0x9f + (16 * MIB - MIB) / PAGE_SIZE;
        assert_eq!(f.low_zone_pages, dma);
        assert_eq!(f.eager_pages, 2 * SECTION_PAGES - 0x61);
        assert_eq!(f, Model::compute(&m, Walk::Runs).facts());
        // ondemand defers every present page.
        let m = map(&[(0, 0x9fc00), (MIB, GIB)], Mode::OnDemand);
        let f = Model::compute(&m, Walk::EveryPfn).facts();
        assert_eq!(f.eager_pages, 0);
        assert_eq!(f.deferred_pages, f.present_pages);
        assert_eq!(f.hole_pages, 0, "written with their sections, not at boot");
        assert_eq!(f, Model::compute(&m, Walk::Runs).facts());
    }

    #[test]
    fn parses_verify_lines() {
        let l = VerifyZoneLine::parse(
            "verify: node 0 zone Normal: 536084480 present, 277504 initialised, 14848 reserved, 262656 free (expected 262656), 535806976 untouched (8388642 of them reserved)",
        )
        .unwrap();
        assert_eq!(
            (
                l.nid,
                l.zone,
                l.present,
                l.initialised,
                l.reserved,
                l.free,
                l.expected_free
            ),
            (0, Zone::Normal, 536084480, 277504, 14848, 262656, 262656)
        );
        assert_eq!((l.untouched, l.untouched_reserved), (535806976, 8388642));
        let l = VerifyZoneLine::parse(
            "verify: node 2 zone DMA32: 782304 present, 782304 initialised, 6636 reserved, 775668 free (expected 775668)",
        )
        .unwrap();
        assert_eq!(
            (l.nid, l.zone, l.free, l.untouched),
            (2, Zone::Dma32, 775668, 0)
        );
        assert_eq!(
            VerifyZoneLine::parse(
                "verify: node 0 zone Normal: allocated and freed orders 0@0x13cffc"
            ),
            None
        );
    }
}
