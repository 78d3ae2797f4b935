//! The Linux-log parser on real boots of the bench's peers, captured for
//! these tests: Debian 12's 6.1 (`run-qemu.sh --linux … -m 64G --smp 2
//! --nodes 2`) and Debian 13's 6.12 (`-m 16G --nodes 2`; the peer's dmesg
//! dump, a second copy of the console lines, cut out), and cut-off copies.
//! Expectations are the figures read off the fixtures by hand (line numbers
//! in the comments).

use memboot_tools::linux_log::{parse, series_of_release, LinuxLogError};

const LOG: &str = include_str!("../../tests/fixtures/linux-6.1-64g-2nodes.log");
const LOG_6_12: &str = include_str!("../../tests/fixtures/linux-6.12-16g-2nodes.log");

#[test]
fn real_linux_6_1_log() {
    let boot = parse(LOG).expect("the fixture is a whole boot");
    // line 55: [    0.072481] Zone ranges:
    assert_eq!(boot.zone_ranges_ns, 72_481_000);
    // line 70 is the last "On node 0, zone Normal: 32 pages in unavailable
    // ranges" (0.234842); line 71, the next one, is stamped 0.241430.
    assert_eq!(boot.early_memmap_ns, 241_430_000 - 72_481_000);
    // lines 267-268: node 0 … in 1232ms (3.044117), node 1 … in 1460ms (3.279735)
    assert_eq!(boot.node_deferred_ms, vec![(0, 1232), (1, 1460)]);
    assert_eq!(boot.deferred_ms(), 1460);
    assert_eq!(boot.last_deferred_ns, 3_279_735_000);
    // line 266: [    1.803691] smpboot: Total of 2 processors activated,
    // then only the two node lines: 3.279735 - 1.803691 at printk resolution.
    assert_eq!(boot.deferred_printk_ns, Some(3_279_735_000 - 1_803_691_000));
    // line 269, right after: [    3.307402] devtmpfs: initialized
    assert_eq!(boot.allocatable_ns, 3_307_402_000);
    // The machine's RAM: 0-0xbffdffff and 4 GiB-0x103fffffff (lines 7 and
    // 10), 3 GiB + 61 GiB = 64 GiB in 512 sections of 128 MiB, every one
    // present: Linux writes the struct page of each of their 16,777,216
    // pages (present pages plus the 1 + 97 + 32 in unavailable ranges).
    assert_eq!(boot.pages_initialised, Some(64 << 30 >> 12));
    // line 1798: [    4.847340] Run /init as init process
    assert_eq!(boot.init_started_ns, 4_847_340_000);
    assert_eq!(boot.tsc_mhz, Some(2596.128));
    assert_eq!(boot.host_peak_rss_mib, Some(1446));
    // line 5: Linux version 6.1.0-…-amd64
    assert_eq!(boot.series(), Some("6.1"));
}

#[test]
fn real_linux_6_12_log() {
    let boot = parse(LOG_6_12).expect("the fixture is a whole boot");
    // line 5: Linux version 6.12.117+deb13-amd64 (debian-kernel@…)
    assert_eq!(boot.release.as_deref(), Some("6.12.117+deb13-amd64"));
    assert_eq!(boot.series(), Some("6.12"));
    // line 58: [    0.263614] Zone ranges:
    assert_eq!(boot.zone_ranges_ns, 263_614_000);
    // line 73 is the last "On node 0, zone Normal: 32 pages in unavailable
    // ranges" (0.586133); line 74, the next one, is stamped 0.606677.
    assert_eq!(boot.early_memmap_ns, 606_677_000 - 263_614_000);
    // lines 293-294: node 0 … in 268ms (4.074460), node 1 … in 648ms (4.460768)
    assert_eq!(boot.node_deferred_ms, vec![(0, 268), (1, 648)]);
    assert_eq!(boot.last_deferred_ns, 4_460_768_000);
    // line 292: [    3.786913] smpboot: Total of 2 processors activated.
    assert_eq!(boot.deferred_printk_ns, Some(4_460_768_000 - 3_786_913_000));
    // A line between SMP's last and the node lines: no printk figure.
    let other = LOG_6_12.replacen(
        "[    4.074460] node 0",
        "[    3.900000] random: crng init done\n[    4.074460] node 0",
        1,
    );
    assert_eq!(parse(&other).unwrap().deferred_printk_ns, None);
    // line 296: [    4.513697] devtmpfs: initialized; 6.12 prints the
    // Memory: line (295) between it and the deferred-init lines.
    assert_eq!(boot.allocatable_ns, 4_513_697_000);
    // 0-0xbffdffff and 4 GiB-0x43fffffff (lines 10 and 13): 3 + 13 GiB, all
    // present (line 295: 16776696K) with the 1 + 97 + 32 pages in
    // unavailable ranges (lines 71-73).
    assert_eq!(boot.present_pages, Some(16_776_696 / 4));
    assert_eq!(boot.pages_initialised, Some(16 << 30 >> 12));
    // line 1962: [    8.684173] Run /init as init process
    assert_eq!(boot.init_started_ns, 8_684_173_000);
    assert_eq!(boot.tsc_mhz, Some(2245.780));
    assert_eq!(boot.host_peak_rss_mib, Some(659));
}

