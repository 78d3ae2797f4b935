//! Everything that touches the machine: boot entry and flow, the serial
//! port, the TSC, exceptions, fw_cfg, the local APIC and AP start-up, the
//! kernel heap, the boot report held back until memory init stops working
//! alone (firmware map, ACPI, NUMA, `memboot-input:`), the instants told
//! to the host on a debug port (`host_marker`), and the
//! implementations of the pipeline's seams (`seams/`: `Executor`, `Clock`,
//! `VmemmapMapper`, `Log`, a file each). None of
//! it runs on the host; the logic it drives lives in the `memboot_kernel`
//! library (`kernel/src/lib.rs`) and is host-tested there.

#[macro_use]
pub mod serial;
pub mod apic;
pub mod boot;
pub mod cpu;
pub mod exit;
pub mod fw_cfg;
pub mod heap;
pub mod held_report;
pub mod host_marker;
pub mod image;
pub mod interrupts;
pub mod pvh;
pub mod seams;
pub mod smp;
pub mod tlb;
pub mod tsc;
