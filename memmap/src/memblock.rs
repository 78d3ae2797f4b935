//! memblock: the boot-time table of physical memory and of what is reserved
//! in it, after Linux mm/memblock.c.
//!
//! # Protocol
//! 1. [`Memblock::from_firmware`] turns an untrusted firmware map into the
//!    `memory` table (RAM kinds) and the `reserved` table (RAM in use), the
//!    job of Linux `e820__memblock_setup()` after `e820__update_table()`:
//!    overlaps resolve to the least usable kind, zero-length entries vanish,
//!    RAM rounds *inward* to whole pages (a partial page cannot be handed
//!    out) while reserved RAM rounds *outward* (a partial page in use must not
//!    be handed out either), and anything past the CPU's physical address
//!    width is clipped. What was dropped is counted in a [`FirmwareReport`]
//!    so that nothing is silently lost.
//! 2. [`Memblock::apply_affinity`] splits memory regions at SRAT node
//!    boundaries and tags each piece with its node (Linux
//!    `numa_register_memblks()` → `memblock_set_node()`).
//! 3. [`Memblock::add`], [`reserve`](Memblock::reserve),
//!    [`remove`](Memblock::remove), [`free`](Memblock::free) edit the tables
//!    (`memblock_add_node()`, `memblock_reserve()`, `memblock_remove()`,
//!    `memblock_phys_free()`); [`alloc`](Memblock::alloc) is
//!    `memblock_alloc_try_nid()`: top-down, on the requested node first, then
//!    on any node.
//!
//! Both tables are always sorted, disjoint and merged: neighbours that touch
//! and share node and flags are one region (`memblock_merge_regions()`).
//! Every edit computes the new table size before writing, so a capacity
//! overflow is a [`MemblockError`] and leaves the table as it was (Linux
//! instead doubles the array with `memblock_double_array()`; a fixed cap
//! keeps the worst case of a hostile map bounded).
//!
//! All regions are page aligned, so their PFN views ([`MemblockRegion::pfns`])
//! are exact.

use alloc::vec::Vec;
use core::fmt;

use crate::firmware::{FirmwareRegion, NodeAffinity, RegionKind};
use crate::page::MAX_NUMNODES;
use crate::{NodeId, Pfn, PfnRange, PAGE_SHIFT, PAGE_SIZE};

/// Node id of regions that belong to no node (reserved regions), Linux
/// `NUMA_NO_NODE`.
pub const NUMA_NO_NODE: NodeId = u32::MAX;

/// Linux `MAX_PHYSMEM_BITS` on x86_64 with 4-level paging: the default
/// physical address width.
pub const DEFAULT_PHYS_ADDR_BITS: u32 = 46;

/// Default per-table region cap; a 1 TiB machine's e820 map has tens of
/// entries, and SRAT splitting at most doubles that per node.
pub const DEFAULT_MAX_REGIONS: usize = 8192;

/// Region flags (Linux `enum memblock_flags`); regions merge only when equal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct RegionFlags(pub u32);

impl RegionFlags {
    /// `MEMBLOCK_NONE`.
    pub const NONE: RegionFlags = RegionFlags(0);
    /// `MEMBLOCK_HOTPLUG`: hotpluggable memory (SRAT hot-pluggable bit).
    pub const HOTPLUG: RegionFlags = RegionFlags(1);
    /// `MEMBLOCK_MIRROR`: mirrored (reliable) memory.
    pub const MIRROR: RegionFlags = RegionFlags(2);
    /// `MEMBLOCK_NOMAP`: not to be mapped by the kernel.
    pub const NOMAP: RegionFlags = RegionFlags(4);
}

/// One memblock region, in bytes (Linux `struct memblock_region`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemblockRegion {
    pub base: u64,
    pub size: u64,
    pub nid: NodeId,
    pub flags: RegionFlags,
}

impl MemblockRegion {
    /// One past the last byte.
    pub const fn end(&self) -> u64 {
        self.base + self.size
    }
    /// The region's page frames (exact: regions are page aligned).
    pub const fn pfns(&self) -> PfnRange {
        PfnRange::new(self.base >> PAGE_SHIFT, self.end() >> PAGE_SHIFT)
    }
    fn mergeable_with(&self, next: &MemblockRegion) -> bool {
        self.end() == next.base && self.nid == next.nid && self.flags == next.flags
    }
}

/// Which table an error or a region refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableKind {
    Memory,
    Reserved,
}

