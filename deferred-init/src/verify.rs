//! Post-init verification: after memmap init and deferred init (mode
//! [`InitMode::InitAndFree`](crate::InitMode::InitAndFree)) are complete,
//! check every struct page against memblock and the buddy free lists against
//! the pages, and fail loudly with what differs.
//!
//! 1. [`verify_pages`] scans the struct pages of a PFN range (read only, so
//!    several CPUs can scan disjoint slices at once) and returns a
//!    [`PageCheck`]; partial results combine with [`PageCheck::merge`].
//! 2. [`verify_buddy`] walks the free lists and compares them, the
//!    allocator's counters and the zones' present/reserved pages with the
//!    merged [`PageCheck`] of all present memory.
//! 3. [`alloc_free_selftest`] allocates and frees a few blocks on a node.
//!
//! # What a page must look like
//! * Memory PFN (memblock memory of node `nid`, zone by PFN): links
//!   (section, node, zone bits) of `(pfn, zone, nid)`; `mapping`, `index`,
//!   `memcg_data` zero.
//!   * memblock-reserved: `PG_reserved`, `_refcount == 1`, not `PageBuddy`;
//!   * free: not `PG_reserved`, `_refcount == 0`, and in exactly one buddy
//!     block: either a `PageBuddy` head (order ≤ `MAX_ORDER`, PFN aligned to
//!     the order, block wholly free memory of the same node and zone), or one
//!     of the `2^order − 1` pages after the last head (not `PageBuddy`).
//! * Hole PFN in a present section (not memory): `PG_reserved`,
//!   `_refcount == 1`, links of the [`UnavailableRange`] it lies in (Linux
//!   `init_unavailable_range`).
//!
//! # Range boundaries
//! A buddy block never crosses a `MAX_ORDER` (1024-page) boundary, so a scan
//! that starts on one knows no block is open. `range.start` should be
//! 1024-page aligned (section boundaries and present-section starts are); if
//! it is not, the scan reads (without checking or counting) the struct pages
//! from the 1024-aligned PFN below `range.start` to recover the open block,
//! so any split point gives the same merged result as one scan. A block whose
//! head lies in the range may end past `range.end`: its extent is checked
//! against memblock, its tail pages by the scan of the next range.
//!
//! # Preconditions
//! Nothing may allocate from or free into the buddy allocator while
//! [`verify_pages`] / [`verify_buddy`] run, and the scan must happen before
//! any page is allocated (an allocated page is free memory per memblock with
//! `_refcount == 1`, which is reported). [`alloc_free_selftest`] frees
//! everything it allocates, so it may run before or after.

use alloc::vec::Vec;
use core::fmt;

use memmap::iter::intersect_sorted;
use memmap::memblock::{Memblock, MemblockRegion};
use memmap::page::StructPage;
use memmap::store::{Memmap, MemmapBacking};
use memmap::zones::{UnavailableRange, ZoneLayout};
use memmap::{NodeId, Pfn, PfnRange, ZoneType, MAX_ORDER};

use crate::buddy::{
    slot, slot_key, AllocError, BuddyAllocator, FreeError, ListEnd, NR_ORDERS, NR_ZONES, PFN_NONE,
};
use crate::run::DeferredInit;

/// How many mismatches a [`PageCheck`] or [`BuddyFailure`] keeps (all are counted).
pub const MAX_RECORDED_MISMATCHES: usize = 16;

const MAX_BLOCK_NR_PAGES: u64 = 1 << MAX_ORDER;

/// The words of a struct page a mismatch report shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PageWords {
    pub flags: u64,
    pub refcount: i32,
    pub mapcount: i32,
    pub private: u64,
    pub lru_next: u64,
    pub lru_prev: u64,
}

impl PageWords {
    pub fn of(p: &StructPage) -> Self {
        Self {
            flags: p.flags,
            refcount: p.refcount,
            mapcount: p.mapcount,
            private: p.private,
            lru_next: p.lru.next,
            lru_prev: p.lru.prev,
        }
    }
}

impl fmt::Display for PageWords {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "refcount {} mapcount {} flags {:#x} private {:#x} lru {:#x}/{:#x}",
            self.refcount, self.mapcount, self.flags, self.private, self.lru_next, self.lru_prev
        )
    }
}

/// What a page should have been.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expected {
    /// memblock-reserved memory: `PG_reserved`, `_refcount == 1`.
    Reserved { nid: NodeId, zone: ZoneType },
    /// Free memory not covered by a preceding head: a `PageBuddy` head.
    FreeInBlock { nid: NodeId, zone: ZoneType },
    /// Free memory covered by the block of `head`: a tail page.
    FreeTail {
        nid: NodeId,
        zone: ZoneType,
        head: Pfn,
        order: u32,
    },
    /// Hole in a present section: `PG_reserved`, `_refcount == 1`.
    Hole { nid: NodeId, zone: ZoneType },
    /// A non-memory PFN of a present section should lie in an unavailable range.
    ListedHole,
    /// The PFN's section should have struct-page backing.
    Backed,
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Expected::Reserved { nid, zone } => write!(
                f,
                "reserved page of node {nid} zone {} (PG_reserved, refcount 1)",
                zone.name()
            ),
            Expected::FreeInBlock { nid, zone } => write!(
                f,
                "free page in a buddy block of node {nid} zone {} (head: PageBuddy, refcount 0)",
                zone.name()
            ),
            Expected::FreeTail {
                nid,
                zone,
                head,
                order,
            } => write!(
                f,
                "free tail of buddy block {head:#x} order {order} of node {nid} zone {} (refcount 0, not PageBuddy)",
                zone.name()
            ),
            Expected::Hole { nid, zone } => write!(
                f,
                "hole page of node {nid} zone {} (PG_reserved, refcount 1)",
                zone.name()
            ),
            Expected::ListedHole => write!(f, "a hole inside one of the layout's unavailable ranges"),
            Expected::Backed => write!(f, "struct-page backing"),
        }
    }
}

/// Which check failed (the first one, in this order of declaration).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Problem {
    /// No struct pages for the PFN's section.
    Unbacked,
    /// Present-section PFN that is neither memory nor in an unavailable range.
    UnlistedHole,
    /// Section/node/zone bits differ from `set_page_links(pfn, zone, nid)`.
    WrongLinks,
    /// `mapping`, `index` or `memcg_data` not zero.
    StrayState,
    /// `PG_reserved` missing.
    ReservedClear,
    /// `PG_reserved` set on a free page.
    ReservedSet,
    /// `_refcount` not 1 (reserved, hole) or not 0 (free).
    Refcount,
    /// `PageBuddy` on a page that must not be a head.
    UnexpectedBuddy,
    /// Free page neither `PageBuddy` nor covered by the last head.
    NotInBlock,
    /// `PageBuddy` head with an order above `MAX_ORDER`.
    BadOrder,
    /// `PageBuddy` head not aligned to its order.
    Misaligned,
    /// The head's block is not wholly free memory of its node and zone.
    BlockOutsideFree,
}

impl Problem {
    pub const fn describe(self) -> &'static str {
        match self {
            Problem::Unbacked => "no struct-page backing",
            Problem::UnlistedHole => "not memory and not in any unavailable range",
            Problem::WrongLinks => "section/node/zone bits wrong",
            Problem::StrayState => "mapping/index/memcg_data not zero",
            Problem::ReservedClear => "PG_reserved clear",
            Problem::ReservedSet => "PG_reserved set",
            Problem::Refcount => "wrong refcount",
            Problem::UnexpectedBuddy => "PageBuddy set",
            Problem::NotInBlock => "free page not in any buddy block",
            Problem::BadOrder => "buddy order above MAX_ORDER",
            Problem::Misaligned => "buddy head not aligned to its order",
            Problem::BlockOutsideFree => "buddy block leaves free memory of its node/zone",
        }
    }
}

