//! SMP: start every application processor (AP) the MADT lists and run jobs
//! on them.
//!
//! # Bring-up (Intel SDM vol. 3A §8.4.4, MP spec 1.4 §B.4)
//!
//! Each enabled AP is sent, one at a time, INIT; then the sender waits
//! as Linux does (`smp_quirk_init_udelay()`: nothing on modern CPUs and
//! under a hypervisor, else the MP spec's 10 ms), sends a STARTUP IPI and,
//! unless the AP has arrived by then, a second one (the AP ignores the
//! second if the first started it). A STARTUP IPI with vector
//! `v` starts the AP in real mode at `CS:IP = (v << 8):0`, i.e. physical
//! address `v << 12`, so the trampoline below is copied to a free page below
//! 1 MiB taken from the bootloader's memory map (Usable, not page 0).
//!
//! # In the background
//!
//! Bring-up has two steps. [`prepare_aps`], before memory init, plans the
//! CPUs and publishes them (the BSP and every AP to be started; the
//! pipeline's `cpu_nodes` come from them), from the MADT and CPUID alone.
//! [`launch`], called by the memory-init pipeline where its mode first
//! needs other CPUs soon (`ModePlan::cpus`: before the eager phase for the
//! worker modes, once memory is ready for `ondemand`), sets up the local
//! APIC and installs the trampoline through the pipeline's page tables
//! (lent to it: one editor at a time), sends only the first AP (the
//! starter) its IPIs and returns without waiting for it. Until an AP is up
//! nobody writes the log out (see `serial`): the lines wait in the ring, so
//! neither bring-up nor the console costs the boot CPU anything before
//! `launch`. The starter, in
//! [`ap_entry`], checks itself in and starts the other APs one after
//! another, waiting for each. [`wait_online`], called
//! before the first jobs (the executor's first `on_each_cpu`) or at the end
//! of the boot, fails the boot if [`launch`] has not run (the pipeline
//! starts the CPUs before any jobs; starting them there could edit page
//! tables memory init holds), waits for the starter to finish (or, if the
//! starter never arrived, takes its round back and starts the others
//! itself), removes the
//! trampoline mapping, prints the bring-up lines and runs the self-test. An
//! AP that did not come up stays in the list; its jobs run on the BSP.
//! `test_fault=late_ap` uses the old path: the BSP starts every AP and
//! waits for each, and only those that came up are published.
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
//! and sets `ready`. The CPU that started it waits up to
//! [`AP_ARRIVAL_TIMEOUT_MS`] for the arrival; an AP that does not arrive is
//! reported and left out.
//!
//! # Running work
//!
//! Each online AP then polls its mailbox (`PerCpu::state`, with `pause`; no
//! interrupts), and while it is idle writes the kernel log out to the UART
//! (`serial::print_some`, one FIFO's worth between two looks at the
//! mailbox). [`scope`] hands out jobs: [`Scope::spawn_on`] posts a job
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

use bootloader_api::info::{MemoryRegion, MemoryRegionKind};
use memboot_kernel::acpi::AcpiInfo;
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

const CPU_PENDING: u32 = 0;
const CPU_UP: u32 = 1;
const CPU_FAILED: u32 = 2;

/// Per-CPU data: identity, bring-up handshake and the job mailbox.
struct PerCpu {
    info: CpuInfo,
    /// The AP's TSC on arrival in `ap_entry` (0 until then).
    arrived_tsc: AtomicU64,
    /// APIC id the AP read from its own APIC.
    seen_apic_id: AtomicU32,
    /// GDT/TSS/IDT loaded: the AP no longer uses the trampoline page.
    ready: AtomicBool,
    /// [`CPU_PENDING`], [`CPU_UP`] (checked and counted; `timing` written
    /// before, release) or [`CPU_FAILED`] (did not come up: its jobs run on
    /// the BSP).
    bringup: AtomicU32,
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
            bringup: AtomicU32::new(if info.is_bsp { CPU_UP } else { CPU_PENDING }),
            state: AtomicU32::new(MAILBOX_IDLE),
            job: UnsafeCell::new(None),
            timing: UnsafeCell::new(BootTiming {
                init_tsc: 0,
                seen_tsc: 0,
                ap_tsc: 0,
            }),
        }
    }

    fn is_up(&self) -> bool {
        self.bringup.load(Ordering::Acquire) == CPU_UP
    }

    /// Checked and counted: publish the timing, count the AP.
    fn mark_up(&self, timing: BootTiming) {
        // SAFETY: `timing` is only read after `bringup` reads CPU_UP
        // (acquire), which the store below publishes; only the CPU that
        // started this AP writes it, once.
        unsafe { *self.timing.get() = timing };
        self.bringup.store(CPU_UP, Ordering::Release);
        APS_ONLINE.fetch_add(1, Ordering::Relaxed);
    }
}

