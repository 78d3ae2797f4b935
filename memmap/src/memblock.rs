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

use crate::firmware::{FirmwareRegion, NodeAffinity, RegionKind};
use crate::memory_block::NodeMask;
use crate::page::MAX_NUMNODES;
pub use crate::region_table::{MemblockError, MemblockRegion, RegionFlags, RegionTable, TableKind};
use crate::{NodeId, Pfn, PfnRange, PAGE_SHIFT, PAGE_SIZE};

/// Node id of regions that belong to no node (reserved regions), Linux
/// `NUMA_NO_NODE`.
pub const NUMA_NO_NODE: NodeId = u32::MAX;

/// Linux `MAX_PHYSMEM_BITS` on x86_64 with 4-level paging: the default
/// physical address width.
pub(crate) const DEFAULT_PHYS_ADDR_BITS: u32 = 46;

/// Default per-table region cap; a 1 TiB machine's e820 map has tens of
/// entries, and SRAT splitting at most doubles that per node.
pub(crate) const DEFAULT_MAX_REGIONS: usize = 8192;

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
    pub(crate) entries: usize,
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
        self.memory.regions()[first..last]
            .iter()
            .map(|r| r.end().min(end) - r.base.max(base))
            .sum()
    }

    /// One past the highest byte the CPU can address.
    pub(crate) fn phys_limit_bytes(&self) -> u64 {
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

    /// `memblock_reserve()` then `memblock_reserved_mark_noinit()` over the
    /// whole range: reserved, and left alone by memmap init (rounded
    /// outward to pages). The range must not overlap a reservation.
    pub fn reserve_noinit(&mut self, base: u64, size: u64) -> Result<(), MemblockError> {
        let end = self.checked_end(base, size)?;
        self.reserved.insert(
            page_round_down(base),
            page_round_up(end),
            NUMA_NO_NODE,
            RegionFlags::RSRV_NOINIT,
        )
    }

    /// The reserved ranges marked `MEMBLOCK_RSRV_NOINIT`, ascending: memory
    /// whose struct pages memmap init leaves to their owner.
    pub fn noinit_ranges(&self) -> impl Iterator<Item = PfnRange> + '_ {
        self.reserved
            .regions()
            .iter()
            .filter(|r| r.flags == RegionFlags::RSRV_NOINIT)
            .map(|r| r.pfns())
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
    pub(crate) fn alloc_range(
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

    /// `memblock_find_in_range_node()` top-down: the free ranges of `nid`
    /// (or of all nodes) walked from the top, as Linux's
    /// `for_each_free_mem_range_reverse()`, and the first that fits taken:
    /// one allocation per node visits that node's top ranges, not every
    /// range of the machine. Like Linux it never hands out the first page
    /// (`start = max(start, PAGE_SIZE)`): address 0 reads as NULL to every
    /// caller.
    pub(crate) fn find_top_down(
        &self,
        size: u64,
        align: u64,
        min_addr: u64,
        max_addr: u64,
        nid: Option<NodeId>,
    ) -> Option<u64> {
        let min_addr = min_addr.max(PAGE_SIZE);
        let fit = |free: PfnRange| {
            let lo = (free.start << PAGE_SHIFT).max(min_addr);
            let hi = (free.end << PAGE_SHIFT).min(max_addr);
            if hi < lo || hi - lo < size {
                return None;
            }
            let candidate = (hi - size) & !(align - 1);
            (candidate >= lo).then_some(candidate)
        };
        let reserved = self.reserved.regions();
        let memory = self.memory.regions().iter().rev();
        for mem in memory.filter(|r| nid.is_none_or(|n| n == r.nid)) {
            let mem = mem.pfns();
            // The gaps between the reserved regions inside `mem`, from
            // the top: `end` is where the next gap down ends.
            let mut end = mem.end;
            let below_end = reserved.partition_point(|r| r.pfns().start < mem.end);
            for rsv in reserved[..below_end].iter().rev().map(|r| r.pfns()) {
                if rsv.end <= mem.start {
                    break;
                }
                if rsv.end < end {
                    if let Some(found) = fit(PfnRange::new(rsv.end, end)) {
                        return Some(found);
                    }
                }
                end = end.min(rsv.start);
            }
            if mem.start < end {
                if let Some(found) = fit(PfnRange::new(mem.start, end)) {
                    return Some(found);
                }
            }
        }
        None
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
    #[cfg(test)]
    pub(crate) fn is_region_reserved(&self, base: u64, size: u64) -> bool {
        self.reserved.overlaps(base, base.saturating_add(size))
    }

    /// Lowest present PFN (`memblock_start_of_DRAM() >> PAGE_SHIFT`).
    pub fn min_pfn(&self) -> Option<Pfn> {
        self.memory.regions().first().map(|r| r.pfns().start)
    }
    /// One past the highest present PFN (Linux `max_pfn`).
    pub fn max_pfn(&self) -> Option<Pfn> {
        self.memory.regions().last().map(|r| r.pfns().end)
    }

    /// Node ids with memory, ascending: a mask, not a sort (SRAT may number
    /// nodes in any address order, and a sort of a few dozen ids runs
    /// several hundred instructions of quicksort the boot runs nowhere
    /// else before memory is ready).
    pub fn node_ids(&self) -> Vec<NodeId> {
        let mut nids = NodeMask::default();
        for r in self.memory.regions() {
            nids.set(r.nid);
        }
        nids.iter().collect()
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
mod tests;
