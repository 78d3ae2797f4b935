//! `struct page`: 64 bytes of metadata per 4 KiB page frame, laid out and
//! initialised as Linux 6.1 does on x86_64.
//!
//! # Layout (`include/linux/mm_types.h`)
//! | offset | Linux field                      | here              |
//! |-------:|----------------------------------|-------------------|
//! | 0      | `unsigned long flags`            | `flags`           |
//! | 8      | `struct list_head lru`           | `lru`             |
//! | 24     | `struct address_space *mapping`  | `mapping`         |
//! | 32     | `pgoff_t index`                  | `index`           |
//! | 40     | `unsigned long private`          | `private`         |
//! | 48     | `atomic_t _mapcount` / page_type | `mapcount`        |
//! | 52     | `atomic_t _refcount`             | `refcount`        |
//! | 56     | `unsigned long memcg_data`       | `memcg_data`      |
//!
//! # Flags encoding (`include/linux/page-flags-layout.h`)
//! memboot models a `CONFIG_SPARSEMEM` x86_64 kernel with section numbers kept
//! in the flags word (`SECTION_IN_PAGE_FLAGS`), `CONFIG_NODES_SHIFT=6`, four
//! zone slots (`ZONES_SHIFT=2`), and neither NUMA balancing (no `LAST_CPUPID`
//! field) nor KASAN tags. Fields are packed from bit 63 down:
//!
//! ```text
//! 63          45 44      39 38 37 36           13 12          0
//! | section (19) | node (6) | zone | (unused)     | page flags   |
//! ```
//! `SECTIONS_SHIFT = MAX_PHYSMEM_BITS (46) - SECTION_SIZE_BITS (27) = 19`.
//! Page-flag bit numbers are those of Linux 6.1 `enum pageflags`
//! (`PG_reserved = 12`). `PG_buddy` is not a flag bit but a page type stored
//! in `_mapcount` (`PAGE_TYPE_BASE | ~PG_buddy` pattern), as in Linux 6.1.
//!
//! # `__init_single_page` (`mm/page_alloc.c`)
//! `mm_zero_struct_page`, `set_page_links(zone, nid, pfn)`, `_refcount = 1`,
//! `_mapcount = -1`, and `INIT_LIST_HEAD(&lru)` (both links point at the
//! page's own `lru` field). [`PageLayout::init_single_page`] does exactly that.

use core::fmt;

use crate::{pfn_to_section_nr, NodeId, Pfn, ZoneType};

/// Bits of the flags word holding the section number.
pub(crate) const SECTIONS_WIDTH: u32 = 19;
/// Bits holding the node id (`CONFIG_NODES_SHIFT = 6`: up to 64 nodes).
pub(crate) const NODES_WIDTH: u32 = 6;
/// Bits holding the zone number.
pub(crate) const ZONES_WIDTH: u32 = 2;
/// Shift of the section field (`SECTIONS_PGSHIFT`).
pub(crate) const SECTIONS_PGSHIFT: u32 = 64 - SECTIONS_WIDTH;
/// Shift of the node field (`NODES_PGSHIFT`).
pub const NODES_PGSHIFT: u32 = SECTIONS_PGSHIFT - NODES_WIDTH;
/// Shift of the zone field (`ZONES_PGSHIFT`).
pub(crate) const ZONES_PGSHIFT: u32 = NODES_PGSHIFT - ZONES_WIDTH;
/// Largest node id the flags word can carry.
pub const MAX_NUMNODES: u32 = 1 << NODES_WIDTH;

const SECTIONS_MASK: u64 = (1 << SECTIONS_WIDTH) - 1;
const NODES_MASK: u64 = (1 << NODES_WIDTH) - 1;
const ZONES_MASK: u64 = (1 << ZONES_WIDTH) - 1;

/// Linux 6.1 `enum pageflags` bit numbers used by memboot.
#[allow(dead_code)] // the low bits document the numbering: memboot sets `RESERVED`
pub(crate) mod pg {
    pub(crate) const LOCKED: u32 = 0;
    pub(crate) const REFERENCED: u32 = 1;
    pub(crate) const UPTODATE: u32 = 2;
    pub(crate) const DIRTY: u32 = 3;
    pub(crate) const LRU: u32 = 4;
    pub(crate) const RESERVED: u32 = 12;
    pub(crate) const PRIVATE: u32 = 13;
    /// `PG_head`: the head of a compound page.
    pub(crate) const HEAD: u32 = 16;
}

