//! Sparsemem sections and the vmemmap window.
//!
//! Physical memory is cut into 128 MiB sections (`SECTION_SIZE_BITS = 27`).
//! A section is *present* when any memblock memory touches it (Linux
//! `memblocks_present()` → `memory_present()` in mm/sparse.c); only present
//! sections get struct pages. With `CONFIG_SPARSEMEM_VMEMMAP` the struct page
//! of PFN `p` lives at `vmemmap + p * 64` (`__pfn_to_page()`), so one section
//! needs exactly 2 MiB of memmap, one huge page (with 32-byte struct pages,
//! half of one: two sections share it), which
//! `vmemmap_populate_hugepages()` (arch/x86/mm/init_64.c) backs with memory
//! from the section's own node (`sparse_init_nid()` allocates per node) so a
//! node's struct pages are local to it. A section's node is that of the
//! lowest memory region touching it, as the first `memory_present()` call
//! sets it.
//!
//! [`vmemmap_backing_ranges`] turns that into the list the kernel maps: runs
//! of consecutive present sections of one node, each a virtual range of the
//! vmemmap window. Holes between present sections cost no memmap.

use alloc::vec::Vec;
use core::ops::Range;

use crate::memblock::Memblock;
use crate::{pfn_to_section_nr, section_nr_to_pfn, NodeId, Pfn, PfnRange, PAGES_PER_SECTION};

/// Linux x86_64 `VMEMMAP_START` with 4-level paging and no KASLR.
pub(crate) const VMEMMAP_START: u64 = 0xffff_ea00_0000_0000;
/// The vmemmap's mapping unit: one x86_64 huge page (2 MiB), one
/// section's memmap at 64 bytes per struct page, two sections' at 32.
pub const VMEMMAP_HUGE_PAGE_BYTES: u64 = 2 << 20;

/// Bytes of memmap per section for struct pages of `page_bytes` each.
pub const fn section_memmap_bytes(page_bytes: u64) -> u64 {
    PAGES_PER_SECTION * page_bytes
}

/// A present section and the node its memmap belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PresentSection {
    pub section_nr: u64,
    pub nid: NodeId,
}

/// Present sections, ascending, each once, with the node of the lowest
/// memory region touching it.
pub fn present_sections(mb: &Memblock) -> impl Iterator<Item = PresentSection> + '_ {
    let mut next_unseen = 0u64;
    mb.mem_pfn_ranges(None).flat_map(move |(pfns, nid)| {
        let first = pfn_to_section_nr(pfns.start).max(next_unseen);
        let end = pfn_to_section_nr(pfns.end - 1) + 1;
        next_unseen = next_unseen.max(end);
        (first..end).map(move |section_nr| PresentSection { section_nr, nid })
    })
}

/// Present sections as merged PFN ranges (section aligned), ascending.
/// Unlike [`present_sections`] this is O(regions) even for huge maps.
pub(crate) fn present_section_ranges(mb: &Memblock) -> impl Iterator<Item = PfnRange> + '_ {
    let mut ranges = mb.mem_pfn_ranges(None).map(|(pfns, _)| {
        PfnRange::new(
            section_nr_to_pfn(pfn_to_section_nr(pfns.start)),
            section_nr_to_pfn(pfn_to_section_nr(pfns.end - 1) + 1),
        )
    });
    let mut pending = ranges.next();
    core::iter::from_fn(move || {
        let mut cur = pending.take()?;
        for next in ranges.by_ref() {
            if next.start <= cur.end {
                cur.end = cur.end.max(next.end);
            } else {
                pending = Some(next);
                break;
            }
        }
        Some(cur)
    })
}

/// Is section `section_nr` present? (binary search)
#[cfg(test)]
pub(crate) fn section_present(mb: &Memblock, section_nr: u64) -> bool {
    let start = section_nr_to_pfn(section_nr);
    mb.next_valid_pfn(start)
        .is_some_and(|pfn| pfn < start + PAGES_PER_SECTION)
}

/// The vmemmap window: where struct pages live in the kernel's address space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vmemmap {
    base: u64,
}

impl Vmemmap {
    /// A window at `base` (must be 2 MiB aligned so the memmap maps with
    /// whole huge pages; returns `None` otherwise).
    pub const fn new(base: u64) -> Option<Self> {
        if base.is_multiple_of(VMEMMAP_HUGE_PAGE_BYTES) {
            Some(Self { base })
        } else {
            None
        }
    }
    /// Linux's default window.
    pub const fn linux_default() -> Self {
        Self {
            base: VMEMMAP_START,
        }
    }
    pub const fn base(&self) -> u64 {
        self.base
    }
    /// Virtual address of `pfn`'s struct page of `page_bytes`
    /// (`pfn_to_page`); `None` if it would wrap the address space.
    pub const fn page_addr(&self, pfn: Pfn, page_bytes: u64) -> Option<u64> {
        match pfn.checked_mul(page_bytes) {
            Some(off) => self.base.checked_add(off),
            None => None,
        }
    }
    /// PFN whose struct page contains virtual address `addr` (`page_to_pfn`).
    #[cfg(test)]
    pub(crate) const fn pfn_of_addr(&self, addr: u64, page_bytes: u64) -> Option<Pfn> {
        if addr < self.base {
            None
        } else {
            Some((addr - self.base) / page_bytes)
        }
    }
}

