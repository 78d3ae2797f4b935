//! The memory-init pipeline, in Linux's order, as host-tested library code.
//!
//! The stage modules are numbered in data-path order:
//!
//! | stage | module | from → to |
//! |---|---|---|
//! | 1 | [`s1_memblock`] | firmware map + SRAT + early reservations → `Memblock` |
//! | 2 | [`s2_zones`] | memblock → `ZoneLayout` (zones, present sections) |
//! | 3 | [`s3_vmemmap`] | present sections → node-local struct-page storage |
//! | 4 | [`s4_eager`] | the `memmap=` mode → struct pages the boot CPU initialises |
//! | 5 | [`s5_handoff`] | deferred ranges → worker plan; eager free pages → buddy |
//! | 6 | [`s6_deferred`] | workers on each node's CPUs → the rest, freed into the buddy |
//! | 7 | [`s7_memory_blocks`] | memblock → memory-block devices (boot CPU, during 6) |
//! | 8 | [`s8_verify`] | every initialised page, the pool, the lists and the counts checked |
//! | 9 | [`s9_alloc_test`] | `alloc_test=`: timed allocations of orders 0/3/9/10 on every node |
//!
//! [`run`] strings them together over the hardware [`seams`]; [`facts`]
//! records what the summary line reports; [`error::PipelineError`] is what
//! any stage can fail with. The kernel binary supplies the seams for real
//! hardware, the host tests supply `std` threads and an `mmap` window.

pub mod error;
pub mod facts;
#[cfg(feature = "host")]
pub mod host;
pub mod s1_memblock;
pub mod s2_zones;
pub mod s3_vmemmap;
pub mod s4_eager;
pub mod s5_handoff;
pub mod s6_deferred;
pub mod s7_memory_blocks;
pub mod s8_verify;
pub mod s9_alloc_test;
pub mod seams;

use memmap::firmware::{FirmwareEntry, NodeAffinity};
use memmap::init::InitOutcome;
use memmap::memblock::Memblock;
use memmap::memory_block::MemoryBlocks;
use memmap::pageblock::PageblockMaps;
use memmap::store::{Memmap, WindowBacking};
use memmap::zones::ZoneLayout;
use memmap::NodeId;

use crate::kernel_image::ImageSizes;
use crate::options::{BlockSizeOption, Drain, Options, TestFault, Verify};
use deferred_init::{DeferredInit, DeferredReport, InitMode, PlanOptions};
use error::PipelineError;
use facts::{Facts, Phase, VerifyOutcome};
use s1_memblock::EarlyReservation;
use s4_eager::{Deferral, ModePlan};
use s6_deferred::BOOT_CPU;
use seams::{Clock, Executor, Log, VmemmapMapper};

/// What the pipeline starts from.
pub struct Input<'a> {
    pub opts: &'a Options,
    /// The firmware memory map.
    pub map: &'a [FirmwareEntry],
    /// SRAT memory affinity; `None` without SRAT (all memory is node 0).
    pub affinity: Option<&'a [NodeAffinity]>,
    pub phys_addr_bits: u32,
    pub reserve: &'a [EarlyReservation],
    /// The kernel image's parts, for Linux's `Memory:` line.
    pub image: ImageSizes,
}

/// The hardware the pipeline runs on.
pub struct Machine<'a, M> {
    pub mapper: &'a mut M,
    pub executor: &'a dyn Executor,
    pub clock: &'a dyn Clock,
    pub log: &'a dyn Log,
    /// `cpu_nodes[cpu]`: the node of each CPU of `executor`.
    pub cpu_nodes: &'a [NodeId],
}

/// Times boot-CPU phases and records them.
struct Timer<'a> {
    clock: &'a dyn Clock,
    facts: &'a Facts,
}

impl Timer<'_> {
    /// Run `f` as `phase` on the boot CPU; returns its result and duration.
    fn phase<R>(&self, phase: Phase, f: impl FnOnce() -> R) -> (R, u64) {
        let start = self.clock.now_ns();
        let r = f();
        let end = self.clock.now_ns();
        self.facts.phase(phase, BOOT_CPU, None, start, end);
        (r, end - start)
    }
}

/// What every stage after the eager init uses.
struct Ctx<'a> {
    opts: &'a Options,
    executor: &'a dyn Executor,
    clock: &'a dyn Clock,
    log: &'a dyn Log,
    facts: &'a Facts,
    mode: ModePlan,
    image: ImageSizes,
}