/// Page types live in `_mapcount` (Linux 6.1 `PAGE_TYPE_BASE` / `PG_buddy`):
/// a page of type T has `_mapcount == (PAGE_TYPE_BASE | ...) & !T`, i.e.
/// starting from -1 the type bit is cleared.
pub(crate) const PAGE_TYPE_BASE: u32 = 0xf000_0000;
/// `PG_buddy` page type: the page heads a free block on a buddy free list.
pub(crate) const PG_BUDDY: u32 = 0x0000_0080;

/// A doubly linked list link (`struct list_head`), holding addresses as Linux
/// does. An empty list head points at itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(C)]
pub struct ListHead {
    pub next: u64,
    pub prev: u64,
}

/// Per-page metadata, 64 bytes and cache-line aligned like Linux's `struct
/// page` with `CONFIG_HAVE_ALIGNED_STRUCT_PAGE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(C, align(64))]
pub struct StructPage {
    /// Zone, node, section and page-flag bits; see the module docs.
    pub(crate) flags: u64,
    /// List link: self-linked after init; a free list link while on a buddy list.
    pub(crate) lru: ListHead,
    /// `struct address_space *` (0: anonymous / none).
    pub mapping: u64,
    /// Offset within mapping.
    pub index: u64,
    /// Owner-private word; buddy order while on a free list (`set_buddy_order`).
    pub(crate) private: u64,
    /// `_mapcount` (−1: unmapped) or page type.
    pub(crate) mapcount: i32,
    /// `_refcount`: 1 after init, 0 while free in the buddy allocator.
    pub refcount: i32,
    /// Memory-cgroup data, always 0 here.
    pub memcg_data: u64,
}

// Linux's vmemmap arithmetic and memboot's section sizing (one 128 MiB section
// = 32768 pages × 64 B = one 2 MiB huge page of memmap) depend on this.
const _: () = assert!(core::mem::size_of::<StructPage>() == 64);
const _: () = assert!(core::mem::align_of::<StructPage>() == 64);
const _: () = assert!(core::mem::offset_of!(StructPage, lru) == 8);
const _: () = assert!(core::mem::offset_of!(StructPage, mapcount) == 48);
const _: () = assert!(core::mem::offset_of!(StructPage, memcg_data) == 56);
// `init_with_flags` writes `_mapcount` and `_refcount` as one word.
const _: () = assert!(core::mem::offset_of!(StructPage, refcount) == 52);
const _: () = assert!(cfg!(target_endian = "little"));

impl StructPage {
    /// An all-zero struct page (`mm_zero_struct_page`).
    pub(crate) const ZERO: StructPage = StructPage {
        flags: 0,
        lru: ListHead { next: 0, prev: 0 },
        mapping: 0,
        index: 0,
        private: 0,
        mapcount: 0,
        refcount: 0,
        memcg_data: 0,
    };
}

/// The first tail's word after `compound_head` in Linux 6.1's layout:
/// `compound_dtor` (`HUGETLB_PAGE_DTOR`), `compound_order`, two bytes of
/// padding, `compound_mapcount` −1.
#[inline]
pub(crate) const fn first_tail_word(order: u32) -> u64 {
    crate::hugetlb::HUGETLB_PAGE_DTOR as u64 | (order as u64 & 0xff) << 8 | (u32::MAX as u64) << 32
}

/// The flags word `set_page_links(page, zone, nid, pfn)` produces (the same
/// encoding in every layout).
#[inline]
pub const fn page_links(pfn: Pfn, zone: ZoneType, nid: NodeId) -> u64 {
    ((pfn_to_section_nr(pfn) & SECTIONS_MASK) << SECTIONS_PGSHIFT)
        | ((nid as u64 & NODES_MASK) << NODES_PGSHIFT)
        | ((zone as u64 & ZONES_MASK) << ZONES_PGSHIFT)
}

