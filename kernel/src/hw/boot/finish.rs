//! How a boot ends, whichever way: one `memboot-summary:` line with what
//! the boot had learnt by then and an exit code through QEMU's
//! isa-debug-exit device; the failure paths, and the panic handler.

use alloc::format;
use core::panic::PanicInfo;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use memboot_contract::options::TestFault;
use memboot_contract::summary::SUMMARY_FAILED_STATUS;
use memboot_kernel::boot_error::BootError;
use memboot_kernel::pipeline::facts::{Facts, MmFacts};
use memboot_kernel::pipeline::fault_hooks::FaultHooks;
use memboot_kernel::report::{write_summary_line, BootFacts};

use super::handoff;
use crate::hw::exit::{exit, ExitCode};
use crate::hw::heap::HEAP;
use crate::hw::{held_report, serial, smp, tsc};

/// What the summary line reports; filled in as the boot learns it, so a
/// failure part-way still reports what was known.
pub(super) struct BootFactsCell {
    pub(super) mem_bytes: AtomicU64,
    pub(super) nodes: AtomicU64,
    pub(super) cpus: AtomicU64,
    pub(super) reset_to_entry_ns: AtomicU64,
}

pub(super) static BOOT_FACTS: BootFactsCell = BootFactsCell {
    mem_bytes: AtomicU64::new(0),
    nodes: AtomicU64::new(0),
    cpus: AtomicU64::new(0),
    reset_to_entry_ns: AtomicU64::new(0),
};

/// What the memory-init pipeline measured.
pub(super) static MM_FACTS: Facts = Facts::new();

/// Calls of [`finish`] so far. The first writes the summary; a second is
/// the panic or exception handler after a fault inside the first (part of
/// its line may be on the wire, the facts lock may be held); a third is a
/// fault inside the second, which only exits.
static FINISH_CALLS: AtomicU32 = AtomicU32::new(0);

/// What the command line's `test_fault=` does where it acts, once the
/// line is read ([`NO_FAULTS`] until then).
pub(super) static FAULTS: spin::Once<FaultHooks> = spin::Once::new();
static NO_FAULTS: FaultHooks = FaultHooks::new(TestFault::None);

/// Print the summary line and leave QEMU with `code`: exit code and
/// status only when the line went out whole (`report::write_summary_line`
/// streams it, with no length limit); otherwise the cut line is ended, a
/// line says why, and a second summary with the boot facts alone and
/// status `summary` ends a failed boot.
pub(super) fn finish(status: &'static str, code: ExitCode) -> ! {
    let attempt = FINISH_CALLS.fetch_add(1, Ordering::SeqCst);
    if attempt >= 2 {
        exit(ExitCode::Failure);
    }
    let boot = BootFacts {
        mem_bytes: BOOT_FACTS.mem_bytes.load(Ordering::Relaxed),
        nodes: BOOT_FACTS.nodes.load(Ordering::Relaxed),
        cpus: BOOT_FACTS.cpus.load(Ordering::Relaxed),
        // Counted as APs come up, so a bring-up that fails part-way still
        // reports the ones that did.
        ap_online: smp::aps_online() as u64,
        tsc_khz: tsc::khz(),
        heap_bytes: HEAP.size_bytes(),
        heap_peak_bytes: HEAP.peak_bytes(),
        entry: handoff::kept().map_or("", |h| h.entry.key()),
        reset_to_entry_ns: BOOT_FACTS.reset_to_entry_ns.load(Ordering::Relaxed),
    };
    let total_ns = tsc::ns_since_entry();
    if attempt == 1 {
        // The handler that called us has printed the fault (through the
        // emergency path, which also ended the cut line); the facts may be
        // what broke the first attempt, so only the boot facts go out.
        serial::emergency_log(format_args!(
            "memboot: the boot faulted (status `{status}`) while its summary line was being written, so the summary line above may be cut: the boot fails with status `{SUMMARY_FAILED_STATUS}` and the next summary line has the boot facts only"
        ));
        summary_failed_line(total_ns, &boot);
    }
    // A boot that ended before its CPUs started has not printed its held
    // report yet; its log shows what was read and replays too.
    held_report::print_once();
    let faults = FAULTS.get().unwrap_or(&NO_FAULTS);
    // Memory-init keys are always present (zero / "none" when the boot
    // failed before memory init, or when a fault hit mid-record), so
    // parsers need no special case.
    let written = serial::raw_line_with(|line| {
        let mut line = faults.in_summary(line);
        MM_FACTS
            .with(|mm| write_summary_line(&mut line, status, total_ns, &boot, mm))
            .unwrap_or_else(|| {
                write_summary_line(&mut line, status, total_ns, &boot, &MmFacts::EMPTY)
            })
    });
    if let Some(Err(cut)) = written {
        kprintln!("memboot: {cut}");
        summary_failed_line(total_ns, &boot);
    }
    exit(code)
}

/// The summary of a boot whose first summary line did not go out whole:
/// status `summary`, memory-init facts empty; then a failure exit.
fn summary_failed_line(total_ns: u64, boot: &BootFacts) -> ! {
    let _ = serial::raw_line_with(|mut line| {
        write_summary_line(
            &mut line,
            SUMMARY_FAILED_STATUS,
            total_ns,
            boot,
            &MmFacts::EMPTY,
        )
    });
    exit(ExitCode::Failure)
}

/// Fail the boot: summary with `status` (a short failure name), failure exit.
pub fn fail(status: &'static str) -> ! {
    finish(status, ExitCode::Failure)
}

#[panic_handler]
fn panic(info: &PanicInfo) -> ! {
    serial::emergency_log(format_args!("PANIC: {info}"));
    if let Some(bytes) = HEAP.failed_bytes() {
        serial::emergency_log(format_args!(
            "heap: a {bytes}-byte allocation failed (peak use {} KiB); the heap is sized from the memory map by bootmap::heap_bytes, which is too small for this machine: report it with this log",
            HEAP.peak_bytes() >> 10
        ));
        fail("no_memory")
    }
    fail("panic")
}

/// Fail the boot before it has a heap (the entry paths' own checks): the
/// message through the emergency path, which allocates nothing.
pub fn fail_early(e: &dyn core::fmt::Display, status: &'static str) -> ! {
    serial::emergency_log(format_args!("{e}"));
    fail(status)
}

/// Fail the boot with `e`: its message, then the summary with its status.
pub(super) fn fail_with(e: BootError) -> ! {
    // What the boot had read goes first: the error may be about it.
    held_report::print_once();
    for line in format!("{e}").lines() {
        kprintln!("{line}");
    }
    fail(e.status())
}
