//! CPU exceptions: a GDT with a TSS whose IST stacks the handlers run on, an
//! IDT of assembly stubs, and one Rust handler that reports and exits; and
//! the one interrupt memboot takes, the wake-up IPI an idle CPU halts for
//! (`apic::WAKE_VECTOR`: acknowledged, nothing else; [`halt_until`]).
//!
//! Stable Rust has no `x86-interrupt` ABI, so each of the 32 exception vectors
//! gets a 16-byte assembly stub (Intel SDM vol. 3A §6.14): it pushes a dummy
//! error code where the CPU pushes none (so every frame has one layout), then
//! the vector number, and jumps to a common stub that saves the general
//! registers and calls [`memboot_exception`] with a pointer to the frame.
//! Every exception is fatal in memboot: the handler prints vector, error
//! code, RIP and CR2 and ends the boot through the function the boot CPU
//! gave [`init`] (the boot's summary and failure exit), so a bug never
//! turns into a triple-fault reboot or a hang. Taking that function as an
//! argument keeps this module below the boot flow that loads it.
//!
//! IST stacks (SDM §6.14.5) make this robust against a broken kernel stack:
//! #DF, NMI and #MC get stacks of their own, all other vectors share one.
//! Every CPU has its own GDT, TSS and IST stacks (the boot CPU's are static,
//! each AP's come from the heap in [`init_ap`]); all share the one IDT.

use core::arch::global_asm;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use x86_64::instructions::segmentation::{Segment, CS, DS, ES, SS};
use x86_64::instructions::tables::{lidt, load_tss};
use x86_64::structures::gdt::{Descriptor, GlobalDescriptorTable, SegmentSelector};
use x86_64::structures::tss::TaskStateSegment;
use x86_64::structures::DescriptorTablePointer;
use x86_64::VirtAddr;

const IST_STACK_BYTES: usize = 32 * 1024;
/// IST slots (1-based in the IDT entry, 0-based in the TSS array).
const IST_GENERAL: u8 = 1;
const IST_DOUBLE_FAULT: u8 = 2;
const IST_NMI_MCE: u8 = 3;

#[repr(C, align(16))]
struct IstStack([u8; IST_STACK_BYTES]);

static mut IST_STACKS: [IstStack; 3] = [const { IstStack([0; IST_STACK_BYTES]) }; 3];

static TSS: spin::Once<TaskStateSegment> = spin::Once::new();
static GDT: spin::Once<(GlobalDescriptorTable, SegmentSelector, SegmentSelector)> =
    spin::Once::new();

/// One IDT gate descriptor (SDM vol. 3A Figure 6-8, 64-bit interrupt gate).
#[derive(Clone, Copy)]
#[repr(C)]
struct IdtEntry {
    offset_low: u16,
    selector: u16,
    ist: u8,
    type_attr: u8,
    offset_mid: u16,
    offset_high: u32,
    reserved: u32,
}
const _: () = assert!(core::mem::size_of::<IdtEntry>() == 16);

impl IdtEntry {
    const MISSING: IdtEntry = IdtEntry {
        offset_low: 0,
        selector: 0,
        ist: 0,
        type_attr: 0,
        offset_mid: 0,
        offset_high: 0,
        reserved: 0,
    };

    fn interrupt_gate(handler: u64, selector: u16, ist: u8) -> Self {
        IdtEntry {
            offset_low: handler as u16,
            selector,
            ist,
            type_attr: 0x8e, // present, DPL 0, 64-bit interrupt gate
            offset_mid: (handler >> 16) as u16,
            offset_high: (handler >> 32) as u32,
            reserved: 0,
        }
    }
}

#[repr(C, align(16))]
struct Idt([IdtEntry; 256]);

static IDT: spin::Once<Idt> = spin::Once::new();

