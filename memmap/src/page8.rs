//! An 8-byte `struct page`: the memdesc plan's end state, `struct page {
//! unsigned long memdesc; }`, a 4-bit type in the low bits and the type's
//! data in the rest.
//!
//! # Layout
//! ```text
//! 63                                            4 3      0
//! | type data (60 bits)                          | type   |
//! ```
//! | type | value | data | Linux 6.1 state it stands for |
//! |---|---:|---|---|
//! | `PageType::None` | 0 | 0 | a zeroed page no init wrote (`mm_zero_struct_page`) |
//! | `PageType::Buddy` | 1 | order | `PageBuddy` head of a free block, `private` = order, `_refcount` 0 |
//! | `PageType::Allocated` | 12 | 0 | `_refcount` 1: after `__init_single_page`, and an allocated block's head |
//! | `PageType::Reserved` | 13 | 0 | `PG_reserved`, `_refcount` 1 (memblock-reserved memory) |
//! | `PageType::Hole` | 14 | 0 | `PG_reserved`, `_refcount` 1, in a hole (`init_unavailable_range`) |
//! | `PageType::Tail` | 15 | 0 | `_refcount` 0, not `PageBuddy`: a page of a block that is not its head |
//! | `PageType::CompoundHead` | 11 | order | `PG_head`, `_refcount` 0: the head of a 1 GiB huge page ([`crate::hugetlb`]); its folio fields belong to the folio's memdesc |
//! | `PageType::CompoundTail` | 10 | head PFN | `compound_head`, `_refcount` 0: a tail of one (the plan's tail points at the folio's memdesc; with none at boot, the head's PFN) |
//!
//! The plan (kernelnewbies "MatthewWilcox/Memdescs", as it read in 2024;
//! this machine cannot reach the page to pin a revision) reserves the low
//! four bits for the type, numbers `Misc` 0 and `Buddy` 1, and gives the
//! numbers after that to descriptor-backed types (file and anon folios,
//! slab, page tables, …). memboot uses the plan's `Buddy` number for a free
//! block head and numbers its own boot-time types from the top (12–15) so
//! they never collide with the plan's; type 0 with no data is the zeroed,
//! never initialised page.
//!
//! # Where Linux 6.1's fields went
//! | Linux 6.1 field | here |
//! |---|---|
//! | `flags`: zone, node, section | nowhere: derived from the PFN through the memblock/zone layout (node borders and the DMA boundary fall inside sections, so a per-section table alone would not do) |
//! | `flags`: `PG_reserved` | the `Reserved` / `Hole` types |
//! | `lru` (`buddy_list`) | nowhere: the buddy allocator keeps its free blocks out of the page (per-order bitmaps, see `deferred_init::buddy`) |
//! | `_mapcount` / page type `PG_buddy` | the `Buddy` type |
//! | `private` (buddy order) | the `Buddy` type's data |
//! | `_refcount` | 1 for `Allocated` / `Reserved` / `Hole`, 0 for `Buddy` / `Tail` (a count above 1 belongs in the owner's memdesc) |
//! | `mapping`, `index`, `memcg_data` | the memdesc of an allocated page (nothing at boot sets them) |

use crate::page::{ListHead, PageLayout, PageWords};
use crate::{NodeId, Pfn, ZoneType, MAX_ORDER};

/// Bits of the memdesc word holding the type.
pub(crate) const TYPE_BITS: u32 = 4;
const TYPE_MASK: u64 = (1 << TYPE_BITS) - 1;

/// The type in the low four bits of an 8-byte struct page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum PageType {
    None = 0,
    Buddy = 1,
    CompoundTail = 10,
    CompoundHead = 11,
    Allocated = 12,
    Reserved = 13,
    Hole = 14,
    Tail = 15,
}

impl PageType {
    const ALL: [PageType; 8] = [
        PageType::None,
        PageType::Buddy,
        PageType::CompoundTail,
        PageType::CompoundHead,
        PageType::Allocated,
        PageType::Reserved,
        PageType::Hole,
        PageType::Tail,
    ];

    /// The type of type number `n`, if memboot has one.
    pub(crate) fn of_number(n: u64) -> Option<PageType> {
        Self::ALL.into_iter().find(|t| *t as u64 == n)
    }

    const fn word(self) -> u64 {
        self as u64
    }
}

/// Per-page metadata, 8 bytes: the memdesc word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(C, align(8))]
pub struct StructPage8 {
    pub memdesc: u64,
}

const _: () = assert!(core::mem::size_of::<StructPage8>() == 8);
const _: () = assert!(core::mem::align_of::<StructPage8>() == 8);
const _: () = assert!((MAX_ORDER as u64) < (1 << (64 - TYPE_BITS)));

