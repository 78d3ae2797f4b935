//! The memory-init pipeline, in Linux's order, as host-tested library code.
//!
//! [`run`] calls one `module::run(cx, …)` per step, in data-path order
//! (as Linux's `mm_core_init()` reads); every step logs its own lines and
//! records its own facts, and times its boot-CPU phase through
//! [`context::Ctx::timed`]:
//!
//! | module | from → to |
//! |---|---|
//! | [`memblock`] | firmware map + SRAT + early reservations → `Memblock` |
//! | [`hugetlb::reserve`] | `hugepagesz=1G hugepages=N` → 1 GiB pages reserved no-init in memblock, and memboot's record of them; the 2 MiB pages asked for |
//! | [`zones`] | memblock → `ZoneLayout` (zones, present sections) |
//! | [`vmemmap`] | present sections → node-local struct-page storage |
//! | [`eager_memmap`] | the `memmap=` mode → struct pages the boot CPU initialises |
//! | [`buddy_handoff`] | deferred ranges → worker plan; the buddy free lists, which `run` owns; eager free pages → the lists; deferred init set up as their client and growth source, and the `PageAllocator` the later steps allocate from |
//! | [`deferred_workers`] or [`ondemand_pool`] | workers on each node's CPUs initialise the rest, or it goes to the allocator untouched; memory is ready. Either has the boot CPU create the memory blocks meanwhile ([`memory_blocks::create_timed`]) |
//! | [`memory_blocks`] | the memory-block devices reported, and Linux's `Memory:` line |
//! | [`hugetlb::run`] | the 1 GiB pages' struct pages written as compound pages, the 2 MiB pages taken from the allocator and written so (timed phase `hugetlb`) |
//! | [`hvo_2m`] | `hugetlb_free_vmemmap=on`: the 2 MiB pages' vmemmap remapped onto a kept page each, the rest freed to the allocator |
//! | [`alloc_workload`] | `alloc_test=`: timed allocations of orders 0/3/9/10 on every node |
//! | [`pool_after_boot`] | `ondemand_drain=on`'s drain; what the pool and growth came to |
//! | [`vmemmap::report_first_use`] | how much of the vmemmap first use mapped (`ondemand`) |
//! | [`verify`] | every initialised page, the pool, the lists and the counts checked |
//!
//! The other CPUs are started ([`seams::CpuBringup`]) where the mode
//! first needs them ([`mode::ModePlan::cpus`]): before the eager memmap for
//! the worker modes (and waited for before the workers), once memory is
//! ready for a pool, so that until then the boot CPU runs alone; the zone lines ([`zones::log`]) are printed
//! there, with the kernel's held-back boot report (first-run code memory
//! init does not need), or right after the zones with `console=direct`.
//!
//! [`mode::ModePlan`] says what the `memmap=` mode does in each step;
//! [`facts`] records what the summary line reports; [`fault_hooks`] is
//! where a `test_fault=` acts; [`error::PipelineError`] is what any step
//! can fail with; [`seams`] is the hardware boundary. The kernel binary
//! supplies the seams for real hardware, the host tests supply `std`
//! threads and an `mmap` area.

pub mod alloc_workload;
pub mod buddy_handoff;
pub mod context;
pub mod deferred_workers;
pub mod eager_memmap;
pub mod error;
pub mod facts;
pub mod fault_hooks;
#[cfg(feature = "host")]
pub mod host_seams;
pub mod hugetlb;
pub mod hvo_2m;
pub mod input;
pub mod memblock;
pub mod memory_blocks;
pub mod mode;
pub mod ondemand_pool;
pub mod pool_after_boot;
pub mod seams;
pub mod verify;
pub mod vmemmap;
pub mod zones;

use deferred_init::hugetlb_pool::{HugeCheck, PoolHvo};
use deferred_init::{DeferredInit, PageAllocator, PerCpuPages};
use memboot_contract::option_values::StructPageSize;
use memmap::memblock::Memblock;
use memmap::page::{PageLayout, StructPage};
use memmap::page32::StructPage32;
use memmap::page8::StructPage8;
use memmap::store::{Memmap, VmemmapBacking};
use memmap::zones::ZoneLayout;
use memmap::NodeId;

use context::Ctx;
use error::PipelineError;
use facts::Facts;
use fault_hooks::FaultHooks;
use input::Input;
use memboot_contract::options::Console;
use mode::{Deferral, ModePlan, StartCpus};
use seams::{Clock, CpuBringup, Executor, Log, VmemmapMapper};

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
pub fn run<M: VmemmapMapper>(
    input: &Input<'_>,
    machine: Machine<'_, M>,
    facts: &Facts,
    faults: &FaultHooks,
) -> Result<(), PipelineError> {
    let cx = context(input, &machine, facts, faults);
    let mut mb = memblock::run(&cx, input)?;
    let huge = hugetlb::reserve(&cx, input, &mut mb)?;
    let huge = &huge;
    let layout = zones::run(&cx, &mb);
    if cx.opts.console == Console::Direct {
        // Seeing how far a boot got matters more here than first-run cost.
        zones::log(cx.log, &layout, &mb, cx.opts.struct_page.bytes());
    }
    match input.opts.struct_page {
        StructPageSize::Bytes64 => run_memmap::<M, StructPage>(&cx, machine, mb, &layout, huge),
        StructPageSize::Bytes32 => run_memmap::<M, StructPage32>(&cx, machine, mb, &layout, huge),
        StructPageSize::Bytes8 => run_memmap::<M, StructPage8>(&cx, machine, mb, &layout, huge),
    }
}

