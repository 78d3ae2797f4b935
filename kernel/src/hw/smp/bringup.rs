//! Bring-up in the background: plan the CPUs ([`prepare_aps`]), start the
//! first AP ([`launch`]), which starts the others ([`ap_entry`]), collect
//! the result when the APs are first needed ([`wait_online`]), and remove
//! the trampoline's identity mapping at the end ([`end_bringup`]).

use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bootloader_api::info::MemoryRegion;
use memboot_kernel::acpi::AcpiInfo;
use memboot_kernel::smp_error::SmpError;
use x86_64::structures::paging::OffsetPageTable;

use super::percpu::{BootTiming, PerCpu};
use super::protocol::{
    check_apic_id, start_rest, start_round, wait_for, AP_ARRIVAL_TIMEOUT_MS, AP_READY_TIMEOUT_MS,
};
use super::scope;
use super::state::{Bringup, Smp, SMP};
use super::trampoline::{HeapFrames, Trampoline};
use crate::hw::{apic, interrupts, serial, tsc};

/// Plan every enabled AP in the MADT and publish the CPUs; touches no
/// APIC, page table or IPI (see [`launch`]). Until [`launch`] the boot
/// CPU's id is CPUID's initial APIC id ([`launch`] checks the APIC
/// agrees). `late_ap`: `test_fault=late_ap` (see [`Smp::late_ap`]).
pub fn prepare_aps(
    acpi: &AcpiInfo,
    phys_offset: u64,
    regions: &'static [MemoryRegion],
    late_ap: bool,
) {
    let bsp_apic_id = crate::hw::cpu::initial_apic_id();
    SMP.call_once(|| Smp::plan(acpi, bsp_apic_id, phys_offset, regions, late_ap));
}

/// Start the APs [`prepare_aps`] planned, in the background: set up the
/// boot CPU's local APIC and the trampoline (mappings made through
/// `tables`, the pipeline's page tables), send the starter its startup
/// IPIs and return without waiting for it. With one CPU, the boot CPU
/// starts writing the log out itself from here on. Only the first call
/// does anything.
pub fn launch(tables: &mut OffsetPageTable<'_>) -> Result<(), SmpError> {
    let Some(smp) = SMP.get() else {
        return Err(SmpError::NotPrepared);
    };
    if smp.launched.swap(true, Ordering::AcqRel) {
        return Ok(());
    }
    let t0 = tsc::rdtsc();
    let mut frames = HeapFrames {
        phys_offset: smp.phys_offset,
    };
    let mode = apic::init_bsp(smp.lapic_addr, tables, &mut frames).map_err(SmpError::Apic)?;
    kprintln!("APIC: {mode}");
    // Before any AP runs: an AP wakes the BSP when a job is done.
    interrupts::mask_legacy_pic();
    apic::enable_wakeups();
    let reads = apic::id();
    if reads != smp.bsp_apic_id {
        return Err(SmpError::BspApicId {
            cpuid: smp.bsp_apic_id,
            reads,
        });
    }
    let Some(&starter) = smp.percpu.get(1) else {
        // No AP will print the log: the boot CPU writes its lines itself.
        serial::set_direct();
        print_brought_up(smp, 0); // no IPI sent
        return Ok(());
    };
    let tramp =
        Trampoline::install_low(smp.regions, smp.phys_offset, tables, &mut frames, ap_entry)?;
    let Some(stack_top) = starter.stack_top() else {
        unreachable!("an AP's record has its stack until the AP takes it");
    };
    let b = smp.background.call_once(|| Bringup {
        tramp,
        starter,
        first_ipi_tsc: AtomicU64::new(0),
        rest: smp.percpu[2..].to_vec(),
        done: AtomicBool::new(false),
        done_tsc: AtomicU64::new(0),
        error: spin::Mutex::new(None),
    });
    kprintln!(
        "smpboot: {} CPUs planned; APIC and trampoline set up in {} us",
        b.rest.len() + 2,
        tsc::cycles_to_ns(tsc::rdtsc() - t0) / 1000
    );
    start_starter(smp, b, stack_top);
    Ok(())
}

