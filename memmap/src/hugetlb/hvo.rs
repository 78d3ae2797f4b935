//! HVO, the HugeTLB vmemmap optimisation (`hugetlb_free_vmemmap=on`), for
//! the 1 GiB pages, laid out as Linux 6.1–6.12 lay it out
//! (mm/hugetlb_vmemmap.c): of a huge page's vmemmap (its 262144 struct
//! pages: 16 MiB at 64 bytes, 8 MiB at 32, 2 MiB at 8) only the first
//! base page is backed, read-write; every other base page of it is a
//! read-only mapping of that same page, so a tail struct page beyond it
//! reads as the struct page at the same offset in the first page — at a
//! page boundary, a head (Linux's "fake head", `page_fixed_fake_head`).
//!
//! The mapping is 4 KiB page-table entries where the rest of the vmemmap
//! has 2 MiB ones. A huge page's vmemmap is whole 2 MiB vmemmap pages at
//! every struct-page size (its PFN is 1 GiB-aligned), so each of them gets
//! a page table instead of a 2 MiB page: the first table maps entry 0 to
//! the kept page read-write and entries 1–511 to it read-only; every other
//! 2 MiB of the huge page's vmemmap maps all 512 entries to it read-only,
//! and those tables are all alike, so they share one. Per huge page: the
//! kept page and one or two tables ([`frames_per_page`]), 8–12 KiB where
//! the struct pages would take 2–16 MiB; all of a node's are one memblock
//! block ([`reserve_frames`]): on a host that backs guest RAM with 2 MiB
//! pages, one touch backs many of them, not one host page per huge page.
//!
//! This module only plans: which sections HVO maps, which frames hold what
//! and what each entry maps; the kernel writes the tables.

use alloc::vec::Vec;
use core::ops::Range;

use super::{HugePage, Reservation, GIGANTIC_NR_PAGES};
use crate::memblock::{Memblock, MemblockError};
use crate::sections::{section_memmap_bytes, Vmemmap, VmemmapRange, VMEMMAP_HUGE_PAGE_BYTES};
use crate::{pfn_to_section_nr, NodeId, PAGE_SIZE};

/// What HVO keeps of a huge page's vmemmap: one base page (Linux's
/// `HUGETLB_VMEMMAP_RESERVE_SIZE`).
pub const KEPT_BYTES: u64 = PAGE_SIZE;

/// Entries in a page table.
pub const ENTRIES_PER_TABLE: usize = 512;

/// The struct pages in the kept page: the head and the first tails, which
/// are the only ones written (63 tails at 64 bytes).
pub const fn kept_struct_pages(page_bytes: u64) -> u64 {
    KEPT_BYTES / page_bytes
}

/// The 2 MiB vmemmap pages one 1 GiB page's struct pages span: 8, 4, 1.
pub const fn vmemmap_2mib_pages(page_bytes: u64) -> u64 {
    GIGANTIC_NR_PAGES * page_bytes / VMEMMAP_HUGE_PAGE_BYTES
}

/// Base pages HVO needs per huge page: the kept page, the first table and,
/// when the vmemmap spans more than one 2 MiB page, the shared one.
pub const fn frames_per_page(page_bytes: u64) -> u64 {
    2 + (vmemmap_2mib_pages(page_bytes) > 1) as u64
}

/// Vmemmap bytes HVO leaves unbacked per huge page.
pub const fn bytes_not_backed(page_bytes: u64) -> u64 {
    GIGANTIC_NR_PAGES * page_bytes - frames_per_page(page_bytes) * PAGE_SIZE
}

/// One huge page's HVO frames (physical addresses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HvoPage {
    pub huge: HugePage,
    /// The kept vmemmap page: the head and the first tails.
    pub kept: u64,
    /// The page table of the first 2 MiB of the huge page's vmemmap.
    pub first_table: u64,
    /// The table every other 2 MiB of it shares (`None` at 8 bytes, where
    /// the vmemmap is one 2 MiB page).
    pub rest_table: Option<u64>,
}

