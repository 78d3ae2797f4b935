//! Leaving QEMU through the `isa-debug-exit` device at I/O port 0xf4.
//! QEMU exits with status `(value << 1) | 1`; run-qemu.sh maps those back to
//! its documented exit codes (README "Exit codes").

use core::sync::atomic::{AtomicBool, Ordering};

use x86_64::instructions::port::Port;

/// Values written to the debug-exit port.
#[derive(Clone, Copy, Debug)]
#[repr(u32)]
pub enum ExitCode {
    /// QEMU status 33.
    Success = 0x10,
    /// QEMU status 35.
    Failure = 0x11,
}

/// Set by the first [`exit`]: a fault inside its flush (which would call
/// `exit` again) does not flush a second time.
static EXITING: AtomicBool = AtomicBool::new(false);

/// Wait until every line logged is on the wire (`serial::flush`: the log is
/// buffered, and QEMU exits the moment the port is written), then leave.
pub fn exit(code: ExitCode) -> ! {
    if !EXITING.swap(true, Ordering::SeqCst) {
        crate::hw::serial::flush();
    }
    // SAFETY: writing the debug-exit port ends the VM; without the device the
    // write is ignored and we halt below.
    unsafe { Port::<u32>::new(0xf4).write(code as u32) };
    loop {
        x86_64::instructions::interrupts::disable();
        x86_64::instructions::hlt();
    }
}