/// The frame the common stub builds: saved registers (last pushed first),
/// then what the stub and the CPU pushed. Shared with the assembly below.
#[repr(C)]
pub struct TrapFrame {
    r15: u64,
    r14: u64,
    r13: u64,
    r12: u64,
    r11: u64,
    r10: u64,
    r9: u64,
    r8: u64,
    rbp: u64,
    rdi: u64,
    rsi: u64,
    rdx: u64,
    rcx: u64,
    rbx: u64,
    rax: u64,
    vector: u64,
    error_code: u64,
    rip: u64,
    cs: u64,
    rflags: u64,
    rsp: u64,
    ss: u64,
}
const _: () = assert!(core::mem::size_of::<TrapFrame>() == 22 * 8);

// Vectors for which the CPU pushes an error code (SDM vol. 3A Table 6-1):
// 8 #DF, 10 #TS, 11 #NP, 12 #SS, 13 #GP, 14 #PF, 17 #AC, 21 #CP, 29 #VC, 30 #SX.
// The `.if` product is zero exactly for those.
global_asm!(
    r#"
    .section .text.memboot_isr, "ax"
    .p2align 4
    .global memboot_isr_base
memboot_isr_base:
    .set memboot_vec, 0
    .rept 32
    .p2align 4
    .if (memboot_vec - 8) * (memboot_vec - 10) * (memboot_vec - 11) * (memboot_vec - 12) * (memboot_vec - 13) * (memboot_vec - 14) * (memboot_vec - 17) * (memboot_vec - 21) * (memboot_vec - 29) * (memboot_vec - 30)
    pushq $0
    .endif
    pushq $memboot_vec
    jmp memboot_isr_common
    .set memboot_vec, memboot_vec + 1
    .endr

memboot_isr_common:
    pushq %rax
    pushq %rbx
    pushq %rcx
    pushq %rdx
    pushq %rsi
    pushq %rdi
    pushq %rbp
    pushq %r8
    pushq %r9
    pushq %r10
    pushq %r11
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, %rdi
    andq $-16, %rsp
    cld
    call memboot_exception
    ud2

    // The wake-up IPI: save what a C call may clobber, acknowledge, return
    // to after the `hlt` it ended. The CPU aligned the stack to 16 before
    // its 5-word frame; 9 pushes make it 16-aligned again for the call.
    .p2align 4
    .global memboot_wake_isr
memboot_wake_isr:
    pushq %rax
    pushq %rcx
    pushq %rdx
    pushq %rsi
    pushq %rdi
    pushq %r8
    pushq %r9
    pushq %r10
    pushq %r11
    cld
    call memboot_wake
    popq %r11
    popq %r10
    popq %r9
    popq %r8
    popq %rdi
    popq %rsi
    popq %rdx
    popq %rcx
    popq %rax
    iretq

    // A spurious interrupt needs no acknowledgement (SDM §10.9).
    .p2align 4
    .global memboot_spurious_isr
memboot_spurious_isr:
    iretq
"#,
    options(att_syntax)
);

extern "C" {
    static memboot_isr_base: u8;
    static memboot_wake_isr: u8;
    static memboot_spurious_isr: u8;
}

/// Wake-up IPIs taken, on every CPU.
static WAKEUPS: AtomicU64 = AtomicU64::new(0);

/// The wake-up IPI's handler: acknowledge it. Runs with interrupts off,
/// between the `hlt` it ended and the `cli` after it.
#[no_mangle]
extern "C" fn memboot_wake() {
    WAKEUPS.fetch_add(1, Ordering::Relaxed);
    crate::hw::apic::eoi();
}

/// [`WAKEUPS`] when memory was ready ([`note_memory_ready`]).
static WAKEUPS_AT_READY: AtomicU64 = AtomicU64::new(0);

/// Wake-up IPIs taken so far, on every CPU.
pub fn wakeups() -> u64 {
    WAKEUPS.load(Ordering::Relaxed)
}

/// Memory is ready: remember how many wake-ups were taken before it (an
/// idle AP is only woken for work, and with `regions` there is none before
/// it: this says so in every boot's log).
pub fn note_memory_ready() {
    WAKEUPS_AT_READY.store(wakeups(), Ordering::Relaxed);
}

