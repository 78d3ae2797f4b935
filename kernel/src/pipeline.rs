//! The memory-init pipeline, in Linux's order:
//!
//! 1. memblock from the firmware map and SRAT (`memblock_ns`);
//! 2. zones, printed like `free_area_init`;
//! 3. vmemmap: every present section's struct pages on its own node;
//! 4. eager memmap init on the boot CPU (`memmap_boot_ns`): the strategy the
//!    `memmap=` option picks; with `deferred`, low zones and the first
//!    section of each node only;
//! 5. the boot CPU hands its free pages to the buddy allocator;
//! 6. deferred init on every node's CPUs (`deferred_ns`), freeing into the
//!    buddy lists, while the boot CPU creates the memory-block devices
//!    (`memory_block_ns`) and then waits, like `page_alloc_init_late`;
//! 7. verification of every present PFN, the counts and the buddy lists.
//!
//! All logic is in the `memmap` and `deferred-init` crates; this file wires
//! it to the hardware (vmemmap mapping in `mm`, CPUs in `smp`, the TSC).

use alloc::vec::Vec;

use deferred_init::{
    Clock, DeferredInit, DeferredReport, Executor, InitMode, ManagedRange, NodeCpus, PlanOptions,
    WorkerAssignment,
};
use memboot_kernel::acpi::AcpiInfo;
use memboot_kernel::options::{BlockSizeOption, MemmapMode, Options, TestFault, Verify};
use memmap::firmware::NodeAffinity;
use memmap::init::{init_memmap, plan_deferred, Strategy};
use memmap::memblock::Memblock;
use memmap::memory_block::{probe_memory_block_size, MemoryBlockSize, MemoryBlocks};
use memmap::page::StructPage;
use memmap::pageblock::PageblockMaps;
use memmap::store::Memmap;
use memmap::zones::ZoneLayout;
use memmap::{DeferredRange, NodeId, PfnRange, ZoneType};

use crate::mm::{self, VmemmapBacking};
use crate::{smp, tsc};

/// Most nodes the summary reports per-node times for (the flags word holds 6 node bits).
pub const MAX_NODES: usize = 64;

/// What the pipeline measured, for the summary line.
#[derive(Clone, Copy)]
pub struct MmFacts {
    pub ran: bool,
    pub strategy: &'static str,
    pub present_pages: u64,
    pub eager_pages: u64,
    /// Present pages of every zone below its node's highest zone: what
    /// `deferred` must initialise eagerly whatever the RAM size.
    pub low_zone_pages: u64,
    pub deferred_pages: u64,
    pub reserved_pages: u64,
    pub hole_pages: u64,
    pub memmap_boot_ns: u64,
    pub buddy_eager_ns: u64,
    pub deferred_ns: u64,
    pub nr_nodes: usize,
    pub node_deferred_ns: [u64; MAX_NODES],
    pub memblock_ns: u64,
    pub vmemmap_ns: u64,
    pub vmemmap_bytes: u64,
    pub memory_block_ns: u64,
    pub memory_block_size: u64,
    pub nr_memory_blocks: u64,
    pub free_pages: u64,
    pub deferred_workers: u64,
    pub grown_pages: u64,
    pub verify: &'static str,
    pub verify_ns: u64,
}

impl MmFacts {
    pub const EMPTY: MmFacts = MmFacts {
        ran: false,
        strategy: "none",
        present_pages: 0,
        eager_pages: 0,
        low_zone_pages: 0,
        deferred_pages: 0,
        reserved_pages: 0,
        hole_pages: 0,
        memmap_boot_ns: 0,
        buddy_eager_ns: 0,
        deferred_ns: 0,
        nr_nodes: 0,
        node_deferred_ns: [0; MAX_NODES],
        memblock_ns: 0,
        vmemmap_ns: 0,
        vmemmap_bytes: 0,
        memory_block_ns: 0,
        memory_block_size: 0,
        nr_memory_blocks: 0,
        free_pages: 0,
        deferred_workers: 0,
        grown_pages: 0,
        verify: "none",
        verify_ns: 0,
    };
}

