//! memboot's Linux-exact log lines: where memboot prints a line Linux also
//! prints, it must be byte-identical after the timestamp, so the dmesg
//! parsers performance engineers run on Linux read memboot's log unchanged.
//!
//! Each format below is a regex written from the Linux 6.x `pr_info`/
//! `pr_debug` string quoted beside it. Each is checked against a memboot
//! boot, where every line the selector picks must match and at least one
//! must exist, and every one Debian's kernels print also against real
//! Linux 6.1 and 6.12 boots on the same QEMU machine (tests/fixtures),
//! which proves the regex is Linux's format. The two `pr_debug` formats
//! are not in those logs and are checked on memboot's only: Debian builds
//! them as dynamic-debug sites, off by default, and `free_area_init()`
//! prints them from `setup_arch()`, before a `dyndbg=` boot option takes
//! effect (at `early_initcall`), so the stock kernel cannot be made to
//! print them.

use std::time::Duration;

use memboot_tests::boot;
use memboot_tools::serial_log::parse_stamped;
use regex::Regex;

const LINUX_LOG: &str = include_str!("../fixtures/linux-6.1-64g-2nodes.log");

/// Printed by Debian 12's 6.1 and Debian 13's 6.12 alike.
const BOTH: &[&str] = &["6.1", "6.12"];

/// (Linux source and format, selector, full-line regex, the Debian kernels
/// that print it, by series).
const FORMATS: &[(&str, &str, &str, &[&str])] = &[
    (
        r#"e820.c: pr_info("BIOS-provided physical RAM map:\n")"#,
        r"^BIOS-provided",
        r"^BIOS-provided physical RAM map:$",
        BOTH,
    ),
    (
        r#"e820.c: pr_info("%s: [mem %#018Lx-%#018Lx] ", who, ...); e820_print_type()"#,
        r"^BIOS-e820: ",
        r"^BIOS-e820: \[mem 0x[0-9a-f]{16}-0x[0-9a-f]{16}\] (usable|reserved|soft reserved|ACPI data|ACPI NVS|unusable|persistent \(type \d+\)|type \d+)$",
        BOTH,
    ),
    (
        r#"tsc.c: pr_info("Detected %lu.%03lu MHz processor\n", ...)"#,
        r"^tsc: Detected .* processor",
        r"^tsc: Detected \d+\.\d{3} MHz processor$",
        BOTH,
    ),
    (
        r#"tbprint.c: "%-4.4s 0x%8.8X%8.8X %06X (v%.2d %-6.6s %-8.8s %08X %-4.4s %08X)""#,
        r"^ACPI: (RSDT|XSDT|FACP|APIC|HPET|WAET|SRAT|DSDT) 0x",
        r"^ACPI: [A-Z0-9]{4} 0x[0-9A-F]{16} [0-9A-F]{6} \(v\d{2} .{6} .{8} [0-9A-F]{8} .{4} [0-9A-F]{8}\)$",
        BOTH,
    ),
    (
        r#"tbprint.c: "RSDP 0x%8.8X%8.8X %06X (v%.2d %-6.6s)""#,
        r"^ACPI: RSDP ",
        r"^ACPI: RSDP 0x[0-9A-F]{16} [0-9A-F]{6} \(v\d{2} .{6}\)$",
        BOTH,
    ),
    (
        r#"smpboot.c: pr_info("Allowing %d CPUs, %d hotplug CPUs\n", ...)"#,
        r"^smpboot: Allowing",
        r"^smpboot: Allowing \d+ CPUs, \d+ hotplug CPUs$",
        // 6.9 replaced it (arch/x86/kernel/cpu/topology.c): "CPU topo:
        // Allowing %u present CPUs plus %u hotplug CPUs".
        &["6.1"],
    ),
    (
        r#"kernel/smp.c: pr_info("Brought up %d node%s, %d CPU%s\n", ...)"#,
        r"^smp: Brought up",
        r"^smp: Brought up (1 node|\d+ nodes), (1 CPU|\d+ CPUs)$",
        BOTH,
    ),
    (
        r#"mm_init.c: pr_info("Zone ranges:\n")"#,
        r"^Zone ranges",
        r"^Zone ranges:$",
        BOTH,
    ),
    (
        r#"mm_init.c: pr_info("  %-8s [mem %#018Lx-%#018Lx]\n" / "  %-8s empty\n", zone_names[i], ...)"#,
        r"^  (DMA|DMA32|Normal|Movable|Device) +(\[|empty)",
        r"^  (DMA {6}|DMA32 {4}|Normal {3}|Movable {2}|Device {3})(\[mem 0x[0-9a-f]{16}-0x[0-9a-f]{16}\]|empty)$",
        BOTH,
    ),
    (
        r#"mm_init.c: pr_info("Movable zone start for each node\n")"#,
        r"^Movable zone",
        r"^Movable zone start for each node$",
        BOTH,
    ),
    (
        r#"mm_init.c: pr_info("Early memory node ranges\n")"#,
        r"^Early memory",
        r"^Early memory node ranges$",
        BOTH,
    ),
    (
        r#"mm_init.c: pr_info("  node %3d: [mem %#018Lx-%#018Lx]\n", ...)"#,
        r"^  node ",
        r"^  node ( {2}\d| \d{2}|\d{3}): \[mem 0x[0-9a-f]{16}-0x[0-9a-f]{16}\]$",
        BOTH,
    ),
    (
        r#"mm_init.c: pr_info("Initmem setup node %d [mem %#018Lx-%#018Lx]\n", ...)"#,
        r"^Initmem setup",
        r"^Initmem setup node \d+ \[mem 0x[0-9a-f]{16}-0x[0-9a-f]{16}\]$",
        BOTH,
    ),
    (
        r#"page_alloc.c: pr_info("On node %d, zone %s: %lld pages in unavailable ranges", ...)"#,
        r"^On node \d+, zone",
        r"^On node \d+, zone (DMA|DMA32|Normal|Movable): \d+ pages in unavailable ranges$",
        BOTH,
    ),
    (
        r#"page_alloc.c: pr_debug("On node %d totalpages: %lu\n", ...)"#,
        r"^On node \d+ totalpages",
        r"^On node \d+ totalpages: \d+$",
        &[],
    ),
    (
        r#"page_alloc.c: pr_debug("  %s zone: %lu pages used for memmap\n") / pr_debug("  %s zone: %lu pages, LIFO batch:%u\n", ...)"#,
        r"^  (DMA|DMA32|Normal|Movable) zone: ",
        r"^  (DMA|DMA32|Normal|Movable) zone: \d+ (pages used for memmap|pages, LIFO batch:\d+)$",
        &[],
    ),
    (
        r#"page_alloc.c: pr_info("Memory: %luK/%luK available (%luK kernel code, %luK rwdata, %luK rodata, %luK init, %luK bss, %luK reserved, %luK cma-reserved%s%s)\n", ...)"#,
        r"^Memory: ",
        r"^Memory: \d+K/\d+K available \(\d+K kernel code, \d+K rwdata, \d+K rodata, \d+K init, \d+K bss, \d+K reserved, \d+K cma-reserved\)$",
        BOTH,
    ),
    (
        r#"page_alloc.c: pr_info("node %d deferred pages initialised in %ums\n", ...)"#,
        r"^node \d+ deferred",
        r"^node \d+ deferred pages initialised in \d+ms$",
        BOTH,
    ),
    (
        r#"arch/x86/mm/init_64.c: pr_info("x86/mm: Memory block size: %ldMB\n", ...)"#,
        r"^x86/mm: Memory block size",
        r"^x86/mm: Memory block size: \d+MB$",
        BOTH,
    ),
];

