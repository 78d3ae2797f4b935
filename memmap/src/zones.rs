//! Zones per node: spans, present pages, holes, and the dmesg lines Linux
//! prints about them.
//!
//! Mirrors mm/page_alloc.c (6.1): `calculate_node_totalpages()` /
//! `zone_spanned_pages_in_node()` / `zone_absent_pages_in_node()` for the
//! numbers, `free_area_init()` for "Zone ranges:" and "Early memory node
//! ranges", `free_area_init_core()` + `calc_memmap_size()` for "pages used
//! for memmap", and `memmap_init()` / `init_unavailable_range()` for the
//! holes: walking memory ranges in order, the gap before each zone-clipped
//! piece (from PFN 0) and the tail up to the end of the last section are
//! *unavailable ranges*. Their pages that lie in present sections get struct
//! pages (reserved), attributed to the zone and node of the piece that
//! follows the gap (the tail to the last node's highest populated zone), and
//! Linux prints one "On node N, zone Z: K pages in unavailable ranges" line
//! per gap. All strategies in `init` initialise exactly these pages.

use alloc::vec::Vec;
use core::fmt;

use crate::memblock::Memblock;
use crate::page::MAX_NUMNODES;
use crate::sections::present_section_ranges;
use crate::{NodeId, PfnRange, ZoneType, PAGES_PER_SECTION, PAGE_SHIFT, PAGE_SIZE};

/// One zone of one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZoneInfo {
    pub nid: NodeId,
    pub zone: ZoneType,
    /// `[zone_start_pfn, zone_end_pfn)`: node span clipped to the zone's limits.
    pub span: PfnRange,
    /// Memory pages of this node inside the span.
    pub present_pages: u64,
}

impl ZoneInfo {
    pub const fn spanned_pages(&self) -> u64 {
        self.span.nr_pages()
    }
    /// Pages of the span that are not this node's memory.
    pub const fn absent_pages(&self) -> u64 {
        self.spanned_pages() - self.present_pages
    }
    /// `populated_zone()`.
    pub(crate) const fn is_populated(&self) -> bool {
        self.present_pages > 0
    }
    /// Linux `calc_memmap_size()` with `CONFIG_SPARSEMEM`: pages of memmap
    /// (struct pages of `page_bytes`) charged to the zone (spanned pages,
    /// or present pages when the span is over 1/16 holes).
    pub(crate) const fn memmap_pages(&self, page_bytes: u64) -> u64 {
        let present = self.present_pages;
        let pages = if self.spanned_pages() > present + (present >> 4) {
            present
        } else {
            self.spanned_pages()
        };
        (pages * page_bytes).div_ceil(PAGE_SIZE)
    }
}

/// The per-CPU page list batch Linux prints in `  Z zone: N pages, LIFO
/// batch:B` (6.1 `zone_batchsize()`): a quarter of the zone's managed pages
/// per 1024, at most 1 MiB of pages, then `rounddown_pow_of_two(b + b/2) - 1`.
/// `managed_pages` is what `free_area_init_core()` leaves the zone at that
/// point: present pages less the memmap's own pages.
pub(crate) const fn lifo_batch(managed_pages: u64) -> u64 {
    let max_batch = (1 << 20) / PAGE_SIZE;
    let mut batch = managed_pages >> 10;
    if batch > max_batch {
        batch = max_batch;
    }
    batch /= 4;
    if batch < 1 {
        batch = 1;
    }
    let b = batch + batch / 2;
    (1 << (63 - b.leading_zeros())) - 1
}

/// One node: its span and present pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    pub nid: NodeId,
    pub span: PfnRange,
    pub present_pages: u64,
}

/// A gap `memmap_init()` fills with reserved struct pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnavailableRange {
    pub nid: NodeId,
    pub zone: ZoneType,
    /// The whole gap (may include absent sections).
    pub pfns: PfnRange,
    /// Pages of the gap inside present sections: those that get struct pages.
    pub nr_pages: u64,
}

/// Zones and nodes derived from memblock.
#[derive(Clone, Debug)]
pub struct ZoneLayout {
    nodes: Vec<NodeInfo>,
    /// Node-major, zone order within a node; zones with an empty span omitted.
    zones: Vec<ZoneInfo>,
    unavailable: Vec<UnavailableRange>,
    present_sections: Vec<PfnRange>,
    min_pfn: u64,
    max_pfn: u64,
}