/// A struct page layout: the per-page state boot-time init, the buddy
/// allocator and verification read and write, in Linux's terms
/// (`__init_single_page`, `PG_reserved`, `_refcount`, `PageBuddy` and the
/// buddy order). Layouts differ in where that state lives and in what
/// else the page carries: the 64- and 32-byte pages keep zone, node and
/// section in a flags word ([`FlagsLayout`]) and a `list_head` the
/// list-based buddy allocator links free blocks through; the 8-byte page
/// ([`crate::page8`]) keeps only a type and its data, its zone and node
/// derived from the PFN, and no list link, so only an allocator that keeps
/// its state out of the page can serve it.
///
/// `size_of::<Self>()` is [`BYTES`](Self::BYTES), a power of two dividing
/// 2 MiB (each implementor asserts it), so a section's struct pages fill a
/// whole number of them and a 2 MiB huge page holds whole sections.
pub trait PageLayout: Copy + Send + Sync + PartialEq + fmt::Debug + 'static {
    /// Bytes per struct page.
    const BYTES: u64;
    /// The all-zero page (`mm_zero_struct_page`).
    const ZERO: Self;
    /// Does a hole page have a type of its own (else it is a reserved
    /// page, as in Linux)?
    const HOLE_TYPE: bool = false;
    /// Does the page carry a free-list link (`list_head`)?
    const HAS_LIST_LINK: bool = true;
    /// Does the page store its zone, node and section (else they are
    /// derived from the PFN, and only an uninitialised page fails
    /// [`links_match`](Self::links_match))?
    const STORES_LINKS: bool = true;
    /// `__init_single_page` with a precomputed flags word (links plus any
    /// page-flag bits, e.g. `PG_reserved`, from `page_links`) and
    /// `_refcount`, as one store of the whole page. Hot loops over one
    /// section compute `flags` once per range: the links are the same for
    /// every page of a section, zone and node. A layout that derives zone
    /// and node from the PFN keeps only what the flag bits and refcount
    /// say (reserved, allocated, or free).
    fn init_with_flags(&mut self, flags: u64, refcount: i32);
    /// [`init_with_flags`](Self::init_with_flags) on every page of `pages`
    /// (one section, zone and node). A layout whose initialised page does
    /// not depend on where it lies writes one value to all of them.
    #[inline]
    fn init_all_with_flags(pages: &mut [Self], flags: u64, refcount: i32) {
        for page in pages.iter_mut() {
            page.init_with_flags(flags, refcount);
        }
    }
    /// What the store floor (`memmap=touch`) writes for `pfn`: the PFN in
    /// the first word, everything else zero. No Linux state: it only
    /// measures the cost of one store of a whole struct page.
    fn touched(pfn: Pfn) -> Self;
    /// [`touched`](Self::touched) written to every page of `pages`, the
    /// first page's PFN `start_pfn`: the store floor's loop, out of line in
    /// the section kernel/linker.ld keeps within one 4 KiB page with the
    /// layouts' `init_all_with_flags`.
    #[inline(never)]
    #[unsafe(link_section = ".text.struct_page_loops")]
    fn touch_all(pages: &mut [Self], start_pfn: Pfn) {
        for (pfn, page) in (start_pfn..).zip(pages.iter_mut()) {
            *page = Self::touched(pfn);
        }
    }
    /// True when the page was initialised for `(pfn, zone, nid)`: its link
    /// bits match, or, in a layout that derives zone and node from the
    /// PFN, it has a type init writes.
    fn links_match(&self, pfn: Pfn, zone: ZoneType, nid: NodeId) -> bool;
    /// `_refcount`: 1 after init (and on reserved pages and allocated
    /// heads), 0 while free in the buddy allocator.
    fn refcount(&self) -> i32;
    fn set_refcount(&mut self, refcount: i32);
    /// `PageReserved` (holes included: Linux marks them reserved).
    fn is_reserved(&self) -> bool;
    /// `__SetPageReserved`.
    fn set_reserved(&mut self);
    /// `__ClearPageReserved`.
    fn clear_reserved(&mut self);
    /// Mark an initialised page as a hole (`init_unavailable_range`):
    /// reserved, with the hole type where the layout has one.
    #[inline]
    fn set_hole(&mut self) {
        self.set_reserved();
    }
    /// Is the page typed as a hole? (Layouts without a hole type cannot
    /// tell a hole from a reserved page: both are `PG_reserved`.)
    #[inline]
    fn is_hole(&self) -> bool {
        self.is_reserved()
    }
    /// `PageBuddy`.
    fn is_buddy(&self) -> bool;
    /// `__SetPageBuddy` + `set_buddy_order`.
    fn set_buddy(&mut self, order: u32);
    /// `__ClearPageBuddy` + `set_page_private(page, 0)`.
    fn clear_buddy(&mut self);
    /// `buddy_order`: only meaningful when [`is_buddy`](Self::is_buddy).
    fn buddy_order(&self) -> u32;
    /// Does the page carry state none of boot's writers (init,
    /// reservation, the buddy allocator) sets?
    fn has_stray_state(&self) -> bool;
    /// The free-list link, in layouts that have one.
    fn list_link(&self) -> Option<ListHead>;
    /// The free-list link to write, in layouts that have one.
    fn list_link_mut(&mut self) -> Option<&mut ListHead>;
    /// Address of the page's list link, what `INIT_LIST_HEAD` stores, in
    /// layouts that have one.
    fn list_link_addr(&self) -> Option<u64>;
    /// The page's words as a mismatch report shows them.
    fn words(&self) -> PageWords;
    /// What `test_fault=corrupt_page` does to a page, as a stray write
    /// would: flip a node bit of the flags word, or the type of a page
    /// that has only a type. Verification's page scan must catch it.
    fn corrupt(&mut self);
    /// The head of a compound page (the 1 GiB huge pages,
    /// [`crate::hugetlb`]), as Linux 6.1's `prep_compound_gigantic_page`
    /// leaves it: initialised for `links` (from `page_links`) with
    /// `PG_head` and `_refcount` frozen at 0, one store of the whole page.
    fn prep_compound_head(&mut self, links: u64);
    /// Tail `index` (1 to 2^order − 1) of the compound page `head`,
    /// initialised for `links`: `compound_head` names the head, `_refcount`
    /// 0, no `PG_reserved`; the first tail also holds the folio's order and
    /// destructor where the layout has room. One store of the whole page,
    /// which depends on nothing but the arguments, so a check can build
    /// the expected page and compare.
    fn prep_compound_tail(&mut self, links: u64, head: crate::hugetlb::CompoundHead, index: u64);
    /// Is the page what [`prep_compound_head`](Self::prep_compound_head)
    /// wrote for `links` (its own list link aside, which must be
    /// self-linked)?
    fn is_compound_head(&self, links: u64) -> bool;

    /// Linux `__init_single_page(page, pfn, zone, nid)`: the page ends up
    /// zeroed but for its links (zone, node, section), `_refcount = 1`,
    /// `_mapcount = -1` (no page type) and a self-linked list link.
    #[inline]
    fn init_single_page(&mut self, pfn: Pfn, zone: ZoneType, nid: NodeId) {
        self.init_with_flags(page_links(pfn, zone, nid), 1);
    }
}

