//! The boot report the boot CPU holds back while it works alone: the
//! firmware's memory map, the ACPI tables and CPUs, the NUMA nodes (the
//! lines Linux prints at that point of its boot), the huge-page
//! parameters read (`HugeTLB:` lines) and the `memboot-input:`
//! line (README "Output"), which lets a log replay the boot (kernel/tests).
//!
//! Each part is kept as soon as it is known ([`keep_memory_map`],
//! [`keep_acpi`], [`keep_input`]) and all of them are printed once, in that
//! order, by [`print_once`], at the first of:
//!
//! * the end of the boot CPU's work alone: the pipeline's `CpuBringup::start`
//!   (after memory is ready with `memmap=ondemand`, before the eager phase
//!   otherwise), right before the APs start;
//! * a failure or panic before that (`hw::boot::finish`'s `fail_with` and
//!   `finish`), so the log of a failed boot has whatever was known.
//!
//! Why not when each part is read: formatting these lines runs code for the
//! first time, and under TCG every such instruction costs about a
//! microsecond to translate; nothing in memory init reads them, so before
//! memory is ready they would only put milliseconds on the clock
//! (tests/first-run-code.sh counts the distinct instructions the boot CPU
//! runs before memory is ready).

use core::sync::atomic::{AtomicBool, Ordering};

use alloc::vec::Vec;
use bootloader_api::info::{MemoryRegion, MemoryRegionKind};
use memboot_contract::hugepage_forms::HugePlan;
use memboot_contract::memmap_forms::E820_RAM;
use memboot_kernel::acpi::AcpiInfo;
use memboot_kernel::boot_input::{write_input_line, BootInput};
use memboot_kernel::bootmap::{BootloaderLine, E820Line};
use memboot_kernel::node_ram;
use memmap::firmware::FirmwareEntry;
use memmap::user_map::{E820Entry, LeftOutLine, UserLine, UserMap, USER_MAP_HEADING};

use crate::hw::serial;

/// The firmware map, with the usable RAM in it (bytes) as the boot summed it.
static MEMORY_MAP: spin::Once<(&'static [MemoryRegion], u64)> = spin::Once::new();
static ACPI: spin::Once<(AcpiInfo, Vec<FirmwareEntry>)> = spin::Once::new();
/// The user-defined map (`memmap=` forms) as printed.
struct KeptUserMap {
    e820: Vec<E820Entry>,
    /// The declared ranges left out of it.
    left_out: Vec<(u64, u64)>,
    /// Its usable RAM.
    ram: u64,
}

static USER_MAP: spin::Once<KeptUserMap> = spin::Once::new();
static INPUT: spin::Once<BootInput> = spin::Once::new();
/// The command line's huge-page parameters, read.
static HUGETLB: spin::Once<HugePlan> = spin::Once::new();
static PRINTED: AtomicBool = AtomicBool::new(false);

/// Keep the firmware's memory map for its lines.
pub fn keep_memory_map(regions: &'static [MemoryRegion], mem_bytes: u64) {
    MEMORY_MAP.call_once(|| (regions, mem_bytes));
}

/// Keep the user-defined map and what was left out of it for their
/// lines; returns its usable RAM and the map memblock gets.
pub fn keep_user_map(user: UserMap) -> (u64, Vec<FirmwareEntry>) {
    let UserMap {
        e820,
        map,
        left_out,
    } = user;
    let ram = e820
        .iter()
        .filter(|e| e.kind == E820_RAM)
        .map(|e| e.size)
        .sum();
    let kept = USER_MAP.call_once(|| KeptUserMap {
        e820,
        left_out,
        ram,
    });
    (kept.ram, map)
}

/// Keep what ACPI said, with the firmware map its node lines sum RAM from;
/// returns the kept info (the first call's: there is one per boot).
pub fn keep_acpi(info: AcpiInfo, map: &[FirmwareEntry]) -> &'static AcpiInfo {
    &ACPI.call_once(|| (info, map.to_vec())).0
}

/// Keep the huge-page plan for its lines: what was ignored, then a line
/// per size.
pub fn keep_hugetlb(plan: HugePlan) {
    HUGETLB.call_once(|| plan);
}

/// Keep the pipeline's input for the `memboot-input:` line.
pub fn keep_input(input: BootInput) -> &'static BootInput {
    INPUT.call_once(|| input)
}

