//! The PVH way in (the Xen x86/HVM direct boot ABI, which QEMU's `-kernel`
//! speaks for an ELF with a `XEN_ELFNOTE_PHYS32_ENTRY` note): what the
//! kernel reads from the start info and what it sets up itself before the
//! boot proper, which expects what rust-osdev/bootloader hands over.
//!
//! QEMU's PVH option ROM enters `pvh_start32` (`hw/pvh.rs`) in 32-bit mode,
//! paging off, with the start info's physical address in `ebx`; the image
//! sits at its physical load address (`linker.ld`), nothing else is set up.
//! The stub turns on long mode with static tables that map the first GiB
//! twice (identity, and at [`KERNEL_VIRT_BASE`]), and then this module's
//! logic, driven by `hw/pvh.rs`:
//!
//! 1. [`StartInfo::parse`] and [`MemoryMap::from_e820`]: the firmware map,
//!    as the bootloader would report it (e820 type 1 `Usable`, every other
//!    type `UnknownBios`), sorted;
//! 2. [`Layout::plan`]: right after the image, a guard page, the boot
//!    stack and the page tables, all carved out of usable RAM as
//!    `Bootloader` regions, so memblock reserves them as it reserves the
//!    bootloader's;
//! 3. [`build_page_tables`]: the direct map of all physical memory at
//!    [`DIRECT_MAP_BASE`] (1 GiB pages, or 2 MiB pages on a CPU without
//!    them, as Linux's `phys_pud_init` falls back) and the kernel mapping
//!    with 4 KiB pages, each section with its own permissions and the guard
//!    page left unmapped below the stack.
//!
//! Nothing here allocates: it runs before the heap exists.

use crate::image_sizes::ImageSections;
use bootloader_api::info::{MemoryRegion, MemoryRegionKind};
use core::fmt;
use core::ops::Range;

/// Where the kernel's image is mapped: physical address 0 in the kernel
/// mapping (`linker.ld`'s KERNEL_VIRT_BASE, Linux's `__START_KERNEL_map`).
pub const KERNEL_VIRT_BASE: u64 = 0xffff_ffff_8000_0000;
/// Where all physical memory is mapped on the PVH path (Linux's
/// `__PAGE_OFFSET` with 4-level paging); the bootloader picks its own.
pub const DIRECT_MAP_BASE: u64 = 0xffff_8880_0000_0000;
/// The boot stack, on both entry paths (`BOOTLOADER_CONFIG` asks the
/// bootloader for as much): five times the deepest a boot has used, 12 KiB
/// (`verify=full` at 16G and at 1T over 16 nodes), Linux's boot stack being
/// 16 KiB. Small, so that the heap [`Layout::plan`]'s caller puts after the
/// tables starts in the 2 MiB page of guest RAM the image's loading already
/// touched: a heap that fits there (`ondemand` at 64G over 16 nodes uses
/// 231 KiB) first touches no other page before memory is ready, and under
/// a hypervisor backing guest RAM with 2 MiB pages such a first touch cost
/// a boot up to ~5 ms (tests/bench-results/ondemand-ready-host-faults-cb23b9b).
pub const STACK_BYTES: u64 = 64 << 10;
/// What the stub's static tables map (identity and kernel mapping): the
/// start info, the image and everything [`Layout::plan`] places after it
/// must lie below this.
pub const EARLY_MAPPED_BYTES: u64 = 1 << 30;

const PAGE: u64 = 4096;
const GIB: u64 = 1 << 30;
/// One top-level entry spans 512 GiB.
const PML4_SPAN: u64 = 512 * GIB;