/// Wake-up IPIs taken before memory was ready, on every CPU.
pub fn wakeups_before_ready() -> u64 {
    WAKEUPS_AT_READY.load(Ordering::Relaxed)
}

/// Halt this CPU until `done()`: `done` is checked with interrupts off,
/// then `sti; hlt` waits for a wake-up IPI (`apic::send_wake`). The IPI
/// that makes `done` true may arrive between the check and the `hlt`: it
/// stays pending while interrupts are off and `sti` holds it back one
/// instruction, so the `hlt` ends at once instead of losing it. Interrupts
/// are off again on return. A CPU that may be halted here is woken by
/// whoever changes what `done` reads.
pub fn halt_until(done: impl Fn() -> bool) {
    while !done() {
        x86_64::instructions::interrupts::enable_and_hlt();
        x86_64::instructions::interrupts::disable();
    }
}

/// Mask both legacy 8259 PICs: memboot's interrupts come from the local
/// APIC only, and a firmware that left the PIT's IRQ 0 on at its BIOS
/// vector 8 would otherwise look like a double fault once interrupts are
/// on. Boot CPU, once, before any CPU halts.
pub fn mask_legacy_pic() {
    use x86_64::instructions::port::Port;
    // SAFETY: 0x21 and 0xa1 are the master's and slave's interrupt mask
    // registers (OCW1); all-ones masks every IRQ line and changes nothing
    // else; nothing else in memboot uses the PICs.
    unsafe {
        Port::<u8>::new(0x21).write(0xff);
        Port::<u8>::new(0xa1).write(0xff);
    }
}

const STUB_BYTES: u64 = 16;

static IN_EXCEPTION: AtomicBool = AtomicBool::new(false);