impl TableKind {
    pub const fn name(self) -> &'static str {
        match self {
            TableKind::Memory => "memory",
            TableKind::Reserved => "reserved",
        }
    }
}

/// Everything that can go wrong building or editing memblock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemblockError {
    /// The edit would need more regions than the table may hold.
    TooManyRegions {
        table: TableKind,
        needed: usize,
        max_regions: usize,
    },
    /// The heap could not grow the table.
    OutOfMemory { table: TableKind },
    /// The configured physical address width is not something x86_64 has.
    BadPhysAddrBits { bits: u32 },
    /// The firmware map contained no whole page of usable RAM.
    NoUsableMemory,
    /// A range ends past the CPU's physical address width.
    BeyondPhysAddrWidth {
        base: u64,
        size: u64,
        phys_addr_bits: u32,
    },
    /// `base + size` overflows 64 bits.
    RangeOverflow { base: u64, size: u64 },
    /// A node id the struct-page flags cannot encode.
    InvalidNode { nid: NodeId },
    /// Two SRAT affinity entries claim the same memory for different nodes.
    AffinityOverlap {
        start: u64,
        end: u64,
        first_nid: NodeId,
        second_nid: NodeId,
    },
    /// An allocation alignment that is not a power of two.
    BadAlign { align: u64 },
    /// An allocation of zero bytes.
    ZeroSize,
    /// No free memory fits the allocation on any node.
    AllocFailed {
        size: u64,
        align: u64,
        nid: Option<NodeId>,
    },
}

impl fmt::Display for MemblockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            MemblockError::TooManyRegions { table, needed, max_regions } => write!(
                f,
                "memblock: the {} table would need {needed} regions but holds at most {max_regions}; \
                 raise MemblockConfig::max_regions or check the firmware map for fragmentation",
                table.name()
            ),
            MemblockError::OutOfMemory { table } => write!(
                f,
                "memblock: out of heap memory growing the {} table; give the early heap more space",
                table.name()
            ),
            MemblockError::BadPhysAddrBits { bits } => write!(
                f,
                "memblock: physical address width of {bits} bits is not supported; use 32..=52 (CPUID 0x80000008 EAX[7:0])"
            ),
            MemblockError::NoUsableMemory => write!(
                f,
                "memblock: the firmware map has no whole page of usable RAM; check the bootloader's memory map"
            ),
            MemblockError::BeyondPhysAddrWidth { base, size, phys_addr_bits } => write!(
                f,
                "memblock: range [{base:#x}, +{size:#x}) ends past the {phys_addr_bits}-bit physical address width; clip it to the CPU's limit"
            ),
            MemblockError::RangeOverflow { base, size } => write!(
                f,
                "memblock: range [{base:#x}, +{size:#x}) overflows 64 bits; the caller passed a corrupt size"
            ),
            MemblockError::InvalidNode { nid } => write!(
                f,
                "memblock: node {nid} exceeds the {MAX_NUMNODES} nodes struct page flags can encode; renumber SRAT proximity domains densely"
            ),
            MemblockError::AffinityOverlap { start, end, first_nid, second_nid } => write!(
                f,
                "memblock: SRAT assigns [mem {start:#018x}-{:#018x}] to both node {first_nid} and node {second_nid}; the ACPI SRAT is inconsistent",
                end.saturating_sub(1)
            ),
            MemblockError::BadAlign { align } => write!(
                f,
                "memblock: allocation alignment {align:#x} is not a power of two"
            ),
            MemblockError::ZeroSize => write!(f, "memblock: refusing a zero-byte allocation"),
            MemblockError::AllocFailed { size, align, nid } => {
                write!(f, "memblock: no free range of {size:#x} bytes aligned to {align:#x}")?;
                match nid {
                    Some(nid) => write!(f, " on node {nid} or any other node")?,
                    None => write!(f, " on any node")?,
                }
                write!(f, "; reserve less early memory or boot with more RAM")
            }
        }
    }
}

/// Limits applied while building and editing memblock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemblockConfig {
    /// CPU physical address width (CPUID 0x80000008 `EAX[7:0]`).
    pub phys_addr_bits: u32,
    /// Cap on regions per table.
    pub max_regions: usize,
}

impl Default for MemblockConfig {
    fn default() -> Self {
        Self {
            phys_addr_bits: DEFAULT_PHYS_ADDR_BITS,
            max_regions: DEFAULT_MAX_REGIONS,
        }
    }
}