impl StructPage8 {
    pub(crate) const ZERO: StructPage8 = StructPage8 { memdesc: 0 };

    /// The page's type, `None` for a number memboot never writes.
    #[inline]
    pub(crate) fn page_type(&self) -> Option<PageType> {
        PageType::of_number(self.memdesc & TYPE_MASK)
    }

    #[inline]
    fn is(&self, t: PageType) -> bool {
        self.memdesc & TYPE_MASK == t.word()
    }

    #[inline]
    fn data(&self) -> u64 {
        self.memdesc >> TYPE_BITS
    }

    #[inline]
    fn set(&mut self, t: PageType) {
        self.memdesc = t.word();
    }
}

impl PageLayout for StructPage8 {
    const BYTES: u64 = 8;
    const ZERO: Self = StructPage8::ZERO;
    const HOLE_TYPE: bool = true;
    const HAS_LIST_LINK: bool = false;
    const STORES_LINKS: bool = false;

    /// Zone and node are not stored: only `PG_reserved` of `flags` and the
    /// refcount decide the type.
    #[inline]
    fn init_with_flags(&mut self, flags: u64, refcount: i32) {
        let t = if flags & (1 << crate::page::pg::RESERVED) != 0 {
            PageType::Reserved
        } else if refcount == 0 {
            PageType::Tail
        } else {
            PageType::Allocated
        };
        self.set(t);
    }
    /// One word for every page, eight stores a loop iteration: under TCG
    /// every guest instruction costs, and a store per page is the floor.
    // The per-page store loop, out of line in a section that
    // kernel/linker.ld keeps within one 4 KiB page (why: there).
    #[inline(never)]
    #[unsafe(link_section = ".text.struct_page_loops")]
    fn init_all_with_flags(pages: &mut [Self], flags: u64, refcount: i32) {
        let mut page = StructPage8::ZERO;
        page.init_with_flags(flags, refcount);
        let mut eights = pages.chunks_exact_mut(8);
        for eight in &mut eights {
            eight.copy_from_slice(&[page; 8]);
        }
        eights.into_remainder().fill(page);
    }
    #[inline]
    fn touched(pfn: Pfn) -> Self {
        StructPage8 { memdesc: pfn }
    }
    /// Any type but the zeroed page's: zone and node come from the PFN, so
    /// an initialised page cannot name the wrong ones (a type number
    /// memboot never writes is stray state, checked next).
    #[inline]
    fn links_match(&self, _pfn: Pfn, _zone: ZoneType, _nid: NodeId) -> bool {
        self.memdesc & TYPE_MASK != PageType::None.word()
    }
    #[inline]
    fn refcount(&self) -> i32 {
        let t = self.memdesc & TYPE_MASK;
        let held = t == PageType::Allocated.word()
            || t == PageType::Reserved.word()
            || t == PageType::Hole.word();
        held as i32
    }
    /// 1: an allocated head (reserved and hole pages stay so); 0: a page of
    /// a free block.
    #[inline]
    fn set_refcount(&mut self, refcount: i32) {
        if refcount == 0 {
            self.set(PageType::Tail);
        } else if !self.is_reserved() {
            self.set(PageType::Allocated);
        }
    }
    #[inline]
    fn is_reserved(&self) -> bool {
        self.is(PageType::Reserved) || self.is(PageType::Hole)
    }
    #[inline]
    fn set_reserved(&mut self) {
        self.set(PageType::Reserved);
    }
    #[inline]
    fn clear_reserved(&mut self) {
        if self.is_reserved() {
            self.set(PageType::Allocated);
        }
    }
    #[inline]
    fn set_hole(&mut self) {
        self.set(PageType::Hole);
    }
    #[inline]
    fn is_hole(&self) -> bool {
        self.is(PageType::Hole)
    }
    #[inline]
    fn is_buddy(&self) -> bool {
        self.is(PageType::Buddy)
    }
    #[inline]
    fn set_buddy(&mut self, order: u32) {
        self.memdesc = ((order as u64) << TYPE_BITS) | PageType::Buddy.word();
    }
    /// Off the free lists, the head is a page of the block like any other
    /// until its new owner types it.
    #[inline]
    fn clear_buddy(&mut self) {
        self.set(PageType::Tail);
    }
    #[inline]
    fn buddy_order(&self) -> u32 {
        self.data() as u32
    }
    /// A type number memboot never writes, data on a type without any, or
    /// a compound page's data no 1 GiB page has.
    #[inline]
    fn has_stray_state(&self) -> bool {
        match self.page_type() {
            None => true,
            Some(PageType::Buddy) => false,
            // A head's order, a tail's head: a 1 GiB page's, never PFN 0.
            Some(PageType::CompoundHead) => {
                self.data() != u64::from(crate::hugetlb::GIGANTIC_ORDER)
            }
            Some(PageType::CompoundTail) => {
                self.data() == 0
                    || !self
                        .data()
                        .is_multiple_of(crate::hugetlb::GIGANTIC_NR_PAGES)
            }
            Some(_) => self.data() != 0,
        }
    }
    #[inline]
    fn list_link(&self) -> Option<ListHead> {
        None
    }
    #[inline]
    fn list_link_mut(&mut self) -> Option<&mut ListHead> {
        None
    }
    #[inline]
    fn list_link_addr(&self) -> Option<u64> {
        None
    }
    fn words(&self) -> PageWords {
        PageWords {
            flags: self.memdesc,
            refcount: self.refcount(),
            mapcount: if self.is_buddy() { 0 } else { -1 },
            private: if self.is_buddy() { self.data() } else { 0 },
            lru: None,
        }
    }
    #[inline]
    fn prep_compound_head(&mut self, _links: u64) {
        self.memdesc = (u64::from(crate::hugetlb::GIGANTIC_ORDER) << TYPE_BITS)
            | PageType::CompoundHead.word();
    }
    #[inline]
    fn prep_compound_tail(&mut self, _links: u64, head: crate::hugetlb::CompoundHead, _index: u64) {
        self.memdesc = (head.pfn << TYPE_BITS) | PageType::CompoundTail.word();
    }
    fn is_compound_head(&self, links: u64) -> bool {
        let mut want = StructPage8::ZERO;
        want.prep_compound_head(links);
        *self == want
    }
    /// Flip the low two type bits: a tail reads as allocated, a free head
    /// as a type memboot never writes.
    fn corrupt(&mut self) {
        self.memdesc ^= 0b11;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page::{page_links, pg};

    #[test]
    fn init_types_follow_reserved_and_refcount() {
        let links = page_links(0x12_3456, ZoneType::Normal, 3);
        let mut p = StructPage8::ZERO;
        assert!(!p.links_match(0x12_3456, ZoneType::Normal, 3));
        p.init_single_page(0x12_3456, ZoneType::Normal, 3);
        assert_eq!(p.page_type(), Some(PageType::Allocated));
        assert_eq!(p.refcount(), 1);
        assert!(p.links_match(0x12_3456, ZoneType::Normal, 3));
        p.init_with_flags(links, 0);
        assert_eq!((p.page_type(), p.refcount()), (Some(PageType::Tail), 0));
        p.init_with_flags(links | 1 << pg::RESERVED, 1);
        assert!(p.is_reserved() && !p.is_hole());
        p.set_hole();
        assert!(p.is_reserved() && p.is_hole() && p.refcount() == 1);
        p.clear_reserved();
        assert_eq!(p.page_type(), Some(PageType::Allocated));
        assert!(!p.has_stray_state());
    }

    #[test]
    fn buddy_order_is_the_type_data() {
        let mut p = StructPage8::ZERO;
        p.init_single_page(5, ZoneType::Dma, 0);
        for order in 0..=MAX_ORDER {
            p.set_buddy(order);
            assert!(p.is_buddy() && !p.has_stray_state());
            assert_eq!((p.buddy_order(), p.refcount()), (order, 0));
            assert_eq!(p.memdesc, (order as u64) << 4 | 1);
        }
        p.clear_buddy();
        assert_eq!(p.page_type(), Some(PageType::Tail));
        p.set_refcount(1);
        assert_eq!(p.page_type(), Some(PageType::Allocated));
    }

    #[test]
    fn refcount_keeps_reserved_pages_reserved() {
        let mut p = StructPage8::ZERO;
        p.set_reserved();
        p.set_refcount(1);
        assert!(p.is_reserved());
        p.set_refcount(0);
        assert_eq!(p.page_type(), Some(PageType::Tail));
    }

    #[test]
    fn stray_state_is_an_unknown_type_or_data_without_a_type_that_has_any() {
        let mut p = StructPage8 {
            memdesc: PageType::Tail.word(),
        };
        assert!(!p.has_stray_state());
        p.memdesc |= 1 << 20;
        assert!(p.has_stray_state());
        for n in 2..12 {
            assert!(StructPage8 { memdesc: n }.has_stray_state(), "type {n}");
        }
    }

    #[test]
    fn corruption_changes_every_type_a_boot_leaves() {
        for t in [
            PageType::Buddy,
            PageType::Tail,
            PageType::Allocated,
            PageType::Reserved,
            PageType::Hole,
        ] {
            let mut p = StructPage8 { memdesc: t.word() };
            p.corrupt();
            assert_ne!(p.page_type(), Some(t));
        }
    }
}
