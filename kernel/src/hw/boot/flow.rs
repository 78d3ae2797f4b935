//! The boot flow proper, the same whichever way the kernel was entered
//! (the order and why: [`super`]). Everything that can end the boot early
//! is a [`BootError`]; [`start`] is the one place that turns it into the
//! summary's `status` and the exit code.

use alloc::format;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;

use bootloader_api::info::MemoryRegion;
use memboot_contract::hugepage_forms;
use memboot_contract::option_values::BuddyStore;
use memboot_contract::options::{self, Console, Options};
use memboot_kernel::acpi;
use memboot_kernel::boot_error::BootError;
use memboot_kernel::boot_input::BootInput;
use memboot_kernel::bootmap;
use memboot_kernel::image_sizes::ImageSizes;
use memboot_kernel::pipeline::fault_hooks::{CpuTraps, FaultHooks};
use memboot_kernel::pipeline::input::EarlyReservation;
use memboot_kernel::pipeline::{self, Machine};
use memmap::firmware::FirmwareEntry;

use super::finish::{fail_with, finish, BOOT_FACTS, FAULTS, MM_FACTS};
use super::handoff::{Entry, Handoff};
use crate::hw::exit::ExitCode;
use crate::hw::heap::HEAP;
use crate::hw::seams::{KernelMapper, SerialLog, SmpCpus, TscClock};
use crate::hw::{fw_cfg, held_report, serial, smp, tsc};

/// Below this the boot cannot even parse ACPI.
const HEAP_MIN_BYTES: u64 = 4 << 20;

/// The boot, once the entry path has its stamp, the serial port, the
/// exception handlers and the handoff. Never inlined: the instruction
/// profile's `to_ready` phase opens at its entry.
#[inline(never)]
pub fn start(handoff: &'static Handoff) -> ! {
    match boot(handoff) {
        Ok(()) => {
            kprintln!("boot complete");
            finish("ok", ExitCode::Success)
        }
        Err(e) => fail_with(e),
    }
}

/// The firmware's map, kept for the held-back report (`hw::held_report`),
/// with its usable RAM, which the summary reports; returned as the
/// pipeline's entries.
fn keep_memory_map(regions: &'static [MemoryRegion]) -> Vec<FirmwareEntry> {
    let mem_bytes = bootmap::ram_bytes(regions);
    held_report::keep_memory_map(regions, mem_bytes);
    BOOT_FACTS.mem_bytes.store(mem_bytes, Ordering::Relaxed);
    bootmap::firmware_entries(regions)
}

/// Apply the command line's Linux `memmap=` forms to the firmware map
/// (`None` without any), keep the user map for the held-back report and
/// its RAM for the summary; returned as the pipeline's entries.
fn keep_user_map(
    map: &[FirmwareEntry],
    opts: &Options,
    heap: &EarlyReservation,
) -> Result<Option<Vec<FirmwareEntry>>, BootError> {
    let user = memboot_kernel::boot_input::user_map(map, opts, heap.base, heap.size)
        .map_err(|e| BootError::BadOption(format!("{e}")))?;
    Ok(user.map(|user| {
        let (mem_bytes, map) = held_report::keep_user_map(user);
        BOOT_FACTS.mem_bytes.store(mem_bytes, Ordering::Relaxed);
        map
    }))
}

/// Carve the heap out of usable RAM (`bootmap::heap_place`: right after
/// the bootloader where it fits), sized for the map (without the per-CPU
/// part: see [`grow_heap`]).
fn init_heap(regions: &[MemoryRegion], phys_offset: u64) -> Result<EarlyReservation, BootError> {
    let max_end = regions.iter().map(|r| r.end).max().unwrap_or(0);
    let wanted = bootmap::heap_bytes(max_end, 0);
    let Some((start, room)) = bootmap::heap_place(regions, wanted, HEAP_MIN_BYTES) else {
        let largest_bytes = bootmap::largest_usable(regions).map_or(0, |r| r.end - r.start);
        return Err(BootError::NoMemory {
            largest_bytes,
            needed_bytes: HEAP_MIN_BYTES,
        });
    };
    let bytes = wanted.min(room);
    // SAFETY: [start, start+bytes) is usable RAM that nothing else uses (the
    // entry path hands it over free) and the physical-memory mapping at
    // `phys_offset` makes it accessible; init happens once, before any allocation.
    unsafe { HEAP.init((phys_offset + start) as *mut u8, bytes as usize) };
    Ok(EarlyReservation {
        base: start,
        size: bytes,
        what: "kernel heap",
    })
}

