//! Memory blocks: the hotplug granularity behind
//! `/sys/devices/system/memory/memoryN`, after drivers/base/memory.c and
//! arch/x86/mm/init_64.c.
//!
//! [`probe_memory_block_size`] follows x86 `probe_memory_block_size()` of
//! Linux 6.1: 128 MiB (`MIN_MEMORY_BLOCK_SIZE`) below 64 GiB of boot memory
//! (`MEM_SIZE_FOR_LARGE_BLOCK`); 2 GiB (`MAX_BLOCK_SIZE`) on bare metal
//! ("x86/mm: use max memory block size on bare metal": a 2 TiB server had
//! 16,288 blocks of 128 MiB); under a hypervisor (CPUID's hypervisor bit),
//! the largest power of two up to 2 GiB that divides the end of boot
//! memory, down to 128 MiB (078eb6aa50dc). Checked against Linux 6.1 on
//! this project's QEMU machine: `-m 65000M` (end not 128 MiB aligned)
//! gives `Memory block size: 128MB`.
//!
//! [`MemoryBlocks`] registers one block per block-sized range containing a
//! present section (`add_memory_block()` for each `for_each_present_section_nr`)
//! and links it to every node with memory in it
//! (`register_memory_block_under_node()`). Lookup by block id is O(1) through
//! a dense index, what the xarray of 4fb6eabf1037 ("drivers/base/memory.c:
//! cache memory blocks in xarray to accelerate lookup") gives Linux;
//! [`MemoryBlocks::find_block_linear`] is the `bus_find_device()` linear
//! search it replaced, as a lookup baseline; [`MemoryBlocks::new_linear`]
//! builds the registry the way Linux did before that fix (every present
//! section's block found by a linear search over the blocks registered so
//! far, to register it and again to link it to its node: O(sections ×
//! blocks), 14 of 21 s of a 2 TiB boot with 128 MiB blocks), for the
//! kernel's `memory_block_lookup=linear`.

use alloc::vec::Vec;
use core::fmt;
use memboot_contract::option_values::BlockLookup;

use crate::memblock::Memblock;
use crate::sections::present_sections;
use crate::{
    pfn_to_section_nr, section_nr_to_pfn, NodeId, Pfn, PfnRange, PAGE_SHIFT, SECTION_SIZE_BITS,
};

/// `MIN_MEMORY_BLOCK_SIZE`: one section.
pub(crate) const MIN_MEMORY_BLOCK_BYTES: u64 = 1 << SECTION_SIZE_BITS;
/// x86 `MAX_BLOCK_SIZE`.
pub(crate) const MAX_MEMORY_BLOCK_BYTES: u64 = 2 << 30;
/// x86 `MEM_SIZE_FOR_LARGE_BLOCK`.
pub(crate) const MEM_SIZE_FOR_LARGE_BLOCK_BYTES: u64 = 64 << 30;

/// A probed block size, printable as Linux prints it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryBlockSize {
    bytes: u64,
}

impl MemoryBlockSize {
    /// A block size given explicitly (Linux `set_memory_block_size_order()`
    /// / `memory_block_size=`): a power of two from 128 MiB to 2 GiB.
    pub fn new(bytes: u64) -> Result<Self, BlockError> {
        if bytes.is_power_of_two()
            && (MIN_MEMORY_BLOCK_BYTES..=MAX_MEMORY_BLOCK_BYTES).contains(&bytes)
        {
            Ok(Self { bytes })
        } else {
            Err(BlockError::BadBlockSize { bytes })
        }
    }
    pub const fn bytes(&self) -> u64 {
        self.bytes
    }
    pub(crate) const fn nr_pages(&self) -> u64 {
        self.bytes >> PAGE_SHIFT
    }
    pub(crate) const fn sections_per_block(&self) -> u64 {
        self.bytes >> SECTION_SIZE_BITS
    }
}

impl fmt::Display for MemoryBlockSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "x86/mm: Memory block size: {}MB", self.bytes >> 20)
    }
}

