//! Building the per-node work plan: chunks and worker assignments.
//!
//! # Chunks
//! Each node's deferred ranges are cut at the boundaries of
//! `sections_per_chunk`-aligned groups of sections and of reserved ranges
//! into [`Piece`]s (a piece lies in one group and one zone, and is either
//! wholly reserved or wholly free). Consecutive pieces of one group and
//! one zone form a chunk, the unit workers claim. With the default of one
//! section per chunk this is Linux's `padata` setting for
//! `deferred_init_memmap` (`align = min_chunk = PAGES_PER_SECTION`). With
//! more (`memmap=ondemand` uses [`PlanOptions::WHOLE_ZONES`]) a node's
//! chunks and pieces are as few as its zones, memory ranges and
//! reservations: the plan costs O(ranges), not O(sections).
//!
//! Why section alignment: a 128 MiB section is 2 MiB of struct pages (one
//! vmemmap huge page), so chunks never share a cache line or huge page of
//! struct pages, and, because a section (32768 pages) is a multiple of the
//! largest buddy block (1024 pages), every buddy a freed block can merge with
//! lies in the same chunk. That is what lets a worker free into the shared
//! free lists while other workers are still initialising other chunks: the
//! merge logic never reads a struct page another worker may be writing.
//!
//! # Workers
//! A node with CPUs gets one worker per CPU (Linux runs `deferred_init_memmap`
//! with `cpumask_of_node`), capped by [`PlanOptions::max_threads_per_node`].
//! A memory-only node (memory but no CPU) is served by the CPUs of the other
//! nodes: it gets one worker per CPU of the whole system (capped likewise),
//! starting at a rotating offset so that several memory-only nodes spread over
//! different CPUs first. Its workers compete with the local workers of the
//! CPUs they borrow; the executor decides how (the kernel's runs them one after
//! the other per CPU, which costs nothing since chunk claiming balances).

use alloc::vec::Vec;
use core::fmt;

use memmap::page::MAX_NUMNODES;

use crate::buddy::NR_ZONES;
use memmap::{pfn_to_section_nr, DeferredRange, NodeId, Pfn, PfnRange, ZoneType};

/// A CPU number as the executor understands it (the kernel uses its logical
/// CPU index; the host executor ignores it).
pub type CpuId = u32;

/// The CPUs of one NUMA node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeCpus {
    pub nid: NodeId,
    pub cpus: Vec<CpuId>,
}

/// Knobs of [`DeferredPlan::new`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanOptions {
    /// Upper bound on workers per node; `None`: the node's CPU count.
    pub max_threads_per_node: Option<usize>,
    /// Sections per claimable chunk (≥ 1). Linux uses 1 as its minimum.
    pub sections_per_chunk: u32,
}

impl PlanOptions {
    /// `sections_per_chunk` for one chunk per zone of a node's memory
    /// (a group larger than any physical address space).
    pub const WHOLE_ZONES: u32 = u32::MAX;
}

impl Default for PlanOptions {
    fn default() -> Self {
        Self {
            max_threads_per_node: None,
            sections_per_chunk: 1,
        }
    }
}

/// A part of a deferred range inside one section, wholly reserved or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub pfns: PfnRange,
    pub zone: ZoneType,
    /// Inside a reserved range: gets `PG_reserved` and is never freed.
    pub reserved: bool,
}

/// Pages per block window: the largest buddy block (order `MAX_ORDER`,
/// 4 MiB). No buddy of a block in a window lies outside it.
pub const WINDOW_NR_PAGES: u64 = 1 << memmap::MAX_ORDER;

/// The block windows of one chunk: window `w` is
/// `[base + w * WINDOW_NR_PAGES, base + (w + 1) * WINDOW_NR_PAGES)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkWindows {
    pub base: Pfn,
    pub nr: u32,
}

impl ChunkWindows {
    pub fn window(&self, w: u32) -> PfnRange {
        let start = self.base + w as u64 * WINDOW_NR_PAGES;
        PfnRange::new(start, start + WINDOW_NR_PAGES)
    }
    /// Windows `from..nr` as one PFN range (empty when `from >= nr`).
    pub fn from(&self, from: u32) -> PfnRange {
        let from = from.min(self.nr);
        PfnRange::new(self.window(from).start, self.window(self.nr).start)
    }
}

/// One worker: which node's chunks it claims and which CPU runs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkerAssignment {
    /// Node whose deferred memory the worker initialises.
    pub nid: NodeId,
    /// CPU that should run it.
    pub cpu: CpuId,
    /// Node that CPU belongs to (differs from `nid` for a memory-only node).
    pub cpu_nid: NodeId,
}