/// One page that is not what it should be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageMismatch {
    pub pfn: Pfn,
    pub expected: Expected,
    pub problem: Problem,
    pub found: PageWords,
}

impl fmt::Display for PageMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "verify: pfn {:#x}: expected {}, found {} ({})",
            self.pfn,
            self.expected,
            self.found,
            self.problem.describe()
        )
    }
}

/// Page-scan counts of one (node, zone). Memory pages count towards the
/// zone of their PFN, hole pages towards their unavailable range's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZoneCheck {
    pub nid: NodeId,
    pub zone: ZoneType,
    /// Memory PFNs scanned.
    pub memory_pages: u64,
    /// Memory pages whose links match `(pfn, zone, nid)`.
    pub initialised: u64,
    /// memblock-reserved memory pages that passed every check.
    pub reserved: u64,
    /// Free memory pages that passed every check (in a valid block).
    pub free: u64,
    /// Valid `PageBuddy` heads found, per order.
    pub heads: [u64; NR_ORDERS],
    /// Hole pages (present sections, not memory) that passed every check.
    pub holes: u64,
}

impl ZoneCheck {
    fn empty(s: usize) -> Self {
        let (nid, zone) = slot_key(s);
        Self {
            nid,
            zone,
            memory_pages: 0,
            initialised: 0,
            reserved: 0,
            free: 0,
            heads: [0; NR_ORDERS],
            holes: 0,
        }
    }
    fn add(&mut self, o: &ZoneCheck) {
        self.memory_pages += o.memory_pages;
        self.initialised += o.initialised;
        self.reserved += o.reserved;
        self.free += o.free;
        self.holes += o.holes;
        for (a, b) in self.heads.iter_mut().zip(&o.heads) {
            *a += b;
        }
    }
    fn is_empty(&self) -> bool {
        self.memory_pages == 0 && self.holes == 0
    }
}

/// Result of [`verify_pages`] over one range, or merged over several.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageCheck {
    /// PFNs of present sections checked (memory and holes).
    pub pages_checked: u64,
    /// Indexed by `nid * 3 + zone`; see [`zones`](Self::zones).
    zones: Vec<ZoneCheck>,
    /// The mismatches with the lowest PFNs (at most one per PFN), ascending.
    pub mismatches: Vec<PageMismatch>,
    /// All mismatches.
    pub nr_mismatches: u64,
}

impl PageCheck {
    /// An empty result sized for the nodes of `layout`.
    pub fn new(layout: &ZoneLayout) -> Self {
        let nr_nodes = layout.nodes().iter().map(|n| n.nid + 1).max().unwrap_or(0) as usize;
        Self {
            pages_checked: 0,
            zones: (0..nr_nodes * NR_ZONES).map(ZoneCheck::empty).collect(),
            mismatches: Vec::new(),
            nr_mismatches: 0,
        }
    }

    /// Counts of (nid, zone), if the scan saw any page of it.
    pub fn zone(&self, nid: NodeId, zone: ZoneType) -> Option<&ZoneCheck> {
        self.zones.get(slot(nid, zone)).filter(|z| !z.is_empty())
    }

    /// Counts of every (nid, zone) the scan saw a page of.
    pub fn zones(&self) -> impl Iterator<Item = &ZoneCheck> + '_ {
        self.zones.iter().filter(|z| !z.is_empty())
    }

    /// No mismatch found.
    pub fn is_ok(&self) -> bool {
        self.nr_mismatches == 0
    }

    /// Add the result of a scan of another (disjoint) range. The merged
    /// result does not depend on the order of merging.
    pub fn merge(&mut self, other: PageCheck) {
        self.pages_checked += other.pages_checked;
        if self.zones.len() < other.zones.len() {
            let n = self.zones.len();
            self.zones
                .extend((n..other.zones.len()).map(ZoneCheck::empty));
        }
        for (a, b) in self.zones.iter_mut().zip(&other.zones) {
            a.add(b);
        }
        self.nr_mismatches += other.nr_mismatches;
        self.mismatches.extend(other.mismatches);
        self.mismatches.sort_unstable_by_key(|m| m.pfn);
        self.mismatches.truncate(MAX_RECORDED_MISMATCHES);
    }

    fn zone_mut(&mut self, nid: NodeId, zone: ZoneType) -> &mut ZoneCheck {
        let s = slot(nid, zone);
        if s >= self.zones.len() {
            let n = self.zones.len();
            self.zones.extend((n..=s).map(ZoneCheck::empty));
        }
        &mut self.zones[s]
    }

    fn record(&mut self, m: PageMismatch) {
        self.nr_mismatches += 1;
        if self.mismatches.len() < MAX_RECORDED_MISMATCHES {
            self.mismatches.push(m);
        }
    }
}

impl fmt::Display for PageCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for z in self.zones() {
            writeln!(
                f,
                "verify: node {} zone {}: {} memory pages scanned, {} initialised, {} reserved, {} free, {} holes",
                z.nid,
                z.zone.name(),
                z.memory_pages,
                z.initialised,
                z.reserved,
                z.free,
                z.holes
            )?;
        }
        for m in &self.mismatches {
            writeln!(f, "{m}")?;
        }
        // A failed scan ends like a failed list check: one `verify: FAILED`.
        let verdict = if self.nr_mismatches > 0 {
            "FAILED: "
        } else {
            ""
        };
        write!(
            f,
            "verify: {verdict}{} pages checked, {} mismatches",
            self.pages_checked, self.nr_mismatches
        )?;
        if self.nr_mismatches > self.mismatches.len() as u64 {
            write!(f, " (first {} shown)", self.mismatches.len())?;
        }
        Ok(())
    }
}

/// What memblock and the layout say a PFN is.
#[derive(Clone, Copy)]
enum Class {
    Memory { nid: NodeId, reserved: bool },
    Hole { nid: NodeId, zone: ZoneType },
    UnlistedHole,
}

/// Classifies ascending PFNs with cursors into the sorted tables.
struct Classifier<'a> {
    mem: &'a [MemblockRegion],
    rsv: &'a [MemblockRegion],
    holes: &'a [UnavailableRange],
    mi: usize,
    ri: usize,
    hi: usize,
}

impl<'a> Classifier<'a> {
    fn new(mb: &'a Memblock, layout: &'a ZoneLayout, start: Pfn) -> Self {
        let mem = mb.memory().regions();
        let rsv = mb.reserved().regions();
        let holes = layout.unavailable_ranges();
        Self {
            mem,
            rsv,
            holes,
            mi: mem.partition_point(|r| r.pfns().end <= start),
            ri: rsv.partition_point(|r| r.pfns().end <= start),
            hi: holes.partition_point(|u| u.pfns.end <= start),
        }
    }

