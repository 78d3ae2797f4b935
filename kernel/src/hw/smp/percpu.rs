//! One CPU's record ([`PerCpu`]): who it is, its bring-up handshake with
//! the CPU that starts it, and its job mailbox.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use super::protocol::ApStack;
use crate::hw::interrupts::{self, ApTables};

/// One CPU jobs run on.
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
    /// TSC of the CPU that started the AP (the BSP for the starter, the
    /// starter for the others) when it sent INIT.
    pub init_tsc: u64,
    /// TSC of the CPU that started the AP when it saw it arrive in
    /// `ap_entry`.
    pub seen_tsc: u64,
    /// The AP's own TSC on arrival.
    pub ap_tsc: u64,
}

/// A job for one CPU, run with that CPU's [`CpuInfo`].
pub(super) type Job<'a> = dyn Fn(CpuInfo) + Sync + 'a;

/// [`PerCpu::mailbox`]: no job posted.
pub(super) const MAILBOX_IDLE: u32 = 0;
/// [`PerCpu::mailbox`]: a job is posted and not finished.
pub(super) const MAILBOX_POSTED: u32 = 1;

const CPU_PENDING: u32 = 0;
const CPU_UP: u32 = 1;
const CPU_FAILED: u32 = 2;

/// Per-CPU data: identity, bring-up handshake and the job mailbox. Leaked:
/// an AP that came up holds a reference for as long as it runs.
pub(super) struct PerCpu {
    pub(super) info: CpuInfo,
    /// The AP's TSC on arrival in `ap_entry` (0 until then). Stored with
    /// release by the AP; the CPU that started it loads it with acquire.
    arrived_tsc: AtomicU64,
    /// The AP's TSC when it first ran a job or halted (0 until then): the
    /// end of its part in bring-up. Only read for the report at the end
    /// of the boot, so relaxed.
    settled_tsc: AtomicU64,
    /// APIC id the AP read from its own APIC; published by `ready`.
    seen_apic_id: AtomicU32,
    /// GDT/TSS/IDT loaded: the AP no longer uses the trampoline page.
    /// Release by the AP, acquire by the CPU that started it; publishes
    /// `seen_apic_id`.
    ready: AtomicBool,
    /// `CPU_PENDING`, `CPU_UP` (checked; `timing` written before, with
    /// release) or `CPU_FAILED` (did not come up: its jobs run on the BSP).
    /// Read with acquire before `timing`.
    bringup: AtomicU32,
    /// [`MAILBOX_IDLE`] or [`MAILBOX_POSTED`]: set by the BSP (release)
    /// with `job` filled in, cleared by the AP (release) when the job
    /// returned; each side loads it with acquire before touching `job`.
    pub(super) mailbox: AtomicU32,
    /// The posted job; only touched by the BSP while `mailbox` is IDLE and
    /// by the AP while it is POSTED.
    pub(super) job: UnsafeCell<Option<*const Job<'static>>>,
    /// The mapping changes this AP's TLB has caught up with
    /// (`tlb::catch_up`); only the AP touches it.
    pub(super) tlb_seen: AtomicU64,
    timing: UnsafeCell<BootTiming>,
    /// An AP's stack until the AP claims it on arrival (given back if it
    /// never comes). Whoever takes it out under the lock owns it.
    stack: spin::Mutex<Option<ApStack>>,
    /// An AP's GDT and TSS, loaded by the AP itself.
    tables: Option<ApTables>,
}

// SAFETY: `job` and `timing` are handed over between CPUs through
// `mailbox` and `bringup` with release/acquire ordering (see the field
// docs); the job pointee is Sync; `stack` is only touched under its lock
// and `tables` only read after the record is built.
unsafe impl Sync for PerCpu {}

