//! Telling the host an instant of the boot: one byte
//! ([`memboot_contract::host_marker`]) on QEMU's `isa-debugcon` port, which
//! run-qemu.sh reads as it is written and samples QEMU's threads at. The
//! write is a single `out`: no lock, no wait, so any CPU may write one at
//! the instant it names. Without the device QEMU ignores the write.

use memboot_contract::host_marker::{HostMarker, PORT};
use x86_64::instructions::port::Port;

/// Write `marker` to the host.
pub fn tell(marker: HostMarker) {
    // SAFETY: port 0xe9 is QEMU's isa-debugcon when run-qemu.sh adds it
    // and unassigned otherwise; writing it changes no guest state.
    unsafe { Port::<u8>::new(PORT).write(marker.byte()) };
}
