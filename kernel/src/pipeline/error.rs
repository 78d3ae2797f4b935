//! The pipeline's one error type: which stage failed and why, with a
//! message that says what to do, and the summary `status` it maps to.

use core::fmt;

use deferred_init::{DeferredInitError, FreeError, PlanError};
use memmap::init::MemmapInitError;
use memmap::memory_block::BlockError;

use super::alloc_test::AllocTestError;
use super::fault_hooks::FaultNotApplied;
use super::memblock::MemblockStageError;
use super::verify::VerifyError;
use super::vmemmap::VmemmapError;

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
        }
    }
}
