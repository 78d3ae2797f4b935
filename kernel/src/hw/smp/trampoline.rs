//! The AP trampoline: the real-mode entry a STARTUP IPI jumps to, its
//! parameter block, the low page it is copied to and identity-mapped at
//! while APs start, and the claim that binds each round to one AP.
//!
//! A STARTUP IPI with vector `v` starts the AP in real mode at
//! `CS:IP = (v << 8):0`, i.e. physical address `v << 12`, so the code is
//! copied to a free page below 1 MiB taken from the bootloader's memory map
//! (Usable, not page 0).
//!
//! # Page layout
//!
//! ```text
//! +0x00  cli; jmp code16           (the SIPI entry point)
//! +0x10  TrampolineParams          (fixed part written once; each round's
//!                                   stack, argument and claim before its SIPI)
//! +0x90  code16 / code32 / code64  (position independent, see below)
//! ```
//!
//! * 16-bit: `DS = CS`, `ebx = CS << 4` (the page's physical address),
//!   `lgdt` the temporary GDT in the parameter block (null, 32-bit code 0x08,
//!   32-bit data 0x10, 64-bit code 0x18), set CR0.PE, far jump (through the
//!   parameter block: `far32` is patched with the page's address) to 32-bit
//!   code (SDM §9.9.1).
//! * 32-bit: flat data segments; CR3 = `temp_cr3`, a copy of the kernel's
//!   PML4 in a second low page (32-bit `mov cr3` cannot load the kernel's
//!   own CR3, which may be above 4 GiB; all PML4 entries are shared, so the
//!   address space is the kernel's); CR4.PAE; EFER.LME and EFER.NXE (the
//!   bootloader's tables use NX, which is a reserved bit without NXE);
//!   CR0.PG (SDM §9.8.5). The CPU is now in compatibility mode; a far jump
//!   through `far64` to the 64-bit code segment enters 64-bit mode.
//! * 64-bit, still on the temporary page tables: read the CPU's own APIC id
//!   (CPUID) and claim the round with a locked `cmpxchg` of `claim` from
//!   that id + 1 to 0. An AP that comes too late, after the CPU starting it
//!   gave up on it (and perhaps prepared the next AP's round), finds 0 or
//!   another id there, counts itself in `halted` and halts, never touching
//!   the next AP's stack or `PerCpu`, nor the kernel's page tables. The
//!   owner loads the BSP's CR0 and CR4 and the kernel's real CR3, then its
//!   stack, and calls `entry(arg)`: `ap_entry` with the AP's `PerCpu`.
//!
//! While APs start, the trampoline page is identity mapped (virt == phys,
//! writable, executable) in the kernel's page tables, because paging is
//! switched on while executing from it; both the mapping and its removal
//! ([`Trampoline::unmap`]) go through the page tables the memory-init
//! pipeline lends (page-table frames come from the heap and stay).

use core::alloc::Layout;
use core::arch::global_asm;
use core::mem::{offset_of, size_of};
use core::sync::atomic::{AtomicU64, Ordering};

use bootloader_api::info::{MemoryRegion, MemoryRegionKind};
use memboot_kernel::smp_error::SmpError;
use x86_64::registers::control::{Cr0, Cr3, Cr4};
use x86_64::structures::paging::{
    FrameAllocator, Mapper, OffsetPageTable, Page, PageTableFlags, PhysFrame, Size4KiB, Translate,
};
use x86_64::{PhysAddr, VirtAddr};

use super::percpu::PerCpu;

const PAGE: u64 = 4096;
/// Offset of the parameter block in the trampoline page.
const PARAMS_OFFSET: usize = 16;

const SEL_CODE32: u16 = 0x08;
const SEL_DATA32: u16 = 0x10;
const SEL_CODE64: u16 = 0x18;

/// The trampoline's parameter block, shared with the assembly below (which
/// reads it through `offset_of!` constants). The fixed part is written once
/// when the trampoline is installed; each round's `stack_top`, `arg` and
/// `claim` by the CPU starting that AP, before its STARTUP IPI.
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
    /// APs that found the claim not theirs and halted, counted with a
    /// locked `inc` (never reset): how the CPU that gave up on an AP sees it
    /// leave the next round alone.
    halted: u64,
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
    jne 5f
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
5:
    /* Not our round: count ourselves as halted, touch nothing else. */
    lock incq {halted}(%rsi)
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
    halted = const offset_of!(TrampolineParams, halted),
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

