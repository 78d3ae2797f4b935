//! What memboot's kernel and its host tools agree on, in one place: the
//! kernel-option grammar and its conflict rules ([`options`]), the values
//! that name a layout or an algorithm ([`option_values`]), Linux's
//! `memmap=` forms ([`memmap_forms`]), Linux's huge-page parameters
//! ([`hugepage_forms`]), the
//! `memboot-summary:` line's schema ([`summary`]), the host-memory
//! model's constants ([`host_memory`]) and the instants the kernel tells
//! the host on an I/O port ([`host_marker`]). `no_std` for the kernel;
//! the `std` feature adds what the host reads with (serde).
#![cfg_attr(not(feature = "std"), no_std)]

extern crate alloc;

pub mod host_marker;
pub mod host_memory;
pub mod hugepage_forms;
pub mod json;
pub mod memmap_forms;
pub mod option_values;
pub mod options;
pub mod summary;
