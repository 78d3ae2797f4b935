//! Memory-init glue: firmware map → memblock → zones → vmemmap → memmap.
//!
//! The logic lives in the `memmap` crate; this module only feeds it the
//! bootloader's memory map and SRAT, and does the two things that need the
//! hardware: mapping the vmemmap window with 2 MiB pages (x86_64's mapper
//! over the bootloader's page tables) and handing out the resulting memory
//! as a [`MemmapBacking`].
//!
//! Why 2 MiB pages: one 128 MiB section has 32768 struct pages of 64 bytes,
//! exactly 2 MiB, so every present section is one huge page of memmap and a
//! section without memory costs nothing (Linux `vmemmap_populate` on x86_64
//! uses PMD mappings the same way). Each section's memmap is allocated from
//! its own node's memory, so node-local workers initialise node-local memory.

use alloc::string::String;
use alloc::vec::Vec;
use core::ptr::NonNull;

use bootloader_api::info::{MemoryRegion, MemoryRegionKind};
use memmap::firmware::{FirmwareRegion, NodeAffinity, RegionKind};
use memmap::memblock::{Memblock, MemblockConfig, MemblockError};
use memmap::page::StructPage;
use memmap::sections::{vmemmap_backing_ranges, Vmemmap, SECTION_MEMMAP_BYTES};
use memmap::store::MemmapBacking;
use memmap::NodeId;
use x86_64::structures::paging::mapper::MapToError;
use x86_64::structures::paging::{
    FrameAllocator, Mapper, OffsetPageTable, Page, PageTable, PageTableFlags, PhysFrame, Size2MiB,
    Size4KiB,
};
use x86_64::{PhysAddr, VirtAddr};

/// A bootloader memory region seen through `memmap`'s firmware trait.
pub struct BootRegion<'a>(pub &'a MemoryRegion);

impl FirmwareRegion for BootRegion<'_> {
    fn start(&self) -> u64 {
        self.0.start
    }
    fn len(&self) -> u64 {
        self.0.end.saturating_sub(self.0.start)
    }
    fn kind(&self) -> RegionKind {
        match self.0.kind {
            MemoryRegionKind::Usable | MemoryRegionKind::UnknownBios(1) => RegionKind::Usable,
            // Kernel image, boot info, page tables, stacks: RAM that stays reserved.
            MemoryRegionKind::Bootloader => RegionKind::Bootloader,
            MemoryRegionKind::UnknownBios(3) | MemoryRegionKind::UnknownUefi(9) => {
                RegionKind::AcpiReclaimable
            }
            MemoryRegionKind::UnknownBios(4) | MemoryRegionKind::UnknownUefi(10) => {
                RegionKind::AcpiNvs
            }
            MemoryRegionKind::UnknownBios(5) | MemoryRegionKind::UnknownUefi(8) => {
                RegionKind::Unusable
            }
            _ => RegionKind::Reserved,
        }
    }
}

/// CPU physical address width, CPUID 0x80000008 EAX[7:0] (36 if absent).
pub fn phys_addr_bits() -> u32 {
    // CPUID is always available in long mode (safe since Rust 1.89).
    let max_ext = core::arch::x86_64::__cpuid(0x8000_0000).eax;
    if max_ext < 0x8000_0008 {
        return 36;
    }
    core::arch::x86_64::__cpuid(0x8000_0008).eax & 0xff
}

/// Why memory init failed, each with what to do about it.
#[derive(Debug)]
pub enum MmError {
    Memblock(&'static str, MemblockError),
    NoVmemmapSlot,
    Map { virt: u64, reason: &'static str },
}

impl core::fmt::Display for MmError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            MmError::Memblock(what, e) => write!(f, "memblock ({what}): {e}"),
            MmError::NoVmemmapSlot => {
                write!(f, "no free top-level page-table slot for the vmemmap window (bootloader used them all)")
            }
            MmError::Map { virt, reason } => {
                write!(f, "vmemmap: mapping {virt:#x} failed: {reason}")
            }
        }
    }
}

