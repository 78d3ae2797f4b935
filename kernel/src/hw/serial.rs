//! COM1 (16550 UART at I/O port 0x3f8, driven by the `uart_16550` crate)
//! and the dmesg-style logger on top.
//!
//! Every line gets a `[    s.micros]` stamp counted from kernel entry by
//! the TSC (see `tsc`): the time the line was *logged*. Until the TSC is
//! calibrated the stamp is zero.
//!
//! # Off the critical path
//!
//! Logging a line only appends it to an in-memory ring
//! (`memboot_kernel::logbuf`, [`RING_BYTES`]); under TCG each UART byte
//! costs ~1.2 µs, so writing it out at once would put every byte on the
//! logging CPU's path. The bytes reach the UART later, written by one CPU at
//! a time (the ring's consumer lock), in order:
//!
//! * an **idle AP**, the printer, writes them from its idle loop
//!   ([`print_some`], called by `smp`'s mailbox loop between jobs),
//!   [`PRINT_CHUNK`] bytes at a time so a job posted meanwhile waits at
//!   most one FIFO's worth, once memory is ready ([`memory_ready`], called
//!   by the pipeline): until then it halts like the other idle APs;
//! * a **logging CPU whose ring is full** writes bytes out itself (or waits
//!   for the AP that is writing): nothing is ever dropped;
//! * in **direct mode** ([`set_direct`]: the kernel option `console=direct`,
//!   from the moment the command line is read; or no AP will print, i.e. one
//!   CPU, or the AP that was to come never did) every line is written out by
//!   the CPU that logged it, as soon as it is logged. Otherwise, until
//!   memory is ready, lines are only buffered, stamped when logged: under
//!   TCG a vCPU writing the UART takes host time from the others (with the
//!   AP printing during memory init, the boot CPU ran code it had not run
//!   before about 3x slower; in a 16-vCPU boot whose memory init is all on
//!   the boot CPU the printer took a fifth to a third of QEMU's CPU time).
//!   A boot that hangs in memory init therefore shows nothing until QEMU
//!   is killed; `console=direct` shows every line as it is logged;
//! * the **emergency path** (panic, exception: [`emergency_log`]) and the
//!   **exit path** ([`flush`], called by `exit`) stop the APs' printing and
//!   write everything buffered out, on the CPU that is ending the boot,
//!   before the last message and before QEMU is told to exit.
//!
//! The writes themselves use `send_bytes_exact`, which fills the 16-byte
//! transmit FIFO per THR-empty poll instead of polling the line status
//! register once per byte.

use core::fmt::{self, Write};
use core::sync::atomic::{fence, AtomicBool, AtomicU32, Ordering};

use memboot_kernel::logbuf::{Consumer, LineWriter, LogRing, Producer};
use memboot_kernel::report::Timestamp;
use uart_16550::backend::PioBackend;
use uart_16550::spec::registers::LSR;
use uart_16550::{BaudRate, Config, Uart16550};

use crate::hw::tsc;

const COM1: u16 = 0x3f8;
/// The log ring: holds everything a boot logs before its APs print, so
/// the boot CPU writes nothing to the UART itself: with the largest
/// command line memboot takes (`memmap=` forms for 8192 regions, about
/// 200 KB), its echo, the `memboot-input:` line that carries it again and
/// the user map's 8192 lines (74 bytes each, 600 KB) come to about 1 MB,
/// and the summary line to 25 KB+.
const RING_BYTES: usize = 2 << 20;
/// Bytes an idle AP writes before it looks at its mailbox again: one FIFO.
pub const PRINT_CHUNK: usize = 16;
/// How long the exit and emergency paths wait for the CPU that is writing
/// (at most one chunk, microseconds) before they take the UART from it; it
/// only takes that long if that CPU died mid-write.
const TAKEOVER_MS: u64 = 100;

static RING: LogRing<RING_BYTES> = LogRing::new();
/// The UART; only locked by the holder of the ring's consumer side, so it
/// is never contended.
static UART: spin::Mutex<Option<Uart16550<PioBackend>>> = spin::Mutex::new(None);
/// Every line is written out by the CPU that logged it (no AP prints).
static DIRECT: AtomicBool = AtomicBool::new(false);
/// The boot is ending: APs no longer print; whoever logs writes out.
static STOPPED: AtomicBool = AtomicBool::new(false);
/// A UART answered at [`init`].
static PRESENT: AtomicBool = AtomicBool::new(false);
/// The AP that writes the log out when it has no job (its local APIC id),
/// [`NO_PRINTER`] before one is chosen.
static PRINTER: AtomicU32 = AtomicU32::new(NO_PRINTER);
const NO_PRINTER: u32 = u32::MAX;
/// The printer halted with nothing left to write out: the next line logged
/// wakes it ([`printer_may_halt`] pairs with [`wake_printer`]).
static PRINTER_HALTED: AtomicBool = AtomicBool::new(false);
/// Memory init is running: the printer keeps still (a vCPU writing the
/// UART takes host time from the ones doing memory init). Cleared once, by
/// [`memory_ready`]; [`printer_may_halt`] reads it the way it reads the
/// ring, so the same fences pair the two.
static HELD: AtomicBool = AtomicBool::new(true);

