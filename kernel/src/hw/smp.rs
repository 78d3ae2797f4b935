//! SMP: start every application processor (AP) the MADT lists and run jobs
//! on them.
//!
//! # Bring-up (Intel SDM vol. 3A §8.4.4, MP spec 1.4 §B.4)
//!
//! The boot CPU (BSP) sends each enabled AP, one at a time, INIT, waits
//! as Linux does (`smp_quirk_init_udelay()`: nothing on modern CPUs and
//! under a hypervisor, else the MP spec's 10 ms), sends a STARTUP IPI and,
//! unless the AP has arrived by then, a second one (the AP ignores the
//! second if the first started it). A STARTUP IPI with vector
//! `v` starts the AP in real mode at `CS:IP = (v << 8):0`, i.e. physical
//! address `v << 12`, so the trampoline below is copied to a free page below
//! 1 MiB taken from the bootloader's memory map (Usable, not page 0).
//!
//! # Trampoline page layout
//!
//! ```text
//! +0x00  cli; jmp code16           (the SIPI entry point)
//! +0x10  TrampolineParams          (written by the BSP before each SIPI)
//! +0x80  code16 / code32 / code64  (position independent, see below)
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
//!   that id + 1 to 0. An AP that comes too late, after the BSP gave up on
//!   it (and perhaps prepared the next AP's round), finds 0 or another id
//!   there and halts, never touching the next AP's stack or `PerCpu`, nor
//!   the kernel's page tables (where the trampoline may be unmapped by
//!   then). The owner loads the BSP's CR0 and CR4 and the kernel's real
//!   CR3, then its stack, and calls `entry(arg)`: [`ap_entry`] with the
//!   AP's [`PerCpu`].
//!
//! While APs start, the trampoline page is identity mapped (virt == phys,
//! writable, executable) in the kernel's page tables through an
//! `OffsetPageTable` on CR3 (page-table frames come from the heap and stay),
//! because paging is switched on while executing from it. It is unmapped
//! once every AP has loaded its own GDT.
//!
//! # Hand-off
//!
//! [`ap_entry`] stamps its arrival (TSC) in its [`PerCpu`], switches its
//! local APIC to the BSP's mode (see `apic`), loads a GDT/TSS/IST stacks of
//! its own and the shared IDT (`interrupts::init_ap`), checks its APIC id
//! and sets `ready`. The BSP waits up to [`AP_ARRIVAL_TIMEOUT_MS`] for the
//! arrival; an AP that does not arrive is reported and left out.
//!
//! # Running work
//!
//! Each online AP then polls its mailbox (`PerCpu::state`, with `pause`; no
//! interrupts). [`scope`] hands out jobs: [`Scope::spawn_on`] posts a job
//! reference to a CPU's mailbox (for the BSP itself the job is kept and run
//! inline when the scope closure returns), and the scope returns only after
//! every job it spawned finished, which is what makes borrowing jobs sound
//! (like `std::thread::scope`).

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::alloc::Layout;
use core::cell::{RefCell, UnsafeCell};
use core::marker::PhantomData;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use bootloader_api::info::{MemoryRegionKind, MemoryRegions};
use memboot_kernel::acpi::{AcpiCpu, AcpiInfo};
use memboot_kernel::boot_error::SmpError;
use x86_64::registers::control::Cr3;
use x86_64::structures::paging::{Mapper, OffsetPageTable, Page, PageTable, Size4KiB, Translate};
use x86_64::VirtAddr;

use crate::hw::{apic, interrupts, serial, tsc};

mod trampoline;
use trampoline::{HeapFrames, Trampoline, PAGE};

/// Each AP's kernel stack.
const AP_STACK_BYTES: usize = 64 * 1024;
/// How long the BSP waits for an AP to reach [`ap_entry`] after the second
/// STARTUP IPI. The MP spec needs far less on hardware; under TCG on a
/// loaded host a vCPU thread can be descheduled for a while, so be generous.
const AP_ARRIVAL_TIMEOUT_MS: u64 = 1000;
/// After arriving, how long an AP may take to set up its GDT/TSS.
const AP_READY_TIMEOUT_MS: u64 = 5000;
/// One online CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuInfo {
    /// Dense index: 0 is the BSP, APs follow in MADT order.
    pub index: usize,
    pub apic_id: u32,
    /// NUMA node (SRAT; 0 without SRAT).
    pub node: u32,
    pub is_bsp: bool,
}