/// memblock from the bootloader's map, SRAT affinity and early reservations.
pub fn build_memblock(
    regions: &[MemoryRegion],
    affinity: impl IntoIterator<Item = NodeAffinity>,
    reserve: &[(u64, u64, &'static str)],
) -> Result<(Memblock, memmap::memblock::FirmwareReport), MmError> {
    let config = MemblockConfig {
        phys_addr_bits: phys_addr_bits().clamp(32, 52),
        ..MemblockConfig::default()
    };
    let (mut mb, mut report) = Memblock::from_firmware(regions.iter().map(BootRegion), config)
        .map_err(|e| MmError::Memblock("firmware map", e))?;
    mb.apply_affinity(affinity, &mut report)
        .map_err(|e| MmError::Memblock("SRAT affinity", e))?;
    for &(base, size, what) in reserve {
        mb.reserve(base, size)
            .map_err(|e| MmError::Memblock(what, e))?;
    }
    Ok((mb, report))
}

/// Struct-page storage in the kernel's vmemmap window: section `n` lives at
/// `base + n * 2 MiB` when it is present.
pub struct VmemmapBacking {
    vmemmap: Vmemmap,
    /// One bit per section number, set when mapped.
    present: Vec<u64>,
}

// SAFETY: `section_ptr` only returns addresses of sections that `map_vmemmap`
// mapped (present bit set) with a 2 MiB writable mapping of RAM reserved in
// memblock for this purpose alone; sections are 2 MiB apart, so they never
// overlap; the mappings stay for the kernel's lifetime.
unsafe impl MemmapBacking for VmemmapBacking {
    fn section_ptr(&self, section_nr: u64) -> Option<NonNull<StructPage>> {
        let word = self.present.get((section_nr / 64) as usize)?;
        if word & (1 << (section_nr % 64)) == 0 {
            return None;
        }
        NonNull::new(
            self.vmemmap
                .page_addr(memmap::section_nr_to_pfn(section_nr))? as *mut StructPage,
        )
    }
}

/// Page-table frames for the vmemmap mapping, from memblock, node-local.
struct MemblockFrames<'a> {
    mb: &'a mut Memblock,
    nid: NodeId,
    frames: u64,
}

// SAFETY: every frame returned is a fresh memblock allocation (reserved from
// then on), so it is unused RAM that nothing else will hand out.
unsafe impl FrameAllocator<Size4KiB> for MemblockFrames<'_> {
    fn allocate_frame(&mut self) -> Option<PhysFrame<Size4KiB>> {
        let phys = self.mb.alloc(4096, 4096, Some(self.nid)).ok()?;
        self.frames += 1;
        Some(PhysFrame::containing_address(PhysAddr::new(phys)))
    }
}

/// Statistics of the vmemmap population, for the log.
pub struct VmemmapStats {
    pub base: u64,
    pub sections: u64,
    pub bytes: u64,
    pub table_frames: u64,
    /// `(nid, bytes)` of memmap placed on each node's own memory.
    pub node_bytes: Vec<(NodeId, u64)>,
    /// Sections whose memmap had to come from another node.
    pub off_node_sections: u64,
}

/// Choose a vmemmap window in a top-level page-table slot nothing uses:
/// Linux's 0xffffea0000000000 if free, else the first free higher-half slot.
fn choose_window(pml4: &PageTable) -> Option<Vmemmap> {
    const LINUX_SLOT: usize = 468; // 0xffffea0000000000 >> 39 & 511
    let free = |i: usize| pml4[i].is_unused();
    let slot = if free(LINUX_SLOT) {
        LINUX_SLOT
    } else {
        (256..512).find(|&i| free(i))?
    };
    // Sign-extend the higher-half address.
    Vmemmap::new(0xffff_0000_0000_0000 | ((slot as u64) << 39))
}

