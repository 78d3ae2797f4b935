//! The hardware-independent parts of the memboot kernel, host-tested by
//! `cargo test`: ACPI table parsing, the bootloader's memory map, RAM per
//! NUMA node, the pipeline's input and its `memboot-input:`
//! line, the kernel log's ring buffer, the memory-init pipeline, the boot's
//! error model and the report formatting. The binary (`main.rs`, `hw/`)
//! supplies the hardware.
#![cfg_attr(not(any(test, feature = "host")), no_std)]

extern crate alloc;

pub mod acpi;
pub mod boot_error;
pub mod boot_input;
pub mod bootmap;
pub mod image_sizes;
pub mod logbuf;
pub mod node_ram;
pub mod pipeline;
pub mod pit_edge;
pub mod pvh_start_info;
pub mod report;
pub mod smp_error;
pub mod tsc_cpuid;
