//! The local APIC, as far as SMP needs it: the own APIC id, the interrupt
//! command register (ICR) for INIT and STARTUP IPIs, and the one interrupt
//! memboot takes, [`WAKE_VECTOR`]: an idle CPU halts until another sends
//! it ([`enable_wakeups`], [`send_wake`], [`eoi`]).
//!
//! x2APIC mode (Intel SDM vol. 3A §10.12) is used when CPUID.1:ECX bit 21
//! says the CPU has it (`cpu::has_x2apic`): the registers are MSRs (id
//! 0x802, ICR 0x830, one 64-bit write with the destination in bits 63:32,
//! §10.12.9) and 32-bit APIC ids work. Otherwise the xAPIC registers are memory mapped at the MADT's
//! local APIC address (§10.4.1, ICR at 0x300/0x310, id at 0x20 bits 31:24);
//! memboot maps that page itself, uncached, because the bootloader's
//! physical-memory mapping covers RAM only and maps it write-back.
//!
//! The BSP picks the mode in [`init_bsp`]; every AP calls [`init_ap`] first
//! thing so it runs in the same mode.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use x86_64::registers::model_specific::Msr;
use x86_64::structures::paging::{
    FrameAllocator, Mapper, OffsetPageTable, Page, PageTableFlags, PhysFrame, Size4KiB, Translate,
};
use x86_64::{PhysAddr, VirtAddr};

const IA32_APIC_BASE: u32 = 0x1b;
const APIC_BASE_ENABLE: u64 = 1 << 11;
const APIC_BASE_X2APIC: u64 = 1 << 10;
const X2APIC_ID_MSR: u32 = 0x802;
const X2APIC_ICR_MSR: u32 = 0x830;
const XAPIC_ID: u64 = 0x20;
const XAPIC_ICR_LOW: u64 = 0x300;
const XAPIC_ICR_HIGH: u64 = 0x310;
/// ICR delivery status (xAPIC only): set while the IPI is being sent.
const ICR_SEND_PENDING: u32 = 1 << 12;
/// ICR: delivery mode INIT, level assert (SDM vol. 3A Figure 10-12).
const ICR_INIT_ASSERT: u32 = 0x0000_4500;
/// ICR: delivery mode STARTUP (start-up IPI), level assert; vector in 7:0.
const ICR_STARTUP: u32 = 0x0000_4600;
/// ICR: delivery mode fixed, level assert, edge; vector in 7:0.
const ICR_FIXED: u32 = 0x0000_4000;
/// End of interrupt (SDM §10.8.5), xAPIC offset.
const XAPIC_EOI: u64 = 0xb0;
/// Spurious-interrupt vector register (SDM §10.9), xAPIC offset: bit 8 enables
/// the APIC, bits 7:0 are the vector of a spurious interrupt.
const XAPIC_SVR: u64 = 0xf0;
const SVR_ENABLE: u32 = 1 << 8;
/// The local vector table (SDM §10.5.1): timer, thermal, performance
/// counters, LINT0, LINT1, error; xAPIC offsets (x2APIC MSR = 0x800 +
/// offset / 16). Bit 16 masks an entry.
const LVT_REGS: [u64; 6] = [0x320, 0x330, 0x340, 0x350, 0x360, 0x370];
const LVT_MASKED: u32 = 1 << 16;

/// The vector an idle CPU is woken with (a fixed IPI); the only interrupt
/// memboot unmasks.
pub const WAKE_VECTOR: u8 = 0xf0;
/// Where the APIC sends a spurious interrupt (SDM §10.9): ignored.
pub const SPURIOUS_VECTOR: u8 = 0xff;

static X2APIC: AtomicBool = AtomicBool::new(false);
/// Virtual address of the xAPIC register page (0 in x2APIC mode).
static XAPIC_BASE: AtomicU64 = AtomicU64::new(0);

pub fn x2apic_mode() -> bool {
    X2APIC.load(Ordering::Relaxed)
}

/// Turn on x2APIC mode (EN and EXTD in IA32_APIC_BASE, SDM §10.12.1).
fn enable_x2apic() {
    let mut base = Msr::new(IA32_APIC_BASE);
    // SAFETY: IA32_APIC_BASE exists on every CPU with an APIC; setting EN and
    // EXTD moves xAPIC (or disabled) to x2APIC mode, a legal transition
    // (SDM Figure 10-27) that CPUID said is supported; the base address and
    // the BSP flag are written back unchanged.
    // Disabled goes to xAPIC first (EN), then to x2APIC (EXTD), the order
    // Linux uses too.
    unsafe {
        let v = base.read();
        if v & APIC_BASE_ENABLE == 0 {
            base.write(v | APIC_BASE_ENABLE);
        }
        if v & APIC_BASE_X2APIC == 0 {
            base.write(v | APIC_BASE_ENABLE | APIC_BASE_X2APIC);
        }
    }
}

