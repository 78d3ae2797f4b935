//! HVO (`hugetlb_free_vmemmap=on`) for the 2 MiB pages, applied after
//! they are taken from the page allocator and written as compound pages,
//! as Linux 6.1–6.12 apply it (mm/hugetlb_vmemmap.c,
//! `hugetlb_vmemmap_optimize` → `vmemmap_remap_free`): the 2 MiB
//! vmemmap mapping holding a page's struct pages is split into a 4 KiB
//! page table (`vmemmap_split_pmd`), every vmemmap base page of the huge
//! page after the first is remapped read-only onto the first (the kept,
//! "reuse" page), and the base pages no longer mapped go back to the page
//! allocator. A tail beyond the kept page then reads as the struct page at
//! the same offset of the kept page, as with the 1 GiB pages ([`super::hvo`]).
//!
//! A 2 MiB page's vmemmap is 512 struct pages: 32 KiB at 64 bytes (8 base
//! pages, 7 freed), 16 KiB at 32 (4, 3 freed), 4 KiB at 8 (one page:
//! nothing to free, so nothing is done). It is aligned to its own size, so
//! it never crosses a 2 MiB vmemmap mapping; several huge pages share one
//! mapping (64 at 64 bytes), which is split once.
//!
//! This module only plans: which mappings to split, which 4 KiB entries
//! map what, which frames are freed; the kernel writes the tables.

use alloc::vec::Vec;
use core::ops::Range;

use super::hvo::KEPT_BYTES;
use crate::sections::{Vmemmap, VMEMMAP_HUGE_PAGE_BYTES};
use crate::{Pfn, PfnRange, PAGE_SHIFT, PAGE_SIZE};

/// Base pages of a 2 MiB page.
pub const NR_PAGES: u64 = 512;

/// Vmemmap base pages holding one 2 MiB page's struct pages: 8, 4, 1.
pub const fn vmemmap_pages(page_bytes: u64) -> u64 {
    NR_PAGES * page_bytes / PAGE_SIZE
}

/// Vmemmap base pages HVO frees per 2 MiB page: all but the kept one.
pub const fn freed_pages(page_bytes: u64) -> u64 {
    vmemmap_pages(page_bytes) - KEPT_BYTES / PAGE_SIZE
}

/// Vmemmap bytes HVO frees per 2 MiB page (Linux's "28 KiB vmemmap can be
/// freed for a 2.00 MiB page" at 64 bytes).
pub const fn freed_bytes(page_bytes: u64) -> u64 {
    freed_pages(page_bytes) * PAGE_SIZE
}

/// One 2 MiB page's remapping: vmemmap addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageRemap {
    pub head: Pfn,
    /// The kept vmemmap page: the head and the first tails, left as it is.
    pub kept: u64,
    /// The vmemmap base pages remapped read-only onto `kept`, 4 KiB apart.
    pub tails: Range<u64>,
    /// The 2 MiB vmemmap mapping all of them lie in.
    pub split: u64,
}

impl PageRemap {
    /// The 4 KiB vmemmap pages remapped onto the kept page.
    pub fn tail_pages(&self) -> impl Iterator<Item = u64> {
        self.tails.clone().step_by(PAGE_SIZE as usize)
    }
}

/// What HVO does to a set of 2 MiB pages.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The 2 MiB vmemmap mappings to split, ascending, each once.
    pub splits: Vec<u64>,
    /// Per huge page, ascending.
    pub pages: Vec<PageRemap>,
}

/// The plan for the 2 MiB pages headed at `heads` (ascending, each
/// 512-aligned) with struct pages of `page_bytes` in `vmemmap`: empty when
/// a page's vmemmap is one base page (8 bytes).
pub fn plan(vmemmap: &Vmemmap, heads: &[Pfn], page_bytes: u64) -> Plan {
    let mut out = Plan::default();
    if freed_pages(page_bytes) == 0 {
        return out;
    }
    for &head in heads {
        debug_assert!(
            head.is_multiple_of(NR_PAGES),
            "{head:#x} is not a 2 MiB page"
        );
        let Some(kept) = vmemmap.page_addr(head, page_bytes) else {
            continue;
        };
        let split = kept & !(VMEMMAP_HUGE_PAGE_BYTES - 1);
        let end = kept + vmemmap_pages(page_bytes) * PAGE_SIZE;
        debug_assert!(end <= split + VMEMMAP_HUGE_PAGE_BYTES);
        if out.splits.last() != Some(&split) {
            out.splits.push(split);
        }
        out.pages.push(PageRemap {
            head,
            kept,
            tails: kept + KEPT_BYTES..end,
            split,
        });
    }
    out
}

/// The frame backing the vmemmap page at `virt` while the 2 MiB mapping
/// at `split` (holding it) maps physical `split_phys`.
pub fn frame_in(split: u64, split_phys: u64, virt: u64) -> u64 {
    split_phys + (virt - split)
}

