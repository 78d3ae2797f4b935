//! Which struct page layout a boot uses: above both layouts, so that
//! `page` (the 64-byte layout and the trait) never names `page32`, which
//! builds on it.

use crate::page::{PageLayout, StructPage};
use crate::page32::StructPage32;
use crate::page8::StructPage8;

/// Which struct page layout a boot uses (`struct_page=64|32|8`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum StructPageSize {
    /// [`StructPage`]: Linux 6.1's 64 bytes.
    #[default]
    Bytes64,
    /// [`StructPage32`]: the memdesc plan's 32-byte interim step.
    Bytes32,
    /// [`StructPage8`]: the memdesc plan's end state, a type and its data.
    Bytes8,
}

impl StructPageSize {
    pub const fn bytes(self) -> u64 {
        match self {
            StructPageSize::Bytes64 => StructPage::BYTES,
            StructPageSize::Bytes32 => StructPage32::BYTES,
            StructPageSize::Bytes8 => StructPage8::BYTES,
        }
    }
    /// The layout of `bytes` bytes, if there is one.
    pub const fn of_bytes(bytes: u64) -> Option<Self> {
        match bytes {
            64 => Some(StructPageSize::Bytes64),
            32 => Some(StructPageSize::Bytes32),
            8 => Some(StructPageSize::Bytes8),
            _ => None,
        }
    }

    /// Does the layout carry a free-list link (`list_head`)? Only then can
    /// the list-based buddy allocator serve it.
    pub const fn has_list_link(self) -> bool {
        match self {
            StructPageSize::Bytes64 => StructPage::HAS_LIST_LINK,
            StructPageSize::Bytes32 => StructPage32::HAS_LIST_LINK,
            StructPageSize::Bytes8 => StructPage8::HAS_LIST_LINK,
        }
    }
}

/// Where the buddy allocator keeps its free blocks (`buddy=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BuddyStore {
    /// Doubly linked lists through the free blocks' head pages (Linux's
    /// `free_area` lists); needs a struct page with a list link.
    Lists,
    /// Per-order bitmaps out of the struct pages.
    Bitmaps,
}

impl BuddyStore {
    pub const ALL: [BuddyStore; 2] = [BuddyStore::Lists, BuddyStore::Bitmaps];

    /// The option value.
    pub const fn name(self) -> &'static str {
        match self {
            BuddyStore::Lists => "lists",
            BuddyStore::Bitmaps => "bitmaps",
        }
    }

    /// Lists where the page can hold them (Linux's allocator), else bitmaps.
    pub const fn default_for(has_list_link: bool) -> Self {
        if has_list_link {
            BuddyStore::Lists
        } else {
            BuddyStore::Bitmaps
        }
    }
}
