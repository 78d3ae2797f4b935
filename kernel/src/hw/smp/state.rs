//! The bring-up's state, with one owner: [`Smp`], published once in
//! [`SMP`] by `prepare_aps` (the planned CPUs and what starting them
//! needs), and the background bring-up [`Bringup`] it holds once `launch`
//! started an AP. The public queries (online CPUs, APs up, timing) read
//! it; each AP's first job or halt counts in it ([`settle`]), and the last
//! tells the host bring-up ended.

use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use bootloader_api::info::MemoryRegion;
use memboot_contract::host_marker::HostMarker;
use memboot_kernel::acpi::AcpiInfo;
use memboot_kernel::smp_error::SmpError;

use super::percpu::{BootTiming, CpuInfo, PerCpu};
use super::trampoline::Trampoline;
use crate::hw::{apic, host_marker};

/// Everything SMP bring-up knows, from `prepare_aps` on.
pub(super) struct Smp {
    /// The CPUs jobs run on, BSP first (`cpus[i].index == i`): the BSP and
    /// every AP to be started, known before they check in.
    pub(super) cpus: Vec<CpuInfo>,
    /// `percpu[i]` is CPU `i`'s record.
    pub(super) percpu: Vec<&'static PerCpu>,
    /// CPUID's initial APIC id of the boot CPU, which planned the CPUs.
    pub(super) bsp_apic_id: u32,
    /// The local APIC's physical address (MADT).
    pub(super) lapic_addr: u64,
    /// All physical memory is mapped at this offset.
    pub(super) phys_offset: u64,
    /// The bootloader's memory map, for the trampoline's low pages.
    pub(super) regions: &'static [MemoryRegion],
    /// `test_fault=late_ap`: `launch` holds the starter's startup IPIs back
    /// until the boot CPU has given its round up (see `protocol`).
    pub(super) late_ap: bool,
    /// Set by the first `launch` (a swap, so only one call starts
    /// anything); `wait_online` loads it to refuse to run jobs before the
    /// APs were started. Both on the boot CPU: it orders no other data.
    pub(super) launched: AtomicBool,
    /// Set by the first `wait_online` (a swap, so later calls return at
    /// once). Boot CPU only: it orders no other data.
    pub(super) waited: AtomicBool,
    /// The background bring-up, once `launch` sent the starter its IPIs
    /// (none with one CPU). The `Once` publishes it to the starter, which
    /// looks itself up there in `ap_entry`.
    pub(super) background: spin::Once<Bringup>,
    /// APs that first ran a job or halted ([`settle`]); the one that makes
    /// it every planned AP tells the host bring-up ended.
    pub(super) settled_aps: AtomicUsize,
}

/// The one bring-up state, set by `prepare_aps`.
pub(super) static SMP: spin::Once<Smp> = spin::Once::new();

/// Background bring-up: the BSP sends the startup IPIs to the first AP
/// (the starter) and goes on; the starter, once up, starts the other APs
/// one after another, while the BSP initialises memory. `wait_online`
/// collects the result when the APs are first needed.
pub(super) struct Bringup {
    pub(super) tramp: Trampoline,
    pub(super) starter: &'static PerCpu,
    /// BSP's TSC at the starter's INIT (the first IPI). Written before the
    /// IPIs and read after `done` (acquire) or on the starter, which the
    /// IPIs order after it: relaxed.
    pub(super) first_ipi_tsc: AtomicU64,
    /// The APs after the starter, in MADT order.
    pub(super) rest: Vec<&'static PerCpu>,
    /// Set (release) once every AP in `rest` came up, was left out, or
    /// failed the boot (`error`); the BSP loads it with acquire before it
    /// reads `error`, `done_tsc` and the APs' records.
    pub(super) done: AtomicBool,
    /// TSC when `done` was set; published by `done`.
    pub(super) done_tsc: AtomicU64,
    pub(super) error: spin::Mutex<Option<SmpError>>,
}

// SAFETY: the trampoline's parameter block (behind `tramp`'s raw pointer)
// is written by one starting CPU at a time: the BSP for the starter's
// round, then the starter alone for the other APs (it only starts once it
// has claimed its own round); the BSP touches the block again only when the
// starter never claimed its round (the BSP takes the claim back first, so
// the starter halts if it comes late) or after `done`. The stack in
// `starter_stack` is only used under its lock.
unsafe impl Sync for Bringup {}
// SAFETY: as above; `Bringup` lives in a static and is never moved between
// CPUs other than by being shared.
unsafe impl Send for Bringup {}

impl Bringup {
    /// Record the end of bring-up (and its error, if any) for the BSP.
    pub(super) fn finish(&self, result: Result<(), SmpError>) {
        if let Err(e) = result {
            *self.error.lock() = Some(e);
        }
        self.done_tsc
            .store(crate::hw::tsc::rdtsc(), Ordering::Relaxed);
        self.done.store(true, Ordering::Release);
    }
}

