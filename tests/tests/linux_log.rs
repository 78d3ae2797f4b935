//! The Linux-log parser on a real Linux 6.1 boot (Debian's 6.1.0 kernel,
//! `run-qemu.sh --linux … -m 64G --smp 2 --nodes 2`, captured for this test)
//! and on cut-off copies of it. Expectations are the figures read off the
//! fixture by hand (line numbers in the comments).

use memboot_tests::linux_log::{parse, LinuxLogError};

const LOG: &str = include_str!("../fixtures/linux-6.1-64g-2nodes.log");

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
