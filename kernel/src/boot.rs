//! The boot flow proper (see `main.rs` for the order and why).

use core::panic::PanicInfo;
use core::sync::atomic::{AtomicU64, Ordering};

use bootloader_api::config::{BootloaderConfig, Mapping};
use bootloader_api::info::{MemoryRegionKind, MemoryRegions};
use bootloader_api::BootInfo;
use linked_list_allocator::LockedHeap;
use memboot_kernel::acpi;
use memboot_kernel::options::{self, TestFault};
use memboot_kernel::report::JsonObject;

use crate::exit::{exit, ExitCode};
use crate::{fw_cfg, interrupts, serial, tsc};

/// Physical memory mapped at a bootloader-chosen offset (needed to read ACPI
/// tables and, later, to build the vmemmap); a 1 MiB boot stack.
pub static BOOTLOADER_CONFIG: BootloaderConfig = {
    let mut config = BootloaderConfig::new_default();
    config.mappings.physical_memory = Some(Mapping::Dynamic);
    config.kernel_stack_size = 1 << 20;
    config
};

bootloader_api::entry_point!(kernel_main, config = &BOOTLOADER_CONFIG);

#[global_allocator]
static HEAP: LockedHeap = LockedHeap::empty();
const HEAP_MAX_BYTES: u64 = 64 << 20;
const HEAP_MIN_BYTES: u64 = 4 << 20;

/// What the summary line reports; filled in as the boot learns it, so a
/// failure part-way still reports what was known.
struct Facts {
    mem_bytes: AtomicU64,
    nodes: AtomicU64,
    cpus: AtomicU64,
    ap_online: AtomicU64,
}

static FACTS: Facts = Facts {
    mem_bytes: AtomicU64::new(0),
    nodes: AtomicU64::new(0),
    cpus: AtomicU64::new(0),
    ap_online: AtomicU64::new(0),
};

/// Print the summary line and leave QEMU with `code`.
fn finish(status: &str, code: ExitCode) -> ! {
    let mut line = heapless_line::Line::new();
    let tsc_khz = tsc::khz();
    let _ = (|| -> core::fmt::Result {
        let mut o = JsonObject::begin(&mut line)?;
        o.u64("mem_bytes", FACTS.mem_bytes.load(Ordering::Relaxed))?;
        o.u64("nodes", FACTS.nodes.load(Ordering::Relaxed))?;
        o.u64("cpus", FACTS.cpus.load(Ordering::Relaxed))?;
        o.u64("ap_online", FACTS.ap_online.load(Ordering::Relaxed))?;
        o.fixed("tsc_mhz", tsc_khz, 3)?;
        o.str("status", status)?;
        o.u64("total_ns", tsc::ns_since_entry())?;
        // Memory-init keys: always present (zero / "none" when the boot
        // failed before memory init), so parsers need no special case.
        let mm = crate::pipeline::MM_FACTS
            .try_lock()
            .map(|f| *f)
            .unwrap_or(crate::pipeline::MmFacts::EMPTY);
        o.str("strategy", mm.strategy)?;
        o.u64("present_pages", mm.present_pages)?;
        o.u64("eager_pages", mm.eager_pages)?;
        o.u64("low_zone_pages", mm.low_zone_pages)?;
        o.u64("deferred_pages", mm.deferred_pages)?;
        o.u64("reserved_pages", mm.reserved_pages)?;
        o.u64("hole_pages", mm.hole_pages)?;
        o.u64("memmap_boot_ns", mm.memmap_boot_ns)?;
        o.u64("buddy_eager_ns", mm.buddy_eager_ns)?;
        o.u64("deferred_ns", mm.deferred_ns)?;
        o.u64_array(
            "node_deferred_ns",
            mm.node_deferred_ns[..mm.nr_nodes].iter().copied(),
        )?;
        o.u64("deferred_workers", mm.deferred_workers)?;
        o.u64("grown_pages", mm.grown_pages)?;
        o.u64("memblock_ns", mm.memblock_ns)?;
        o.u64("vmemmap_ns", mm.vmemmap_ns)?;
        o.u64("vmemmap_bytes", mm.vmemmap_bytes)?;
        o.u64("memory_block_ns", mm.memory_block_ns)?;
        o.u64("memory_block_size", mm.memory_block_size)?;
        o.u64("nr_memory_blocks", mm.nr_memory_blocks)?;
        o.u64("free_pages", mm.free_pages)?;
        o.str("verify", mm.verify)?;
        o.u64("verify_ns", mm.verify_ns)?;
        o.end()
    })();
    serial::raw_line(format_args!("memboot-summary: {}", line.as_str()));
    exit(code)
}