impl HvoPage {
    /// The table that maps the `i`-th 2 MiB of the huge page's vmemmap.
    pub fn table(&self, i: u64) -> Option<u64> {
        if i == 0 {
            Some(self.first_table)
        } else {
            self.rest_table
        }
    }
}

/// What entry `index` of a huge page's table maps: the kept page, and
/// whether writable (entry 0 of the first table only).
pub fn entry(first_table: bool, index: usize, kept: u64) -> (u64, bool) {
    (kept, first_table && index == 0)
}

/// The sections of one huge page, whose vmemmap HVO maps: the normal
/// vmemmap leaves them out.
pub fn page_sections(page: &HugePage) -> Range<u64> {
    let pfns = page.pfns();
    pfn_to_section_nr(pfns.start)..pfn_to_section_nr(pfns.end)
}

/// `ranges` (ascending runs of present sections, as
/// [`crate::sections::vmemmap_backing_ranges`] gives them) without the sections of
/// `left_out` (ascending, disjoint: [`page_sections`] of each page), for struct pages of
/// `page_bytes` in `vmemmap`.
pub fn without_sections(
    ranges: &[VmemmapRange],
    left_out: &[Range<u64>],
    vmemmap: &Vmemmap,
    page_bytes: u64,
) -> Vec<VmemmapRange> {
    let section_bytes = section_memmap_bytes(page_bytes);
    let piece = |nid, section_nrs: Range<u64>| VmemmapRange {
        nid,
        virt_start: vmemmap.base() + section_nrs.start * section_bytes,
        virt_end: vmemmap.base() + section_nrs.end * section_bytes,
        section_nrs,
    };
    let mut out = Vec::with_capacity(ranges.len());
    for r in ranges {
        let mut start = r.section_nrs.start;
        let from = left_out.partition_point(|l| l.end <= start);
        for l in left_out[from..]
            .iter()
            .take_while(|l| l.start < r.section_nrs.end)
        {
            if l.start > start {
                out.push(piece(r.nid, start..l.start));
            }
            start = start.max(l.end);
        }
        if start < r.section_nrs.end {
            out.push(piece(r.nid, start..r.section_nrs.end));
        }
    }
    out
}

