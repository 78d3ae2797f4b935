//! The pipeline's `VmemmapMapper` on real hardware: x86_64 page tables over
//! the bootloader's, 2 MiB pages.
//!
//! Why 2 MiB pages: one 128 MiB section has 32768 struct pages of 64 bytes,
//! exactly 2 MiB, so every present section is one huge page of memmap and a
//! section without memory costs nothing (Linux `vmemmap_populate` on x86_64
//! uses PMD mappings the same way). Where the memory and the page-table
//! frames come from is decided by the pipeline (`vmemmap`); this module
//! only writes the entries.

use memboot_kernel::pipeline::seams::{MapError, VmemmapMapper};
use memboot_kernel::pipeline::vmemmap::PDPT_SPAN_BYTES;
use memmap::sections::Vmemmap;
use x86_64::structures::paging::mapper::MapToError;
use x86_64::structures::paging::page_table::PageTableEntry;
use x86_64::structures::paging::{
    FrameAllocator, Mapper, OffsetPageTable, Page, PageTable, PageTableFlags, PhysFrame, Size2MiB,
    Size4KiB,
};
use x86_64::{PhysAddr, VirtAddr};

/// Linux's vmemmap slot: 0xffffea0000000000 >> 39 & 511.
const LINUX_VMEMMAP_SLOT: usize = 468;
/// The higher half starts at top-level slot 256.
const FIRST_KERNEL_SLOT: usize = 256;

/// Maps the vmemmap area into the active page tables.
pub struct KernelMapper<'a> {
    tables: OffsetPageTable<'a>,
    /// Bytes per struct page, for the page-fault handler to name one.
    page_bytes: u64,
}

impl<'a> KernelMapper<'a> {
    /// # Safety
    /// `phys_offset` must be the offset at which all physical memory is
    /// mapped, CR3 must hold the active, bootloader-built page tables, and
    /// no other code may edit them while the mapper lives.
    /// `page_bytes`: the boot's struct-page size, so that a page fault in
    /// the vmemmap names the struct page (`interrupts::note_vmemmap`).
    pub unsafe fn new(phys_offset: u64, page_bytes: u64) -> Self {
        let (pml4_frame, _) = x86_64::registers::control::Cr3::read();
        let pml4_virt = phys_offset + pml4_frame.start_address().as_u64();
        // SAFETY: the caller guarantees the offset mapping and exclusive access.
        let pml4: &mut PageTable = unsafe { &mut *(pml4_virt as *mut PageTable) };
        // SAFETY: as above.
        let tables = unsafe { OffsetPageTable::new(pml4, VirtAddr::new(phys_offset)) };
        Self { tables, page_bytes }
    }

    /// The page tables themselves, for CPU bring-up's own 4 KiB mappings
    /// (the local APIC's registers, the trampoline page): the pipeline
    /// lends its mapper for that (`CpuBringup::start`).
    pub fn page_tables(&mut self) -> &mut OffsetPageTable<'a> {
        &mut self.tables
    }
}

/// Sign-extend a higher-half top-level slot to its address.
fn slot_addr(slot: usize) -> u64 {
    0xffff_0000_0000_0000 | ((slot as u64) << 39)
}

/// Page-table frames the pipeline planned for one mapping, handed out in
/// order.
struct PlannedFrames<'a> {
    frames: &'a [u64],
    next: usize,
}

// SAFETY: every frame is a fresh memblock allocation that the pipeline
// reserved for this mapping's page tables alone.
unsafe impl FrameAllocator<Size4KiB> for PlannedFrames<'_> {
    fn allocate_frame(&mut self) -> Option<PhysFrame<Size4KiB>> {
        let phys = *self.frames.get(self.next)?;
        self.next += 1;
        Some(PhysFrame::containing_address(PhysAddr::new(phys)))
    }
}

