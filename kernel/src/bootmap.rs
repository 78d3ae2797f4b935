//! The bootloader's memory map, classified once.
//!
//! `bootloader_api` reports each region as `Usable`, `Bootloader` (the
//! kernel image, page tables, boot info: RAM in use) or the firmware's own
//! type number (`UnknownBios(e820 type)`, `UnknownUefi(EFI memory type)`).
//! [`region_kind`] is the only place that turns those into memmap's
//! [`RegionKind`]; the memory-map printout, the usable-RAM count and
//! memblock all follow it. The map is printed as Linux prints it
//! ([`E820Line`]), plus memboot's own [`BootloaderLine`]s.

use alloc::vec::Vec;
use core::fmt;

use bootloader_api::info::{MemoryRegion, MemoryRegionKind};
use memmap::firmware::{FirmwareEntry, RegionKind};
use memmap::user_map;

/// e820 types (ACPI 6.5 §15.1 / Linux `enum e820_type`).
const E820_RAM: u32 = 1;
const E820_ACPI: u32 = 3;
const E820_NVS: u32 = 4;
const E820_UNUSABLE: u32 = 5;
/// Persistent memory: Linux prints these as `persistent (type N)`.
const E820_PMEM: u32 = 7;
const E820_PRAM: u32 = 12;
/// EFI memory types (UEFI 2.10 §7.2, `EFI_MEMORY_TYPE`).
const EFI_CONVENTIONAL_MEMORY: u32 = 7;
const EFI_UNUSABLE_MEMORY: u32 = 8;
const EFI_ACPI_RECLAIM_MEMORY: u32 = 9;
const EFI_ACPI_MEMORY_NVS: u32 = 10;

/// What a bootloader region is, for memblock. Firmware types that describe
/// free RAM (e820 type 1, EFI conventional memory) are usable whichever way
/// the bootloader passed them; every type not named here is reserved.
pub const fn region_kind(kind: MemoryRegionKind) -> RegionKind {
    match kind {
        MemoryRegionKind::Usable => RegionKind::Usable,
        MemoryRegionKind::Bootloader => RegionKind::Bootloader,
        MemoryRegionKind::UnknownBios(t) => match t {
            E820_RAM => RegionKind::Usable,
            E820_ACPI => RegionKind::AcpiReclaimable,
            E820_NVS => RegionKind::AcpiNvs,
            E820_UNUSABLE => RegionKind::Unusable,
            _ => RegionKind::Reserved,
        },
        MemoryRegionKind::UnknownUefi(t) => match t {
            EFI_CONVENTIONAL_MEMORY => RegionKind::Usable,
            EFI_ACPI_RECLAIM_MEMORY => RegionKind::AcpiReclaimable,
            EFI_ACPI_MEMORY_NVS => RegionKind::AcpiNvs,
            EFI_UNUSABLE_MEMORY => RegionKind::Unusable,
            _ => RegionKind::Reserved,
        },
        // `MemoryRegionKind` is non-exhaustive: a kind a newer bootloader
        // adds is not known to be RAM, so it must not be handed out.
        _ => RegionKind::Reserved,
    }
}

/// Linux's e820 name of a kind (arch/x86/kernel/e820.c `e820_print_type()`):
/// the bootloader's own regions are RAM in the firmware's map (`usable`);
/// memboot marks them in a line of its own ([`BootloaderLine`]).
const fn e820_kind_name(kind: RegionKind) -> &'static str {
    user_map::type_name(user_map::e820_type(kind))
}

/// The kind an e820 name in memboot's (or Linux's) map stands for, for tools
/// and tests that read the log: `usable` is free RAM (the `bootloader:`
/// lines then mark what the bootloader occupies), and Linux's names for
/// types memboot reserves (`type N`, `persistent (type N)`) are reserved.
pub fn kind_of_e820_name(name: &str) -> Option<RegionKind> {
    if name.starts_with("type ") || name.starts_with("persistent (type ") {
        return Some(RegionKind::Reserved);
    }
    [
        RegionKind::Usable,
        RegionKind::AcpiReclaimable,
        RegionKind::AcpiNvs,
        RegionKind::Reserved,
        RegionKind::Unusable,
    ]
    .into_iter()
    .find(|&k| e820_kind_name(k) == name)
}

/// One region as Linux prints the firmware map, byte for byte after the
/// timestamp: `BIOS-e820: [mem %#018Lx-%#018Lx] usable` (e820.c
/// `e820__print_table()`), with Linux's `type N` / `persistent (type N)` for
/// e820 types it has no name for.
pub struct E820Line<'a>(pub &'a MemoryRegion);