/// One node's deferred work.
#[derive(Clone, Debug)]
pub struct NodePlan {
    nid: NodeId,
    pieces: Vec<Piece>,
    /// Chunk `i` is `pieces[chunk_bounds[i]..chunk_bounds[i + 1]]`.
    chunk_bounds: Vec<u32>,
    /// `zone_chunk_end[z]`: the end of zone `z`'s run of chunks, which
    /// starts where zone `z - 1`'s ends (see [`NodePlan::zone_chunks`]).
    zone_chunk_end: [u32; NR_ZONES],
    nr_pages: u64,
    nr_reserved_pages: u64,
    nr_workers: usize,
    has_local_cpus: bool,
}

impl NodePlan {
    pub fn nid(&self) -> NodeId {
        self.nid
    }
    pub fn nr_chunks(&self) -> usize {
        self.chunk_bounds.len() - 1
    }
    /// The pieces of chunk `chunk` (sorted by PFN, all in one chunk of sections).
    pub fn chunk_pieces(&self, chunk: usize) -> &[Piece] {
        let (a, b) = (self.chunk_bounds[chunk], self.chunk_bounds[chunk + 1]);
        &self.pieces[a as usize..b as usize]
    }
    /// The block windows of chunk `chunk`: `MAX_ORDER`-aligned runs of 1024
    /// pages from the one holding its first piece to the one holding its
    /// last, the unit growers and workers claim (see `run/mod.rs`).
    pub fn chunk_windows(&self, chunk: usize) -> ChunkWindows {
        let pieces = self.chunk_pieces(chunk);
        let (Some(first), Some(last)) = (pieces.first(), pieces.last()) else {
            return ChunkWindows { base: 0, nr: 0 };
        };
        let base = first.pfns.start & !(WINDOW_NR_PAGES - 1);
        let end = last.pfns.end.next_multiple_of(WINDOW_NR_PAGES);
        ChunkWindows {
            base,
            nr: ((end - base) / WINDOW_NR_PAGES) as u32,
        }
    }
    /// The zone of a chunk's pieces (a chunk never holds two zones).
    pub fn chunk_zone(&self, chunk: usize) -> ZoneType {
        self.chunk_pieces(chunk)
            .first()
            .map_or(ZoneType::Dma, |p| p.zone)
    }
    /// The chunks whose zone ([`chunk_zone`](Self::chunk_zone)) is `zone`:
    /// one contiguous run, since pieces are sorted by PFN and zones by PFN
    /// too. Growth for a request of `zone` claims only from such runs.
    pub fn zone_chunks(&self, zone: ZoneType) -> core::ops::Range<usize> {
        let z = zone as usize;
        let start = if z == 0 {
            0
        } else {
            self.zone_chunk_end[z - 1]
        };
        start as usize..self.zone_chunk_end[z] as usize
    }
    /// The chunk whose windows hold `pfn`, if any.
    pub fn chunk_of(&self, pfn: Pfn) -> Option<usize> {
        let chunk = self.first_chunk_ending_above(pfn);
        (chunk < self.nr_chunks() && self.chunk_windows(chunk).base <= pfn).then_some(chunk)
    }
    /// The first chunk whose windows end above `pfn` (`nr_chunks()` when
    /// none does; binary search: chunks ascend by PFN).
    pub fn first_chunk_ending_above(&self, pfn: Pfn) -> usize {
        let (mut lo, mut hi) = (0, self.nr_chunks());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.chunk_windows(mid).from(0).end <= pfn {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }
    /// Window `w` of chunk `chunk` and the pieces that intersect it.
    pub fn window_pieces(&self, chunk: usize, w: u32) -> (PfnRange, &[Piece]) {
        let window = self.chunk_windows(chunk).window(w);
        let pieces = self.chunk_pieces(chunk);
        let first = pieces.partition_point(|p| p.pfns.end <= window.start);
        let last = first + pieces[first..].partition_point(|p| p.pfns.start < window.end);
        (window, &pieces[first..last])
    }
    /// All pieces, sorted by PFN.
    pub fn pieces(&self) -> &[Piece] {
        &self.pieces
    }
    /// Deferred pages of the node, reserved ones included.
    pub fn nr_pages(&self) -> u64 {
        self.nr_pages
    }
    pub fn nr_reserved_pages(&self) -> u64 {
        self.nr_reserved_pages
    }
    /// Pages that end up on the buddy free lists.
    pub fn nr_free_pages(&self) -> u64 {
        self.nr_pages - self.nr_reserved_pages
    }
    pub fn nr_workers(&self) -> usize {
        self.nr_workers
    }
    /// False for a memory-only node served by other nodes' CPUs.
    pub fn has_local_cpus(&self) -> bool {
        self.has_local_cpus
    }
}

/// The whole deferred-init plan: per-node chunks and the worker list.
#[derive(Clone, Debug)]
pub struct DeferredPlan {
    nodes: Vec<NodePlan>,
    workers: Vec<WorkerAssignment>,
    /// `node_index[nid]`: index into `nodes`.
    node_index: Vec<Option<u32>>,
}

/// Why a plan could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanError {
    /// A range's zone label does not match its PFNs.
    RangeCrossesZone { range: DeferredRange },
    /// A node id does not fit the struct-page flags word.
    NodeIdTooLarge { nid: NodeId },
    /// Two deferred ranges share PFNs.
    OverlappingRanges {
        first: DeferredRange,
        second: DeferredRange,
    },
    /// There is deferred memory but no CPU at all to initialise it.
    NoCpus { nid: NodeId },
    /// A node appears twice in the CPU lists.
    DuplicateNodeCpus { nid: NodeId },
    /// `sections_per_chunk` is 0.
    ZeroSectionsPerChunk,
    /// `max_threads_per_node` is `Some(0)`.
    ZeroThreadCap,
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanError::RangeCrossesZone { range } => write!(
                f,
                "deferred range {:#x}..{:#x} of node {} is labelled zone {} but its PFNs are not all in that zone; split ranges at zone boundaries (16 MiB, 4 GiB) before planning",
                range.pfns.start, range.pfns.end, range.nid, range.zone.name()
            ),
            PlanError::NodeIdTooLarge { nid } => write!(
                f,
                "node id {nid} does not fit the struct-page flags (max {}); renumber nodes densely from 0",
                MAX_NUMNODES - 1
            ),
            PlanError::OverlappingRanges { first, second } => write!(
                f,
                "deferred ranges {:#x}..{:#x} (node {}) and {:#x}..{:#x} (node {}) overlap; each PFN must be deferred once, fix the memblock/strategy output",
                first.pfns.start, first.pfns.end, first.nid, second.pfns.start, second.pfns.end, second.nid
            ),
            PlanError::NoCpus { nid } => write!(
                f,
                "node {nid} has deferred memory but no node lists any CPU; pass at least one CPU (the boot CPU) in the node CPU lists"
            ),
            PlanError::DuplicateNodeCpus { nid } => write!(
                f,
                "node {nid} appears twice in the node CPU lists; merge its CPUs into one entry"
            ),
            PlanError::ZeroSectionsPerChunk => write!(f, "sections_per_chunk is 0; use 1 (Linux's minimum chunk) or more"),
            PlanError::ZeroThreadCap => write!(
                f,
                "max_threads_per_node is Some(0), which would leave memory uninitialised; use None (one per CPU) or ≥ 1"
            ),
        }
    }
}