/// When an AP came up (raw TSC values; `tsc::cycles_to_ns` converts).
/// For reports of later boot stages; the self-test only checks presence.
#[allow(dead_code)]
#[derive(Clone, Copy, Debug)]
pub struct BootTiming {
    /// BSP's TSC when it sent INIT.
    pub init_tsc: u64,
    /// BSP's TSC when it saw the AP arrive in [`ap_entry`].
    pub seen_tsc: u64,
    /// The AP's own TSC on arrival.
    pub ap_tsc: u64,
}

type Job<'a> = dyn Fn(CpuInfo) + Sync + 'a;

const MAILBOX_IDLE: u32 = 0;
const MAILBOX_POSTED: u32 = 1;

/// Per-CPU data: identity, bring-up handshake and the job mailbox.
struct PerCpu {
    info: CpuInfo,
    /// The AP's TSC on arrival in `ap_entry` (0 until then).
    arrived_tsc: AtomicU64,
    /// APIC id the AP read from its own APIC.
    seen_apic_id: AtomicU32,
    /// GDT/TSS/IDT loaded: the AP no longer uses the trampoline page.
    ready: AtomicBool,
    /// MAILBOX_IDLE or MAILBOX_POSTED (set by the BSP with `job` filled in,
    /// cleared by the AP when the job returned).
    state: AtomicU32,
    /// The posted job; only touched by the BSP while `state` is IDLE and by
    /// the AP while it is POSTED.
    job: UnsafeCell<Option<*const Job<'static>>>,
    timing: UnsafeCell<BootTiming>,
}

// SAFETY: `job` and `timing` are handed over between CPUs through `state`
// and `ready` with release/acquire ordering (see the field docs); the job
// pointee is Sync.
unsafe impl Sync for PerCpu {}

impl PerCpu {
    fn new(info: CpuInfo) -> Self {
        PerCpu {
            info,
            arrived_tsc: AtomicU64::new(0),
            seen_apic_id: AtomicU32::new(u32::MAX),
            ready: AtomicBool::new(false),
            state: AtomicU32::new(MAILBOX_IDLE),
            job: UnsafeCell::new(None),
            timing: UnsafeCell::new(BootTiming {
                init_tsc: 0,
                seen_tsc: 0,
                ap_tsc: 0,
            }),
        }
    }
}

struct Online {
    cpus: Vec<CpuInfo>,
    percpu: Vec<&'static PerCpu>,
    bsp_apic_id: u32,
}

static ONLINE: spin::Once<Online> = spin::Once::new();

/// The online CPUs, BSP first (`cpus[i].index == i`); empty before
/// [`start_aps`].
pub fn online_cpus() -> &'static [CpuInfo] {
    ONLINE.get().map(|o| o.cpus.as_slice()).unwrap_or(&[])
}

/// Number of online CPUs including the BSP (at least 1).
pub fn cpu_count() -> usize {
    online_cpus().len().max(1)
}

/// Bring-up timing of online CPU `cpu` (None for the BSP or out of range).
pub fn boot_timing(cpu: usize) -> Option<BootTiming> {
    let pc = ONLINE.get()?.percpu.get(cpu)?;
    if pc.info.is_bsp {
        return None;
    }
    // SAFETY: `timing` was written by the BSP before the CPU was published
    // in ONLINE and is never written again.
    Some(unsafe { *pc.timing.get() })
}

/// A set of jobs; see [`scope`]. `'env` is the lifetime of what the jobs
/// borrow; it outlives the `scope` call, and `Scope` is invariant in it.
pub struct Scope<'env> {
    spawned: RefCell<Vec<&'static PerCpu>>,
    on_bsp: RefCell<Vec<&'env Job<'env>>>,
    _invariant: PhantomData<&'env mut &'env ()>,
}

