//! Per-node deferred struct-page initialisation (Linux
//! `CONFIG_DEFERRED_STRUCT_PAGE_INIT`), and the buddy allocator it feeds.
//!
//! After the boot CPU has initialised the low zones and the first section of
//! each node (memmap's `Deferred` strategy), the rest of every node's struct
//! pages is initialised by workers on that node's CPUs, in parallel, while
//! boot goes on:
//!
//! 1. [`DeferredPlan::new`] cuts each node's [`memmap::DeferredRange`]s into
//!    section-aligned chunks, marks reserved pieces, and assigns workers to
//!    CPUs (`plan.rs` explains chunking and the choice of CPUs).
//! 2. [`DeferredInit::run`] runs each CPU's workers through an [`Executor`]
//!    (`std::thread` on the host: `std_seams::ThreadExecutor`; application
//!    processors in the kernel), or a caller's own per-CPU job calls
//!    [`DeferredInit::run_cpu_workers`] (the kernel's boot CPU creates the
//!    memory blocks first). Workers claim chunks
//!    through a lock-free per-node cursor (`run/mod.rs` explains the protocol).
//! 3. Initialised pages are freed into a per-(node, zone) [`BuddyAllocator`]
//!    in the largest aligned blocks (`buddy/mod.rs` explains the list encoding),
//!    which its owner creates and lends to deferred init.
//! 4. The [`PageAllocator`] (`page_alloc.rs`), what every caller allocates
//!    from, serves requests in Linux's zone fallback order from those lists
//!    and grows a zone from deferred init's pool ([`DeferredInit`] is its
//!    [`Grow`] source) if an allocation comes before the workers are done.
//!    Order-0 pages go through per-CPU caches (`pcp.rs`) when the caller
//!    names its CPU.
//! 5. [`DeferredInit::report`] gives per-node and per-worker statistics and
//!    the dmesg-equivalent lines (`stats.rs`).
//!
//! Why the allocator lives in this crate: deferred init and the allocator
//! are one protocol, not a layer on a layer. Workers free into the buddy
//! lists under the lock an allocation takes; an allocation that finds a
//! zone short claims deferred init's windows to grow it (Linux's
//! `deferred_grow_zone`), racing the workers for the same claims; and
//! verification checks both at once (every page initialised exactly once
//! and in exactly one free block). Split into two crates, each would have
//! to export its internals to the other.
//!
//! `no_std` + `alloc`; allocation happens only while building the plan and the
//! allocator, never in the workers' loop.
#![cfg_attr(not(any(test, feature = "std")), no_std)]

extern crate alloc;

mod buddy;
mod claim_hooks;
mod clock;
pub mod faults;
mod free_bitmap;
pub mod hugetlb_pool;
pub use free_bitmap::free_bitmap_bytes;
pub mod handoff;
mod page_alloc;
mod pcp;
mod plan;
mod run;
mod stats;
#[cfg(test)]
mod test_damage;
mod verify;

#[cfg(any(test, feature = "std"))]
pub mod std_seams;

/// One unit-test suite (the files in `src/suite/`): the test modules read
/// and write pages only through `PageLayout`, so one source runs at each
/// struct-page size and store, `TestPage` and `TEST_STORE` saying which
/// (the same files on purpose, compiled once per suite).
macro_rules! test_suite {
    ($(#[$doc:meta])* $name:ident, $page:ty, $store:expr) => {
        $(#[$doc])*
        #[cfg(test)]
        #[path = "suite"]
        #[allow(clippy::duplicate_mod)]
        mod $name {
            pub(crate) type TestPage = $page;
            pub(crate) const TEST_STORE: Option<memboot_contract::option_values::BuddyStore> = $store;
            mod pcp_tests;
            mod pool_tests;
            pub(crate) mod tests;
            mod verify_tests;
        }
    };
}

test_suite!(
    /// Linux's 64-byte struct pages.
    suite_64,
    memmap::page::StructPage,
    None
);
test_suite!(
    /// 32-byte struct pages (`struct_page=32`).
    suite_32,
    memmap::page32::StructPage32,
    None
);
test_suite!(
    /// 8-byte struct pages (`struct_page=8`), whose buddy allocator keeps
    /// its free blocks in bitmaps.
    suite_8,
    memmap::page8::StructPage8,
    None
);
test_suite!(
    /// 32-byte struct pages with the free blocks in bitmaps
    /// (`buddy=bitmaps`): the store measured apart from the page size.
    suite_32_bitmaps,
    memmap::page32::StructPage32,
    Some(memboot_contract::option_values::BuddyStore::Bitmaps)
);

pub use buddy::walk::ListEnd;
pub use buddy::{
    AllocError, BuddyAllocator, BuddyError, FreeError, ManageError, ManagedRange, PFN_NONE,
};
pub use claim_hooks::{ClaimHooks, NoClaimHooks};
pub use clock::Clock;
pub use page_alloc::{Allocation, Grow, PageAllocator};
pub use pcp::{PerCpuPages, PCP_BATCH, PCP_HIGH};
pub use plan::{
    ChunkWindows, CpuId, DeferredPlan, NodeCpus, NodePlan, Piece, PlanError, PlanOptions,
    WorkerAssignment, WINDOW_NR_PAGES,
};
pub use run::{
    ChunkInits, Claim, DeferredInit, DeferredInitError, Executor, InitMode, PoolPiece,
    GROW_CLAIM_WINDOWS, WORKER_CLAIM_WINDOWS,
};
pub use stats::{DeferredReport, NodeStats, WorkerStats};
pub use verify::{
    alloc_free_selftest, check_all, verify_buddy, verify_buddy_with_pool, verify_pages,
    verify_scan_range, BuddyFailure, BuddyMismatch, BuddySummary, Expected, HeadProblem,
    ListProblem, PageCheck, PageMismatch, PoolCheck, Problem, ScanRange, SelftestError,
    SelftestReport, Verified, ZoneCheck, ZoneSummary, MAX_RECORDED_MISMATCHES, SELFTEST_ORDERS,
};