/// Send the starter its startup IPIs (on the stack at `stack_top`), or,
/// for `test_fault=late_ap`, only prepare its round.
fn start_starter(smp: &Smp, b: &Bringup, stack_top: u64) {
    let starter = b.starter;
    let t1 = tsc::rdtsc();
    kprintln!(
        "smpboot: Booting Node {} Processor {} APIC {:#x}",
        starter.info.node,
        starter.info.index,
        starter.info.apic_id
    );
    let first_ipi_tsc = tsc::rdtsc();
    b.first_ipi_tsc.store(first_ipi_tsc, Ordering::Relaxed);
    if smp.late_ap {
        b.tramp.prepare(stack_top, starter);
        kprintln!(
            "smpboot: test_fault=late_ap: CPU {} gets its startup IPIs only once its round is given up",
            starter.info.index
        );
        return;
    }
    start_round(&b.tramp, starter, stack_top, None);
    let end = tsc::rdtsc();
    kprintln!(
        "smp: boot CPU spent {} us starting CPU 1 ({} us sending its startup IPIs), not waiting: CPU 1 starts the other {} APs",
        tsc::cycles_to_ns(end - t1) / 1000,
        tsc::cycles_to_ns(end - first_ipi_tsc) / 1000,
        b.rest.len()
    );
}

/// Where an AP starts in Rust (called by the trampoline's 64-bit code on the
/// AP's own stack, with the kernel's page tables): stamp the arrival,
/// switch the local APIC to the BSP's mode (see `apic`), load a GDT/TSS/IST
/// stacks of its own and the shared IDT, report ready with the APIC id it
/// reads; the starter then starts the other APs. Then serve jobs.
extern "C" fn ap_entry(pc: &'static PerCpu) -> ! {
    pc.arrive(tsc::rdtsc());
    // It runs on the stack: no longer the starting CPU's to give back
    // (`ApStack` has no destructor; only `free_unused` frees one).
    let _running_on = pc.take_stack();
    apic::init_ap();
    if let Some(tables) = pc.tables() {
        interrupts::init_ap(tables);
    }
    apic::enable_wakeups();
    pc.set_ready(apic::id());
    let smp = SMP.get();
    let background = smp.and_then(|s| s.background.get());
    if let Some(b) = background.filter(|b| core::ptr::eq(b.starter, pc)) {
        // The starter writes the log out when it has no job.
        serial::set_printer(pc.info.apic_id);
        run_on_starter(b);
    }
    scope::serve(pc, smp.map_or(0, |s| s.bsp_apic_id))
}

/// On the starter AP, right after its own setup: check in, then start the
/// other APs.
fn run_on_starter(b: &Bringup) {
    let pc = b.starter;
    let now = tsc::rdtsc();
    if let Err(e) = check_apic_id(pc) {
        b.finish(Err(e));
        return;
    }
    let first_ipi_tsc = b.first_ipi_tsc.load(Ordering::Relaxed);
    pc.mark_up(BootTiming {
        init_tsc: first_ipi_tsc,
        seen_tsc: now,
        ap_tsc: pc.arrived_tsc().unwrap_or(0),
    });
    kprintln!(
        "smpboot: CPU {} (APIC {:#x}) up {} us after INIT; it starts the other APs",
        pc.info.index,
        pc.info.apic_id,
        tsc::cycles_to_ns(now.saturating_sub(first_ipi_tsc)) / 1000
    );
    b.finish(start_rest(&b.tramp, &b.rest, None));
}

/// Wait until every AP started in the background came up or was left out
/// (the first time only; later calls return at once), print the bring-up
/// lines and run the self-test. The pipeline calls it before its first
/// jobs (`CpuBringup::wait_online`); [`end_bringup`] at the end of memory init in case no stage ran
/// jobs. Fails if [`launch`] has not run: starting the APs here could edit
/// page tables memory init holds.
pub fn wait_online() -> Result<(), SmpError> {
    let Some(smp) = SMP.get() else {
        return Err(SmpError::NotLaunched);
    };
    if smp.waited.swap(true, Ordering::AcqRel) {
        return Ok(());
    }
    if !smp.launched.load(Ordering::Acquire) {
        return Err(SmpError::NotLaunched);
    }
    if let Some(b) = smp.background.get() {
        let t = tsc::rdtsc();
        wait_for_bringup(smp, b)?;
        let waited_us = tsc::cycles_to_ns(tsc::rdtsc() - t) / 1000;
        report_bringup(smp, b, waited_us);
    }
    scope::self_test()
}

/// The starter's arrival (or giving up on it, and starting the others on
/// the BSP), then the end of the starter's work.
fn wait_for_bringup(smp: &Smp, b: &Bringup) -> Result<(), SmpError> {
    let starter = b.starter;
    let (cpu, apic_id) = (starter.info.index, starter.info.apic_id);
    if !wait_for(AP_ARRIVAL_TIMEOUT_MS, || starter.has_arrived()) {
        // Take the starter's round back unless it claimed it; a late
        // starter then halts at the claim.
        let ours = u64::from(apic_id) + 1;
        let claim = b.tramp.claim_slot();
        if claim
            .compare_exchange(ours, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            give_up_on_starter(smp, b);
            return bringup_result(b);
        }
        if !wait_for(AP_READY_TIMEOUT_MS, || starter.has_arrived()) {
            return Err(SmpError::StackTakenNeverArrived { cpu, apic_id });
        }
    }
    if !wait_for(AP_READY_TIMEOUT_MS, || starter.ready_apic_id().is_some()) {
        return Err(SmpError::SetupHung { cpu, apic_id });
    }
    bringup_result(b)
}