/// Program COM1 for 115200 baud 8N1 with FIFOs on (the crate's defaults
/// apart from the baud rate; interrupts stay off, the log polls).
///
/// If no UART answers (the crate's scratch-register probe fails, e.g. a
/// machine without COM1), `UART` stays `None`: lines are still buffered and
/// drained, to nowhere, so the boot goes on, and its result still reaches
/// the host through the exit code (`exit`).
pub fn init() {
    // SAFETY: ports 0x3f8..=0x3ff are COM1's registers on the PC platform;
    // nothing else in memboot touches them, and the driver is moved into
    // `UART` right below, where it lives (behind the lock) for the rest of
    // the boot, the whole lifetime `new_port` asks for.
    let Ok(mut uart) = (unsafe { Uart16550::new_port(COM1) }) else {
        return; // only for a base port whose registers would overflow
    };
    let config = Config {
        baud_rate: BaudRate::Baud115200,
        ..Config::DEFAULT
    };
    if uart.init(config).is_ok() {
        *UART.lock() = Some(uart);
        PRESENT.store(true, Ordering::Release);
    }
}

/// Hand up to `max` buffered bytes to the UART; returns how many.
fn write_out(consumer: &mut Consumer<'_, RING_BYTES>, max: usize) -> usize {
    let mut uart = UART.lock();
    consumer.drain(max, &mut |bytes| {
        if let Some(uart) = uart.as_mut() {
            uart.send_bytes_exact(bytes);
        }
    })
}

/// The producer's hook when the ring is full: write a chunk out, unless
/// another CPU is writing (then its progress makes the room).
fn make_room() {
    match RING.try_lock_consumer() {
        Some(mut c) => {
            write_out(&mut c, PRINT_CHUNK);
        }
        None => core::hint::spin_loop(),
    }
}

/// Write everything buffered out, waiting for a CPU that is writing to
/// finish its chunk (ordinary path: it is alive and will).
fn write_all_out() {
    loop {
        if let Some(mut c) = RING.try_lock_consumer() {
            write_out(&mut c, usize::MAX);
            return;
        }
        core::hint::spin_loop();
    }
}

/// Make the AP with local APIC id `apic_id` the one that writes the log out
/// when it has no job.
pub fn set_printer(apic_id: u32) {
    PRINTER.store(apic_id, Ordering::Release);
}

/// Is the AP with local APIC id `apic_id` the printer?
pub fn is_printer(apic_id: u32) -> bool {
    PRINTER.load(Ordering::Acquire) == apic_id
}

/// For the printer about to halt: may it (nothing left to write out)? It
/// says it halts before it looks at the ring, and a CPU that logs looks at
/// that after its line is in the ring ([`wake_printer`]); with a full fence
/// on each side one of the two sees the other, so a line is never left
/// unwritten while the printer sleeps.
pub fn printer_may_halt() -> bool {
    PRINTER_HALTED.store(true, Ordering::Relaxed);
    fence(Ordering::SeqCst);
    if RING.is_empty() || STOPPED.load(Ordering::Relaxed) || HELD.load(Ordering::Relaxed) {
        return true;
    }
    PRINTER_HALTED.store(false, Ordering::Relaxed);
    false
}

/// The printer woke: no wake-up is needed for the next line.
pub fn printer_awake() {
    PRINTER_HALTED.store(false, Ordering::Relaxed);
}

/// Memory is ready: the printer may write the log out from now on.
pub fn memory_ready() {
    HELD.store(false, Ordering::Relaxed);
    wake_printer();
}

/// After a line went into the ring, or the log was let go: wake the
/// printer if it halted, unless the log is still held (it would only halt
/// again: each line logged during memory init would cost it a wake-up).
/// [`memory_ready`] clears `HELD` before it calls this, so the printer is
/// woken once the log is let go.
fn wake_printer() {
    fence(Ordering::SeqCst);
    if HELD.load(Ordering::Relaxed) {
        return;
    }
    if PRINTER_HALTED.load(Ordering::Relaxed) && PRINTER_HALTED.swap(false, Ordering::Relaxed) {
        crate::hw::apic::send_wake(PRINTER.load(Ordering::Acquire));
    }
}

/// For the printer: write one chunk of the log out if there is any and
/// nobody else is writing. Returns whether it wrote something.
pub fn print_some() -> bool {
    if STOPPED.load(Ordering::Relaxed)
        || HELD.load(Ordering::Relaxed)
        || RING.is_empty()
        || RING.consumer_busy()
    {
        return false;
    }
    match RING.try_lock_consumer() {
        Some(mut c) => write_out(&mut c, PRINT_CHUNK) > 0,
        None => false,
    }
}