impl ZoneLayout {
    /// Compute the layout (`free_area_init()` without the allocations).
    pub fn new(mb: &Memblock) -> Self {
        // One pass over the memory regions, whatever the number of nodes:
        // each node's span (`get_pfn_range_for_nid()`) and present pages,
        // in total and per zone.
        #[derive(Clone, Copy, Default)]
        struct Seen {
            span: Option<PfnRange>,
            present_pages: u64,
            zone_present_pages: [u64; ZoneType::ALL.len()],
        }
        let mut seen = [Seen::default(); MAX_NUMNODES as usize];
        for (r, nid) in mb.mem_pfn_ranges(None) {
            let s = &mut seen[nid as usize];
            s.span = Some(s.span.map_or(r, |span| {
                PfnRange::new(span.start.min(r.start), span.end.max(r.end))
            }));
            s.present_pages += r.nr_pages();
            for zone in ZoneType::ALL {
                if let Some(piece) = r.intersect(&zone.pfn_limit()) {
                    s.zone_present_pages[zone as usize] += piece.nr_pages();
                }
            }
        }
        let mut nodes = Vec::new();
        let mut zones = Vec::new();
        for (nid, s) in (0..).zip(&seen) {
            let Some(span) = s.span else {
                continue;
            };
            nodes.push(NodeInfo {
                nid,
                span,
                present_pages: s.present_pages,
            });
            for zone in ZoneType::ALL {
                let Some(zspan) = span.intersect(&zone.pfn_limit()) else {
                    continue;
                };
                zones.push(ZoneInfo {
                    nid,
                    zone,
                    span: zspan,
                    present_pages: s.zone_present_pages[zone as usize],
                });
            }
        }
        let present_sections: Vec<PfnRange> = present_section_ranges(mb).collect();
        let mut layout = Self {
            nodes,
            zones,
            unavailable: Vec::new(),
            present_sections,
            min_pfn: mb.min_pfn().unwrap_or(0),
            max_pfn: mb.max_pfn().unwrap_or(0),
        };
        layout.unavailable = layout.compute_unavailable(mb);
        layout
    }

    /// `memmap_init()`'s hole walk.
    fn compute_unavailable(&self, mb: &Memblock) -> Vec<UnavailableRange> {
        let mut out = Vec::new();
        let mut hole_pfn = 0;
        let mut last = None;
        for (range, nid) in mb.mem_pfn_ranges(None) {
            for z in self.node_zones(nid).filter(|z| z.is_populated()) {
                if let Some(piece) = range.intersect(&z.span) {
                    if hole_pfn < piece.start {
                        out.push(self.unavailable(
                            nid,
                            z.zone,
                            PfnRange::new(hole_pfn, piece.start),
                        ));
                    }
                    hole_pfn = piece.end;
                }
                last = Some((nid, z.zone));
            }
        }
        if let Some((nid, zone)) = last {
            let end = self.max_pfn.next_multiple_of(PAGES_PER_SECTION);
            if hole_pfn < end {
                out.push(self.unavailable(nid, zone, PfnRange::new(hole_pfn, end)));
            }
        }
        out
    }

    fn unavailable(&self, nid: NodeId, zone: ZoneType, pfns: PfnRange) -> UnavailableRange {
        let nr_pages = self
            .present_section_pieces(pfns)
            .map(|r| r.nr_pages())
            .sum();
        UnavailableRange {
            nid,
            zone,
            pfns,
            nr_pages,
        }
    }

