//! Starting APs (Intel SDM vol. 3A §8.4.4, MP spec 1.4 §B.4): each gets a
//! stack and a trampoline round, then INIT; the sender waits as Linux does
//! (`smp_quirk_init_udelay()`: nothing on modern CPUs and under a
//! hypervisor, else the MP spec's 10 ms), sends a STARTUP IPI and, unless
//! the AP has arrived by then, a second one (the AP ignores the second if
//! the first started it). The sender then waits up to
//! [`AP_ARRIVAL_TIMEOUT_MS`] for the AP to arrive in `ap_entry` and up to
//! [`AP_READY_TIMEOUT_MS`] for its setup, and checks the APIC id it reads;
//! an AP that does not arrive has its round taken back, is reported and
//! left out.

use core::alloc::Layout;
use core::sync::atomic::Ordering;

use memboot_kernel::smp_error::SmpError;

use super::percpu::{BootTiming, PerCpu};
use super::trampoline::Trampoline;
use crate::hw::{apic, tsc};

/// Each AP's kernel stack.
const AP_STACK_BYTES: usize = 64 * 1024;
/// How long the sender waits for an AP to reach `ap_entry` after the second
/// STARTUP IPI. The MP spec needs far less on hardware; under TCG on a
/// loaded host a vCPU thread can be descheduled for a while, so be generous.
pub(super) const AP_ARRIVAL_TIMEOUT_MS: u64 = 1000;
/// After arriving, how long an AP may take to set up its GDT/TSS.
pub(super) const AP_READY_TIMEOUT_MS: u64 = 5000;

fn delay_us(us: u64) {
    let end = tsc::rdtsc() + tsc::khz().max(1) * us / 1000;
    while tsc::rdtsc() < end {
        core::hint::spin_loop();
    }
}

/// Spin until `cond` or `ms` milliseconds passed; true if `cond` held.
pub(super) fn wait_for(ms: u64, cond: impl Fn() -> bool) -> bool {
    let end = tsc::rdtsc() + tsc::khz().max(1) * ms;
    loop {
        if cond() {
            return true;
        }
        if tsc::rdtsc() >= end {
            return cond();
        }
        core::hint::spin_loop();
    }
}

/// An AP's stack, owned by the CPU starting it until the AP takes it.
pub(super) struct ApStack {
    ptr: *mut u8,
}

// SAFETY: an `ApStack` is heap memory owned by whoever holds the value
// (the starting CPU until the AP claims it); nothing about it is tied to a
// CPU.
unsafe impl Send for ApStack {}

impl ApStack {
    const LAYOUT: Layout = match Layout::from_size_align(AP_STACK_BYTES, 16) {
        Ok(l) => l,
        Err(_) => panic!("AP stack layout"),
    };

    pub(super) fn new() -> Self {
        // SAFETY: non-zero-sized layout; the stack is never freed once the
        // AP took it (it runs on it forever).
        let ptr = unsafe { alloc::alloc::alloc(Self::LAYOUT) };
        if ptr.is_null() {
            alloc::alloc::handle_alloc_error(Self::LAYOUT);
        }
        Self { ptr }
    }

    pub(super) fn top(&self) -> u64 {
        self.ptr as u64 + AP_STACK_BYTES as u64
    }

    /// Give the stack back: the AP never took it.
    pub(super) fn free_unused(self) {
        // SAFETY: allocated in `new` with this layout, and the AP never
        // claimed it (its trampoline round was taken back), so nothing uses
        // it.
        unsafe { alloc::alloc::dealloc(self.ptr, Self::LAYOUT) };
    }
}

/// INIT, STARTUP, STARTUP to `apic_id` with Linux's timing
/// (`wakeup_secondary_cpu_via_init()`): the INIT wait its quirk sets, then
/// 10 µs around each STARTUP where that wait is 0, the MP spec's 300/200 µs
/// where it is not. The second STARTUP is left out once `arrived()`.
fn send_init_startup(apic_id: u32, vector: u8, arrived: impl Fn() -> bool) {
    let init_udelay = crate::hw::cpu::init_udelay_us();
    let (before_us, after_us) = if init_udelay == 0 {
        (10, 10)
    } else {
        (300, 200)
    };
    apic::send_init(apic_id);
    delay_us(init_udelay);
    for _ in 0..2 {
        delay_us(before_us);
        apic::send_startup(apic_id, vector);
        delay_us(after_us);
        if arrived() {
            break; // the first STARTUP did it; a second one would be ignored
        }
    }
}