/// Run the whole pipeline; `facts` holds what it measured, also on failure.
pub fn run<M: VmemmapMapper>(
    input: &Input<'_>,
    machine: Machine<'_, M>,
    facts: &Facts,
) -> Result<(), PipelineError> {
    let cx = Ctx {
        opts: input.opts,
        executor: machine.executor,
        clock: machine.clock,
        log: machine.log,
        facts,
        mode: ModePlan::of(input.opts.memmap),
        image: input.image,
    };
    facts.record(|f| f.strategy = input.opts.memmap.name());
    let timer = Timer {
        clock: cx.clock,
        facts,
    };
    let (mut mb, layout) = memory_model(input, cx.log, &timer)?;
    let (memmap, outcome) = eager_init(&mut mb, &layout, machine.mapper, cx.opts, cx.log, &timer)?;
    let node_cpus = s5_handoff::node_cpus(&layout, machine.cpu_nodes);
    let plan_opts = PlanOptions {
        max_threads_per_node: cx.opts.threads_per_node.map(|n| n as usize),
        ..PlanOptions::default()
    };
    let di = s5_handoff::plan(
        &memmap,
        &mb,
        &outcome,
        &node_cpus,
        plan_opts,
        cx.mode.workers,
    )?;
    if cx.opts.test_fault == TestFault::DoubleInit {
        di.arm_double_init();
    }
    let (freed, buddy_eager_ns) = timer.phase(Phase::BuddyHandoff, || {
        s5_handoff::hand_off(&di, &mb, &outcome)
    });
    freed?;
    facts.record(|f| f.buddy_eager_ns = buddy_eager_ns);
    match cx.mode.deferral {
        Deferral::Workers => deferred_and_blocks(&di, &mb, &layout, &cx)?,
        Deferral::Pool => pool_and_blocks(&di, &mb, &layout, &cx)?,
    }
    after_boot(&di, &layout, &cx)?;
    verify_stage(&memmap, &mb, &layout, &di, &outcome, &cx)
}

/// Stage 8, if the mode and the options ask for it.
fn verify_stage(
    memmap: &Memmap<WindowBacking>,
    mb: &Memblock,
    layout: &ZoneLayout,
    di: &DeferredInit<'_, WindowBacking>,
    outcome: &InitOutcome,
    cx: &Ctx<'_>,
) -> Result<(), PipelineError> {
    if !cx.mode.verifiable || cx.opts.verify == Verify::Off {
        let why = if cx.mode.verifiable {
            "verify=off"
        } else {
            "memmap=touch writes no Linux state"
        };
        cx.log.line(format_args!("verify: off ({why})"));
        cx.facts.record(|f| f.verify = VerifyOutcome::Off);
        return Ok(());
    }
    s8_verify::apply_fault(
        cx.opts.test_fault,
        cx.mode.deferral == Deferral::Pool,
        memmap,
        mb,
        &outcome.eager,
        di,
        cx.log,
    )
    .map_err(PipelineError::TestFault)?;
    let timer = Timer {
        clock: cx.clock,
        facts: cx.facts,
    };
    let (verdict, verify_ns) = timer.phase(Phase::Verify, || {
        s8_verify::check_eager(outcome)?;
        s8_verify::verify(cx.executor, memmap, mb, layout, di, cx.log)
    });
    cx.facts.record(|f| {
        f.verify = if verdict.is_ok() {
            VerifyOutcome::Ok
        } else {
            VerifyOutcome::Failed
        };
        f.verify_ns = verify_ns;
    });
    let checked = verdict.map_err(PipelineError::Verify)?;
    s8_verify::log_ok(cx.log, &checked, verify_ns);
    Ok(())
}

/// Stages 1 and 2: memblock and the zones.
fn memory_model(
    input: &Input<'_>,
    log: &dyn Log,
    timer: &Timer<'_>,
) -> Result<(Memblock, ZoneLayout), PipelineError> {
    let (built, memblock_ns) = timer.phase(Phase::Memblock, || {
        s1_memblock::build(
            input.map,
            input.affinity,
            input.phys_addr_bits,
            input.reserve,
        )
    });
    let (mb, report) = built.map_err(PipelineError::Memblock)?;
    s1_memblock::log(log, &mb, &report, memblock_ns);
    timer.facts.record(|f| f.memblock_ns = memblock_ns);
    let (layout, _) = timer.phase(Phase::Zones, || s2_zones::layout(&mb, log));
    timer.facts.record(|f| {
        f.present_pages = layout.present_pages();
        f.low_zone_pages = layout.low_zone_pages();
        f.nr_nodes = layout.nodes().len().min(f.node_deferred_ns.len());
    });
    Ok((mb, layout))
}