/// Add the per-CPU part of the heap (AP stacks) once ACPI has said how many
/// CPUs and nodes there are, and the free bitmaps if the options keep the
/// buddy allocator's free blocks there, if the RAM the heap lives in has
/// room (`map`: the map the pipeline runs on, the user's when `memmap=`
/// gave one).
fn grow_heap(
    map: &[FirmwareEntry],
    heap: &mut EarlyReservation,
    nr_cpus: usize,
    bitmaps_for_nodes: Option<u32>,
) {
    let max_end = map.iter().map(|r| r.start + r.len_bytes).max().unwrap_or(0);
    let bitmaps = bitmaps_for_nodes.map_or(0, |n| bootmap::bitmap_heap_bytes(max_end, n as u64));
    let wanted = bootmap::heap_bytes(max_end, nr_cpus) + bitmaps;
    let room = bootmap::room_above(map, heap.base, heap.base + heap.size);
    let grow = wanted.saturating_sub(heap.size).min(room);
    if grow > 0 {
        // SAFETY: [top, top + grow) is usable RAM right above the heap
        // that nothing else occupies (`room_above`), and nothing else was
        // carved from it; the physical-memory mapping covers it.
        unsafe { HEAP.extend(grow as usize) };
        heap.size += grow;
    }
}

/// The exceptions a `test_fault=` raises, for real.
struct KernelTraps;

impl CpuTraps for KernelTraps {
    fn page_fault(&self) {
        kprintln!("test_fault: reading unmapped address 0xdead0000000");
        // SAFETY: deliberately unsound on request: this read faults, and
        // the page-fault handler ends the boot.
        let v = unsafe { core::ptr::read_volatile(0x0dea_d000_0000 as *const u64) };
        kprintln!("test_fault: read {v} without a fault?");
    }

    fn invalid_opcode(&self) {
        kprintln!("test_fault: executing ud2");
        // SAFETY: raises #UD on request; the handler ends the boot.
        unsafe { core::arch::asm!("ud2") };
    }
}

/// Physical memory through the entry path's offset mapping, which covers
/// `[0, limit)`: everything its memory map lists, so also the BIOS area and
/// the ACPI regions where the RSDP and tables live.
struct OffsetMapped {
    phys_offset: u64,
    limit: u64,
}