/// Ends the boot after an exception was reported, with the summary status
/// it is given; set once by [`init`].
static END_BOOT: spin::Once<fn(&'static str) -> !> = spin::Once::new();

const EXCEPTION_NAMES: [&str; 32] = [
    "divide error",
    "debug",
    "NMI",
    "breakpoint",
    "overflow",
    "bound range",
    "invalid opcode",
    "device not available",
    "double fault",
    "coprocessor overrun",
    "invalid TSS",
    "segment not present",
    "stack fault",
    "general protection",
    "page fault",
    "reserved",
    "x87 FP error",
    "alignment check",
    "machine check",
    "SIMD FP error",
    "virtualization",
    "control protection",
    "reserved",
    "reserved",
    "reserved",
    "reserved",
    "reserved",
    "reserved",
    "hypervisor injection",
    "VMM communication",
    "security",
    "reserved",
];

/// The vmemmap's base and its struct-page size, once the vmemmap is
/// mapped ([`note_vmemmap`]): a page fault inside it names the struct page.
static VMEMMAP: spin::Once<(u64, u64)> = spin::Once::new();

/// Name faults inside the vmemmap at `base` by the PFN whose struct page
/// (of `page_bytes`) was touched.
pub fn note_vmemmap(base: u64, page_bytes: u64) {
    VMEMMAP.call_once(|| (base, page_bytes));
}

/// A page fault at `cr2` inside the vmemmap: whose struct page, and why a
/// write there faults (HVO maps a huge page's tails read-only).
fn name_struct_page(cr2: u64, error_code: u64) {
    let Some(&(base, page_bytes)) = VMEMMAP.get() else {
        return;
    };
    let Some(offset) = cr2.checked_sub(base).filter(|o| *o < 1 << 46) else {
        return;
    };
    // Error code bit 0: the page was present; bit 1: a write.
    let why = if error_code & 0b11 == 0b11 {
        ": a write to a read-only struct page (HVO maps a huge page's tails beyond its kept vmemmap page onto that page, read-only)"
    } else {
        ""
    };
    crate::hw::serial::emergency_log(format_args!(
        "  the struct page of pfn {:#x}{why}",
        offset / page_bytes
    ));
}

#[no_mangle]
extern "C" fn memboot_exception(frame: &TrapFrame) -> ! {
    if IN_EXCEPTION.swap(true, Ordering::SeqCst) {
        // A fault while reporting a fault: do not try to print again.
        crate::hw::exit::exit(crate::hw::exit::ExitCode::Failure);
    }
    let cr2 = x86_64::registers::control::Cr2::read_raw();
    let name = EXCEPTION_NAMES
        .get(frame.vector as usize)
        .copied()
        .unwrap_or("unknown");
    crate::hw::serial::emergency_log(format_args!(
        "EXCEPTION: vector {} ({name}) error_code {:#x} rip {:#018x} cr2 {:#018x} rsp {:#018x} rflags {:#x} on APIC {:#x}",
        frame.vector, frame.error_code, frame.rip, cr2, frame.rsp, frame.rflags,
        crate::hw::cpu::initial_apic_id()
    ));
    crate::hw::serial::emergency_log(format_args!(
        "  rax {:#x} rbx {:#x} rcx {:#x} rdx {:#x} rsi {:#x} rdi {:#x} rbp {:#x}",
        frame.rax, frame.rbx, frame.rcx, frame.rdx, frame.rsi, frame.rdi, frame.rbp
    ));
    crate::hw::serial::emergency_log(format_args!(
        "  r8 {:#x} r9 {:#x} r10 {:#x} r11 {:#x} r12 {:#x} r13 {:#x} r14 {:#x} r15 {:#x} cs {:#x} ss {:#x}",
        frame.r8, frame.r9, frame.r10, frame.r11, frame.r12, frame.r13, frame.r14, frame.r15, frame.cs, frame.ss
    ));
    if frame.vector == 14 {
        name_struct_page(cr2, frame.error_code);
    }
    match END_BOOT.get() {
        Some(end_boot) => end_boot("exception"),
        None => crate::hw::exit::exit(crate::hw::exit::ExitCode::Failure),
    }
}

/// Build a TSS whose IST slots point at the tops of the three stacks at
/// `stacks` (memory that lives forever and is used by the CPU alone).
fn tss_for(stacks: *const [IstStack; 3]) -> TaskStateSegment {
    let mut tss = TaskStateSegment::new();
    for slot in [IST_GENERAL, IST_DOUBLE_FAULT, IST_NMI_MCE] {
        let base = stacks as u64 + (slot as u64 - 1) * IST_STACK_BYTES as u64;
        tss.interrupt_stack_table[(slot - 1) as usize] =
            VirtAddr::new(base + IST_STACK_BYTES as u64);
    }
    tss
}

/// A GDT with the kernel code segment at selector 0x08 and `tss` after it.
/// Every CPU's GDT has this layout, so the one IDT (whose gates name the
/// code selector) serves them all.
fn gdt_for(
    tss: &'static TaskStateSegment,
) -> (GlobalDescriptorTable, SegmentSelector, SegmentSelector) {
    let mut gdt = GlobalDescriptorTable::new();
    let code = gdt.append(Descriptor::kernel_code_segment());
    let tss_sel = gdt.append(Descriptor::tss_segment(tss));
    (gdt, code, tss_sel)
}

/// Load a GDT, reload the segment registers from it and load its TSS.
fn load_gdt(gdt: &'static GlobalDescriptorTable, code: SegmentSelector, tss_sel: SegmentSelector) {
    gdt.load();
    // SAFETY: the selectors index the GDT just loaded; the data segments are
    // ignored in long mode, so the null selector is right for them. Each
    // CPU loads a TSS of its own, so none is marked busy twice.
    unsafe {
        CS::set_reg(code);
        let null = SegmentSelector(0);
        DS::set_reg(null);
        ES::set_reg(null);
        SS::set_reg(null);
        load_tss(tss_sel);
    }
}

/// Load the shared IDT (built on first use, by the boot CPU's `init`).
fn load_idt(code: SegmentSelector) {
    // Only the address of the assembly symbol is taken, never its content.
    let base = core::ptr::addr_of!(memboot_isr_base) as u64;
    let idt = IDT.call_once(|| {
        let mut entries = [IdtEntry::MISSING; 256];
        for (vector, entry) in entries.iter_mut().enumerate().take(32) {
            let ist = match vector {
                8 => IST_DOUBLE_FAULT,
                2 | 18 => IST_NMI_MCE,
                _ => IST_GENERAL,
            };
            *entry = IdtEntry::interrupt_gate(base + vector as u64 * STUB_BYTES, code.0, ist);
        }
        // Taken on the halted CPU's own stack (no IST): it is not nested.
        let wake = core::ptr::addr_of!(memboot_wake_isr) as u64;
        let spurious = core::ptr::addr_of!(memboot_spurious_isr) as u64;
        entries[crate::hw::apic::WAKE_VECTOR as usize] = IdtEntry::interrupt_gate(wake, code.0, 0);
        entries[crate::hw::apic::SPURIOUS_VECTOR as usize] =
            IdtEntry::interrupt_gate(spurious, code.0, 0);
        Idt(entries)
    });
    assert_eq!(
        idt.0[0].selector, code.0,
        "every CPU's GDT must put the kernel code segment at the IDT's selector"
    );
    let ptr = DescriptorTablePointer {
        limit: (core::mem::size_of::<Idt>() - 1) as u16,
        base: VirtAddr::new(idt as *const Idt as u64),
    };
    // SAFETY: the IDT is 'static and every present gate points at a stub above.
    unsafe { lidt(&ptr) };
}

/// Load memboot's GDT, TSS and IDT on the boot CPU; an exception on any
/// CPU is reported, then ends the boot with `end_boot("exception")`.
pub fn init(end_boot: fn(&'static str) -> !) {
    END_BOOT.call_once(|| end_boot);
    // Only the address is taken; the stacks are used by the CPU alone.
    let stacks = core::ptr::addr_of!(IST_STACKS);
    let tss = TSS.call_once(|| tss_for(stacks));
    let (gdt, code, tss_sel) = GDT.call_once(|| gdt_for(tss));
    load_gdt(gdt, *code, *tss_sel);
    load_idt(*code);
}

/// An application processor's own GDT and TSS, with IST stacks of its own:
/// built by the boot CPU before any AP starts ([`ap_tables`]), loaded by
/// the AP ([`init_ap`]).
pub struct ApTables {
    gdt: &'static GlobalDescriptorTable,
    code: SegmentSelector,
    tss_sel: SegmentSelector,
}

/// Build one AP's tables on the boot CPU (heap, never freed: they live as
/// long as that CPU runs). Built here rather than on the AP so that the APs
/// coming up touch no heap: the heap then holds the same blocks in every
/// boot, whatever order the APs came up in, and what the boot CPU later
/// allocates costs the same instructions every time.
pub fn ap_tables() -> ApTables {
    let layout = core::alloc::Layout::new::<[IstStack; 3]>();
    // SAFETY: the layout is non-zero-sized. The memory is left
    // uninitialised: only the CPU uses it, as stacks, which it writes before
    // it reads; no Rust value is ever read from it.
    let raw = unsafe { alloc::alloc::alloc(layout) } as *mut [IstStack; 3];
    if raw.is_null() {
        alloc::alloc::handle_alloc_error(layout);
    }
    let tss: &'static TaskStateSegment =
        alloc::boxed::Box::leak(alloc::boxed::Box::new(tss_for(raw)));
    let (gdt, code, tss_sel) = gdt_for(tss);
    let gdt: &'static GlobalDescriptorTable = alloc::boxed::Box::leak(alloc::boxed::Box::new(gdt));
    ApTables { gdt, code, tss_sel }
}

/// Load this application processor's own GDT and TSS (from [`ap_tables`])
/// and the shared IDT: an exception on an AP is reported like one on the
/// boot CPU. Runs on the AP, once.
pub fn init_ap(tables: &ApTables) {
    load_gdt(tables.gdt, tables.code, tables.tss_sel);
    load_idt(tables.code);
}
