//! Why deferred init could not be set up or a worker not run.

use core::fmt;

use memmap::{NodeId, Pfn};

use crate::buddy::BuddyError;
use crate::plan::CpuId;

/// Why deferred init could not be set up or a worker not run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeferredInitError {
    /// A deferred piece lies in a section without struct-page backing.
    SectionNotBacked { nid: NodeId, section_nr: u64 },
    /// The buddy allocator refused the managed ranges.
    Buddy(BuddyError),
    /// `run_worker` was given an index the plan does not have.
    NoSuchWorker { worker: usize, nr_workers: usize },
    /// The plan puts a worker on a CPU the executor does not have.
    NoSuchCpu {
        worker: usize,
        cpu: CpuId,
        nr_cpus: usize,
    },
    /// `take_from_pool` was asked for free memory still in the pool.
    TakesFreeMemory { nid: NodeId, pfn: Pfn },
}

impl fmt::Display for DeferredInitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeferredInitError::SectionNotBacked { nid, section_nr } => write!(
                f,
                "node {nid}: deferred memory in section {section_nr} has no struct-page backing; populate the vmemmap of every section with present memory before deferred init"
            ),
            DeferredInitError::Buddy(e) => write!(f, "buddy allocator setup: {e}"),
            DeferredInitError::NoSuchWorker { worker, nr_workers } => write!(
                f,
                "worker {worker} does not exist (plan has {nr_workers}); use indices of DeferredPlan::workers()"
            ),
            DeferredInitError::NoSuchCpu { worker, cpu, nr_cpus } => write!(
                f,
                "worker {worker} is planned on CPU {cpu} but the executor has {nr_cpus} CPUs; build the plan's NodeCpus from the CPUs that are online"
            ),
            DeferredInitError::TakesFreeMemory { nid, pfn } => write!(
                f,
                "node {nid}: page {pfn:#x} is free memory in the pool, not reserved; only reserved memory can be taken out of the pool (free memory is the allocator's to hand out), a memboot bug"
            ),
        }
    }
}

impl From<BuddyError> for DeferredInitError {
    fn from(e: BuddyError) -> Self {
        DeferredInitError::Buddy(e)
    }
}
