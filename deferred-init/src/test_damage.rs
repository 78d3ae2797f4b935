//! Damage the unit tests do to a struct page, named by what it breaks
//! rather than by field, so one test source runs at every layout.

use memmap::page::StructPage;
use memmap::page::{FlagsLayout, PageLayout, NODES_PGSHIFT};
use memmap::page32::StructPage32;
use memmap::page8::StructPage8;
use memmap::Pfn;

pub(crate) trait TestDamage: PageLayout {
    /// Make `_refcount` read `n` where the page says otherwise (at 8
    /// bytes: any non-zero count is the allocated type).
    fn set_refcount_raw(&mut self, n: i32);
    /// Make the page name another node, or (at 8 bytes, where zone and
    /// node are not stored) look never initialised.
    fn break_links(&mut self);
    /// Point the free-list link's `next` at `pfn` (list layouts only).
    fn set_next_link(&mut self, pfn: Pfn);
}

macro_rules! flags_damage {
    ($t:ty) => {
        impl TestDamage for $t {
            fn set_refcount_raw(&mut self, n: i32) {
                self.refcount = n;
            }
            fn break_links(&mut self) {
                *self.flags_mut() ^= 1 << NODES_PGSHIFT;
            }
            fn set_next_link(&mut self, pfn: Pfn) {
                self.lru_mut().next = pfn;
            }
        }
    };
}
flags_damage!(StructPage);
flags_damage!(StructPage32);

impl TestDamage for StructPage8 {
    fn set_refcount_raw(&mut self, n: i32) {
        PageLayout::set_refcount(self, n);
        if n != 0 && self.is_reserved() {
            self.memdesc = (self.memdesc & !0xf) | 12;
        }
    }
    fn break_links(&mut self) {
        self.memdesc = 0;
    }
    fn set_next_link(&mut self, _pfn: Pfn) {
        unreachable!("an 8-byte struct page has no list link; list tests skip this layout")
    }
}
