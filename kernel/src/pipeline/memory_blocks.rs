//! Memory-block devices (Linux `memory_dev_init()`): one per
//! block-size-aligned range with memory, linked to the nodes in it, each
//! section's block found as `memory_block_lookup=` says (the registry's
//! `BlockLookup`: indexed, or Linux's linear search before 4fb6eabf1037). The
//! boot CPU creates them during `deferred_workers` (while the deferred-init workers
//! run, or after the pool is handed over, in `ondemand_pool`); this module reports them and
//! what the allocator holds (Linux's `Memory:` line).

use deferred_init::{DeferredInit, PageAllocator};
use memboot_contract::option_values::BlockLookup;
use memmap::memblock::Memblock;
use memmap::memory_block::{probe_memory_block_size, BlockError, MemoryBlockSize, MemoryBlocks};
use memmap::page::MAX_NUMNODES;
use memmap::store::MemmapBacking;
use memmap::zones::ZoneLayout;

use memboot_contract::options::BlockSizeOption;

use super::context::Ctx;
use super::error::PipelineError;
use super::facts::Phase;
use super::seams::{Clock, Log, BOOT_CPU};

/// Memory blocks as created on the boot CPU, with when and how.
pub struct Created {
    pub blocks: MemoryBlocks,
    pub lookup: BlockLookup,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// Create the memory blocks of `mb` now, timed.
pub fn create_timed(
    mb: &Memblock,
    size: BlockSizeOption,
    lookup: BlockLookup,
    under_hypervisor: bool,
    clock: &dyn Clock,
) -> Result<Created, PipelineError> {
    let start_ns = clock.now_ns();
    let blocks = create(mb, size, lookup, under_hypervisor).map_err(PipelineError::MemoryBlock)?;
    Ok(Created {
        blocks,
        lookup,
        start_ns,
        end_ns: clock.now_ns(),
    })
}

/// Record and log the blocks and what the allocator holds.
pub fn run<B: MemmapBacking>(
    cx: &Ctx<'_>,
    created: Created,
    pages: PageAllocator<'_, '_, B>,
    di: &DeferredInit<'_, B>,
    layout: &ZoneLayout,
) {
    let Created {
        blocks,
        lookup,
        start_ns,
        end_ns,
    } = created;
    cx.facts
        .phase(Phase::MemoryBlocks, BOOT_CPU, None, start_ns, end_ns);
    log(cx.log, &blocks, lookup, end_ns - start_ns);
    let free_pages = pages.buddy().nr_free_pages_total();
    let pool_free: u64 = di
        .pool_pieces()
        .filter(|p| !p.piece.reserved)
        .map(|p| p.piece.pfns.nr_pages())
        .sum();
    log_memory_line(cx, layout.present_pages(), free_pages + pool_free);
    cx.facts.record(|f| {
        f.memory_block_ns = end_ns - start_ns;
        f.memory_block_size = blocks.block_size().bytes();
        f.memory_block_lookup = lookup.name().into();
        f.nr_memory_blocks = blocks.len() as u64;
        f.free_pages = free_pages;
    });
}

/// Linux's line byte for byte (mm/page_alloc.c mem_init_print_info():
/// free/physical pages, the image's parts, then physical − managed).
fn log_memory_line(cx: &Ctx<'_>, present_pages: u64, available: u64) {
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
}

/// Create the memory blocks of `mb` (`auto`: sized as Linux x86 does on
/// bare metal or `under_hypervisor`), finding each section's block by
/// `lookup`: the blocks are the same either way, only the time differs.
/// Not inlined: the instruction profile counts it as a phase of its own
/// (`memory_blocks`).
#[inline(never)]
pub fn create(
    mb: &Memblock,
    size: BlockSizeOption,
    lookup: BlockLookup,
    under_hypervisor: bool,
) -> Result<MemoryBlocks, BlockError> {
    let end = mb.max_pfn().unwrap_or(0) << memmap::PAGE_SHIFT;
    let size = match size {
        BlockSizeOption::Auto => probe_memory_block_size(end, under_hypervisor),
        BlockSizeOption::Bytes(b) => MemoryBlockSize::new(b)?,
    };
    MemoryBlocks::with_lookup(mb, size, lookup)
}

/// The blocks' log lines.
pub fn log(log: &dyn Log, blocks: &MemoryBlocks, lookup: BlockLookup, memory_block_ns: u64) {
    log.line(format_args!("{}", blocks.block_size()));
    if lookup == BlockLookup::Linear {
        log.line(format_args!(
            "memory: each section's block found by a linear search over the blocks (memory_block_lookup=linear, Linux before 4fb6eabf1037)"
        ));
    }
    log.line(format_args!(
        "memory: {} memory blocks of {} MiB created in {} us",
        blocks.len(),
        blocks.block_size().bytes() >> 20,
        memory_block_ns / 1000
    ));
    let mut per_node = [0u64; MAX_NUMNODES as usize];
    for (_, nid) in blocks.node_links() {
        if let Some(c) = per_node.get_mut(nid as usize) {
            *c += 1;
        }
    }
    for (nid, n) in per_node.iter().enumerate().filter(|(_, n)| **n > 0) {
        log.line(format_args!("memory: node {nid}: {n} memory blocks linked"));
    }
}