/// Switch to direct mode (`console=direct`, or no AP prints: one CPU, or
/// the AP that was to come did not), writing out what is buffered now.
pub fn set_direct() {
    DIRECT.store(true, Ordering::Release);
    write_all_out();
}

fn direct() -> bool {
    DIRECT.load(Ordering::Acquire) || STOPPED.load(Ordering::Acquire)
}

/// `[stamp] args` as one line, appended to the ring.
fn stamped_line(producer: &mut Producer<'_, RING_BYTES>, args: fmt::Arguments, restamp: bool) {
    let ns = tsc::ns_since_entry();
    let mut wait = make_room;
    let mut w = LineWriter::new(producer, &mut wait, restamp.then_some(ns));
    let _ = write!(w, "{} {args}", Timestamp(ns));
    w.end_line();
}

/// Write a line to the UART at once, past the ring: only for the boot's
/// first line, before anything is logged (so the order stays).
pub fn write_now(args: fmt::Arguments) {
    /// The UART as a `fmt::Write`.
    struct Now<'u>(&'u mut Uart16550<PioBackend>);
    impl Write for Now<'_> {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            self.0.send_bytes_exact(s.as_bytes());
            Ok(())
        }
    }
    if let Some(uart) = UART.lock().as_mut() {
        let _ = write!(Now(uart), "{args}\r\n");
    }
}

/// Log a timestamped line. Used through `kprintln!`.
pub fn log(args: fmt::Arguments) {
    stamped_line(&mut RING.lock_producer(), args, false);
    if direct() {
        write_all_out();
    } else {
        wake_printer();
    }
}

/// A raw line without timestamp (the summary line is parsed by tools; a
/// stamp would be noise there), written by `write` piece by piece into the
/// ring, so its length has no limit (a full ring is written out, never
/// cut). The line is ended whatever `write` returns. `None` without a UART.
pub fn raw_line_with<R>(write: impl FnOnce(&mut dyn Write) -> R) -> Option<R> {
    if !PRESENT.load(Ordering::Acquire) {
        return None;
    }
    let result = {
        let mut producer = RING.lock_producer();
        let mut wait = make_room;
        let mut w = LineWriter::new(&mut producer, &mut wait, None);
        let result = write(&mut w);
        w.end_line();
        result
    };
    if direct() {
        write_all_out();
    } else {
        wake_printer();
    }
    Some(result)
}

/// Take the consumer side for the exit or emergency path: wait for the CPU
/// that is writing to finish its chunk, and break its lock if it does not
/// within [`TAKEOVER_MS`] (it died mid-write).
fn take_consumer() -> Consumer<'static, RING_BYTES> {
    let khz = tsc::khz();
    let deadline = tsc::rdtsc().saturating_add(khz.max(1).saturating_mul(TAKEOVER_MS));
    let mut spins: u64 = 0;
    loop {
        if let Some(c) = RING.try_lock_consumer() {
            return c;
        }
        spins += 1;
        // Before calibration the TSC rate is unknown: count spins instead.
        let late = if khz == 0 {
            spins > 100_000_000
        } else {
            tsc::rdtsc() > deadline
        };
        if late {
            // SAFETY: the writer held the consumer side for far longer than
            // a chunk takes, so it is not running any more (it faulted or
            // panicked mid-write, and the boot is ending on this CPU); the
            // UART lock it may hold is broken for the same reason.
            unsafe {
                RING.force_unlock_consumer();
                UART.force_unlock();
            }
        }
        core::hint::spin_loop();
    }
}

/// Write everything buffered to the wire and wait until the UART has sent
/// it, then keep writing out directly: for the exit path (`exit`), so no
/// line is lost when QEMU exits.
pub fn flush() {
    STOPPED.store(true, Ordering::Release);
    let mut c = take_consumer();
    write_out(&mut c, usize::MAX);
    if let Some(uart) = UART.lock().as_mut() {
        while !uart.lsr().contains(LSR::TRANSMITTER_EMPTY) {
            core::hint::spin_loop();
        }
    }
}

/// For the exception and panic paths: take the log even if the code that
/// faulted held its lock (it will never run again). Everything buffered is
/// written out first, a line that code left unfinished is ended (as before
/// every line), and every line of the message gets a stamp; from here on
/// every line is written out as it is logged.
pub fn emergency_log(args: fmt::Arguments) {
    STOPPED.store(true, Ordering::Release);
    // What was logged before goes first, and the ring is empty for the
    // message (so appending it needs no room made).
    write_out(&mut take_consumer(), usize::MAX);
    // SAFETY: only called on the way to exiting the VM; whoever held the
    // producer lock was interrupted for good (this CPU faulted inside it)
    // or is an AP that will be stopped by the exit, so breaking the lock
    // loses at most the end of that CPU's line.
    unsafe { RING.force_unlock_producer() };
    stamped_line(&mut RING.lock_producer(), args, true);
    write_out(&mut take_consumer(), usize::MAX);
}

#[macro_export]
macro_rules! kprintln {
    ($($arg:tt)*) => { $crate::hw::serial::log(format_args!($($arg)*)) };
}
