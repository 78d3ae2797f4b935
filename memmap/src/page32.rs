//! A 32-byte `struct page`: the memdesc plan's interim step ("halves the
//! size of memmap"), keeping in the page what the page allocator and
//! boot-time init need and moving the rest to the memory descriptor
//! (folio, slab, …) that owns an allocated page.
//!
//! # Layout
//! | offset | field        | Linux 6.1 field(s) it holds                         |
//! |-------:|--------------|-----------------------------------------------------|
//! | 0      | `flags`      | `flags` (same encoding: section, node, zone, page flags) |
//! | 8      | `lru`        | `lru` (`buddy_list`): self-linked after init, free-list links |
//! | 24     | `refcount`   | `_refcount`                                         |
//! | 28     | `page_type`  | `_mapcount` / `page_type`, and the buddy order (`private`) |
//!
//! Moved out of the page (to the memdesc of an allocated page): `mapping`,
//! `index`, `private` for its non-buddy uses, the mapcount of a mapped
//! page, and `memcg_data`. Nothing at boot sets those: init zeroes them
//! and the buddy allocator uses `private` only for the order.
//!
//! # Page type and buddy order
//! `page_type` follows Linux 6.12's encoding (`include/linux/page-flags.h`):
//! `u32::MAX` (−1, `_mapcount`'s "unmapped") means no type; a typed page
//! has the type in the top byte (`PGTY_buddy = 0xf0`) and the low 24 bits
//! free for the type's own data. A free block's order (≤ `MAX_ORDER`) goes
//! there instead of in a `private` word: sound, since only a `PageBuddy`
//! page has an order, and 24 bits hold any order.

use crate::page::{
    flags_layout_common, flags_layout_fields, page_links, pg, FlagsLayout, ListHead, PageLayout,
    PageWords, NODES_PGSHIFT, ZONES_PGSHIFT,
};
use crate::{NodeId, Pfn, ZoneType, MAX_ORDER};

/// Linux 6.12 `PGTY_buddy`: the top byte of a free block head's page type.
pub(crate) const PGTY_BUDDY: u32 = 0xf0;
/// The page type of a page with no type (`UINT_MAX`).
pub(crate) const PAGE_TYPE_NONE: u32 = u32::MAX;
/// Bits of `page_type` below the type byte, the type's data.
const PAGE_TYPE_DATA_MASK: u32 = (1 << 24) - 1;

/// Per-page metadata, 32 bytes, aligned to its size so two never share a
/// cache line's half and a 2 MiB huge page holds exactly two sections.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[repr(C, align(32))]
pub struct StructPage32 {
    /// Zone, node, section and page-flag bits; see [`crate::page`].
    pub(crate) flags: u64,
    /// List link: self-linked after init; a free list link while on a buddy list.
    pub(crate) lru: ListHead,
    /// `_refcount`: 1 after init, 0 while free in the buddy allocator.
    pub refcount: i32,
    /// The page type (top byte) and its data (the buddy order), or
    /// `PAGE_TYPE_NONE`.
    pub page_type: u32,
}

const _: () = assert!(core::mem::size_of::<StructPage32>() == 32);
const _: () = assert!(core::mem::align_of::<StructPage32>() == 32);
const _: () = assert!(core::mem::offset_of!(StructPage32, lru) == 8);
const _: () = assert!(core::mem::offset_of!(StructPage32, refcount) == 24);
const _: () = assert!(core::mem::offset_of!(StructPage32, page_type) == 28);
const _: () = assert!(cfg!(target_endian = "little"));
const _: () = assert!(MAX_ORDER <= PAGE_TYPE_DATA_MASK);

impl StructPage32 {
    pub(crate) const ZERO: StructPage32 = StructPage32 {
        flags: 0,
        lru: ListHead { next: 0, prev: 0 },
        refcount: 0,
        page_type: 0,
    };
}

impl FlagsLayout for StructPage32 {
    flags_layout_fields!();
    #[inline]
    fn mapcount(&self) -> i32 {
        self.page_type as i32
    }
    /// The type's data bits: the order of a free block head.
    #[inline]
    fn private(&self) -> u64 {
        if self.is_buddy() {
            (self.page_type & PAGE_TYPE_DATA_MASK) as u64
        } else {
            0
        }
    }
}