/// `XEN_HVM_START_MAGIC_VALUE` ("xEn3" with the 0x80 bit of the "E" set).
pub const START_INFO_MAGIC: u32 = 0x336e_c578;
/// `struct hvm_start_info` of version 1 (the memory map's fields).
pub const START_INFO_BYTES: usize = 56;
/// `struct hvm_memmap_table_entry`.
pub const MEMMAP_ENTRY_BYTES: usize = 24;
/// e820 entries QEMU's PVH option ROM passes at most (`E820_MAXENTRIES`).
pub const MAX_E820_ENTRIES: usize = 128;
/// Regions the kernel keeps: the e820 entries and what the PVH entry's
/// carve splits off (a carve splits a region in up to three).
pub const MAX_REGIONS: usize = MAX_E820_ENTRIES + 8;

/// Why the PVH entry could not set the machine up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PvhError {
    /// `ebx` did not point at a start info.
    BadMagic { phys: u64, found: u32 },
    /// A start info before version 1 has no memory map.
    NoMemoryMap { version: u32 },
    /// The memory map has more entries than the kernel keeps.
    MapTooLarge { entries: u32 },
    /// Something the kernel reads before its own page tables lies above
    /// what the stub maps.
    NotEarlyMapped { what: &'static str, phys: u64 },
    /// The image, stack and page tables do not fit in the usable RAM right
    /// after the image's load address.
    NoRoom { needed: Range<u64> },
}

impl fmt::Display for PvhError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PvhError::BadMagic { phys, found } => write!(
                f,
                "pvh: no start info at {phys:#x} (magic {found:#010x}, expected {START_INFO_MAGIC:#010x}): the loader does not speak PVH; boot the BIOS image (run-qemu.sh --bios)"
            ),
            PvhError::NoMemoryMap { version } => write!(
                f,
                "pvh: start info version {version} has no memory map (version 1 has); use QEMU 4.0 or later, or the BIOS image (run-qemu.sh --bios)"
            ),
            PvhError::MapTooLarge { entries } => write!(
                f,
                "pvh: the memory map has {entries} entries, more than the {MAX_E820_ENTRIES} memboot keeps; boot the BIOS image (run-qemu.sh --bios)"
            ),
            PvhError::NotEarlyMapped { what, phys } => write!(
                f,
                "pvh: the {what} at {phys:#x} lies above the first GiB, which is all the entry stub maps; boot the BIOS image (run-qemu.sh --bios)"
            ),
            PvhError::NoRoom { ref needed } => write!(
                f,
                "pvh: [mem {:#x}-{:#x}] (the kernel image, its stack and page tables) is not all usable RAM below 1 GiB; give the guest more memory (-m), a CPU with 1 GiB pages (fewer page tables), or boot the BIOS image (run-qemu.sh --bios)",
                needed.start,
                needed.end - 1
            ),
        }
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from(u32_at(b, at)) | u64::from(u32_at(b, at + 4)) << 32
}

/// What the kernel reads from `struct hvm_start_info`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StartInfo {
    /// 0: not given (the start info's convention for every address).
    pub rsdp_paddr: u64,
    pub memmap_paddr: u64,
    pub memmap_entries: u32,
}

impl StartInfo {
    /// The start info at physical `phys`, whose first
    /// [`START_INFO_BYTES`] are `bytes`.
    pub fn parse(phys: u64, bytes: &[u8; START_INFO_BYTES]) -> Result<Self, PvhError> {
        let magic = u32_at(bytes, 0);
        if magic != START_INFO_MAGIC {
            return Err(PvhError::BadMagic { phys, found: magic });
        }
        let version = u32_at(bytes, 4);
        let info = StartInfo {
            rsdp_paddr: u64_at(bytes, 32),
            memmap_paddr: u64_at(bytes, 40),
            memmap_entries: u32_at(bytes, 48),
        };
        if version < 1 || info.memmap_paddr == 0 {
            return Err(PvhError::NoMemoryMap { version });
        }
        if info.memmap_entries as usize > MAX_E820_ENTRIES {
            return Err(PvhError::MapTooLarge {
                entries: info.memmap_entries,
            });
        }
        Ok(info)
    }

    /// The memory map table's physical extent.
    pub fn memmap_range(&self) -> Range<u64> {
        let len = u64::from(self.memmap_entries) * MEMMAP_ENTRY_BYTES as u64;
        self.memmap_paddr..self.memmap_paddr + len
    }
}