struct Online {
    cpus: Vec<CpuInfo>,
    percpu: Vec<&'static PerCpu>,
    bsp_apic_id: u32,
}

static ONLINE: spin::Once<Online> = spin::Once::new();

/// The CPUs jobs run on, BSP first (`cpus[i].index == i`); empty before
/// [`start_aps`]. With background bring-up these are the CPUs started (the
/// BSP and every AP it sends startup IPIs to, known before they check in);
/// one that then does not come up is reported, and its jobs run on the BSP.
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
    if pc.info.is_bsp || !pc.is_up() {
        return None;
    }
    // SAFETY: `timing` was written before `bringup` became CPU_UP (read
    // with acquire above) and is never written again.
    Some(unsafe { *pc.timing.get() })
}

/// A set of jobs; see [`scope`]. `'env` is the lifetime of what the jobs
/// borrow; it outlives the `scope` call, and `Scope` is invariant in it.
pub struct Scope<'env> {
    spawned: RefCell<Vec<&'static PerCpu>>,
    /// Jobs for the BSP, and for CPUs that did not come up (run on the BSP
    /// under their own `CpuInfo`).
    on_bsp: RefCell<Vec<(CpuInfo, &'env Job<'env>)>>,
    _invariant: PhantomData<&'env mut &'env ()>,
}