/// x86 `probe_memory_block_size()` for boot memory ending at byte
/// `boot_mem_end` (`max_pfn << PAGE_SHIFT`), on bare metal or under a
/// hypervisor.
pub fn probe_memory_block_size(boot_mem_end: u64, under_hypervisor: bool) -> MemoryBlockSize {
    let bytes = if boot_mem_end < MEM_SIZE_FOR_LARGE_BLOCK_BYTES {
        MIN_MEMORY_BLOCK_BYTES
    } else if !under_hypervisor {
        MAX_MEMORY_BLOCK_BYTES
    } else {
        let mut bz = MAX_MEMORY_BLOCK_BYTES;
        while bz > MIN_MEMORY_BLOCK_BYTES && !boot_mem_end.is_multiple_of(bz) {
            bz >>= 1;
        }
        bz
    };
    MemoryBlockSize { bytes }
}

/// Registry errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockError {
    /// A block size that is not a power of two in 128 MiB..=2 GiB.
    BadBlockSize { bytes: u64 },
    /// More blocks than a `u32` index can name.
    TooManyBlocks { max_block_id: u64 },
}

impl fmt::Display for BlockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BlockError::BadBlockSize { bytes } => write!(
                f,
                "memory block size {bytes:#x} is invalid; use a power of two from 128MB to 2048MB"
            ),
            BlockError::TooManyBlocks { max_block_id } => write!(
                f,
                "memory block id {max_block_id} is beyond the registry's u32 index; use a larger block size"
            ),
        }
    }
}

/// Bitmask of node ids (64 nodes, as struct page flags allow).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct NodeMask(pub u64);

const _: () = assert!(crate::page::MAX_NUMNODES <= 64);

impl NodeMask {
    pub(crate) fn set(&mut self, nid: NodeId) {
        self.0 |= 1 << (nid % 64);
    }
    pub const fn contains(&self, nid: NodeId) -> bool {
        nid < 64 && self.0 & (1 << nid) != 0
    }
    pub(crate) fn iter(&self) -> impl Iterator<Item = NodeId> + '_ {
        (0..64).filter(|&n| self.contains(n))
    }
}

/// One memory block device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryBlock {
    /// `memoryN`'s N: `start_pfn / pages_per_block`.
    pub id: u64,
    pub pfns: PfnRange,
    /// Present sections in the block.
    pub nr_present_sections: u32,
    /// Nodes with memory in the block (sysfs `nodeN/memoryM` links).
    pub nids: NodeMask,
}

/// All memory blocks, with O(1) lookup by id.
#[derive(Clone, Debug)]
pub struct MemoryBlocks {
    size: MemoryBlockSize,
    blocks: Vec<MemoryBlock>,
    /// `index[id]` = position in `blocks`, `u32::MAX` when absent.
    index: Vec<u32>,
}

const NO_BLOCK: u32 = u32::MAX;

impl MemoryBlock {
    /// Block `id` of `size`, registered for its first present section
    /// (no node linked yet).
    fn first_section(id: u64, size: MemoryBlockSize) -> Self {
        let start = section_nr_to_pfn(id * size.sections_per_block());
        MemoryBlock {
            id,
            pfns: PfnRange::new(start, start + size.nr_pages()),
            nr_present_sections: 1,
            nids: NodeMask::default(),
        }
    }
}

/// The first block of `blocks` with `id`, searched from the start as
/// `bus_find_device()` walks its list: the blocks are in registration
/// (ascending) order, so a new section's block, the last one, costs a walk
/// over all of them.
fn find_linear(blocks: &mut [MemoryBlock], id: u64) -> Option<&mut MemoryBlock> {
    blocks.iter_mut().find(|b| b.id == id)
}

impl MemoryBlocks {
    /// The registry built with `lookup` ([`new`](Self::new) or
    /// [`new_linear`](Self::new_linear)): the same blocks either way.
    pub fn with_lookup(
        mb: &Memblock,
        size: MemoryBlockSize,
        lookup: BlockLookup,
    ) -> Result<Self, BlockError> {
        match lookup {
            BlockLookup::Indexed => Self::new(mb, size),
            BlockLookup::Linear => Self::new_linear(mb, size),
        }
    }

