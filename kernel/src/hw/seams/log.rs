//! The pipeline's `Log` on real hardware: the serial console.

use core::fmt;

use memboot_kernel::pipeline::seams::Log;

/// The serial console, one stamped line per call.
pub struct SerialLog;

impl Log for SerialLog {
    fn line(&self, args: fmt::Arguments<'_>) {
        kprintln!("{args}");
    }

    fn memory_ready(&self) {
        crate::hw::interrupts::note_memory_ready();
        crate::hw::serial::memory_ready();
    }
}
