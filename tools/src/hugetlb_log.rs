//! The huge pages a boot reserved, read from its log the same way for
//! memboot and Linux (Linux's `report_hugepages()` lines, which memboot
//! prints too: [`memboot_contract::hugepage_forms::report`]), and which of
//! their struct pages Linux's memory init leaves to hugetlb.
//!
//! Linux since 6.9 (mm/hugetlb.c, `__alloc_bootmem_huge_page`) marks every
//! boot-time gigantic page's tails `MEMBLOCK_RSRV_NOINIT`, whether or not
//! HVO is on: `memmap_init_reserved_pages()` writes only the head, deferred
//! init walks free ranges only, and `gather_bootmem_prealloc()` writes the
//! tails, all of them, or with HVO the 63 its kept vmemmap page holds: in
//! `hugetlb_init`, an initcall after memory is ready, or, in the Debian
//! 6.12 and 7.3 builds the bench boots, from `page_alloc_init_late()`
//! (`hugetlb_bootmem_struct_page_init()`) before its `Memory:` line. What
//! `free_area_init()` writes before deferral still covers a tail that lies
//! there: every low zone, and the first section of each node's last zone
//! (`defer_init()`). So a tail is left to hugetlb when it lies at or above
//! its node's first deferred PFN ([`first_deferred_pfns`]). Linux 6.1 has
//! no such mark and writes every tail in memory init. Linux prints no
//! address of its huge pages; the peer's /init finds them in
//! /proc/kpageflags and prints `linux-peer: 1 GiB huge page at pfn 0xPFN`
//! (tests/linux-peer.sh).

use memboot_contract::hugepage_forms::report::{RegisteredLine, VmemmapLine};
use memboot_contract::hugepage_forms::{self, HugePageSize};

/// The first Linux series whose memory init leaves gigantic tails to
/// hugetlb (`MEMBLOCK_RSRV_NOINIT`, module doc).
pub const NOINIT_TAILS_SINCE: (u32, u32) = (6, 9);
/// `PAGES_PER_SECTION` on x86_64: `defer_init()` initialises this many
/// pages of a node's last zone before it defers.
const PAGES_PER_SECTION: u64 = 1 << 15;
/// What the peer's /init prints per 1 GiB page.
pub const PFN_LINE: &str = "linux-peer: 1 GiB huge page at pfn 0x";

/// One huge page size a boot reserved pages of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HugeSize {
    pub size: HugePageSize,
    /// `pre-allocated N pages`.
    pub pages: u64,
    /// HVO applied to this size's pages: asked on the command line, and
    /// the kernel frees vmemmap of the size (Linux: its `… KiB vmemmap can
    /// be freed` line above 0; memboot does not apply HVO).
    pub hvo: bool,
}

/// Every size a boot's messages (stamp-less, in order) report pages of,
/// each once (the first report), sizes with none left out; `hvo_asked`:
/// the command line's `hugetlb_free_vmemmap=` ([`hvo_on_command_line`]).
pub fn sizes<'m>(messages: impl Iterator<Item = &'m str>, hvo_asked: bool) -> Vec<HugeSize> {
    let mut out: Vec<HugeSize> = Vec::new();
    let mut freeable: Vec<VmemmapLine> = Vec::new();
    for msg in messages {
        if let Some(r) = RegisteredLine::parse(msg) {
            if r.pages > 0 && out.iter().all(|s| s.size != r.size) {
                out.push(HugeSize {
                    size: r.size,
                    pages: r.pages,
                    hvo: false,
                });
            }
        } else if let Some(v) = VmemmapLine::parse(msg) {
            freeable.push(v);
        }
    }
    for s in &mut out {
        s.hvo = hvo_asked
            && freeable
                .iter()
                .any(|v| v.size == s.size && v.freeable_kib > 0);
    }
    out
}

