//! The buddy hand-off: the deferred-init plan, the page allocator's free lists over
//! the eager and the deferred memory, the hand-off of the boot CPU's free
//! pages to them (Linux `memblock_free_all()` for the part `memmap_init()`
//! did), and deferred init set up as the lists' client.

use alloc::vec::Vec;

use deferred_init::{
    BuddyAllocator, DeferredInit, DeferredInitError, DeferredPlan, ManagedRange, NodeCpus,
    PlanError, PlanOptions,
};
use memmap::init::InitOutcome;
use memmap::memblock::Memblock;
use memmap::store::{Memmap, MemmapBacking};
use memmap::zones::ZoneLayout;
use memmap::{NodeId, PfnRange};

use super::context::Ctx;
use super::error::PipelineError;
use super::facts::Phase;
use super::mode::Deferral;

/// What the hand-off hands on: the plan, and the free lists the pipeline owns
/// (deferred init and every allocating stage borrow them).
pub struct Handoff<'m, B> {
    pub plan: DeferredPlan,
    pub buddy: BuddyAllocator<'m, B>,
}

/// Plan the deferred work on each node's CPUs, set up the buddy
/// allocator, and hand it the boot CPU's free pages.
pub fn run<'m, B: MemmapBacking>(
    cx: &Ctx<'_>,
    memmap: &'m Memmap<B>,
    mb: &Memblock,
    outcome: &InitOutcome,
    layout: &ZoneLayout,
) -> Result<Handoff<'m, B>, PipelineError> {
    // Workers claim a section at a time from section chunks, as Linux's
    // padata jobs; a pool only needs one claim cursor per zone of a node,
    // so its plan costs O(memory ranges), not O(sections).
    let sections_per_chunk = match cx.mode.deferral {
        Deferral::Workers => PlanOptions::default().sections_per_chunk,
        Deferral::Pool => PlanOptions::WHOLE_ZONES,
    };
    let plan_opts = PlanOptions {
        max_threads_per_node: cx.opts.threads_per_node.map(|n| n as usize),
        sections_per_chunk,
    };
    let node_cpus = node_cpus(layout, cx.cpu_nodes);
    let reserved: Vec<PfnRange> = mb.reserved_pfn_ranges().collect();
    let plan = DeferredPlan::new(&outcome.deferred, &reserved, &node_cpus, plan_opts)
        .map_err(|e: PlanError| PipelineError::DeferredPlan(e))?;
    // The store is allocator metadata written before memory is ready (the
    // free bitmaps: ~RAM/16384), so it is timed with the struct-page work.
    // Its bitmaps span each zone, reserved pages too: HVO gives freed
    // vmemmap (at the node's top) back once memory is ready.
    let (buddy, free_bitmaps_ns) = cx.timed(Phase::FreeBitmaps, || {
        BuddyAllocator::with_store(
            memmap,
            // Each node's eager ranges lie below its deferred ones: in
            // this order the ranges come nearly sorted.
            outcome.eager.iter().copied().chain(plan.managed_ranges()),
            zone_spans(layout),
            cx.opts.buddy_store(),
        )
    });
    let buddy = buddy.map_err(|e| PipelineError::DeferredInit(DeferredInitError::from(e)))?;
    cx.facts.record(|f| {
        f.buddy_store = buddy.store().name().into();
        f.buddy_index_bytes = buddy.index_bytes();
        f.free_bitmaps_ns = free_bitmaps_ns;
    });
    let (freed, buddy_eager_ns) = cx.timed(Phase::BuddyHandoff, || {
        if cx.mode.has_allocator() {
            hand_off(&buddy, mb, outcome).map(|_| ())
        } else {
            Ok(())
        }
    });
    freed?;
    cx.facts.record(|f| f.buddy_eager_ns = buddy_eager_ns);
    Ok(Handoff { plan, buddy })
}

/// Deferred init of `plan` over `memmap`, freeing into `buddy`, its claim
/// loop run through the fault hooks.
pub fn deferred_init<'m, B: MemmapBacking>(
    cx: &Ctx<'m>,
    memmap: &'m Memmap<B>,
    buddy: &'m BuddyAllocator<'m, B>,
    plan: DeferredPlan,
) -> Result<DeferredInit<'m, B>, PipelineError> {
    let mut di = DeferredInit::new(memmap, buddy, plan, cx.mode.workers)
        .map_err(PipelineError::DeferredInit)?;
    di.set_claim_hooks(cx.faults.claim_hooks());
    Ok(di)
}

/// Each populated zone's span, as a range the allocator may manage.
fn zone_spans(layout: &ZoneLayout) -> impl Iterator<Item = ManagedRange> + '_ {
    layout
        .zones()
        .iter()
        .filter(|z| z.present_pages > 0)
        .map(|z| ManagedRange {
            nid: z.nid,
            zone: z.zone,
            pfns: z.span,
        })
}

/// The CPUs of each node with memory; `cpu_nodes[cpu]` is CPU `cpu`'s node.
fn node_cpus(layout: &ZoneLayout, cpu_nodes: &[NodeId]) -> Vec<NodeCpus> {
    layout
        .nodes()
        .iter()
        .map(|n| NodeCpus {
            nid: n.nid,
            cpus: (0..cpu_nodes.len() as u32)
                .filter(|&c| cpu_nodes[c as usize] == n.nid)
                .collect(),
        })
        .collect()
}

/// Free the eager pages into the buddy lists (modes with an allocator
/// only). Returns the number of pages freed.
fn hand_off<B: MemmapBacking>(
    buddy: &BuddyAllocator<'_, B>,
    mb: &Memblock,
    outcome: &InitOutcome,
) -> Result<u64, PipelineError> {
    // SAFETY: the boot CPU initialised every struct page of `outcome.eager`
    // just now (`eager_memmap`), none is on a free list, no worker ever touches
    // eager ranges, and `buddy` was built with them as managed.
    unsafe { deferred_init::handoff::free_eager_pages(buddy, mb, &outcome.eager) }
        .map_err(PipelineError::BuddyHandoff)
}
