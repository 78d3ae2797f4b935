//! The hardware-independent parts of the memboot kernel: ACPI table parsing,
//! kernel-option parsing and report formatting. They run on the host in
//! `cargo test`; the binary (`main.rs`) supplies the hardware.
#![cfg_attr(not(test), no_std)]

extern crate alloc;

pub mod acpi;
pub mod options;
pub mod report;