/// The starter never claimed its round, which the BSP took back: leave it
/// out and start the other APs on the BSP.
fn give_up_on_starter(smp: &Smp, b: &Bringup) {
    let starter = b.starter;
    let why = if smp.late_ap {
        " (test_fault=late_ap: its startup IPIs held back until its round was given up)"
    } else {
        ""
    };
    kprintln!(
        "smpboot: CPU {} (APIC {:#x}) did not come up{why}; the boot CPU starts the others",
        starter.info.index,
        starter.info.apic_id
    );
    if let Some(stack) = starter.take_stack() {
        stack.free_unused();
    }
    starter.mark_failed();
    let late = smp.late_ap.then_some(starter);
    b.finish(start_rest(&b.tramp, &b.rest, late));
}

/// Wait for the end of the starter's work (it bounds each AP's start by
/// the protocol's timeouts) and return its result.
fn bringup_result(b: &Bringup) -> Result<(), SmpError> {
    while !b.done.load(Ordering::Acquire) {
        core::hint::spin_loop();
    }
    match b.error.lock().clone() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The lines of a finished background bring-up: the summary, the wait,
/// the APs left out and the late ones.
fn report_bringup(smp: &Smp, b: &Bringup, waited_us: u64) {
    // From the first IPI to the last AP seen up (or to the end of
    // bring-up, when none came up).
    let last_up_tsc = smp
        .up()
        .filter_map(PerCpu::timing)
        .map(|t| t.seen_tsc)
        .max()
        .unwrap_or(b.done_tsc.load(Ordering::Relaxed));
    let first_ipi_tsc = b.first_ipi_tsc.load(Ordering::Relaxed);
    print_brought_up(
        smp,
        tsc::cycles_to_ns(last_up_tsc.saturating_sub(first_ipi_tsc)),
    );
    kprintln!("smp: boot CPU waited {waited_us} us for the APs when it first needed them");
    let missing: Vec<&PerCpu> = smp
        .percpu
        .iter()
        .copied()
        .filter(|p| !p.info.is_bsp && !p.is_up())
        .collect();
    for p in &missing {
        kprintln!(
            "smp: CPU {} (APIC {:#x}) did not come up: its jobs run on the boot CPU",
            p.info.index,
            p.info.apic_id
        );
    }
    let halted = b.tramp.halted();
    if halted > 0 {
        kprintln!(
            "smpboot: {halted} AP(s) reached the trampoline after their round was given up, and halted there"
        );
    }
    if missing.len() + 1 == smp.percpu.len() {
        serial::set_direct();
    }
}

/// The bring-up summary: Linux's lines (kernel/smp.c smp_init(): "Brought
/// up %d node%s, %d CPU%s"; arch/x86 "Booted up"), counting the CPUs that
/// came up, and memboot's timing, from the first IPI to the last AP up (or
/// given up on).
fn print_brought_up(smp: &Smp, started_ns: u64) {
    let mut nodes: Vec<u32> = smp.up().map(|p| p.info.node).collect();
    let n = nodes.len().max(1);
    nodes.sort_unstable();
    nodes.dedup();
    let node_word = if nodes.len() == 1 { "node" } else { "nodes" };
    let cpu_word = if n == 1 { "CPU" } else { "CPUs" };
    let nodes = nodes.len().max(1);
    let us = started_ns / 1000;
    kprintln!("smp: Brought up {nodes} {node_word}, {n} {cpu_word}");
    kprintln!("smp: CPUs started in {}.{:03} ms", us / 1000, us % 1000);
    kprintln!("x86: Booted up {nodes} {node_word}, {n} {cpu_word}");
}

/// The end of bring-up, once memory init gave its page tables back: wait
/// for the APs if no stage ran jobs (see [`wait_online`]), then remove the
/// trampoline's identity mapping through `tables`, the page tables the
/// pipeline lent to [`launch`]. No AP runs on the trampoline by then.
pub fn end_bringup(tables: &mut OffsetPageTable<'_>) -> Result<(), SmpError> {
    wait_online()?;
    match SMP.get().and_then(|s| s.background.get()) {
        Some(b) => b.tramp.unmap(tables),
        None => Ok(()),
    }
}
