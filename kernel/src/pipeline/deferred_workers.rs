//! Memory ready through per-node workers (`deferred`, `regions`, `perpfn`, `touch`):
//! every node's remaining struct pages, initialised and freed into the buddy
//! lists by workers on that node's CPUs, while the boot CPU first creates
//! the memory-block devices ([`super::memory_blocks::create_timed`]) and then does its own share,
//! as Linux's boot CPU goes on booting while the pgdatinit threads run and
//! then waits for them in `page_alloc_init_late()`. Memory is ready when
//! the boot CPU is back from that wait.

use deferred_init::{DeferredInit, DeferredReport};
use memmap::memblock::Memblock;
use memmap::store::MemmapBacking;
use memmap::zones::ZoneLayout;

use super::context::Ctx;
use super::error::PipelineError;
use super::facts::Phase;
use super::memory_blocks::{self, Created};
use super::seams::{log_lines, Clock, Executor, BOOT_CPU};

/// Run the workers and, on the boot CPU, create the memory blocks;
/// returns the blocks once every worker is done.
pub fn run<B: MemmapBacking>(
    cx: &Ctx<'_>,
    di: &DeferredInit<'_, B>,
    mb: &Memblock,
    layout: &ZoneLayout,
) -> Result<Created, PipelineError> {
    cx.log.line(format_args!(
        "deferred: {} pages on {} nodes, {} workers on {} CPUs",
        di.plan().nr_pages(),
        di.plan().nodes().len(),
        di.plan().workers().len(),
        cx.executor.nr_cpus()
    ));
    let created: spin::Mutex<Option<Result<Created, PipelineError>>> = spin::Mutex::new(None);
    let (size, lookup) = (cx.opts.memory_block_size, cx.opts.memory_block_lookup);
    let (hypervisor, clock) = (cx.under_hypervisor, cx.clock);
    let make_blocks = || {
        *created.lock() = Some(memory_blocks::create_timed(
            mb, size, lookup, hypervisor, clock,
        ))
    };
    let report = run_workers(di, cx.executor, cx.clock, &make_blocks)?;
    // The boot CPU is back from its wait for the workers: memory init no
    // longer blocks the boot (Linux: page_alloc_init_late() returns).
    if cx.mode.has_allocator() {
        cx.facts.memory_ready(cx.clock);
        // A vmemmap mapped at boot writes no hole on first use.
        cx.facts.written_at_ready(&report, 0);
    }
    log_lines(cx.log, &report);
    record(cx, &report, layout);
    cx.log.memory_ready();
    created
        .into_inner()
        .expect("the boot CPU's job created the memory blocks")
}

/// Run every worker (on each CPU, after `boot_cpu_first` on the boot CPU);
/// returns their report once all are done. Also the drain's engine.
pub fn run_workers<B: MemmapBacking>(
    di: &DeferredInit<'_, B>,
    executor: &dyn Executor,
    clock: &dyn Clock,
    boot_cpu_first: &(dyn Fn() + Sync),
) -> Result<DeferredReport, PipelineError> {
    di.check_cpus(executor.nr_cpus())
        .map_err(PipelineError::DeferredInit)?;
    if di.plan().workers().is_empty() {
        // All struct pages were the boot CPU's (`regions`, `perpfn`): no
        // other CPU has a job, and waking them would only take host time
        // from the boot CPU under TCG.
        boot_cpu_first();
        return Ok(di.report());
    }
    executor.on_each_cpu(&|cpu| {
        if cpu == BOOT_CPU {
            boot_cpu_first();
        }
        di.run_cpu_workers(cpu, clock);
    });
    Ok(di.report())
}

/// Record deferred init's report (per node, and each worker that claimed
/// work as a `deferred_init` phase span).
fn record(cx: &Ctx<'_>, report: &DeferredReport, layout: &ZoneLayout) {
    cx.facts.record(|f| {
        f.deferred_ns = report.total_wall_ns;
        f.deferred_workers = report.workers.len() as u64;
        per_node(f.node_deferred_ns.to_mut(), report, layout);
    });
    record_spans(cx, report, Phase::DeferredInit);
}

/// Each node's wall time into `slots`, by node index.
pub fn per_node(slots: &mut [u64], report: &DeferredReport, layout: &ZoneLayout) {
    for n in &report.nodes {
        let index = layout.nodes().iter().position(|l| l.nid == n.nid);
        if let Some(slot) = index.and_then(|i| slots.get_mut(i)) {
            *slot = n.wall_ns;
        }
    }
}

/// A `phase` span per worker that claimed work.
pub fn record_spans(cx: &Ctx<'_>, report: &DeferredReport, phase: Phase) {
    for w in report
        .workers
        .iter()
        .filter(|w| w.finished && w.nr_claims > 0)
    {
        cx.facts
            .phase(phase, w.cpu, Some(w.nid), w.start_ns, w.end_ns);
    }
}
