//! The memory-init pipeline, in Linux's order, as host-tested library code.
//!
//! [`run`] calls the stages in data-path order, one `sN::run(cx, …)` each,
//! numbered in the order it calls them; every stage logs its own lines and
//! records its own facts, and times its boot-CPU phase through
//! [`context::Ctx::timed`]:
//!
//! | stage | module | from → to |
//! |---|---|---|
//! | 1 | [`s1_memblock`] | firmware map + SRAT + early reservations → `Memblock` |
//! | 2 | [`s2_zones`] | memblock → `ZoneLayout` (zones, present sections) |
//! | 3 | [`s3_vmemmap`] | present sections → node-local struct-page storage |
//! | 4 | [`s4_eager`] | the `memmap=` mode → struct pages the boot CPU initialises |
//! | 5 | [`s5_handoff`] | deferred ranges → worker plan; the buddy free lists, which `run` owns; eager free pages → the lists; deferred init set up as their client and growth source, and the `PageAllocator` the later stages allocate from |
//! | 6 | [`s6_deferred`] or [`s6_pool`] | workers on each node's CPUs initialise the rest, or it goes to the allocator untouched; memory is ready |
//! | 7 | [`s7_memory_blocks`] | memory-block devices (created on the boot CPU during 6) and Linux's `Memory:` line |
//! | 8 | [`s8_alloc_test`] | `alloc_test=`: timed allocations of orders 0/3/9/10 on every node |
//! | 9 | [`s9_pool`] | `ondemand_drain=on`'s drain; what the pool and growth came to |
//! | 10 | [`s10_verify`] | every initialised page, the pool, the lists and the counts checked |
//!
//! The other CPUs are started ([`seams::CpuBringup`]) where the mode
//! first needs them ([`mode::ModePlan::cpus`]): before stage 4 for the
//! worker modes, after stage 6 for a pool, so that until memory is ready
//! the boot CPU runs alone; stage 2's zone lines are printed there too
//! (first-run code memory init does not need).
//!
//! [`mode::ModePlan`] says what the `memmap=` mode does in each stage;
//! [`facts`] records what the summary line reports; [`fault_hooks`] is
//! where a `test_fault=` acts; [`error::PipelineError`]
//! is what any stage can fail with; [`seams`] is the hardware boundary. The
//! kernel binary supplies the seams for real hardware, the host tests
//! supply `std` threads and an `mmap` area.

pub mod context;
pub mod error;
pub mod facts;
pub mod fault_hooks;
#[cfg(feature = "host")]
pub mod host;
pub mod mode;
pub mod s10_verify;
pub mod s1_memblock;
pub mod s2_zones;
pub mod s3_vmemmap;
pub mod s4_eager;
pub mod s5_handoff;
pub mod s6_deferred;
pub mod s6_pool;
pub mod s7_memory_blocks;
pub mod s8_alloc_test;
pub mod s9_pool;
pub mod seams;

use deferred_init::PageAllocator;
use memmap::firmware::{FirmwareEntry, NodeAffinity};
use memmap::memblock::Memblock;
use memmap::page::{PageLayout, StructPage};
use memmap::page32::StructPage32;
use memmap::page_size::StructPageSize;
use memmap::zones::ZoneLayout;
use memmap::NodeId;

use crate::kernel_image::ImageSizes;
use context::Ctx;
use error::PipelineError;
use facts::Facts;
use fault_hooks::FaultHooks;
use memboot_contract::options::Options;
use mode::{Deferral, ModePlan, StartCpus};
use s1_memblock::EarlyReservation;
use seams::{Clock, CpuBringup, Executor, Log, VmemmapMapper};

/// What the pipeline starts from.
pub struct Input<'a> {
    pub opts: &'a Options,
    /// The firmware memory map.
    pub map: &'a [FirmwareEntry],
    /// SRAT memory affinity; `None` without SRAT (all memory is node 0).
    pub affinity: Option<&'a [NodeAffinity]>,
    pub phys_addr_bits: u32,
    /// CPUID's hypervisor bit (Linux sizes memory blocks by it).
    pub under_hypervisor: bool,
    pub reserve: &'a [EarlyReservation],
    /// The kernel image's parts, for Linux's `Memory:` line.
    pub image: ImageSizes,
}