/// `range` cut at the boundaries of `sections_per_chunk`-aligned groups of
/// sections, ascending (with 1, at section boundaries).
fn group_pieces(range: PfnRange, sections_per_chunk: u32) -> impl Iterator<Item = PfnRange> {
    let group_nr_pages = memmap::PAGES_PER_SECTION.saturating_mul(sections_per_chunk as u64);
    let mut start = range.start;
    core::iter::from_fn(move || {
        if start >= range.end {
            return None;
        }
        let group_end = (start / group_nr_pages + 1).saturating_mul(group_nr_pages);
        let piece = PfnRange::new(start, group_end.min(range.end));
        start = piece.end;
        Some(piece)
    })
}

/// Sort and merge overlapping or adjacent ranges, dropping empty ones.
pub(crate) fn normalise(ranges: &[PfnRange]) -> Vec<PfnRange> {
    let mut v: Vec<PfnRange> = ranges.iter().copied().filter(|r| !r.is_empty()).collect();
    v.sort_unstable();
    let mut out: Vec<PfnRange> = Vec::with_capacity(v.len());
    for r in v {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

impl DeferredPlan {
    /// Build the plan from memmap's deferred ranges, the reserved PFN ranges
    /// (any order, may overlap, may extend beyond deferred memory) and the
    /// CPUs of each node. Empty ranges are ignored.
    pub fn new(
        ranges: &[DeferredRange],
        reserved: &[PfnRange],
        node_cpus: &[NodeCpus],
        opts: PlanOptions,
    ) -> Result<Self, PlanError> {
        if opts.sections_per_chunk == 0 {
            return Err(PlanError::ZeroSectionsPerChunk);
        }
        if opts.max_threads_per_node == Some(0) {
            return Err(PlanError::ZeroThreadCap);
        }
        let sorted = Self::sorted_ranges(ranges)?;
        for (i, nc) in node_cpus.iter().enumerate() {
            if node_cpus[..i].iter().any(|o| o.nid == nc.nid) {
                return Err(PlanError::DuplicateNodeCpus { nid: nc.nid });
            }
        }
        let reserved = normalise(reserved);

        // Each node's ranges together, in PFN order, by counting (nodes
        // interleave in address order, and a sort or a scan per node grows
        // with the square of a 64-node machine's ranges).
        let mut node_start = [0usize; MAX_NUMNODES as usize + 1];
        for r in &sorted {
            node_start[r.nid as usize + 1] += 1;
        }
        for nid in 1..node_start.len() {
            node_start[nid] += node_start[nid - 1];
        }
        let mut by_node = sorted.clone();
        let mut next = node_start;
        for r in &sorted {
            by_node[next[r.nid as usize]] = *r;
            next[r.nid as usize] += 1;
        }
        let mut nodes = Vec::new();
        for (nid, w) in (0..).zip(node_start.windows(2)) {
            if w[0] < w[1] {
                nodes.push(Self::node_plan(
                    nid,
                    &by_node[w[0]..w[1]],
                    &reserved,
                    opts.sections_per_chunk,
                ));
            }
        }
        let cap = opts.max_threads_per_node.unwrap_or(usize::MAX);
        let workers = Self::assign_workers(&mut nodes, node_cpus, cap)?;

        let max_nid = nodes.last().map_or(0, |n| n.nid as usize + 1);
        let mut node_index = alloc::vec![None; max_nid];
        for (i, n) in nodes.iter().enumerate() {
            node_index[n.nid as usize] = Some(i as u32);
        }
        Ok(Self {
            nodes,
            workers,
            node_index,
        })
    }

    /// The non-empty ranges in PFN order, each within one zone and below
    /// [`MAX_NUMNODES`], none overlapping another.
    fn sorted_ranges(ranges: &[DeferredRange]) -> Result<Vec<DeferredRange>, PlanError> {
        let mut sorted: Vec<DeferredRange> = ranges
            .iter()
            .copied()
            .filter(|r| !r.pfns.is_empty())
            .collect();
        sorted.sort_unstable_by_key(|r| (r.pfns.start, r.pfns.end));
        for r in &sorted {
            if r.nid >= MAX_NUMNODES {
                return Err(PlanError::NodeIdTooLarge { nid: r.nid });
            }
            if ZoneType::of_pfn(r.pfns.start) != r.zone
                || ZoneType::of_pfn(r.pfns.end - 1) != r.zone
            {
                return Err(PlanError::RangeCrossesZone { range: *r });
            }
        }
        for w in sorted.windows(2) {
            if w[1].pfns.start < w[0].pfns.end {
                return Err(PlanError::OverlappingRanges {
                    first: w[0],
                    second: w[1],
                });
            }
        }
        Ok(sorted)
    }

    /// Workers for each node: up to `cap` of its own CPUs; a node without
    /// CPUs (memory-only) borrows up to `cap` CPUs of the other nodes, taken
    /// in rotation so consecutive memory-only nodes spread over them.
    fn assign_workers(
        nodes: &mut [NodePlan],
        node_cpus: &[NodeCpus],
        cap: usize,
    ) -> Result<Vec<WorkerAssignment>, PlanError> {
        let mut by_nid: Vec<&NodeCpus> = node_cpus.iter().collect();
        by_nid.sort_unstable_by_key(|nc| nc.nid);
        let all_cpus: Vec<(CpuId, NodeId)> = by_nid
            .iter()
            .flat_map(|nc| nc.cpus.iter().map(|&c| (c, nc.nid)))
            .collect();
        let mut workers = Vec::new();
        let mut rotation = 0usize;
        for node in nodes.iter_mut() {
            let local: &[CpuId] = by_nid
                .iter()
                .find(|nc| nc.nid == node.nid)
                .map(|nc| nc.cpus.as_slice())
                .unwrap_or(&[]);
            node.has_local_cpus = !local.is_empty();
            if node.has_local_cpus {
                let n = local.len().min(cap);
                workers.extend(local[..n].iter().map(|&cpu| WorkerAssignment {
                    nid: node.nid,
                    cpu,
                    cpu_nid: node.nid,
                }));
                node.nr_workers = n;
                continue;
            }
            if all_cpus.is_empty() {
                return Err(PlanError::NoCpus { nid: node.nid });
            }
            let n = all_cpus.len().min(cap);
            for k in 0..n {
                let (cpu, cpu_nid) = all_cpus[(rotation + k) % all_cpus.len()];
                workers.push(WorkerAssignment {
                    nid: node.nid,
                    cpu,
                    cpu_nid,
                });
            }
            rotation += n;
            node.nr_workers = n;
        }
        Ok(workers)
    }

    /// The plan of node `nid`, whose ranges `ranges` are, in PFN order.
    fn node_plan(
        nid: NodeId,
        ranges: &[DeferredRange],
        reserved: &[PfnRange],
        sections_per_chunk: u32,
    ) -> NodePlan {
        let mut pieces = Vec::new();
        let (mut nr_pages, mut nr_reserved_pages) = (0, 0);
        for r in ranges {
            nr_pages += r.pfns.nr_pages();
            for sp in group_pieces(r.pfns, sections_per_chunk) {
                // First reserved range that ends after the piece starts.
                let mut i = reserved.partition_point(|res| res.end <= sp.start);
                let mut at = sp.start;
                while at < sp.end {
                    let (end, is_reserved) = match reserved.get(i) {
                        Some(res) if res.start <= at => (res.end.min(sp.end), true),
                        Some(res) => (res.start.min(sp.end), false),
                        None => (sp.end, false),
                    };
                    if is_reserved {
                        nr_reserved_pages += end - at;
                        i += 1;
                    }
                    pieces.push(Piece {
                        pfns: PfnRange::new(at, end),
                        zone: r.zone,
                        reserved: is_reserved,
                    });
                    at = end;
                }
            }
        }
        // A chunk is one group of sections, and one zone of it.
        let group = |p: &Piece| {
            (
                pfn_to_section_nr(p.pfns.start) / sections_per_chunk as u64,
                p.zone,
            )
        };
        let mut chunk_bounds = alloc::vec![0u32];
        for i in 1..pieces.len() {
            if group(&pieces[i]) != group(&pieces[i - 1]) {
                chunk_bounds.push(i as u32);
            }
        }
        if !pieces.is_empty() {
            chunk_bounds.push(pieces.len() as u32);
        }
        let mut plan = NodePlan {
            nid,
            pieces,
            chunk_bounds,
            zone_chunk_end: [0; NR_ZONES],
            nr_pages,
            nr_reserved_pages,
            nr_workers: 0,
            has_local_cpus: false,
        };
        // Chunk zones never decrease (pieces ascend by PFN), so each zone's
        // chunks end where the first chunk of a higher zone starts.
        let nr_chunks = plan.nr_chunks();
        for zone in ZoneType::ALL {
            plan.zone_chunk_end[zone as usize] = (0..nr_chunks)
                .take_while(|&c| plan.chunk_zone(c) <= zone)
                .count() as u32;
        }
        plan
    }

    /// Nodes with deferred memory, ascending by node id.
    pub fn nodes(&self) -> &[NodePlan] {
        &self.nodes
    }

    /// Workers, grouped by node in node order.
    pub fn workers(&self) -> &[WorkerAssignment] {
        &self.workers
    }

    /// The plan of node `nid`, if it has deferred memory.
    pub fn node(&self, nid: NodeId) -> Option<&NodePlan> {
        self.node_pos(nid).map(|i| &self.nodes[i])
    }

    pub(crate) fn node_pos(&self, nid: NodeId) -> Option<usize> {
        self.node_index
            .get(nid as usize)
            .copied()
            .flatten()
            .map(|i| i as usize)
    }

    /// Total deferred pages over all nodes.
    pub fn nr_pages(&self) -> u64 {
        self.nodes.iter().map(|n| n.nr_pages).sum()
    }

    /// The non-reserved pieces as buddy-managed ranges.
    pub fn managed_ranges(&self) -> impl Iterator<Item = crate::buddy::ManagedRange> + '_ {
        self.nodes.iter().flat_map(|n| {
            n.pieces
                .iter()
                .filter(|p| !p.reserved)
                .map(move |p| crate::buddy::ManagedRange {
                    nid: n.nid,
                    zone: p.zone,
                    pfns: p.pfns,
                })
        })
    }
}