#[test]
fn a_release_names_its_series() {
    for (release, series) in [
        ("6.1.0-57-amd64", Some("6.1")),
        ("6.12.117+deb13-amd64", Some("6.12")),
        ("7.3.4+deb13-amd64", Some("7.3")),
        ("6.12", Some("6.12")),
        ("6", None),
        ("6.x", None),
        ("", None),
    ] {
        assert_eq!(series_of_release(release), series, "{release:?}");
    }
}

/// The log up to (not including) the first line containing `needle`.
fn cut_before(needle: &str) -> &'static str {
    &LOG[..LOG.find(needle).expect("the fixture has the line")]
}

#[test]
fn truncated_logs_give_clear_errors() {
    let cases = [
        (
            cut_before("Run /init as init process"),
            LinuxLogError::NoInit,
        ),
        (cut_before("Zone ranges:"), LinuxLogError::NoZoneRanges),
        (
            cut_before("On node 0, zone DMA"),
            LinuxLogError::NoEarlyMemmapEnd,
        ),
        ("", LinuxLogError::NoZoneRanges),
    ];
    for (text, want) in cases {
        let err = parse(text).expect_err("a cut-off log is not a boot");
        assert_eq!(err, want);
        assert!(!err.to_string().is_empty());
    }
    assert!(LinuxLogError::NoInit.to_string().contains("--timeout"));
    // A whole boot whose page_alloc_init_late() return cannot be read.
    let no_devtmpfs = LOG.replace("devtmpfs: initialized", "devtmpfs: off");
    assert_eq!(
        parse(&no_devtmpfs),
        Err(LinuxLogError::NoAllocInitLateReturn)
    );
}

#[test]
fn the_dmesg_dump_does_not_count_twice() {
    let dump = LOG
        .find("linux-peer: dmesg begin")
        .expect("the peer's marker");
    let console_only = parse(&LOG[..dump]).unwrap();
    assert_eq!(
        parse(LOG).unwrap().node_deferred_ms,
        console_only.node_deferred_ms
    );
    // The dump alone (stamps restart at 0) is a whole log by itself.
    let dump_only = parse(&LOG[dump + "linux-peer: dmesg begin\n".len()..]).unwrap();
    assert_eq!(dump_only.node_deferred_ms, console_only.node_deferred_ms);
}

// 16G boots with `hugepagesz=1G hugepages=13` (tests/linux-peer.sh's /init
// then names each page by PFN: 0x40000 in DMA32, 0x100000 to 0x3c0000 in
// Normal), with `hugetlb_free_vmemmap=on` for 6.1 and 6.12, off for 7.3.
const HUGE_6_1: &str = include_str!("../../tests/fixtures/linux-6.1-16g-hugetlb-hvo.log");
const HUGE_6_12: &str = include_str!("../../tests/fixtures/linux-6.12-16g-hugetlb-hvo.log");
const HUGE_7_3: &str = include_str!("../../tests/fixtures/linux-7.3-16g-hugetlb.log");

/// The huge pages of a boot as `(pages, label, hvo)` per size.
fn huge(boot: &memboot_tools::linux_log::LinuxBoot) -> Vec<(u64, &'static str, bool)> {
    boot.huge_pages
        .iter()
        .map(|h| (h.pages, h.size.label(), h.hvo))
        .collect()
}

/// Present pages (`Memory: …/16776824K available`) and the 1 + 97 pages
/// of DMA's unavailable ranges, every fixture's.
const PRESENT_AND_HOLES: u64 = 16_776_824 / 4 + 98;

#[test]
fn linux_6_1_writes_every_huge_page_tail_in_memory_init() {
    let boot = parse(HUGE_6_1).expect("the fixture is a whole boot");
    // line 567: HugeTLB: registered 1.00 GiB page size, pre-allocated 13
    // pages; the 2 MiB size's 0 pages are left out. Line 10's command
    // line has hugetlb_free_vmemmap=on and line 568 frees 16380 KiB.
    assert_eq!(huge(&boot), vec![(13, "1.00 GiB", true)]);
    // No MEMBLOCK_RSRV_NOINIT before 6.9: every present page.
    assert_eq!(boot.pages_initialised, Some(PRESENT_AND_HOLES));
}

#[test]
fn linux_6_12_leaves_deferred_huge_page_tails_to_hugetlb() {
    let boot = parse(HUGE_6_12).expect("the fixture is a whole boot");
    // lines 605-608 (the 1.00 GiB pair, then 2.00 MiB with 0 pages).
    assert_eq!(huge(&boot), vec![(13, "1.00 GiB", true)]);
    // Normal starts at PFN 0x100000 (line 59), its first section is
    // initialised before deferral: 0x108000 is the first deferred PFN. The
    // page at 0x40000 (DMA32) keeps every tail written; the one at
    // 0x100000 those below 0x108000; the other 11 only their heads.
    let left = (0x140000 - 0x108000) + 11 * ((1 << 18) - 1);
    assert_eq!(boot.pages_initialised, Some(PRESENT_AND_HOLES - left));
    assert_eq!(boot.pages_initialised, Some(1_081_355));
}

