//! The pipeline's `Executor` on real hardware: the online CPUs, one job
//! each through `smp::scope`.

use deferred_init::{CpuId, Executor};

use crate::hw::smp;

/// The online CPUs: one job per CPU through `smp::scope`.
pub struct SmpCpus;

impl Executor for SmpCpus {
    fn nr_cpus(&self) -> usize {
        smp::cpu_count()
    }
    fn on_each_cpu(&self, job: &(dyn Fn(CpuId) + Sync)) {
        let run = |cpu: smp::CpuInfo| job(cpu.index as CpuId);
        smp::scope(|s| {
            for cpu in 0..smp::cpu_count() {
                s.spawn_on(cpu, &run);
            }
        });
    }
}