impl PerCpu {
    /// A CPU's record, leaked: the BSP is up, an AP pending, with its
    /// stack and tables allocated here, on the boot CPU, so that no AP
    /// touches the heap while it comes up (see [`interrupts::ap_tables`]).
    pub(super) fn leak(info: CpuInfo) -> &'static PerCpu {
        let ap = !info.is_bsp;
        alloc::boxed::Box::leak(alloc::boxed::Box::new(PerCpu {
            info,
            arrived_tsc: AtomicU64::new(0),
            settled_tsc: AtomicU64::new(0),
            seen_apic_id: AtomicU32::new(u32::MAX),
            ready: AtomicBool::new(false),
            bringup: AtomicU32::new(if info.is_bsp { CPU_UP } else { CPU_PENDING }),
            mailbox: AtomicU32::new(MAILBOX_IDLE),
            job: UnsafeCell::new(None),
            tlb_seen: AtomicU64::new(0),
            timing: UnsafeCell::new(BootTiming {
                init_tsc: 0,
                seen_tsc: 0,
                ap_tsc: 0,
            }),
            stack: spin::Mutex::new(ap.then(ApStack::new)),
            tables: ap.then(interrupts::ap_tables),
        }))
    }

    /// The top of the AP's stack while nobody took it.
    pub(super) fn stack_top(&self) -> Option<u64> {
        self.stack.lock().as_ref().map(ApStack::top)
    }

    /// Take the AP's stack: the AP, which runs on it from then on, or the
    /// CPU that started it, to give it back once the AP never came.
    pub(super) fn take_stack(&self) -> Option<ApStack> {
        self.stack.lock().take()
    }

    /// The AP's GDT and TSS (`None` for the BSP).
    pub(super) fn tables(&self) -> Option<&ApTables> {
        self.tables.as_ref()
    }

    /// On the AP, each time it is about to run a job or halt: stamp the
    /// first time, and say whether this call did (only the AP itself
    /// writes the stamp, so a load and a store suffice).
    pub(super) fn settle(&self) -> bool {
        if self.settled_tsc.load(Ordering::Relaxed) != 0 {
            return false;
        }
        self.settled_tsc
            .store(crate::hw::tsc::rdtsc().max(1), Ordering::Relaxed);
        true
    }

    /// When the AP first ran a job or halted, if it has.
    pub(super) fn settled_tsc(&self) -> Option<u64> {
        match self.settled_tsc.load(Ordering::Relaxed) {
            0 => None,
            tsc => Some(tsc),
        }
    }

    /// On the AP, first thing in Rust: stamp the arrival.
    pub(super) fn arrive(&self, tsc: u64) {
        self.arrived_tsc.store(tsc.max(1), Ordering::Release);
    }

    /// On the AP, once it runs on its own GDT/TSS/IDT: say so, with the
    /// APIC id it reads.
    pub(super) fn set_ready(&self, apic_id: u32) {
        self.seen_apic_id.store(apic_id, Ordering::Relaxed);
        self.ready.store(true, Ordering::Release);
    }

    /// The AP's TSC on arrival, if it arrived.
    pub(super) fn arrived_tsc(&self) -> Option<u64> {
        match self.arrived_tsc.load(Ordering::Acquire) {
            0 => None,
            tsc => Some(tsc),
        }
    }

    pub(super) fn has_arrived(&self) -> bool {
        self.arrived_tsc().is_some()
    }

    /// The APIC id the AP read, once it is ready.
    pub(super) fn ready_apic_id(&self) -> Option<u32> {
        self.ready
            .load(Ordering::Acquire)
            .then(|| self.seen_apic_id.load(Ordering::Relaxed))
    }

    pub(super) fn is_up(&self) -> bool {
        self.bringup.load(Ordering::Acquire) == CPU_UP
    }

    /// Checked: publish the timing and count the AP as up.
    pub(super) fn mark_up(&self, timing: BootTiming) {
        // SAFETY: `timing` is only read after `bringup` reads CPU_UP
        // (acquire), which the store below publishes; only the CPU that
        // started this AP writes it, once.
        unsafe { *self.timing.get() = timing };
        self.bringup.store(CPU_UP, Ordering::Release);
    }

    /// Did not come up: left out, its jobs run on the BSP.
    pub(super) fn mark_failed(&self) {
        self.bringup.store(CPU_FAILED, Ordering::Release);
    }

    /// Bring-up timing of an AP that came up.
    pub(super) fn timing(&self) -> Option<BootTiming> {
        if self.info.is_bsp || !self.is_up() {
            return None;
        }
        // SAFETY: `timing` was written before `bringup` became CPU_UP
        // (read with acquire above) and is never written again.
        Some(unsafe { *self.timing.get() })
    }
}