/// Does a kernel command line turn HVO on, as Linux reads it
/// (`hugetlb_free_vmemmap=`, the last one; [`hugepage_forms::plan`])?
pub fn hvo_on_command_line(cmdline: &str) -> bool {
    let machine = hugepage_forms::Machine {
        has_1g_pages: true,
        nodes: 1,
    };
    hugepage_forms::plan(&hugepage_forms::params_in(cmdline), machine).hvo
}

/// The first PFN of each 1 GiB page the peer's /init found, in order.
pub fn gigantic_pfns(text: &str) -> Vec<u64> {
    text.lines()
        .filter_map(|l| l.trim_end_matches('\r').strip_prefix(PFN_LINE))
        .filter_map(|hex| u64::from_str_radix(hex, 16).ok())
        .collect()
}

/// A PFN range, half-open.
pub type PfnRange = (u64, u64);

/// Each node's first deferred PFN as `defer_init()` picks it: in the
/// node's last zone (the one holding the node's end), the first PFN
/// aligned to a section after more than a section of that zone's memory
/// has been initialised; `None` for a node it never defers on. `zones`:
/// the zone ranges (`Zone ranges:`), `nodes`: each node's memory ranges
/// (`Early memory node ranges`), both ascending.
pub fn first_deferred_pfns(zones: &[PfnRange], nodes: &[Vec<PfnRange>]) -> Vec<Option<u64>> {
    nodes
        .iter()
        .map(|ranges| {
            let node_end = ranges.iter().map(|r| r.1).max()?;
            let zone = zones.iter().find(|z| z.0 < node_end && node_end <= z.1)?;
            let mut before = 0;
            for &(a, b) in ranges {
                let (a, b) = (a.max(zone.0), b.min(zone.1));
                if a >= b {
                    continue;
                }
                // The PFN p is the (p - a + before + 1)th initialised.
                let first = (a + PAGES_PER_SECTION).saturating_sub(before).max(a);
                let p = first.next_multiple_of(PAGES_PER_SECTION);
                if p < b {
                    return Some(p);
                }
                before += b - a;
            }
            None
        })
        .collect()
}

