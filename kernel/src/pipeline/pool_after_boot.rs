//! The pool after boot: with `ondemand_drain=on`, the drain workers
//! initialise what the allocations left (they started claiming during the
//! allocation test); then, in every mode, what the pool and growth came
//! to.

use deferred_init::DeferredInit;
use memmap::store::MemmapBacking;
use memmap::zones::ZoneLayout;

use super::context::Ctx;
use super::deferred_workers;
use super::error::PipelineError;
use super::facts::Phase;
use super::mode::Deferral;

/// Drain if asked, then record and log the pool's end state.
pub fn run<B: MemmapBacking>(
    cx: &Ctx<'_>,
    di: &DeferredInit<'_, B>,
    layout: &ZoneLayout,
) -> Result<(), PipelineError> {
    if cx.drains() {
        drain(cx, di, layout)?;
    }
    let report = di.report();
    let grown_pages: u64 = report.nodes.iter().map(|n| n.nr_grown_pages).sum();
    let grown_windows: u64 = report.nodes.iter().map(|n| n.nr_grown_windows).sum();
    let pool_pages = di.pool_pages();
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
    Ok(())
}

/// The drain: the deferred-init workers over what is left of the pool.
/// Its own keys (`drain_ns`, …) and `drain` spans, never deferred init's.
fn drain<B: MemmapBacking>(
    cx: &Ctx<'_>,
    di: &DeferredInit<'_, B>,
    layout: &ZoneLayout,
) -> Result<(), PipelineError> {
    let report = deferred_workers::run_workers(di, cx.executor, cx.clock, &|| {})?;
    cx.facts.record(|f| {
        f.drain_ns = report.total_wall_ns;
        f.drain_workers = report.workers.len() as u64;
        deferred_workers::per_node(f.node_drain_ns.to_mut(), &report, layout);
    });
    deferred_workers::record_spans(cx, &report, Phase::Drain);
    cx.log.line(format_args!(
        "ondemand: drain workers initialised {} pages in {} ms",
        report.workers.iter().map(|w| w.nr_pages).sum::<u64>(),
        report.total_wall_ns / 1_000_000
    ));
    Ok(())
}
