//! Which struct page layout a boot uses: above both layouts, so that
//! `page` (the 64-byte layout and the trait) never names `page32`, which
//! builds on it.

use crate::page::{PageLayout, StructPage};
use crate::page32::StructPage32;

/// Which struct page layout a boot uses (`struct_page=64|32`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum StructPageSize {
    /// [`StructPage`]: Linux 6.1's 64 bytes.
    #[default]
    Bytes64,
    /// [`StructPage32`]: the memdesc plan's 32-byte interim step.
    Bytes32,
}

impl StructPageSize {
    pub const fn bytes(self) -> u64 {
        match self {
            StructPageSize::Bytes64 => StructPage::BYTES,
            StructPageSize::Bytes32 => StructPage32::BYTES,
        }
    }
    /// The layout of `bytes` bytes, if there is one.
    pub const fn of_bytes(bytes: u64) -> Option<Self> {
        match bytes {
            64 => Some(StructPageSize::Bytes64),
            32 => Some(StructPageSize::Bytes32),
            _ => None,
        }
    }
}