impl acpi::PhysMemory for OffsetMapped {
    fn read(&self, phys: u64, buf: &mut [u8]) -> Result<(), acpi::AcpiError> {
        let len = buf.len() as u64;
        let unreadable = acpi::AcpiError::Unreadable { phys, len };
        let end = phys.checked_add(len).ok_or(unreadable)?;
        if end > self.limit {
            return Err(unreadable);
        }
        // SAFETY: [phys, end) lies below `limit`, inside the entry path's
        // physical-memory mapping at `phys_offset`; the copy only reads.
        unsafe {
            core::ptr::copy_nonoverlapping(
                (self.phys_offset + phys) as *const u8,
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        Ok(())
    }
}

/// ACPI: CPUs (MADT) and NUMA nodes (SRAT), kept for the held-back report
/// (`hw::held_report`) with the firmware map its node lines read.
fn read_acpi(
    rsdp: Option<u64>,
    phys_offset: u64,
    regions: &[MemoryRegion],
    map: &[FirmwareEntry],
) -> Result<&'static acpi::AcpiInfo, BootError> {
    let rsdp = rsdp.ok_or(BootError::NoAcpi)?;
    let limit = regions.iter().map(|r| r.end).max().unwrap_or(0);
    let info =
        acpi::parse(rsdp, &OffsetMapped { phys_offset, limit }).map_err(BootError::BadAcpi)?;
    let info = held_report::keep_acpi(info, map);
    let cpus = info.cpus.iter().filter(|c| c.enabled).count().max(1) as u64;
    BOOT_FACTS.cpus.store(cpus, Ordering::Relaxed);
    BOOT_FACTS
        .nodes
        .store(u64::from(info.node_count()), Ordering::Relaxed);
    Ok(info)
}

/// Read the command line's huge-page parameters for this CPU and these
/// nodes, as Linux reads them once `setup_arch()` knows both, and keep the
/// plan for the held-back report. Nothing reserves the pages yet.
fn keep_hugetlb_plan(opts: &Options, acpi_info: &acpi::AcpiInfo) {
    if opts.hugetlb.is_empty() {
        return;
    }
    let machine = hugepage_forms::Machine {
        has_1g_pages: crate::hw::cpu::has_1gib_pages(),
        nodes: acpi_info.node_count(),
    };
    held_report::keep_hugetlb(hugepage_forms::plan(&opts.hugetlb, machine));
}

/// Linux's TSC line (arch/x86/kernel/tsc.c), then where the rate came from
/// and how precise it is.
fn print_tsc(tsc: &tsc::Calibration) {
    let mhz = memboot_kernel::tsc_cpuid::KhzAsMhz(tsc.khz);
    kprintln!("tsc: Detected {mhz} MHz processor");
    match tsc.uncertainty_ppm {
        0 => kprintln!("tsc: frequency source: {}", tsc.source),
        ppm => kprintln!("tsc: frequency source: {} (within {ppm} ppm)", tsc.source),
    }
    if !tsc.tight {
        kprintln!("tsc: Warning: no PIT interval within 0.1% (busy host); timings of this boot are less precise");
    }
}

/// When the kernel was entered, by the VM's clock: the TSC counts from the
/// VM's reset (QEMU starts it at 0), so its value at entry is the time the
/// firmware and the entry path took.
fn print_entry(entry: Entry) {
    let ns = tsc::cycles_to_ns(tsc::entry_tsc());
    BOOT_FACTS.reset_to_entry_ns.store(ns, Ordering::Relaxed);
    kprintln!(
        "memboot: entered through {} {}.{:03} ms after the VM's reset (TSC {} at entry)",
        entry.describe(),
        ns / 1_000_000,
        ns / 1000 % 1000,
        tsc::entry_tsc()
    );
    // Where the code runs: what an instruction profile (memboot-profile)
    // names functions by, with the ELF's symbols.
    let text = crate::hw::image::sections().text;
    kprintln!(
        "memboot: image text [{:#x}-{:#x}]",
        text.start,
        text.end - 1
    );
}

/// The boot after the console and exception handlers are up.
fn boot(handoff: &'static Handoff) -> Result<(), BootError> {
    // The command line first, silently: it may state the TSC frequency, and
    // every stamp before the frequency is known would read 0; and it may
    // ask for console=direct, which should hold from as early as it can.
    // Reading it needs the heap, which the memory map gives.
    let Handoff {
        entry,
        phys_offset,
        regions,
        rsdp,
    } = *handoff;
    let heap = init_heap(regions, phys_offset);
    let cmdline = heap
        .as_ref()
        .ok()
        .map(|_| fw_cfg::cmdline().map_err(|e| BootError::CmdlineUnreadable(format!("{e}"))));
    let early = match &cmdline {
        Some(Ok(c)) => options::parse(c).ok(),
        _ => None,
    };
    if early.as_ref().is_some_and(|o| o.console == Console::Direct) {
        serial::set_direct();
    }
    let given_khz = early.and_then(|o| o.tsc_khz);
    let tsc = tsc::calibrate(given_khz);
    print_tsc(&tsc);
    print_entry(entry);
    let map = keep_memory_map(regions);
    let heap = heap?;
    let cmdline = cmdline.expect("read once the heap was up")?;
    kprintln!("Kernel command line: {cmdline}");
    let opts = options::parse(&cmdline).map_err(|e| BootError::BadOption(format!("{e}")))?;
    let faults = FAULTS.call_once(|| FaultHooks::new(opts.test_fault));
    faults.at_boot(&SerialLog, &KernelTraps);
    let user_map = keep_user_map(&map, &opts, &heap)?;
    let pipeline_map = user_map.as_deref().unwrap_or(&map);

    let acpi_info = read_acpi(rsdp, phys_offset, regions, pipeline_map)?;
    keep_hugetlb_plan(&opts, acpi_info);
    let heap = size_heap(pipeline_map, heap, &opts, acpi_info);
    let enabled_cpus = acpi_info.cpus.iter().filter(|c| c.enabled).count();
    let late_ap = faults
        .late_ap(enabled_cpus)
        .map_err(|e| BootError::BadOption(format!("{e}")))?;
    // Plans the CPUs (MADT and CPUID only); the pipeline sets up the APIC
    // and the trampoline and starts the APs where its mode first needs them
    // (`CpuBringup::start`), waits for them (and runs the SMP self-test)
    // before its first jobs (`CpuBringup::wait_online`), and
    // `run_pipeline` ends bring-up (`smp::end_bringup`).
    smp::prepare_aps(acpi_info, phys_offset, regions, late_ap);
    let input = held_report::keep_input(BootInput {
        map,
        srat: acpi_info.memory_affinity(),
        cpu_nodes: smp::online_cpus().iter().map(|c| c.node).collect(),
        heap_base: heap.base,
        heap_bytes: heap.size,
        phys_addr_bits: crate::hw::cpu::phys_addr_bits(),
        under_hypervisor: crate::hw::cpu::under_hypervisor(),
        cmdline,
        image: kernel_image_sizes(),
        user_map,
        has_1g_pages: crate::hw::cpu::has_1gib_pages(),
    });
    // console=direct is for seeing how far a boot got: the report goes out
    // now rather than where the boot CPU stops working alone.
    if opts.console == Console::Direct {
        held_report::print_once();
    }
    run_pipeline(&opts, faults, input, phys_offset)
}

/// The heap grown for the CPUs ACPI found and, if the options keep the
/// buddy allocator's free blocks in bitmaps, for those; logged.
fn size_heap(
    map: &[FirmwareEntry],
    mut heap: EarlyReservation,
    opts: &Options,
    acpi_info: &acpi::AcpiInfo,
) -> EarlyReservation {
    let bitmaps = opts.buddy_store() == BuddyStore::Bitmaps;
    let nr_cpus = acpi_info.cpus.len().max(1);
    grow_heap(
        map,
        &mut heap,
        nr_cpus,
        bitmaps.then(|| acpi_info.node_count()),
    );
    kprintln!(
        "heap: [mem {:#018x}-{:#018x}] {} MiB, sized for the map{} and {} CPUs",
        heap.base,
        heap.base + heap.size - 1,
        heap.size >> 20,
        if bitmaps { ", its free bitmaps" } else { "" },
        nr_cpus
    );
    heap
}

/// The kernel image's code, data and bss sizes, from its section bounds.
fn kernel_image_sizes() -> ImageSizes {
    ImageSizes::of_sections(&crate::hw::image::sections())
}

/// The memory-init pipeline on this machine's hardware, from `input`
/// (which the log gets as its `memboot-input:` line where the boot CPU
/// stops working alone: `hw::held_report`).
fn run_pipeline(
    opts: &Options,
    faults: &FaultHooks,
    input: &BootInput,
    phys_offset: u64,
) -> Result<(), BootError> {
    let reserve = input.early_reservations();
    // SAFETY: the bootloader's physical-memory offset; from here on the
    // boot CPU alone edits the page tables (APs only run jobs, which do not
    // map memory).
    let mut mapper = unsafe { KernelMapper::new(phys_offset, opts.struct_page.bytes()) };
    let machine = Machine {
        mapper: &mut mapper,
        executor: &SmpCpus,
        bringup: &SmpCpus,
        clock: &TscClock,
        log: &SerialLog,
        cpu_nodes: &input.cpu_nodes,
    };
    let result = pipeline::run(
        &input.pipeline_input(opts, &reserve),
        machine,
        &MM_FACTS,
        faults,
    );
    kprintln!(
        "heap: peak {} KiB of {} KiB",
        HEAP.peak_bytes() >> 10,
        HEAP.size_bytes() >> 10
    );
    kprintln!(
        "smp: idle CPUs halted, woken {} times ({} before memory ready)",
        crate::hw::interrupts::wakeups(),
        crate::hw::interrupts::wakeups_before_ready()
    );
    if let Some(ns) = crate::hw::smp::bringup_ended_ns() {
        // run-qemu.sh's CPU-time window after bring-up starts here.
        kprintln!(
            "smp: bring-up ended {} us after entry (the last AP's first job or halt)",
            ns / 1000
        );
    }
    result?;
    // The page tables are ours again: bring-up ends through them (a boot
    // whose stages ran no jobs still waits for the APs and checks them).
    smp::end_bringup(mapper.page_tables())?;
    Ok(())
}