impl<'env> Scope<'env> {
    /// Run `job` on online CPU `cpu` (an index into [`online_cpus`]). On an
    /// AP it starts now (after the AP's previous job, if any, finished); on
    /// the BSP it runs when the scope closure has returned, after all AP
    /// jobs were dispatched. Panics if `cpu` is not online.
    pub fn spawn_on(&self, cpu: usize, job: &'env Job<'env>) {
        let online = ONLINE.get().expect("smp::scope before smp::start_aps");
        let pc = *online.percpu.get(cpu).unwrap_or_else(|| {
            panic!("smp: spawn_on CPU {cpu}, only {} online", online.cpus.len())
        });
        if pc.info.is_bsp {
            self.on_bsp.borrow_mut().push(job);
            return;
        }
        while pc.state.load(Ordering::Acquire) != MAILBOX_IDLE {
            core::hint::spin_loop();
        }
        // SAFETY: erases the lifetime of the job reference only. Sound because
        // `scope` does not return before this CPU's mailbox is IDLE again,
        // i.e. before the AP is done with the reference, and `'env` outlives
        // the `scope` call.
        let ptr: *const Job<'static> =
            unsafe { core::mem::transmute::<&'env Job<'env>, &'static Job<'static>>(job) };
        // SAFETY: the mailbox is IDLE, so the AP does not touch `job`; the
        // release store below publishes it.
        unsafe { *pc.job.get() = Some(ptr) };
        pc.state.store(MAILBOX_POSTED, Ordering::Release);
        self.spawned.borrow_mut().push(pc);
    }
}

/// Run `f`, which may spawn jobs on online CPUs through its [`Scope`]; then
/// run the jobs spawned on the BSP, wait for every AP job and return `f`'s
/// result. BSP only (panics on an AP).
pub fn scope<'env, R>(f: impl FnOnce(&Scope<'env>) -> R) -> R {
    if let Some(online) = ONLINE.get() {
        assert_eq!(apic::id(), online.bsp_apic_id, "smp::scope called on an AP");
    }
    let s = Scope {
        spawned: RefCell::new(Vec::new()),
        on_bsp: RefCell::new(Vec::new()),
        _invariant: PhantomData,
    };
    let r = f(&s);
    let bsp = online_cpus().first().copied().unwrap_or(CpuInfo {
        index: 0,
        apic_id: apic::id(),
        node: 0,
        is_bsp: true,
    });
    // Jobs may spawn nothing (they get no Scope), so these lists are final.
    for job in s.on_bsp.borrow().iter() {
        job(bsp);
    }
    for pc in s.spawned.borrow().iter() {
        while pc.state.load(Ordering::Acquire) != MAILBOX_IDLE {
            core::hint::spin_loop();
        }
    }
    r
}

/// Where an AP starts in Rust (called by the trampoline's 64-bit code on the
/// AP's own stack, with the kernel's page tables).
extern "C" fn ap_entry(pc: &'static PerCpu) -> ! {
    pc.arrived_tsc.store(tsc::rdtsc().max(1), Ordering::Release);
    apic::init_ap();
    interrupts::init_ap();
    pc.seen_apic_id.store(apic::id(), Ordering::Relaxed);
    pc.ready.store(true, Ordering::Release);
    loop {
        if pc.state.load(Ordering::Acquire) == MAILBOX_POSTED {
            // SAFETY: POSTED means the BSP stored a job and does not touch
            // the slot until we set IDLE below.
            let job = unsafe { *pc.job.get() };
            if let Some(job) = job {
                // SAFETY: the BSP's scope keeps the referent alive until the
                // mailbox is IDLE again (see Scope::spawn_on).
                unsafe { (*job)(pc.info) };
            }
            pc.state.store(MAILBOX_IDLE, Ordering::Release);
        } else if !serial::print_some() {
            // Idle and nothing to print (or another CPU is printing).
            core::hint::spin_loop();
        }
    }
}

fn ms_to_cycles(ms: u64) -> u64 {
    tsc::khz().max(1) * ms
}

fn delay_us(us: u64) {
    let end = tsc::rdtsc() + tsc::khz().max(1) * us / 1000;
    while tsc::rdtsc() < end {
        core::hint::spin_loop();
    }
}