/// The signature of the Rust entry the trampoline calls on the AP's stack.
pub(super) type ApEntry = extern "C" fn(&'static PerCpu) -> !;

/// The trampoline, mapped and ready for one AP after another.
pub(super) struct Trampoline {
    phys: u64,
    params: *mut TrampolineParams,
}

impl TrampolineParams {
    /// The parameters for a trampoline at physical `phys` with its 32- and
    /// 64-bit code at `off32`/`off64`, the temporary PML4 copy at
    /// `pml4_phys`, the kernel's `cr3` and the Rust `entry`; the per-AP
    /// fields (`stack_top`, `arg`, `claim`) are 0 until each round sets them.
    fn fixed(phys: u64, off: CodeOffsets, pml4_phys: u64, cr3: u64, entry: ApEntry) -> Self {
        TrampolineParams {
            far32_offset: (phys + off.code32) as u32,
            far32_selector: SEL_CODE32,
            _pad0: 0,
            far64_offset: (phys + off.code64) as u32,
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
            entry: entry as usize as u64,
            arg: 0,
            claim: 0,
            halted: 0,
            gdt: [
                0,
                0x00cf_9a00_0000_ffff, // 0x08: 32-bit code, flat
                0x00cf_9200_0000_ffff, // 0x10: 32-bit data, flat
                0x00af_9a00_0000_ffff, // 0x18: 64-bit code
            ],
        }
    }
}

/// Where the 32- and 64-bit code start, from the page's start.
#[derive(Clone, Copy)]
struct CodeOffsets {
    code32: u64,
    code64: u64,
}

/// The code's length and its entry points' offsets, checked against
/// [`TrampolineParams`]'s place.
fn code_layout() -> Result<(u64, CodeOffsets), SmpError> {
    let start = core::ptr::addr_of!(memboot_ap_tramp_start) as u64;
    let len = core::ptr::addr_of!(memboot_ap_tramp_end) as u64 - start;
    let params_off = core::ptr::addr_of!(memboot_ap_tramp_params) as u64 - start;
    let off = CodeOffsets {
        code32: core::ptr::addr_of!(memboot_ap_tramp_32) as u64 - start,
        code64: core::ptr::addr_of!(memboot_ap_tramp_64) as u64 - start,
    };
    if params_off != PARAMS_OFFSET as u64 || len > PAGE {
        return Err(SmpError::Trampoline(
            "trampoline layout does not match TrampolineParams",
        ));
    }
    Ok((len, off))
}

/// Free 4 KiB pages in [0x1000, 0x100000) per the bootloader's map.
fn low_pages(regions: &[MemoryRegion]) -> impl Iterator<Item = u64> + '_ {
    regions
        .iter()
        .filter(|r| r.kind == MemoryRegionKind::Usable)
        .flat_map(|r| {
            let start = r.start.div_ceil(PAGE) * PAGE;
            let end = r.end.min(0x10_0000) / PAGE * PAGE;
            (start..end.max(start)).step_by(PAGE as usize)
        })
        .filter(|&p| p >= PAGE)
}

impl Trampoline {
    /// Find two free low pages (the first one unmapped, for the identity
    /// mapping) and install the trampoline in them, calling `entry`.
    pub(super) fn install_low(
        regions: &[MemoryRegion],
        phys_offset: u64,
        mapper: &mut OffsetPageTable<'_>,
        frames: &mut HeapFrames,
        entry: ApEntry,
    ) -> Result<Self, SmpError> {
        let mut low = low_pages(regions);
        let tramp_phys = low.find(|&p| mapper.translate_addr(VirtAddr::new(p)).is_none());
        let pml4_phys = low.next();
        let (Some(tramp_phys), Some(pml4_phys)) = (tramp_phys, pml4_phys) else {
            return Err(SmpError::NoTrampolinePages);
        };
        let tramp = Self::install(tramp_phys, pml4_phys, phys_offset, mapper, frames, entry)?;
        kprintln!(
            "smpboot: trampoline at {:#x} (vector {:#04x}), temporary PML4 at {:#x}",
            tramp_phys,
            tramp.vector(),
            pml4_phys
        );
        Ok(tramp)
    }