    /// Parts of `range` inside present sections, ascending.
    pub fn present_section_pieces(&self, range: PfnRange) -> impl Iterator<Item = PfnRange> + '_ {
        let first = self
            .present_sections
            .partition_point(|s| s.end <= range.start);
        self.present_sections[first..]
            .iter()
            .take_while(move |s| s.start < range.end)
            .filter_map(move |s| s.intersect(&range))
    }

    pub fn nodes(&self) -> &[NodeInfo] {
        &self.nodes
    }
    pub fn zones(&self) -> &[ZoneInfo] {
        &self.zones
    }
    /// Zones of one node, in zone order: a slice of `zones`, which is
    /// node-major with nodes ascending.
    pub(crate) fn node_zones(&self, nid: NodeId) -> impl Iterator<Item = &ZoneInfo> + '_ {
        let first = self.zones.partition_point(|z| z.nid < nid);
        let len = self.zones[first..].partition_point(|z| z.nid == nid);
        self.zones[first..first + len].iter()
    }
    pub fn zone(&self, nid: NodeId, zone: ZoneType) -> Option<&ZoneInfo> {
        self.node_zones(nid).find(|z| z.zone == zone)
    }
    /// The node's zone that ends at the node's end (`pgdat_end_pfn`), the
    /// only zone whose init may be deferred.
    pub fn highest_zone(&self, nid: NodeId) -> Option<&ZoneInfo> {
        self.node_zones(nid).filter(|z| z.is_populated()).last()
    }
    /// The gaps `memmap_init()` fills, in walk order.
    pub fn unavailable_ranges(&self) -> &[UnavailableRange] {
        &self.unavailable
    }
    /// Total pages of struct pages initialised for holes.
    pub fn hole_pages(&self) -> u64 {
        self.unavailable.iter().map(|u| u.nr_pages).sum()
    }
    /// Present-section PFN ranges (merged).
    pub fn present_section_ranges(&self) -> &[PfnRange] {
        &self.present_sections
    }
    /// Total memory pages.
    pub fn present_pages(&self) -> u64 {
        self.nodes.iter().map(|n| n.present_pages).sum()
    }
    /// Present pages of every zone below its node's highest zone: what
    /// deferral always initialises eagerly, whatever the RAM size.
    pub fn low_zone_pages(&self) -> u64 {
        self.nodes
            .iter()
            .map(|n| {
                let highest = self.highest_zone(n.nid).map(|z| z.zone);
                self.node_zones(n.nid)
                    .filter(|z| Some(z.zone) != highest)
                    .map(|z| z.present_pages)
                    .sum::<u64>()
            })
            .sum()
    }

    /// Write the dmesg lines Linux prints for this layout, one per line,
    /// with the memmap charged at `page_bytes` per struct page.
    pub fn write_report<W: fmt::Write>(
        &self,
        mb: &Memblock,
        page_bytes: u64,
        w: &mut W,
    ) -> fmt::Result {
        let mem = |s: u64, e: u64| MemRange(s, e);
        writeln!(w, "Zone ranges:")?;
        for zone in ZoneType::ALL {
            let limit = zone.pfn_limit();
            let span = PfnRange::new(limit.start.max(self.min_pfn), limit.end.min(self.max_pfn));
            if span.is_empty() {
                writeln!(w, "  {:<8} empty", zone.name())?;
            } else {
                writeln!(w, "  {:<8} {}", zone.name(), mem(span.start, span.end))?;
            }
        }
        writeln!(w, "Movable zone start for each node")?;
        writeln!(w, "Early memory node ranges")?;
        for (r, nid) in mb.mem_pfn_ranges(None) {
            writeln!(w, "  node {nid:>3}: {}", mem(r.start, r.end))?;
        }
        for node in &self.nodes {
            writeln!(
                w,
                "Initmem setup node {} {}",
                node.nid,
                mem(node.span.start, node.span.end)
            )?;
            writeln!(w, "On node {} totalpages: {}", node.nid, node.present_pages)?;
            for z in self.node_zones(node.nid) {
                let memmap = z.memmap_pages(page_bytes);
                if z.present_pages >= memmap {
                    if memmap > 0 {
                        writeln!(
                            w,
                            "  {} zone: {} pages used for memmap",
                            z.zone.name(),
                            memmap
                        )?;
                    }
                } else {
                    writeln!(
                        w,
                        "  {} zone: {} memmap pages exceeds freesize {}",
                        z.zone.name(),
                        memmap,
                        z.present_pages
                    )?;
                }
                writeln!(
                    w,
                    "  {} zone: {} pages, LIFO batch:{}",
                    z.zone.name(),
                    z.present_pages,
                    lifo_batch(z.present_pages - memmap.min(z.present_pages))
                )?;
            }
        }
        for u in self.unavailable.iter().filter(|u| u.nr_pages > 0) {
            writeln!(
                w,
                "On node {}, zone {}: {} pages in unavailable ranges",
                u.nid,
                u.zone.name(),
                u.nr_pages
            )?;
        }
        Ok(())
    }
}

/// `[mem %#018Lx-%#018Lx]` for PFNs `[start, end)`.
struct MemRange(u64, u64);