/// The rest of the pipeline, over struct pages of layout `P` (`struct_page=`).
fn run_memmap<M: VmemmapMapper, P: PageLayout>(
    cx: &Ctx<'_>,
    machine: Machine<'_, M>,
    mut mb: Memblock,
    layout: &ZoneLayout,
    huge: &hugetlb::Huge,
) -> Result<(), PipelineError> {
    // Declared before the memmap, so it outlives the backing that maps
    // sections through it on first use.
    let sections = vmemmap::SectionMapper::new(machine.mapper);
    let hvo = hugetlb::hvo_frames(cx, &mut mb, huge, P::BYTES)?;
    let mut memmap = vmemmap::run::<M, P>(cx, &mut mb, layout, &sections, &hvo)?;
    let start = |when| start_cpus(cx, when, machine.bringup, &sections, layout, &mb);
    let online = |when| wait_for_cpus(cx, when, machine.bringup);
    start(StartCpus::BeforeEager)?;
    let outcome = eager_memmap::run(cx, &mut memmap, &mb, layout)?;
    let buddy_handoff::Handoff { plan, buddy } =
        buddy_handoff::run(cx, &memmap, &mb, &outcome, layout)?;
    let di = buddy_handoff::deferred_init(cx, &memmap, &buddy, plan)?;
    let caches = PerCpuPages::new(cx.executor.nr_cpus());
    let pages = PageAllocator::new(&buddy, di.growth()).with_cpu_caches(&caches);
    if !di.plan().workers().is_empty() {
        // The workers run as jobs on every CPU. Without any (`regions`,
        // `perpfn`) the APs stay unwaited, and idle, until memory is ready.
        online(StartCpus::BeforeEager)?;
    }
    let blocks = match cx.mode.deferral {
        Deferral::Workers => deferred_workers::run(cx, &di, &mb, layout)?,
        Deferral::Pool => ondemand_pool::run(cx, &di, &memmap, &mb)?,
    };
    start(StartCpus::WhenMemoryReady)?;
    online(StartCpus::WhenMemoryReady)?;
    memory_blocks::run(cx, blocks, pages, &di, layout);
    let huge_2m = hugetlb::run(cx, &memmap, pages, huge, layout, &hvo)?;
    let pool = huge_2m.as_ref();
    let hvo_2m = hvo_2m::run(
        cx, &sections, &memmap, &di, pages, &mut mb, layout, pool, huge.hvo,
    )?;
    let first_hvo = hvo.first().map(|h| h.huge.pfn);
    cx.faults
        .after_hugetlb(cx.log, &memmap, first_hvo.or(hvo_2m.heads.first().copied()));
    alloc_workload::run(cx, pages, &di, layout)?;
    pool_after_boot::run(cx, &di, layout)?;
    vmemmap::report_first_use(cx, &memmap, &sections)?;
    let kept = memmap::hugetlb::hvo::kept_struct_pages(P::BYTES);
    let huge_check = HugeCheck {
        pool: huge_2m.as_ref(),
        hvo_kept_struct_pages: (!hvo.is_empty()).then_some(kept),
        pool_hvo: (!hvo_2m.heads.is_empty()).then_some(PoolHvo {
            kept_struct_pages: kept,
            tables: &hvo_2m.tables,
        }),
    };
    let verified = verify::run(cx, pages, &memmap, &mb, layout, &di, &outcome, huge_check);
    // After everything that writes struct pages: on a lazy vmemmap,
    // verification's page scan maps the sections of the holes it reads,
    // and so writes their hole pages.
    record_written(cx, &memmap, &di);
    verified
}

/// The context every step is given; the options' facts recorded.
fn context<'a, M>(
    input: &Input<'a>,
    machine: &Machine<'a, M>,
    facts: &'a Facts,
    faults: &'a FaultHooks,
) -> Ctx<'a> {
    facts.record(|f| {
        f.strategy = input.opts.memmap.name().into();
        f.struct_page_bytes = input.opts.struct_page.bytes();
    });
    Ctx {
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
    }
}

/// If the mode starts the other CPUs `when`, the boot CPU stops working
/// alone: they start (on the kernel, after its held-back boot report),
/// and the zones, held back with that report, are printed (already out
/// with `console=direct`).
fn start_cpus<M: VmemmapMapper>(
    cx: &Ctx<'_>,
    when: StartCpus,
    bringup: &dyn CpuBringup<M>,
    sections: &vmemmap::SectionMapper<'_, M>,
    layout: &ZoneLayout,
    mb: &Memblock,
) -> Result<(), PipelineError> {
    if cx.mode.cpus != when {
        return Ok(());
    }
    sections
        .lend_mapper(|mapper| bringup.start(mapper))
        .map_err(PipelineError::Smp)?;
    if cx.opts.console == Console::Buffered {
        zones::log(cx.log, layout, mb, cx.opts.struct_page.bytes());
    }
    Ok(())
}

/// If the mode started the other CPUs `when`, wait for them: the next step
/// runs jobs on every CPU.
fn wait_for_cpus<M>(
    cx: &Ctx<'_>,
    when: StartCpus,
    bringup: &dyn CpuBringup<M>,
) -> Result<(), PipelineError> {
    if cx.mode.cpus != when {
        return Ok(());
    }
    bringup.wait_online().map_err(PipelineError::Smp)
}

/// What was written and mapped by the end of the pipeline.
fn record_written<P: PageLayout>(
    cx: &Ctx<'_>,
    memmap: &Memmap<VmemmapBacking<P>>,
    di: &DeferredInit<'_, VmemmapBacking<P>>,
) {
    let (backing, report) = (memmap.backing(), di.report());
    cx.facts.record(|f| {
        f.hole_pages_on_first_use = backing.hole_pages_on_first_use();
        f.vmemmap_sections_mapped = backing.nr_populated();
        f.pages_initialised = f.pages_initialised(&report);
    });
}