impl fmt::Display for E820Line<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.0;
        write!(
            f,
            "BIOS-e820: [mem {:#018x}-{:#018x}] ",
            r.start,
            r.end.saturating_sub(1)
        )?;
        match r.kind {
            MemoryRegionKind::UnknownBios(t @ (E820_PMEM | E820_PRAM)) => {
                write!(f, "persistent (type {t})")
            }
            MemoryRegionKind::UnknownBios(t) if t > E820_UNUSABLE => write!(f, "type {t}"),
            kind => f.write_str(e820_kind_name(region_kind(kind))),
        }
    }
}

/// memboot's own line for a region the bootloader occupies (RAM that
/// memblock reserves): `bootloader: [mem start-end] in use (…)`.
pub struct BootloaderLine<'a>(pub &'a MemoryRegion);

impl fmt::Display for BootloaderLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "bootloader: [mem {:#018x}-{:#018x}] in use (kernel image, page tables, boot info)",
            self.0.start,
            self.0.end.saturating_sub(1)
        )
    }
}

/// The map as memblock input.
pub fn firmware_entries(regions: &[MemoryRegion]) -> Vec<FirmwareEntry> {
    regions
        .iter()
        .map(|r| FirmwareEntry::new(r.start, r.end.saturating_sub(r.start), region_kind(r.kind)))
        .collect()
}

/// Heap the kernel gives itself for a machine whose memory map ends at
/// `max_end` bytes, with up to `nr_cpus` CPUs: a fixed part for ACPI, the
/// options and the report, 64 KiB + 96 KiB of stacks per CPU (kernel and
/// IST stacks of the APs), and 160 bytes per 128 MiB section of the map's
/// span for the per-section tables (deferred-init pieces and claim
/// counters, the pageblock bits, the present-section set, verification's
/// scan list). Sized so that the host-measured peak of the pipeline stays
/// below half of it (kernel/tests/host_heap.rs).
pub const fn heap_bytes(max_end: u64, nr_cpus: usize) -> u64 {
    const FIXED: u64 = 16 << 20;
    const PER_CPU: u64 = 160 << 10;
    const PER_SECTION: u64 = 160;
    let sections = max_end.div_ceil(1 << memmap::SECTION_SIZE_BITS);
    (FIXED + PER_CPU * nr_cpus as u64 + PER_SECTION * sections).next_multiple_of(2 << 20)
}

/// What the heap adds for the buddy allocator's free bitmaps when the
/// options keep free blocks there (`buddy=bitmaps`, the 8-byte struct
/// page's store), over a map ending at `max_end` bytes with `nr_nodes`
/// nodes.
pub const fn bitmap_heap_bytes(max_end: u64, nr_nodes: u64) -> u64 {
    deferred_init::free_bitmap_bytes(max_end >> 12, nr_nodes).next_multiple_of(2 << 20)
}

/// Where the kernel heap of `bytes` goes in `regions` (sorted by start),
/// as `(start, room)`: `room` is how far it may later grow upwards, from
/// `start` to the end of its region.
///
/// Right after the bootloader's last region when the usable region that
/// follows it has room: the bootloader already wrote the 2 MiB page that
/// region starts in, so the heap's first allocations, all made before
/// memory is ready, land in memory the host has already faulted in (QEMU
/// backs guest RAM lazily with 2 MiB pages, and on a host that hands
/// freed memory back to its own hypervisor each fresh 2 MiB costs
/// milliseconds). Otherwise at the start of the largest usable region,
/// 2 MiB aligned. `None` when no usable region has `min_bytes`.
pub fn heap_place(regions: &[MemoryRegion], bytes: u64, min_bytes: u64) -> Option<(u64, u64)> {
    let after_bootloader = regions
        .iter()
        .rposition(|r| r.kind == MemoryRegionKind::Bootloader)
        .and_then(|i| {
            let (loader, next) = (&regions[i], regions.get(i + 1)?);
            (next.kind == MemoryRegionKind::Usable && next.start == loader.end)
                .then(|| (next.start.next_multiple_of(4096), next.end))
        })
        .filter(|&(start, end)| end.saturating_sub(start) >= bytes);
    let largest = || {
        let r = largest_usable(regions)?;
        Some((r.start.next_multiple_of(2 << 20), r.end))
    };
    let (start, end) = after_bootloader.or_else(largest)?;
    let room = end.saturating_sub(start);
    (room >= min_bytes).then_some((start, room))
}