/// e820 type 1: free RAM.
const E820_RAM: u32 = 1;

/// One `struct hvm_memmap_table_entry` as the bootloader would report the
/// e820 entry: free RAM `Usable`, everything else `UnknownBios(type)`.
pub fn region_of_entry(bytes: &[u8; MEMMAP_ENTRY_BYTES]) -> MemoryRegion {
    let start = u64_at(bytes, 0);
    let kind = match u32_at(bytes, 16) {
        E820_RAM => MemoryRegionKind::Usable,
        t => MemoryRegionKind::UnknownBios(t),
    };
    MemoryRegion {
        start,
        end: start.saturating_add(u64_at(bytes, 8)),
        kind,
    }
}

/// The firmware map in a fixed array, sorted by start, with what the PVH
/// entry occupies carved out of its usable RAM.
pub struct MemoryMap {
    regions: [MemoryRegion; MAX_REGIONS],
    len: usize,
}

impl MemoryMap {
    /// The map of `entries` (empty ones dropped), sorted by start.
    pub fn from_e820(entries: impl Iterator<Item = MemoryRegion>) -> Self {
        let mut map = MemoryMap {
            regions: [MemoryRegion::empty(); MAX_REGIONS],
            len: 0,
        };
        for r in entries.filter(|r| r.end > r.start) {
            map.push(r);
        }
        map.regions[..map.len].sort_unstable_by_key(|r| r.start);
        map
    }

    fn push(&mut self, r: MemoryRegion) {
        // `StartInfo::parse` bounds the entries and a carve of one range adds
        // at most two, so this only fails on a broken caller.
        assert!(self.len < MAX_REGIONS, "pvh: memory map overflow");
        self.regions[self.len] = r;
        self.len += 1;
    }

    pub fn regions(&self) -> &[MemoryRegion] {
        &self.regions[..self.len]
    }

    /// The map, for `MemoryRegions` (the boot proper sorts it again).
    pub fn regions_mut(&mut self) -> &mut [MemoryRegion] {
        &mut self.regions[..self.len]
    }

    /// The end of the highest region.
    pub fn end(&self) -> u64 {
        self.regions().iter().map(|r| r.end).max().unwrap_or(0)
    }

    /// Is all of `range` usable RAM (one region or adjacent ones)?
    pub fn is_usable(&self, range: &Range<u64>) -> bool {
        let mut at = range.start;
        for r in self.regions() {
            if r.kind == MemoryRegionKind::Usable && r.start <= at && at < r.end {
                at = r.end;
                if at >= range.end {
                    return true;
                }
            }
        }
        range.is_empty()
    }

    /// Mark the usable RAM in `range` as in use by the boot path
    /// (`Bootloader`), splitting the regions it cuts; the map stays sorted.
    pub fn carve(&mut self, range: Range<u64>) {
        let mut i = 0;
        while i < self.len {
            let r = self.regions[i];
            let (lo, hi) = (r.start.max(range.start), r.end.min(range.end));
            if r.kind != MemoryRegionKind::Usable || lo >= hi {
                i += 1;
                continue;
            }
            let pieces = [
                (r.start, lo, MemoryRegionKind::Usable),
                (lo, hi, MemoryRegionKind::Bootloader),
                (hi, r.end, MemoryRegionKind::Usable),
            ];
            self.regions[i] = self.regions[self.len - 1];
            self.len -= 1;
            for (start, end, kind) in pieces {
                if start < end {
                    self.push(MemoryRegion { start, end, kind });
                }
            }
        }
        self.regions[..self.len].sort_unstable_by_key(|r| r.start);
    }
}

/// The image in physical memory, page-aligned.
pub fn image_phys(s: &ImageSections) -> Range<u64> {
    let start = s.text.start - KERNEL_VIRT_BASE;
    let end = s.bss.end.div_ceil(PAGE) * PAGE - KERNEL_VIRT_BASE;
    start..end
}