/// Stages 3 and 4: struct-page storage and the boot CPU's share of init.
fn eager_init<M: VmemmapMapper>(
    mb: &mut Memblock,
    layout: &ZoneLayout,
    mapper: &mut M,
    opts: &Options,
    log: &dyn Log,
    timer: &Timer<'_>,
) -> Result<(Memmap<WindowBacking>, InitOutcome), PipelineError> {
    let (mapped, vmemmap_ns) = timer.phase(Phase::Vmemmap, || s3_vmemmap::populate(mb, mapper));
    let (backing, vstats) = mapped.map_err(PipelineError::Vmemmap)?;
    s3_vmemmap::log(log, &vstats, vmemmap_ns);
    timer.facts.record(|f| {
        f.vmemmap_ns = vmemmap_ns;
        f.vmemmap_bytes = vstats.bytes;
    });
    let mut memmap = Memmap::new(backing);
    let pageblocks = PageblockMaps::new(layout);
    let (outcome, memmap_boot_ns) = timer.phase(Phase::EagerMemmap, || {
        s4_eager::init(
            ModePlan::of(opts.memmap).eager,
            &mut memmap,
            mb,
            layout,
            &pageblocks,
        )
    });
    let outcome = outcome.map_err(PipelineError::Memmap)?;
    let s = outcome.stats;
    s4_eager::log(log, opts.memmap, &s, memmap_boot_ns);
    timer.facts.record(|f| {
        f.eager_pages = s.eager_pages;
        f.deferred_pages = s.deferred_pages;
        f.reserved_pages = s.reserved_pages;
        f.hole_pages = s.hole_pages;
        f.memmap_boot_ns = memmap_boot_ns;
    });
    Ok((memmap, outcome))
}

/// Memory blocks as created on the boot CPU, with their timing.
type CreatedBlocks = Result<(MemoryBlocks, u64, u64), PipelineError>;

/// Create the memory blocks now; returns them with start and end times.
fn create_blocks(mb: &Memblock, size: BlockSizeOption, clock: &dyn Clock) -> CreatedBlocks {
    let start = clock.now_ns();
    let blocks = s7_memory_blocks::create(mb, size).map_err(PipelineError::MemoryBlock)?;
    Ok((blocks, start, clock.now_ns()))
}

/// Stages 6 and 7: deferred init on every node's CPUs while the boot CPU
/// creates the memory blocks.
fn deferred_and_blocks(
    di: &DeferredInit<'_, WindowBacking>,
    mb: &Memblock,
    layout: &ZoneLayout,
    cx: &Ctx<'_>,
) -> Result<(), PipelineError> {
    cx.log.line(format_args!(
        "deferred: {} pages on {} nodes, {} workers on {} CPUs",
        di.plan().nr_pages(),
        di.plan().nodes().len(),
        di.plan().workers().len(),
        cx.executor.nr_cpus()
    ));
    let created: spin::Mutex<Option<CreatedBlocks>> = spin::Mutex::new(None);
    let (size, clock) = (cx.opts.memory_block_size, cx.clock);
    let make_blocks = || *created.lock() = Some(create_blocks(mb, size, clock));
    let report = s6_deferred::run(di, cx.executor, cx.clock, &make_blocks)?;
    // The boot CPU is back from its wait for the workers: memory init no
    // longer blocks the boot (Linux: page_alloc_init_late() returns).
    let joined_ns = cx.clock.now_ns();
    s6_deferred::log(cx.log, &report);
    let node_index = |nid| layout.nodes().iter().position(|n| n.nid == nid);
    s6_deferred::record(cx.facts, &report, node_index);
    if cx.mode.workers == InitMode::InitAndFree {
        memory_ready(cx.facts, joined_ns, &report);
    }
    let blocks = created
        .into_inner()
        .expect("the boot CPU's job created the memory blocks")?;
    finish_blocks(blocks, di, layout, cx);
    Ok(())
}

/// Stages 6 and 7 for `ondemand`: the deferred memory stays in the pool,
/// all of it reachable by the allocator already; the boot CPU creates the
/// memory blocks.
fn pool_and_blocks(
    di: &DeferredInit<'_, WindowBacking>,
    mb: &Memblock,
    layout: &ZoneLayout,
    cx: &Ctx<'_>,
) -> Result<(), PipelineError> {
    let now = cx.clock.now_ns();
    memory_ready(cx.facts, now, &di.report());
    let windows: u64 = di.report().nodes.iter().map(|n| n.nr_windows).sum();
    cx.log.line(format_args!(
        "ondemand: {} pages in {} block windows of {} nodes handed to the allocator untouched; every page allocatable at {} us",
        di.pool_pages(),
        windows,
        di.plan().nodes().len(),
        now / 1000
    ));
    let blocks = create_blocks(mb, cx.opts.memory_block_size, cx.clock)?;
    finish_blocks(blocks, di, layout, cx);
    Ok(())
}