impl PageLayout for StructPage32 {
    const BYTES: u64 = 32;
    const ZERO: Self = StructPage32::ZERO;
    flags_layout_common!();
    #[inline]
    fn init_with_flags(&mut self, flags: u64, refcount: i32) {
        let lru = self.lru_addr();
        // `_refcount` and the page type in one word (little-endian:
        // `_refcount` the low half): four 8-byte stores, not five.
        let counts = u64::from(refcount as u32) | (u64::from(PAGE_TYPE_NONE) << 32);
        let words = [flags, lru, lru, counts];
        // SAFETY: `StructPage32` is `repr(C)`, 32 bytes of integer fields at
        // the asserted offsets without padding, so any four words are a
        // valid one; `self` is a unique, aligned reference to one.
        unsafe { (self as *mut StructPage32).cast::<[u64; 4]>().write(words) };
    }
    // The per-page store loop, out of line in a section that
    // kernel/linker.ld keeps within one 4 KiB page (why: there).
    #[inline(never)]
    #[unsafe(link_section = ".text.struct_page_loops")]
    fn init_all_with_flags(pages: &mut [Self], flags: u64, refcount: i32) {
        crate::page::init_four_per_turn(pages, flags, refcount);
    }
    #[inline]
    fn touched(pfn: Pfn) -> Self {
        StructPage32 {
            flags: pfn,
            ..StructPage32::ZERO
        }
    }
    #[inline]
    fn is_buddy(&self) -> bool {
        self.page_type >> 24 == PGTY_BUDDY
    }
    #[inline]
    fn set_buddy(&mut self, order: u32) {
        self.page_type = (PGTY_BUDDY << 24) | (order & PAGE_TYPE_DATA_MASK);
    }
    #[inline]
    fn clear_buddy(&mut self) {
        self.page_type = PAGE_TYPE_NONE;
    }
    #[inline]
    fn buddy_order(&self) -> u32 {
        self.page_type & PAGE_TYPE_DATA_MASK
    }
    /// The 64-byte tail's first 24 bytes (`compound_head`, then the first
    /// tail's destructor, order and `compound_mapcount`); `compound_pincount`
    /// and `compound_nr` have no room and move to the folio's memdesc
    /// (`compound_nr` is `1 << order`).
    #[inline]
    fn prep_compound_tail(&mut self, links: u64, head: crate::hugetlb::CompoundHead, index: u64) {
        let prev = if index == 1 {
            crate::page::first_tail_word(head.order)
        } else {
            0
        };
        *self = StructPage32 {
            flags: links,
            lru: ListHead {
                next: head.addr | 1,
                prev,
            },
            refcount: 0,
            page_type: PAGE_TYPE_NONE,
        };
    }
    /// A page with no type carries no type data either.
    #[inline]
    fn has_stray_state(&self) -> bool {
        !self.is_buddy() && self.page_type != PAGE_TYPE_NONE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page::{page_links, StructPage};
    use crate::ZoneType;

    #[test]
    fn init_single_page_keeps_what_the_64_byte_page_does() {
        let (pfn, zone, nid) = (0x12_3456, ZoneType::Normal, 3);
        let mut small = StructPage32::ZERO;
        let mut big = StructPage::ZERO;
        small.page_type = 0x1234;
        small.init_single_page(pfn, zone, nid);
        big.init_single_page(pfn, zone, nid);
        assert_eq!(small.flags, page_links(pfn, zone, nid));
        assert_eq!(small.flags, big.flags);
        assert_eq!((small.refcount, big.refcount), (1, 1));
        assert_eq!(
            small.mapcount(),
            big.mapcount,
            "untyped reads as _mapcount -1"
        );
        assert_eq!(small.lru.next, small.lru_addr());
        assert_eq!(small.lru.prev, small.lru_addr());
        assert!(!small.is_buddy() && !small.has_stray_state());
        assert_eq!((small.zone(), small.nid()), (Some(zone), nid));
    }

    #[test]
    fn init_with_flags_writes_every_field() {
        for refcount in [0, 1, -2, i32::MAX] {
            let mut p = StructPage32 {
                flags: 9,
                lru: ListHead { next: 1, prev: 2 },
                refcount: 7,
                page_type: 8,
            };
            p.init_with_flags(0xabc, refcount);
            let lru = p.lru_addr();
            let want = StructPage32 {
                flags: 0xabc,
                lru: ListHead {
                    next: lru,
                    prev: lru,
                },
                refcount,
                page_type: PAGE_TYPE_NONE,
            };
            assert_eq!(p, want, "refcount {refcount}");
        }
    }

    #[test]
    fn buddy_order_lives_in_the_page_type_data() {
        let mut p = StructPage32::ZERO;
        p.init_single_page(5, ZoneType::Dma, 0);
        for order in 0..=MAX_ORDER {
            p.set_buddy(order);
            assert!(p.is_buddy());
            assert_eq!(p.buddy_order(), order);
            assert_eq!(p.private(), order as u64);
            assert_eq!(p.page_type, 0xf000_0000 | order);
        }
        p.clear_buddy();
        assert!(!p.is_buddy());
        assert_eq!(p.page_type, u32::MAX);
        assert_eq!(p.private(), 0);
    }

    #[test]
    fn stray_type_data_is_stray_state() {
        let mut p = StructPage32::ZERO;
        p.init_single_page(5, ZoneType::Dma, 0);
        p.page_type = 0xffff_fffe;
        assert!(p.has_stray_state());
        p.set_buddy(3);
        assert!(!p.has_stray_state());
    }

    #[test]
    fn reserved_and_buddy_do_not_touch_each_other() {
        let mut p = StructPage32::ZERO;
        p.init_single_page(7, ZoneType::Dma32, 1);
        p.set_reserved();
        p.set_buddy(4);
        assert!(p.is_reserved() && p.is_buddy());
        p.clear_reserved();
        assert!(!p.is_reserved() && p.buddy_order() == 4);
        assert!(p.links_match(7, ZoneType::Dma32, 1));
    }
}