/// Where the PVH entry puts what it sets up, in physical memory, right
/// after the image: guard page, stack, page tables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub image: Range<u64>,
    /// Never mapped in the kernel mapping: a stack overflow faults here.
    pub guard: Range<u64>,
    pub stack: Range<u64>,
    /// Page-table pages: the top level first ([`build_page_tables`]).
    pub tables: Range<u64>,
    /// All physical memory up to here is in the direct map.
    pub direct_map_end: u64,
    /// The direct map's page size.
    pub direct_map_page: DirectMapPage,
}

/// The page size of the direct map: 1 GiB where the CPU has such pages
/// (CPUID 0x80000001 EDX bit 26, `pdpe1gb`), else 2 MiB, which every
/// x86_64 CPU has (a nested KVM may hide `pdpe1gb` from its guest).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirectMapPage {
    Gib1,
    Mib2,
}

impl DirectMapPage {
    pub const fn bytes(self) -> u64 {
        match self {
            DirectMapPage::Gib1 => GIB,
            DirectMapPage::Mib2 => 2 << 20,
        }
    }
    /// The name the boot log gives it.
    pub const fn name(self) -> &'static str {
        match self {
            DirectMapPage::Gib1 => "1 GiB",
            DirectMapPage::Mib2 => "2 MiB",
        }
    }
}

impl Layout {
    /// Plan for an image at `image` (physical, page-aligned) on a machine
    /// whose map ends at `map_end`, its direct map in `page`s.
    pub fn plan(image: Range<u64>, map_end: u64, page: DirectMapPage) -> Self {
        let guard = image.end..image.end + PAGE;
        let stack = guard.end..guard.end + STACK_BYTES;
        // The direct map covers at least the 32-bit space (ACPI tables and
        // the BIOS area may lie above the last RAM of a small guest).
        let direct_map_end = map_end.max(4 * GIB).div_ceil(GIB) * GIB;
        let kernel_mapped = image.start..stack.end;
        let pd_tables = match page {
            DirectMapPage::Gib1 => 0,
            DirectMapPage::Mib2 => direct_map_end / GIB, // 2 MiB entries
        };
        let nr_tables = 1 // top level
            + direct_map_end.div_ceil(PML4_SPAN) // 1 GiB entries
            + pd_tables
            + 2 // the kernel mapping's 512 GiB and 1 GiB levels
            + kernel_mapped.end.div_ceil(2 << 20)
            - kernel_mapped.start / (2 << 20); // 4 KiB entries
        let tables = stack.end..stack.end + nr_tables * PAGE;
        Layout {
            image,
            guard,
            stack,
            tables,
            direct_map_end,
            direct_map_page: page,
        }
    }

    /// Everything the entry occupies, image included.
    pub fn occupied(&self) -> Range<u64> {
        self.image.start..self.tables.end
    }

    /// Check the plan against the map: all of it in usable RAM that the
    /// stub's tables reach.
    pub fn check(&self, map: &MemoryMap) -> Result<(), PvhError> {
        let occupied = self.occupied();
        if occupied.end > EARLY_MAPPED_BYTES || !map.is_usable(&occupied) {
            return Err(PvhError::NoRoom { needed: occupied });
        }
        Ok(())
    }

    pub fn nr_tables(&self) -> usize {
        ((self.tables.end - self.tables.start) / PAGE) as usize
    }

    /// Top of the stack in the kernel mapping.
    pub fn stack_top(&self) -> u64 {
        KERNEL_VIRT_BASE + self.stack.end
    }
}

/// Page-table entry bits (Intel SDM vol. 3A §4.5).
pub mod pte {
    pub const PRESENT: u64 = 1;
    pub const WRITABLE: u64 = 1 << 1;
    /// In a PDPT entry: a 1 GiB page; in a PD entry: a 2 MiB page.
    pub const HUGE: u64 = 1 << 7;
    pub const NO_EXECUTE: u64 = 1 << 63;
    pub const ADDR_MASK: u64 = 0x000f_ffff_ffff_f000;
}