/// The hardware the pipeline runs on.
pub struct Machine<'a, M> {
    pub mapper: &'a mut M,
    pub executor: &'a dyn Executor,
    /// Starts the executor's other CPUs, which may not run yet.
    pub bringup: &'a dyn CpuBringup<M>,
    pub clock: &'a dyn Clock,
    pub log: &'a dyn Log,
    /// `cpu_nodes[cpu]`: the node of each CPU of `executor`.
    pub cpu_nodes: &'a [NodeId],
}

/// Run the whole pipeline; `facts` holds what it measured, also on failure.
/// The boot CPU stops working alone: the other CPUs start (on the kernel,
/// after its held-back boot report), and the zones, held back with that
/// report, are printed.
fn start_cpus<M: VmemmapMapper>(
    cx: &Ctx<'_>,
    bringup: &dyn CpuBringup<M>,
    sections: &s3_vmemmap::SectionMapper<'_, M>,
    layout: &ZoneLayout,
    mb: &Memblock,
) {
    sections.lend_mapper(|mapper| bringup.start(mapper));
    s2_zones::log(cx.log, layout, mb, cx.opts.struct_page.bytes());
}

pub fn run<M: VmemmapMapper>(
    input: &Input<'_>,
    machine: Machine<'_, M>,
    facts: &Facts,
    faults: &FaultHooks,
) -> Result<(), PipelineError> {
    let cx = Ctx {
        opts: input.opts,
        mode: ModePlan::of(input.opts.memmap),
        executor: machine.executor,
        clock: machine.clock,
        log: machine.log,
        facts,
        faults,
        cpu_nodes: machine.cpu_nodes,
        under_hypervisor: input.under_hypervisor,
        image: input.image,
    };
    facts.record(|f| {
        f.strategy = input.opts.memmap.name();
        f.struct_page_bytes = input.opts.struct_page.bytes();
    });
    let mb = s1_memblock::run(&cx, input)?;
    let layout = s2_zones::run(&cx, &mb);
    match input.opts.struct_page {
        StructPageSize::Bytes64 => run_memmap::<M, StructPage>(&cx, machine, mb, &layout),
        StructPageSize::Bytes32 => run_memmap::<M, StructPage32>(&cx, machine, mb, &layout),
    }
}

/// Stages 3 to 10, over struct pages of layout `P` (`struct_page=`).
fn run_memmap<M: VmemmapMapper, P: PageLayout>(
    cx: &Ctx<'_>,
    machine: Machine<'_, M>,
    mut mb: Memblock,
    layout: &ZoneLayout,
) -> Result<(), PipelineError> {
    let facts = cx.facts;
    // Declared before the memmap, so it outlives the backing that maps
    // sections through it on first use.
    let sections = s3_vmemmap::SectionMapper::new(machine.mapper);
    let mut memmap = s3_vmemmap::run::<M, P>(cx, &mut mb, layout, &sections)?;
    if cx.mode.cpus == StartCpus::BeforeEager {
        start_cpus(cx, machine.bringup, &sections, layout, &mb);
    }
    let outcome = s4_eager::run(cx, &mut memmap, &mb, layout)?;
    let s5_handoff::Handoff { plan, buddy } = s5_handoff::run(cx, &memmap, &mb, &outcome, layout)?;
    let di = s5_handoff::deferred_init(cx, &memmap, &buddy, plan)?;
    let pages = PageAllocator::new(&buddy, di.growth());
    let blocks = match cx.mode.deferral {
        Deferral::Workers => s6_deferred::run(cx, &di, &mb, layout)?,
        Deferral::Pool => s6_pool::run(cx, &di, &memmap, &mb)?,
    };
    if cx.mode.cpus == StartCpus::WhenMemoryReady {
        start_cpus(cx, machine.bringup, &sections, layout, &mb);
    }
    s7_memory_blocks::run(cx, blocks, pages, &di, layout);
    s8_alloc_test::run(cx, pages, &di, layout)?;
    s9_pool::run(cx, &di, layout, &memmap, &sections)?;
    let verified = s10_verify::run(cx, pages, &memmap, &mb, layout, &di, &outcome);
    // What was written and mapped by the end, recorded once everything
    // that writes struct pages has run: on a lazy vmemmap, verification's
    // page scan maps the sections of the holes it reads, and so writes
    // their hole pages.
    let (backing, report) = (memmap.backing(), di.report());
    facts.record(|f| {
        f.hole_pages_on_first_use = backing.hole_pages_on_first_use();
        f.vmemmap_sections_mapped = backing.nr_populated();
        f.pages_initialised = f.pages_initialised(&report);
    });
    verified
}