impl<'env> Scope<'env> {
    /// Run `job` on online CPU `cpu` (an index into [`online_cpus`]). On an
    /// AP it starts now (after the AP's previous job, if any, finished); on
    /// the BSP it runs when the scope closure has returned, after all AP
    /// jobs were dispatched; so does the job of a CPU that did not come up.
    /// Panics if `cpu` is not in [`online_cpus`].
    pub fn spawn_on(&self, cpu: usize, job: &'env Job<'env>) {
        let online = ONLINE.get().expect("smp::scope before smp::start_aps");
        let pc = *online.percpu.get(cpu).unwrap_or_else(|| {
            panic!("smp: spawn_on CPU {cpu}, only {} online", online.cpus.len())
        });
        if pc.info.is_bsp || !pc.is_up() {
            self.on_bsp.borrow_mut().push((pc.info, job));
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
    // Jobs may spawn nothing (they get no Scope), so these lists are final.
    for (cpu, job) in s.on_bsp.borrow().iter() {
        job(*cpu);
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
    if let Some(b) = BRINGUP.get() {
        if core::ptr::eq(b.starter, pc) {
            b.run_on_starter();
        }
    }
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

/// APs that came up so far (the BSP not counted), for the summary even
/// when bring-up fails part-way.
static APS_ONLINE: AtomicUsize = AtomicUsize::new(0);

/// APs that came up (the BSP not counted).
pub fn aps_online() -> usize {
    APS_ONLINE.load(Ordering::Relaxed)
}

/// Background bring-up: the BSP sends the startup IPIs to the first AP
/// (the starter) and goes on; the starter, once up, starts the other APs
/// one after another with the same protocol, while the BSP initialises
/// memory. [`wait_online`] collects the result when the APs are first
/// needed.
struct Bringup {
    tramp: Trampoline,
    starter: &'static PerCpu,
    /// The starter's stack while it has not claimed it (given back if it
    /// never does).
    starter_stack: spin::Mutex<Option<ApStack>>,
    /// BSP's TSC at the starter's INIT (the first IPI); 0 until [`launch`].
    first_ipi_tsc: AtomicU64,
    /// The APs after the starter, in MADT order.
    rest: Vec<&'static PerCpu>,
    /// Set (release) once every AP in `rest` came up, was left out, or
    /// failed the boot (`error`).
    done: AtomicBool,
    /// TSC when `done` was set.
    done_tsc: AtomicU64,
    error: spin::Mutex<Option<SmpError>>,
}

// SAFETY: the trampoline's parameter block (behind `tramp`'s raw pointer)
// is written by one starting CPU at a time: the BSP for the starter's
// round, then the starter alone for the other APs (it only starts once it
// has claimed its own round); the BSP touches the block again only when the
// starter never claimed its round (the BSP takes the claim back first, so
// the starter halts if it comes late) or after `done`. The stack pointer
// in `starter_stack` is only used under its lock.
unsafe impl Sync for Bringup {}
// SAFETY: as above; `Bringup` lives in a static and is never moved between
// CPUs other than by being shared.
unsafe impl Send for Bringup {}
// SAFETY: an `ApStack` is heap memory owned by whoever holds the value
// (the BSP until the AP claims it); nothing about it is tied to a CPU.
unsafe impl Send for ApStack {}

static BRINGUP: spin::Once<Bringup> = spin::Once::new();
/// [`wait_online`] ran (or is running).
static WAITED: AtomicBool = AtomicBool::new(false);

impl Bringup {
    /// On the starter AP, right after its own setup: check in, then start
    /// the other APs.
    fn run_on_starter(&self) {
        let pc = self.starter;
        let now = tsc::rdtsc();
        let reads = pc.seen_apic_id.load(Ordering::Relaxed);
        if reads != pc.info.apic_id {
            self.finish(Err(SmpError::WrongApicId {
                cpu: pc.info.index,
                started: pc.info.apic_id,
                reads,
            }));
            return;
        }
        // It runs on the stack: no longer ours to free (`ApStack` has no
        // destructor; only `free_unused` gives a stack back).
        let _in_use = self.starter_stack.lock().take();
        pc.mark_up(BootTiming {
            init_tsc: self.first_ipi_tsc.load(Ordering::Relaxed),
            seen_tsc: now,
            ap_tsc: pc.arrived_tsc.load(Ordering::Relaxed),
        });
        kprintln!(
            "smpboot: CPU {} (APIC {:#x}) up {} us after INIT; it starts the other APs",
            pc.info.index,
            pc.info.apic_id,
            tsc::cycles_to_ns(now.saturating_sub(self.first_ipi_tsc.load(Ordering::Relaxed)))
                / 1000
        );
        self.finish(start_rest(&self.tramp, &self.rest));
    }

    fn finish(&self, result: Result<(), SmpError>) {
        if let Err(e) = result {
            *self.error.lock() = Some(e);
        }
        self.done_tsc.store(tsc::rdtsc(), Ordering::Relaxed);
        self.done.store(true, Ordering::Release);
    }
}

/// Start `aps` one after another (sync path: on the BSP; background path:
/// on the starter AP). An AP that does not come up is marked failed and
/// left out.
fn start_rest(tramp: &Trampoline, aps: &[&'static PerCpu]) -> Result<(), SmpError> {
    for pc in aps {
        if !start_ap(tramp, pc, LateAp::No)? {
            pc.bringup.store(CPU_FAILED, Ordering::Release);
        }
    }
    Ok(())
}

/// What [`plan`] decided: the BSP's and every AP's `PerCpu`, BSP first,
/// dense indices.
fn plan(acpi: &AcpiInfo, bsp_apic_id: u32) -> Vec<&'static PerCpu> {
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
    if !acpi.cpus.is_empty() && !acpi.cpus.iter().any(|c| c.apic_id == bsp_apic_id) {
        kprintln!("smpboot: Warning: boot CPU APIC {bsp_apic_id:#x} is not in the MADT");
    }
    for c in acpi
        .cpus
        .iter()
        .filter(|c| c.enabled && c.apic_id != bsp_apic_id)
    {
        if c.apic_id > 0xfe && !apic::x2apic_mode() {
            kprintln!(
                "smpboot: CPU {} (APIC {:#x}) needs x2APIC, which this CPU lacks: skipped",
                percpu.len(),
                c.apic_id
            );
            continue;
        }
        percpu.push(Box::leak(Box::new(PerCpu::new(CpuInfo {
            index: percpu.len(),
            apic_id: c.apic_id,
            node: c.node,
            is_bsp: false,
        }))));
    }
    percpu
}

/// Plan every enabled AP in the MADT and publish the CPUs; touches no
/// APIC, page table or IPI (see [`launch`]).
///
/// Normally the APs then start in the background: [`launch`], where the
/// pipeline first needs them, sets up the local APIC, installs the
/// trampoline, sends the first AP its INIT and STARTUP IPIs (with Linux's
/// delays) and returns at once; that AP starts the others; [`wait_online`]
/// waits for them when they are first needed. Until then the boot CPU's id
/// is CPUID's initial APIC id ([`launch`] checks the APIC agrees).
/// `late_ap` (`test_fault=late_ap`, which needs the BSP to give up on the
/// first AP before it can claim its round, so that it runs the trampoline
/// late): the BSP starts every AP itself, here, and waits for each, as
/// before, and the CPUs are published (dense over those that came up) when
/// all are done.
pub fn prepare_aps(
    acpi: &AcpiInfo,
    phys_offset: u64,
    regions: &'static [MemoryRegion],
    late_ap: bool,
) -> Result<(), SmpError> {
    TRAMPOLINE_PHYS_OFFSET.store(phys_offset, Ordering::Relaxed);
    if late_ap {
        return start_aps_now(acpi, phys_offset, regions);
    }
    let bsp_apic_id = crate::hw::cpu::initial_apic_id();
    let planned = plan(acpi, bsp_apic_id);
    let starter = planned.get(1).copied();
    let rest = planned.get(2..).unwrap_or_default().to_vec();
    publish(planned, bsp_apic_id);
    PENDING.call_once(|| Pending {
        lapic_addr: acpi.lapic_addr,
        phys_offset,
        regions,
        bsp_apic_id,
        starter,
        rest,
    });
    Ok(())
}

/// What [`launch`] needs to set up the APIC and the trampoline and to start
/// the APs, as [`prepare_aps`] planned them.
struct Pending {
    lapic_addr: u64,
    phys_offset: u64,
    regions: &'static [MemoryRegion],
    /// CPUID's initial APIC id of the boot CPU, which planned the CPUs.
    bsp_apic_id: u32,
    /// The first AP, which starts the others (none with one CPU).
    starter: Option<&'static PerCpu>,
    rest: Vec<&'static PerCpu>,
}

static PENDING: spin::Once<Pending> = spin::Once::new();

/// `test_fault=late_ap`: set up the APIC and the trampoline through a
/// mapper of our own (before memory init, which has not built its own yet)
/// and start every AP, waiting for each.
fn start_aps_now(
    acpi: &AcpiInfo,
    phys_offset: u64,
    regions: &[MemoryRegion],
) -> Result<(), SmpError> {
    let t0 = tsc::rdtsc();
    // SAFETY: CR3's frame is the active PML4, reachable through the
    // physical-memory mapping; this runs before memory init creates its
    // mapper, so this is the only live reference to it.
    let mut mapper = unsafe {
        let (frame, _) = Cr3::read();
        let pml4 = &mut *((phys_offset + frame.start_address().as_u64()) as *mut PageTable);
        OffsetPageTable::new(pml4, VirtAddr::new(phys_offset))
    };
    let mut frames = HeapFrames { phys_offset };
    let mode = apic::init_bsp(acpi.lapic_addr, &mut mapper, &mut frames).map_err(SmpError::Apic)?;
    kprintln!("APIC: {mode}");
    let bsp_apic_id = apic::id();
    let planned = plan(acpi, bsp_apic_id);
    LAUNCHED.store(true, Ordering::Relaxed);
    if planned.len() == 1 {
        publish(planned, bsp_apic_id);
        return Ok(());
    }
    let tramp = install_trampoline(regions, phys_offset, &mut mapper, &mut frames)?;
    start_aps_sync(tramp, planned, bsp_apic_id, &mut mapper, t0)
}

/// [`launch`] ran (or bring-up needs none: `test_fault=late_ap` started
/// every AP in [`prepare_aps`]).
static LAUNCHED: AtomicBool = AtomicBool::new(false);

/// Start the APs [`prepare_aps`] planned, in the background: set up the
/// boot CPU's local APIC and the trampoline (mappings made through
/// `tables`, the pipeline's page tables), send the starter its startup
/// IPIs and return without waiting for it. With one CPU, the boot CPU
/// starts writing the log out itself from here on. Only the first call
/// does anything.
pub fn launch(tables: &mut OffsetPageTable<'_>) -> Result<(), SmpError> {
    if LAUNCHED.swap(true, Ordering::AcqRel) {
        return Ok(());
    }
    let Some(p) = PENDING.get() else {
        return Err(SmpError::NotPrepared);
    };
    let t0 = tsc::rdtsc();
    let mut frames = HeapFrames {
        phys_offset: p.phys_offset,
    };
    let mode = apic::init_bsp(p.lapic_addr, tables, &mut frames).map_err(SmpError::Apic)?;
    kprintln!("APIC: {mode}");
    let reads = apic::id();
    if reads != p.bsp_apic_id {
        return Err(SmpError::BspApicId {
            cpuid: p.bsp_apic_id,
            reads,
        });
    }
    let Some(starter) = p.starter else {
        // No AP will print the log: the boot CPU writes its lines itself.
        serial::set_direct();
        print_brought_up(0); // no IPI sent
        return Ok(());
    };
    let tramp = install_trampoline(p.regions, p.phys_offset, tables, &mut frames)?;
    let b = BRINGUP.call_once(|| Bringup {
        tramp,
        starter,
        starter_stack: spin::Mutex::new(Some(ApStack::new())),
        first_ipi_tsc: AtomicU64::new(0),
        rest: p.rest.clone(),
        done: AtomicBool::new(false),
        done_tsc: AtomicU64::new(0),
        error: spin::Mutex::new(None),
    });
    kprintln!(
        "smpboot: {} CPUs planned; APIC and trampoline set up in {} us",
        b.rest.len() + 2,
        tsc::cycles_to_ns(tsc::rdtsc() - t0) / 1000
    );
    let t1 = tsc::rdtsc();
    kprintln!(
        "smpboot: Booting Node {} Processor {} APIC {:#x}",
        starter.info.node,
        starter.info.index,
        starter.info.apic_id
    );
    let stack_top = match b.starter_stack.lock().as_ref() {
        Some(stack) => stack.top(),
        None => return Ok(()), // taken back already: nothing to start
    };
    let first_ipi_tsc = tsc::rdtsc();
    b.first_ipi_tsc.store(first_ipi_tsc, Ordering::Relaxed);
    send_startup_ipis(&b.tramp, starter, stack_top, LateAp::No);
    let end = tsc::rdtsc();
    kprintln!(
        "smp: boot CPU spent {} us starting CPU 1 ({} us sending its startup IPIs), not waiting: CPU 1 starts the other {} APs",
        tsc::cycles_to_ns(end - t1) / 1000,
        tsc::cycles_to_ns(end - first_ipi_tsc) / 1000,
        b.rest.len()
    );
    Ok(())
}

/// The `test_fault=late_ap` path: every AP started by the BSP, waiting for
/// each, then published dense over those that came up.
fn start_aps_sync(
    tramp: Trampoline,
    planned: Vec<&'static PerCpu>,
    bsp_apic_id: u32,
    mapper: &mut OffsetPageTable<'_>,
    t0: u64,
) -> Result<(), SmpError> {
    let first_ipi_tsc = tsc::rdtsc();
    let mut percpu = alloc::vec![planned[0]];
    for (i, planned_pc) in planned[1..].iter().enumerate() {
        let late = match i {
            0 => LateAp::GiveUp,
            1 => LateAp::AfterLate,
            _ => LateAp::No,
        };
        // Dense over the APs that came up, as the CPU index jobs see.
        let pc: &'static PerCpu = Box::leak(Box::new(PerCpu::new(CpuInfo {
            index: percpu.len(),
            ..planned_pc.info
        })));
        if start_ap(&tramp, pc, late)? {
            percpu.push(pc);
        }
    }
    // Every AP that came up runs on its own GDT and the kernel CR3 now.
    let page = Page::<Size4KiB>::containing_address(VirtAddr::new(tramp.phys));
    let (_, flush) = mapper.unmap(page).map_err(|_| SmpError::TrampolineUnmap)?;
    flush.flush();
    let us = tsc::cycles_to_ns(tsc::rdtsc() - t0) / 1000;
    kprintln!("smp: boot CPU spent {us} us on bring-up, waiting for every AP (test_fault=late_ap)");
    let started_ns = tsc::cycles_to_ns(tsc::rdtsc() - first_ipi_tsc);
    let alone = percpu.len() == 1;
    publish(percpu, bsp_apic_id);
    if alone {
        // No AP came up to print the log: the boot CPU writes it itself.
        serial::set_direct();
    }
    print_brought_up(started_ns);
    Ok(())
}