/// A struct page's words, for mismatch reports: the first word (flags, or
/// the 8-byte page's memdesc), `_refcount`, `_mapcount` / page type, the
/// buddy order word and the list link where the layout has them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PageWords {
    pub flags: u64,
    pub refcount: i32,
    pub mapcount: i32,
    pub private: u64,
    /// `(next, prev)`, `None` in layouts without a list link.
    pub lru: Option<(u64, u64)>,
}

impl fmt::Display for PageWords {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "refcount {} mapcount {} flags {:#x} private {:#x}",
            self.refcount, self.mapcount, self.flags, self.private
        )?;
        match self.lru {
            Some((next, prev)) => write!(f, " lru {next:#x}/{prev:#x}"),
            None => Ok(()),
        }
    }
}

/// The layouts that keep Linux's flags word (zone, node, section and page
/// flags) and a `list_head`: what the list-based buddy allocator and the
/// flag-reading checks need beyond [`PageLayout`].
pub trait FlagsLayout: PageLayout {
    fn flags(&self) -> u64;
    fn flags_mut(&mut self) -> &mut u64;
    fn lru(&self) -> ListHead;
    fn lru_mut(&mut self) -> &mut ListHead;
    /// Address of the page's list link, what `INIT_LIST_HEAD` stores.
    fn lru_addr(&self) -> u64;
    /// The word holding `_mapcount` or the page type, as an `i32` (−1:
    /// unmapped, no type).
    fn mapcount(&self) -> i32;
    /// The word holding the buddy order (Linux 6.1's `private`).
    fn private(&self) -> u64;