impl fmt::Display for MemRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[mem {:#018x}-{:#018x}]",
            self.0 << PAGE_SHIFT,
            (self.1 << PAGE_SHIFT) - 1
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::firmware::{FirmwareEntry, NodeAffinity, RegionKind::*};
    use crate::memblock::MemblockConfig;
    use alloc::string::String;

    const GIB: u64 = 1 << 30;

    /// A QEMU-like 2-node, 16 GiB map.
    fn qemu_like() -> Memblock {
        let (mut mb, mut report) = Memblock::from_firmware(
            [
                FirmwareEntry::new(0, 0x9fc00, Usable),
                FirmwareEntry::new(0x9fc00, 0x60400, Reserved),
                FirmwareEntry::new(0x100000, 3 * GIB - 0x100000, Usable),
                FirmwareEntry::new(3 * GIB, GIB, Reserved),
                FirmwareEntry::new(4 * GIB, 12 * GIB, Usable),
            ],
            MemblockConfig::default(),
        )
        .unwrap();
        mb.reserve(0, 0x1000).unwrap();
        mb.apply_affinity(
            [
                NodeAffinity::new(0, 8 * GIB, 0),
                NodeAffinity::new(8 * GIB, 8 * GIB, 1),
            ],
            &mut report,
        )
        .unwrap();
        mb
    }

    #[test]
    fn spans_present_and_holes() {
        let mb = qemu_like();
        let l = ZoneLayout::new(&mb);
        let dma = l.zone(0, ZoneType::Dma).unwrap();
        assert_eq!(dma.span, PfnRange::new(0, 4096));
        assert_eq!(dma.present_pages, 0x9f + (4096 - 0x100));
        assert_eq!(dma.absent_pages(), 0x100 - 0x9f);
        let dma32 = l.zone(0, ZoneType::Dma32).unwrap();
        assert_eq!(dma32.span, PfnRange::new(4096, (4 * GIB) >> 12));
        assert_eq!(dma32.absent_pages(), GIB >> 12);
        assert_eq!(
            l.zone(1, ZoneType::Normal).unwrap().span,
            PfnRange::new((8 * GIB) >> 12, (16 * GIB) >> 12)
        );
        assert!(l.zone(1, ZoneType::Dma32).is_none());
        assert_eq!(l.highest_zone(0).unwrap().zone, ZoneType::Normal);
        // Node 0's low zones are DMA and DMA32; node 1 has only Normal.
        assert_eq!(
            l.low_zone_pages(),
            (0x9f + (4096 - 0x100)) + ((3 * GIB) >> 12) - 4096
        );
        // Gap [0x9f, 0x100) lies in present section 0 (a DMA zone hole); gap
        // [3 GiB, 4 GiB) lies in absent sections: no struct pages.
        let u = l.unavailable_ranges();
        assert_eq!(u.len(), 2);
        assert_eq!(
            (u[0].zone, u[0].pfns, u[0].nr_pages),
            (ZoneType::Dma, PfnRange::new(0x9f, 0x100), 0x61)
        );
        assert_eq!((u[1].zone, u[1].nr_pages), (ZoneType::Normal, 0));
        assert_eq!(l.hole_pages(), 0x61);
    }

    #[test]
    fn report_lines_look_like_dmesg() {
        let mb = qemu_like();
        let l = ZoneLayout::new(&mb);
        let mut s = String::new();
        l.write_report(&mb, 64, &mut s).unwrap();
        assert!(
            s.contains("  DMA      [mem 0x0000000000000000-0x0000000000ffffff]\n"),
            "{s}"
        );
        assert!(
            s.contains("  Normal   [mem 0x0000000100000000-0x00000003ffffffff]\n"),
            "{s}"
        );
        assert!(
            s.contains("  node   1: [mem 0x0000000200000000-0x00000003ffffffff]\n"),
            "{s}"
        );
        assert!(
            s.contains("On node 0, zone DMA: 97 pages in unavailable ranges\n"),
            "{s}"
        );
        // Node 1 Normal: 8 GiB present, memmap = 2097152 * 64 / 4096 pages.
        assert!(
            s.contains("  Normal zone: 32768 pages used for memmap\n"),
            "{s}"
        );
        assert!(
            s.contains("Initmem setup node 1 [mem 0x0000000200000000-0x00000003ffffffff]\n"),
            "{s}"
        );
    }

    #[test]
    fn lifo_batch_as_linux_prints_it() {
        // Linux 6.1 dmesg on QEMU: "DMA zone: 3999 pages, LIFO batch:0"
        // (3935 managed) and "DMA32 zone: ..., LIFO batch:63" for big zones.
        assert_eq!(lifo_batch(3935), 0);
        assert_eq!(lifo_batch(0), 0);
        // 8192 managed: 8 per 1024, /4 = 2, 2 + 1 = 3 -> 2 - 1 = 1.
        assert_eq!(lifo_batch(8192), 1);
        // 64 Ki managed: 64 / 4 = 16, 16 + 8 = 24 -> 16 - 1 = 15.
        assert_eq!(lifo_batch(65536), 15);
        // Capped at 1 MiB of 4 KiB pages: 256 / 4 = 64, 96 -> 64 - 1.
        assert_eq!(lifo_batch(1 << 28), 63);
    }

    #[test]
    fn memmap_pages_uses_present_when_span_is_mostly_holes() {
        let z = ZoneInfo {
            nid: 0,
            zone: ZoneType::Normal,
            span: PfnRange::new(0, 1 << 20),
            present_pages: 1 << 10,
        };
        assert_eq!(z.memmap_pages(64), 16);
        assert_eq!(z.memmap_pages(32), 8);
        let z = ZoneInfo {
            present_pages: (1 << 20) - 1,
            ..z
        };
        assert_eq!(z.memmap_pages(64), 1 << 14);
    }
}