impl Smp {
    /// Plan the BSP and every enabled AP in the MADT, BSP first, dense
    /// indices; nothing started.
    pub(super) fn plan(
        acpi: &AcpiInfo,
        bsp_apic_id: u32,
        phys_offset: u64,
        regions: &'static [MemoryRegion],
        late_ap: bool,
    ) -> Smp {
        let node_of = |apic_id: u32| {
            acpi.cpus
                .iter()
                .find(|c| c.apic_id == apic_id)
                .map_or(0, |c| c.node)
        };
        let mut percpu = alloc::vec![PerCpu::leak(CpuInfo {
            index: 0,
            apic_id: bsp_apic_id,
            node: node_of(bsp_apic_id),
            is_bsp: true,
        })];
        if !acpi.cpus.is_empty() && !acpi.cpus.iter().any(|c| c.apic_id == bsp_apic_id) {
            kprintln!("smpboot: Warning: boot CPU APIC {bsp_apic_id:#x} is not in the MADT");
        }
        let aps = acpi
            .cpus
            .iter()
            .filter(|c| c.enabled && c.apic_id != bsp_apic_id);
        for c in aps {
            if c.apic_id > 0xfe && !apic::x2apic_mode() {
                kprintln!(
                    "smpboot: CPU {} (APIC {:#x}) needs x2APIC, which this CPU lacks: skipped",
                    percpu.len(),
                    c.apic_id
                );
                continue;
            }
            percpu.push(PerCpu::leak(CpuInfo {
                index: percpu.len(),
                apic_id: c.apic_id,
                node: c.node,
                is_bsp: false,
            }));
        }
        Smp {
            cpus: percpu.iter().map(|p| p.info).collect(),
            percpu,
            bsp_apic_id,
            lapic_addr: acpi.lapic_addr,
            phys_offset,
            regions,
            late_ap,
            launched: AtomicBool::new(false),
            waited: AtomicBool::new(false),
            background: spin::Once::new(),
            settled_aps: AtomicUsize::new(0),
        }
    }

    /// The records of the CPUs that came up, BSP first.
    pub(super) fn up(&self) -> impl Iterator<Item = &'static PerCpu> + '_ {
        self.percpu.iter().copied().filter(|p| p.is_up())
    }
}

/// On AP `pc`, each time it is about to run a job or halt: stamp the
/// first time ([`PerCpu::settle`]), and if that makes every planned AP
/// settled, bring-up ended here: tell the host (`host_marker`), whose
/// sample at it starts the after-bring-up window. An AP that did not come
/// up never settles, so then no marker is written and the host falls back
/// on the `smp: bring-up ended` line.
pub(super) fn settle(pc: &PerCpu) {
    if !pc.settle() {
        return;
    }
    let Some(smp) = SMP.get() else { return };
    // Relaxed: a count, whose increments are atomic whatever the ordering;
    // exactly one AP sees the last one, and the marker orders nothing.
    let settled = smp.settled_aps.fetch_add(1, Ordering::Relaxed) + 1;
    if settled + 1 == smp.percpu.len() {
        host_marker::tell(HostMarker::BringupEnded);
    }
}

/// When bring-up ended, in ns since kernel entry: the latest of the APs
/// that came up to run its first job or halt (`None` before any did).
pub fn bringup_ended_ns() -> Option<u64> {
    let smp = SMP.get()?;
    let last = smp.up().filter_map(PerCpu::settled_tsc).max()?;
    Some(crate::hw::tsc::cycles_to_ns(
        last.saturating_sub(crate::hw::tsc::entry_tsc()),
    ))
}

/// The CPUs jobs run on, BSP first (`cpus[i].index == i`); empty before
/// `prepare_aps`. These are the CPUs planned (the BSP and every AP to be
/// started, known before they check in); one that then does not come up is
/// reported, and its jobs run on the BSP.
pub fn online_cpus() -> &'static [CpuInfo] {
    SMP.get().map(|s| s.cpus.as_slice()).unwrap_or(&[])
}

/// Number of online CPUs including the BSP (at least 1).
pub fn cpu_count() -> usize {
    online_cpus().len().max(1)
}

/// APs that came up so far (the BSP not counted), for the summary even
/// when bring-up fails part-way.
pub fn aps_online() -> usize {
    SMP.get()
        .map_or(0, |s| s.up().filter(|p| !p.info.is_bsp).count())
}

/// Bring-up timing of online CPU `cpu` (None for the BSP, an AP not up, or
/// out of range).
pub(super) fn boot_timing(cpu: usize) -> Option<BootTiming> {
    SMP.get()?.percpu.get(cpu)?.timing()
}