/// Fail the boot: summary with `status` (a short failure name), failure exit.
pub fn fail(status: &str) -> ! {
    finish(status, ExitCode::Failure)
}

#[panic_handler]
fn panic(info: &PanicInfo) -> ! {
    serial::emergency_log(format_args!("PANIC: {info}"));
    fail("panic")
}

/// A fixed-capacity line buffer, so the summary needs no heap (the panic
/// path may run with the heap broken).
mod heapless_line {
    pub struct Line {
        buf: [u8; 4096],
        len: usize,
    }
    impl Line {
        pub const fn new() -> Self {
            Self {
                buf: [0; 4096],
                len: 0,
            }
        }
        pub fn as_str(&self) -> &str {
            core::str::from_utf8(&self.buf[..self.len]).unwrap_or("{}")
        }
    }
    impl core::fmt::Write for Line {
        fn write_str(&mut self, s: &str) -> core::fmt::Result {
            let end = self
                .len
                .checked_add(s.len())
                .filter(|&e| e <= self.buf.len())
                .ok_or(core::fmt::Error)?;
            self.buf[self.len..end].copy_from_slice(s.as_bytes());
            self.len = end;
            Ok(())
        }
    }
}

fn kind_name(kind: MemoryRegionKind) -> (&'static str, u32) {
    match kind {
        MemoryRegionKind::Usable => ("usable", 0),
        MemoryRegionKind::Bootloader => ("usable (bootloader)", 0),
        MemoryRegionKind::UnknownBios(1) => ("usable", 1),
        MemoryRegionKind::UnknownBios(3) => ("ACPI data", 3),
        MemoryRegionKind::UnknownBios(4) => ("ACPI NVS", 4),
        MemoryRegionKind::UnknownBios(5) => ("unusable", 5),
        MemoryRegionKind::UnknownBios(t) => ("reserved", t),
        MemoryRegionKind::UnknownUefi(t) => ("reserved (UEFI)", t),
        _ => ("reserved (unknown)", 0),
    }
}

/// Usable RAM as the bootloader reports it: free frames plus those the
/// bootloader itself occupies (kernel image, page tables, boot info).
fn usable_bytes(regions: &MemoryRegions) -> u64 {
    regions
        .iter()
        .filter(|r| {
            matches!(
                r.kind,
                MemoryRegionKind::Usable | MemoryRegionKind::Bootloader
            )
        })
        .map(|r| r.end - r.start)
        .sum()
}

fn print_memory_map(regions: &MemoryRegions) {
    kprintln!(
        "BIOS-provided physical RAM map (via bootloader, {} regions):",
        regions.len()
    );
    for r in regions.iter() {
        let (name, _) = kind_name(r.kind);
        kprintln!("  [mem {:#018x}-{:#018x}] {name}", r.start, r.end - 1);
    }
}

