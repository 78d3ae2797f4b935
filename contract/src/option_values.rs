//! The values of the options that choose a layout or an algorithm
//! (`struct_page=`, `buddy=`, `memory_block_lookup=`): named here, at the
//! bottom, so that the option parser compiles no memory-init code and the
//! crates that implement each value (`memmap`, `deferred-init`) use the
//! one name. Each implementing crate asserts that its layouts match
//! (`memmap::page_size`).

/// Which struct page layout a boot uses (`struct_page=64|32|8`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum StructPageSize {
    /// Linux 6.1's 64 bytes (`memmap::page::StructPage`).
    #[default]
    Bytes64,
    /// The memdesc plan's 32-byte interim step (`memmap::page32`).
    Bytes32,
    /// The memdesc plan's end state, a type and its data (`memmap::page8`).
    Bytes8,
}

impl StructPageSize {
    /// Bytes per struct page: the option's value.
    pub const fn bytes(self) -> u64 {
        match self {
            StructPageSize::Bytes64 => 64,
            StructPageSize::Bytes32 => 32,
            StructPageSize::Bytes8 => 8,
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
    /// the list-based buddy allocator serve it. An 8-byte page is a type
    /// and its data: no room for two pointers.
    pub const fn has_list_link(self) -> bool {
        match self {
            StructPageSize::Bytes64 | StructPageSize::Bytes32 => true,
            StructPageSize::Bytes8 => false,
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

/// How the memory-block registry finds each present section's block while
/// it registers the blocks and links them to their nodes
/// (`memory_block_lookup=`; `memmap::memory_block`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BlockLookup {
    /// One merge walk over the sorted sections and memory ranges,
    /// O(sections + blocks): what Linux's xarray (4fb6eabf1037) gives.
    #[default]
    Indexed,
    /// Linux before 4fb6eabf1037: a linear search over the blocks
    /// registered so far for every present section, to register it
    /// (`init_memory_block()` → `find_memory_block_by_id()`) and to link
    /// it (`link_mem_sections()` → `bus_find_device()`), O(sections ×
    /// blocks).
    Linear,
}

impl BlockLookup {
    pub const ALL: [BlockLookup; 2] = [BlockLookup::Indexed, BlockLookup::Linear];
    /// The kernel option's value (`memory_block_lookup=`) and summary's.
    pub const fn name(self) -> &'static str {
        match self {
            BlockLookup::Indexed => "indexed",
            BlockLookup::Linear => "linear",
        }
    }
}