/// Wait until every AP started in the background came up or was left out
/// (the first time only; later calls return at once), remove the
/// trampoline's identity mapping, print the bring-up lines and run the
/// self-test. The executor calls it before the first jobs; the boot calls
/// it at the end in case no stage ran jobs.
pub fn wait_online() -> Result<(), SmpError> {
    if WAITED.swap(true, Ordering::AcqRel) {
        return Ok(());
    }
    if !LAUNCHED.load(Ordering::Acquire) {
        // Starting them here would edit page tables memory init may hold.
        return Err(SmpError::NotLaunched);
    }
    if let Some(b) = BRINGUP.get() {
        let t = tsc::rdtsc();
        wait_for_bringup(b)?;
        unmap_identity_page(b.tramp.phys)?;
        let waited_us = tsc::cycles_to_ns(tsc::rdtsc() - t) / 1000;
        // From the first IPI to the last AP seen up (or to the end of
        // bring-up, when none came up).
        let last_up_tsc = (1..online_cpus().len())
            .filter_map(boot_timing)
            .map(|t| t.seen_tsc)
            .max()
            .unwrap_or(b.done_tsc.load(Ordering::Relaxed));
        let first_ipi_tsc = b.first_ipi_tsc.load(Ordering::Relaxed);
        let started_ns = tsc::cycles_to_ns(last_up_tsc.saturating_sub(first_ipi_tsc));
        print_brought_up(started_ns);
        kprintln!("smp: boot CPU waited {waited_us} us for the APs when it first needed them");
        let missing: Vec<&CpuInfo> = online_cpus()
            .iter()
            .filter(|c| !c.is_bsp && !ONLINE.get().is_some_and(|o| o.percpu[c.index].is_up()))
            .collect();
        for c in &missing {
            kprintln!(
                "smp: CPU {} (APIC {:#x}) did not come up: its jobs run on the boot CPU",
                c.index,
                c.apic_id
            );
        }
        if missing.len() + 1 == online_cpus().len() {
            serial::set_direct();
        }
    }
    self_test()
}