/// Spin until `cond` or `ms` milliseconds passed; true if `cond` held.
fn wait_for(ms: u64, cond: impl Fn() -> bool) -> bool {
    let end = tsc::rdtsc() + ms_to_cycles(ms);
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

/// Free 4 KiB pages in [0x1000, 0x100000) per the bootloader's map.
fn low_pages(regions: &MemoryRegions) -> impl Iterator<Item = u64> + '_ {
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

/// APs that came up so far (the BSP not counted), for the summary even
/// when bring-up fails part-way.
static APS_ONLINE: AtomicUsize = AtomicUsize::new(0);

/// APs that came up (the BSP not counted).
pub fn aps_online() -> usize {
    APS_ONLINE.load(Ordering::Relaxed)
}

/// Start every enabled AP in the MADT and publish the online CPUs. An AP
/// that does not come up is reported and left out; the boot goes on with
/// the others. `late_ap` (`test_fault=late_ap`): give up on the first AP
/// before it can claim its round, so that it runs the trampoline late.
pub fn start_aps(
    acpi: &AcpiInfo,
    phys_offset: u64,
    regions: &MemoryRegions,
    late_ap: bool,
) -> Result<(), SmpError> {
    let t0 = tsc::rdtsc();
    // SAFETY: CR3's frame is the active PML4, reachable through the
    // physical-memory mapping; this is the only live reference to it while
    // bring-up runs (nothing else edits page tables concurrently).
    let mut mapper = unsafe {
        let (frame, _) = Cr3::read();
        let pml4 = &mut *((phys_offset + frame.start_address().as_u64()) as *mut PageTable);
        OffsetPageTable::new(pml4, VirtAddr::new(phys_offset))
    };
    let mut frames = HeapFrames { phys_offset };
    let mode = apic::init_bsp(acpi.lapic_addr, &mut mapper, &mut frames).map_err(SmpError::Apic)?;
    kprintln!("APIC: {mode}");
    let bsp_apic_id = apic::id();
    let node_of = |apic_id: u32| {
        acpi.cpus
            .iter()
            .find(|c| c.apic_id == apic_id)
            .map_or(0, |c| c.node)
    };
    let bsp = Box::leak(Box::new(PerCpu::new(CpuInfo {
        index: 0,
        apic_id: bsp_apic_id,
        node: node_of(bsp_apic_id),
        is_bsp: true,
    })));
    let mut percpu: Vec<&'static PerCpu> = alloc::vec![&*bsp];
    let aps: Vec<&AcpiCpu> = acpi
        .cpus
        .iter()
        .filter(|c| c.enabled && c.apic_id != bsp_apic_id)
        .collect();
    if !acpi.cpus.is_empty() && !acpi.cpus.iter().any(|c| c.apic_id == bsp_apic_id) {
        kprintln!("smpboot: Warning: boot CPU APIC {bsp_apic_id:#x} is not in the MADT");
    }
    if !aps.is_empty() {
        let tramp = install_trampoline(regions, phys_offset, &mut mapper, &mut frames)?;
        for (i, c) in aps.into_iter().enumerate() {
            let late = match i {
                0 if late_ap => LateAp::GiveUp,
                1 if late_ap => LateAp::AfterLate,
                _ => LateAp::No,
            };
            if let Some(pc) = start_ap(&tramp, c, percpu.len(), late)? {
                percpu.push(pc);
                APS_ONLINE.fetch_add(1, Ordering::Relaxed);
            }
        }
        // Every AP that came up runs on its own GDT and the kernel CR3 now.
        let page = Page::<Size4KiB>::containing_address(VirtAddr::new(tramp.phys));
        let (_, flush) = mapper.unmap(page).map_err(|_| SmpError::TrampolineUnmap)?;
        flush.flush();
    }
    publish(percpu, bsp_apic_id, t0);
    Ok(())
}

/// Find two free low pages and install the trampoline in them.
fn install_trampoline(
    regions: &MemoryRegions,
    phys_offset: u64,
    mapper: &mut OffsetPageTable<'_>,
    frames: &mut HeapFrames,
) -> Result<Trampoline, SmpError> {
    let mut low = low_pages(regions);
    let tramp_phys = low.find(|&p| mapper.translate_addr(VirtAddr::new(p)).is_none());
    let pml4_phys = low.next();
    let (Some(tramp_phys), Some(pml4_phys)) = (tramp_phys, pml4_phys) else {
        return Err(SmpError::NoTrampolinePages);
    };
    let tramp = Trampoline::install(tramp_phys, pml4_phys, phys_offset, mapper, frames)
        .map_err(SmpError::Trampoline)?;
    kprintln!(
        "smpboot: trampoline at {:#x} (vector {:#04x}), temporary PML4 at {:#x}",
        tramp_phys,
        tramp.vector(),
        pml4_phys
    );
    Ok(tramp)
}

/// An AP's stack, owned by the BSP until the AP takes it.
struct ApStack {
    ptr: *mut u8,
}

impl ApStack {
    const LAYOUT: Layout = match Layout::from_size_align(AP_STACK_BYTES, 16) {
        Ok(l) => l,
        Err(_) => panic!("AP stack layout"),
    };

    fn new() -> Self {
        // SAFETY: non-zero-sized layout; the stack is never freed once the
        // AP took it (it runs on it forever).
        let ptr = unsafe { alloc::alloc::alloc(Self::LAYOUT) };
        if ptr.is_null() {
            alloc::alloc::handle_alloc_error(Self::LAYOUT);
        }
        Self { ptr }
    }

    fn top(&self) -> u64 {
        self.ptr as u64 + AP_STACK_BYTES as u64
    }

    /// Give the stack back: the AP never took it.
    fn free_unused(self) {
        // SAFETY: allocated in `new` with this layout, and the AP never
        // claimed it (its trampoline slot still held it), so nothing uses it.
        unsafe { alloc::alloc::dealloc(self.ptr, Self::LAYOUT) };
    }
}

/// `test_fault=late_ap`: what bring-up does differently for one AP.
#[derive(Clone, Copy, PartialEq, Eq)]
enum LateAp {
    No,
    /// Take the round back before the AP can claim it and wait for
    /// nothing: the AP runs the trampoline late.
    GiveUp,
    /// The AP after the late one: once its round is prepared, give the late
    /// AP up to [`AP_ARRIVAL_TIMEOUT_MS`] to reach the claim (and, were the
    /// claim not bound to its APIC id, take this round) before this AP is
    /// started. So the race the claim protocol must win always happens.
    AfterLate,
}

/// INIT, STARTUP, STARTUP; wait for the AP to reach `ap_entry`. Returns
/// whether it arrived and whether it claimed its round (took its stack).
fn send_init_sipi_sipi(
    tramp: &Trampoline,
    pc: &'static PerCpu,
    stack: &ApStack,
    late: LateAp,
) -> (bool, bool) {
    let apic_id = pc.info.apic_id;
    tramp.prepare(stack.top(), pc);
    if late == LateAp::AfterLate {
        let ours = u64::from(apic_id) + 1;
        let taken = wait_for(AP_ARRIVAL_TIMEOUT_MS, || {
            tramp.claim_slot().load(Ordering::Acquire) != ours
        });
        kprintln!(
            "smpboot: test_fault=late_ap: the late AP {} the round prepared for APIC {apic_id:#x}",
            if taken { "took" } else { "left alone" }
        );
    }
    if late == LateAp::GiveUp {
        tramp.claim_slot().store(0, Ordering::Release);
        apic::send_init(apic_id);
        delay_us(10_000);
        apic::send_startup(apic_id, tramp.vector());
        apic::send_startup(apic_id, tramp.vector());
        return (false, false);
    }
    // Linux's timing (wakeup_secondary_cpu_via_init()): the INIT wait its
    // quirk sets, then 10 µs around each STARTUP where that wait is 0, the
    // MP spec's 300/200 µs where it is not.
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
        apic::send_startup(apic_id, tramp.vector());
        delay_us(after_us);
        if pc.arrived_tsc.load(Ordering::Acquire) != 0 {
            break; // the first STARTUP did it; a second one would be ignored
        }
    }
    let has_arrived = || pc.arrived_tsc.load(Ordering::Acquire) != 0;
    let arrived = wait_for(AP_ARRIVAL_TIMEOUT_MS, has_arrived);
    // Take the round back unless the AP claimed it: a late AP then finds 0
    // (or a later AP's id) in the claim and halts there.
    let unclaimed = tramp.claim_slot().swap(0, Ordering::AcqRel) != 0;
    let arrived = arrived || (!unclaimed && wait_for(AP_READY_TIMEOUT_MS, has_arrived));
    (arrived, !unclaimed)
}