/// The frames HVO frees, as ascending runs of PFNs, given the physical
/// address each split mapping mapped (`phys_of(split)`): every page's
/// tail pages, as they were backed before the remap.
pub fn freed_frames(plan: &Plan, phys_of: impl Fn(u64) -> u64) -> Vec<PfnRange> {
    let mut pages: Vec<PfnRange> = plan
        .pages
        .iter()
        .map(|p| {
            let first = frame_in(p.split, phys_of(p.split), p.tails.start) >> PAGE_SHIFT;
            PfnRange::new(first, first + ((p.tails.end - p.tails.start) >> PAGE_SHIFT))
        })
        .collect();
    pages.sort_unstable_by_key(|r| r.start);
    let mut runs: Vec<PfnRange> = Vec::with_capacity(pages.len());
    for r in pages {
        match runs.last_mut() {
            Some(last) if last.end == r.start => last.end = r.end,
            _ => runs.push(r),
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::collections::BTreeMap;
    use alloc::vec;

    const AREA: u64 = 0xffff_ea00_0000_0000;

    #[test]
    fn what_hvo_frees_at_each_size() {
        assert_eq!([64, 32, 8].map(vmemmap_pages), [8, 4, 1]);
        assert_eq!([64, 32, 8].map(freed_pages), [7, 3, 0]);
        assert_eq!(freed_bytes(64), 28 << 10, "Linux's 28 KiB");
        let area = Vmemmap::new(AREA).unwrap();
        assert_eq!(plan(&area, &[0x200, 0x400], 8), Plan::default());
    }

    /// Where a struct page is read from: the model of the page tables the
    /// plan leaves. `mapped`: each 2 MiB mapping's physical base; `remap`:
    /// the 4 KiB entries changed.
    fn read_from(mapped: &BTreeMap<u64, u64>, remap: &BTreeMap<u64, u64>, addr: u64) -> u64 {
        let page = addr & !(PAGE_SIZE - 1);
        let split = addr & !(VMEMMAP_HUGE_PAGE_BYTES - 1);
        match remap.get(&page) {
            Some(&target) => {
                let t_split = target & !(VMEMMAP_HUGE_PAGE_BYTES - 1);
                frame_in(t_split, mapped[&t_split], target) + (addr - page)
            }
            None => frame_in(split, mapped[&split], addr),
        }
    }

    /// Against a brute-force model, for every struct page of every huge
    /// page: a struct page in the kept page reads its own memory; any
    /// other reads the kept page's struct page at the same offset within
    /// a base page; every frame the struct pages of the huge pages had
    /// beyond their kept pages is freed, and no other; each mapping
    /// holding one of them is split once.
    #[test]
    fn the_plan_matches_a_brute_force_model() {
        let area = Vmemmap::new(AREA).unwrap();
        for page_bytes in [64u64, 32] {
            // Pages sharing a mapping, one alone, one at a mapping's end.
            let per_mapping = VMEMMAP_HUGE_PAGE_BYTES / page_bytes;
            let heads: Vec<Pfn> = vec![
                0x200,
                0x400,
                0xa00,
                per_mapping * 3 + 0x200,
                per_mapping * 5 - NR_PAGES,
            ];
            let plan = plan(&area, &heads, page_bytes);
            // Each 2 MiB mapping's physical base, in no order.
            let mapped: BTreeMap<u64, u64> = (0..6u64)
                .map(|i| {
                    let phys = (1 << 30) + (i * 5 % 6) * VMEMMAP_HUGE_PAGE_BYTES;
                    (AREA + i * VMEMMAP_HUGE_PAGE_BYTES, phys)
                })
                .collect();
            let mut remap = BTreeMap::new();
            for p in &plan.pages {
                for t in p.tail_pages() {
                    remap.insert(t, p.kept);
                }
            }
            let want_splits: Vec<u64> = {
                let mut s: Vec<u64> = heads
                    .iter()
                    .map(|&h| (AREA + h * page_bytes) & !(VMEMMAP_HUGE_PAGE_BYTES - 1))
                    .collect();
                s.dedup();
                s
            };
            assert_eq!(plan.splits, want_splits, "{page_bytes} bytes");
            let mut freed_model = Vec::new();
            for &head in &heads {
                let kept_pages = PAGE_SIZE / page_bytes;
                for pfn in head..head + NR_PAGES {
                    let addr = AREA + pfn * page_bytes;
                    let alias = head + (pfn - head) % kept_pages;
                    let want = read_from(&mapped, &BTreeMap::new(), AREA + alias * page_bytes);
                    assert_eq!(read_from(&mapped, &remap, addr), want, "pfn {pfn:#x}");
                    if pfn - head >= kept_pages && addr.is_multiple_of(PAGE_SIZE) {
                        freed_model.push(read_from(&mapped, &BTreeMap::new(), addr) >> PAGE_SHIFT);
                    }
                }
            }
            freed_model.sort_unstable();
            let freed: Vec<Pfn> = freed_frames(&plan, |s| mapped[&s])
                .iter()
                .flat_map(|r| r.start..r.end)
                .collect();
            assert_eq!(freed, freed_model, "{page_bytes} bytes");
            assert_eq!(
                freed.len() as u64,
                heads.len() as u64 * freed_pages(page_bytes)
            );
        }
    }
}
