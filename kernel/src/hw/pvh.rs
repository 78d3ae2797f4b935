//! The PVH entry: QEMU's `-kernel` starts the image here, without a
//! bootloader, in about the time Linux takes to print its first line (the
//! BIOS bootloader reads the image through int 13h first, seconds under
//! TCG). What it reads and sets up is `memboot_kernel::pvh`; this module
//! runs it on the machine:
//!
//! 1. `pvh_start32` (assembly, 32-bit, paging off): long mode with the
//!    static tables below (the first GiB at 0 and at the kernel mapping),
//!    then the early stack and [`pvh_main`];
//! 2. [`pvh_main`]: the entry stamp, the serial port and the exception
//!    handlers (as the bootloader entry does first), then the start info,
//!    the memory map, the final page tables and the guard-paged stack;
//! 3. on that stack and those tables, `hw::boot::start` with the same
//!    [`Handoff`] the bootloader entry builds from its `BootInfo`.

use core::arch::{asm, global_asm};

use bootloader_api::info::MemoryRegion;
use memboot_kernel::pvh_start_info::{
    build_page_tables, image_phys, region_of_entry, DirectMapPage, Layout, MemoryMap, PvhError,
    StartInfo, DIRECT_MAP_BASE, EARLY_MAPPED_BYTES, KERNEL_VIRT_BASE, MAX_E820_ENTRIES,
    MEMMAP_ENTRY_BYTES, START_INFO_BYTES,
};

use memboot_contract::host_marker::HostMarker;
use memboot_kernel::boot_error::BootError;

use crate::hw::boot::{self, Entry, Handoff};
use crate::hw::{host_marker, image, interrupts, serial, tsc};

/// The early stack, for [`pvh_main`] until it switches to the guard-paged
/// one.
const EARLY_STACK_BYTES: usize = 64 * 1024;

// The 32-bit entry and the tables it starts long mode with. Physical
// addresses are the linked (virtual) ones plus `to_phys` (mod 2^64), as the
// image is loaded at its physical addresses and linked KERNEL_VIRT_BASE
// higher (linker.ld).
global_asm!(
    r#"
    .pushsection .text.pvh_start32, "ax", @progbits
    .code32
    .globl pvh_start32
pvh_start32:
    cli
    cld
    /* ebx: the start info (PVH ABI); cpuid below clobbers ebx. */
    movl %ebx, %esi
    lgdtl (pvh_gdt_ptr32 + {to_phys})
    movl %cr4, %eax
    orl $0x20, %eax                     /* PAE */
    movl %eax, %cr4
    movl $(pvh_pml4 + {to_phys}), %eax
    movl %eax, %cr3
    /* EFER: long mode, and no-execute where the CPU has it
       (CPUID 0x80000001 EDX bit 20). */
    movl $0x80000001, %eax
    cpuid
    movl $0x100, %edi
    btl $20, %edx
    jnc 1f
    orl $0x800, %edi
1:  movl $0xc0000080, %ecx
    rdmsr
    orl %edi, %eax
    wrmsr
    movl %cr0, %eax
    orl $0x80010001, %eax               /* PG, WP, PE */
    movl %eax, %cr0
    ljmpl $0x08, $(pvh_start64 + {to_phys})

    .code64
pvh_start64:
    movabsq $pvh_high, %rax
    jmpq *%rax
pvh_high:
    lgdtq pvh_gdt_ptr64(%rip)
    movl $0x10, %eax
    movl %eax, %ds
    movl %eax, %es
    movl %eax, %ss
    movl %eax, %fs
    movl %eax, %gs
    leaq pvh_early_stack_top(%rip), %rsp
    movl %esi, %edi                     /* zero-extended */
    callq {main}
    ud2
    .popsection

    /* The ELF note QEMU finds the entry by (XEN_ELFNOTE_PHYS32_ENTRY, 18):
       name "Xen", an 8-byte physical address. */
    .pushsection .note.Xen, "a", @note
    .balign 4
    .long 4
    .long 8
    .long 18
    .asciz "Xen"
    .balign 4
    .quad pvh_start32 + {to_phys}
    .popsection

    /* Flat 64-bit code (0x08) and data (0x10), accessed bits preset so the
       CPU never writes them. */
    .pushsection .rodata.pvh_gdt, "a", @progbits
    .balign 16
pvh_gdt:
    .quad 0
    .quad 0x00af9b000000ffff
    .quad 0x00cf93000000ffff
pvh_gdt_end:
pvh_gdt_ptr32:
    .word pvh_gdt_end - pvh_gdt - 1
    .long pvh_gdt + {to_phys}
pvh_gdt_ptr64:
    .word pvh_gdt_end - pvh_gdt - 1
    .quad pvh_gdt
    .popsection

    /* The first GiB, identity-mapped (for the jump into long mode and the
       start info) and at KERNEL_VIRT_BASE, in 2 MiB pages. */
    .pushsection .data.pvh_tables, "aw", @progbits
    .balign 4096
pvh_pml4:
    .quad pvh_pdpt_low + {to_phys} + 3
    .fill 510, 8, 0
    .quad pvh_pdpt_high + {to_phys} + 3
pvh_pdpt_low:
    .quad pvh_pd + {to_phys} + 3
    .fill 511, 8, 0
pvh_pdpt_high:
    .fill 510, 8, 0
    .quad pvh_pd + {to_phys} + 3
    .quad 0
pvh_pd:
    .set pvh_i, 0
    .rept 512
    .quad (pvh_i << 21) | 0x83
    .set pvh_i, pvh_i + 1
    .endr
    .popsection

    .pushsection .bss.pvh_early_stack, "aw", @nobits
    .balign 16
    .skip {early_stack}
pvh_early_stack_top:
    .popsection
    "#,
    to_phys = const 0u64.wrapping_sub(KERNEL_VIRT_BASE),
    early_stack = const EARLY_STACK_BYTES,
    main = sym pvh_main,
    options(att_syntax)
);