// SAFETY: `map_2mib` maps each 2 MiB page once, to RAM the pipeline reserved
// in memblock for that section alone, inside top-level slots that were
// unused, and the mapping is never removed; `split_2mib` keeps every
// translation of it, and `remap_4k` changes one 4 KiB translation, its old
// one flushed here and, before their next job, on the other CPUs
// (`flush_everywhere`).
unsafe impl VmemmapMapper for KernelMapper<'_> {
    fn choose_area(&mut self, bytes: u64) -> Result<Vmemmap, MapError> {
        let slots = bytes.div_ceil(PDPT_SPAN_BYTES).max(1) as usize;
        let pml4 = self.tables.level_4_table();
        let free = |first: usize| (first..first + slots).all(|i| i < 512 && pml4[i].is_unused());
        let slot = if free(LINUX_VMEMMAP_SLOT) {
            LINUX_VMEMMAP_SLOT
        } else {
            (FIRST_KERNEL_SLOT..512)
                .find(|&i| free(i))
                .ok_or(MapError::NoArea { bytes })?
        };
        let area = Vmemmap::new(slot_addr(slot)).ok_or(MapError::NoArea { bytes })?;
        crate::hw::interrupts::note_vmemmap(area.base(), self.page_bytes);
        Ok(area)
    }

    fn map_2mib(&mut self, virt: u64, phys: u64, new_tables: &[u64]) -> Result<(), MapError> {
        let page = Page::<Size2MiB>::containing_address(VirtAddr::new(virt));
        let frame = PhysFrame::<Size2MiB>::containing_address(PhysAddr::new(phys));
        let flags = PageTableFlags::PRESENT
            | PageTableFlags::WRITABLE
            | PageTableFlags::NO_EXECUTE
            | PageTableFlags::GLOBAL;
        let mut frames = PlannedFrames {
            frames: new_tables,
            next: 0,
        };
        // SAFETY: the frame is RAM reserved for this mapping alone and the
        // page lies in top-level slots that were unused, so no existing
        // mapping or reference is affected.
        match unsafe { self.tables.map_to(page, frame, flags, &mut frames) } {
            // A new mapping of a previously unmapped page needs no TLB flush.
            Ok(flush) => flush.ignore(),
            Err(MapToError::FrameAllocationFailed) => {
                return Err(MapError::TablesExhausted { virt })
            }
            Err(MapToError::PageAlreadyMapped(_)) | Err(MapToError::ParentEntryHugePage) => {
                return Err(MapError::AlreadyMapped { virt })
            }
        }
        if frames.next != new_tables.len() {
            // The walk found tables the plan thought were new.
            return Err(MapError::AlreadyMapped { virt });
        }
        Ok(())
    }

    fn fill_table(&mut self, table: u64, entry: &dyn Fn(usize) -> (u64, bool)) {
        let virt = self.tables.phys_offset() + table;
        // SAFETY: `table` is a frame the pipeline reserved in memblock for
        // this table alone, mapped at the physical-memory offset; nothing
        // else refers to it until `map_table` links it in.
        let pt: &mut PageTable = unsafe { &mut *(virt.as_u64() as *mut PageTable) };
        for (i, e) in pt.iter_mut().enumerate() {
            let (phys, writable) = entry(i);
            let mut flags =
                PageTableFlags::PRESENT | PageTableFlags::NO_EXECUTE | PageTableFlags::GLOBAL;
            if writable {
                flags |= PageTableFlags::WRITABLE;
            }
            e.set_addr(PhysAddr::new(phys), flags);
        }
    }

    fn map_table(&mut self, virt: u64, table: u64, new_tables: &[u64]) -> Result<(), MapError> {
        // Let `map_2mib` walk and build the upper tables as it would for a
        // 2 MiB page, then point the page-directory entry at `table`
        // instead; nothing has used the 2 MiB mapping in between.
        self.map_2mib(virt, table & !(VMEMMAP_2MIB - 1), new_tables)?;
        let page = Page::<Size2MiB>::containing_address(VirtAddr::new(virt));
        let offset = self.tables.phys_offset();
        let table_at = |phys: PhysAddr| (offset + phys.as_u64()).as_mut_ptr::<PageTable>();
        let pml4 = self.tables.level_4_table();
        let pdpt_phys = pml4[page.p4_index()].addr();
        // SAFETY: `map_2mib` just made these entries present, each naming a
        // table frame mapped at the physical-memory offset, and no other
        // code edits the page tables while the mapper lives.
        let pd_entry = unsafe {
            let pdpt = &*table_at(pdpt_phys);
            let pd = &mut *table_at(pdpt[page.p3_index()].addr());
            &mut pd[page.p2_index()]
        };
        pd_entry.set_addr(
            PhysAddr::new(table),
            PageTableFlags::PRESENT | PageTableFlags::WRITABLE,
        );
        x86_64::instructions::tlb::flush(VirtAddr::new(virt));
        Ok(())
    }

    unsafe fn split_2mib(&mut self, virt: u64, table: u64) -> Result<u64, MapError> {
        // SAFETY: the only reference to the entry, used below only.
        let pd_entry = unsafe { self.pd_entry(virt) }
            .filter(|e| e.flags().contains(PageTableFlags::HUGE_PAGE))
            .ok_or(MapError::NotSplittable { virt })?;
        let phys = pd_entry.addr().as_u64();
        let flags = PageTableFlags::PRESENT
            | PageTableFlags::WRITABLE
            | PageTableFlags::NO_EXECUTE
            | PageTableFlags::GLOBAL;
        // SAFETY: the caller gives us `table`, a frame nothing else uses,
        // mapped at the physical-memory offset.
        let pt = unsafe { self.table_at(table) };
        for (i, e) in pt.iter_mut().enumerate() {
            e.set_addr(PhysAddr::new(phys + i as u64 * 4096), flags);
        }
        // The same translations as before, now through `table`; Linux's
        // `vmemmap_split_pmd` swaps the entry the same way, then flushes.
        pd_entry.set_addr(
            PhysAddr::new(table),
            PageTableFlags::PRESENT | PageTableFlags::WRITABLE,
        );
        self.flush_everywhere(virt);
        Ok(phys)
    }

    unsafe fn remap_4k(&mut self, virt: u64, phys: u64, writable: bool) -> Result<(), MapError> {
        // SAFETY: the only reference to the entry, used below only.
        let pd_entry = unsafe { self.pd_entry(virt) }
            .filter(|e| !e.flags().contains(PageTableFlags::HUGE_PAGE))
            .ok_or(MapError::NotSplittable { virt })?;
        let table = pd_entry.addr().as_u64();
        // SAFETY: a page table `split_2mib` built (present, not a huge
        // page), which only this mapper edits.
        let pt = unsafe { self.table_at(table) };
        let page = Page::<Size4KiB>::containing_address(VirtAddr::new(virt));
        let mut flags =
            PageTableFlags::PRESENT | PageTableFlags::NO_EXECUTE | PageTableFlags::GLOBAL;
        if writable {
            flags |= PageTableFlags::WRITABLE;
        }
        pt[page.p1_index()].set_addr(PhysAddr::new(phys), flags);
        self.flush_everywhere(virt);
        Ok(())
    }
}

