//! The boot flow proper (see `main.rs` for the order and why), the same
//! whichever way the kernel was entered: the bootloader's entry
//! ([`bootloader_main`]) and the PVH entry (`hw::pvh`) each turn what they
//! were given into a [`Handoff`] and call [`start`]. Everything that can
//! end the boot early is a [`BootError`]; [`start`] is the one place that
//! turns it into the summary's `status` and the exit code.

use alloc::format;
use alloc::vec::Vec;
use core::panic::PanicInfo;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use bootloader_api::config::{BootloaderConfig, Mapping};
use bootloader_api::info::{MemoryRegion, MemoryRegionKind};
use bootloader_api::BootInfo;
use memboot_contract::options::{self, BuddyStore, Console, Options, TestFault};
use memboot_contract::summary::SUMMARY_FAILED_STATUS;
use memboot_kernel::acpi;
use memboot_kernel::boot_error::BootError;
use memboot_kernel::boot_input::BootInput;
use memboot_kernel::bootmap;
use memboot_kernel::kernel_image::ImageSizes;
use memboot_kernel::pipeline::facts::{Facts, MmFacts};
use memboot_kernel::pipeline::fault_hooks::{CpuTraps, FaultHooks};
use memboot_kernel::pipeline::memblock::EarlyReservation;
use memboot_kernel::pipeline::{self, Machine};
use memboot_kernel::report::Timestamp;
use memboot_kernel::report::{write_summary_line, BootFacts};
use memmap::firmware::FirmwareEntry;

use crate::hw::exit::{exit, ExitCode};
use crate::hw::heap::KernelHeap;
use crate::hw::seams::{KernelMapper, SerialLog, SmpCpus, TscClock};
use crate::hw::{fw_cfg, held_report, interrupts, serial, smp, tsc};

/// Physical memory mapped at a bootloader-chosen offset (needed to read ACPI
/// tables and, later, to build the vmemmap); a 1 MiB boot stack.
pub static BOOTLOADER_CONFIG: BootloaderConfig = {
    let mut config = BootloaderConfig::new_default();
    config.mappings.physical_memory = Some(Mapping::Dynamic);
    config.kernel_stack_size = 1 << 20;
    config
};

bootloader_api::entry_point!(bootloader_main, config = &BOOTLOADER_CONFIG);

/// Which way the kernel was entered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// QEMU's `-kernel` through the PVH note (`hw::pvh`).
    Pvh,
    /// rust-osdev/bootloader from the BIOS disk image.
    Bios,
    /// rust-osdev/bootloader from the UEFI disk image.
    Uefi,
}

impl Entry {
    /// The summary's `entry` value.
    pub const fn key(self) -> &'static str {
        match self {
            Entry::Pvh => "pvh",
            Entry::Bios => "bios",
            Entry::Uefi => "uefi",
        }
    }

    const fn describe(self) -> &'static str {
        match self {
            Entry::Pvh => "PVH",
            Entry::Bios => "BIOS bootloader",
            Entry::Uefi => "UEFI bootloader",
        }
    }
}

/// What the boot needs from whatever started the kernel, the same for
/// every entry.
#[derive(Clone, Copy)]
pub struct Handoff {
    pub entry: Entry,
    /// All physical memory is mapped at this offset.
    pub phys_offset: u64,
    /// The firmware's map, sorted by start, with what the entry path
    /// occupies (image, page tables, stack, boot info) as `Bootloader`
    /// regions.
    pub regions: &'static [MemoryRegion],
    pub rsdp: Option<u64>,
}

static HANDOFF: spin::Once<Handoff> = spin::Once::new();

/// Keep the handoff for the rest of the boot (the PVH entry keeps it
/// across its switch to the final stack).
pub fn keep_handoff(handoff: Handoff) -> &'static Handoff {
    HANDOFF.call_once(|| handoff)
}

/// The handoff kept by [`keep_handoff`].
pub fn handoff() -> &'static Handoff {
    HANDOFF
        .get()
        .expect("the entry path keeps its handoff before the boot starts")
}

/// The first line of the boot, written to the serial port at once (every
/// later line waits in the log ring until another CPU writes it out): its
/// first byte is when the kernel started, for the host (run-qemu.sh's
/// entry latency). Stamped 0: it is logged at entry.
pub fn entry_line(entry: Entry) {
    serial::write_now(format_args!(
        "{} memboot {} booting (entry: {})",
        Timestamp(0),
        env!("CARGO_PKG_VERSION"),
        entry.describe()
    ));
}