/// On the BSP: choose x2APIC if possible, else map the xAPIC page at its
/// physical address (identity, uncached). Returns a line for the log.
pub fn init_bsp(
    lapic_phys: u64,
    mapper: &mut OffsetPageTable<'_>,
    frames: &mut impl FrameAllocator<Size4KiB>,
) -> Result<&'static str, &'static str> {
    if crate::hw::cpu::has_x2apic() {
        enable_x2apic();
        X2APIC.store(true, Ordering::Relaxed);
        return Ok("x2APIC mode (MSR access)");
    }
    let phys = if lapic_phys == 0 {
        0xfee0_0000
    } else {
        lapic_phys & !0xfff
    };
    let page = Page::<Size4KiB>::containing_address(VirtAddr::new(phys));
    let frame = PhysFrame::containing_address(PhysAddr::new(phys));
    let flags = PageTableFlags::PRESENT
        | PageTableFlags::WRITABLE
        | PageTableFlags::NO_CACHE
        | PageTableFlags::WRITE_THROUGH
        | PageTableFlags::NO_EXECUTE;
    match mapper.translate_addr(VirtAddr::new(phys)) {
        Some(p) if p.as_u64() == phys => {}
        Some(_) => return Err("the xAPIC page's virtual address is in use"),
        None => {
            // SAFETY: the page at virt == phys is unmapped (checked above) and
            // the frame is the local APIC's register page, MMIO that no Rust
            // object aliases; uncached as SDM §10.4.1 requires.
            unsafe { mapper.map_to(page, frame, flags, frames) }
                .map_err(|_| "cannot map the xAPIC page")?
                .flush();
        }
    }
    XAPIC_BASE.store(phys, Ordering::Relaxed);
    Ok("xAPIC mode (MMIO, mapped uncached)")
}

/// On an AP: use the mode the BSP chose.
pub fn init_ap() {
    if x2apic_mode() {
        enable_x2apic();
    }
}

fn xapic_read(reg: u64) -> u32 {
    let base = XAPIC_BASE.load(Ordering::Relaxed);
    assert!(base != 0, "xAPIC register page not mapped");
    // SAFETY: `base` is the mapped, uncached xAPIC page (init_bsp) and `reg`
    // an aligned 32-bit register in it; APIC registers need 32-bit accesses.
    unsafe { core::ptr::read_volatile((base + reg) as *const u32) }
}

fn xapic_write(reg: u64, v: u32) {
    let base = XAPIC_BASE.load(Ordering::Relaxed);
    assert!(base != 0, "xAPIC register page not mapped");
    // SAFETY: as in xapic_read; callers write the ICR (sends an IPI), EOI,
    // the spurious-vector register and the LVT masks, nothing that maps
    // or moves memory.
    unsafe { core::ptr::write_volatile((base + reg) as *mut u32, v) }
}

/// This CPU's local APIC id, read from its APIC.
pub fn id() -> u32 {
    if x2apic_mode() {
        // SAFETY: in x2APIC mode the id MSR exists and reading it has no
        // side effects.
        unsafe { Msr::new(X2APIC_ID_MSR).read() as u32 }
    } else {
        xapic_read(XAPIC_ID) >> 24
    }
}

/// Write local APIC register `xapic_reg` (its x2APIC MSR in that mode).
fn write_reg(xapic_reg: u64, v: u32) {
    if x2apic_mode() {
        // SAFETY: 0x800 + offset / 16 is the register's x2APIC MSR (SDM
        // Table 10-6); callers write only the EOI, spurious-vector and LVT
        // registers, which take 32-bit values.
        unsafe { Msr::new(0x800 + (xapic_reg / 16) as u32).write(u64::from(v)) };
    } else {
        xapic_write(xapic_reg, v);
    }
}

fn read_reg(xapic_reg: u64) -> u32 {
    if x2apic_mode() {
        // SAFETY: as in write_reg; reading an LVT or the spurious-vector
        // register has no side effects.
        unsafe { Msr::new(0x800 + (xapic_reg / 16) as u32).read() as u32 }
    } else {
        xapic_read(xapic_reg)
    }
}

/// On each CPU, after [`init_bsp`] or [`init_ap`]: mask every local
/// interrupt source (the firmware may leave a timer or the legacy PIC's
/// LINT0 on) and software-enable the APIC, so a [`WAKE_VECTOR`] IPI
/// interrupts a halted CPU and nothing else does.
pub fn enable_wakeups() {
    for reg in LVT_REGS {
        write_reg(reg, read_reg(reg) | LVT_MASKED);
    }
    write_reg(XAPIC_SVR, SVR_ENABLE | u32::from(SPURIOUS_VECTOR));
}

/// Wake the CPU with local APIC id `apic_id` from `hlt` (or make its next
/// `sti; hlt` return at once).
pub fn send_wake(apic_id: u32) {
    send_ipi(apic_id, ICR_FIXED | u32::from(WAKE_VECTOR));
}

/// End of interrupt, from the [`WAKE_VECTOR`] handler.
pub fn eoi() {
    write_reg(XAPIC_EOI, 0);
}

fn send_ipi(apic_id: u32, icr_low: u32) {
    if x2apic_mode() {
        // SAFETY: writing the x2APIC ICR sends one IPI (SDM §10.12.9): INIT
        // and STARTUP only to APs that are not running yet, the wake-up
        // vector to a CPU that runs memboot's handler for it.
        unsafe { Msr::new(X2APIC_ICR_MSR).write(((apic_id as u64) << 32) | icr_low as u64) };
    } else {
        // Each CPU sends through its own APIC's ICR, one IPI at a time: a
        // CPU never sends from the wake-up handler.
        xapic_write(XAPIC_ICR_HIGH, apic_id << 24);
        xapic_write(XAPIC_ICR_LOW, icr_low);
        let deadline = crate::hw::tsc::rdtsc() + crate::hw::tsc::khz().max(1) * 10;
        while xapic_read(XAPIC_ICR_LOW) & ICR_SEND_PENDING != 0
            && crate::hw::tsc::rdtsc() < deadline
        {
            core::hint::spin_loop();
        }
    }
}

/// INIT IPI (level assert) to `apic_id` (SDM §10.6.1, §8.4.4.1).
pub fn send_init(apic_id: u32) {
    send_ipi(apic_id, ICR_INIT_ASSERT);
}

/// STARTUP IPI: the AP starts in real mode at CS:IP = (vector << 8):0.
pub fn send_startup(apic_id: u32, vector: u8) {
    send_ipi(apic_id, ICR_STARTUP | vector as u32);
}