    /// Zone number from the flags (`page_zonenum`).
    #[inline]
    fn zone(&self) -> Option<ZoneType> {
        ZoneType::from_index((self.flags() >> ZONES_PGSHIFT) & ZONES_MASK)
    }
    /// Node id from the flags (`page_to_nid`).
    #[inline]
    fn nid(&self) -> NodeId {
        ((self.flags() >> NODES_PGSHIFT) & NODES_MASK) as NodeId
    }
    /// Section number from the flags (`page_to_section`).
    #[inline]
    fn section_nr(&self) -> u64 {
        (self.flags() >> SECTIONS_PGSHIFT) & SECTIONS_MASK
    }
    #[inline]
    fn test_flag(&self, bit: u32) -> bool {
        self.flags() & (1 << bit) != 0
    }
}

/// The [`FlagsLayout`] accessors of a page with `flags` and `lru` fields.
macro_rules! flags_layout_fields {
    () => {
        #[inline]
        fn flags(&self) -> u64 {
            self.flags
        }
        #[inline]
        fn flags_mut(&mut self) -> &mut u64 {
            &mut self.flags
        }
        #[inline]
        fn lru(&self) -> ListHead {
            self.lru
        }
        #[inline]
        fn lru_mut(&mut self) -> &mut ListHead {
            &mut self.lru
        }
        #[inline]
        fn lru_addr(&self) -> u64 {
            &self.lru as *const ListHead as u64
        }
    };
}
pub(crate) use flags_layout_fields;

/// The [`PageLayout`] methods every [`FlagsLayout`] implements alike, from
/// its flags word, list link and `refcount` field.
macro_rules! flags_layout_common {
    () => {
        #[inline]
        fn refcount(&self) -> i32 {
            self.refcount
        }
        #[inline]
        fn set_refcount(&mut self, refcount: i32) {
            self.refcount = refcount;
        }
        #[inline]
        fn links_match(&self, pfn: Pfn, zone: ZoneType, nid: NodeId) -> bool {
            const LINK_MASK: u64 = !((1u64 << ZONES_PGSHIFT) - 1);
            FlagsLayout::flags(self) & LINK_MASK == page_links(pfn, zone, nid)
        }
        #[inline]
        fn is_reserved(&self) -> bool {
            self.test_flag(pg::RESERVED)
        }
        #[inline]
        fn set_reserved(&mut self) {
            *self.flags_mut() |= 1 << pg::RESERVED;
        }
        #[inline]
        fn clear_reserved(&mut self) {
            *self.flags_mut() &= !(1 << pg::RESERVED);
        }
        #[inline]
        fn list_link(&self) -> Option<ListHead> {
            Some(self.lru())
        }
        #[inline]
        fn list_link_mut(&mut self) -> Option<&mut ListHead> {
            Some(self.lru_mut())
        }
        #[inline]
        fn list_link_addr(&self) -> Option<u64> {
            Some(self.lru_addr())
        }
        fn words(&self) -> PageWords {
            let lru = self.lru();
            PageWords {
                flags: FlagsLayout::flags(self),
                refcount: PageLayout::refcount(self),
                mapcount: self.mapcount(),
                private: self.private(),
                lru: Some((lru.next, lru.prev)),
            }
        }
        /// A node bit: the page now claims another node.
        fn corrupt(&mut self) {
            *self.flags_mut() ^= 1 << NODES_PGSHIFT;
        }
        #[inline]
        fn prep_compound_head(&mut self, links: u64) {
            self.init_with_flags(links | 1 << pg::HEAD, 0);
        }
        fn is_compound_head(&self, links: u64) -> bool {
            let own = self.lru_addr();
            let mut want = *self;
            want.init_with_flags(links | 1 << pg::HEAD, 0);
            *want.lru_mut() = ListHead {
                next: own,
                prev: own,
            };
            want == *self
        }
    };
}
pub(crate) use flags_layout_common;