#[test]
fn linux_7_3_leaves_the_tails_to_hugetlb_without_hvo_too() {
    let boot = parse(HUGE_7_3).expect("the fixture is a whole boot");
    // line 661; hugetlb_free_vmemmap=off on line 10.
    assert_eq!(huge(&boot), vec![(13, "1.00 GiB", false)]);
    assert_eq!(boot.pages_initialised, Some(1_081_355));
}

#[test]
fn without_the_inits_pfn_lines_the_huge_pages_cannot_be_accounted() {
    let cut: String = HUGE_6_12
        .lines()
        .filter(|l| !l.starts_with(memboot_tools::hugetlb_log::PFN_LINE))
        .map(|l| format!("{l}\n"))
        .collect();
    let boot = parse(&cut).expect("still a whole boot");
    assert_eq!(boot.pages_initialised, None);
    assert_eq!(boot.present_pages, Some(16_776_824 / 4));
    // 6.1 needs no PFN: it writes them all.
    let cut_6_1: String = HUGE_6_1
        .lines()
        .filter(|l| !l.starts_with(memboot_tools::hugetlb_log::PFN_LINE))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        parse(&cut_6_1).unwrap().pages_initialised,
        Some(PRESENT_AND_HOLES)
    );
}

#[test]
fn boots_without_huge_pages_report_none() {
    assert!(parse(LOG).unwrap().huge_pages.is_empty());
    assert!(parse(LOG_6_12).unwrap().huge_pages.is_empty());
}

#[test]
fn a_log_without_its_version_line_still_counts_when_it_has_no_huge_pages() {
    let unversioned = |log: &str| -> String {
        log.lines()
            .filter(|l| !l.contains("] Linux version "))
            .map(|l| format!("{l}\n"))
            .collect()
    };
    let boot = parse(&unversioned(LOG_6_12)).expect("still a whole boot");
    assert_eq!(boot.release, None);
    assert!(boot.pages_initialised.is_some());
    // With 1 GiB pages the series decides whether tails were left: unknown.
    assert_eq!(
        parse(&unversioned(HUGE_6_12)).unwrap().pages_initialised,
        None
    );
}

#[test]
fn huge_page_preparation_is_mem_inits_gap_init_lates_gap_and_hugetlb_init() {
    // 6.1, lines 99-100: `software IO TLB: area num 2.` at 0.170810, then
    // nothing until `Memory:` at 2.046414 (memmap_init_reserved_pages
    // writes the 13 pages' tails); lines 566 and 571: hugetlb_init from
    // 2.915421 to 3.196073.
    let us = |b: &memboot_tools::linux_log::LinuxBoot| b.hugetlb_ns / 1000;
    assert_eq!(
        us(&parse(HUGE_6_1).unwrap()),
        (2_046_414 - 170_810) + (3_196_073 - 2_915_421)
    );
    // 6.12, lines 106-107: `software IO TLB` at 0.108977, `SLUB:` at
    // 0.166914; lines 260-261: node 0's deferred line at 1.030151, then
    // `Memory:` at 1.249347 (page_alloc_init_late writes the pages'
    // struct pages before it); hugetlb_init lines 604 and 609.
    assert_eq!(
        us(&parse(HUGE_6_12).unwrap()),
        (166_914 - 108_977) + (1_249_347 - 1_030_151) + (1_773_101 - 1_771_816)
    );
    // 7.3, lines 109-110: `mem auto-init:` itself, then `SLUB:`; lines
    // 271-272: 1.000702 to `Memory:` at 1.128590; lines 660 and 665.
    assert_eq!(
        us(&parse(HUGE_7_3).unwrap()),
        (132_390 - 98_830) + (1_128_590 - 1_000_702) + (1_390_126 - 1_388_919)
    );
}

#[test]
fn without_its_calling_line_hugetlb_init_counts_the_usecs_it_reports() {
    let cut: String = HUGE_6_1
        .lines()
        .filter(|l| !l.contains("calling  hugetlb_init+"))
        .map(|l| format!("{l}\n"))
        .collect();
    // line 571: `returned 0 after 280000 usecs`.
    assert_eq!(
        parse(&cut).unwrap().hugetlb_ns / 1000,
        (2_046_414 - 170_810) + 280_000
    );
}

#[test]
fn boots_without_huge_pages_count_no_huge_page_preparation() {
    assert_eq!(parse(LOG).unwrap().hugetlb_ns, 0);
    assert_eq!(parse(LOG_6_12).unwrap().hugetlb_ns, 0);
}