    /// Class of `pfn`; calls must come with non-decreasing PFNs.
    #[inline]
    fn classify(&mut self, pfn: Pfn) -> Class {
        while self.mem.get(self.mi).is_some_and(|r| r.pfns().end <= pfn) {
            self.mi += 1;
        }
        match self.mem.get(self.mi) {
            Some(r) if r.pfns().start <= pfn => {
                while self.rsv.get(self.ri).is_some_and(|r| r.pfns().end <= pfn) {
                    self.ri += 1;
                }
                let reserved = self.rsv.get(self.ri).is_some_and(|r| r.pfns().start <= pfn);
                Class::Memory {
                    nid: r.nid,
                    reserved,
                }
            }
            _ => {
                while self.holes.get(self.hi).is_some_and(|u| u.pfns.end <= pfn) {
                    self.hi += 1;
                }
                match self.holes.get(self.hi) {
                    Some(u) if u.pfns.start <= pfn => Class::Hole {
                        nid: u.nid,
                        zone: u.zone,
                    },
                    _ => Class::UnlistedHole,
                }
            }
        }
    }

    /// Is `block` (whose first PFN was just classified as free memory of
    /// `nid`) wholly free memory of `nid` in one zone?
    fn block_is_free(&self, block: PfnRange, nid: NodeId) -> bool {
        if ZoneType::of_pfn(block.start) != ZoneType::of_pfn(block.end - 1) {
            return false;
        }
        let mut pos = block.start;
        let mut j = self.mi;
        while pos < block.end {
            match self.mem.get(j) {
                Some(r) if r.nid == nid && r.pfns().start <= pos && pos < r.pfns().end => {
                    pos = r.pfns().end;
                }
                _ => return false,
            }
            j += 1;
        }
        // `ri` is the first reserved region ending after block.start.
        self.rsv
            .get(self.ri)
            .is_none_or(|r| r.pfns().start >= block.end)
    }
}

/// A block opened by a valid head.
#[derive(Clone, Copy)]
struct OpenBlock {
    head: Pfn,
    end: Pfn,
    order: u32,
}

/// What a page passed as.
enum Good {
    Reserved,
    Free,
    Head(u32),
    Hole,
}

struct Verdict {
    /// (nid, zone) counted against, and whether the PFN is memory.
    key: Option<(NodeId, ZoneType, bool)>,
    links_ok: bool,
    outcome: Result<Good, (Expected, Problem)>,
}

#[inline]
fn stray(p: &StructPage) -> bool {
    p.mapping | p.index | p.memcg_data != 0
}

/// First failing check of a page that must be "reserved" (memory or hole).
#[inline]
fn check_reserved(p: &StructPage, links_ok: bool) -> Result<(), Problem> {
    if !links_ok {
        Err(Problem::WrongLinks)
    } else if stray(p) {
        Err(Problem::StrayState)
    } else if !p.is_reserved() {
        Err(Problem::ReservedClear)
    } else if p.refcount != 1 {
        Err(Problem::Refcount)
    } else if p.is_buddy() {
        Err(Problem::UnexpectedBuddy)
    } else {
        Ok(())
    }
}

/// Checks common to free heads and tails (not the PageBuddy state).
#[inline]
fn check_free(p: &StructPage, links_ok: bool) -> Result<(), Problem> {
    if !links_ok {
        Err(Problem::WrongLinks)
    } else if stray(p) {
        Err(Problem::StrayState)
    } else if p.is_reserved() {
        Err(Problem::ReservedSet)
    } else if p.refcount != 0 {
        Err(Problem::Refcount)
    } else {
        Ok(())
    }
}

/// Judge a free memory page outside any open block: it must head a valid
/// free block, which then becomes the open block.
fn judge_head(
    cls: &mut Classifier<'_>,
    open: &mut Option<OpenBlock>,
    pfn: Pfn,
    p: &StructPage,
    nid: NodeId,
    links_ok: bool,
) -> Result<Good, (Expected, Problem)> {
    let exp = Expected::FreeInBlock {
        nid,
        zone: ZoneType::of_pfn(pfn),
    };
    if !p.is_buddy() {
        return Err((exp, Problem::NotInBlock));
    }
    if p.private > MAX_ORDER as u64 {
        return Err((exp, Problem::BadOrder));
    }
    let order = p.private as u32;
    let block = PfnRange::new(pfn, pfn + (1 << order));
    if pfn & ((1 << order) - 1) != 0 {
        return Err((exp, Problem::Misaligned));
    }
    if !cls.block_is_free(block, nid) {
        return Err((exp, Problem::BlockOutsideFree));
    }
    *open = Some(OpenBlock {
        head: pfn,
        end: block.end,
        order,
    });
    check_free(p, links_ok)
        .map(|()| Good::Head(order))
        .map_err(|e| (exp, e))
}

/// Judge one page and update the open block (whether or not the PFN is
/// counted, so that a scan's state does not depend on where it started).
#[inline]
fn judge(
    cls: &mut Classifier<'_>,
    open: &mut Option<OpenBlock>,
    pfn: Pfn,
    p: &StructPage,
) -> Verdict {
    let in_block = open.filter(|b| pfn < b.end);
    if in_block.is_none() {
        *open = None;
    }
    match cls.classify(pfn) {
        Class::Memory { nid, reserved } => {
            let zone = ZoneType::of_pfn(pfn);
            let links_ok = p.links_match(pfn, zone, nid);
            let key = Some((nid, zone, true));
            let outcome = if reserved {
                // A valid head's block is wholly free memory, so no open
                // block covers a reserved page.
                check_reserved(p, links_ok)
                    .map(|()| Good::Reserved)
                    .map_err(|e| (Expected::Reserved { nid, zone }, e))
            } else if let Some(b) = in_block {
                let exp = Expected::FreeTail {
                    nid,
                    zone,
                    head: b.head,
                    order: b.order,
                };
                check_free(p, links_ok)
                    .and_then(|()| {
                        if p.is_buddy() {
                            Err(Problem::UnexpectedBuddy)
                        } else {
                            Ok(Good::Free)
                        }
                    })
                    .map_err(|e| (exp, e))
            } else {
                judge_head(cls, open, pfn, p, nid, links_ok)
            };
            Verdict {
                key,
                links_ok,
                outcome,
            }
        }
        Class::Hole { nid, zone } => {
            let links_ok = p.links_match(pfn, zone, nid);
            Verdict {
                key: Some((nid, zone, false)),
                links_ok,
                outcome: check_reserved(p, links_ok)
                    .map(|()| Good::Hole)
                    .map_err(|e| (Expected::Hole { nid, zone }, e)),
            }
        }
        Class::UnlistedHole => Verdict {
            key: None,
            links_ok: false,
            outcome: Err((Expected::ListedHole, Problem::UnlistedHole)),
        },
    }
}

/// Scan the struct pages of every PFN of `range` that lies in a present
/// section (read only; see the module docs for what is checked and for
/// `range.start`). Merge the results of disjoint ranges with
/// [`PageCheck::merge`].
pub fn verify_pages<B: MemmapBacking>(
    memmap: &Memmap<B>,
    mb: &Memblock,
    layout: &ZoneLayout,
    range: PfnRange,
) -> PageCheck {
    // Blocks never cross a MAX_ORDER boundary: start tracking at one.
    scan_pages(
        memmap,
        mb,
        layout,
        range,
        range.start & !(MAX_BLOCK_NR_PAGES - 1),
    )
}

/// A range for [`verify_scan_range`]: initialised memory between pool pieces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanRange {
    pub pfns: PfnRange,
    /// The PFN before `pfns.start` is in the pool, so no free block is open
    /// at the start and nothing before it needs reading.
    pub after_pool: bool,
}

/// [`verify_pages`] over a range of [`PoolCheck::scan_ranges`]: never reads
/// a pool page's struct page.
pub fn verify_scan_range<B: MemmapBacking>(
    memmap: &Memmap<B>,
    mb: &Memblock,
    layout: &ZoneLayout,
    range: ScanRange,
) -> PageCheck {
    if range.after_pool {
        scan_pages(memmap, mb, layout, range.pfns, range.pfns.start)
    } else {
        verify_pages(memmap, mb, layout, range.pfns)
    }
}