/// Carve the heap out of the largest usable region (4–64 MiB, 2 MiB aligned).
fn init_heap(regions: &MemoryRegions, phys_offset: u64) -> (u64, u64) {
    let Some(region) = regions
        .iter()
        .filter(|r| r.kind == MemoryRegionKind::Usable)
        .max_by_key(|r| r.end - r.start)
    else {
        kprintln!("heap: no usable memory region in the bootloader's map");
        fail("no_memory");
    };
    let start = (region.start + 0x1f_ffff) & !0x1f_ffff;
    let bytes = region.end.saturating_sub(start).min(HEAP_MAX_BYTES);
    if bytes < HEAP_MIN_BYTES {
        kprintln!(
            "heap: largest usable region {:#x}-{:#x} is smaller than 4 MiB",
            region.start,
            region.end
        );
        fail("no_memory");
    }
    // SAFETY: [start, start+bytes) is usable RAM that nothing else uses (the
    // bootloader hands it over free) and the physical-memory mapping at
    // `phys_offset` makes it accessible; init happens once, before any allocation.
    unsafe {
        HEAP.lock()
            .init((phys_offset + start) as *mut u8, bytes as usize)
    };
    (start, bytes)
}

fn trigger_test_fault(fault: TestFault) {
    match fault {
        // Raised by the memory-init pipeline, where there is a page to corrupt.
        TestFault::None | TestFault::CorruptPage => {}
        TestFault::Panic => panic!("test_fault=panic requested on the command line"),
        TestFault::PageFault => {
            kprintln!("test_fault: reading unmapped address 0xdead0000000");
            // SAFETY: deliberately unsound on request: this read faults, and
            // the page-fault handler ends the boot.
            let v = unsafe { core::ptr::read_volatile(0xdead_0000_000 as *const u64) };
            kprintln!("test_fault: read {v} without a fault?");
        }
        TestFault::InvalidOpcode => {
            kprintln!("test_fault: executing ud2");
            // SAFETY: raises #UD on request; the handler ends the boot.
            unsafe { core::arch::asm!("ud2") };
        }
    }
}

/// Physical memory through the bootloader's offset mapping, which covers
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
        // SAFETY: [phys, end) lies below `limit`, inside the bootloader's
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

/// One NUMA node as the boot sees it: usable RAM from the memory map
/// intersected with the node's SRAT ranges, and the CPUs SRAT puts there.
fn print_nodes(info: &acpi::AcpiInfo, regions: &MemoryRegions) -> u64 {
    let nr_nodes = if info.has_srat {
        info.nr_nodes.max(1)
    } else {
        1
    };
    for node in 0..nr_nodes {
        let usable = || {
            regions.iter().filter(|r| {
                matches!(
                    r.kind,
                    MemoryRegionKind::Usable | MemoryRegionKind::Bootloader
                )
            })
        };
        let node_bytes: u64 = if info.has_srat {
            info.mem_affinity
                .iter()
                .filter(|m| m.node == node)
                .map(|m| {
                    usable()
                        .map(|r| {
                            r.end
                                .min(m.base + m.length)
                                .saturating_sub(r.start.max(m.base))
                        })
                        .sum::<u64>()
                })
                .sum()
        } else {
            usable().map(|r| r.end - r.start).sum()
        };
        let cpus: alloc::vec::Vec<u32> = info
            .cpus
            .iter()
            .filter(|c| c.enabled && c.node == node)
            .map(|c| c.apic_id)
            .collect();
        kprintln!(
            "NUMA: node {node}: {} MiB usable RAM, {} CPUs (APIC ids {:?})",
            node_bytes >> 20,
            cpus.len(),
            cpus
        );
        if info.has_srat {
            for m in info.mem_affinity.iter().filter(|m| m.node == node) {
                kprintln!(
                    "NUMA:   [mem {:#018x}-{:#018x}] -> node {node}",
                    m.base,
                    m.base + m.length - 1
                );
            }
        }
    }
    nr_nodes as u64
}

