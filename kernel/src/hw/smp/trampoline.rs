//! The AP trampoline (see the parent module's docs for the page layout and
//! each mode's steps): its parameter block, its code, and the low page it
//! is copied to and identity-mapped at while APs start.

use core::alloc::Layout;
use core::arch::global_asm;
use core::mem::{offset_of, size_of};
use core::sync::atomic::{AtomicU64, Ordering};

use x86_64::registers::control::{Cr0, Cr3, Cr4};
use x86_64::structures::paging::{
    FrameAllocator, Mapper, OffsetPageTable, Page, PageTableFlags, PhysFrame, Size4KiB,
};
use x86_64::{PhysAddr, VirtAddr};

use super::{ap_entry, PerCpu};

pub(super) const PAGE: u64 = 4096;
/// Offset of the parameter block in the trampoline page.
const PARAMS_OFFSET: usize = 16;

const SEL_CODE32: u16 = 0x08;
const SEL_DATA32: u16 = 0x10;
const SEL_CODE64: u16 = 0x18;

/// The trampoline's parameter block, shared with the assembly below (which
/// reads it through `offset_of!` constants). Written by the BSP into the
/// low page before each AP's STARTUP IPI.
#[derive(Clone, Copy)]
#[repr(C)]
struct TrampolineParams {
    /// m16:32 far pointer to the 32-bit code (physical address).
    far32_offset: u32,
    far32_selector: u16,
    _pad0: u16,
    /// m16:32 far pointer to the 64-bit code (physical address).
    far64_offset: u32,
    far64_selector: u16,
    _pad1: [u16; 4],
    /// `lgdt` operand: limit then 32-bit base, contiguous.
    gdt_limit: u16,
    gdt_base: u32,
    /// Physical address of the temporary PML4 (below 1 MiB).
    temp_cr3: u32,
    /// The kernel's CR3 (any address), loaded in 64-bit mode.
    kernel_cr3: u64,
    cr0: u64,
    cr4: u64,
    /// Top of the AP's stack (the AP loads it once it owns the claim).
    stack_top: u64,
    /// `extern "C" fn(&'static PerCpu) -> !`
    entry: u64,
    arg: u64,
    /// The temporary GDT.
    gdt: [u64; 4],
    /// Who may use this round's parameters: the APIC id of the AP being
    /// started, plus one (0: nobody). The AP takes the round with a locked
    /// `cmpxchg` of its own APIC id + 1 against 0, on the temporary page
    /// tables, before it reads `stack_top` or `arg`; the BSP takes an
    /// unclaimed round back by exchanging it with 0. So an AP that runs the
    /// trampoline late, after the BSP gave up on it and prepared the next
    /// AP's round, finds another id there and halts, instead of taking the
    /// next AP's stack and `PerCpu`.
    claim: u64,
    _pad2: u64,
}
const _: () = assert!(size_of::<TrampolineParams>() == 128);
const _: () =
    assert!(offset_of!(TrampolineParams, gdt_base) == offset_of!(TrampolineParams, gdt_limit) + 2);
const _: () = assert!(offset_of!(TrampolineParams, gdt).is_multiple_of(8));
const _: () = assert!((PARAMS_OFFSET + size_of::<TrampolineParams>()).is_multiple_of(16));

