//! The pipeline's `Executor` and `CpuBringup` on real hardware: the online
//! CPUs, one job each through `smp::scope`. The pipeline starts the APs
//! (`smp::launch`, with the pipeline's page tables lent for the local
//! APIC and the trampoline) where its mode first needs them; they come up in the
//! background, and the first `on_each_cpu` waits for them
//! (`smp::wait_online`).

use deferred_init::{CpuId, Executor};
use memboot_kernel::boot_error::BootError;
use memboot_kernel::pipeline::seams::CpuBringup;

use super::KernelMapper;
use crate::hw::{held_report, smp};

/// The online CPUs: one job per CPU through `smp::scope`.
pub struct SmpCpus;

impl Executor for SmpCpus {
    fn nr_cpus(&self) -> usize {
        smp::cpu_count()
    }
    fn on_each_cpu(&self, job: &(dyn Fn(CpuId) + Sync)) {
        if let Err(e) = smp::wait_online() {
            crate::hw::boot::fail_with(BootError::Smp(e));
        }
        let run = |cpu: smp::CpuInfo| job(cpu.index as CpuId);
        smp::scope(|s| {
            for cpu in 0..smp::cpu_count() {
                s.spawn_on(cpu, &run);
            }
        });
    }
}

/// The boot CPU stops working alone here: the report held back until now
/// (firmware map, ACPI, NUMA nodes, `memboot-input:`; `hw::held_report`)
/// goes out first, then the APs start.
impl CpuBringup<KernelMapper<'_>> for SmpCpus {
    fn start(&self, mapper: &mut KernelMapper<'_>) {
        held_report::print_once();
        if let Err(e) = smp::launch(mapper.page_tables()) {
            crate::hw::boot::fail_with(BootError::Smp(e));
        }
    }
}