/// Prepare `pc`'s round and send it INIT, STARTUP, STARTUP, without
/// waiting for the AP beyond the protocol's own delays.
///
/// `late` (`test_fault=late_ap`): an AP whose round was given up on before
/// it was sent anything. With `pc`'s round prepared, it is sent its IPIs
/// now and given time to reach the claim, so the race the claim protocol
/// must win (a late AP in the trampoline while another AP's round is
/// there) always happens; the line says how it ended.
pub(super) fn start_round(
    tramp: &Trampoline,
    pc: &'static PerCpu,
    stack_top: u64,
    late: Option<&'static PerCpu>,
) {
    tramp.prepare(stack_top, pc);
    if let Some(late) = late {
        let_late_ap_run(tramp, late, pc);
    }
    send_init_startup(pc.info.apic_id, tramp.vector(), || pc.has_arrived());
}

/// `test_fault=late_ap`: start `late` while `next`'s round is prepared and
/// wait until it took that round or halted at the claim.
fn let_late_ap_run(tramp: &Trampoline, late: &PerCpu, next: &PerCpu) {
    let ours = u64::from(next.info.apic_id) + 1;
    let halted_before = tramp.halted();
    send_init_startup(late.info.apic_id, tramp.vector(), || false);
    let taken = || tramp.claim_slot().load(Ordering::Acquire) != ours;
    let halted = || tramp.halted() > halted_before;
    wait_for(AP_READY_TIMEOUT_MS, || taken() || halted());
    let outcome = if taken() {
        "took"
    } else if halted() {
        "left alone"
    } else {
        "did not reach"
    };
    kprintln!(
        "smpboot: test_fault=late_ap: the late AP {outcome} the round prepared for APIC {:#x}",
        next.info.apic_id
    );
}

/// Start one AP and wait for it; `Ok(false)` if it did not come up (a
/// warning, not an error). Marks it up when it did.
fn start_ap(
    tramp: &Trampoline,
    pc: &'static PerCpu,
    late: Option<&'static PerCpu>,
) -> Result<bool, SmpError> {
    let (index, apic_id) = (pc.info.index, pc.info.apic_id);
    kprintln!(
        "smpboot: Booting Node {} Processor {index} APIC {apic_id:#x}",
        pc.info.node
    );
    let Some(stack_top) = pc.stack_top() else {
        unreachable!("an AP's record has its stack until the AP takes it");
    };
    let init_tsc = tsc::rdtsc();
    start_round(tramp, pc, stack_top, late);
    let arrived = wait_for(AP_ARRIVAL_TIMEOUT_MS, || pc.has_arrived());
    // Take the round back unless the AP claimed it: a late AP then finds 0
    // (or a later AP's id) in the claim and halts there.
    let claimed = tramp.claim_slot().swap(0, Ordering::AcqRel) == 0;
    if !(arrived || claimed && wait_for(AP_READY_TIMEOUT_MS, || pc.has_arrived())) {
        kprintln!("smpboot: CPU {index} (APIC {apic_id:#x}) did not come up");
        if claimed {
            return Err(SmpError::StackTakenNeverArrived {
                cpu: index,
                apic_id,
            });
        }
        if let Some(stack) = pc.take_stack() {
            stack.free_unused();
        }
        return Ok(false);
    }
    let seen_tsc = tsc::rdtsc();
    check_ready(pc)?;
    pc.mark_up(BootTiming {
        init_tsc,
        seen_tsc,
        ap_tsc: pc.arrived_tsc().unwrap_or(0),
    });
    kprintln!(
        "smpboot: CPU {index} (APIC {apic_id:#x}) up {} us after INIT",
        tsc::cycles_to_ns(seen_tsc - init_tsc) / 1000
    );
    Ok(true)
}

/// Wait for an AP that arrived to finish its setup, and check it reads
/// the APIC id it was started with.
pub(super) fn check_ready(pc: &PerCpu) -> Result<(), SmpError> {
    let (cpu, apic_id) = (pc.info.index, pc.info.apic_id);
    if !wait_for(AP_READY_TIMEOUT_MS, || pc.ready_apic_id().is_some()) {
        return Err(SmpError::SetupHung { cpu, apic_id });
    }
    check_apic_id(pc)
}

/// The APIC id a ready AP reads must be the one it was started with.
pub(super) fn check_apic_id(pc: &PerCpu) -> Result<(), SmpError> {
    match pc.ready_apic_id() {
        Some(reads) if reads != pc.info.apic_id => Err(SmpError::WrongApicId {
            cpu: pc.info.index,
            started: pc.info.apic_id,
            reads,
        }),
        _ => Ok(()),
    }
}

/// Start `aps` one after another (on the starter AP, or on the BSP when the
/// starter never came); an AP that does not come up is marked failed and
/// left out. `late`: see [`start_round`] (for the first of `aps`).
pub(super) fn start_rest(
    tramp: &Trampoline,
    aps: &[&'static PerCpu],
    late: Option<&'static PerCpu>,
) -> Result<(), SmpError> {
    for (i, pc) in aps.iter().enumerate() {
        let late = late.filter(|_| i == 0);
        if !start_ap(tramp, pc, late)? {
            pc.mark_failed();
        }
    }
    Ok(())
}
