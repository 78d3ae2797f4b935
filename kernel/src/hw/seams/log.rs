//! The pipeline's `Log` on real hardware: the serial console.

use core::fmt;

use memboot_contract::host_marker::HostMarker;
use memboot_kernel::pipeline::seams::Log;

/// The serial console, one stamped line per call.
pub struct SerialLog;

impl Log for SerialLog {
    fn line(&self, args: fmt::Arguments<'_>) {
        kprintln!("{args}");
    }

    fn memory_ready(&self) {
        // First, before the printer and the APs are woken: the host
        // samples QEMU's threads the moment this marker arrives, as close
        // to memory ready as it can, and stops sampling fast.
        crate::hw::host_marker::tell(HostMarker::MemoryReady);
        crate::hw::interrupts::note_memory_ready();
        crate::hw::serial::memory_ready();
    }
}