/// Print what was kept, once.
pub fn print_once() {
    if PRINTED.swap(true, Ordering::AcqRel) {
        return;
    }
    if let Some(&(regions, mem_bytes)) = MEMORY_MAP.get() {
        print_memory_map(regions, mem_bytes);
    }
    if let Some(user) = USER_MAP.get() {
        print_user_map(user);
    }
    if let Some((info, map)) = ACPI.get() {
        print_acpi(info);
        print_nodes(info, map);
    }
    if let Some(plan) = HUGETLB.get() {
        print_hugetlb(plan);
    }
    if let Some(input) = INPUT.get() {
        print_input_line(input);
    }
}

/// The firmware's map as Linux prints it (`BIOS-provided physical RAM map:`
/// and `BIOS-e820:` lines), memboot's lines for the regions the bootloader
/// occupies, and the usable RAM the summary reports.
fn print_memory_map(regions: &[MemoryRegion], mem_bytes: u64) {
    kprintln!("BIOS-provided physical RAM map:");
    for r in regions.iter() {
        kprintln!("{}", E820Line(r));
    }
    for r in regions
        .iter()
        .filter(|r| r.kind == MemoryRegionKind::Bootloader)
    {
        kprintln!("{}", BootloaderLine(r));
    }
    kprintln!(
        // Not Linux's `Memory:` line (that one comes after the buddy
        // hand-off): memboot's own prefix, so a dmesg parser finds one `Memory:`.
        "memboot: {}K usable RAM ({} MiB) in the firmware map",
        mem_bytes >> 10,
        mem_bytes >> 20
    );
}

/// The user-defined map as Linux prints it, a warning for each declared
/// range left out of it, and its usable RAM (what the summary's
/// `mem_bytes` reports then).
fn print_user_map(user: &KeptUserMap) {
    kprintln!("{USER_MAP_HEADING}");
    for e in &user.e820 {
        kprintln!("{}", UserLine(e));
    }
    for &range in &user.left_out {
        kprintln!("{}", LeftOutLine(range));
    }
    let ram = user.ram;
    kprintln!(
        "memboot: {}K usable RAM ({} MiB) in the user-defined map",
        ram >> 10,
        ram >> 20
    );
}

/// What of the huge-page parameters Linux would ignore, in its words, and
/// what the command line asks of each size (the pipeline reserves the
/// 1 GiB pages and takes the 2 MiB pages once memory is ready).
fn print_hugetlb(plan: &HugePlan) {
    for w in &plan.warnings {
        kprintln!("{w}");
    }
    for size in &plan.sizes {
        kprintln!("{size}");
    }
}

/// The tables, CPUs and SRAT ranges as Linux prints them, and what ACPI
/// lacked.
fn print_acpi(info: &AcpiInfo) {
    for line in info.report_lines() {
        kprintln!("{line}");
    }
    for w in &info.warnings {
        kprintln!("ACPI: Warning: {w}");
    }
    if !info.has_madt {
        kprintln!("ACPI: no valid MADT: only the boot CPU is known");
    }
}

/// One line per NUMA node: its usable RAM (`node_ram`: the map's RAM in
/// the node's SRAT ranges) and the CPUs SRAT puts there, then its ranges.
fn print_nodes(info: &AcpiInfo, map: &[FirmwareEntry]) {
    let nr_nodes = info.node_count();
    let srat = info.memory_affinity();
    let ram = node_ram::ram_bytes_per_node(map, srat.as_deref(), nr_nodes as usize);
    for (node, node_bytes) in (0..nr_nodes).zip(ram) {
        let cpus: Vec<u32> = info
            .cpus
            .iter()
            .filter(|c| c.enabled && c.node == node)
            .map(|c| c.apic_id)
            .collect();
        kprintln!(
            "NUMA: node {node}: {} MiB usable RAM, {} CPUs (APIC ids {:?})",
            node_bytes >> 20,
            cpus.len(),
            cpus
        );
        for a in srat.iter().flatten().filter(|a| a.nid == node) {
            kprintln!(
                "NUMA:   [mem {:#018x}-{:#018x}] -> node {node}",
                a.start,
                a.start + a.len_bytes - 1
            );
        }
    }
}

/// The pipeline's input as one unstamped line.
fn print_input_line(input: &BootInput) {
    if let Some(Err(core::fmt::Error)) =
        serial::raw_line_with(|mut line| write_input_line(&mut line, input))
    {
        kprintln!("memboot: formatting the memboot-input line failed part-way, so the line above is cut and this log cannot be replayed; report it with this log");
    }
}
