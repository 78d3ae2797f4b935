//! Memory ready with a pool (`ondemand`; the alternative to
//! `deferred_workers`): the memory the boot CPU left goes to
//! the allocator untouched, all of it reachable at once (growth claims a
//! block window at a time); memory is ready now. The boot CPU then creates
//! the memory-block devices ([`super::memory_blocks::create_timed`]).

use deferred_init::DeferredInit;
use memmap::memblock::Memblock;
use memmap::page::PageLayout;
use memmap::store::{Memmap, VmemmapBacking};

use super::context::Ctx;
use super::error::PipelineError;
use super::memory_blocks::{self, Created};

/// Hand the pool over; returns the memory blocks.
pub fn run<P: PageLayout>(
    cx: &Ctx<'_>,
    di: &DeferredInit<'_, VmemmapBacking<P>>,
    memmap: &Memmap<VmemmapBacking<P>>,
    mb: &Memblock,
) -> Result<Created, PipelineError> {
    let now = cx.facts.memory_ready(cx.clock);
    let report = di.report();
    let holes = memmap.backing().hole_pages_on_first_use();
    cx.facts.written_at_ready(&report, holes);
    let windows: u64 = report.nodes.iter().map(|n| n.nr_windows).sum();
    cx.log.line(format_args!(
        "ondemand: {} pages in {} block windows of {} nodes handed to the allocator untouched; every page allocatable at {} us",
        di.pool_pages(),
        windows,
        di.plan().nodes().len(),
        now / 1000
    ));
    // Before the memory blocks, which at 59T take the boot CPU a while:
    // the host's memory-ready marker goes with the console's let-go.
    cx.log.memory_ready();
    memory_blocks::create_timed(
        mb,
        cx.opts.memory_block_size,
        cx.opts.memory_block_lookup,
        cx.under_hypervisor,
        cx.clock,
    )
}