impl KernelMapper<'_> {
    /// The page table at physical `phys`, through the physical-memory
    /// offset.
    ///
    /// # Safety
    /// `phys` must be a page table (or a frame about to be one) that only
    /// this mapper edits, and no other reference to it may be alive while
    /// the one returned is.
    unsafe fn table_at<'t>(&self, phys: u64) -> &'t mut PageTable {
        let virt = self.tables.phys_offset() + phys;
        // SAFETY: the caller's guarantee; the offset maps all RAM.
        unsafe { &mut *virt.as_mut_ptr::<PageTable>() }
    }

    /// The page-directory entry mapping vmemmap address `virt`, if the
    /// walk down to it finds present tables.
    ///
    /// # Safety
    /// No other reference to that entry may be alive while this one is.
    unsafe fn pd_entry<'t>(&self, virt: u64) -> Option<&'t mut PageTableEntry> {
        let page = Page::<Size2MiB>::containing_address(VirtAddr::new(virt));
        let pml4e = &self.tables.level_4_table()[page.p4_index()];
        if !pml4e.flags().contains(PageTableFlags::PRESENT) {
            return None;
        }
        // SAFETY: present entries name table frames, mapped at the
        // physical-memory offset, which only this mapper edits.
        let pdpt = unsafe { self.table_at(pml4e.addr().as_u64()) };
        let pdpte = &pdpt[page.p3_index()];
        let huge = pdpte.flags().contains(PageTableFlags::HUGE_PAGE);
        if !pdpte.flags().contains(PageTableFlags::PRESENT) || huge {
            return None;
        }
        // SAFETY: as above; the caller holds no other reference to it.
        let pd = unsafe { self.table_at(pdpte.addr().as_u64()) };
        Some(&mut pd[page.p2_index()]).filter(|e| e.flags().contains(PageTableFlags::PRESENT))
    }

    /// After changing the translation of `virt`, a mapping in use: this
    /// CPU's entry (and the paging-structure caches for it) flushed now,
    /// the other CPUs' before their next job.
    fn flush_everywhere(&self, virt: u64) {
        x86_64::instructions::tlb::flush(VirtAddr::new(virt));
        // SAFETY: the other CPUs may hold the old translation of `virt`
        // (the deferred workers wrote struct pages through it), writable.
        // They reach the vmemmap only inside jobs, and none runs now: the
        // pipeline changes mappings on the boot CPU between jobs, and
        // `smp::scope` returns only when every job it posted finished.
        // `tlb::changed` is published before the next job is posted, and
        // every AP flushes its whole TLB, global entries included, before
        // it runs that job (`tlb::catch_up` in `smp::scope::serve`), so no
        // write through the old translation can reach the frame it named.
        crate::hw::tlb::changed();
    }
}

/// A 2 MiB page's bytes.
const VMEMMAP_2MIB: u64 = 2 << 20;
