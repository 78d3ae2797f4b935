//! COM1 (16550 UART at I/O port 0x3f8) and the dmesg-style logger on top.
//!
//! Every line gets a `[    s.micros]` stamp counted from kernel entry by
//! the TSC (see `tsc`). Until the TSC is calibrated the stamp is zero.

use core::fmt::{self, Write};

use x86_64::instructions::port::Port;

const COM1: u16 = 0x3f8;

/// A 16550 UART on I/O ports (polled, no interrupts).
pub struct Uart {
    base: u16,
}

impl Uart {
    /// Program 115200 baud 8N1 with FIFOs on.
    fn init(base: u16) -> Self {
        let out = |off: u16, v: u8| {
            // SAFETY: COM1's registers; writing them only reconfigures the UART.
            unsafe { Port::<u8>::new(base + off).write(v) }
        };
        out(1, 0x00); // interrupts off
        out(3, 0x80); // DLAB on: next two are the divisor
        out(0, 0x01); // divisor 1 = 115200 baud
        out(1, 0x00);
        out(3, 0x03); // 8 bits, no parity, one stop bit, DLAB off
        out(2, 0xc7); // FIFO on, cleared, 14-byte threshold
        out(4, 0x03); // DTR + RTS
        Self { base }
    }

    fn write_byte(&mut self, byte: u8) {
        let mut lsr = Port::<u8>::new(self.base + 5);
        let mut thr = Port::<u8>::new(self.base);
        // SAFETY: reading LSR and writing THR of COM1 have no memory effects.
        unsafe {
            while lsr.read() & 0x20 == 0 {
                core::hint::spin_loop();
            }
            thr.write(byte);
        }
    }
}

impl Write for Uart {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for b in s.bytes() {
            if b == b'\n' {
                self.write_byte(b'\r');
            }
            self.write_byte(b);
        }
        Ok(())
    }
}

static SERIAL: spin::Mutex<Option<Uart>> = spin::Mutex::new(None);

pub fn init() {
    *SERIAL.lock() = Some(Uart::init(COM1));
}

/// Write a timestamped line. Used through `kprintln!`.
pub fn log(args: fmt::Arguments) {
    let stamp = memboot_kernel::report::Timestamp(crate::hw::tsc::ns_since_entry());
    let mut guard = SERIAL.lock();
    if let Some(uart) = guard.as_mut() {
        let _ = writeln!(uart, "{stamp} {args}");
    }
}

/// Write a raw line without timestamp (the summary line is parsed by tools;
/// a stamp would be noise there, but it is kept on one line).
pub fn raw_line(args: fmt::Arguments) {
    let mut guard = SERIAL.lock();
    if let Some(uart) = guard.as_mut() {
        let _ = writeln!(uart, "{args}");
    }
}

/// For the exception and panic paths: take the UART even if the lock is held
/// by the code that faulted (it will never run again).
pub fn emergency_log(args: fmt::Arguments) {
    // SAFETY: only called on the way to exiting the VM; whoever held the lock
    // was interrupted for good, so breaking it cannot race with a live writer
    // on this single running CPU.
    unsafe { SERIAL.force_unlock() };
    log(args);
}

#[macro_export]
macro_rules! kprintln {
    ($($arg:tt)*) => { $crate::hw::serial::log(format_args!($($arg)*)) };
}