    /// [`new`](Self::new)'s blocks, built as Linux did before 4fb6eabf1037:
    /// each present section's block is found by a linear search over the
    /// blocks registered so far, and registered when absent; then each
    /// section of each memory range finds its block the same way again to
    /// link it to the range's node. O(sections × blocks).
    pub fn new_linear(mb: &Memblock, size: MemoryBlockSize) -> Result<Self, BlockError> {
        let per_block = size.sections_per_block();
        let mut blocks: Vec<MemoryBlock> = Vec::new();
        for s in present_sections(mb) {
            let id = s.section_nr / per_block;
            match find_linear(&mut blocks, id) {
                Some(b) => b.nr_present_sections += 1,
                None => {
                    blocks.push(MemoryBlock::first_section(id, size));
                }
            }
        }
        for (range, nid) in mb.mem_pfn_ranges(None) {
            let sections = pfn_to_section_nr(range.start)..pfn_to_section_nr(range.end - 1) + 1;
            for section_nr in sections {
                if let Some(b) = find_linear(&mut blocks, section_nr / per_block) {
                    b.nids.set(nid);
                }
            }
        }
        Self::indexed(size, blocks)
    }

    /// Register blocks for every present section of `mb`
    /// (`memory_dev_init()`), linked to their nodes.
    pub fn new(mb: &Memblock, size: MemoryBlockSize) -> Result<Self, BlockError> {
        let per_block = size.sections_per_block();
        let mut blocks: Vec<MemoryBlock> = Vec::new();
        for s in present_sections(mb) {
            let id = s.section_nr / per_block;
            match blocks.last_mut() {
                Some(b) if b.id == id => b.nr_present_sections += 1,
                _ => {
                    blocks.push(MemoryBlock::first_section(id, size));
                }
            }
        }
        // Node links from the memory regions themselves, so a block shared
        // by two nodes links to both.
        let mut i = 0;
        for (range, nid) in mb.mem_pfn_ranges(None) {
            while i < blocks.len() && blocks[i].pfns.end <= range.start {
                i += 1;
            }
            let mut j = i;
            while j < blocks.len() && blocks[j].pfns.start < range.end {
                blocks[j].nids.set(nid);
                j += 1;
            }
        }
        Self::indexed(size, blocks)
    }

    /// The registry of `blocks` (ascending by id), with its id index.
    fn indexed(size: MemoryBlockSize, blocks: Vec<MemoryBlock>) -> Result<Self, BlockError> {
        let max_block_id = blocks.last().map_or(0, |b| b.id);
        if max_block_id >= u64::from(NO_BLOCK) || blocks.len() >= NO_BLOCK as usize {
            return Err(BlockError::TooManyBlocks { max_block_id });
        }
        let mut index = alloc::vec![NO_BLOCK; blocks.last().map_or(0, |b| b.id as usize + 1)];
        for (pos, b) in blocks.iter().enumerate() {
            index[b.id as usize] = pos as u32;
        }
        Ok(Self {
            size,
            blocks,
            index,
        })
    }

