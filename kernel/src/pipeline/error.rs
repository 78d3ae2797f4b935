//! The pipeline's one error type: which step failed and why, with a
//! message that says what to do, and the summary `status` it maps to;
//! and each step's own error type, which it wraps.

use alloc::string::String;
use core::fmt;

use deferred_init::{DeferredInitError, FreeError, PlanError};
use memmap::hugetlb::UnbackedHugePage;
use memmap::init::MemmapInitError;
use memmap::memblock::MemblockError;
use memmap::memory_block::BlockError;
use memmap::Pfn;

use super::fault_hooks::FaultNotApplied;
use super::seams::MapError;
use crate::smp_error::SmpError;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PipelineError {
    Memblock(MemblockStageError),
    Vmemmap(VmemmapError),
    Memmap(MemmapInitError),
    DeferredPlan(PlanError),
    DeferredInit(DeferredInitError),
    BuddyHandoff(FreeError),
    MemoryBlock(BlockError),
    AllocTest(AllocTestError),
    Verify(VerifyError),
    /// A `test_fault=` that found nothing to damage on this machine.
    TestFault(FaultNotApplied),
    /// Starting the other CPUs, or waiting for them ([`super::seams::CpuBringup`]).
    Smp(SmpError),
    /// Writing a 1 GiB huge page's struct pages.
    Hugetlb(UnbackedHugePage),
    /// HVO of the 2 MiB pages, midway: remapping their vmemmap or giving
    /// its pages back.
    Hvo(super::hvo_2m::HvoError),
}

impl PipelineError {
    /// The summary's `status` for this failure.
    pub const fn status(&self) -> &'static str {
        match self {
            PipelineError::Memblock(_) => "memblock",
            PipelineError::Vmemmap(_) => "vmemmap",
            PipelineError::Memmap(_) => "memmap",
            PipelineError::DeferredPlan(_) => "deferred_plan",
            PipelineError::DeferredInit(_) => "deferred_init",
            PipelineError::BuddyHandoff(_) => "buddy_handoff",
            PipelineError::MemoryBlock(_) => "memory_block",
            PipelineError::AllocTest(_) => "alloc_test",
            PipelineError::Verify(_) => "verify",
            PipelineError::TestFault(_) => "bad_option",
            PipelineError::Smp(_) => "smp",
            PipelineError::Hugetlb(_) => "memmap",
            PipelineError::Hvo(_) => "vmemmap",
        }
    }
}

impl fmt::Display for PipelineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PipelineError::Memblock(e) => write!(f, "{e}"),
            PipelineError::Vmemmap(e) => write!(f, "{e}"),
            PipelineError::Memmap(e) => write!(f, "{e}"),
            PipelineError::DeferredPlan(e) => write!(f, "deferred-init plan: {e}"),
            PipelineError::DeferredInit(e) => write!(f, "deferred init: {e}"),
            PipelineError::BuddyHandoff(e) => write!(
                f,
                "handing the boot CPU's free pages to the buddy allocator: {e}"
            ),
            PipelineError::MemoryBlock(e) => write!(f, "memory blocks: {e}"),
            PipelineError::AllocTest(e) => write!(f, "{e}"),
            PipelineError::Verify(e) => write!(f, "{e}"),
            PipelineError::TestFault(e) => write!(f, "{e}"),
            PipelineError::Smp(e) => write!(f, "{e}"),
            PipelineError::Hugetlb(e) => write!(f, "{e}"),
            PipelineError::Hvo(e) => write!(f, "{e}"),
        }
    }
}

/// Why memblock could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemblockStageError {
    /// The input that was refused ("firmware map", "SRAT affinity", or an
    /// early reservation's `what`).
    pub what: &'static str,
    pub err: MemblockError,
}

impl fmt::Display for MemblockStageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "memblock ({}): {}", self.what, self.err)
    }
}

/// Why the vmemmap could not be populated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VmemmapError {
    /// memblock could not provide backing or page-table memory.
    OutOfMemory {
        what: &'static str,
        err: MemblockError,
    },
    Map(MapError),
}

impl fmt::Display for VmemmapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VmemmapError::OutOfMemory { what, err } => write!(
                f,
                "vmemmap: no memory for {what} ({err}); struct pages need 1/64 of RAM per node (1/128 with struct_page=32)"
            ),
            VmemmapError::Map(e) => write!(f, "vmemmap: {e}"),
        }
    }
}

impl From<MapError> for VmemmapError {
    fn from(e: MapError) -> Self {
        VmemmapError::Map(e)
    }
}

/// What went wrong in the allocation test that is not a failed allocation
/// (those are counted): the allocator refused a block back, or a drain
/// step failed. Either is an allocator bug.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllocTestError {
    Free {
        pfn: Pfn,
        order: u32,
        err: FreeError,
    },
    DrainStep(DeferredInitError),
}

impl fmt::Display for AllocTestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllocTestError::Free { pfn, order, err } => write!(
                f,
                "alloc_test: freeing the order-{order} block at pfn {pfn:#x} it had allocated failed: {err}; an allocator bug, report it with the log"
            ),
            AllocTestError::DrainStep(e) => write!(
                f,
                "alloc_test: a drain step failed: {e}; a deferred-init bug, report it with the log"
            ),
        }
    }
}

/// What differs, as the first lines of the checker's report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyError {
    pub message: String,
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}
