//! memboot kernel entry and boot flow.
//!
//! Order matters: the TSC stamp is taken first so every timestamp counts from
//! kernel entry; the serial port and exception handlers come next so that
//! anything that goes wrong afterwards is reported; then the heap is set up
//! and the command line read, silently, because it may state the TSC rate
//! (`tsc_khz=`); then the TSC rate is known (given, CPUID or PIT; stamps
//! read 0 until then), the first line printed, the options checked and the
//! firmware's view of the machine (memory map, ACPI) printed.
//! The boot ends with one `memboot-summary:` JSON line and an exit code
//! through QEMU's isa-debug-exit device.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("memboot-kernel runs on x86_64-unknown-none only: use ./run-qemu.sh");
    std::process::exit(2);
}

#[cfg(target_os = "none")]
extern crate alloc;

#[cfg(target_os = "none")]
#[macro_use]
mod hw;
