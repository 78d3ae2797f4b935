//! Stage 7, memory-block devices (Linux `memory_dev_init()`): one per
//! block-size-aligned range with memory, linked to the nodes in it. The
//! boot CPU creates them while the deferred-init workers run.

use memmap::memblock::Memblock;
use memmap::memory_block::{probe_memory_block_size, BlockError, MemoryBlockSize, MemoryBlocks};
use memmap::page::MAX_NUMNODES;

use crate::options::BlockSizeOption;

use super::seams::Log;

/// Create the memory blocks of `mb`.
pub fn create(mb: &Memblock, size: BlockSizeOption) -> Result<MemoryBlocks, BlockError> {
    let end = mb.max_pfn().unwrap_or(0) << memmap::PAGE_SHIFT;
    let size = match size {
        BlockSizeOption::Auto => probe_memory_block_size(end),
        BlockSizeOption::Bytes(b) => MemoryBlockSize::new(b)?,
    };
    MemoryBlocks::new(mb, size)
}

/// The stage's log lines.
pub fn log(log: &dyn Log, blocks: &MemoryBlocks, memory_block_ns: u64) {
    log.line(format_args!("{}", blocks.block_size()));
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
