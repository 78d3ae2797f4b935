//! The struct page layouts behind `struct_page=`
//! ([`StructPageSize`], named in the contract with the other option
//! values): each value's size and list link are its layout's, checked here
//! at compile time. Above all three layouts, so that `page` (the 64-byte
//! layout and the trait) never names `page32`, which builds on it.

use memboot_contract::option_values::StructPageSize;

use crate::page::{PageLayout, StructPage};
use crate::page32::StructPage32;
use crate::page8::StructPage8;

const _: () = {
    assert!(StructPageSize::Bytes64.bytes() == StructPage::BYTES);
    assert!(StructPageSize::Bytes32.bytes() == StructPage32::BYTES);
    assert!(StructPageSize::Bytes8.bytes() == StructPage8::BYTES);
    assert!(StructPageSize::Bytes64.has_list_link() == StructPage::HAS_LIST_LINK);
    assert!(StructPageSize::Bytes32.has_list_link() == StructPage32::HAS_LIST_LINK);
    assert!(StructPageSize::Bytes8.has_list_link() == StructPage8::HAS_LIST_LINK);
};
