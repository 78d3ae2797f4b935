//! Running jobs on the online CPUs. Each AP that came up runs what is
//! posted to its mailbox ([`serve`]: `PerCpu::mailbox`) and otherwise halts
//! (`interrupts::halt_until`), so an idle vCPU takes no host time from the
//! working ones; one AP, the printer, once memory is ready writes the
//! kernel log out to the UART (`serial::print_some`, one FIFO's worth
//! between two looks at the mailbox) and halts when the log is written. [`scope`] hands out jobs:
//! [`Scope::spawn_on`] posts a job reference to a CPU's mailbox and wakes
//! it with an IPI (for the BSP itself the job is kept and run inline when
//! the scope closure returns), and the scope returns only after every job
//! it spawned finished, which is what makes borrowing jobs sound (like
//! `std::thread::scope`); the BSP halts meanwhile, and each AP wakes it
//! when its job is done.

use alloc::vec::Vec;
use core::cell::RefCell;
use core::marker::PhantomData;
use core::sync::atomic::{AtomicU32, Ordering};

use memboot_kernel::smp_error::SmpError;

use super::percpu::{CpuInfo, Job, PerCpu, MAILBOX_IDLE, MAILBOX_POSTED};
use super::state::{boot_timing, online_cpus, settle, SMP};
use crate::hw::{apic, interrupts, serial, tlb, tsc};

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
        let smp = SMP.get().expect("smp::scope before smp::prepare_aps");
        let pc = *smp
            .percpu
            .get(cpu)
            .unwrap_or_else(|| panic!("smp: spawn_on CPU {cpu}, only {} online", smp.cpus.len()));
        if pc.info.is_bsp || !pc.is_up() {
            self.on_bsp.borrow_mut().push((pc.info, job));
            return;
        }
        interrupts::halt_until(|| pc.mailbox.load(Ordering::Acquire) == MAILBOX_IDLE);
        // SAFETY: erases the lifetime of the job reference only. Sound because
        // `scope` does not return before this CPU's mailbox is IDLE again,
        // i.e. before the AP is done with the reference, and `'env` outlives
        // the `scope` call.
        let ptr: *const Job<'static> =
            unsafe { core::mem::transmute::<&'env Job<'env>, &'static Job<'static>>(job) };
        // SAFETY: the mailbox is IDLE, so the AP does not touch `job`; the
        // release store below publishes it.
        unsafe { *pc.job.get() = Some(ptr) };
        pc.mailbox.store(MAILBOX_POSTED, Ordering::Release);
        apic::send_wake(pc.info.apic_id);
        self.spawned.borrow_mut().push(pc);
    }
}

/// Run `f`, which may spawn jobs on online CPUs through its [`Scope`]; then
/// run the jobs spawned on the BSP, wait for every AP job and return `f`'s
/// result. BSP only (panics on an AP).
pub fn scope<'env, R>(f: impl FnOnce(&Scope<'env>) -> R) -> R {
    if let Some(smp) = SMP.get() {
        assert_eq!(apic::id(), smp.bsp_apic_id, "smp::scope called on an AP");
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
        interrupts::halt_until(|| pc.mailbox.load(Ordering::Acquire) == MAILBOX_IDLE);
    }
    r
}

/// An AP's life once it is up: run the jobs posted to its mailbox (waking
/// the BSP, which may be halted waiting for it, when each is done), write
/// the log out if it is the printer, and halt when there is neither.
pub(super) fn serve(pc: &'static PerCpu, bsp_apic_id: u32) -> ! {
    let printer = serial::is_printer(pc.info.apic_id);
    let posted = || pc.mailbox.load(Ordering::Acquire) == MAILBOX_POSTED;
    loop {
        if posted() {
            settle(pc);
            // SAFETY: POSTED means the BSP stored a job and does not touch
            // the slot until we set IDLE below.
            let job = unsafe { *pc.job.get() };
            // A mapping the boot CPU changed since this AP's last job (HVO)
            // may still be in its TLB: flushed before the job can use it.
            tlb::catch_up(&pc.tlb_seen);
            if let Some(job) = job {
                // SAFETY: the BSP's scope keeps the referent alive until the
                // mailbox is IDLE again (see Scope::spawn_on).
                unsafe { (*job)(pc.info) };
            }
            pc.mailbox.store(MAILBOX_IDLE, Ordering::Release);
            apic::send_wake(bsp_apic_id);
        } else if printer && serial::print_some() {
            continue;
        } else {
            settle(pc);
            interrupts::halt_until(|| posted() || (printer && !serial::printer_may_halt()));
            if printer {
                serial::printer_awake();
            }
        }
    }
}

/// Run one job on every CPU that came up; each must run exactly once and
/// read its own APIC id.
pub(super) fn self_test() -> Result<(), SmpError> {
    let cpus = online_cpus();
    let n = cpus.len();
    let runs: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
    let ids: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(u32::MAX)).collect();
    let job = |c: CpuInfo| {
        ids[c.index].store(apic::id(), Ordering::Relaxed);
        runs[c.index].fetch_add(1, Ordering::Relaxed);
    };
    let smp = SMP.get();
    let up = |c: &&CpuInfo| smp.is_none_or(|s| s.percpu[c.index].is_up());
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