/// Start one AP; `Ok(None)` if it did not come up (a warning, not an error).
fn start_ap(
    tramp: &Trampoline,
    c: &AcpiCpu,
    index: usize,
    late: LateAp,
) -> Result<Option<&'static PerCpu>, SmpError> {
    let apic_id = c.apic_id;
    if apic_id > 0xfe && !apic::x2apic_mode() {
        kprintln!(
            "smpboot: CPU {index} (APIC {apic_id:#x}) needs x2APIC, which this CPU lacks: skipped"
        );
        return Ok(None);
    }
    kprintln!(
        "smpboot: Booting Node {} Processor {index} APIC {apic_id:#x}",
        c.node
    );
    let pc: &'static PerCpu = Box::leak(Box::new(PerCpu::new(CpuInfo {
        index,
        apic_id,
        node: c.node,
        is_bsp: false,
    })));
    let stack = ApStack::new();
    let init_tsc = tsc::rdtsc();
    let (arrived, took_stack) = send_init_sipi_sipi(tramp, pc, &stack, late);
    if !arrived {
        let why = if late == LateAp::GiveUp {
            " (test_fault=late_ap: given up on before it could claim its round)"
        } else {
            ""
        };
        kprintln!("smpboot: CPU {index} (APIC {apic_id:#x}) did not come up{why}");
        if took_stack {
            return Err(SmpError::StackTakenNeverArrived {
                cpu: index,
                apic_id,
            });
        }
        stack.free_unused();
        return Ok(None);
    }
    let seen_tsc = tsc::rdtsc();
    if !wait_for(AP_READY_TIMEOUT_MS, || pc.ready.load(Ordering::Acquire)) {
        return Err(SmpError::SetupHung {
            cpu: index,
            apic_id,
        });
    }
    let reads = pc.seen_apic_id.load(Ordering::Relaxed);
    if reads != apic_id {
        return Err(SmpError::WrongApicId {
            cpu: index,
            started: apic_id,
            reads,
        });
    }
    // SAFETY: nobody else reads `timing` before the CPU is published.
    unsafe {
        *pc.timing.get() = BootTiming {
            init_tsc,
            seen_tsc,
            ap_tsc: pc.arrived_tsc.load(Ordering::Relaxed),
        }
    };
    kprintln!(
        "smpboot: CPU {index} (APIC {apic_id:#x}) up {} us after INIT",
        tsc::cycles_to_ns(seen_tsc - init_tsc) / 1000
    );
    Ok(Some(pc))
}