/// The scan of `range`, tracking open blocks from `scan_start`.
fn scan_pages<B: MemmapBacking>(
    memmap: &Memmap<B>,
    mb: &Memblock,
    layout: &ZoneLayout,
    range: PfnRange,
    scan_start: Pfn,
) -> PageCheck {
    let mut out = PageCheck::new(layout);
    if range.is_empty() {
        return out;
    }
    let mut cls = Classifier::new(mb, layout, scan_start);
    let mut open: Option<OpenBlock> = None;
    for present in layout.present_section_pieces(PfnRange::new(scan_start, range.end)) {
        for piece in present.section_pieces() {
            let Some(pages) = memmap.pages(piece) else {
                open = None;
                for pfn in piece.start.max(range.start)..piece.end {
                    out.pages_checked += 1;
                    out.record(PageMismatch {
                        pfn,
                        expected: Expected::Backed,
                        problem: Problem::Unbacked,
                        found: PageWords::default(),
                    });
                }
                continue;
            };
            for (pfn, p) in (piece.start..).zip(pages) {
                let v = judge(&mut cls, &mut open, pfn, p);
                if pfn < range.start {
                    continue;
                }
                out.pages_checked += 1;
                if let Some((nid, zone, memory)) = v.key {
                    let z = out.zone_mut(nid, zone);
                    if memory {
                        z.memory_pages += 1;
                        z.initialised += v.links_ok as u64;
                    }
                    match v.outcome {
                        Ok(Good::Reserved) => z.reserved += 1,
                        Ok(Good::Free) => z.free += 1,
                        Ok(Good::Head(order)) => {
                            z.free += 1;
                            z.heads[order as usize] += 1;
                        }
                        Ok(Good::Hole) => z.holes += 1,
                        Err(_) => {}
                    }
                }
                if let Err((expected, problem)) = v.outcome {
                    out.record(PageMismatch {
                        pfn,
                        expected,
                        problem,
                        found: PageWords::of(p),
                    });
                }
            }
        }
    }
    out
}

// ------------------------------------------------------------------ buddy

/// Verified numbers of one (node, zone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZoneSummary {
    pub nid: NodeId,
    pub zone: ZoneType,
    /// `ZoneInfo::present_pages`.
    pub present: u64,
    /// Memory pages with matching links (page scan).
    pub initialised: u64,
    /// Reserved memory pages per memblock, within the node's memory.
    pub expected_reserved: u64,
    /// Correctly reserved pages (page scan).
    pub reserved: u64,
    /// Free pages of initialised memory: `present - expected_reserved`
    /// minus the pool's unreserved pages.
    pub expected_free: u64,
    /// Free pages in valid blocks (page scan).
    pub free: u64,
    /// `BuddyAllocator::nr_free_pages`.
    pub buddy_free: u64,
    /// Blocks on the free lists, per order.
    pub listed_blocks: [u64; NR_ORDERS],
    /// Memory pages still in the pool (struct pages untouched), and the
    /// memblock-reserved pages among them.
    pub untouched: u64,
    pub untouched_reserved: u64,
}

impl fmt::Display for ZoneSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "verify: node {} zone {}: {} present, {} initialised, {} reserved, {} free (expected {})",
            self.nid,
            self.zone.name(),
            self.present,
            self.initialised,
            self.reserved,
            self.free,
            self.expected_free
        )?;
        if self.untouched > 0 {
            write!(
                f,
                ", {} untouched ({} of them reserved)",
                self.untouched, self.untouched_reserved
            )?;
        }
        Ok(())
    }
}

/// What [`verify_buddy`] checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuddySummary {
    /// Zones of the layout with present pages, plus any (node, zone) the
    /// scan or the allocator has pages of.
    pub zones: Vec<ZoneSummary>,
    pub pages_checked: u64,
    /// Blocks walked on all free lists.
    pub listed_blocks: u64,
}

impl fmt::Display for BuddySummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for z in &self.zones {
            writeln!(f, "{z}")?;
        }
        write!(
            f,
            "verify: {} pages checked, {} free blocks listed",
            self.pages_checked, self.listed_blocks
        )
    }
}

/// What is wrong with a block on a free list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadProblem {
    NotBuddy,
    WrongOrder,
    Misaligned,
    WrongLinks,
    Refcount,
    /// `lru.prev` is not the previous head on the list.
    BrokenList {
        expected_prev: Pfn,
    },
    /// The head has no struct-page backing.
    Unbacked,
}

impl fmt::Display for HeadProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            HeadProblem::NotBuddy => write!(f, "not PageBuddy"),
            HeadProblem::WrongOrder => write!(f, "wrong order"),
            HeadProblem::Misaligned => write!(f, "not aligned to its order"),
            HeadProblem::WrongLinks => write!(f, "section/node/zone bits wrong"),
            HeadProblem::Refcount => write!(f, "wrong refcount"),
            HeadProblem::BrokenList { expected_prev } => {
                write!(f, "lru.prev should be {expected_prev:#x}")
            }
            HeadProblem::Unbacked => write!(f, "no struct-page backing"),
        }
    }
}

/// What is wrong with a free list as a list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListProblem {
    /// Head `from`'s `lru.next` (the list head if `from` is `PFN_NONE`)
    /// points at `to`, which is not memory of the list's node and zone.
    LeavesZone { from: Pfn, to: Pfn },
    /// More blocks are linked than the list's counter says; `after` is the
    /// last one counted.
    TooLong { after: Pfn },
    /// The links end after `walked` blocks, before the counter says.
    TooShort { walked: u64 },
}

impl fmt::Display for ListProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ListProblem::LeavesZone { from, to } if from == PFN_NONE => {
                write!(
                    f,
                    "the list head points at pfn {to:#x}, outside the zone's memory"
                )
            }
            ListProblem::LeavesZone { from, to } => write!(
                f,
                "pfn {from:#x}'s lru.next points at pfn {to:#x}, outside the zone's memory"
            ),
            ListProblem::TooLong { after } => write!(
                f,
                "more blocks linked than counted, after pfn {after:#x} (a cycle?)"
            ),
            ListProblem::TooShort { walked } => {
                write!(f, "the links end after {walked} blocks, before the counter")
            }
        }
    }
}

/// `node N zone Z`, the place most mismatches are counted for.
struct InZone(NodeId, ZoneType);

impl fmt::Display for InZone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {} zone {}", self.0, self.1.name())
    }
}

