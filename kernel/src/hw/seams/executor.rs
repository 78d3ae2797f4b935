//! The pipeline's `Executor` and `CpuBringup` on real hardware: the online
//! CPUs, one job each through `smp::scope`. The pipeline starts the APs
//! (`smp::launch`, with the pipeline's page tables lent for the local
//! APIC and the trampoline) where its mode first needs them; they come up in
//! the background until it waits for them (`smp::wait_online`) before its
//! first jobs. Both report failure to the pipeline.

use deferred_init::{CpuId, Executor};
use memboot_kernel::pipeline::seams::CpuBringup;
use memboot_kernel::smp_error::SmpError;

use super::KernelMapper;
use crate::hw::{held_report, smp};

/// The online CPUs: one job per CPU through `smp::scope`.
pub struct SmpCpus;

impl Executor for SmpCpus {
    fn nr_cpus(&self) -> usize {
        smp::cpu_count()
    }
    /// The pipeline waited for the APs (`CpuBringup::wait_online`) before
    /// its first jobs; running jobs before that is a boot-order bug.
    fn on_each_cpu(&self, job: &(dyn Fn(CpuId) + Sync)) {
        if let Err(e) = smp::wait_online() {
            panic!("jobs before the pipeline waited for the CPUs: {e}");
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
    fn start(&self, mapper: &mut KernelMapper<'_>) -> Result<(), SmpError> {
        held_report::print_once();
        smp::launch(mapper.page_tables())
    }
    fn wait_online(&self) -> Result<(), SmpError> {
        smp::wait_online()
    }
}