/// Map struct-page backing for every present section, node-local.
///
/// # Safety
/// `phys_offset` must be the offset at which all physical memory is mapped
/// and CR3 must hold the active, bootloader-built page tables; no other code
/// may edit the page tables concurrently.
pub unsafe fn map_vmemmap(
    mb: &mut Memblock,
    phys_offset: u64,
) -> Result<(VmemmapBacking, VmemmapStats), MmError> {
    let (pml4_frame, _) = x86_64::registers::control::Cr3::read();
    let pml4_virt = phys_offset + pml4_frame.start_address().as_u64();
    // SAFETY: the caller guarantees the offset mapping and exclusive access.
    let pml4: &mut PageTable = unsafe { &mut *(pml4_virt as *mut PageTable) };
    let vmemmap = choose_window(pml4).ok_or(MmError::NoVmemmapSlot)?;
    // SAFETY: as above: complete offset mapping, exclusive page-table access.
    let mut mapper = unsafe { OffsetPageTable::new(pml4, VirtAddr::new(phys_offset)) };

    let ranges = vmemmap_backing_ranges(mb, &vmemmap);
    let max_section = ranges.iter().map(|r| r.section_nrs.end).max().unwrap_or(0);
    let mut present = alloc::vec![0u64; max_section.div_ceil(64) as usize];
    let mut stats = VmemmapStats {
        base: vmemmap.base(),
        sections: 0,
        bytes: 0,
        table_frames: 0,
        node_bytes: Vec::new(),
        off_node_sections: 0,
    };
    let flags = PageTableFlags::PRESENT
        | PageTableFlags::WRITABLE
        | PageTableFlags::NO_EXECUTE
        | PageTableFlags::GLOBAL;
    for range in &ranges {
        // One contiguous block per run of sections when the node has it,
        // else one 2 MiB block per section (still node-local first).
        let block = mb
            .alloc(range.bytes(), SECTION_MEMMAP_BYTES, Some(range.nid))
            .ok();
        for (i, section_nr) in range.section_nrs.clone().enumerate() {
            let phys = match block {
                Some(base) => base + i as u64 * SECTION_MEMMAP_BYTES,
                None => mb
                    .alloc(SECTION_MEMMAP_BYTES, SECTION_MEMMAP_BYTES, Some(range.nid))
                    .map_err(|e| MmError::Memblock("vmemmap backing", e))?,
            };
            if mb
                .memory()
                .regions()
                .iter()
                .any(|r| r.base <= phys && phys < r.end() && r.nid != range.nid)
            {
                stats.off_node_sections += 1;
            }
            let virt = range.virt_start + i as u64 * SECTION_MEMMAP_BYTES;
            let page = Page::<Size2MiB>::containing_address(VirtAddr::new(virt));
            let frame = PhysFrame::<Size2MiB>::containing_address(PhysAddr::new(phys));
            let mut frames = MemblockFrames {
                mb,
                nid: range.nid,
                frames: 0,
            };
            // SAFETY: the frame is RAM just reserved for this mapping alone, and
            // the page lies in a top-level slot that was unused, so no existing
            // mapping or reference is affected.
            let result = unsafe { mapper.map_to(page, frame, flags, &mut frames) };
            stats.table_frames += frames.frames;
            match result {
                // A new mapping of a previously unmapped page needs no TLB flush.
                Ok(flush) => flush.ignore(),
                Err(MapToError::FrameAllocationFailed) => {
                    return Err(MmError::Map {
                        virt,
                        reason: "out of memory for page tables",
                    })
                }
                Err(MapToError::PageAlreadyMapped(_)) | Err(MapToError::ParentEntryHugePage) => {
                    return Err(MmError::Map {
                        virt,
                        reason: "address already mapped",
                    })
                }
            }
            present[(section_nr / 64) as usize] |= 1 << (section_nr % 64);
            stats.sections += 1;
            stats.bytes += SECTION_MEMMAP_BYTES;
        }
        match stats.node_bytes.iter_mut().find(|(n, _)| *n == range.nid) {
            Some((_, b)) => *b += range.bytes(),
            None => stats.node_bytes.push((range.nid, range.bytes())),
        }
    }
    Ok((VmemmapBacking { vmemmap, present }, stats))
}

/// Lines written by a `fmt::Write` producer, for printing one by one.
pub fn lines_of(write: impl FnOnce(&mut String) -> core::fmt::Result) -> Vec<String> {
    let mut s = String::new();
    let _ = write(&mut s);
    s.lines().map(String::from).collect()
}