/// A disagreement found by [`verify_buddy`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BuddyMismatch {
    /// The page scan itself found mismatches.
    PageScan { nr_mismatches: u64 },
    /// The page scan did not cover all present-section pages.
    ScanIncomplete { checked: u64, expected: u64 },
    /// A block on a free list is not a proper head.
    ListedHead {
        nid: NodeId,
        zone: ZoneType,
        pfn: Pfn,
        order: u32,
        problem: HeadProblem,
        found: PageWords,
    },
    /// Blocks of one order: listed vs valid heads in the scan vs the list counter.
    BlockCount {
        nid: NodeId,
        zone: ZoneType,
        order: u32,
        listed: u64,
        scanned: u64,
        counter: u64,
    },
    /// Free pages: allocator counter vs listed blocks vs the scan.
    FreePages {
        nid: NodeId,
        zone: ZoneType,
        counter: u64,
        listed: u64,
        scanned: u64,
    },
    /// Initialised pages differ from the zone's present pages.
    Initialised {
        nid: NodeId,
        zone: ZoneType,
        present: u64,
        initialised: u64,
    },
    /// Reserved pages differ from memblock's.
    Reserved {
        nid: NodeId,
        zone: ZoneType,
        expected: u64,
        found: u64,
    },
    /// Free pages differ from present − reserved.
    Free {
        nid: NodeId,
        zone: ZoneType,
        expected: u64,
        found: u64,
    },
    /// A free list's links are broken.
    List {
        nid: NodeId,
        zone: ZoneType,
        order: u32,
        problem: ListProblem,
    },
    /// A block on a free list lies in the untouched pool.
    PoolOverlap {
        nid: NodeId,
        zone: ZoneType,
        pfn: Pfn,
        order: u32,
    },
    /// Claimed windows vs what the claimants reported initialising: a
    /// difference means a window was initialised twice, or not at all.
    ClaimedPages {
        nid: NodeId,
        claimed: u64,
        initialised: u64,
    },
    /// A chunk's windows were initialised a different number of times than
    /// they were claimed: some window twice (or one never).
    WindowInits {
        nid: NodeId,
        section_nr: u64,
        claimed: u32,
        initialised: u32,
    },
    /// Verification ran while windows of the node were still in flight.
    InFlight { nid: NodeId },
    /// Pages counted for a (node, zone) the layout does not have.
    UnknownZone {
        nid: NodeId,
        zone: ZoneType,
        pages: u64,
    },
}

impl fmt::Display for BuddyMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BuddyMismatch::PageScan { nr_mismatches } => {
                write!(f, "verify: page scan found {nr_mismatches} mismatching pages")
            }
            BuddyMismatch::ScanIncomplete { checked, expected } => write!(
                f,
                "verify: page scan covered {checked} pages, present sections have {expected}; scan all of present_section_ranges() and merge"
            ),
            BuddyMismatch::ListedHead {
                nid,
                zone,
                pfn,
                order,
                problem,
                found,
            } => {
                write!(
                    f,
                    "verify: pfn {pfn:#x}: expected head of a free order-{order} block of node {nid} zone {} (PageBuddy, order {order}, refcount 0), found {found} (",
                    zone.name()
                )?;
                write!(f, "{problem})")
            }
            BuddyMismatch::BlockCount {
                nid,
                zone,
                order,
                listed,
                scanned,
                counter,
            } => write!(
                f,
                "verify: {} order {order}: {listed} blocks listed, {scanned} heads in the page scan, list counter {counter}",
                InZone(nid, zone)
            ),
            BuddyMismatch::FreePages {
                nid,
                zone,
                counter,
                listed,
                scanned,
            } => write!(
                f,
                "verify: {}: nr_free_pages {counter}, {listed} pages in listed blocks, {scanned} free pages in the page scan",
                InZone(nid, zone)
            ),
            BuddyMismatch::Initialised {
                nid,
                zone,
                present,
                initialised,
            } => write!(
                f,
                "verify: {}: {present} present, but {initialised} initialised",
                InZone(nid, zone)
            ),
            BuddyMismatch::Reserved {
                nid,
                zone,
                expected,
                found,
            } => write!(
                f,
                "verify: {}: {found} reserved pages, memblock reserves {expected}",
                InZone(nid, zone)
            ),
            BuddyMismatch::Free {
                nid,
                zone,
                expected,
                found,
            } => write!(
                f,
                "verify: {}: {found} free pages, expected {expected} (present - reserved)",
                InZone(nid, zone)
            ),
            BuddyMismatch::List {
                nid,
                zone,
                order,
                problem,
            } => write!(
                f,
                "verify: {} order-{order} free list: {problem}",
                InZone(nid, zone)
            ),
            BuddyMismatch::PoolOverlap {
                nid,
                zone,
                pfn,
                order,
            } => write!(
                f,
                "verify: {}: free order-{order} block {pfn:#x} lies in untouched pool memory",
                InZone(nid, zone)
            ),
            BuddyMismatch::ClaimedPages {
                nid,
                claimed,
                initialised,
            } => write!(
                f,
                "verify: node {nid}: {claimed} pages in claimed windows, but claimants initialised {initialised}: a window was initialised twice or not at all"
            ),
            BuddyMismatch::WindowInits {
                nid,
                section_nr,
                claimed,
                initialised,
            } => write!(
                f,
                "verify: node {nid} section {section_nr}: {claimed} block windows claimed, but the init path ran {initialised} times: {}",
                if initialised > claimed {
                    "a window was initialised twice"
                } else {
                    "a claimed window was never initialised"
                }
            ),
            BuddyMismatch::InFlight { nid } => write!(
                f,
                "verify: node {nid}: claimed windows are still being initialised; verify once every worker and allocation returned"
            ),
            BuddyMismatch::UnknownZone { nid, zone, pages } => write!(
                f,
                "verify: {} is not in the zone layout but has {pages} pages",
                InZone(nid, zone)
            ),
        }
    }
}

/// [`verify_buddy`] failed: the numbers and what differs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuddyFailure {
    pub summary: BuddySummary,
    /// The first [`MAX_RECORDED_MISMATCHES`] mismatches.
    pub mismatches: Vec<BuddyMismatch>,
    pub nr_mismatches: u64,
}

impl BuddyFailure {
    fn record(&mut self, m: BuddyMismatch) {
        self.nr_mismatches += 1;
        if self.mismatches.len() < MAX_RECORDED_MISMATCHES {
            self.mismatches.push(m);
        }
    }
}

impl fmt::Display for BuddyFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.summary)?;
        for m in &self.mismatches {
            writeln!(f, "{m}")?;
        }
        write!(f, "verify: FAILED, {} mismatches", self.nr_mismatches)?;
        if self.nr_mismatches > self.mismatches.len() as u64 {
            write!(f, " (first {} shown)", self.mismatches.len())?;
        }
        Ok(())
    }
}

// ------------------------------------------------------------------- pool

/// The untouched pool as verification sees it, built in O(chunks) from the
/// claim counters without reading a struct page: which PFNs must not be
/// scanned, how many pages of each zone are in it, and whether the claims
/// add up.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct PoolCheck {
    /// Pool PFN ranges, ascending, merged.
    ranges: Vec<PfnRange>,
    /// Per (node, zone) slot: (memory pages, memblock-reserved among them).
    zones: Vec<(u64, u64)>,
    /// Claims that do not add up (see [`BuddyMismatch::ClaimedPages`]).
    problems: Vec<BuddyMismatch>,
}

impl PoolCheck {
    /// No pool: every present page must be initialised.
    pub fn empty() -> Self {
        Self::default()
    }

