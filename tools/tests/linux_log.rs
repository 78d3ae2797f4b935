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