/// What [`Memblock::from_firmware`] had to drop or resolve, so the kernel can
/// print it instead of losing it silently.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct FirmwareReport {
    /// Entries read.
    pub entries: usize,
    /// Entries of length 0.
    pub zero_length_entries: usize,
    /// Bytes covered by more than one entry (resolved to the least usable kind).
    pub overlap_bytes: u64,
    /// Bytes of any kind past the physical address width (or past 2^64).
    pub beyond_phys_bytes: u64,
    /// RAM bytes lost to rounding partial pages inward.
    pub unaligned_ram_bytes: u64,
    /// Bytes of memory not covered by any SRAT affinity entry (filled by
    /// [`Memblock::apply_affinity`]; they keep node 0).
    pub no_affinity_bytes: u64,
}

/// A sorted, disjoint, merged region table (Linux `struct memblock_type`).
#[derive(Clone, Debug)]
pub struct RegionTable {
    kind: TableKind,
    max_regions: usize,
    regions: Vec<MemblockRegion>,
}

impl RegionTable {
    fn new(kind: TableKind, max_regions: usize) -> Self {
        Self {
            kind,
            max_regions,
            regions: Vec::new(),
        }
    }

    /// The regions, ascending by base.
    pub fn regions(&self) -> &[MemblockRegion] {
        &self.regions
    }
    pub fn len(&self) -> usize {
        self.regions.len()
    }
    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }
    /// Sum of region sizes in bytes.
    pub fn total_bytes(&self) -> u64 {
        self.regions.iter().map(|r| r.size).sum()
    }
    /// Sum of region sizes in pages.
    pub fn total_pages(&self) -> u64 {
        self.total_bytes() >> PAGE_SHIFT
    }

    /// Index of the first region ending after byte `addr`.
    fn first_ending_after(&self, addr: u64) -> usize {
        self.regions.partition_point(|r| r.end() <= addr)
    }

    /// Index range of regions overlapping `[base, end)`.
    fn overlapping(&self, base: u64, end: u64) -> (usize, usize) {
        let first = self.first_ending_after(base);
        let last = first + self.regions[first..].partition_point(|r| r.base < end);
        (first, last)
    }

    /// Replace `regions[first..last]` by `replacement` (sorted, disjoint), merging
    /// with the untouched neighbours; fails without writing when the result
    /// would exceed the cap.
    fn splice(
        &mut self,
        first: usize,
        last: usize,
        replacement: Vec<MemblockRegion>,
    ) -> Result<(), MemblockError> {
        let lo = first.saturating_sub(1);
        let hi = (last + 1).min(self.regions.len());
        let mut merged: Vec<MemblockRegion> = Vec::new();
        merged
            .try_reserve(replacement.len() + 2)
            .map_err(|_| MemblockError::OutOfMemory { table: self.kind })?;
        let before = self.regions[lo..first].iter();
        let after = self.regions[last..hi].iter();
        for r in before.chain(replacement.iter()).chain(after) {
            if r.size == 0 {
                continue;
            }
            match merged.last_mut() {
                Some(prev) if prev.mergeable_with(r) => prev.size += r.size,
                _ => merged.push(*r),
            }
        }
        let needed = self.regions.len() - (hi - lo) + merged.len();
        if needed > self.max_regions {
            return Err(MemblockError::TooManyRegions {
                table: self.kind,
                needed,
                max_regions: self.max_regions,
            });
        }
        if needed > self.regions.len() {
            self.regions
                .try_reserve(needed - self.regions.len())
                .map_err(|_| MemblockError::OutOfMemory { table: self.kind })?;
        }
        replace_range(&mut self.regions, lo, hi, &merged);
        Ok(())
    }

    /// Add the parts of `[base, end)` not already in the table (existing
    /// regions keep their node and flags), as `memblock_add_range()` does.
    fn insert(
        &mut self,
        base: u64,
        end: u64,
        nid: NodeId,
        flags: RegionFlags,
    ) -> Result<(), MemblockError> {
        if base >= end {
            return Ok(());
        }
        let (first, last) = self.overlapping(base, end);
        let mut replacement = Vec::new();
        replacement
            .try_reserve(2 * (last - first) + 1)
            .map_err(|_| MemblockError::OutOfMemory { table: self.kind })?;
        let mut cursor = base;
        for r in &self.regions[first..last] {
            if r.base > cursor {
                replacement.push(MemblockRegion {
                    base: cursor,
                    size: r.base - cursor,
                    nid,
                    flags,
                });
            }
            replacement.push(*r);
            cursor = cursor.max(r.end());
        }
        if cursor < end {
            replacement.push(MemblockRegion {
                base: cursor,
                size: end - cursor,
                nid,
                flags,
            });
        }
        self.splice(first, last, replacement)
    }

    /// Rewrite the parts of regions inside `[base, end)` with `f` (`None`
    /// drops the part); parts outside are kept. This is Linux's
    /// `memblock_isolate_range()` followed by an edit of the isolated regions.
    fn rewrite_inside(
        &mut self,
        base: u64,
        end: u64,
        mut f: impl FnMut(MemblockRegion) -> Option<MemblockRegion>,
    ) -> Result<(), MemblockError> {
        if base >= end {
            return Ok(());
        }
        let (first, last) = self.overlapping(base, end);
        if first == last {
            return Ok(());
        }
        let mut replacement = Vec::new();
        replacement
            .try_reserve(last - first + 2)
            .map_err(|_| MemblockError::OutOfMemory { table: self.kind })?;
        for r in &self.regions[first..last] {
            if r.base < base {
                replacement.push(MemblockRegion {
                    size: base - r.base,
                    ..*r
                });
            }
            let in_base = r.base.max(base);
            let in_end = r.end().min(end);
            if let Some(piece) = f(MemblockRegion {
                base: in_base,
                size: in_end - in_base,
                ..*r
            }) {
                replacement.push(piece);
            }
            if r.end() > end {
                replacement.push(MemblockRegion {
                    base: end,
                    size: r.end() - end,
                    ..*r
                });
            }
        }
        self.splice(first, last, replacement)
    }

    /// Does any region overlap `[base, end)`?
    fn overlaps(&self, base: u64, end: u64) -> bool {
        let (first, last) = self.overlapping(base, end);
        first < last
    }
}