    /// The pool of `di`, and its claims accounting. Nothing may claim
    /// meanwhile.
    pub fn new<B: MemmapBacking>(di: &DeferredInit<'_, B>) -> Self {
        let mut pool = Self::default();
        let mut node_pool_pages: Vec<(NodeId, u64)> = Vec::new();
        for p in di.pool_pieces() {
            let s = slot(p.nid, p.piece.zone);
            if pool.zones.len() <= s {
                pool.zones.resize(s + 1, (0, 0));
            }
            let n = p.piece.pfns.nr_pages();
            pool.zones[s].0 += n;
            if p.piece.reserved {
                pool.zones[s].1 += n;
            }
            match node_pool_pages.last_mut() {
                Some((nid, pages)) if *nid == p.nid => *pages += n,
                _ => node_pool_pages.push((p.nid, n)),
            }
            match pool.ranges.last_mut() {
                Some(last) if last.end == p.piece.pfns.start => last.end = p.piece.pfns.end,
                _ => pool.ranges.push(p.piece.pfns),
            }
        }
        pool.ranges.sort_unstable();
        for c in di.chunk_inits().filter(|c| c.claimed != c.initialised) {
            pool.problems.push(BuddyMismatch::WindowInits {
                nid: c.nid,
                section_nr: c.section_nr,
                claimed: c.claimed,
                initialised: c.initialised,
            });
        }
        for n in di.report().nodes {
            if !di.is_node_quiescent(n.nid) {
                pool.problems.push(BuddyMismatch::InFlight { nid: n.nid });
            }
            let in_pool = node_pool_pages
                .iter()
                .find(|(nid, _)| *nid == n.nid)
                .map_or(0, |(_, p)| *p);
            let claimed = n.nr_pages - in_pool;
            let initialised = n.nr_worker_pages + n.nr_grown_pages;
            if claimed != initialised {
                pool.problems.push(BuddyMismatch::ClaimedPages {
                    nid: n.nid,
                    claimed,
                    initialised,
                });
            }
        }
        pool
    }

    /// Pages in the pool.
    pub fn pages(&self) -> u64 {
        self.ranges.iter().map(|r| r.nr_pages()).sum()
    }

    /// (memory pages, reserved among them) of (nid, zone) in the pool.
    pub fn zone_pages(&self, nid: NodeId, zone: ZoneType) -> (u64, u64) {
        self.zones.get(slot(nid, zone)).copied().unwrap_or((0, 0))
    }

    /// Is `pfn` in the pool?
    pub fn contains(&self, pfn: Pfn) -> bool {
        let i = self.ranges.partition_point(|r| r.end <= pfn);
        self.ranges.get(i).is_some_and(|r| r.contains(pfn))
    }

    /// Everything the page scan must cover: the present sections minus the
    /// pool, cut at section boundaries (for parallel claiming).
    pub fn scan_ranges(&self, layout: &ZoneLayout) -> Vec<ScanRange> {
        let mut out = Vec::new();
        let mut pool = self.ranges.iter().peekable();
        for present in layout.present_section_ranges() {
            let mut at = present.start;
            let mut after_pool = false;
            while at < present.end {
                while pool.next_if(|r| r.end <= at).is_some() {}
                let (end, next_at) = match pool.peek() {
                    Some(r) if r.start <= at => {
                        // In the pool: skip it.
                        after_pool = true;
                        at = r.end.min(present.end);
                        continue;
                    }
                    Some(r) if r.start < present.end => (r.start, r.start),
                    _ => (present.end, present.end),
                };
                for (i, pfns) in PfnRange::new(at, end).section_pieces().enumerate() {
                    out.push(ScanRange {
                        pfns,
                        after_pool: after_pool && i == 0,
                    });
                }
                at = next_at;
                after_pool = false;
            }
        }
        out
    }
}

/// Check the free lists against the struct pages and `pages` (the merged
/// [`verify_pages`] result over all of `layout.present_section_ranges()`),
/// and the zones' totals against memblock. `memmap` must be the allocator's.
/// Equivalent to [`verify_buddy_with_pool`] with an empty pool.
pub fn verify_buddy<B: MemmapBacking>(
    buddy: &BuddyAllocator<'_, B>,
    memmap: &Memmap<B>,
    layout: &ZoneLayout,
    mb: &Memblock,
    pages: &PageCheck,
) -> Result<BuddySummary, BuddyFailure> {
    verify_buddy_with_pool(buddy, memmap, layout, mb, pages, &PoolCheck::empty())
}

/// [`verify_buddy`] when part of the memory is still in an untouched pool:
/// `pages` covers [`PoolCheck::scan_ranges`] and the pool makes up the rest.
/// Per zone: initialised + untouched = present, scanned reserved + pool
/// reserved = memblock's, free = initialised − scanned reserved; no listed
/// block lies in the pool, and the claims add up.
pub fn verify_buddy_with_pool<B: MemmapBacking>(
    buddy: &BuddyAllocator<'_, B>,
    memmap: &Memmap<B>,
    layout: &ZoneLayout,
    mb: &Memblock,
    pages: &PageCheck,
    pool: &PoolCheck,
) -> Result<BuddySummary, BuddyFailure> {
    let mut fail = BuddyFailure {
        summary: BuddySummary {
            zones: Vec::new(),
            pages_checked: pages.pages_checked,
            listed_blocks: 0,
        },
        mismatches: Vec::new(),
        nr_mismatches: 0,
    };
    if pages.nr_mismatches > 0 {
        fail.record(BuddyMismatch::PageScan {
            nr_mismatches: pages.nr_mismatches,
        });
    }
    let present_section_pages: u64 = layout
        .present_section_ranges()
        .iter()
        .map(|r| r.nr_pages())
        .sum();
    if pages.pages_checked + pool.pages() != present_section_pages {
        fail.record(BuddyMismatch::ScanIncomplete {
            checked: pages.pages_checked,
            expected: present_section_pages - pool.pages(),
        });
    }
    for m in &pool.problems {
        fail.record(*m);
    }

    let walk = walk_free_lists(buddy, memmap, pool);
    fail.summary.listed_blocks = walk.listed.iter().flatten().sum();
    for m in walk.head_problems {
        fail.record(m);
    }
    fail.nr_mismatches += walk
        .nr_head_problems
        .saturating_sub(MAX_RECORDED_MISMATCHES as u64);

    // Every (nid, zone) that the layout, the scan or the lists know.
    let nr_slots = walk.listed.len().max(pages.zones.len()).max(
        layout
            .zones()
            .iter()
            .map(|z| slot(z.nid, z.zone) + 1)
            .max()
            .unwrap_or(0),
    );
    for s in 0..nr_slots {
        let scan = pages
            .zones
            .get(s)
            .copied()
            .unwrap_or_else(|| ZoneCheck::empty(s));
        let lists = walk.listed.get(s).copied().unwrap_or([0; NR_ORDERS]);
        check_zone(s, &scan, lists, buddy, layout, mb, pool, &mut fail);
    }
    if fail.nr_mismatches == 0 {
        Ok(fail.summary)
    } else {
        Err(fail)
    }
}

/// What one walk of the free lists found: blocks per (node, zone) slot and
/// order, and the listed heads that are wrong.
struct ListWalk {
    listed: Vec<[u64; NR_ORDERS]>,
    head_problems: Vec<BuddyMismatch>,
    nr_head_problems: u64,
}

/// Walk every free list once, counting blocks and checking each head's
/// struct page, without reading struct pages that lie in the pool and
/// without following links out of a head that is not a proper one.
fn walk_free_lists<B: MemmapBacking>(
    buddy: &BuddyAllocator<'_, B>,
    memmap: &Memmap<B>,
    pool: &PoolCheck,
) -> ListWalk {
    let mut walk = ListWalk {
        listed: alloc::vec![[0; NR_ORDERS]; buddy.nr_slots()],
        head_problems: Vec::new(),
        nr_head_problems: 0,
    };
    for s in 0..buddy.nr_slots() {
        let (nid, zone) = slot_key(s);
        for order in 0..=MAX_ORDER {
            let mut expected_prev = PFN_NONE;
            let end = buddy.walk_free_list(nid, zone, order, |pfn| {
                walk.listed[s][order as usize] += 1;
                let problem =
                    listed_head_problem(memmap, pool, nid, zone, pfn, order, expected_prev);
                expected_prev = pfn;
                let ok = problem.is_none();
                if let Some(m) = problem {
                    walk.record(m);
                }
                ok
            });
            let link = match end {
                ListEnd::Complete | ListEnd::Stopped { .. } => None,
                ListEnd::BadLink { from, to } => Some(ListProblem::LeavesZone { from, to }),
                ListEnd::TooLong { after } => Some(ListProblem::TooLong { after }),
                ListEnd::TooShort { walked } => Some(ListProblem::TooShort { walked }),
            };
            if let Some(problem) = link {
                walk.record(BuddyMismatch::List {
                    nid,
                    zone,
                    order,
                    problem,
                });
            }
        }
    }
    walk
}