/// A run of consecutive present sections of one node and the vmemmap
/// virtual range `[virt_start, virt_end)` their struct pages occupy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmemmapRange {
    pub nid: NodeId,
    pub section_nrs: Range<u64>,
    pub virt_start: u64,
    pub virt_end: u64,
}

impl VmemmapRange {
    pub fn bytes(&self) -> u64 {
        self.virt_end - self.virt_start
    }
    pub fn nr_sections(&self) -> u64 {
        self.section_nrs.end - self.section_nrs.start
    }
}

/// Backing the kernel must map before memmap init: one entry per run of
/// present sections on one node, for struct pages of `page_bytes`. Back
/// each with memory of `nid`.
pub fn vmemmap_backing_ranges(
    mb: &Memblock,
    vmemmap: &Vmemmap,
    page_bytes: u64,
) -> Vec<VmemmapRange> {
    let section_bytes = section_memmap_bytes(page_bytes);
    // Per memory region, the sections it starts (a section belongs to the
    // node of the lowest region touching it, as in `present_sections`):
    // O(regions), not O(sections).
    let mut out: Vec<VmemmapRange> = Vec::new();
    let mut next_unseen = 0u64;
    for (pfns, nid) in mb.mem_pfn_ranges(None) {
        let first = pfn_to_section_nr(pfns.start).max(next_unseen);
        let end = pfn_to_section_nr(pfns.end - 1) + 1;
        next_unseen = next_unseen.max(end);
        if first >= end {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.nid == nid && last.section_nrs.end == first => {
                last.section_nrs.end = end;
                last.virt_end = vmemmap.base + end * section_bytes;
            }
            _ => out.push(VmemmapRange {
                nid,
                section_nrs: first..end,
                virt_start: vmemmap.base + first * section_bytes,
                virt_end: vmemmap.base + end * section_bytes,
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memblock::MemblockConfig;

    const MIB: u64 = 1 << 20;

    #[test]
    fn sections_and_backing_skip_holes_and_follow_nodes() {
        let mut mb = Memblock::new(MemblockConfig::default()).unwrap();
        mb.add(MIB, 200 * MIB, 0).unwrap(); // sections 0, 1
        mb.add(250 * MIB, 10 * MIB, 1).unwrap(); // section 1 (node 0 owns it), 2
        mb.add(1024 * MIB, 128 * MIB, 1).unwrap(); // section 8
        let secs: Vec<_> = present_sections(&mb)
            .map(|s| (s.section_nr, s.nid))
            .collect();
        assert_eq!(secs, [(0, 0), (1, 0), (2, 1), (8, 1)]);
        let ranges: Vec<_> = present_section_ranges(&mb)
            .map(|r| (r.start, r.end))
            .collect();
        assert_eq!(
            ranges,
            [
                (0, 3 * PAGES_PER_SECTION),
                (8 * PAGES_PER_SECTION, 9 * PAGES_PER_SECTION)
            ]
        );
        assert!(section_present(&mb, 2) && !section_present(&mb, 3) && section_present(&mb, 8));
        let vm = Vmemmap::linux_default();
        let back = vmemmap_backing_ranges(&mb, &vm, 64);
        assert_eq!(back.len(), 3);
        assert_eq!(
            (back[0].nid, back[0].section_nrs.clone(), back[0].bytes()),
            (0, 0..2, 4 * MIB)
        );
        assert_eq!((back[1].nid, back[1].section_nrs.clone()), (1, 2..3));
        assert_eq!(back[2].virt_start, VMEMMAP_START + 8 * 2 * MIB);
        let total: u64 = back.iter().map(|r| r.bytes()).sum();
        assert_eq!(total, 4 * 2 * MIB, "the hole costs no memmap");
        // 32-byte struct pages: the same runs, half the bytes each.
        let half = vmemmap_backing_ranges(&mb, &vm, 32);
        assert_eq!(half.len(), 3);
        assert_eq!(half[0].bytes(), 2 * MIB);
        assert_eq!(half[2].virt_start, VMEMMAP_START + 8 * MIB);
    }

    #[test]
    fn vmemmap_addresses() {
        let vm = Vmemmap::linux_default();
        assert_eq!(vm.page_addr(0, 64), Some(VMEMMAP_START));
        assert_eq!(
            vm.page_addr(0x10_0000, 64),
            Some(VMEMMAP_START + 0x10_0000 * 64)
        );
        assert_eq!(
            vm.page_addr(0x10_0000, 32),
            Some(VMEMMAP_START + 0x10_0000 * 32)
        );
        assert_eq!(vm.pfn_of_addr(VMEMMAP_START + 64 * 77 + 63, 64), Some(77));
        assert_eq!(vm.page_addr(u64::MAX / 2, 64), None);
        assert!(Vmemmap::new(VMEMMAP_START + 4096).is_none());
    }
}