/// Messages (after the stamp) that the selector picks.
fn selected<'a>(messages: &'a [String], selector: &Regex) -> Vec<&'a str> {
    messages
        .iter()
        .map(String::as_str)
        .filter(|m| selector.is_match(m))
        .collect()
}

/// Every format `debian` prints (`Some(series)`), or every format (`None`:
/// memboot prints them all).
fn check(what: &str, messages: &[String], debian: Option<&str>) {
    for &(source, selector, format, printed_by) in FORMATS {
        if debian.is_some_and(|series| !printed_by.contains(&series)) {
            continue;
        }
        let (selector, format) = (Regex::new(selector).unwrap(), Regex::new(format).unwrap());
        let lines = selected(messages, &selector);
        assert!(!lines.is_empty(), "{what}: no line for {source}");
        for line in lines {
            assert!(
                format.is_match(line),
                "{what}: not Linux's format ({source}):\n{line:?}"
            );
        }
    }
}

fn messages(log: &str) -> Vec<String> {
    log.lines()
        .filter_map(|l| parse_stamped(l.trim_end_matches('\r')))
        .map(|(_, m)| m)
        .collect()
}

#[test]
fn the_formats_are_linux_6_1s() {
    let console = &LINUX_LOG[..LINUX_LOG.find("linux-peer: dmesg begin").unwrap()];
    check("Linux 6.1", &messages(console), Some("6.1"));
}

/// Debian 13's 6.12 (the bench's current peer) prints them the same way.
#[test]
fn and_linux_6_12s() {
    let log = include_str!("../fixtures/linux-6.12-16g-2nodes.log");
    check("Linux 6.12", &messages(log), Some("6.12"));
}

#[test]
fn memboot_prints_them_byte_for_byte() {
    // Two nodes so the per-node lines repeat; ondemand and deferred print
    // the same early lines, deferred adds the per-node deferred-init line.
    let b = boot(
        &["-m", "2G", "--smp", "2", "--nodes", "2"],
        &["verify=off"],
        Duration::from_secs(300),
    );
    assert_eq!(b.run.exit_code, 0, "{}", b.describe());
    let msgs: Vec<String> = b.lines.iter().map(|(_, m)| m.clone()).collect();
    check("memboot", &msgs, None);
    // The format allows 0K; the image has code, so its size must show.
    let memory = msgs.iter().find(|m| m.starts_with("Memory: ")).unwrap();
    let code_kib: u64 = memory
        .split(" (")
        .nth(1)
        .and_then(|r| r.split("K kernel code").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{memory}"));
    assert!(
        code_kib > 0,
        "the kernel image's code size is missing: {memory}"
    );
}
