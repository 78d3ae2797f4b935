//! Per-node deferred struct-page initialisation (content lands with its issue).
#![cfg_attr(not(test), no_std)]

extern crate alloc;