global_asm!(
    r#"
    .section .text.memboot_ap_tramp, "ax"
    .p2align 4
    .code16
    .global memboot_ap_tramp_start
memboot_ap_tramp_start:
    cli
    jmp memboot_ap_tramp_16
    .p2align 4
    .global memboot_ap_tramp_params
memboot_ap_tramp_params:
    .skip {params_size}
memboot_ap_tramp_16:
    cld
    movw %cs, %ax
    movw %ax, %ds
    xorl %ebx, %ebx
    movw %ax, %bx
    shll $4, %ebx
    lgdtl {gdtr}
    movl %cr0, %eax
    orl $1, %eax
    movl %eax, %cr0
    ljmpl *{far32}

    .code32
    .global memboot_ap_tramp_32
memboot_ap_tramp_32:
    movw ${data32}, %ax
    movw %ax, %ds
    movw %ax, %es
    movw %ax, %ss
    movw %ax, %fs
    movw %ax, %gs
    leal {params}(%ebx), %esi
    movl {temp_cr3}(%esi), %eax
    movl %eax, %cr3
    movl %cr4, %eax
    orl $0x20, %eax
    movl %eax, %cr4
    movl $0xc0000080, %ecx
    rdmsr
    orl $0x900, %eax
    wrmsr
    movl %cr0, %eax
    orl $0x80000001, %eax
    movl %eax, %cr0
    ljmpl *{far64}(%esi)

    .code64
    .global memboot_ap_tramp_64
memboot_ap_tramp_64:
    movl %esi, %esi
    /* This CPU's APIC id into r8d: CPUID leaf 0xB's x2APIC id where the
       leaf exists (EBX[15:0] != 0), else leaf 1's initial APIC id. */
    xorl %eax, %eax
    cpuid
    cmpl $0xb, %eax
    jb 3f
    movl $0xb, %eax
    xorl %ecx, %ecx
    cpuid
    testw %bx, %bx
    jz 3f
    movl %edx, %r8d
    jmp 4f
3:
    movl $1, %eax
    cpuid
    shrl $24, %ebx
    movl %ebx, %r8d
4:
    /* Take this round if it is ours: claim == id + 1 -> 0. Still on the
       temporary page tables, which map this page: a late AP halts here. */
    leal 1(%r8), %eax
    xorl %ecx, %ecx
    lock cmpxchgq %rcx, {claim}(%rsi)
    jne 2f
    movq {cr0}(%rsi), %rax
    movq %rax, %cr0
    movq {cr4}(%rsi), %rax
    movq %rax, %cr4
    movq {kernel_cr3}(%rsi), %rax
    movq %rax, %cr3
    movq {stack}(%rsi), %rax
    movq %rax, %rsp
    movq {arg}(%rsi), %rdi
    movq {entry}(%rsi), %rax
    xorl %ebp, %ebp
    callq *%rax
2:
    cli
    hlt
    jmp 2b
    .global memboot_ap_tramp_end
memboot_ap_tramp_end:
    .text
"#,
    params_size = const size_of::<TrampolineParams>(),
    params = const PARAMS_OFFSET,
    gdtr = const PARAMS_OFFSET + offset_of!(TrampolineParams, gdt_limit),
    far32 = const PARAMS_OFFSET + offset_of!(TrampolineParams, far32_offset),
    far64 = const offset_of!(TrampolineParams, far64_offset),
    data32 = const SEL_DATA32,
    temp_cr3 = const offset_of!(TrampolineParams, temp_cr3),
    cr0 = const offset_of!(TrampolineParams, cr0),
    cr4 = const offset_of!(TrampolineParams, cr4),
    kernel_cr3 = const offset_of!(TrampolineParams, kernel_cr3),
    stack = const offset_of!(TrampolineParams, stack_top),
    arg = const offset_of!(TrampolineParams, arg),
    entry = const offset_of!(TrampolineParams, entry),
    claim = const offset_of!(TrampolineParams, claim),
    options(att_syntax)
);

extern "C" {
    static memboot_ap_tramp_start: u8;
    static memboot_ap_tramp_params: u8;
    static memboot_ap_tramp_32: u8;
    static memboot_ap_tramp_64: u8;
    static memboot_ap_tramp_end: u8;
}

/// Page-table frames for the identity mappings, from the heap (which lies
/// in the physical-memory mapping, so phys = virt - phys_offset). Never
/// freed: once linked into the page tables they stay there.
pub(super) struct HeapFrames {
    pub(super) phys_offset: u64,
}

// SAFETY: every frame returned is a fresh, zeroed, 4 KiB aligned heap
// allocation that is never freed or used otherwise.
unsafe impl FrameAllocator<Size4KiB> for HeapFrames {
    fn allocate_frame(&mut self) -> Option<PhysFrame> {
        let layout = Layout::from_size_align(PAGE as usize, PAGE as usize).ok()?;
        // SAFETY: non-zero-sized layout.
        let p = unsafe { alloc::alloc::alloc_zeroed(layout) };
        if p.is_null() {
            return None;
        }
        PhysFrame::from_start_address(PhysAddr::new(p as u64 - self.phys_offset)).ok()
    }
}

fn raw_cr3() -> u64 {
    let (frame, flags) = Cr3::read_raw();
    frame.start_address().as_u64() | flags as u64
}

/// The trampoline, mapped and ready for one AP after another.
pub(super) struct Trampoline {
    pub(super) phys: u64,
    params: *mut TrampolineParams,
    template: TrampolineParams,
}