impl ListWalk {
    fn record(&mut self, m: BuddyMismatch) {
        self.nr_head_problems += 1;
        if self.head_problems.len() < MAX_RECORDED_MISMATCHES {
            self.head_problems.push(m);
        }
    }
}

/// What is wrong with listed block `pfn`, if anything: it lies in the pool
/// (its struct page is then not read), has no backing, or is not a proper
/// head of a free block of its list.
fn listed_head_problem<B: MemmapBacking>(
    memmap: &Memmap<B>,
    pool: &PoolCheck,
    nid: NodeId,
    zone: ZoneType,
    pfn: Pfn,
    order: u32,
    expected_prev: Pfn,
) -> Option<BuddyMismatch> {
    if pool.contains(pfn) {
        return Some(BuddyMismatch::PoolOverlap {
            nid,
            zone,
            pfn,
            order,
        });
    }
    let (problem, found) = match memmap.page(pfn) {
        None => (Some(HeadProblem::Unbacked), PageWords::default()),
        Some(p) => (
            head_problem(p, pfn, nid, zone, order, expected_prev),
            PageWords::of(p),
        ),
    };
    problem.map(|problem| BuddyMismatch::ListedHead {
        nid,
        zone,
        pfn,
        order,
        problem,
        found,
    })
}

/// What is wrong with the struct page of a listed block head, if anything.
fn head_problem(
    p: &StructPage,
    pfn: Pfn,
    nid: NodeId,
    zone: ZoneType,
    order: u32,
    expected_prev: Pfn,
) -> Option<HeadProblem> {
    if !p.is_buddy() {
        Some(HeadProblem::NotBuddy)
    } else if p.private != order as u64 {
        Some(HeadProblem::WrongOrder)
    } else if pfn & ((1 << order) - 1) != 0 {
        Some(HeadProblem::Misaligned)
    } else if !p.links_match(pfn, zone, nid) {
        Some(HeadProblem::WrongLinks)
    } else if p.refcount != 0 {
        Some(HeadProblem::Refcount)
    } else if p.lru.prev != expected_prev {
        Some(HeadProblem::BrokenList { expected_prev })
    } else {
        None
    }
}

/// Check one (node, zone) slot: the scan, the lists and the counters agree
/// with each other, and with the layout, memblock and the pool.
#[allow(clippy::too_many_arguments)]
fn check_zone<B: MemmapBacking>(
    s: usize,
    scan: &ZoneCheck,
    lists: [u64; NR_ORDERS],
    buddy: &BuddyAllocator<'_, B>,
    layout: &ZoneLayout,
    mb: &Memblock,
    pool: &PoolCheck,
    fail: &mut BuddyFailure,
) {
    let (nid, zone) = slot_key(s);
    let counter = buddy.nr_free_pages(nid, zone);
    let listed_pages: u64 = lists.iter().enumerate().map(|(o, &n)| n << o).sum();
    let Some(info) = layout.zone(nid, zone) else {
        let pages = scan.memory_pages + scan.holes + counter + listed_pages;
        if pages > 0 {
            fail.record(BuddyMismatch::UnknownZone { nid, zone, pages });
        }
        return;
    };
    let node_mem = mb.mem_pfn_ranges(Some(nid)).map(|(r, _)| r);
    let expected_reserved: u64 = intersect_sorted(mb.reserved_mem_ranges(info.span), node_mem)
        .map(|r| r.nr_pages())
        .sum();
    let (untouched, untouched_reserved) = pool.zone_pages(nid, zone);
    let expected_free =
        (info.present_pages + untouched_reserved).saturating_sub(expected_reserved + untouched);
    let zs = ZoneSummary {
        nid,
        zone,
        present: info.present_pages,
        initialised: scan.initialised,
        expected_reserved,
        reserved: scan.reserved,
        expected_free,
        free: scan.free,
        buddy_free: counter,
        listed_blocks: lists,
        untouched,
        untouched_reserved,
    };
    record_zone_mismatches(&zs, &scan.heads, buddy, fail);
    if info.present_pages > 0 || !scan.is_empty() || counter > 0 {
        fail.summary.zones.push(zs);
    }
}

/// The comparisons behind [`check_zone`]: per order, the lists, the scan's
/// block heads and the allocator's counters; then the page totals.
fn record_zone_mismatches<B: MemmapBacking>(
    zs: &ZoneSummary,
    scanned_heads: &[u64; NR_ORDERS],
    buddy: &BuddyAllocator<'_, B>,
    fail: &mut BuddyFailure,
) {
    let (nid, zone) = (zs.nid, zs.zone);
    let lists = zs.listed_blocks;
    for order in 0..=MAX_ORDER {
        let o = order as usize;
        let c = buddy.nr_free_blocks(nid, zone, order);
        if lists[o] != scanned_heads[o] || lists[o] != c {
            fail.record(BuddyMismatch::BlockCount {
                nid,
                zone,
                order,
                listed: lists[o],
                scanned: scanned_heads[o],
                counter: c,
            });
        }
    }
    let listed_pages: u64 = lists.iter().enumerate().map(|(o, &n)| n << o).sum();
    if zs.buddy_free != zs.free || zs.buddy_free != listed_pages {
        fail.record(BuddyMismatch::FreePages {
            nid,
            zone,
            counter: zs.buddy_free,
            listed: listed_pages,
            scanned: zs.free,
        });
    }
    if zs.initialised + zs.untouched != zs.present {
        fail.record(BuddyMismatch::Initialised {
            nid,
            zone,
            present: zs.present,
            initialised: zs.initialised,
        });
    }
    if zs.reserved + zs.untouched_reserved != zs.expected_reserved {
        fail.record(BuddyMismatch::Reserved {
            nid,
            zone,
            expected: zs.expected_reserved,
            found: zs.reserved,
        });
    }
    if zs.free != zs.expected_free {
        fail.record(BuddyMismatch::Free {
            nid,
            zone,
            expected: zs.expected_free,
            found: zs.free,
        });
    }
}

// --------------------------------------------------------------- selftest

/// Orders [`alloc_free_selftest`] allocates, in this order.
pub const SELFTEST_ORDERS: [u32; 3] = [0, 3, MAX_ORDER];

/// What the self-test did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelftestReport {
    pub nid: NodeId,
    pub zone: ZoneType,
    /// `(head pfn, order)` of the blocks allocated (and freed again).
    pub blocks: Vec<(Pfn, u32)>,
    /// Orders of [`SELFTEST_ORDERS`] not tried because the zone had no
    /// free block that large (a small node: 8 MiB has no 4 MiB block).
    pub skipped: Vec<u32>,
    pub free_pages: u64,
}

impl fmt::Display for SelftestReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "verify: node {} zone {}: allocated and freed orders",
            self.nid,
            self.zone.name()
        )?;
        for (pfn, order) in &self.blocks {
            write!(f, " {order}@{pfn:#x}")?;
        }
        if !self.skipped.is_empty() {
            write!(
                f,
                " (orders {:?} skipped: no free block that large)",
                self.skipped
            )?;
        }
        write!(f, "; {} free pages before and after", self.free_pages)
    }
}