/// From rust-osdev/bootloader, in long mode on its page tables and stack.
fn bootloader_main(boot_info: &'static mut BootInfo) -> ! {
    tsc::mark_entry();
    serial::init();
    let uefi = boot_info
        .memory_regions
        .iter()
        .any(|r| matches!(r.kind, MemoryRegionKind::UnknownUefi(_)));
    let entry = if uefi { Entry::Uefi } else { Entry::Bios };
    entry_line(entry);
    interrupts::init(fail);
    let Some(phys_offset) = boot_info.physical_memory_offset.into_option() else {
        fail_early(&BootError::NoPhysMap, BootError::NoPhysMap.status())
    };
    boot_info.memory_regions.sort_unstable_by_key(|r| r.start);
    // Read-only from here on, for the rest of the boot (the held-back
    // report prints the map late).
    let boot_info: &'static BootInfo = boot_info;
    start(keep_handoff(Handoff {
        entry,
        phys_offset,
        regions: &boot_info.memory_regions,
        rsdp: boot_info.rsdp_addr.into_option(),
    }))
}

#[global_allocator]
static HEAP: KernelHeap = KernelHeap::empty();
/// Below this the boot cannot even parse ACPI.
const HEAP_MIN_BYTES: u64 = 4 << 20;

/// What the summary line reports; filled in as the boot learns it, so a
/// failure part-way still reports what was known.
struct BootFactsCell {
    mem_bytes: AtomicU64,
    nodes: AtomicU64,
    cpus: AtomicU64,
    reset_to_entry_ns: AtomicU64,
}

static BOOT_FACTS: BootFactsCell = BootFactsCell {
    mem_bytes: AtomicU64::new(0),
    nodes: AtomicU64::new(0),
    cpus: AtomicU64::new(0),
    reset_to_entry_ns: AtomicU64::new(0),
};

/// What the memory-init pipeline measured.
static MM_FACTS: Facts = Facts::new();

/// Calls of [`finish`] so far. The first writes the summary; a second is
/// the panic or exception handler after a fault inside the first (part of
/// its line may be on the wire, the facts lock may be held); a third is a
/// fault inside the second, which only exits.
static FINISH_CALLS: AtomicU32 = AtomicU32::new(0);

/// What the command line's `test_fault=` does where it acts, once the
/// line is read ([`NO_FAULTS`] until then).
static FAULTS: spin::Once<FaultHooks> = spin::Once::new();
static NO_FAULTS: FaultHooks = FaultHooks::new(TestFault::None);

/// Print the summary line and leave QEMU with `code`: exit code and
/// status only when the line went out whole (`report::write_summary_line`
/// streams it, with no length limit); otherwise the cut line is ended, a
/// line says why, and a second summary with the boot facts alone and
/// status `summary` ends a failed boot.
fn finish(status: &'static str, code: ExitCode) -> ! {
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
        entry: HANDOFF.get().map_or("", |h| h.entry.key()),
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
        let mem_bytes = held_report::keep_user_map(user.e820);
        BOOT_FACTS.mem_bytes.store(mem_bytes, Ordering::Relaxed);
        user.map
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

/// Fail the boot before it has a heap (the entry paths' own checks): the
/// message through the emergency path, which allocates nothing.
pub fn fail_early(e: &dyn core::fmt::Display, status: &'static str) -> ! {
    serial::emergency_log(format_args!("{e}"));
    fail(status)
}

/// Fail the boot with `e`: its message, then the summary with its status.
pub fn fail_with(e: BootError) -> ! {
    // What the boot had read goes first: the error may be about it.
    held_report::print_once();
    for line in format!("{e}").lines() {
        kprintln!("{line}");
    }
    fail(e.status())
}

/// Linux's TSC line (arch/x86/kernel/tsc.c), then where the rate came from
/// and how precise it is.
fn print_tsc(tsc: &tsc::Calibration) {
    let mhz = memboot_kernel::tsc_freq::KhzAsMhz(tsc.khz);
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
    let text = super::image::sections().text;
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
    let mut mapper = unsafe { KernelMapper::new(phys_offset) };
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
        "smp: idle CPUs halted, woken {} times",
        crate::hw::interrupts::wakeups()
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