impl TrampolineParams {
    /// The parameters for a trampoline at physical `phys` with its 32- and
    /// 64-bit code at `off32`/`off64`, the temporary PML4 copy at
    /// `pml4_phys` and the kernel's `cr3`; the per-AP fields (`stack_top`,
    /// `arg`, `claim`) are 0 until each round sets them.
    fn template(phys: u64, off32: u64, off64: u64, pml4_phys: u64, cr3: u64) -> Self {
        TrampolineParams {
            far32_offset: (phys + off32) as u32,
            far32_selector: SEL_CODE32,
            _pad0: 0,
            far64_offset: (phys + off64) as u32,
            far64_selector: SEL_CODE64,
            _pad1: [0; 4],
            gdt_limit: (size_of::<[u64; 4]>() - 1) as u16,
            gdt_base: (phys + PARAMS_OFFSET as u64 + offset_of!(TrampolineParams, gdt) as u64)
                as u32,
            temp_cr3: pml4_phys as u32,
            kernel_cr3: cr3,
            cr0: Cr0::read_raw(),
            cr4: Cr4::read_raw(),
            stack_top: 0,
            entry: ap_entry as extern "C" fn(&'static PerCpu) -> ! as usize as u64,
            arg: 0,
            claim: 0,
            _pad2: 0,
            gdt: [
                0,
                0x00cf_9a00_0000_ffff, // 0x08: 32-bit code, flat
                0x00cf_9200_0000_ffff, // 0x10: 32-bit data, flat
                0x00af_9a00_0000_ffff, // 0x18: 64-bit code
            ],
        }
    }
}

impl Trampoline {
    /// Copy the code to `phys`, the kernel PML4 to `pml4_phys`, identity-map
    /// `phys`.
    pub(super) fn install(
        phys: u64,
        pml4_phys: u64,
        phys_offset: u64,
        mapper: &mut OffsetPageTable<'_>,
        frames: &mut HeapFrames,
    ) -> Result<Self, &'static str> {
        let start = core::ptr::addr_of!(memboot_ap_tramp_start) as u64;
        let len = core::ptr::addr_of!(memboot_ap_tramp_end) as u64 - start;
        let params_off = core::ptr::addr_of!(memboot_ap_tramp_params) as u64 - start;
        let off32 = core::ptr::addr_of!(memboot_ap_tramp_32) as u64 - start;
        let off64 = core::ptr::addr_of!(memboot_ap_tramp_64) as u64 - start;
        if params_off != PARAMS_OFFSET as u64 || len > PAGE {
            return Err("trampoline layout does not match TrampolineParams");
        }
        let page = Page::<Size4KiB>::containing_address(VirtAddr::new(phys));
        let frame = PhysFrame::containing_address(PhysAddr::new(phys));
        // SAFETY: `phys` is a free low page (Usable in the bootloader's map,
        // not otherwise used by memboot) and its virtual address is unmapped
        // (the caller checked); an executable, writable identity mapping of
        // it aliases no Rust object.
        unsafe {
            mapper
                .map_to(
                    page,
                    frame,
                    PageTableFlags::PRESENT | PageTableFlags::WRITABLE,
                    frames,
                )
                .map_err(|_| "cannot identity-map the trampoline page")?
                .flush();
        }
        // Copy the PML4 only now, so it includes the identity mapping.
        let cr3 = raw_cr3();
        // SAFETY: both pages are RAM in the physical-memory mapping; the
        // kernel PML4 is only read, the low page is free (see above).
        unsafe {
            core::ptr::copy_nonoverlapping(
                (phys_offset + (cr3 & !0xfff)) as *const u8,
                (phys_offset + pml4_phys) as *mut u8,
                PAGE as usize,
            );
            core::ptr::write_bytes((phys_offset + phys) as *mut u8, 0, PAGE as usize);
            core::ptr::copy_nonoverlapping(
                start as *const u8,
                (phys_offset + phys) as *mut u8,
                len as usize,
            );
        }
        let template = TrampolineParams::template(phys, off32, off64, pml4_phys, cr3);
        Ok(Trampoline {
            phys,
            params: (phys_offset + phys + PARAMS_OFFSET as u64) as *mut TrampolineParams,
            template,
        })
    }

    pub(super) fn claim_slot(&self) -> &AtomicU64 {
        // SAFETY: `claim` is an aligned u64 inside the mapped low page; the
        // AP accesses it only with a locked `cmpxchg`, so atomics on both
        // sides are the right model. The page outlives `self`.
        unsafe { AtomicU64::from_ptr(core::ptr::addr_of_mut!((*self.params).claim)) }
    }

    /// Fill in the parameter block for the AP with `pc`'s APIC id: the
    /// fields first, then the claim that lets that AP (and only it) use
    /// them.
    pub(super) fn prepare(&self, stack_top: u64, pc: &'static PerCpu) {
        let p = TrampolineParams {
            stack_top,
            arg: pc as *const PerCpu as u64,
            claim: 0,
            ..self.template
        };
        // SAFETY: no AP can use the block now: the previous AP either
        // arrived (it read its fields before that) or its round was taken
        // back (claim 0, so a late one halts before reading anything), so
        // this plain write does not race with a reader.
        unsafe { core::ptr::write_volatile(self.params, p) };
        self.claim_slot()
            .store(u64::from(pc.info.apic_id) + 1, Ordering::Release);
    }

    pub(super) fn vector(&self) -> u8 {
        (self.phys >> 12) as u8
    }
}