/// The starter's arrival (or giving up on it, and starting the others on
/// the BSP), then the end of the starter's work.
fn wait_for_bringup(b: &Bringup) -> Result<(), SmpError> {
    let starter = b.starter;
    let has_arrived = || starter.arrived_tsc.load(Ordering::Acquire) != 0;
    let arrived = wait_for(AP_ARRIVAL_TIMEOUT_MS, has_arrived);
    if !arrived {
        // Take the starter's round back unless it claimed it; a late
        // starter then halts at the claim.
        let ours = u64::from(starter.info.apic_id) + 1;
        let unclaimed = b
            .tramp
            .claim_slot()
            .compare_exchange(ours, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if unclaimed {
            kprintln!(
                "smpboot: CPU {} (APIC {:#x}) did not come up; the boot CPU starts the others",
                starter.info.index,
                starter.info.apic_id
            );
            if let Some(stack) = b.starter_stack.lock().take() {
                stack.free_unused();
            }
            starter.bringup.store(CPU_FAILED, Ordering::Release);
            let r = start_rest(&b.tramp, &b.rest);
            b.finish(r);
        } else if !wait_for(AP_READY_TIMEOUT_MS, has_arrived) {
            return Err(SmpError::StackTakenNeverArrived {
                cpu: starter.info.index,
                apic_id: starter.info.apic_id,
            });
        }
    }
    if !wait_for(AP_READY_TIMEOUT_MS, || {
        starter.ready.load(Ordering::Acquire)
    }) {
        return Err(SmpError::SetupHung {
            cpu: starter.info.index,
            apic_id: starter.info.apic_id,
        });
    }
    // The starter bounds each AP's start by the timeouts above.
    while !b.done.load(Ordering::Acquire) {
        core::hint::spin_loop();
    }
    match b.error.lock().clone() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Remove the identity mapping of the trampoline page at `phys` (4 KiB,
/// set up by `Trampoline::install`) by clearing its page-table entry.
///
/// The memory-init pipeline's `KernelMapper` (which holds the PML4 as
/// `&mut`) may be alive by now, so this walks the tables with raw pointers
/// and writes only the leaf entry, in a table the vmemmap mapper never
/// reaches (it maps only its own top-level slots, far from the low
/// identity mapping), on the BSP between two of the pipeline's steps.
fn unmap_identity_page(phys: u64) -> Result<(), SmpError> {
    let phys_offset = TRAMPOLINE_PHYS_OFFSET.load(Ordering::Relaxed);
    let (pml4, _) = Cr3::read();
    let mut table = pml4.start_address().as_u64();
    let va = phys; // identity mapped
    for level in [3u32, 2, 1, 0] {
        let index = (va >> (12 + 9 * level)) & 0x1ff;
        let entry_ptr = (phys_offset + table + index * 8) as *mut u64;
        // SAFETY: `table` is a page-table frame (CR3's, or one a present
        // non-huge entry above points to), inside the physical-memory
        // mapping; the entry is read with a volatile load because the MMU
        // reads it too.
        let entry = unsafe { core::ptr::read_volatile(entry_ptr) };
        const PRESENT: u64 = 1;
        const HUGE: u64 = 1 << 7;
        if entry & PRESENT == 0 || (level > 0 && level < 3 && entry & HUGE != 0) {
            return Err(SmpError::TrampolineUnmap);
        }
        if level == 0 {
            // SAFETY: the leaf entry of the trampoline's identity mapping,
            // which nothing uses any more (every AP that came up runs on its
            // own GDT and the kernel's CR3; a late one halts at the claim on
            // its temporary tables, whose lower levels this clears too,
            // which is what the sync path's unmap does as well).
            unsafe { core::ptr::write_volatile(entry_ptr, 0) };
            x86_64::instructions::tlb::flush(VirtAddr::new(va));
            return Ok(());
        }
        table = entry & 0x000f_ffff_ffff_f000;
    }
    Err(SmpError::TrampolineUnmap)
}

/// `phys_offset`, for [`unmap_identity_page`].
static TRAMPOLINE_PHYS_OFFSET: AtomicU64 = AtomicU64::new(0);

/// Find two free low pages and install the trampoline in them.
fn install_trampoline(
    regions: &[MemoryRegion],
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

/// Prepare `pc`'s round and send INIT, STARTUP, STARTUP, without waiting
/// for the AP beyond the protocol's own delays (the second STARTUP is left
/// out if the AP arrived after the first).
fn send_startup_ipis(tramp: &Trampoline, pc: &'static PerCpu, stack_top: u64, late: LateAp) {
    let apic_id = pc.info.apic_id;
    tramp.prepare(stack_top, pc);
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
        return;
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
}

/// INIT, STARTUP, STARTUP; wait for the AP to reach `ap_entry`. Returns
/// whether it arrived and whether it claimed its round (took its stack).
fn send_init_sipi_sipi(
    tramp: &Trampoline,
    pc: &'static PerCpu,
    stack: &ApStack,
    late: LateAp,
) -> (bool, bool) {
    send_startup_ipis(tramp, pc, stack.top(), late);
    if late == LateAp::GiveUp {
        return (false, false);
    }
    let has_arrived = || pc.arrived_tsc.load(Ordering::Acquire) != 0;
    let arrived = wait_for(AP_ARRIVAL_TIMEOUT_MS, has_arrived);
    // Take the round back unless the AP claimed it: a late AP then finds 0
    // (or a later AP's id) in the claim and halts there.
    let unclaimed = tramp.claim_slot().swap(0, Ordering::AcqRel) != 0;
    let arrived = arrived || (!unclaimed && wait_for(AP_READY_TIMEOUT_MS, has_arrived));
    (arrived, !unclaimed)
}

/// Start one AP and wait for it; `Ok(false)` if it did not come up (a
/// warning, not an error). Marks it up (and counts it) when it did.
fn start_ap(tramp: &Trampoline, pc: &'static PerCpu, late: LateAp) -> Result<bool, SmpError> {
    let (index, apic_id) = (pc.info.index, pc.info.apic_id);
    kprintln!(
        "smpboot: Booting Node {} Processor {index} APIC {apic_id:#x}",
        pc.info.node
    );
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
        return Ok(false);
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
    pc.mark_up(BootTiming {
        init_tsc,
        seen_tsc,
        ap_tsc: pc.arrived_tsc.load(Ordering::Relaxed),
    });
    kprintln!(
        "smpboot: CPU {index} (APIC {apic_id:#x}) up {} us after INIT",
        tsc::cycles_to_ns(seen_tsc - init_tsc) / 1000
    );
    Ok(true)
}

/// Publish the CPUs jobs run on (see [`online_cpus`]).
fn publish(percpu: Vec<&'static PerCpu>, bsp_apic_id: u32) {
    ONLINE.call_once(|| Online {
        cpus: percpu.iter().map(|p| p.info).collect(),
        percpu,
        bsp_apic_id,
    });
}

/// The bring-up summary: Linux's lines (kernel/smp.c smp_init(): "Brought
/// up %d node%s, %d CPU%s"; arch/x86 "Booted up"), counting the CPUs that
/// came up, and memboot's timing, from the first IPI to the last AP up (or
/// given up on).
fn print_brought_up(started_ns: u64) {
    let up: Vec<&PerCpu> = ONLINE
        .get()
        .map(|o| o.percpu.iter().copied().filter(|p| p.is_up()).collect())
        .unwrap_or_default();
    let mut nodes: Vec<u32> = up.iter().map(|p| p.info.node).collect();
    nodes.sort_unstable();
    nodes.dedup();
    let n = up.len().max(1);
    let node_word = if nodes.len() == 1 { "node" } else { "nodes" };
    let cpu_word = if n == 1 { "CPU" } else { "CPUs" };
    let nodes = nodes.len().max(1);
    let us = started_ns / 1000;
    kprintln!("smp: Brought up {nodes} {node_word}, {n} {cpu_word}");
    kprintln!("smp: CPUs started in {}.{:03} ms", us / 1000, us % 1000);
    kprintln!("x86: Booted up {nodes} {node_word}, {n} {cpu_word}");
}

/// Run one job on every online CPU; each must run exactly once and read its
/// own APIC id.
fn self_test() -> Result<(), SmpError> {
    let cpus = online_cpus();
    let n = cpus.len();
    let runs: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
    let ids: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(u32::MAX)).collect();
    let job = |c: CpuInfo| {
        ids[c.index].store(apic::id(), Ordering::Relaxed);
        runs[c.index].fetch_add(1, Ordering::Relaxed);
    };
    let online = ONLINE.get();
    let up = |c: &&CpuInfo| online.is_none_or(|o| o.percpu[c.index].is_up());
    let t = tsc::rdtsc();
    scope(|s| {
        for c in cpus.iter().filter(up) {
            s.spawn_on(c.index, &job);
        }
    });
    let us = tsc::cycles_to_ns(tsc::rdtsc() - t) / 1000;
    for c in cpus.iter().filter(up) {
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
    let ran = cpus.iter().filter(up).count();
    kprintln!(
        "smp: self-test passed: {ran} of {n} CPUs ran one job each on their own APIC id ({us} us; {timed} AP timings)"
    );
    Ok(())
}
