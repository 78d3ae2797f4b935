//! The struct-page scan: every page of a PFN range against what memblock and
//! the zones say it must be (see [`super`] for the rules), read only, so CPUs
//! scan disjoint ranges at once and [`PageCheck::merge`] combines them.

use alloc::vec::Vec;
use core::fmt;

use memmap::hugetlb::{CompoundHead, GIGANTIC_NR_PAGES, GIGANTIC_ORDER};
use memmap::memblock::{Memblock, MemblockRegion, RegionFlags};
use memmap::page::page_links;
use memmap::page::PageLayout;
use memmap::store::{Memmap, MemmapBacking};
use memmap::zones::{UnavailableRange, ZoneLayout};
use memmap::{NodeId, Pfn, PfnRange, ZoneType, MAX_ORDER};

use crate::buddy::{slot, slot_key, NR_ZONES};
use crate::hugetlb_pool::{HugeCheck, PoolPage};
use memmap::NR_ORDERS;

/// How many mismatches a [`PageCheck`] or [`BuddyFailure`] keeps (all are counted).
///
/// [`BuddyFailure`]: crate::verify::BuddyFailure
pub const MAX_RECORDED_MISMATCHES: usize = 16;

const MAX_BLOCK_NR_PAGES: u64 = 1 << MAX_ORDER;

use memmap::page::PageWords;

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
    /// The head of a huge page of `order`: a 1 GiB page's
    /// (`MEMBLOCK_RSRV_NOINIT` memory) or one the huge-page pool took from
    /// the allocator.
    CompoundHead {
        nid: NodeId,
        zone: ZoneType,
        order: u32,
    },
    /// A tail of the huge page of `order` headed at `head`.
    CompoundTail {
        nid: NodeId,
        zone: ZoneType,
        head: Pfn,
        order: u32,
    },
    /// A tail beyond the kept vmemmap page of the HVO page `head`: the
    /// struct page `index` of that page, which it aliases.
    HvoAlias { head: Pfn, index: u64 },
    /// A page table HVO took from the allocator for the 2 MiB pages.
    HvoTable { nid: NodeId, zone: ZoneType },
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
            Expected::CompoundHead { nid, zone, order } => write!(
                f,
                "head of a huge page of order {order} of node {nid} zone {} (PG_head, refcount 0)",
                zone.name()
            ),
            Expected::HvoAlias { head, index } => write!(
                f,
                "a read-only alias of struct page {index} of the HVO page {head:#x} (what its vmemmap maps there)"
            ),
            Expected::CompoundTail {
                nid,
                zone,
                head,
                order,
            } => write!(
                f,
                "tail of the huge page {head:#x} of order {order} of node {nid} zone {} (compound_head, refcount 0)",
                zone.name()
            ),
            Expected::HvoTable { nid, zone } => write!(
                f,
                "a page table HVO allocated for the 2 MiB pages, of node {nid} zone {} (refcount 1, not PageBuddy, PG_reserved clear)",
                zone.name()
            ),
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
    /// A reserved memory page typed as a hole, or a hole page not typed so
    /// (layouts with a hole type only).
    HoleType,
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
    /// A page of a 1 GiB huge page that is not the compound head or tail
    /// the huge-page phase writes.
    NotCompound,
}