pub static MM_FACTS: spin::Mutex<MmFacts> = spin::Mutex::new(MmFacts::EMPTY);

fn record(f: impl FnOnce(&mut MmFacts)) {
    f(&mut MM_FACTS.lock());
}

/// Run `work` on the CPU that a timing should not include, return ns.
fn timed<R>(work: impl FnOnce() -> R) -> (R, u64) {
    let t0 = tsc::ns_since_entry();
    let r = work();
    (r, tsc::ns_since_entry() - t0)
}

/// Deferred-init workers on memboot's CPUs: one job per CPU running that
/// CPU's workers in turn, so no dispatch waits on a busy AP; the boot CPU
/// runs `while_waiting` (memory-block creation) after dispatching and before
/// its own share, as Linux's boot CPU goes on booting while pgdatinit
/// threads run.
struct SmpExecutor<'a> {
    while_waiting: &'a (dyn Fn() + Sync),
}

impl Executor for SmpExecutor<'_> {
    fn run(&self, workers: &[WorkerAssignment], work: &(dyn Fn(usize) + Sync)) {
        let nr_cpus = smp::cpu_count();
        let per_cpu: Vec<Vec<usize>> = (0..nr_cpus)
            .map(|cpu| {
                (0..workers.len())
                    .filter(|&w| workers[w].cpu as usize == cpu)
                    .collect()
            })
            .collect();
        let jobs: Vec<_> = per_cpu
            .iter()
            .map(|mine| {
                move |_: smp::CpuInfo| {
                    for &w in mine {
                        work(w);
                    }
                }
            })
            .collect();
        smp::scope(|s| {
            for (cpu, job) in jobs.iter().enumerate() {
                if !per_cpu[cpu].is_empty() {
                    s.spawn_on(cpu, job);
                }
            }
            (self.while_waiting)();
        });
    }
}

/// A pipeline failure: the status name for the summary and what to print.
pub struct Failure {
    pub status: &'static str,
    pub message: alloc::string::String,
}

fn fail<E: core::fmt::Display>(status: &'static str) -> impl FnOnce(E) -> Failure {
    move |e| Failure {
        status,
        message: alloc::format!("{e}"),
    }
}

/// Memory ranges split at zone boundaries, minus the deferred ranges: what
/// the boot CPU initialised and must hand to the buddy allocator.
fn eager_managed(mb: &Memblock, deferred: &[DeferredRange]) -> Vec<ManagedRange> {
    let mut out = Vec::new();
    for (range, nid) in mb.mem_pfn_ranges(None) {
        for zone in ZoneType::ALL {
            let Some(piece) = range.intersect(&zone.pfn_limit()) else {
                continue;
            };
            // Subtract the (few, sorted per node) deferred ranges.
            let mut start = piece.start;
            let mut cuts: Vec<PfnRange> = deferred
                .iter()
                .filter_map(|d| d.pfns.intersect(&piece))
                .collect();
            cuts.sort_unstable();
            for cut in cuts {
                if cut.start > start {
                    out.push(ManagedRange {
                        nid,
                        zone,
                        pfns: PfnRange::new(start, cut.start),
                    });
                }
                start = start.max(cut.end);
            }
            if start < piece.end {
                out.push(ManagedRange {
                    nid,
                    zone,
                    pfns: PfnRange::new(start, piece.end),
                });
            }
        }
    }
    out
}

/// CPUs of each node with memory, from the CPUs that came online.
fn node_cpus(node_ids: &[NodeId]) -> Vec<NodeCpus> {
    node_ids
        .iter()
        .map(|&nid| NodeCpus {
            nid,
            cpus: smp::online_cpus()
                .iter()
                .filter(|c| c.node == nid)
                .map(|c| c.index as u32)
                .collect(),
        })
        .collect()
}

fn print_lines(lines: Vec<alloc::string::String>) {
    for line in lines {
        kprintln!("{line}");
    }
}