impl FlagsLayout for StructPage {
    flags_layout_fields!();
    #[inline]
    fn mapcount(&self) -> i32 {
        self.mapcount
    }
    #[inline]
    fn private(&self) -> u64 {
        self.private
    }
}

/// [`PageLayout::init_all_with_flags`] four pages per loop turn, for the
/// layouts whose page holds its own address (`lru`): a page is a few
/// stores, and the loop's own add, compare and branch would otherwise add
/// a third to them on every page (deferred init's critical path is this
/// loop, and under TCG every guest instruction costs).
#[inline]
pub(crate) fn init_four_per_turn<P: PageLayout>(pages: &mut [P], flags: u64, refcount: i32) {
    let mut quads = pages.chunks_exact_mut(4);
    for quad in &mut quads {
        for page in quad {
            page.init_with_flags(flags, refcount);
        }
    }
    for page in quads.into_remainder() {
        page.init_with_flags(flags, refcount);
    }
}

impl PageLayout for StructPage {
    const BYTES: u64 = 64;
    const ZERO: Self = StructPage::ZERO;
    flags_layout_common!();
    #[inline]
    fn init_with_flags(&mut self, flags: u64, refcount: i32) {
        let lru = self.lru_addr();
        // flags, lru.next, lru.prev, mapping, index, private, `_mapcount`
        // −1 and `_refcount` in one word (little-endian: `_mapcount` the low
        // half), memcg_data: eight 8-byte stores, where the fields written
        // one by one take nine (TCG pays per store).
        let counts = (u64::from(refcount as u32) << 32) | u64::from(u32::MAX);
        let words = [flags, lru, lru, 0, 0, 0, counts, 0];
        // SAFETY: `StructPage` is `repr(C)`, 64 bytes of integer fields at
        // the asserted offsets without padding, so any eight words are a
        // valid one; `self` is a unique, aligned reference to one.
        unsafe { (self as *mut StructPage).cast::<[u64; 8]>().write(words) };
    }
    // The per-page store loop, out of line in a section that
    // kernel/linker.ld keeps within one 4 KiB page (why: there).
    #[inline(never)]
    #[unsafe(link_section = ".text.struct_page_loops")]
    fn init_all_with_flags(pages: &mut [Self], flags: u64, refcount: i32) {
        init_four_per_turn(pages, flags, refcount);
    }
    #[inline]
    fn touched(pfn: Pfn) -> Self {
        StructPage {
            flags: pfn,
            ..StructPage::ZERO
        }
    }
    /// The page type bit is cleared in `_mapcount`.
    #[inline]
    fn is_buddy(&self) -> bool {
        (self.mapcount as u32 & (PAGE_TYPE_BASE | PG_BUDDY)) == PAGE_TYPE_BASE
    }
    #[inline]
    fn set_buddy(&mut self, order: u32) {
        self.mapcount = (self.mapcount as u32 & !PG_BUDDY) as i32;
        self.private = order as u64;
    }
    #[inline]
    fn clear_buddy(&mut self) {
        self.mapcount = (self.mapcount as u32 | PG_BUDDY) as i32;
        self.private = 0;
    }
    #[inline]
    fn buddy_order(&self) -> u32 {
        self.private as u32
    }
    /// Linux 6.1's tail (`set_compound_head`); the first tail's union holds
    /// `compound_dtor` (byte 16), `compound_order` (17),
    /// `compound_mapcount` −1 (20), `compound_pincount` 0 (24) and
    /// `compound_nr` (28), over `lru.prev` and `mapping`.
    #[inline]
    fn prep_compound_tail(&mut self, links: u64, head: crate::hugetlb::CompoundHead, index: u64) {
        let (prev, mapping) = if index == 1 {
            (first_tail_word(head.order), (1u64 << head.order) << 32)
        } else {
            (0, 0)
        };
        *self = StructPage {
            flags: links,
            lru: ListHead {
                next: head.addr | 1,
                prev,
            },
            mapping,
            mapcount: -1,
            refcount: 0,
            ..StructPage::ZERO
        };
    }
    /// The folio/file fields boot never sets.
    #[inline]
    fn has_stray_state(&self) -> bool {
        self.mapping | self.index | self.memcg_data != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The batched init writes what page-by-page init writes, at every
    /// length around a batch (remainders 0 to 3) and in every layout:
    /// page-by-page init run again over the batch's result changes nothing
    /// (in place, as `lru` holds the page's own address), and no page is
    /// left zero.
    fn batch_matches_one_by_one<P: PageLayout>() {
        for (flags, refcount) in [(0x3_0000_1000, 0), (0x5 | 1 << pg::RESERVED, 1)] {
            for n in 0..=9 {
                let mut pages = vec![P::ZERO; n];
                P::init_all_with_flags(&mut pages, flags, refcount);
                for (i, page) in pages.iter_mut().enumerate() {
                    let batched = *page;
                    assert_ne!(batched, P::ZERO, "page {i} of {n} left zero");
                    page.init_with_flags(flags, refcount);
                    assert_eq!(batched, *page, "page {i} of {n}");
                }
            }
        }
    }

    #[test]
    fn batched_init_matches_one_by_one_in_every_layout() {
        batch_matches_one_by_one::<StructPage>();
        batch_matches_one_by_one::<crate::page32::StructPage32>();
        batch_matches_one_by_one::<crate::page8::StructPage8>();
    }

    #[test]
    fn init_with_flags_writes_every_field() {
        for refcount in [0, 1, -2, i32::MAX] {
            let mut p = StructPage {
                flags: 9,
                lru: ListHead { next: 1, prev: 2 },
                mapping: 3,
                index: 4,
                private: 5,
                mapcount: 6,
                refcount: 7,
                memcg_data: 8,
            };
            p.init_with_flags(0xabc, refcount);
            let lru = p.lru_addr();
            let want = StructPage {
                flags: 0xabc,
                lru: ListHead {
                    next: lru,
                    prev: lru,
                },
                mapping: 0,
                index: 0,
                private: 0,
                mapcount: -1,
                refcount,
                memcg_data: 0,
            };
            assert_eq!(p, want, "refcount {refcount}");
        }
    }

    #[test]
    fn init_single_page_matches_linux() {
        let mut p = StructPage::ZERO;
        p.index = 77;
        let pfn = 0x12_3456;
        p.init_single_page(pfn, ZoneType::Normal, 3);
        assert_eq!(p.refcount, 1);
        assert_eq!(p.mapcount, -1);
        assert_eq!(p.index, 0);
        assert_eq!(p.lru.next, p.lru_addr());
        assert_eq!(p.lru.prev, p.lru_addr());
        assert_eq!(p.zone(), Some(ZoneType::Normal));
        assert_eq!(p.nid(), 3);
        assert_eq!(p.section_nr(), pfn >> 15);
        assert_eq!(p.flags & 0x1fff, 0, "no page-flag bits set by init");
        assert!(p.links_match(pfn, ZoneType::Normal, 3));
        assert!(!p.links_match(pfn, ZoneType::Dma32, 3));
        assert!(!p.is_buddy());
    }

    #[test]
    fn flag_fields_do_not_overlap() {
        let all = page_links(u64::MAX >> 12, ZoneType::Normal, MAX_NUMNODES - 1);
        assert_eq!(all >> ZONES_PGSHIFT << ZONES_PGSHIFT, all);
        const { assert!(ZONES_PGSHIFT > pg::PRIVATE) };
    }

    #[test]
    fn buddy_type_roundtrip() {
        let mut p = StructPage::ZERO;
        p.init_single_page(5, ZoneType::Dma, 0);
        p.set_buddy(7);
        assert!(p.is_buddy());
        assert_eq!(p.buddy_order(), 7);
        assert_eq!(p.mapcount as u32, 0xffff_ff7f);
        p.clear_buddy();
        assert!(!p.is_buddy());
        assert_eq!(p.mapcount, -1);
    }

    #[test]
    fn reserved_flag() {
        let mut p = StructPage::ZERO;
        p.init_single_page(5, ZoneType::Dma, 0);
        p.set_reserved();
        assert!(p.is_reserved());
        assert_eq!(p.flags & (1 << 12), 1 << 12);
        p.clear_reserved();
        assert!(!p.is_reserved());
    }
}