impl Problem {
    pub const fn describe(self) -> &'static str {
        match self {
            Problem::Unbacked => "no struct-page backing",
            Problem::UnlistedHole => "not memory and not in any unavailable range",
            Problem::WrongLinks => "section/node/zone bits wrong, or never initialised",
            Problem::StrayState => "state boot never writes (mapping/index/memcg_data, type data)",
            Problem::ReservedClear => "PG_reserved clear",
            Problem::ReservedSet => "PG_reserved set",
            Problem::HoleType => "hole type on memory, or missing on a hole",
            Problem::Refcount => "wrong refcount",
            Problem::UnexpectedBuddy => "PageBuddy set",
            Problem::NotInBlock => "free page not in any buddy block",
            Problem::BadOrder => "buddy order above MAX_ORDER",
            Problem::Misaligned => "buddy head not aligned to its order",
            Problem::BlockOutsideFree => "buddy block leaves free memory of its node/zone",
            Problem::NotCompound => "not the compound page the huge-page phase writes",
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
    /// Pages of the huge pages taken from the allocator
    /// ([`crate::hugetlb_pool::HugePool`]), and the page tables HVO took
    /// for them ([`crate::hugetlb_pool::PoolHvo`]), that passed every check.
    pub huge: u64,
}

impl ZoneCheck {
    pub(super) fn empty(s: usize) -> Self {
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
            huge: 0,
        }
    }
    fn add(&mut self, o: &ZoneCheck) {
        self.memory_pages += o.memory_pages;
        self.initialised += o.initialised;
        self.reserved += o.reserved;
        self.free += o.free;
        self.holes += o.holes;
        self.huge += o.huge;
        for (a, b) in self.heads.iter_mut().zip(&o.heads) {
            *a += b;
        }
    }
    pub(super) fn is_empty(&self) -> bool {
        self.memory_pages == 0 && self.holes == 0
    }
}

/// Result of [`verify_pages`] over one range, or merged over several.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageCheck {
    /// PFNs of present sections checked (memory and holes).
    pub pages_checked: u64,
    /// Indexed by `nid * 3 + zone`; see [`zones`](Self::zones).
    pub(super) zones: Vec<ZoneCheck>,
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
    /// `huge`: a page of a huge page, its head and order, and whether it
    /// is the pool's (taken from the allocator) rather than a reserved
    /// `MEMBLOCK_RSRV_NOINIT` 1 GiB page's.
    Memory {
        nid: NodeId,
        reserved: bool,
        huge: Option<HugeOf>,
        /// A page table HVO took from the allocator.
        table: bool,
    },
    Hole {
        nid: NodeId,
        zone: ZoneType,
    },
    UnlistedHole,
}

/// The huge page a PFN belongs to.
#[derive(Clone, Copy)]
struct HugeOf {
    head: Pfn,
    order: u32,
    pool: bool,
    /// HVO maps its vmemmap: only this many struct pages were written.
    hvo_kept: Option<u64>,
}

/// Classifies ascending PFNs with cursors into the sorted tables.
struct Classifier<'a> {
    mem: &'a [MemblockRegion],
    rsv: &'a [MemblockRegion],
    holes: &'a [UnavailableRange],
    /// The pool's huge pages, ascending, and their order.
    pool: &'a [PoolPage],
    pool_order: u32,
    hvo_kept: Option<u64>,
    pool_hvo_kept: Option<u64>,
    /// HVO's page tables, ascending.
    tables: &'a [Pfn],
    mi: usize,
    ri: usize,
    hi: usize,
    pi: usize,
    ti: usize,
}

impl<'a> Classifier<'a> {
    fn new(mb: &'a Memblock, layout: &'a ZoneLayout, huge: HugeCheck<'a>, start: Pfn) -> Self {
        let mem = mb.memory().regions();
        let rsv = mb.reserved().regions();
        let holes = layout.unavailable_ranges();
        let (pool, pool_order) = huge
            .pool
            .map_or((&[][..], 0), |h| (&h.pages[..], h.order()));
        let tables = huge.pool_hvo.map_or(&[][..], |h| h.tables);
        Self {
            mem,
            rsv,
            holes,
            pool,
            pool_order,
            hvo_kept: huge.hvo_kept_struct_pages,
            pool_hvo_kept: huge.pool_hvo.map(|h| h.kept_struct_pages),
            tables,
            mi: mem.partition_point(|r| r.pfns().end <= start),
            ri: rsv.partition_point(|r| r.pfns().end <= start),
            hi: holes.partition_point(|u| u.pfns.end <= start),
            pi: pool.partition_point(|p| p.pfn + (1 << pool_order) <= start),
            ti: tables.partition_point(|&t| t < start),
        }
    }

