//! The `memboot-input:` line (README "Output"): the pipeline's input, so
//! that a log replays the boot (kernel/tests). It is held back and printed
//! once, by [`print_once`], at the first of:
//!
//! * the end of the boot CPU's work alone: the pipeline's `CpuBringup::start`
//!   (after memory is ready with `memmap=ondemand`, before the eager phase
//!   otherwise), right before the APs start;
//! * the end of the boot ([`crate::hw::boot`]'s `finish`), for a boot that
//!   failed or panicked before that, so its log can be replayed too.
//!
//! Why not before the pipeline: writing the whole input (firmware map, SRAT,
//! CPUs, heap, image) as JSON is about 1,100 instructions the boot CPU runs
//! for the first time, and under TCG every such instruction costs about a
//! microsecond to translate; before memory is ready that is ~1 ms on the
//! clock for a line nothing in memory init reads.

use core::sync::atomic::{AtomicBool, Ordering};

use memboot_kernel::boot_input::{write_input_line, BootInput};

use crate::hw::serial;

static INPUT: spin::Once<BootInput> = spin::Once::new();
static PRINTED: AtomicBool = AtomicBool::new(false);

/// Keep the boot's input for the line; the first call's input is the one
/// kept (there is one per boot).
pub fn keep(input: BootInput) -> &'static BootInput {
    INPUT.call_once(|| input)
}

/// Print the line if the input is known and it has not been printed yet.
pub fn print_once() {
    let Some(input) = INPUT.get() else {
        return;
    };
    if PRINTED.swap(true, Ordering::AcqRel) {
        return;
    }
    if let Some(Err(core::fmt::Error)) =
        serial::raw_line_with(|mut line| write_input_line(&mut line, input))
    {
        kprintln!("memboot: formatting the memboot-input line failed part-way, so the line above is cut and this log cannot be replayed; report it with this log");
    }
}