/// `v[lo..hi] = with`, moving the tail once: what `Vec::splice` does, in a
/// fraction of its code (memblock runs before memory is ready, where under
/// TCG each instruction run for the first time is a translation). Growing
/// needs the capacity reserved already.
fn replace_range(v: &mut Vec<MemblockRegion>, lo: usize, hi: usize, with: &[MemblockRegion]) {
    let old_len = v.len();
    let new_len = old_len - (hi - lo) + with.len();
    if new_len > old_len {
        // `with` is longer than the part it replaces, so not empty.
        v.resize(new_len, with[0]);
    }
    v.copy_within(hi..old_len, lo + with.len());
    v.truncate(new_len);
    v[lo..lo + with.len()].copy_from_slice(with);
}

/// The two memblock tables plus the address-width limit.
#[derive(Clone, Debug)]
pub struct Memblock {
    memory: RegionTable,
    reserved: RegionTable,
    phys_addr_bits: u32,
}

const fn page_round_down(addr: u64) -> u64 {
    addr & !(PAGE_SIZE - 1)
}

/// Round up, saturating at the last page boundary below 2^64.
const fn page_round_up(addr: u64) -> u64 {
    match addr.checked_add(PAGE_SIZE - 1) {
        Some(a) => a & !(PAGE_SIZE - 1),
        None => page_round_down(u64::MAX),
    }
}

impl Memblock {
    /// Empty tables.
    pub fn new(config: MemblockConfig) -> Result<Self, MemblockError> {
        if !(32..=52).contains(&config.phys_addr_bits) {
            return Err(MemblockError::BadPhysAddrBits {
                bits: config.phys_addr_bits,
            });
        }
        Ok(Self {
            memory: RegionTable::new(TableKind::Memory, config.max_regions),
            reserved: RegionTable::new(TableKind::Reserved, config.max_regions),
            phys_addr_bits: config.phys_addr_bits,
        })
    }