/// The whole pipeline. `reserve` lists early reservations (heap, low 1 MiB).
pub fn run(
    opts: &Options,
    acpi: &AcpiInfo,
    regions: &[bootloader_api::info::MemoryRegion],
    phys_offset: u64,
    reserve: &[(u64, u64, &'static str)],
) -> Result<(), Failure> {
    let mode = opts.memmap;
    record(|f| {
        f.ran = true;
        f.strategy = mode.name();
    });

    // 1. memblock.
    let affinity = acpi
        .mem_affinity
        .iter()
        .map(|m| NodeAffinity::new(m.base, m.length, m.node));
    let affinity: Vec<NodeAffinity> = if acpi.has_srat {
        affinity.collect()
    } else {
        Vec::new()
    };
    let (built, memblock_ns) = timed(|| mm::build_memblock(regions, affinity, reserve));
    let (mut mb, mut fw_report) = built.map_err(fail("memblock"))?;
    if !acpi.has_srat {
        // Without SRAT everything is node 0 by definition, not a fix-up.
        fw_report.no_affinity_bytes = 0;
    }
    kprintln!(
        "memblock: {} memory regions ({} MiB), {} reserved regions ({} MiB), phys bits {}, built in {} us",
        mb.memory().len(),
        mb.memory().total_bytes() >> 20,
        mb.reserved().len(),
        mb.reserved().total_bytes() >> 20,
        mb.phys_addr_bits(),
        memblock_ns / 1000
    );
    if fw_report.overlap_bytes
        + fw_report.beyond_phys_bytes
        + fw_report.unaligned_ram_bytes
        + fw_report.no_affinity_bytes
        > 0
    {
        kprintln!(
            "memblock: firmware map fix-ups: {} B overlapping, {} B beyond phys bits, {} B unaligned RAM, {} B without SRAT node",
            fw_report.overlap_bytes,
            fw_report.beyond_phys_bytes,
            fw_report.unaligned_ram_bytes,
            fw_report.no_affinity_bytes
        );
    }
    record(|f| f.memblock_ns = memblock_ns);

    // 2. zones.
    let layout = ZoneLayout::new(&mb);
    print_lines(mm::lines_of(|w| layout.write_report(&mb, w)));
    let present_pages = layout.present_pages();
    let low_zone_pages: u64 = layout
        .nodes()
        .iter()
        .map(|n| {
            let highest = layout.highest_zone(n.nid).map(|z| z.zone);
            layout
                .node_zones(n.nid)
                .filter(|z| Some(z.zone) != highest)
                .map(|z| z.present_pages)
                .sum::<u64>()
        })
        .sum();
    record(|f| {
        f.present_pages = present_pages;
        f.low_zone_pages = low_zone_pages;
        f.nr_nodes = layout.nodes().len().min(MAX_NODES);
    });

    // 3. vmemmap.
    // SAFETY: boot.rs passes the bootloader's offset; the boot CPU alone edits
    // the page tables (APs only run jobs, which do not map memory).
    let (mapped, vmemmap_ns) = timed(|| unsafe { mm::map_vmemmap(&mut mb, phys_offset) });
    let (backing, vstats): (VmemmapBacking, _) = mapped.map_err(fail("vmemmap"))?;
    kprintln!(
        "vmemmap: {} sections, {} MiB of struct pages at {:#x}, {} page-table pages, mapped in {} us",
        vstats.sections,
        vstats.bytes >> 20,
        vstats.base,
        vstats.table_frames,
        vmemmap_ns / 1000
    );
    for (nid, bytes) in &vstats.node_bytes {
        kprintln!("vmemmap: node {nid}: {} MiB of struct pages", bytes >> 20);
    }
    if vstats.off_node_sections > 0 {
        kprintln!(
            "vmemmap: {} sections' struct pages could not be placed on their own node",
            vstats.off_node_sections
        );
    }
    record(|f| {
        f.vmemmap_ns = vmemmap_ns;
        f.vmemmap_bytes = vstats.bytes;
    });
    let mut memmap = Memmap::new(backing);
    let pageblocks = PageblockMaps::new(&layout);

    // 4. eager init on the boot CPU.
    let (eager, memmap_boot_ns) =
        timed(|| -> Result<(u64, u64, u64, Vec<DeferredRange>), Failure> {
            match mode {
                MemmapMode::Touch => {
                    let plan = plan_deferred(&mb, &layout);
                    let mut n = 0;
                    for e in &plan.eager {
                        for piece in Memmap::<VmemmapBacking>::section_pieces(e.pfns) {
                            let pages = memmap.pages_mut(piece).ok_or_else(|| Failure {
                                status: "memmap",
                                message: alloc::format!(
                                    "touch: pfn {:#x} has no struct-page backing",
                                    piece.start
                                ),
                            })?;
                            pages.fill(StructPage {
                                flags: piece.start,
                                ..StructPage::ZERO
                            });
                            n += piece.nr_pages();
                        }
                    }
                    Ok((n, 0, 0, plan.deferred))
                }
                _ => {
                    let strategy = match mode {
                        MemmapMode::Regions => Strategy::Regions,
                        MemmapMode::PerPfn => Strategy::PerPfn,
                        _ => Strategy::Deferred,
                    };
                    let out = init_memmap(strategy, &mut memmap, &mb, &layout, &pageblocks)
                        .map_err(fail("memmap"))?;
                    Ok((
                        out.stats.eager_pages,
                        out.stats.reserved_pages,
                        out.stats.hole_pages,
                        out.deferred,
                    ))
                }
            }
        });
    let (eager_pages, reserved_pages, hole_pages, deferred) = eager?;
    let deferred_pages: u64 = deferred.iter().map(|d| d.pfns.nr_pages()).sum();
    kprintln!(
        "memmap: strategy {}: {} pages initialised on the boot CPU in {} us ({} reserved, {} hole pages), {} pages deferred",
        mode.name(),
        eager_pages,
        memmap_boot_ns / 1000,
        reserved_pages,
        hole_pages,
        deferred_pages
    );
    record(|f| {
        f.eager_pages = eager_pages;
        f.deferred_pages = deferred_pages;
        f.reserved_pages = reserved_pages;
        f.hole_pages = hole_pages;
        f.memmap_boot_ns = memmap_boot_ns;
    });

    // 5. plan deferred work, hand the boot CPU's free pages to the buddy.
    let reserved: Vec<PfnRange> = mb.reserved_pfn_ranges().collect();
    let plan_opts = PlanOptions {
        max_threads_per_node: opts.threads_per_node.map(|n| n as usize),
        ..PlanOptions::default()
    };
    let node_ids: Vec<NodeId> = layout.nodes().iter().map(|n| n.nid).collect();
    let plan =
        deferred_init::DeferredPlan::new(&deferred, &reserved, &node_cpus(&node_ids), plan_opts)
            .map_err(fail("deferred_plan"))?;
    let init_mode = if mode == MemmapMode::Touch {
        InitMode::Touch
    } else {
        InitMode::InitAndFree
    };
    let managed = eager_managed(&mb, &deferred);
    let memmap = memmap; // from here on shared with the workers
    let di =
        DeferredInit::new(&memmap, plan, init_mode, &managed).map_err(fail("deferred_init"))?;
    let ((), buddy_eager_ns) = timed(|| {
        if init_mode != InitMode::InitAndFree {
            return;
        }
        for (free, _) in mb.free_ranges(None) {
            for m in &managed {
                if let Some(piece) = free.intersect(&m.pfns) {
                    // SAFETY: the boot CPU initialised these pages just now
                    // (eager part), they are on no free list, and no worker
                    // touches eager ranges.
                    if let Err(e) = unsafe { di.buddy().free_initialised_range(piece) } {
                        kprintln!(
                            "buddy: freeing eager pages {:#x}-{:#x} failed: {e}",
                            piece.start,
                            piece.end
                        );
                    }
                }
            }
        }
    });
    record(|f| f.buddy_eager_ns = buddy_eager_ns);

    // 6. deferred init on the node CPUs; memory blocks meanwhile.
    let blocks_result: spin::Mutex<Option<Result<(MemoryBlocks, u64), Failure>>> =
        spin::Mutex::new(None);
    let make_blocks = || {
        let (r, ns) = timed(|| {
            let end = mb.max_pfn().unwrap_or(0) << memmap::PAGE_SHIFT;
            let size = match opts.memory_block_size {
                BlockSizeOption::Auto => Ok(probe_memory_block_size(end)),
                BlockSizeOption::Bytes(b) => MemoryBlockSize::new(b),
            }
            .map_err(fail("memory_block"))?;
            MemoryBlocks::new(&mb, size).map_err(fail("memory_block"))
        });
        *blocks_result.lock() = Some(r.map(|b| (b, ns)));
    };
    let clock = || tsc::ns_since_entry();
    let executor = SmpExecutor {
        while_waiting: &make_blocks,
    };
    let nr_workers = di.plan().workers().len();
    kprintln!(
        "deferred: {} pages on {} nodes, {} workers on {} CPUs",
        deferred_pages,
        di.plan().nodes().len(),
        nr_workers,
        smp::cpu_count()
    );
    di.run(&executor, &clock as &dyn Clock);
    let report: DeferredReport = di.report();
    if nr_workers == 0 {
        // No workers: nothing ran `while_waiting`.
        make_blocks();
    }
    for line in mm::lines_of(|w| core::fmt::write(w, format_args!("{report}"))) {
        kprintln!("{line}");
    }
    record(|f| {
        f.deferred_ns = report.total_wall_ns;
        f.deferred_workers = nr_workers as u64;
        f.grown_pages = report.nodes.iter().map(|n| n.nr_grown_pages).sum();
        for n in &report.nodes {
            if let Some(slot) = layout
                .nodes()
                .iter()
                .position(|l| l.nid == n.nid)
                .filter(|&i| i < MAX_NODES)
            {
                f.node_deferred_ns[slot] = n.wall_ns;
            }
        }
    });
    let (blocks, memory_block_ns) = blocks_result
        .lock()
        .take()
        .expect("memory blocks were created")?;
    kprintln!("{}", blocks.block_size());
    let mut per_node = [0u64; MAX_NODES];
    for (_, nid) in blocks.node_links() {
        if let Some(c) = per_node.get_mut(nid as usize) {
            *c += 1;
        }
    }
    kprintln!(
        "memory: {} memory blocks of {} MiB created in {} us",
        blocks.len(),
        blocks.block_size().bytes() >> 20,
        memory_block_ns / 1000
    );
    for (nid, n) in per_node.iter().enumerate().filter(|(_, n)| **n > 0) {
        kprintln!("memory: node {nid}: {n} memory blocks linked");
    }
    let free_pages = di.buddy().nr_free_pages_total();
    kprintln!(
        "Memory: {}K/{}K available ({}K reserved)",
        free_pages * 4,
        present_pages * 4,
        (present_pages - free_pages.min(present_pages)) * 4
    );
    record(|f| {
        f.memory_block_ns = memory_block_ns;
        f.memory_block_size = blocks.block_size().bytes();
        f.nr_memory_blocks = blocks.len() as u64;
        f.free_pages = free_pages;
    });

    // 7. verification.
    if opts.verify == Verify::Off || mode == MemmapMode::Touch {
        let why = if mode == MemmapMode::Touch {
            "memmap=touch writes no Linux state"
        } else {
            "verify=off"
        };
        kprintln!("verify: off ({why})");
        record(|f| f.verify = "off");
        return Ok(());
    }
    if opts.test_fault == TestFault::CorruptPage {
        corrupt_one_free_page(&memmap, &mb);
    }
    let (verdict, verify_ns) = timed(|| verify(&memmap, &mb, &layout, &di));
    record(|f| {
        f.verify = if verdict.is_ok() { "ok" } else { "failed" };
        f.verify_ns = verify_ns;
    });
    verdict.map_err(|message| Failure {
        status: "verify",
        message,
    })?;
    kprintln!(
        "verify: ok: every present page, the counts and the buddy lists checked in {} ms",
        verify_ns / 1_000_000
    );
    Ok(())
}

/// `test_fault=corrupt_page`: give the last free page of memory the wrong
/// node bits, as a stray write would.
fn corrupt_one_free_page(memmap: &Memmap<VmemmapBacking>, mb: &Memblock) {
    let Some((free, _)) = mb.free_ranges(None).last() else {
        return;
    };
    let pfn = free.end - 1;
    // SAFETY: all workers have finished and nothing else holds a reference
    // to this page's struct page; the write is the deliberate corruption.
    if let Some(pages) = unsafe { memmap.pages_mut_unchecked(PfnRange::new(pfn, pfn + 1)) } {
        pages[0].flags ^= 1 << memmap::page::NODES_PGSHIFT;
        kprintln!("test_fault: flipped a node bit in the struct page of pfn {pfn:#x}");
    }
}

/// Sections per claim in the parallel page scan.
const VERIFY_SECTIONS_PER_CLAIM: u64 = 8;

/// Check every present PFN's struct page on all CPUs (each claims batches of
/// sections), then the buddy lists and counts, then an alloc/free self-test
/// on every node. Returns the first lines of what differs.
fn verify(
    memmap: &Memmap<VmemmapBacking>,
    mb: &Memblock,
    layout: &ZoneLayout,
    di: &DeferredInit<'_, VmemmapBacking>,
) -> Result<(), alloc::string::String> {
    use core::sync::atomic::{AtomicU64, Ordering};
    use deferred_init::{alloc_free_selftest, verify_buddy, verify_pages, PageCheck};

    // Whole-section slices of the present ranges, claimed in batches.
    let sections: Vec<PfnRange> = layout
        .present_section_ranges()
        .iter()
        .flat_map(|r| Memmap::<VmemmapBacking>::section_pieces(*r))
        .collect();
    let cursor = AtomicU64::new(0);
    let results: Vec<spin::Mutex<Option<PageCheck>>> = (0..smp::cpu_count())
        .map(|_| spin::Mutex::new(None))
        .collect();
    let jobs: Vec<_> = (0..smp::cpu_count())
        .map(|cpu| {
            let (sections, cursor, results) = (&sections, &cursor, &results);
            move |_: smp::CpuInfo| {
                let mut check = PageCheck::new(layout);
                loop {
                    let first =
                        cursor.fetch_add(VERIFY_SECTIONS_PER_CLAIM, Ordering::Relaxed) as usize;
                    if first >= sections.len() {
                        break;
                    }
                    let last = (first + VERIFY_SECTIONS_PER_CLAIM as usize).min(sections.len());
                    for range in &sections[first..last] {
                        check.merge(verify_pages(memmap, mb, layout, *range));
                    }
                }
                *results[cpu].lock() = Some(check);
            }
        })
        .collect();
    smp::scope(|s| {
        for (cpu, job) in jobs.iter().enumerate() {
            s.spawn_on(cpu, job);
        }
    });
    let mut pages = PageCheck::new(layout);
    for r in &results {
        if let Some(c) = r.lock().take() {
            pages.merge(c);
        }
    }
    if !pages.is_ok() {
        return Err(alloc::format!("{pages}"));
    }
    let summary =
        verify_buddy(di.buddy(), memmap, layout, mb, &pages).map_err(|e| alloc::format!("{e}"))?;
    for line in mm::lines_of(|w| core::fmt::write(w, format_args!("{summary}"))) {
        kprintln!("{line}");
    }
    for node in layout.nodes() {
        let report = alloc_free_selftest(di, memmap, node.nid)
            .map_err(|e| alloc::format!("node {}: {e}", node.nid))?;
        kprintln!("{report}");
    }
    Ok(())
}
