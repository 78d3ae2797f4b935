//! COM1 (16550 UART at I/O port 0x3f8, driven by the `uart_16550` crate)
//! and the dmesg-style logger on top.
//!
//! Every line gets a `[    s.micros]` stamp counted from kernel entry by
//! the TSC (see `tsc`). Until the TSC is calibrated the stamp is zero.
//!
//! A line is formatted into a small stack buffer (`\n` becomes `\r\n` on
//! the way in) and each full buffer goes to the UART with `send_bytes_exact`,
//! which fills the 16-byte transmit FIFO per THR-empty poll instead of
//! polling the line status register once per byte.

use core::fmt::{self, Write};

use memboot_kernel::report::Timestamp;
use uart_16550::backend::PioBackend;
use uart_16550::{BaudRate, Config, Uart16550};

const COM1: u16 = 0x3f8;
/// Bytes formatted before they are sent: most log lines fit in one buffer.
const CHUNK_BYTES: usize = 128;

/// The UART and what the logger knows about the line on the wire.
struct Console {
    uart: Uart16550<PioBackend>,
    /// Part of a line is on the wire but not its end: a writer flushed a
    /// full buffer mid-line. The emergency path ends that line first if
    /// the writer never came back (it panicked or faulted mid-line).
    mid_line: bool,
}

static SERIAL: spin::Mutex<Option<Console>> = spin::Mutex::new(None);

/// Program COM1 for 115200 baud 8N1 with FIFOs on (the crate's defaults
/// apart from the baud rate; interrupts stay off, the log polls).
///
/// If no UART answers (the crate's scratch-register probe fails, e.g. a
/// machine without COM1), `SERIAL` stays `None`: the log is silent but the
/// boot goes on, and its result still reaches the host through the exit
/// code (`exit`).
pub fn init() {
    // SAFETY: ports 0x3f8..=0x3ff are COM1's registers on the PC platform;
    // nothing else in memboot touches them, and the driver is moved into
    // `SERIAL` right below, where it lives (behind the lock) for the rest of
    // the boot, the whole lifetime `new_port` asks for.
    let Ok(mut uart) = (unsafe { Uart16550::new_port(COM1) }) else {
        return; // only for a base port whose registers would overflow
    };
    let config = Config {
        baud_rate: BaudRate::Baud115200,
        ..Config::DEFAULT
    };
    if uart.init(config).is_ok() {
        *SERIAL.lock() = Some(Console {
            uart,
            mid_line: false,
        });
    }
}

/// Formats one line into `buf`; full buffers go out as they fill.
struct LineWriter<'c> {
    console: &'c mut Console,
    buf: [u8; CHUNK_BYTES],
    len: usize,
    /// Stamp every line of a multi-line message with this many ns since
    /// entry (emergency path: a panic message spans lines, and tools only
    /// read stamped ones).
    restamp_ns: Option<u64>,
}

impl<'c> LineWriter<'c> {
    /// A new line on `console`. If the line before was left part-sent (its
    /// writer panicked or faulted mid-line), it is ended first: a line never
    /// starts in the middle of another.
    fn new(console: &'c mut Console, restamp_ns: Option<u64>) -> Self {
        if console.mid_line {
            console.uart.send_bytes_exact(b"\r\n");
            console.mid_line = false;
        }
        Self {
            console,
            buf: [0; CHUNK_BYTES],
            len: 0,
            restamp_ns,
        }
    }

    fn put(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.len == CHUNK_BYTES {
                self.flush();
            }
            let n = (CHUNK_BYTES - self.len).min(bytes.len());
            self.buf[self.len..self.len + n].copy_from_slice(&bytes[..n]);
            self.len += n;
            bytes = &bytes[n..];
        }
    }

    fn flush(&mut self) {
        if self.len > 0 {
            self.console.mid_line = true;
            self.console.uart.send_bytes_exact(&self.buf[..self.len]);
            self.len = 0;
        }
    }

    /// `\r\n` and out with the rest.
    fn end_line(mut self) {
        self.put(b"\r\n");
        self.flush();
        self.console.mid_line = false;
    }
}

impl Write for LineWriter<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut rest = s.as_bytes();
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            self.put(&rest[..nl]);
            self.put(b"\r\n");
            if let Some(ns) = self.restamp_ns {
                write!(self, "{} ", Timestamp(ns))?;
            }
            rest = &rest[nl + 1..];
        }
        self.put(rest);
        Ok(())
    }
}

/// `[stamp] args` as one line on `console`.
fn stamped_line(console: &mut Console, args: fmt::Arguments, restamp: bool) {
    let ns = crate::hw::tsc::ns_since_entry();
    let mut w = LineWriter::new(console, restamp.then_some(ns));
    let _ = write!(w, "{} {args}", Timestamp(ns));
    w.end_line();
}

/// Write a timestamped line. Used through `kprintln!`.
pub fn log(args: fmt::Arguments) {
    if let Some(console) = SERIAL.lock().as_mut() {
        stamped_line(console, args, false);
    }
}

/// A raw line without timestamp (the summary line is parsed by tools; a
/// stamp would be noise there), written by `write` piece by piece: it goes
/// out through the line buffer as it is written, so its length has no
/// limit. The line is ended whatever `write` returns. `None` without a UART.
pub fn raw_line_with<R>(write: impl FnOnce(&mut dyn Write) -> R) -> Option<R> {
    let mut serial = SERIAL.lock();
    let mut w = LineWriter::new(serial.as_mut()?, None);
    let result = write(&mut w);
    w.end_line();
    Some(result)
}

/// For the exception and panic paths: take the UART even if the lock is held
/// by the code that faulted (it will never run again). A line that code left
/// half-sent is ended first (as before every line), and every line of the
/// message gets a stamp.
pub fn emergency_log(args: fmt::Arguments) {
    // SAFETY: only called on the way to exiting the VM; whoever held the lock
    // was interrupted for good, so breaking it cannot race with a live writer
    // on this single running CPU.
    unsafe { SERIAL.force_unlock() };
    if let Some(console) = SERIAL.lock().as_mut() {
        stamped_line(console, args, true);
    }
}

#[macro_export]
macro_rules! kprintln {
    ($($arg:tt)*) => { $crate::hw::serial::log(format_args!($($arg)*)) };
}
