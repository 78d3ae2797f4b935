//! Stage 5: the deferred-init plan, and the hand-off of the boot CPU's free
//! pages to the buddy allocator (Linux `memblock_free_all()` for the part
//! `memmap_init()` did).

use alloc::vec::Vec;

use deferred_init::{
    DeferredInit, DeferredInitError, DeferredPlan, InitMode, NodeCpus, PlanError, PlanOptions,
};
use memmap::init::InitOutcome;
use memmap::memblock::Memblock;
use memmap::store::{Memmap, MemmapBacking};
use memmap::zones::ZoneLayout;
use memmap::{NodeId, PfnRange};

use crate::options::TestFault;

use super::context::Ctx;
use super::error::PipelineError;
use super::facts::Phase;

/// Stage 5: plan the deferred work on each node's CPUs, set up the buddy
/// allocator, and hand it the boot CPU's free pages.
pub fn run<'m, B: MemmapBacking>(
    cx: &Ctx<'_>,
    memmap: &'m Memmap<B>,
    mb: &Memblock,
    outcome: &InitOutcome,
    layout: &ZoneLayout,
) -> Result<DeferredInit<'m, B>, PipelineError> {
    let plan_opts = PlanOptions {
        max_threads_per_node: cx.opts.threads_per_node.map(|n| n as usize),
        ..PlanOptions::default()
    };
    let node_cpus = node_cpus(layout, cx.cpu_nodes);
    let di = plan(memmap, mb, outcome, &node_cpus, plan_opts, cx.mode.workers)?;
    if cx.opts.test_fault == TestFault::DoubleInit {
        di.arm_double_init();
    }
    let (freed, buddy_eager_ns) = cx.timed(Phase::BuddyHandoff, || {
        if cx.mode.has_allocator() {
            hand_off(&di, mb, outcome).map(|_| ())
        } else {
            Ok(())
        }
    });
    freed?;
    cx.facts.record(|f| f.buddy_eager_ns = buddy_eager_ns);
    Ok(di)
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

/// Plan the workers and set up the buddy allocator over the eager and the
/// deferred memory.
fn plan<'m, B: MemmapBacking>(
    memmap: &'m Memmap<B>,
    mb: &Memblock,
    outcome: &InitOutcome,
    node_cpus: &[NodeCpus],
    opts: PlanOptions,
    mode: InitMode,
) -> Result<DeferredInit<'m, B>, PipelineError> {
    let reserved: Vec<PfnRange> = mb.reserved_pfn_ranges().collect();
    let plan = DeferredPlan::new(&outcome.deferred, &reserved, node_cpus, opts)
        .map_err(|e: PlanError| PipelineError::DeferredPlan(e))?;
    DeferredInit::new(memmap, plan, mode, &outcome.eager)
        .map_err(|e: DeferredInitError| PipelineError::DeferredInit(e))
}

/// Free the eager pages into the buddy lists (modes with an allocator
/// only). Returns the number of pages freed.
fn hand_off<B: MemmapBacking>(
    di: &DeferredInit<'_, B>,
    mb: &Memblock,
    outcome: &InitOutcome,
) -> Result<u64, PipelineError> {
    // SAFETY: the boot CPU initialised every struct page of `outcome.eager`
    // just now (stage 4), none is on a free list, no worker ever touches
    // eager ranges, and `di`'s allocator was built with them as managed.
    unsafe { deferred_init::handoff::free_eager_pages(di.buddy(), mb, &outcome.eager) }
        .map_err(PipelineError::BuddyHandoff)
}
