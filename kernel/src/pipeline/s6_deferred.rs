//! Stage 6, deferred init: every node's remaining struct pages, initialised
//! and freed into the buddy lists by workers on that node's CPUs, while the
//! boot CPU first does `boot_cpu_first` (memory-block creation) and then
//! its own share, as Linux's boot CPU goes on booting while the pgdatinit
//! threads run and then waits for them in `page_alloc_init_late()`.

use deferred_init::{Clock, DeferredInit, DeferredReport, Executor};
use memmap::store::MemmapBacking;

use super::error::PipelineError;
use super::facts::{Facts, Phase};
use super::seams::{log_lines, Log};

/// The boot CPU's index for [`Executor::on_each_cpu`].
pub const BOOT_CPU: u32 = 0;

/// Run every worker; returns their report once all are done.
pub fn run<B: MemmapBacking>(
    di: &DeferredInit<'_, B>,
    executor: &dyn Executor,
    clock: &dyn Clock,
    boot_cpu_first: &(dyn Fn() + Sync),
) -> Result<DeferredReport, PipelineError> {
    di.check_cpus(executor.nr_cpus())
        .map_err(PipelineError::DeferredInit)?;
    executor.on_each_cpu(&|cpu| {
        if cpu == BOOT_CPU {
            boot_cpu_first();
        }
        di.run_cpu_workers(cpu, clock);
    });
    Ok(di.report())
}

/// Record deferred init's report in the facts (per node, and each worker
/// that claimed work as a `deferred_init` phase span).
pub fn record(facts: &Facts, report: &DeferredReport, node_index: impl Fn(u32) -> Option<usize>) {
    facts.record(|f| {
        f.deferred_ns = report.total_wall_ns;
        f.deferred_workers = report.workers.len() as u64;
        per_node(&mut f.node_deferred_ns, report, &node_index);
    });
    record_spans(facts, report, Phase::DeferredInit);
}

/// Record the drain's report (`ondemand_drain=on`): its own keys, so the
/// drain after boot is never read as deferred init before it.
pub fn record_drain(
    facts: &Facts,
    report: &DeferredReport,
    node_index: impl Fn(u32) -> Option<usize>,
) {
    facts.record(|f| {
        f.drain_ns = report.total_wall_ns;
        f.drain_workers = report.workers.len() as u64;
        per_node(&mut f.node_drain_ns, report, &node_index);
    });
    record_spans(facts, report, Phase::Drain);
}

fn per_node(slots: &mut [u64], report: &DeferredReport, node_index: impl Fn(u32) -> Option<usize>) {
    for n in &report.nodes {
        if let Some(slot) = node_index(n.nid).and_then(|i| slots.get_mut(i)) {
            *slot = n.wall_ns;
        }
    }
}

fn record_spans(facts: &Facts, report: &DeferredReport, phase: Phase) {
    for w in report
        .workers
        .iter()
        .filter(|w| w.finished && w.nr_claims > 0)
    {
        facts.phase(phase, w.cpu, Some(w.nid), w.start_ns, w.end_ns);
    }
}

/// The stage's log lines: one per node, then the total.
pub fn log(log: &dyn Log, report: &DeferredReport) {
    log_lines(log, report);
}