/// Reserve the frames HVO needs for `reservation`'s pages at struct pages
/// of `page_bytes`: one block per node, on that node (node-local as the
/// vmemmap is), carved in page order.
// Out of line: it opens the profile's `vmemmap` phase.
#[inline(never)]
pub fn reserve_frames(
    mb: &mut Memblock,
    reservation: &Reservation,
    page_bytes: u64,
) -> Result<Vec<HvoPage>, MemblockError> {
    let per_page = frames_per_page(page_bytes);
    let mut nodes: Vec<NodeId> = reservation.pages.iter().map(|p| p.nid).collect();
    nodes.sort_unstable();
    nodes.dedup();
    let mut out = Vec::with_capacity(reservation.pages.len());
    for nid in nodes {
        let pages: Vec<&HugePage> = reservation.pages.iter().filter(|p| p.nid == nid).collect();
        let bytes = pages.len() as u64 * per_page * PAGE_SIZE;
        let base = mb.alloc(bytes, PAGE_SIZE, Some(nid))?;
        for (i, huge) in pages.into_iter().enumerate() {
            let at = base + i as u64 * per_page * PAGE_SIZE;
            out.push(HvoPage {
                huge: *huge,
                kept: at,
                first_table: at + PAGE_SIZE,
                rest_table: (per_page == 3).then_some(at + 2 * PAGE_SIZE),
            });
        }
    }
    out.sort_unstable_by_key(|p| p.huge.pfn);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Linux prints "16380 KiB vmemmap can be freed for a 1.00 GiB page"
    /// at 64 bytes: 16 MiB less the kept page. memboot also leaves out
    /// the vmemmap its page tables take, which Linux's tables do too but
    /// its line does not count.
    #[test]
    fn what_hvo_keeps_at_each_size() {
        assert_eq!(kept_struct_pages(64), 64);
        assert_eq!(kept_struct_pages(8), 512);
        assert_eq!(
            [64, 32, 8].map(vmemmap_2mib_pages),
            [8, 4, 1],
            "16, 8 and 2 MiB of vmemmap"
        );
        assert_eq!([64, 32, 8].map(frames_per_page), [3, 3, 2]);
        // Linux's line counts what HVO frees of the vmemmap; memboot's
        // figure also leaves out the two tables it adds.
        assert_eq!(bytes_not_backed(64) + 2 * PAGE_SIZE, 16380 << 10);
        assert_eq!(bytes_not_backed(8), (2 << 20) - 2 * PAGE_SIZE);
    }

    /// Each node's frames are one block on that node, a huge page's three
    /// (two at 8 bytes) side by side, in page order; the sections left to
    /// HVO are each page's eight.
    #[test]
    fn frames_are_packed_per_node() {
        use crate::hugetlb::{reserve_gigantic, Request};
        use crate::memblock::MemblockConfig;
        const GIB: u64 = 1 << 30;
        let mut mb = Memblock::new(MemblockConfig::default()).unwrap();
        mb.add(0, 3 * GIB, 0).unwrap();
        mb.add(4 * GIB, GIB, 0).unwrap();
        mb.add(5 * GIB, 4 * GIB, 1).unwrap();
        mb.reserve(0, 1 << 20).unwrap();
        let r = reserve_gigantic(&mut mb, &Request::Total(4)).unwrap();
        for (bytes, per_page) in [(64, 3), (8, 2)] {
            let frames = reserve_frames(&mut mb.clone(), &r, bytes).unwrap();
            assert_eq!(frames.len(), 4);
            for pair in frames.windows(2) {
                let (a, b) = (pair[0], pair[1]);
                if a.huge.nid == b.huge.nid {
                    assert_eq!(b.kept, a.kept + per_page * PAGE_SIZE, "{a:?} {b:?}");
                }
            }
            for f in &frames {
                assert_eq!(mb.pfn_to_nid(f.kept >> 12), Some(f.huge.nid), "{f:?}");
                assert_eq!(f.first_table, f.kept + PAGE_SIZE);
                assert_eq!(f.rest_table.is_some(), per_page == 3);
            }
        }
        assert!(r
            .pages
            .iter()
            .all(|p| page_sections(p).end - page_sections(p).start == 8));
    }

    /// A run loses exactly the sections left out, against a brute-force
    /// set difference.
    #[test]
    fn ranges_lose_the_sections_left_out() {
        let vm = Vmemmap::linux_default();
        let r = |nid, a: u64, b: u64| VmemmapRange {
            nid,
            section_nrs: a..b,
            virt_start: vm.base() + a * (2 << 20),
            virt_end: vm.base() + b * (2 << 20),
        };
        let ranges = [r(0, 0, 24), r(0, 32, 48), r(1, 48, 72)];
        let left_out = [8..16, 40..48, 56..64, 64..72];
        let got = without_sections(&ranges, &left_out, &vm, 64);
        let want = [r(0, 0, 8), r(0, 16, 24), r(0, 32, 40), r(1, 48, 56)];
        assert_eq!(got, want);
        let kept = |rs: &[VmemmapRange]| -> Vec<u64> {
            rs.iter().flat_map(|r| r.section_nrs.clone()).collect()
        };
        let brute: Vec<u64> = kept(&ranges)
            .into_iter()
            .filter(|s| !left_out.iter().any(|l| l.contains(s)))
            .collect();
        assert_eq!(kept(&got), brute);
    }

    #[test]
    fn only_entry_0_of_the_first_table_is_writable() {
        let kept = 0x1234_5000;
        for first in [true, false] {
            for i in 0..ENTRIES_PER_TABLE {
                assert_eq!(entry(first, i, kept), (kept, first && i == 0));
            }
        }
    }
}