/// ACPI: CPUs (MADT) and NUMA nodes (SRAT).
fn report_acpi(rsdp: Option<u64>, phys_offset: u64, regions: &MemoryRegions) -> acpi::AcpiInfo {
    let Some(rsdp) = rsdp else {
        kprintln!("ACPI: the bootloader found no RSDP");
        fail("no_acpi");
    };
    let limit = regions.iter().map(|r| r.end).max().unwrap_or(0);
    let info = match acpi::parse(rsdp, &OffsetMapped { phys_offset, limit }) {
        Ok(info) => info,
        Err(e) => {
            kprintln!("ACPI: {e}");
            fail("bad_acpi");
        }
    };
    for line in info.report_lines() {
        kprintln!("{line}");
    }
    for w in &info.warnings {
        kprintln!("ACPI: Warning: {w}");
    }
    if !info.has_madt {
        kprintln!("ACPI: no valid MADT: only the boot CPU is known");
    }
    let cpus = info.cpus.iter().filter(|c| c.enabled).count().max(1) as u64;
    FACTS.cpus.store(cpus, Ordering::Relaxed);
    let nodes = print_nodes(&info, regions);
    FACTS.nodes.store(nodes, Ordering::Relaxed);
    info
}

fn kernel_main(boot_info: &'static mut BootInfo) -> ! {
    tsc::mark_entry();
    serial::init();
    interrupts::init();
    let (tsc_khz, clean) = tsc::calibrate();
    kprintln!("memboot {} booting", env!("CARGO_PKG_VERSION"));
    kprintln!(
        "tsc: Detected {}.{:03} MHz TSC (PIT channel 2 calibration)",
        tsc_khz / 1000,
        tsc_khz % 1000
    );
    if !clean {
        kprintln!("tsc: Warning: no PIT window within 0.1% (busy host); timings of this boot are less precise");
    }

    let Some(phys_offset) = boot_info.physical_memory_offset.into_option() else {
        kprintln!("bootloader did not map physical memory (BOOTLOADER_CONFIG asks for it)");
        fail("no_phys_map");
    };
    boot_info.memory_regions.sort_unstable_by_key(|r| r.start);
    let regions = &boot_info.memory_regions;
    print_memory_map(regions);
    let mem_bytes = usable_bytes(regions);
    FACTS.mem_bytes.store(mem_bytes, Ordering::Relaxed);
    kprintln!(
        "Memory: {}K usable RAM ({} MiB)",
        mem_bytes >> 10,
        mem_bytes >> 20
    );
    let (heap_start, heap_bytes) = init_heap(regions, phys_offset);
    kprintln!(
        "heap: [mem {:#018x}-{:#018x}] {} MiB",
        heap_start,
        heap_start + heap_bytes - 1,
        heap_bytes >> 20
    );

    let cmdline = match fw_cfg::cmdline() {
        Ok(c) => c,
        Err(e) => {
            kprintln!("Kernel command line unreadable: {e}");
            fail("bad_option");
        }
    };
    kprintln!("Kernel command line: {cmdline}");
    let opts = match options::parse(&cmdline) {
        Ok(o) => o,
        Err(e) => {
            kprintln!("Kernel command line rejected: {e}");
            fail("bad_option");
        }
    };
    trigger_test_fault(opts.test_fault);

    let acpi_info = report_acpi(boot_info.rsdp_addr.into_option(), phys_offset, regions);
    // --- SMP bring-up hook (kernel/src/smp.rs) ---
    let smp = crate::smp::start_aps(&acpi_info, phys_offset, regions);
    FACTS
        .ap_online
        .store(smp.ap_online as u64, Ordering::Relaxed);
    crate::smp::self_test();

    // Early reservations memblock cannot see in the firmware map: Linux x86
    // always reserves the first 1 MiB (BIOS data, the AP trampoline), and
    // the heap came out of usable RAM before memblock existed.
    let reserve = [
        (0, 1 << 20, "low 1 MiB"),
        (heap_start, heap_bytes, "kernel heap"),
    ];
    if let Err(f) = crate::pipeline::run(&opts, &acpi_info, regions, phys_offset, &reserve) {
        kprintln!("memory init failed ({}):", f.status);
        for line in f.message.lines() {
            kprintln!("{line}");
        }
        fail(f.status);
    }

    kprintln!("boot complete");
    finish("ok", ExitCode::Success)
}