/// The tails of the 1 GiB pages at `pfns` that Linux ≥ 6.9's memory init
/// leaves to hugetlb: those at or above their node's first deferred PFN
/// (`nodes` and `deferred` as [`first_deferred_pfns`] takes and gives).
pub fn tails_left_to_hugetlb(
    pfns: &[u64],
    nodes: &[Vec<PfnRange>],
    deferred: &[Option<u64>],
) -> u64 {
    let pages = HugePageSize::Gib1.base_pages();
    pfns.iter()
        .map(|&head| {
            let node = nodes
                .iter()
                .position(|rs| rs.iter().any(|&(a, b)| a <= head && head < b));
            let Some(from) = node.and_then(|n| deferred.get(n).copied().flatten()) else {
                return 0;
            };
            let (tails, end) = (head + 1, head + pages);
            end.saturating_sub(from.max(tails))
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 18; // PFNs

    #[test]
    fn both_kernels_report_their_pages_alike() {
        // memboot, -m 16G `memmap=deferred hugepagesz=1G hugepages=13
        // hugetlb_free_vmemmap=on`: it plans HVO but writes every tail.
        let memboot = [
            "HugeTLB: command line asks for 13 pages of 1.00 GiB, vmemmap optimisation (HVO) on",
            "HugeTLB: registered 1.00 GiB page size, pre-allocated 13 pages",
            "hugetlb: 13 pages of 1.00 GiB, 3407872 struct pages written as compound pages in 58923 us",
        ];
        let gib = |pages, hvo| HugeSize {
            size: HugePageSize::Gib1,
            pages,
            hvo,
        };
        assert_eq!(sizes(memboot.into_iter(), false), vec![gib(13, false)]);
        // Linux 6.12, -m 4G `hugepagesz=1G hugepages=2`: one page fits.
        let linux = [
            "HugeTLB: allocating 2 of page size 1.00 GiB failed.  Only allocated 1 hugepages.",
            "HugeTLB: registered 1.00 GiB page size, pre-allocated 1 pages",
            "HugeTLB: 16380 KiB vmemmap can be freed for a 1.00 GiB page",
            "HugeTLB: registered 2.00 MiB page size, pre-allocated 0 pages",
            "HugeTLB: 28 KiB vmemmap can be freed for a 2.00 MiB page",
        ];
        assert_eq!(sizes(linux.into_iter(), false), vec![gib(1, false)]);
        assert_eq!(sizes(linux.into_iter(), true), vec![gib(1, true)]);
        // The 2 MiB size once it has pages: both, in the log's order.
        let both = [linux[1], linux[3].replace("0 pages", "512 pages").as_str()].map(String::from);
        let got = sizes(both.iter().map(String::as_str), false);
        assert_eq!(got.len(), 2);
        assert_eq!((got[1].size, got[1].pages), (HugePageSize::Mib2, 512));
    }

    #[test]
    fn hvo_is_read_as_linux_reads_the_command_line() {
        let line = "console=ttyS0 hugepagesz=1G hugepages=13 hugetlb_free_vmemmap=on";
        assert!(hvo_on_command_line(line));
        assert!(!hvo_on_command_line("hugepagesz=1G hugepages=13"));
        assert!(!hvo_on_command_line(
            "hugetlb_free_vmemmap=on hugetlb_free_vmemmap=off"
        ));
        assert!(hvo_on_command_line("hugetlb_free_vmemmap=y"));
    }

    #[test]
    fn one_node_defers_a_section_into_its_last_zone() {
        // -m 16G on i440fx: 0-3 GiB below the hole, 4-17 GiB above.
        let zones = [(1, 0x1000), (0x1000, 0x100000), (0x100000, 0x440000)];
        let nodes = vec![vec![(1, 0x9f), (0x100, 0xc0000), (0x100000, 0x440000)]];
        let deferred = first_deferred_pfns(&zones, &nodes);
        assert_eq!(deferred, vec![Some(0x100000 + PAGES_PER_SECTION)]);
        // The page at 4 GiB keeps its first section's tails written, the
        // one at 1 GiB (DMA32) all of them, one at 8 GiB none.
        let at_4g = tails_left_to_hugetlb(&[0x100000], &nodes, &deferred);
        assert_eq!(at_4g, GIB - PAGES_PER_SECTION);
        assert_eq!(tails_left_to_hugetlb(&[0x40000], &nodes, &deferred), 0);
        assert_eq!(
            tails_left_to_hugetlb(&[0x200000], &nodes, &deferred),
            GIB - 1
        );
    }

    #[test]
    fn a_node_without_a_whole_section_never_defers() {
        let zones = [(0, 0x100000), (0x100000, 0x200000)];
        let nodes = vec![vec![(0x100000, 0x104000)]];
        assert_eq!(first_deferred_pfns(&zones, &nodes), vec![None]);
        assert_eq!(tails_left_to_hugetlb(&[0x100000], &nodes, &[None]), 0);
    }

    #[test]
    fn deferral_counts_pages_across_the_zones_ranges() {
        // Half a section in a first range, then a range starting mid-way
        // through a section: the first aligned PFN once a section is done.
        let zones = [(0, 0x1_000_000)];
        let nodes = vec![vec![(0, 0x4000), (0x10_4000, 0x20_0000)]];
        // 0x4000 pages before; p - 0x104000 + 0x4000 + 1 > 0x8000 from
        // p = 0x108000, which is aligned.
        assert_eq!(first_deferred_pfns(&zones, &nodes), vec![Some(0x10_8000)]);
    }

    #[test]
    fn pfn_lines_of_the_peers_init() {
        let text = "linux-peer: /init started at uptime 6.81 s\r\n\
                    linux-peer: 1 GiB huge page at pfn 0x40000\r\n\
                    linux-peer: 1 GiB huge page at pfn 0x100000\n\
                    linux-peer: dmesg begin\n";
        assert_eq!(gigantic_pfns(text), vec![0x40000, 0x100000]);
    }
}