/// How far memory in use at `[base, top)` may grow upwards in `map`: to
/// the end of the usable entry that holds it, or to the first region in
/// use above it (a firmware map may list the bootloader's regions over the
/// usable RAM they sit in); 0 if no usable entry holds it.
pub fn room_above(map: &[FirmwareEntry], base: u64, top: u64) -> u64 {
    let end = |e: &FirmwareEntry| e.start + e.len_bytes;
    let Some(ram_end) = map
        .iter()
        .find(|e| e.kind == RegionKind::Usable && e.start <= base && top <= end(e))
        .map(end)
    else {
        return 0;
    };
    let in_use_above = map
        .iter()
        .filter(|e| e.kind != RegionKind::Usable && end(e) > top && e.start < ram_end)
        .map(|e| e.start.max(top))
        .min()
        .unwrap_or(ram_end);
    in_use_above - top
}

/// The largest usable region of `regions`.
pub fn largest_usable(regions: &[MemoryRegion]) -> Option<&MemoryRegion> {
    regions
        .iter()
        .filter(|r| r.kind == MemoryRegionKind::Usable)
        .max_by_key(|r| r.end - r.start)
}

/// RAM in the map: free frames plus those the bootloader occupies.
pub fn ram_bytes(regions: &[MemoryRegion]) -> u64 {
    regions
        .iter()
        .filter(|r| region_kind(r.kind).is_ram())
        .map(|r| r.end.saturating_sub(r.start))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heap_grows_to_its_ram_end_or_the_next_region_in_use() {
        use RegionKind::*;
        let e = FirmwareEntry::new;
        // A user map: usable entries merged, the bootloader's listed over them.
        let map = [
            e(0x100000, 0x3ff00000, Usable),
            e(0x1000000, 0x400000, Bootloader),
            e(0x3000000, 0x100000, Bootloader),
        ];
        assert_eq!(
            room_above(&map, 0x1400000, 0x2400000),
            0x3000000 - 0x2400000
        );
        assert_eq!(
            room_above(&map, 0x3100000, 0x3200000),
            0x40000000 - 0x3200000
        );
        assert_eq!(room_above(&map, 0x40000000, 0x40001000), 0, "not in RAM");
    }

    fn region(start: u64, end: u64, kind: MemoryRegionKind) -> MemoryRegion {
        MemoryRegion { start, end, kind }
    }

    /// The 59T boot's map (boots/59T-16nodes-ondemand.log), cut down.
    fn bios_map_59t() -> Vec<MemoryRegion> {
        use MemoryRegionKind::*;
        alloc::vec![
            region(0, 0x9fc00, Usable),
            region(0x100000, 0x1000000, Usable),
            region(0x1000000, 0x13ab000, Bootloader),
            region(0x13ab000, 0x13ac000, Usable),
            region(0x13ac000, 0x10565000, Bootloader),
            region(0x10565000, 0xbffac000, Usable),
            region(0xbffac000, 0xc0000000, UnknownBios(2)),
            region(0x100_0000_0000, 0x3bff_4000_0000, Usable),
        ]
    }

    #[test]
    fn the_heap_starts_where_the_bootloader_stopped() {
        let map = bios_map_59t();
        // 92 MiB fits in the 2.8 GiB after the bootloader: no 2 MiB
        // alignment, so its first bytes share the bootloader's last page.
        assert_eq!(
            heap_place(&map, 92 << 20, 4 << 20),
            Some((0x10565000, 0xbffac000 - 0x10565000))
        );
    }

    #[test]
    fn a_heap_too_big_for_the_gap_goes_to_the_largest_region() {
        let map = bios_map_59t();
        let (start, room) = heap_place(&map, 4 << 30, 4 << 20).unwrap();
        assert_eq!(start, 0x100_0000_0000);
        assert_eq!(room, 0x3bff_4000_0000 - 0x100_0000_0000);
        // Nothing after the bootloader (UEFI maps put it high): the largest.
        let mut map = bios_map_59t();
        map.retain(|r| r.start != 0x10565000);
        assert_eq!(
            heap_place(&map, 1 << 20, 1 << 20).unwrap().0,
            0x100_0000_0000
        );
        // The largest region's start is rounded up to 2 MiB.
        let map = [region(0x1000, 0x80_0000, MemoryRegionKind::Usable)];
        assert_eq!(
            heap_place(&map, 1 << 20, 1 << 20),
            Some((0x20_0000, 0x60_0000))
        );
    }

    #[test]
    fn only_usable_ram_right_after_the_bootloader_counts_as_after_it() {
        use MemoryRegionKind::*;
        // Reserved memory right after the bootloader, usable RAM after a
        // gap: neither is "after the bootloader"; the largest usable
        // region wins, the larger one though it lies lower.
        let map = [
            region(0x100000, 0x1000000, Bootloader),
            region(0x1000000, 0x1200000, UnknownBios(2)),
            region(0x1400000, 0x1600000, Usable),
            region(0x4000_0000, 0x8000_0000, Usable),
            region(0x1_0000_0000, 0x1_2000_0000, Usable),
        ];
        assert_eq!(
            heap_place(&map, 1 << 20, 1 << 20),
            Some((0x4000_0000, 0x4000_0000))
        );
    }

    #[test]
    fn no_heap_below_the_minimum() {
        let map = [region(0x1000, 0x30_0000, MemoryRegionKind::Usable)];
        assert_eq!(heap_place(&map, 16 << 20, 4 << 20), None);
        assert_eq!(heap_place(&[], 16 << 20, 4 << 20), None);
    }

    #[test]
    fn firmware_types_map_to_the_same_kinds_bios_and_uefi() {
        use MemoryRegionKind::*;
        for (bios, uefi, kind) in [
            (1, 7, RegionKind::Usable),
            (3, 9, RegionKind::AcpiReclaimable),
            (4, 10, RegionKind::AcpiNvs),
            (5, 8, RegionKind::Unusable),
            (2, 0, RegionKind::Reserved),
            (7, 11, RegionKind::Reserved),
        ] {
            assert_eq!(region_kind(UnknownBios(bios)), kind, "e820 type {bios}");
            assert_eq!(region_kind(UnknownUefi(uefi)), kind, "EFI type {uefi}");
        }
        assert_eq!(region_kind(Usable), RegionKind::Usable);
        assert_eq!(region_kind(Bootloader), RegionKind::Bootloader);
    }

    #[test]
    fn e820_lines_as_linux_prints_them() {
        use MemoryRegionKind::*;
        let line = |start, end, kind| alloc::format!("{}", E820Line(&region(start, end, kind)));
        // Linux 6.1 on the same QEMU machine (tests/fixtures/linux-6.1-64g-2nodes.log):
        assert_eq!(
            line(0, 0x9fc00, Usable),
            "BIOS-e820: [mem 0x0000000000000000-0x000000000009fbff] usable"
        );
        assert_eq!(
            line(0x9fc00, 0xa0000, UnknownBios(2)),
            "BIOS-e820: [mem 0x000000000009fc00-0x000000000009ffff] reserved"
        );
        // The bootloader's regions are RAM in the firmware's map.
        assert!(line(0x1000, 0x3000, Bootloader).ends_with("] usable"));
        assert!(line(0, 0x1000, UnknownBios(3)).ends_with("] ACPI data"));
        assert!(line(0, 0x1000, UnknownBios(4)).ends_with("] ACPI NVS"));
        assert!(line(0, 0x1000, UnknownBios(5)).ends_with("] unusable"));
        assert!(line(0, 0x1000, UnknownBios(12)).ends_with("] persistent (type 12)"));
        assert!(line(0, 0x1000, UnknownBios(13)).ends_with("] type 13"));
        assert!(line(0, 0x1000, UnknownUefi(9)).ends_with("] ACPI data"));
        assert_eq!(
            alloc::format!("{}", BootloaderLine(&region(0x1000, 0x3000, Bootloader))),
            "bootloader: [mem 0x0000000000001000-0x0000000000002fff] in use (kernel image, page tables, boot info)"
        );
    }

    #[test]
    fn e820_names_read_back_to_kinds() {
        use MemoryRegionKind::*;
        for kind in [
            Usable,
            UnknownBios(2),
            UnknownBios(3),
            UnknownBios(4),
            UnknownBios(5),
            UnknownBios(7),
            UnknownBios(13),
        ] {
            let text = alloc::format!("{}", E820Line(&region(0, 0x1000, kind)));
            let name = text.split("] ").nth(1).unwrap();
            assert_eq!(kind_of_e820_name(name), Some(region_kind(kind)), "{text}");
        }
        assert_eq!(kind_of_e820_name("usable (bootloader)"), None);
    }

    #[test]
    fn ram_counts_usable_and_bootloader_only() {
        let map = [
            region(0, 0x1000, MemoryRegionKind::Usable),
            region(0x1000, 0x3000, MemoryRegionKind::Bootloader),
            region(0x3000, 0x4000, MemoryRegionKind::UnknownBios(1)),
            region(0x4000, 0x8000, MemoryRegionKind::UnknownBios(3)),
        ];
        assert_eq!(ram_bytes(&map), 0x4000);
        let e = firmware_entries(&map);
        assert_eq!(
            e[3],
            FirmwareEntry::new(0x4000, 0x4000, RegionKind::AcpiReclaimable)
        );
    }
}
