//! Stage 9, the pool after boot: with `ondemand_drain=on`, the drain
//! workers initialise what the allocations left (they started claiming
//! during stage 8); then, in every mode, what the pool and growth came to,
//! and how much of the vmemmap first use mapped.

use deferred_init::DeferredInit;
use memmap::page::PageLayout;
use memmap::store::{Memmap, VmemmapBacking};
use memmap::zones::ZoneLayout;

use super::context::Ctx;
use super::error::PipelineError;
use super::facts::Phase;
use super::mode::{Deferral, VmemmapMapping};
use super::s3_vmemmap::{SectionMapper, VmemmapError};
use super::s6_deferred;
use super::seams::VmemmapMapper;

/// Stage 9: drain if asked, then record and log the pool's end state.
pub fn run<M: VmemmapMapper, P: PageLayout>(
    cx: &Ctx<'_>,
    di: &DeferredInit<'_, VmemmapBacking<P>>,
    layout: &ZoneLayout,
    memmap: &Memmap<VmemmapBacking<P>>,
    sections: &SectionMapper<'_, M>,
) -> Result<(), PipelineError> {
    if cx.drains() {
        drain(cx, di, layout)?;
    }
    let report = di.report();
    let grown_pages: u64 = report.nodes.iter().map(|n| n.nr_grown_pages).sum();
    let grown_windows: u64 = report.nodes.iter().map(|n| n.nr_grown_windows).sum();
    let pool_pages = di.pool_pages();
    let backing = memmap.backing();
    cx.facts.record(|f| {
        f.grown_pages = grown_pages;
        f.pool_pages = pool_pages;
        f.drained_pages = if cx.drains() {
            report.workers.iter().map(|w| w.nr_pages).sum()
        } else {
            0
        };
    });
    if cx.mode.deferral == Deferral::Pool {
        cx.log.line(format_args!(
            "ondemand: {} pages initialised by allocations in {} growth steps; {} pages never touched",
            grown_pages, grown_windows, pool_pages
        ));
    }
    if cx.mode.vmemmap == VmemmapMapping::OnFirstUse {
        let (mapped, table_frames, error) = sections.first_use();
        cx.log.line(format_args!(
            "vmemmap: {mapped} of {} sections mapped on first use, with {table_frames} page-table pages and {} hole pages written",
            backing.mapped().len(),
            backing.hole_pages_on_first_use()
        ));
        if let Some(e) = error {
            return Err(PipelineError::Vmemmap(VmemmapError::Map(e)));
        }
    }
    Ok(())
}

/// The drain: the deferred-init workers over what is left of the pool.
/// Its own keys (`drain_ns`, …) and `drain` spans, never deferred init's.
fn drain<P: PageLayout>(
    cx: &Ctx<'_>,
    di: &DeferredInit<'_, VmemmapBacking<P>>,
    layout: &ZoneLayout,
) -> Result<(), PipelineError> {
    let report = s6_deferred::run_workers(di, cx.executor, cx.clock, &|| {})?;
    cx.facts.record(|f| {
        f.drain_ns = report.total_wall_ns;
        f.drain_workers = report.workers.len() as u64;
        s6_deferred::per_node(&mut f.node_drain_ns, &report, layout);
    });
    s6_deferred::record_spans(cx, &report, Phase::Drain);
    cx.log.line(format_args!(
        "ondemand: drain workers initialised {} pages in {} ms",
        report.workers.iter().map(|w| w.nr_pages).sum::<u64>(),
        report.total_wall_ns / 1_000_000
    ));
    Ok(())
}