/// Why the self-test failed (blocks it had allocated are freed first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SelftestError {
    /// Claimed windows of the node are still being initialised.
    InFlight {
        nid: NodeId,
    },
    /// The node has no free page in any zone.
    NoFreeMemory {
        nid: NodeId,
    },
    Alloc {
        order: u32,
        err: AllocError,
    },
    /// The head is not aligned to the order.
    Misaligned {
        pfn: Pfn,
        order: u32,
    },
    /// Two allocated blocks overlap.
    Overlap {
        pfn: Pfn,
        order: u32,
        other: Pfn,
    },
    /// A page of an allocated block is wrong.
    BadPage {
        pfn: Pfn,
        what: &'static str,
        found: PageWords,
    },
    /// `nr_free_pages` did not move as it should.
    FreeCount {
        stage: &'static str,
        expected: u64,
        found: u64,
    },
    /// Per-order block counts differ after freeing everything back.
    BlockCounts {
        order: u32,
        before: u64,
        after: u64,
    },
    Free {
        err: FreeError,
    },
}

impl fmt::Display for SelftestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SelftestError::InFlight { nid } => write!(
                f,
                "verify: selftest: windows of node {nid} are still being initialised; run it after all workers and allocations returned"
            ),
            SelftestError::NoFreeMemory { nid } => {
                write!(f, "verify: selftest: node {nid} has no free pages")
            }
            SelftestError::Alloc { order, err } => {
                write!(f, "verify: selftest: order-{order} allocation failed: {err}")
            }
            SelftestError::Misaligned { pfn, order } => write!(
                f,
                "verify: selftest: order-{order} block {pfn:#x} is not aligned to its order"
            ),
            SelftestError::Overlap { pfn, order, other } => write!(
                f,
                "verify: selftest: order-{order} block {pfn:#x} overlaps block {other:#x} allocated before"
            ),
            SelftestError::BadPage { pfn, what, found } => write!(
                f,
                "verify: selftest: pfn {pfn:#x}: expected {what}, found {found}"
            ),
            SelftestError::FreeCount {
                stage,
                expected,
                found,
            } => write!(
                f,
                "verify: selftest: {stage}: expected {expected} free pages, found {found}"
            ),
            SelftestError::BlockCounts {
                order,
                before,
                after,
            } => write!(
                f,
                "verify: selftest: {before} free order-{order} blocks before, {after} after freeing everything"
            ),
            SelftestError::Free { err } => write!(f, "verify: selftest: free failed: {err}"),
        }
    }
}

/// Check one allocated block: aligned, disjoint from the others, its pages
/// are this node's and zone's, not PageBuddy, head refcount 1, tails 0.
fn check_allocated<B: MemmapBacking>(
    memmap: &Memmap<B>,
    nid: NodeId,
    zone: ZoneType,
    pfn: Pfn,
    order: u32,
    earlier: &[(Pfn, u32)],
) -> Result<(), SelftestError> {
    let n = 1u64 << order;
    if pfn & (n - 1) != 0 {
        return Err(SelftestError::Misaligned { pfn, order });
    }
    if let Some(&(other, _)) = earlier
        .iter()
        .find(|&&(q, o)| q < pfn + n && pfn < q + (1 << o))
    {
        return Err(SelftestError::Overlap { pfn, order, other });
    }
    for q in pfn..pfn + n {
        let Some(p) = memmap.page(q) else {
            return Err(SelftestError::BadPage {
                pfn: q,
                what: "struct-page backing",
                found: PageWords::default(),
            });
        };
        let (what, ok) = if !p.links_match(q, zone, nid) {
            ("a page of the requested node and zone", false)
        } else if p.is_buddy() {
            ("an allocated page (not PageBuddy)", false)
        } else if p.is_reserved() {
            ("an allocated page (not PG_reserved)", false)
        } else if q == pfn {
            ("head refcount 1", p.refcount == 1)
        } else {
            ("tail refcount 0", p.refcount == 0)
        };
        if !ok {
            return Err(SelftestError::BadPage {
                pfn: q,
                what,
                found: PageWords::of(p),
            });
        }
    }
    Ok(())
}

/// When nothing is in flight on `nid`, on the node's highest zone with free
/// pages, allocate blocks of orders [`SELFTEST_ORDERS`] from the free lists
/// (no growth from the pool, so the counts below are exact), check them
/// (distinct, aligned, pages of this node and zone, not PageBuddy, head
/// refcount 1), free them, and check that the free-page count and the
/// per-order block counts are back where they were. `memmap` must be the
/// one `di` runs over. Nothing else may allocate from the zone meanwhile.
pub fn alloc_free_selftest<B: MemmapBacking>(
    di: &DeferredInit<'_, B>,
    memmap: &Memmap<B>,
    nid: NodeId,
) -> Result<SelftestReport, SelftestError> {
    if !di.is_node_quiescent(nid) {
        return Err(SelftestError::InFlight { nid });
    }
    let buddy = di.buddy();
    let zone = ZoneType::ALL
        .iter()
        .rev()
        .copied()
        .find(|&z| buddy.nr_free_pages(nid, z) > 0)
        .ok_or(SelftestError::NoFreeMemory { nid })?;
    let free_before = buddy.nr_free_pages(nid, zone);
    let blocks_before: [u64; NR_ORDERS] =
        core::array::from_fn(|o| buddy.nr_free_blocks(nid, zone, o as u32));
    let mut blocks: Vec<(Pfn, u32)> = Vec::with_capacity(SELFTEST_ORDERS.len());
    let mut result = Ok(());
    let mut expected_free = free_before;
    let mut skipped = Vec::new();
    for order in SELFTEST_ORDERS {
        // An order the zone has no block for cannot be asked of it; one it
        // has a block for must be served (that is what is tested).
        if (order..=MAX_ORDER).all(|o| buddy.nr_free_blocks(nid, zone, o) == 0) {
            skipped.push(order);
            continue;
        }
        let pfn = match buddy.alloc(nid, zone, order) {
            Ok(pfn) => pfn,
            Err(err) => {
                result = Err(SelftestError::Alloc { order, err });
                break;
            }
        };
        let checked = check_allocated(memmap, nid, zone, pfn, order, &blocks);
        blocks.push((pfn, order));
        expected_free -= 1 << order;
        let found = buddy.nr_free_pages(nid, zone);
        result = checked.and(if found == expected_free {
            Ok(())
        } else {
            Err(SelftestError::FreeCount {
                stage: "after allocating",
                expected: expected_free,
                found,
            })
        });
        if result.is_err() {
            break;
        }
    }
    for &(pfn, order) in blocks.iter().rev() {
        if let Err(err) = buddy.free(pfn, order) {
            if result.is_ok() {
                result = Err(SelftestError::Free { err });
            }
        }
    }
    result?;
    let found = buddy.nr_free_pages(nid, zone);
    if found != free_before {
        return Err(SelftestError::FreeCount {
            stage: "after freeing",
            expected: free_before,
            found,
        });
    }
    for (o, &before) in blocks_before.iter().enumerate() {
        let after = buddy.nr_free_blocks(nid, zone, o as u32);
        if after != before {
            return Err(SelftestError::BlockCounts {
                order: o as u32,
                before,
                after,
            });
        }
    }
    Ok(SelftestReport {
        nid,
        zone,
        blocks,
        skipped,
        free_pages: free_before,
    })
}