    pub fn block_size(&self) -> MemoryBlockSize {
        self.size
    }
    pub fn len(&self) -> usize {
        self.blocks.len()
    }
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }
    /// Blocks ascending by id.
    pub fn blocks(&self) -> &[MemoryBlock] {
        &self.blocks
    }

    /// `find_memory_block_by_id()`: O(1).
    #[inline]
    pub fn find_block(&self, id: u64) -> Option<&MemoryBlock> {
        let pos = *self.index.get(usize::try_from(id).ok()?)?;
        self.blocks.get(pos as usize)
    }

    /// The pre-4fb6eabf1037 linear search, as a lookup baseline.
    pub fn find_block_linear(&self, id: u64) -> Option<&MemoryBlock> {
        self.blocks.iter().find(|b| b.id == id)
    }

    /// The block holding `pfn` (`pfn_to_block_id()` + lookup).
    pub fn block_of_pfn(&self, pfn: Pfn) -> Option<&MemoryBlock> {
        self.find_block(pfn_to_section_nr(pfn) / self.size.sections_per_block())
    }

    /// `(block id, nid)` for every block→node link.
    pub fn node_links(&self) -> impl Iterator<Item = (u64, NodeId)> + '_ {
        self.blocks
            .iter()
            .flat_map(|b| b.nids.iter().map(move |n| (b.id, n)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memblock::MemblockConfig;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    #[test]
    fn block_size_table() {
        // (boot memory end, expected MiB under a hypervisor, on bare metal)
        let cases = [
            (16 * GIB, 128, 128),              // small: always 128 MiB
            (64 * GIB - 128 * MIB, 128, 128),  // just under 64 GiB
            (64 * GIB, 2048, 2048),            // 2 GiB aligned
            (65 * GIB, 1024, 2048),            // 1 GiB aligned only
            (64 * GIB + 512 * MIB, 512, 2048), // QEMU-style hotplug alignment
            (64 * GIB + 128 * MIB, 128, 2048), // aligned to 128 MiB only
            (66024 * MIB, 128, 2048),          // -m 65000M: Linux 6.1 says 128MB
            (2048 * GIB - 4 * MIB, 128, 2048), // 2 TiB, unaligned end: the bare-metal fix
            (2048 * GIB, 2048, 2048),
            (1024 * GIB + 3 * 4096, 128, 2048), // 1 TiB unaligned
        ];
        for (end, guest_mib, metal_mib) in cases {
            for (hypervisor, mib) in [(true, guest_mib), (false, metal_mib)] {
                assert_eq!(
                    probe_memory_block_size(end, hypervisor).bytes() >> 20,
                    mib,
                    "end {end:#x}, hypervisor {hypervisor}"
                );
            }
        }
        assert_eq!(
            probe_memory_block_size(2048 * GIB - 1, false).to_string(),
            "x86/mm: Memory block size: 2048MB"
        );
        assert!(MemoryBlockSize::new(3 * 128 * MIB).is_err());
        assert!(MemoryBlockSize::new(64 * MIB)
            .unwrap_err()
            .to_string()
            .contains("power of two"));
    }

    #[test]
    fn two_tib_at_128mib_is_16288_blocks() {
        // A 2 TiB server: 2 GiB below 4 GiB plus [4 GiB, 2038 GiB) minus a
        // few hundred MiB of firmware at the top, as in the bare-metal
        // patch's 16,288 blocks; at 128 MiB every present section is a block.
        let mut mb = Memblock::new(MemblockConfig::default()).unwrap();
        mb.add(0, 2 * GIB, 0).unwrap();
        mb.add(4 * GIB, 2034 * GIB - 4 * MIB, 0).unwrap();
        let end = mb.max_pfn().unwrap() << 12;
        assert_eq!(probe_memory_block_size(end, false).bytes(), 2 * GIB);
        let small = MemoryBlocks::new(&mb, MemoryBlockSize::new(128 * MIB).unwrap()).unwrap();
        assert_eq!(small.len(), 16 + 16272);
        assert_eq!(small.len(), 16288);
        let big = MemoryBlocks::new(&mb, probe_memory_block_size(end, false)).unwrap();
        assert_eq!(big.len(), 1 + 1017);
        for id in [0, 15, 16, 31, 32, 16303, 16304, 99_999] {
            assert_eq!(small.find_block(id), small.find_block_linear(id), "id {id}");
        }
        assert!(
            small.find_block(16).is_none(),
            "the 2..4 GiB hole has no blocks"
        );
        assert_eq!(small.block_of_pfn((4 * GIB) >> 12).unwrap().id, 32);
    }

    #[test]
    fn blocks_link_to_every_node_with_memory() {
        let mut mb = Memblock::new(MemblockConfig::default()).unwrap();
        mb.add(0, 100 * MIB, 0).unwrap();
        mb.add(100 * MIB, 200 * MIB, 1).unwrap();
        mb.add(GIB, 128 * MIB, 2).unwrap();
        let blocks = MemoryBlocks::new(&mb, MemoryBlockSize::new(256 * MIB).unwrap()).unwrap();
        let links: Vec<_> = blocks.node_links().collect();
        assert_eq!(links, [(0, 0), (0, 1), (1, 1), (4, 2)]);
        assert_eq!(blocks.find_block(1).unwrap().nr_present_sections, 1);
    }
}
