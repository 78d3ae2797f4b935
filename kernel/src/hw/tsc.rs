//! Time: the TSC, its frequency from CPUID or calibrated against PIT
//! channel 2.
//!
//! As in Linux, the CPU is asked first: CPUID leaves 0x15, 0x16 and the
//! hypervisor timing leaf 0x40000010 (`memboot_kernel::tsc_cpuid`, through
//! `cpu`). QEMU TCG leaves those empty, so there the TSC frequency is
//! measured the way Linux's `pit_calibrate_tsc` does: program channel 2 in
//! mode 0 for a fixed count, gate it on through port 0x61 and count TSC
//! cycles until OUT2 (port 0x61 bit 5) rises. Under TCG the vCPU can be
//! descheduled by a busy host between two polls, which moves the edge we
//! see; each round therefore keeps bounds on where the edge was
//! (`memboot_kernel::pit_edge`), and the first tight round (else the
//! tightest) wins. Given `tsc_khz=` (what
//! run-qemu.sh passes under TCG, the value Linux gets as `tsc_early_khz=`),
//! nothing is asked or measured.

use core::sync::atomic::{AtomicU64, Ordering};

use memboot_kernel::pit_edge::EdgeBounds;
use memboot_kernel::tsc_cpuid::TscSource;
use x86_64::instructions::port::Port;

/// PIT input clock, Hz.
const PIT_HZ: u64 = 1_193_182;
/// One calibration round: 10 ms.
const ROUND_MS: u64 = 10;
const ROUNDS: usize = 5;

static ENTRY_TSC: AtomicU64 = AtomicU64::new(0);
/// TSC cycles per millisecond (kHz); 0 until calibrated.
static TSC_KHZ: AtomicU64 = AtomicU64::new(0);

#[inline]
pub fn rdtsc() -> u64 {
    // SAFETY: RDTSC has no side effects; CR4.TSD is clear in ring 0 anyway.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Remember the kernel-entry TSC: timestamps count from here.
pub fn mark_entry() {
    ENTRY_TSC.store(rdtsc(), Ordering::Relaxed);
}

/// The TSC at kernel entry: cycles since the VM's reset.
pub fn entry_tsc() -> u64 {
    ENTRY_TSC.load(Ordering::Relaxed)
}

/// One PIT interval as bounds on its length in TSC cycles: the count starts
/// between the two TSC reads around the write that arms it, and ends where
/// [`EdgeBounds`] puts OUT2's rise among the polls.
fn pit_round() -> (u64, u64) {
    let latch = PIT_HZ * ROUND_MS / 1000;
    let mut ctrl = Port::<u8>::new(0x61);
    let mut cmd = Port::<u8>::new(0x43);
    let mut ch2 = Port::<u8>::new(0x42);
    // SAFETY: PIT channel 2 and port 0x61 drive only the PC speaker gate,
    // which nothing else in memboot uses.
    unsafe {
        let v = ctrl.read();
        ctrl.write((v & !0x02) | 0x01); // gate on, speaker off
        cmd.write(0b1011_0000); // channel 2, lobyte/hibyte, mode 0, binary
        ch2.write((latch & 0xff) as u8);
        let before_start = rdtsc();
        ch2.write((latch >> 8) as u8); // counting starts with the high byte
        let after_start = rdtsc();
        let mut edge = EdgeBounds::new(after_start);
        let mut before_poll = after_start;
        loop {
            let high = ctrl.read() & 0x20 != 0;
            let now = rdtsc();
            if let Some((lo, hi)) = edge.poll(before_poll, high, now) {
                return (lo - after_start, hi - before_start);
            }
            before_poll = now;
        }
    }
}

/// The TSC frequency this boot uses and where it came from.
#[derive(Clone, Copy, Debug)]
pub struct Calibration {
    pub khz: u64,
    pub source: TscSource,
    /// How far the true rate may be from `khz`, in parts per million: the
    /// PIT interval's bounds; 0 for a rate CPUID or the command line states.
    pub uncertainty_ppm: u64,
    /// False when no PIT interval was within 0.1% (always true otherwise).
    pub tight: bool,
}

/// Set the TSC frequency: `given` (the `tsc_khz=` option) if set, else
/// from CPUID if a leaf announces it, else by PIT calibration; from here on
/// timestamps and delays use it.
pub fn calibrate(given: Option<u64>) -> Calibration {
    let stated = |khz, source| Calibration {
        khz,
        source,
        uncertainty_ppm: 0,
        tight: true,
    };
    let found = match given {
        Some(khz) => stated(khz, TscSource::Option),
        None => match crate::hw::cpu::tsc_khz_from_cpuid() {
            Some((khz, source)) => stated(khz, source),
            None => pit_calibrate(),
        },
    };
    TSC_KHZ.store(found.khz, Ordering::Relaxed);
    found
}

/// A PIT interval is good enough once its bounds are within this many ppm
/// of its length: 0.1 %, about one poll of port 0x61 (an I/O exit under
/// TCG) in a 10 ms interval.
const TIGHT_PPM: u64 = 1000;

/// Calibrate against the PIT.
///
/// Under TCG a busy host can deschedule the vCPU between two polls, so a
/// round's edge is only known to lie between two reads. Rounds run until
/// one has bounds within [`TIGHT_PPM`] (on a quiet host the first does:
/// 10 ms, not ROUNDS × 10 ms, as Linux's quick PIT calibration exits as
/// soon as it is accurate enough), else the tightest of ROUNDS wins; its
/// midpoint is used and half its bounds' width is the uncertainty.
fn pit_calibrate() -> Calibration {
    let ppm_of = |(lo, hi): (u64, u64)| (hi - lo) * 1_000_000 / (lo + (hi - lo) / 2).max(1);
    let mut best = pit_round();
    for _ in 1..ROUNDS {
        if ppm_of(best) <= TIGHT_PPM {
            break;
        }
        let r = pit_round();
        if r.1 - r.0 < best.1 - best.0 {
            best = r;
        }
    }
    let (lo, hi) = best;
    let cycles = lo + (hi - lo) / 2;
    Calibration {
        khz: (cycles / ROUND_MS).max(1),
        source: TscSource::Pit,
        uncertainty_ppm: ppm_of(best).div_ceil(2),
        tight: ppm_of(best) <= TIGHT_PPM,
    }
}

pub fn khz() -> u64 {
    TSC_KHZ.load(Ordering::Relaxed)
}

/// Convert a TSC delta to ns (0 before calibration).
pub fn cycles_to_ns(cycles: u64) -> u64 {
    match khz() {
        0 => 0,
        khz => (cycles as u128 * 1_000_000 / khz as u128) as u64,
    }
}

/// Nanoseconds since kernel entry.
pub fn ns_since_entry() -> u64 {
    cycles_to_ns(rdtsc().saturating_sub(ENTRY_TSC.load(Ordering::Relaxed)))
}