/// Publish the online CPUs and print the bring-up summary.
fn publish(percpu: Vec<&'static PerCpu>, bsp_apic_id: u32, t0: u64) {
    let cpus: Vec<CpuInfo> = percpu.iter().map(|p| p.info).collect();
    let mut nodes: Vec<u32> = cpus.iter().map(|c| c.node).collect();
    nodes.sort_unstable();
    nodes.dedup();
    let n = cpus.len();
    if n == 1 {
        // No AP will print the log: the boot CPU writes its lines itself.
        serial::set_direct();
    }
    ONLINE.call_once(|| Online {
        cpus,
        percpu,
        bsp_apic_id,
    });
    let node_word = if nodes.len() == 1 { "node" } else { "nodes" };
    let cpu_word = if n == 1 { "CPU" } else { "CPUs" };
    let us = tsc::cycles_to_ns(tsc::rdtsc() - t0) / 1000;
    // Linux's line (kernel/smp.c smp_init(): "Brought up %d node%s, %d
    // CPU%s"), then memboot's own timing.
    kprintln!(
        "smp: Brought up {} {node_word}, {n} {cpu_word}",
        nodes.len()
    );
    kprintln!("smp: CPUs started in {}.{:03} ms", us / 1000, us % 1000);
    kprintln!("x86: Booted up {} {node_word}, {n} {cpu_word}", nodes.len());
}

/// Run one job on every online CPU; each must run exactly once and read its
/// own APIC id.
pub fn self_test() -> Result<(), SmpError> {
    let cpus = online_cpus();
    let n = cpus.len();
    let runs: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
    let ids: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(u32::MAX)).collect();
    let job = |c: CpuInfo| {
        ids[c.index].store(apic::id(), Ordering::Relaxed);
        runs[c.index].fetch_add(1, Ordering::Relaxed);
    };
    let t = tsc::rdtsc();
    scope(|s| {
        for c in cpus {
            s.spawn_on(c.index, &job);
        }
    });
    let us = tsc::cycles_to_ns(tsc::rdtsc() - t) / 1000;
    for c in cpus {
        let (runs, apic_id) = (
            runs[c.index].load(Ordering::Relaxed),
            ids[c.index].load(Ordering::Relaxed),
        );
        if runs != 1 || apic_id != c.apic_id {
            return Err(SmpError::SelfTest {
                cpu: c.index,
                runs,
                apic_id,
            });
        }
    }
    let timed = (1..n).filter(|&i| boot_timing(i).is_some()).count();
    kprintln!(
        "smp: self-test passed: {n} of {} CPUs ran one job each on their own APIC id ({us} us; {timed} AP timings)",
        cpu_count()
    );
    Ok(())
}