/// Struct pages written so far: the boot CPU's (eager pages and the hole
/// pages it initialised as reserved) and those of workers and growth.
fn pages_initialised(f: &facts::MmFacts, report: &DeferredReport) -> u64 {
    let after_boot_cpu: u64 = report
        .nodes
        .iter()
        .map(|n| n.nr_worker_pages + n.nr_grown_pages)
        .sum();
    f.eager_pages + f.hole_pages + after_boot_cpu
}

/// Memory is ready at `now_ns` (the definition: `MmFacts::allocatable_ns`).
fn memory_ready(facts: &Facts, now_ns: u64, report: &DeferredReport) {
    facts.record(|f| {
        f.allocatable_ns = now_ns;
        f.pages_initialised_at_allocatable = pages_initialised(f, report);
    });
}

/// Log and record the memory blocks and what the allocator holds.
fn finish_blocks(
    (blocks, start, end): (MemoryBlocks, u64, u64),
    di: &DeferredInit<'_, WindowBacking>,
    layout: &ZoneLayout,
    cx: &Ctx<'_>,
) {
    cx.facts
        .phase(Phase::MemoryBlocks, BOOT_CPU, None, start, end);
    s7_memory_blocks::log(cx.log, &blocks, end - start);
    let free_pages = di.buddy().nr_free_pages_total();
    let pool_free: u64 = di
        .pool_pieces()
        .filter(|p| !p.piece.reserved)
        .map(|p| p.piece.pfns.nr_pages())
        .sum();
    let present_pages = layout.present_pages();
    let available = free_pages + pool_free;
    // Linux's line byte for byte (mm/page_alloc.c mem_init_print_info():
    // free/physical pages, the image's parts, then physical − managed).
    let kib = |bytes: u64| bytes >> 10;
    cx.log.line(format_args!(
        "Memory: {}K/{}K available ({}K kernel code, {}K rwdata, {}K rodata, 0K init, {}K bss, {}K reserved, 0K cma-reserved)",
        available * 4,
        present_pages * 4,
        kib(cx.image.code_bytes),
        kib(cx.image.rwdata_bytes),
        kib(cx.image.rodata_bytes),
        kib(cx.image.bss_bytes),
        (present_pages - available.min(present_pages)) * 4
    ));
    cx.facts.record(|f| {
        f.memory_block_ns = end - start;
        f.memory_block_size = blocks.block_size().bytes();
        f.nr_memory_blocks = blocks.len() as u64;
        f.free_pages = free_pages;
    });
}

/// After every page is allocatable: the allocation test and, with
/// `ondemand_drain=on`, draining the rest of the pool; then the final
/// pool and growth figures.
fn after_boot(
    di: &DeferredInit<'_, WindowBacking>,
    layout: &ZoneLayout,
    cx: &Ctx<'_>,
) -> Result<(), PipelineError> {
    let drain = cx.mode.deferral == Deferral::Pool && cx.opts.ondemand_drain == Drain::On;
    if cx.opts.alloc_test_bytes > 0 && cx.mode.workers == InitMode::InitAndFree {
        let report = s9_alloc_test::run(
            di,
            layout,
            cx.executor,
            cx.clock,
            cx.opts.alloc_test_bytes,
            drain,
            cx.facts,
        );
        s9_alloc_test::log(cx.log, &report, cx.executor.nr_cpus(), drain);
        cx.facts.record(|f| f.alloc_test = report);
    }
    if drain {
        let report = s6_deferred::run(di, cx.executor, cx.clock, &|| {})?;
        let node_index = |nid| layout.nodes().iter().position(|n| n.nid == nid);
        s6_deferred::record_drain(cx.facts, &report, node_index);
        cx.log.line(format_args!(
            "ondemand: drain workers initialised {} pages in {} ms",
            report.workers.iter().map(|w| w.nr_pages).sum::<u64>(),
            report.total_wall_ns / 1_000_000
        ));
    }
    let report = di.report();
    let grown_pages: u64 = report.nodes.iter().map(|n| n.nr_grown_pages).sum();
    let grown_windows: u64 = report.nodes.iter().map(|n| n.nr_grown_windows).sum();
    let pool_pages = di.pool_pages();
    cx.facts.record(|f| {
        f.grown_pages = grown_pages;
        f.pool_pages = pool_pages;
        f.pages_initialised = pages_initialised(f, &report);
        f.drained_pages = if drain {
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