    /// Build both tables from an untrusted firmware map; see the module docs
    /// for the rules. All RAM starts on node 0 until
    /// [`apply_affinity`](Self::apply_affinity).
    pub fn from_firmware<R: FirmwareRegion>(
        map: impl IntoIterator<Item = R>,
        config: MemblockConfig,
    ) -> Result<(Self, FirmwareReport), MemblockError> {
        let mut mb = Self::new(config)?;
        let mut report = FirmwareReport::default();
        let events = boundary_events(map, mb.phys_limit_bytes(), &mut report)?;

        // Sweep over entry boundaries: +1/-1 per kind, the worst kind with a
        // non-zero count owns each elementary interval.
        let mut counts = [0usize; RegionKind::ALL.len()];
        let mut i = 0;
        // Current maximal run of RAM: [ram_start, ram_end) in bytes.
        let mut ram_run: Option<(u64, u64)> = None;
        while i < events.len() {
            let addr = events[i].0;
            while i < events.len() && events[i].0 == addr {
                let (_, kind, open) = events[i];
                if open {
                    counts[kind as usize] += 1;
                } else {
                    counts[kind as usize] -= 1;
                }
                i += 1;
            }
            let Some(&(next_addr, _, _)) = events.get(i) else {
                break;
            };
            let covering: usize = counts.iter().sum();
            if covering == 0 {
                mb.flush_ram_run(&mut ram_run, &mut report)?;
                continue;
            }
            if covering > 1 {
                report.overlap_bytes += next_addr - addr;
            }
            let worst = RegionKind::ALL[counts.iter().rposition(|&c| c > 0).unwrap_or(0)];
            if worst.is_ram() {
                // A live run always ends at `addr`: a gap or a non-RAM
                // interval flushed it, so RAM here extends it.
                ram_run = Some((ram_run.map_or(addr, |(start, _)| start), next_addr));
                if worst.is_reserved_ram() {
                    mb.reserved.insert(
                        page_round_down(addr),
                        page_round_up(next_addr),
                        NUMA_NO_NODE,
                        RegionFlags::NONE,
                    )?;
                }
            } else {
                mb.flush_ram_run(&mut ram_run, &mut report)?;
            }
        }
        mb.flush_ram_run(&mut ram_run, &mut report)?;
        if mb.memory.is_empty() {
            return Err(MemblockError::NoUsableMemory);
        }
        Ok((mb, report))
    }

    fn flush_ram_run(
        &mut self,
        run: &mut Option<(u64, u64)>,
        report: &mut FirmwareReport,
    ) -> Result<(), MemblockError> {
        if let Some((start, end)) = run.take() {
            let (base, top) = (page_round_up(start), page_round_down(end));
            if base < top {
                report.unaligned_ram_bytes += (base - start) + (end - top);
                self.memory.insert(base, top, 0, RegionFlags::NONE)?;
            } else {
                report.unaligned_ram_bytes += end - start;
            }
        }
        Ok(())
    }