/// The firmware map, kept for the rest of the boot.
static MAP: spin::Once<MemoryMap> = spin::Once::new();

/// Bytes at physical `phys` through the stub's identity mapping.
fn early_bytes<const N: usize>(what: &'static str, phys: u64) -> Result<[u8; N], PvhError> {
    if phys.saturating_add(N as u64) > EARLY_MAPPED_BYTES {
        return Err(PvhError::NotEarlyMapped { what, phys });
    }
    // SAFETY: [phys, phys + N) lies in the first GiB, which the stub's
    // tables map at address = phys; the firmware's start info and memory
    // map are only read.
    Ok(unsafe { core::ptr::read_unaligned(phys as *const [u8; N]) })
}

/// Is EFER.NXE on (the stub turns it on where the CPU has it)?
fn nx_enabled() -> bool {
    use x86_64::registers::model_specific::{Efer, EferFlags};
    Efer::read().contains(EferFlags::NO_EXECUTE_ENABLE)
}

/// The map and the layout, from the start info at `start_info_phys`.
fn plan(start_info_phys: u64) -> Result<(Layout, &'static MemoryMap, u64), PvhError> {
    let info = StartInfo::parse(
        start_info_phys,
        &early_bytes::<START_INFO_BYTES>("start info", start_info_phys)?,
    )?;
    let table = info.memmap_range();
    let mut entries = [MemoryRegion::empty(); MAX_E820_ENTRIES];
    for (at, entry) in (table.start..table.end)
        .step_by(MEMMAP_ENTRY_BYTES)
        .zip(entries.iter_mut())
    {
        *entry = region_of_entry(&early_bytes::<MEMMAP_ENTRY_BYTES>("memory map", at)?);
    }
    let mut map = MemoryMap::from_e820(entries.into_iter());
    let page = if crate::hw::cpu::has_1gib_pages() {
        DirectMapPage::Gib1
    } else {
        DirectMapPage::Mib2
    };
    let layout = Layout::plan(image_phys(&image::sections()), map.end(), page);
    layout.check(&map)?;
    // The start info and its memory map need no reservation: what the boot
    // needs of them is copied above (QEMU's option ROM leaves them in low
    // RAM that the map calls usable; Linux copies its start info too).
    map.carve(layout.occupied());
    Ok((layout, MAP.call_once(|| map), info.rsdp_paddr))
}

/// Build the final tables in their planned frames (through the identity
/// mapping), and return the top level's physical address.
fn write_page_tables(layout: &Layout) -> u64 {
    let nr = layout.nr_tables();
    // SAFETY: `layout.check` put [tables.start, tables.end) in usable RAM
    // below 1 GiB that nothing uses (the map now reserves it), mapped
    // writable at its physical address by the stub's tables; page-aligned.
    let pages = unsafe {
        let first = layout.tables.start as *mut [u64; 512];
        core::ptr::write_bytes(first, 0, nr);
        core::slice::from_raw_parts_mut(first, nr)
    };
    build_page_tables(layout, &image::sections(), nx_enabled(), pages);
    layout.tables.start
}

/// From `pvh_start32`, on the early stack, with the stub's tables.
extern "C" fn pvh_main(start_info_phys: u64) -> ! {
    tsc::mark_entry();
    host_marker::tell(HostMarker::Entered);
    serial::init();
    boot::entry_line(Entry::Pvh);
    interrupts::init(boot::fail);
    let (layout, map, rsdp) = match plan(start_info_phys) {
        Ok(planned) => planned,
        Err(e) => {
            let e = BootError::Pvh(e);
            boot::fail_early(&e, e.status())
        }
    };
    if layout.direct_map_page == DirectMapPage::Mib2 {
        crate::kprintln!(
            "pvh: the CPU has no 1 GiB pages (CPUID 0x80000001 EDX bit 26): the direct map uses 2 MiB pages, {} page-table pages",
            layout.nr_tables()
        );
    }
    let regions: &'static [MemoryRegion] = map.regions();
    boot::keep_handoff(Handoff {
        entry: Entry::Pvh,
        phys_offset: DIRECT_MAP_BASE,
        regions,
        rsdp: (rsdp != 0).then_some(rsdp),
    });
    let pml4 = write_page_tables(&layout);
    // SAFETY: the new tables map the kernel image where it runs now (its
    // code, this function's statics, the GDT, IDT and TSS the exception
    // handlers use) and the stack switched to, which nothing else uses;
    // nothing on the early stack is used after the switch (`continue_boot`
    // takes no arguments and does not return).
    unsafe {
        asm!(
            "mov cr3, {pml4}",
            "mov rsp, {stack_top}",
            "call {next}",
            "ud2",
            pml4 = in(reg) pml4,
            stack_top = in(reg) layout.stack_top(),
            next = sym continue_boot,
            options(noreturn)
        )
    }
}

/// On the final tables and stack.
extern "C" fn continue_boot() -> ! {
    boot::start(boot::handoff())
}
