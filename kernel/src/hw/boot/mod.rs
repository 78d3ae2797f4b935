//! The boot, in four parts: an entry path — rust-osdev/bootloader's
//! ([`entry`]) or PVH (`hw::pvh`) — turns what it was given into a
//! [`Handoff`] ([`handoff`]) and calls [`start`]; the flow ([`flow`]) runs
//! the boot; [`finish`] ends it, whichever way, with the summary line and
//! the exit code.
//!
//! Order matters: the TSC stamp is taken first so every timestamp counts from
//! kernel entry; the serial port and exception handlers come next so that
//! anything that goes wrong afterwards is reported; then the heap is set up
//! and the command line read, silently, because it may state the TSC rate
//! (`tsc_khz=`); then the TSC rate is known (given, CPUID or PIT; stamps
//! read 0 until then), the first line printed, the options checked and the
//! firmware's view of the machine (memory map, ACPI) printed; then the
//! memory-init pipeline runs (it starts the other CPUs where its mode says).
//! The boot ends with one `memboot-summary:` JSON line and an exit code
//! through QEMU's isa-debug-exit device.

mod entry;
mod finish;
mod flow;
mod handoff;

pub use finish::{fail, fail_early};
pub use flow::start;
pub use handoff::{entry_line, handoff, keep_handoff, Entry, Handoff};