    /// Split memory regions at SRAT boundaries and tag each piece with its
    /// node. Boundaries are rounded down to pages. Memory no entry covers
    /// keeps its node; its size goes into `report.no_affinity_bytes`.
    pub fn apply_affinity(
        &mut self,
        affinity: impl IntoIterator<Item = NodeAffinity>,
        report: &mut FirmwareReport,
    ) -> Result<(), MemblockError> {
        let mut entries: Vec<(u64, u64, NodeId)> = Vec::new();
        for a in affinity {
            if a.nid >= MAX_NUMNODES {
                return Err(MemblockError::InvalidNode { nid: a.nid });
            }
            let end = a.start.saturating_add(a.len_bytes);
            let (start, end) = (page_round_down(a.start), page_round_down(end));
            if start < end {
                entries
                    .try_reserve(1)
                    .map_err(|_| MemblockError::OutOfMemory {
                        table: TableKind::Memory,
                    })?;
                entries.push((start, end, a.nid));
            }
        }
        entries.sort_unstable();
        for pair in entries.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            if b.0 < a.1 && a.2 != b.2 {
                return Err(MemblockError::AffinityOverlap {
                    start: b.0,
                    end: a.1.min(b.1),
                    first_nid: a.2,
                    second_nid: b.2,
                });
            }
        }
        let before = self.memory.total_bytes();
        let mut covered = 0u64;
        let mut covered_to = 0u64;
        for &(start, end, nid) in &entries {
            // Count covered memory once even when same-node entries overlap.
            let start = start.max(covered_to);
            if start < end {
                covered += self.memory_bytes_in(start, end);
                covered_to = end;
            }
            self.memory
                .rewrite_inside(start, end, |r| Some(MemblockRegion { nid, ..r }))?;
        }
        report.no_affinity_bytes = before - covered;
        Ok(())
    }

    fn memory_bytes_in(&self, base: u64, end: u64) -> u64 {
        let (first, last) = self.memory.overlapping(base, end);
        self.memory.regions[first..last]
            .iter()
            .map(|r| r.end().min(end) - r.base.max(base))
            .sum()
    }

    /// One past the highest byte the CPU can address.
    pub fn phys_limit_bytes(&self) -> u64 {
        1u64 << self.phys_addr_bits
    }

    pub fn phys_addr_bits(&self) -> u32 {
        self.phys_addr_bits
    }

    fn checked_end(&self, base: u64, size: u64) -> Result<u64, MemblockError> {
        let end = base
            .checked_add(size)
            .ok_or(MemblockError::RangeOverflow { base, size })?;
        if end > self.phys_limit_bytes() {
            return Err(MemblockError::BeyondPhysAddrWidth {
                base,
                size,
                phys_addr_bits: self.phys_addr_bits,
            });
        }
        Ok(end)
    }

    /// `memblock_add_node(base, size, nid, MEMBLOCK_NONE)`: add RAM, rounded
    /// inward to pages. Memory already present keeps its node.
    pub fn add(&mut self, base: u64, size: u64, nid: NodeId) -> Result<(), MemblockError> {
        self.add_with_flags(base, size, nid, RegionFlags::NONE)
    }

    /// [`add`](Self::add) with region flags.
    pub fn add_with_flags(
        &mut self,
        base: u64,
        size: u64,
        nid: NodeId,
        flags: RegionFlags,
    ) -> Result<(), MemblockError> {
        let end = self.checked_end(base, size)?;
        if nid >= MAX_NUMNODES {
            return Err(MemblockError::InvalidNode { nid });
        }
        self.memory
            .insert(page_round_up(base), page_round_down(end), nid, flags)
    }

    /// `memblock_reserve(base, size)`, rounded outward to pages.
    pub fn reserve(&mut self, base: u64, size: u64) -> Result<(), MemblockError> {
        let end = self.checked_end(base, size)?;
        self.reserved.insert(
            page_round_down(base),
            page_round_up(end),
            NUMA_NO_NODE,
            RegionFlags::NONE,
        )
    }

    /// `memblock_remove(base, size)`: drop memory, rounded outward (any page
    /// the range touches stops being RAM).
    pub fn remove(&mut self, base: u64, size: u64) -> Result<(), MemblockError> {
        let end = self.checked_end(base, size)?;
        self.memory
            .rewrite_inside(page_round_down(base), page_round_up(end), |_| None)
    }

    /// `memblock_phys_free(base, size)`: drop a reservation. The tables are
    /// page granular, so this rounds outward exactly as [`reserve`](Self::reserve)
    /// and [`alloc`](Self::alloc) do: `free(p, n)` undoes `p = alloc(n, ..)`
    /// or `reserve(p, n)` for any `n`, as Linux's byte-granular tables do.
    /// (Two sub-page reservations sharing a page are one page here; freeing
    /// either releases it.)
    pub fn free(&mut self, base: u64, size: u64) -> Result<(), MemblockError> {
        let end = self.checked_end(base, size)?;
        self.reserved
            .rewrite_inside(page_round_down(base), page_round_up(end), |_| None)
    }

    /// `memblock_alloc_try_nid(size, align, 0, limit, nid)`: the highest free
    /// range that fits, on `nid` first (when given) and then on any node;
    /// the result is reserved. `size` rounds up to pages and `align` to at
    /// least a page. Returns the physical address.
    pub fn alloc(
        &mut self,
        size: u64,
        align: u64,
        nid: Option<NodeId>,
    ) -> Result<u64, MemblockError> {
        self.alloc_range(size, align, 0, self.phys_limit_bytes(), nid)
    }

    /// [`alloc`](Self::alloc) within bytes `[min_addr, max_addr)`
    /// (`memblock_alloc_range_nid()`).
    pub fn alloc_range(
        &mut self,
        size: u64,
        align: u64,
        min_addr: u64,
        max_addr: u64,
        nid: Option<NodeId>,
    ) -> Result<u64, MemblockError> {
        if size == 0 {
            return Err(MemblockError::ZeroSize);
        }
        if !align.is_power_of_two() && align != 0 {
            return Err(MemblockError::BadAlign { align });
        }
        let align = align.max(PAGE_SIZE);
        let size = page_round_up(size);
        let found = nid
            .and_then(|n| self.find_top_down(size, align, min_addr, max_addr, Some(n)))
            .or_else(|| self.find_top_down(size, align, min_addr, max_addr, None));
        let base = found.ok_or(MemblockError::AllocFailed { size, align, nid })?;
        self.reserve(base, size)?;
        Ok(base)
    }

    /// `memblock_find_in_range_node()` top-down: free ranges ascend, so the
    /// last fitting candidate is the highest. Like Linux it never hands out
    /// the first page (`start = max(start, PAGE_SIZE)`): address 0 reads as
    /// NULL to every caller.
    fn find_top_down(
        &self,
        size: u64,
        align: u64,
        min_addr: u64,
        max_addr: u64,
        nid: Option<NodeId>,
    ) -> Option<u64> {
        let min_addr = min_addr.max(PAGE_SIZE);
        let mut best = None;
        for (pfns, _) in self.free_ranges(nid) {
            let lo = (pfns.start << PAGE_SHIFT).max(min_addr);
            let hi = (pfns.end << PAGE_SHIFT).min(max_addr);
            if hi < lo || hi - lo < size {
                continue;
            }
            let candidate = (hi - size) & !(align - 1);
            if candidate >= lo {
                best = Some(candidate);
            }
        }
        best
    }

    /// The `memory` table.
    pub fn memory(&self) -> &RegionTable {
        &self.memory
    }
    /// The `reserved` table.
    pub fn reserved(&self) -> &RegionTable {
        &self.reserved
    }

    /// Is any byte of `[base, base + size)` reserved?
    pub fn is_region_reserved(&self, base: u64, size: u64) -> bool {
        self.reserved.overlaps(base, base.saturating_add(size))
    }

    /// Lowest present PFN (`memblock_start_of_DRAM() >> PAGE_SHIFT`).
    pub fn min_pfn(&self) -> Option<Pfn> {
        self.memory.regions.first().map(|r| r.pfns().start)
    }
    /// One past the highest present PFN (Linux `max_pfn`).
    pub fn max_pfn(&self) -> Option<Pfn> {
        self.memory.regions.last().map(|r| r.pfns().end)
    }

    /// Node ids with memory, ascending.
    pub fn node_ids(&self) -> Vec<NodeId> {
        let mut nids: Vec<NodeId> = self.memory.regions.iter().map(|r| r.nid).collect();
        nids.sort_unstable();
        nids.dedup();
        nids
    }

    /// `[lowest, highest)` PFN of node `nid`'s memory (`get_pfn_range_for_nid()`).
    pub fn node_span(&self, nid: NodeId) -> Option<PfnRange> {
        let mut it = self.memory.regions.iter().filter(|r| r.nid == nid);
        let first = it.next()?;
        let last = it.next_back().unwrap_or(first);
        Some(PfnRange::new(first.pfns().start, last.pfns().end))
    }
}