    /// Is `pfn` one of HVO's page tables? (ascending calls)
    #[inline]
    fn is_table(&mut self, pfn: Pfn) -> bool {
        while self.tables.get(self.ti).is_some_and(|&t| t < pfn) {
            self.ti += 1;
        }
        self.tables.get(self.ti) == Some(&pfn)
    }

    /// The pool's huge page holding `pfn`, if any (ascending calls).
    #[inline]
    fn pool_page(&mut self, pfn: Pfn) -> Option<HugeOf> {
        let nr_pages = 1u64 << self.pool_order;
        while self
            .pool
            .get(self.pi)
            .is_some_and(|p| p.pfn + nr_pages <= pfn)
        {
            self.pi += 1;
        }
        self.pool
            .get(self.pi)
            .filter(|p| p.pfn <= pfn)
            .map(|p| HugeOf {
                head: p.pfn,
                order: self.pool_order,
                pool: true,
                hvo_kept: self.pool_hvo_kept,
            })
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
                let rsv = self.rsv.get(self.ri).filter(|r| r.pfns().start <= pfn);
                let gigantic = rsv
                    .filter(|r| r.flags == RegionFlags::RSRV_NOINIT)
                    .map(|_| HugeOf {
                        head: pfn & !(GIGANTIC_NR_PAGES - 1),
                        order: GIGANTIC_ORDER,
                        pool: false,
                        hvo_kept: self.hvo_kept,
                    });
                let nid = r.nid;
                let huge = gigantic.or_else(|| self.pool_page(pfn));
                Class::Memory {
                    nid,
                    reserved: rsv.is_some(),
                    huge,
                    table: huge.is_none() && self.is_table(pfn),
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

/// First failing check of a page table HVO allocated: an order-0 page
/// held for good.
fn check_table<P: PageLayout>(p: &P, links_ok: bool) -> Result<(), Problem> {
    if !links_ok {
        Err(Problem::WrongLinks)
    } else if p.has_stray_state() {
        Err(Problem::StrayState)
    } else if p.is_reserved() {
        Err(Problem::ReservedSet)
    } else if p.refcount() != 1 {
        Err(Problem::Refcount)
    } else if p.is_buddy() {
        Err(Problem::UnexpectedBuddy)
    } else {
        Ok(())
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
    /// A page of a huge page of the pool, or a page table HVO took for
    /// them: pages the huge-page phase holds.
    Huge,
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

/// First failing check of a page that must be "reserved" (memory or hole).
#[inline]
fn check_reserved<P: PageLayout>(p: &P, links_ok: bool, hole: bool) -> Result<(), Problem> {
    if !links_ok {
        Err(Problem::WrongLinks)
    } else if p.has_stray_state() {
        Err(Problem::StrayState)
    } else if !p.is_reserved() {
        Err(Problem::ReservedClear)
    } else if P::HOLE_TYPE && p.is_hole() != hole {
        Err(Problem::HoleType)
    } else if p.refcount() != 1 {
        Err(Problem::Refcount)
    } else if p.is_buddy() {
        Err(Problem::UnexpectedBuddy)
    } else {
        Ok(())
    }
}

/// Checks common to free heads and tails (not the PageBuddy state).
#[inline]
fn check_free<P: PageLayout>(p: &P, links_ok: bool) -> Result<(), Problem> {
    if !links_ok {
        Err(Problem::WrongLinks)
    } else if p.has_stray_state() {
        Err(Problem::StrayState)
    } else if p.is_reserved() {
        Err(Problem::ReservedSet)
    } else if p.refcount() != 0 {
        Err(Problem::Refcount)
    } else {
        Ok(())
    }
}

/// Judge a free memory page outside any open block: it must head a valid
/// free block, which then becomes the open block.
fn judge_head<P: PageLayout>(
    cls: &mut Classifier<'_>,
    open: &mut Option<OpenBlock>,
    pfn: Pfn,
    p: &P,
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
    if p.buddy_order() > MAX_ORDER {
        return Err((exp, Problem::BadOrder));
    }
    let order = p.buddy_order();
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

/// Judge a page of a huge page: its head, or a tail naming it, byte for
/// byte what `memmap::hugetlb::prep_compound` writes.
fn judge_huge<B: MemmapBacking>(
    memmap: &Memmap<B>,
    pfn: Pfn,
    p: &B::Page,
    nid: NodeId,
    zone: ZoneType,
    huge: HugeOf,
) -> Result<Good, (Expected, Problem)> {
    let links = page_links(pfn, zone, nid);
    let HugeOf {
        head,
        order,
        pool,
        hvo_kept,
    } = huge;
    let (expected, ok) = if let Some(kept) = hvo_kept.filter(|&k| pfn - head >= k) {
        // HVO: a read-only alias of the kept page, whose struct page at the
        // same offset it reads as (at offset 0, the head: Linux's fake
        // head).
        let expected = Expected::HvoAlias {
            head,
            index: (pfn - head) % kept,
        };
        let ok = memmap
            .page(head + (pfn - head) % kept)
            .is_some_and(|k| *p == *k);
        (expected, ok)
    } else if head == pfn {
        (
            Expected::CompoundHead { nid, zone, order },
            p.is_compound_head(links),
        )
    } else {
        let expected = Expected::CompoundTail {
            nid,
            zone,
            head,
            order,
        };
        let ok = memmap.page(head).is_some_and(|h| {
            let head = CompoundHead {
                pfn: head,
                addr: h as *const B::Page as u64,
                order,
            };
            let mut want = B::Page::ZERO;
            want.prep_compound_tail(links, head, pfn - head.pfn);
            *p == want
        });
        (expected, ok)
    };
    match (ok, pool) {
        (true, true) => Ok(Good::Huge),
        (true, false) => Ok(Good::Reserved),
        (false, _) => Err((expected, Problem::NotCompound)),
    }
}

/// Judge one page and update the open block (whether or not the PFN is
/// counted, so that a scan's state does not depend on where it started).
#[inline]
fn judge<B: MemmapBacking>(
    memmap: &Memmap<B>,
    cls: &mut Classifier<'_>,
    open: &mut Option<OpenBlock>,
    pfn: Pfn,
    p: &B::Page,
) -> Verdict {
    let in_block = open.filter(|b| pfn < b.end);
    if in_block.is_none() {
        *open = None;
    }
    match cls.classify(pfn) {
        Class::Memory {
            nid,
            reserved,
            huge,
            table,
        } => {
            let zone = ZoneType::of_pfn(pfn);
            // An HVO alias holds the links of the kept struct page it
            // aliases, which is all Linux reads of it: checked there.
            let alias = huge.is_some_and(|h| h.hvo_kept.is_some_and(|k| pfn - h.head >= k));
            let links_ok = alias || p.links_match(pfn, zone, nid);
            let key = Some((nid, zone, true));
            let outcome = if let Some(huge) = huge {
                judge_huge(memmap, pfn, p, nid, zone, huge)
            } else if table {
                check_table(p, links_ok)
                    .map(|()| Good::Huge)
                    .map_err(|e| (Expected::HvoTable { nid, zone }, e))
            } else if reserved {
                // A valid head's block is wholly free memory, so no open
                // block covers a reserved page.
                check_reserved(p, links_ok, false)
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
                outcome: check_reserved(p, links_ok, true)
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
/// `range.start`); `huge`: the huge pages taken from the allocator, if
/// any. Merge the results of disjoint ranges with [`PageCheck::merge`].
pub fn verify_pages<B: MemmapBacking>(
    memmap: &Memmap<B>,
    mb: &Memblock,
    layout: &ZoneLayout,
    huge: HugeCheck<'_>,
    range: PfnRange,
) -> PageCheck {
    // Blocks never cross a MAX_ORDER boundary: start tracking at one.
    let start = range.start & !(MAX_BLOCK_NR_PAGES - 1);
    scan_from(memmap, mb, layout, huge, range, start)
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
///
/// [`PoolCheck::scan_ranges`]: crate::verify::PoolCheck::scan_ranges
pub fn verify_scan_range<B: MemmapBacking>(
    memmap: &Memmap<B>,
    mb: &Memblock,
    layout: &ZoneLayout,
    huge: HugeCheck<'_>,
    range: ScanRange,
) -> PageCheck {
    if range.after_pool {
        scan_from(memmap, mb, layout, huge, range.pfns, range.pfns.start)
    } else {
        verify_pages(memmap, mb, layout, huge, range.pfns)
    }
}

/// The scan of `range`, tracking open blocks from `scan_start`.
fn scan_from<B: MemmapBacking>(
    memmap: &Memmap<B>,
    mb: &Memblock,
    layout: &ZoneLayout,
    huge: HugeCheck<'_>,
    range: PfnRange,
    scan_start: Pfn,
) -> PageCheck {
    let mut out = PageCheck::new(layout);
    if range.is_empty() {
        return out;
    }
    let mut cls = Classifier::new(mb, layout, huge, scan_start);
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
                let v = judge(memmap, &mut cls, &mut open, pfn, p);
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
                        Ok(Good::Huge) => z.huge += 1,
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
                        found: p.words(),
                    });
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod huge_page_tests {
    use super::*;
    use memmap::hugetlb::{prep_gigantic, reserve_gigantic, Request};
    use memmap::memblock::MemblockConfig;
    use memmap::page::StructPage;
    use memmap::store::VecBacking;

    const GIB: u64 = 1 << 30;

    /// A 1 GiB page written by the huge-page phase passes, counted reserved;
    /// a stray write to its head or to a tail fails, naming the page.
    #[test]
    fn compound_pages_pass_and_corruption_trips() {
        let mut mb = Memblock::new(MemblockConfig::default()).unwrap();
        mb.add(0, 2 * GIB, 0).unwrap();
        mb.reserve(0, 1 << 20).unwrap();
        let huge = reserve_gigantic(&mut mb, &Request::Total(1)).unwrap();
        let page = huge.pages[0];
        let layout = ZoneLayout::new(&mb);
        let sections =
            memmap::pfn_to_section_nr(page.pfn)..memmap::pfn_to_section_nr(page.pfns().end);
        let mut mm = Memmap::new(VecBacking::<StructPage>::new(sections));
        // SAFETY: nothing else refers to the test's memmap.
        unsafe { prep_gigantic(&mm, &page) }.unwrap();
        let check = verify_pages(&mm, &mb, &layout, HugeCheck::NONE, page.pfns());
        assert!(check.is_ok(), "{check}");
        let z = check.zone(0, ZoneType::Dma32).unwrap();
        assert_eq!((z.reserved, z.free), (GIGANTIC_NR_PAGES, 0));
        for victim in [page.pfn, page.pfn + 1, page.pfn + 70_000] {
            let saved = *mm.page(victim).unwrap();
            mm.page_mut(victim).unwrap().corrupt();
            let check = verify_pages(&mm, &mb, &layout, HugeCheck::NONE, page.pfns());
            assert!(!check.is_ok());
            assert!(
                check.to_string().contains(&format!("pfn {victim:#x}")),
                "{check}"
            );
            assert!(check.to_string().contains("of order 18"), "{check}");
            *mm.page_mut(victim).unwrap() = saved;
        }
        // A tail with a refcount it should not have trips too.
        let tail = page.pfn + 5;
        mm.page_mut(tail).unwrap().set_refcount(1);
        assert!(!verify_pages(&mm, &mb, &layout, HugeCheck::NONE, page.pfns()).is_ok());
    }
}