    /// Identity-map `phys`, copy the kernel PML4 to `pml4_phys`, the code
    /// and the fixed parameters to `phys`.
    fn install(
        phys: u64,
        pml4_phys: u64,
        phys_offset: u64,
        mapper: &mut OffsetPageTable<'_>,
        frames: &mut HeapFrames,
        entry: ApEntry,
    ) -> Result<Self, SmpError> {
        let (len, off) = code_layout()?;
        let start = core::ptr::addr_of!(memboot_ap_tramp_start) as u64;
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
                .map_err(|_| SmpError::Trampoline("cannot identity-map the trampoline page"))?
                .flush();
        }
        // Copy the PML4 only now, so it includes the identity mapping.
        let cr3 = raw_cr3();
        let params = (phys_offset + phys + PARAMS_OFFSET as u64) as *mut TrampolineParams;
        // SAFETY: both pages are RAM in the physical-memory mapping; the
        // kernel PML4 is only read, the low page is free (see above) and
        // no AP has been sent to it yet.
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
            let fixed = TrampolineParams::fixed(phys, off, pml4_phys, cr3, entry);
            core::ptr::write_volatile(params, fixed);
        }
        Ok(Trampoline { phys, params })
    }

    /// Remove the page's identity mapping, through the page tables the
    /// pipeline lends. Only once no AP runs on the trampoline: every AP
    /// that came up runs on its own GDT and the kernel's CR3, and one that
    /// comes late halts at the claim (this also unmaps the page from its
    /// temporary tables, which share the lower levels).
    pub(super) fn unmap(&self, mapper: &mut OffsetPageTable<'_>) -> Result<(), SmpError> {
        let page = Page::<Size4KiB>::containing_address(VirtAddr::new(self.phys));
        let (_, flush) = mapper.unmap(page).map_err(|_| SmpError::TrampolineUnmap)?;
        flush.flush();
        Ok(())
    }

    pub(super) fn claim_slot(&self) -> &AtomicU64 {
        // SAFETY: `claim` is an aligned u64 inside the mapped low page; the
        // AP accesses it only with a locked `cmpxchg`, so atomics on both
        // sides are the right model. The page outlives `self`.
        unsafe { AtomicU64::from_ptr(core::ptr::addr_of_mut!((*self.params).claim)) }
    }

    /// How many APs found the claim not theirs and halted so far.
    pub(super) fn halted(&self) -> u64 {
        // SAFETY: `halted` is an aligned u64 inside the mapped low page;
        // APs only change it with a locked `inc`. The page outlives `self`.
        unsafe { AtomicU64::from_ptr(core::ptr::addr_of_mut!((*self.params).halted)) }
            .load(Ordering::Acquire)
    }

    /// Fill in the round for the AP with `pc`'s APIC id: nobody's claim,
    /// then its stack and `PerCpu`, then the claim that lets that AP (and
    /// only it) use them.
    pub(super) fn prepare(&self, stack_top: u64, pc: &'static PerCpu) {
        self.claim_slot().store(0, Ordering::Release);
        // SAFETY: no AP can use these fields now: the previous AP either
        // arrived (it read them before that) or its round was taken back
        // (claim 0, so a late one halts before reading anything), so these
        // plain writes do not race with a reader; the release store of the
        // claim below publishes them.
        unsafe {
            core::ptr::addr_of_mut!((*self.params).stack_top).write_volatile(stack_top);
            core::ptr::addr_of_mut!((*self.params).arg).write_volatile(pc as *const PerCpu as u64);
        }
        self.claim_slot()
            .store(u64::from(pc.info.apic_id) + 1, Ordering::Release);
    }

    pub(super) fn vector(&self) -> u8 {
        (self.phys >> 12) as u8
    }
}
