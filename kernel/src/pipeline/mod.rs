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
//! | 8 | [`s8_verify`] | every page, the lists and the counts checked |
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
pub mod seams;

use memmap::firmware::{FirmwareEntry, NodeAffinity};
use memmap::init::InitOutcome;
use memmap::memblock::Memblock;
use memmap::memory_block::MemoryBlocks;
use memmap::pageblock::PageblockMaps;
use memmap::store::{Memmap, WindowBacking};
use memmap::zones::ZoneLayout;
use memmap::NodeId;

use crate::options::{Options, TestFault, Verify};
use deferred_init::{DeferredInit, PlanOptions};
use error::PipelineError;
use facts::{Facts, Phase, VerifyOutcome};
use s1_memblock::EarlyReservation;
use s4_eager::ModePlan;
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

/// Run the whole pipeline; `facts` holds what it measured, also on failure.
pub fn run<M: VmemmapMapper>(
    input: &Input<'_>,
    machine: Machine<'_, M>,
    facts: &Facts,
) -> Result<(), PipelineError> {
    let mode = ModePlan::of(input.opts.memmap);
    facts.record(|f| f.strategy = input.opts.memmap.name());
    let timer = Timer {
        clock: machine.clock,
        facts,
    };
    let log = machine.log;
    let (mut mb, layout) = memory_model(input, log, &timer)?;
    let (memmap, outcome) = eager_init(&mut mb, &layout, machine.mapper, input.opts, log, &timer)?;
    let node_cpus = s5_handoff::node_cpus(&layout, machine.cpu_nodes);
    let plan_opts = PlanOptions {
        max_threads_per_node: input.opts.threads_per_node.map(|n| n as usize),
        ..PlanOptions::default()
    };
    let di = s5_handoff::plan(&memmap, &mb, &outcome, &node_cpus, plan_opts, mode.workers)?;
    let (freed, buddy_eager_ns) = timer.phase(Phase::BuddyHandoff, || {
        s5_handoff::hand_off(&di, &mb, &outcome)
    });
    freed?;
    facts.record(|f| f.buddy_eager_ns = buddy_eager_ns);
    deferred_and_blocks(&di, &mb, &layout, &machine, input.opts, facts)?;
    if !mode.verifiable || input.opts.verify == Verify::Off {
        let why = if mode.verifiable {
            "verify=off"
        } else {
            "memmap=touch writes no Linux state"
        };
        log.line(format_args!("verify: off ({why})"));
        facts.record(|f| f.verify = VerifyOutcome::Off);
        return Ok(());
    }
    if input.opts.test_fault == TestFault::CorruptPage {
        s8_verify::corrupt_one_free_page(&memmap, &mb, log);
    }
    let (verdict, verify_ns) = timer.phase(Phase::Verify, || {
        s8_verify::verify(machine.executor, &memmap, &mb, &layout, &di, log)
    });
    facts.record(|f| {
        f.verify = if verdict.is_ok() {
            VerifyOutcome::Ok
        } else {
            VerifyOutcome::Failed
        };
        f.verify_ns = verify_ns;
    });
    verdict.map_err(PipelineError::Verify)?;
    log.line(format_args!(
        "verify: ok: every present page, the counts and the buddy lists checked in {} ms",
        verify_ns / 1_000_000
    ));
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

/// Stages 6 and 7: deferred init on every node's CPUs while the boot CPU
/// creates the memory blocks.
fn deferred_and_blocks<M>(
    di: &DeferredInit<'_, WindowBacking>,
    mb: &Memblock,
    layout: &ZoneLayout,
    machine: &Machine<'_, M>,
    opts: &Options,
    facts: &Facts,
) -> Result<(), PipelineError> {
    let (clock, log) = (machine.clock, machine.log);
    log.line(format_args!(
        "deferred: {} pages on {} nodes, {} workers on {} CPUs",
        di.plan().nr_pages(),
        di.plan().nodes().len(),
        di.plan().workers().len(),
        machine.executor.nr_cpus()
    ));
    let created: spin::Mutex<Option<CreatedBlocks>> = spin::Mutex::new(None);
    let make_blocks = || {
        let start = clock.now_ns();
        let blocks = s7_memory_blocks::create(mb, opts.memory_block_size)
            .map_err(PipelineError::MemoryBlock);
        *created.lock() = Some(blocks.map(|b| (b, start, clock.now_ns())));
    };
    let report = s6_deferred::run(di, machine.executor, clock, &make_blocks)?;
    s6_deferred::log(log, &report);
    let node_index = |nid| layout.nodes().iter().position(|n| n.nid == nid);
    s6_deferred::record(facts, &report, node_index);
    let (blocks, start, end) = created
        .into_inner()
        .expect("the boot CPU's job created the memory blocks")?;
    facts.phase(Phase::MemoryBlocks, BOOT_CPU, None, start, end);
    s7_memory_blocks::log(log, &blocks, end - start);
    let free_pages = di.buddy().nr_free_pages_total();
    let present_pages = layout.present_pages();
    log.line(format_args!(
        "Memory: {}K/{}K available ({}K reserved)",
        free_pages * 4,
        present_pages * 4,
        (present_pages - free_pages.min(present_pages)) * 4
    ));
    facts.record(|f| {
        f.memory_block_ns = end - start;
        f.memory_block_size = blocks.block_size().bytes();
        f.nr_memory_blocks = blocks.len() as u64;
        f.free_pages = free_pages;
    });
    Ok(())
}