/// Entry boundaries of the firmware map for the sweep in
/// [`Memblock::from_firmware`], sorted by address: `(addr, kind, opens)`.
/// Entries are clipped to `limit_bytes` (the physical address width);
/// empty entries and what lies beyond the limit are only counted in `report`.
fn boundary_events<R: FirmwareRegion>(
    map: impl IntoIterator<Item = R>,
    limit_bytes: u64,
    report: &mut FirmwareReport,
) -> Result<Vec<(u64, u8, bool)>, MemblockError> {
    let mut events: Vec<(u64, u8, bool)> = Vec::new();
    for entry in map {
        report.entries += 1;
        let (start, len) = (entry.start(), entry.len());
        if len == 0 {
            report.zero_length_entries += 1;
            continue;
        }
        let end_unclipped = start.checked_add(len);
        let end = end_unclipped.unwrap_or(u64::MAX).min(limit_bytes);
        let beyond = match end_unclipped {
            Some(e) => e - end.max(start).min(e),
            // Saturated at 2^64: count what is representable.
            None => u64::MAX - end.max(start) + 1,
        };
        report.beyond_phys_bytes = report.beyond_phys_bytes.saturating_add(beyond);
        if start >= end {
            continue;
        }
        events
            .try_reserve(2)
            .map_err(|_| MemblockError::OutOfMemory {
                table: TableKind::Memory,
            })?;
        let kind = entry.kind() as u8;
        events.push((start, kind, true));
        events.push((end, kind, false));
    }
    events.sort_unstable_by_key(|e| e.0);
    Ok(events)
}

#[cfg(test)]
#[path = "memblock_tests.rs"]
mod tests;