/// Fill the page-table pages `pages` (zeroed, [`Layout::tables`] in
/// order: the top level is `pages[0]`, at `layout.tables.start`) with the
/// direct map and the kernel mapping. `nx`: mark data non-executable
/// (only if EFER.NXE is on).
pub fn build_page_tables(
    layout: &Layout,
    sections: &ImageSections,
    nx: bool,
    pages: &mut [[u64; 512]],
) {
    use pte::*;
    assert_eq!(
        pages.len(),
        layout.nr_tables(),
        "one page per planned table"
    );
    let table_phys = |i: usize| layout.tables.start + i as u64 * PAGE;
    let no_exec = if nx { NO_EXECUTE } else { 0 };
    let idx = |virt: u64, level: u32| ((virt >> (12 + 9 * level)) & 511) as usize;
    let mut next = 1;
    // Direct map: one second-level table per 512 GiB, and either 1 GiB
    // pages in it or one third-level table per GiB of 2 MiB pages.
    let leaf = PRESENT | WRITABLE | HUGE | no_exec;
    let mut pdpt = 0;
    for gib in 0..layout.direct_map_end / GIB {
        let virt = DIRECT_MAP_BASE + gib * GIB;
        if gib % 512 == 0 {
            pdpt = next;
            pages[0][idx(virt, 3)] = table_phys(pdpt) | PRESENT | WRITABLE;
            next += 1;
        }
        match layout.direct_map_page {
            DirectMapPage::Gib1 => pages[pdpt][idx(virt, 2)] = (gib * GIB) | leaf,
            DirectMapPage::Mib2 => {
                let pd = next;
                next += 1;
                pages[pdpt][idx(virt, 2)] = table_phys(pd) | PRESENT | WRITABLE;
                for (i, entry) in pages[pd].iter_mut().enumerate() {
                    *entry = (gib * GIB + i as u64 * (2 << 20)) | leaf;
                }
            }
        }
    }
    // Kernel mapping: 512 GiB level, 1 GiB level, then 4 KiB tables.
    let (pdpt, pd) = (next, next + 1);
    next += 2;
    pages[0][idx(KERNEL_VIRT_BASE, 3)] = table_phys(pdpt) | PRESENT | WRITABLE;
    pages[pdpt][idx(KERNEL_VIRT_BASE, 2)] = table_phys(pd) | PRESENT | WRITABLE;
    let writable = |virt: u64| {
        (sections.data.start..KERNEL_VIRT_BASE + layout.image.end).contains(&virt)
            || layout.stack.contains(&(virt - KERNEL_VIRT_BASE))
    };
    let flags_of = |virt: u64| {
        if sections.text.contains(&virt) {
            Some(PRESENT)
        } else if (sections.rodata.start..sections.data.start).contains(&virt) {
            Some(PRESENT | no_exec)
        } else if writable(virt) {
            Some(PRESENT | WRITABLE | no_exec)
        } else {
            None // the guard page, and the gap before .rodata if any
        }
    };
    let mut phys = layout.image.start;
    while phys < layout.stack.end {
        let virt = KERNEL_VIRT_BASE + phys;
        if phys == layout.image.start || idx(virt, 0) == 0 {
            pages[pd][idx(virt, 1)] = table_phys(next) | PRESENT | WRITABLE;
            next += 1;
        }
        if let Some(flags) = flags_of(virt) {
            pages[next - 1][idx(virt, 0)] = phys | flags;
        }
        phys += PAGE;
    }
    debug_assert!(next <= pages.len());
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    /// The linker script places the image where this module expects it.
    #[test]
    fn linker_script_agrees() {
        let script = include_str!("../linker.ld");
        let value = |name: &str| {
            let line = script
                .lines()
                .find(|l| l.starts_with(&alloc::format!("{name} = ")))
                .unwrap_or_else(|| panic!("linker.ld defines no {name}"));
            let hex = line.split(" = 0x").nth(1).unwrap().trim_end_matches(';');
            u64::from_str_radix(hex, 16).unwrap()
        };
        assert_eq!(value("KERNEL_VIRT_BASE"), KERNEL_VIRT_BASE);
        let load = value("KERNEL_PHYS_LOAD");
        assert!(load % (2 << 20) == 0 && load + (2 << 20) < EARLY_MAPPED_BYTES);
    }

    fn start_info(magic: u32, version: u32, memmap: u64, entries: u32) -> [u8; START_INFO_BYTES] {
        let mut b = [0u8; START_INFO_BYTES];
        b[0..4].copy_from_slice(&magic.to_le_bytes());
        b[4..8].copy_from_slice(&version.to_le_bytes());
        b[24..32].copy_from_slice(&0x9_f000u64.to_le_bytes()); // cmdline
        b[32..40].copy_from_slice(&0xf_5b60u64.to_le_bytes()); // rsdp
        b[40..48].copy_from_slice(&memmap.to_le_bytes());
        b[48..52].copy_from_slice(&entries.to_le_bytes());
        b
    }

    #[test]
    fn start_info_fields_at_their_offsets() {
        let info = StartInfo::parse(0x6000, &start_info(START_INFO_MAGIC, 1, 0xd_0000, 7)).unwrap();
        assert_eq!(
            info,
            StartInfo {
                rsdp_paddr: 0xf_5b60,
                memmap_paddr: 0xd_0000,
                memmap_entries: 7
            }
        );
        assert_eq!(info.memmap_range(), 0xd_0000..0xd_0000 + 7 * 24);
    }

    #[test]
    fn start_info_refusals() {
        assert_eq!(
            StartInfo::parse(0x6000, &start_info(0x1bad_b002, 1, 0xd_0000, 7)),
            Err(PvhError::BadMagic {
                phys: 0x6000,
                found: 0x1bad_b002
            })
        );
        assert_eq!(
            StartInfo::parse(0, &start_info(START_INFO_MAGIC, 0, 0xd_0000, 7)),
            Err(PvhError::NoMemoryMap { version: 0 })
        );
        assert_eq!(
            StartInfo::parse(0, &start_info(START_INFO_MAGIC, 1, 0, 7)),
            Err(PvhError::NoMemoryMap { version: 1 })
        );
        let too_many = MAX_E820_ENTRIES as u32 + 1;
        assert_eq!(
            StartInfo::parse(0, &start_info(START_INFO_MAGIC, 1, 0xd_0000, too_many)),
            Err(PvhError::MapTooLarge { entries: too_many })
        );
    }

    fn entry(addr: u64, size: u64, ty: u32) -> [u8; MEMMAP_ENTRY_BYTES] {
        let mut b = [0u8; MEMMAP_ENTRY_BYTES];
        b[0..8].copy_from_slice(&addr.to_le_bytes());
        b[8..16].copy_from_slice(&size.to_le_bytes());
        b[16..20].copy_from_slice(&ty.to_le_bytes());
        b
    }

    /// SeaBIOS's map of a 1 GiB guest, as QEMU's PVH option ROM passes it
    /// (int 15h e820), out of order to check the sort.
    fn seabios_1g() -> MemoryMap {
        MemoryMap::from_e820(
            [
                entry(0x10_0000, 0x3fee_0000, 1),
                entry(0, 0x9_fc00, 1),
                entry(0x9_fc00, 0x6_0400, 2),
                entry(0x3ffe_0000, 0x2_0000, 2),
                entry(0xfffc_0000, 0x4_0000, 2),
                entry(0x5000_0000, 0, 1), // empty: dropped
            ]
            .iter()
            .map(region_of_entry),
        )
    }

    #[test]
    fn e820_types_as_the_bootloader_reports_them() {
        let map = seabios_1g();
        let kinds: Vec<_> = map
            .regions()
            .iter()
            .map(|r| (r.start, r.end, r.kind))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (0, 0x9_fc00, MemoryRegionKind::Usable),
                (0x9_fc00, 0x10_0000, MemoryRegionKind::UnknownBios(2)),
                (0x10_0000, 0x3ffe_0000, MemoryRegionKind::Usable),
                (0x3ffe_0000, 0x4000_0000, MemoryRegionKind::UnknownBios(2)),
                (0xfffc_0000, 0x1_0000_0000, MemoryRegionKind::UnknownBios(2)),
            ]
        );
        assert_eq!(map.end(), 0x1_0000_0000);
    }

    /// Brute force: the kind of every byte address of interest.
    fn kind_at(map: &MemoryMap, addr: u64) -> Option<MemoryRegionKind> {
        map.regions()
            .iter()
            .find(|r| r.start <= addr && addr < r.end)
            .map(|r| r.kind)
    }

    #[test]
    fn carving_marks_exactly_the_usable_bytes_in_the_range() {
        let before = seabios_1g();
        let mut map = seabios_1g();
        // Across the boundary of a reserved region: only usable bytes change.
        let cut = 0x9_e000..0x20_0000;
        map.carve(cut.clone());
        assert!(map.regions().windows(2).all(|w| w[0].end <= w[1].start));
        for addr in (0..0x40_0000)
            .step_by(0x400)
            .chain([0x9_fbff, 0x9_fc00, 0x1f_ffff])
        {
            let want = match kind_at(&before, addr) {
                Some(MemoryRegionKind::Usable) if cut.contains(&addr) => {
                    Some(MemoryRegionKind::Bootloader)
                }
                k => k,
            };
            assert_eq!(kind_at(&map, addr), want, "{addr:#x}");
        }
        assert!(map.is_usable(&(0x20_0000..0x3ffe_0000)));
        assert!(!map.is_usable(&(0x1f_f000..0x20_1000)));
        assert!(!map.is_usable(&(0x3ffd_f000..0x3ffe_1000)));
    }

    fn sections() -> ImageSections {
        let base = KERNEL_VIRT_BASE + 0x100_0000;
        ImageSections {
            text: base..base + 0x6_4f6e,
            rodata: base + 0x6_5000..base + 0x6_f93d,
            data: base + 0x7_0000..base + 0x7_0770,
            bss: base + 0x7_0770..base + 0x9_9c6b,
        }
    }

    #[test]
    fn layout_follows_the_image() {
        let s = sections();
        let l = Layout::plan(image_phys(&s), 0x4000_0000, DirectMapPage::Gib1);
        assert_eq!(l.image, 0x100_0000..0x109_a000);
        assert_eq!(l.guard, 0x109_a000..0x109_b000);
        assert_eq!(l.stack, 0x109_b000..0x10a_b000);
        assert_eq!(l.tables.start, l.stack.end);
        // top + one direct-map table (4 GiB) + two kernel levels + one
        // 4 KiB table for [16 MiB, 18 MiB).
        assert_eq!(l.nr_tables(), 5);
        assert_eq!(l.direct_map_end, 4 << 30);
        assert!(l.check(&seabios_1g()).is_ok());
        // 2 MiB pages: a table of them per GiB besides.
        let l2 = Layout::plan(image_phys(&s), 0x4000_0000, DirectMapPage::Mib2);
        assert_eq!(l2.nr_tables(), 5 + 4);
        assert_eq!(l2.occupied().end, l.occupied().end + 4 * PAGE);
        assert!(l2.check(&seabios_1g()).is_ok());
        let big = Layout::plan(
            image_phys(&s),
            (59u64 << 40) + (1 << 40),
            DirectMapPage::Gib1,
        );
        assert_eq!(big.direct_map_end, 60u64 << 40);
        assert_eq!(big.nr_tables(), 1 + 120 + 2 + 1);
        let big2 = Layout::plan(
            image_phys(&s),
            (59u64 << 40) + (1 << 40),
            DirectMapPage::Mib2,
        );
        assert_eq!(big2.nr_tables(), 1 + 120 + 60 * 1024 + 2 + 1);
    }

    #[test]
    fn layout_refused_where_ram_is_missing() {
        let map = MemoryMap::from_e820(
            // RAM ends inside the boot stack.
            [entry(0, 0x9_fc00, 1), entry(0x10_0000, 0xfa_0000, 1)]
                .iter()
                .map(region_of_entry),
        );
        let l = Layout::plan(image_phys(&sections()), map.end(), DirectMapPage::Gib1);
        assert_eq!(
            l.check(&map),
            Err(PvhError::NoRoom {
                needed: l.occupied()
            })
        );
    }

    /// Walk the tables as the MMU does: the physical address and the
    /// effective permissions (writable, executable) of `virt`.
    fn translate(l: &Layout, pages: &[[u64; 512]], virt: u64) -> Option<(u64, bool, bool)> {
        let page_of = |entry: u64| ((entry & pte::ADDR_MASK) - l.tables.start) / PAGE;
        let mut table = 0usize;
        let (mut w, mut x) = (true, true);
        for level in (0..4).rev() {
            let e = pages[table][((virt >> (12 + 9 * level)) & 511) as usize];
            if e & pte::PRESENT == 0 {
                return None;
            }
            w &= e & pte::WRITABLE != 0;
            x &= e & pte::NO_EXECUTE == 0;
            if level == 0 || e & pte::HUGE != 0 {
                let span = 1u64 << (12 + 9 * level);
                return Some((
                    (e & pte::ADDR_MASK & !(span - 1)) | (virt & (span - 1)),
                    w,
                    x,
                ));
            }
            table = page_of(e) as usize;
        }
        unreachable!()
    }

    #[test]
    fn page_tables_map_what_the_layout_says() {
        let s = sections();
        let shapes = [
            (0x4000_0000u64, DirectMapPage::Gib1),
            ((3 << 40) + 0x1234_5000, DirectMapPage::Gib1),
            (0x4000_0000, DirectMapPage::Mib2),
            ((1 << 40) + 0x1234_5000, DirectMapPage::Mib2),
        ];
        for (map_end, page) in shapes {
            let l = Layout::plan(image_phys(&s), map_end, page);
            let mut pages = vec![[0u64; 512]; l.nr_tables()];
            build_page_tables(&l, &s, true, &mut pages);
            // Direct map: every page of it (its first and last byte),
            // read-write, never executable.
            let step = page.bytes();
            for phys in (0..l.direct_map_end)
                .step_by(step as usize)
                .flat_map(|p| [p, p + step - 1])
                .chain([0xfee0_0000, 0x9_fc10])
            {
                assert_eq!(
                    translate(&l, &pages, DIRECT_MAP_BASE + phys),
                    Some((phys, true, false)),
                    "{phys:#x}"
                );
            }
            assert_eq!(
                translate(&l, &pages, DIRECT_MAP_BASE + l.direct_map_end),
                None
            );
            // Kernel mapping, page by page, against the sections.
            for phys in (l.image.start - 2 * PAGE..l.stack.end + 2 * PAGE).step_by(PAGE as usize) {
                let virt = KERNEL_VIRT_BASE + phys;
                let want = if s.text.contains(&virt) {
                    Some((phys, false, true))
                } else if (s.rodata.start..s.data.start).contains(&virt) {
                    Some((phys, false, false))
                } else if (s.data.start..KERNEL_VIRT_BASE + l.image.end).contains(&virt)
                    || l.stack.contains(&phys)
                {
                    Some((phys, true, false))
                } else {
                    None
                };
                assert_eq!(translate(&l, &pages, virt), want, "{virt:#x}");
            }
            assert_eq!(
                translate(&l, &pages, KERNEL_VIRT_BASE + l.guard.start),
                None
            );
            // No identity map left.
            assert_eq!(translate(&l, &pages, l.image.start), None);
        }
    }
}
