//! Time: the TSC, calibrated against PIT channel 2.
//!
//! QEMU leaves CPUID leaves 0x15/0x16 empty, so the TSC frequency is measured
//! the way Linux's `pit_calibrate_tsc` does: program channel 2 in mode 0 for
//! a fixed count, gate it on through port 0x61 and count TSC cycles until
//! OUT2 (port 0x61 bit 5) rises. Several rounds; the median wins, because a
//! host preemption only ever makes one round longer.

use core::sync::atomic::{AtomicU64, Ordering};

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

fn pit_round() -> u64 {
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
        ch2.write((latch >> 8) as u8);
        let start = rdtsc();
        while ctrl.read() & 0x20 == 0 {
            core::hint::spin_loop();
        }
        rdtsc() - start
    }
}

/// Calibrate; returns TSC kHz.
pub fn calibrate() -> u64 {
    let mut rounds = [0u64; ROUNDS];
    for r in rounds.iter_mut() {
        *r = pit_round();
    }
    rounds.sort_unstable();
    let khz = rounds[ROUNDS / 2] / ROUND_MS;
    TSC_KHZ.store(khz.max(1), Ordering::Relaxed);
    khz
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
