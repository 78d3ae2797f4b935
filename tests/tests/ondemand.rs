//! `memmap=ondemand` booted for real: every page allocatable right after the
//! eager part, allocations growing nodes out of the untouched pool, the
//! pool accounted by verification without reading it, up to 32 TiB on a
//! 24 GiB host. Assertions are on counts and log structure only.

use std::time::Duration;

use memboot_tests::{boot, exit_code, host_memory_need_mib, Boot};

/// Pages a growth step initialises at most (one max-order block window).
const WINDOW_PAGES: u64 = 1024;
/// Pages per order per 16 MiB round of the allocation test.
const ORDERS: [u64; 4] = [0, 3, 9, 10];

fn u64s(b: &Boot, key: &str) -> Vec<u64> {
    b.summary_json()[key]
        .as_array()
        .unwrap_or_else(|| panic!("summary key {key} is not an array\n{}", b.describe()))
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect()
}

/// Everything an on-demand boot must show.
fn assert_ondemand(b: &Boot, nodes: u64) {
    assert_eq!(b.run.exit_code, exit_code::OK, "{}", b.describe());
    assert_eq!(b.summary().status, "ok");
    assert_eq!(b.summary().strategy, "ondemand");
    assert_eq!(b.summary().verify, "ok", "{}", b.describe());
    assert_eq!(b.summary().nodes, nodes);
    let present = b.summary().present_pages;
    let eager = b.summary().eager_pages;
    let deferred = b.summary().deferred_pages;
    assert_eq!(eager + deferred, present);
    assert_eq!(
        present,
        b.firmware_ram_pages(),
        "present pages from the logged map"
    );
    // Allocatable as soon as the pool is handed over.
    let allocatable = b.summary().allocatable_ns;
    assert!(allocatable > 0 && allocatable < b.summary().total_ns);
    // Pool: what neither the boot CPU nor allocations nor drains touched.
    let grown = b.summary().grown_pages;
    let drained = b.summary().drained_pages;
    assert_eq!(
        b.summary().pool_pages + grown + drained,
        deferred,
        "{}",
        b.describe()
    );
    // Every figure against the model of this boot's own logged firmware
    // map, SRAT, heap and options (memboot_tests::model, computed in the
    // test by the README's rules), exactly: present, low-zone, eager and
    // deferred pages (the deferral rule), reserved eager pages, hole pages,
    // vmemmap bytes, memory blocks, and free pages at hand-over = eager −
    // eager reserved (the pool holds the rest untouched). Which pages the
    // allocation test then grew is not modelled: pool + grown + drained =
    // the model's deferred pages is exact, the split between them only
    // bounded (see `assert_alloc_test`).
    let model = b.model();
    b.assert_summary_matches(&model);
    // Per zone (`verify: node N zone Z: P present, I initialised, R
    // reserved, F free (…), U untouched (UR of them reserved)`), against
    // the model's zone: I + U = its present pages and R + UR its reserved
    // pages, exactly; I ≥ its eager pages and R ≥ its eager reserved pages
    // (growth adds to both, by as much as the allocations asked for); and,
    // everything the test allocated being freed again, F + U − UR = present
    // − reserved, exactly.
    b.assert_zone_lines_match(&model);
    let zones = b.verify_zone_lines();
    assert!(!zones.is_empty(), "{}", b.describe());
    assert_eq!(
        zones.iter().map(|z| z.untouched).sum::<u64>(),
        b.summary().pool_pages
    );
}

/// Linux 6.1 `zone_batchsize()` (MMU, 4 KiB pages) of a zone with
/// `managed_pages`: a quarter of 1/1024 of the zone capped at 1 MiB, then
/// rounded to a power of two less one.
fn linux_zone_batchsize(managed_pages: u64) -> u64 {
    let batch = ((managed_pages / 1024).min((1 << 20) / 4096) / 4).max(1);
    (1 << (batch + batch / 2).ilog2()) - 1
}

/// The allocation test's figures are present and consistent.
fn assert_alloc_test(b: &Boot) {
    assert_eq!(u64s(b, "alloc_orders"), ORDERS);
    let counts = u64s(b, "alloc_count");
    let pages: u64 = counts.iter().zip(ORDERS).map(|(c, o)| c << o).sum();
    assert_eq!(pages, b.summary().alloc_test_pages, "{}", b.describe());
    assert!(pages > 0, "{}", b.describe());
    assert_eq!(b.summary().alloc_test_failed, 0);
    // Equal bytes per order: 4 MiB of each per 16 MiB round.
    for (c, o) in counts.iter().zip(ORDERS) {
        assert_eq!(c << o, counts[0], "order {o}");
    }
    let (p50, p99, max) = (
        u64s(b, "alloc_p50_ns"),
        u64s(b, "alloc_p99_ns"),
        u64s(b, "alloc_max_ns"),
    );
    for i in 0..4 {
        assert!(
            p50[i] <= p99[i] && p99[i] <= max[i],
            "order {}: p50 ≤ p99 ≤ max",
            ORDERS[i]
        );
    }
    // Order-0 pages went through per-CPU caches sized as Linux sizes a
    // large zone's: `zone_batchsize()` and the `high = 6 * batch` rule.
    let s = b.summary();
    assert_eq!(
        s.alloc_pcp_batch,
        linux_zone_batchsize(1 << 20),
        "{}",
        b.describe()
    );
    assert_eq!(s.alloc_pcp_high, 6 * s.alloc_pcp_batch);
    assert_eq!(
        b.messages_with("alloc_test: order ").count(),
        4,
        "a log line per order\n{}",
        b.describe()
    );
    // Growth never initialises more than what was allocated, plus the
    // window each CPU had claimed on each node when its lists ran dry, plus
    // the windows holding memblock-reserved pages (all of memory is in the
    // pool, so growth also initialises the kernel's own reserved pages, and
    // a window with a reserved piece cannot give a whole max-order block):
    // at most one window per such window, counted from the model's
    // memblock.reserved (the boot's own logged map).
    let steps: u64 = u64s(b, "alloc_grow_steps").iter().sum();
    let slack = WINDOW_PAGES * b.summary().cpus * b.summary().nodes;
    let reserved_slack = WINDOW_PAGES * b.model().reserved_windows(WINDOW_PAGES);
    let grown = b.summary().grown_pages;
    assert!(steps * WINDOW_PAGES >= grown, "at most one window per step");
    assert!(
        grown <= pages + slack + reserved_slack,
        "grown {grown} > allocated {pages} + {slack} + {reserved_slack}"
    );
}

/// QEMU's peak RSS (run-qemu.sh's `host peak RSS` line) is within what
/// run-qemu.sh's host-memory model says the same boot needs (its
/// `--dry-run`): the bound it refuses boots by, each of whose constants is
/// an upper bound of what this host measured. Returns the bound, in MiB.
fn assert_host_rss_within_the_model(b: &Boot, args: &[&str], kernel_opts: &[&str]) -> u64 {
    let rss_mib = b
        .host_peak_rss_mib()
        .unwrap_or_else(|| panic!("no `host peak RSS` line\n{}", b.describe()));
    let need_mib = host_memory_need_mib(args, kernel_opts);
    assert!(
        rss_mib <= need_mib,
        "QEMU peaked at {rss_mib} MiB, above the {need_mib} MiB run-qemu.sh's model gives this boot: raise the constant it underestimates (contract/src/host_memory.rs, README \"Large guests\")\n{}",
        b.describe()
    );
    need_mib
}

#[test]
fn ondemand_1g_one_node() {
    let (args, opts) = (["-m", "1G", "--smp", "2"], ["memmap=ondemand"]);
    let b = boot(&args, &opts, Duration::from_secs(300));
    assert_ondemand(&b, 1);
    assert_alloc_test(&b);
    assert_host_rss_within_the_model(&b, &args, &opts);
    assert!(
        b.summary().pool_pages > 0,
        "untouched memory stays untouched"
    );
    // Memory init runs alone: the APs are started (their first IPI is
    // logged right before it is sent) only once memory is ready.
    let booting_ns = b.first_stamp_ns("smpboot: Booting Node");
    assert!(
        booting_ns >= b.summary().allocatable_ns,
        "APs started at {booting_ns} ns, before memory was ready
{}",
        b.describe()
    );
    // Nor is the boot report formatted before (firmware map, ACPI, NUMA,
    // the pipeline's input, the zones): it goes out where the boot CPU
    // stops working alone, and the input line still replays.
    let out = &b.run.stdout;
    let ready_at = out.find("every page allocatable at");
    for held in [
        "BIOS-provided physical RAM map:",
        "ACPI: RSDP ",
        "NUMA: node 0: ",
        "memboot-input: ",
        "Zone ranges:",
    ] {
        let held_at = out.find(held);
        assert!(
            matches!((ready_at, held_at), (Some(r), Some(h)) if h > r),
            "`{held}` (at byte {held_at:?}) is not after the memory-ready line (at byte {ready_at:?})
{}",
            b.describe()
        );
    }
    let cmdline = b.boot_input().cmdline;
    assert!(
        cmdline.starts_with("memmap=ondemand"),
        "the replayed input's command line is `{cmdline}`"
    );
    assert_eq!(b.summary().deferred_workers, 0, "no workers without drain");
}

#[test]
fn ondemand_64g_two_nodes_one_memory_only() {
    // One vCPU, two nodes: node 1 has memory only.
    let b = boot(
        &["-m", "64G", "--smp", "1", "--nodes", "2"],
        &["memmap=ondemand"],
        Duration::from_secs(600),
    );
    assert_ondemand(&b, 2);
    assert_alloc_test(&b);
    assert!(
        b.has_message("verify: node 1 zone Normal: "),
        "the memory-only node is verified\n{}",
        b.describe()
    );
    assert!(b.summary().grown_pages > 0, "the test grew the nodes");
}

#[test]
fn ondemand_drain_64g_empties_the_pool() {
    let b = boot(
        &["-m", "64G", "--smp", "2"],
        &["memmap=ondemand", "ondemand_drain=on"],
        Duration::from_secs(600),
    );
    assert_ondemand(&b, 1);
    assert_alloc_test(&b);
    assert_eq!(b.summary().pool_pages, 0, "{}", b.describe());
    assert!(b.summary().drained_pages > 0);
    assert!(
        b.has_message("verify: ok: every present page"),
        "{}",
        b.describe()
    );
}

#[test]
fn ondemand_4t() {
    let b = boot(
        &["-m", "4T", "--smp", "2"],
        &["memmap=ondemand"],
        Duration::from_secs(900),
    );
    assert_ondemand(&b, 1);
    assert_alloc_test(&b);
    assert_eq!(
        b.summary().vmemmap_bytes,
        64 << 30,
        "64 GiB of memmap mapped"
    );
}

#[test]
fn ondemand_32t_sixteen_nodes() {
    let (args, opts) = (
        ["-m", "32T", "--smp", "2", "--nodes", "16"],
        ["memmap=ondemand"],
    );
    let b = boot(&args, &opts, Duration::from_secs(1200));
    assert_ondemand(&b, 16);
    assert_alloc_test(&b);
    // QEMU's RSS within the model's bound, and that bound an order of
    // magnitude below the struct pages a faithful mode would write
    // (RAM/64), which this host could not back.
    let need_mib = assert_host_rss_within_the_model(&b, &args, &opts);
    let faithful_struct_pages_mib = (b.summary().mem_bytes >> 20) / 64;
    assert!(
        need_mib * 10 < faithful_struct_pages_mib,
        "the model's {need_mib} MiB is not far below the {faithful_struct_pages_mib} MiB of struct pages"
    );
    assert_eq!(b.summary().vmemmap_bytes, 512 << 30);
    assert_eq!(b.summary().mem_bytes >> 40, 31, "just under 32 TiB usable");
}

/// `memmap=ondemand` over 32- and 8-byte struct pages, with the drain
/// (every page initialised by workers after memory is ready) and without.
#[test]
fn ondemand_with_smaller_struct_pages() {
    for (bytes, drain) in [(32, "off"), (32, "on"), (8, "off"), (8, "on")] {
        let b = boot(
            &["-m", "4G", "--smp", "2", "--nodes", "2"],
            &[
                "memmap=ondemand",
                &format!("struct_page={bytes}"),
                &format!("ondemand_drain={drain}"),
            ],
            Duration::from_secs(300),
        );
        assert_eq!(b.summary().struct_page_bytes, bytes, "{}", b.describe());
        assert_ondemand(&b, 2);
        assert_alloc_test(&b);
        if drain == "on" {
            assert_eq!(b.summary().pool_pages, 0, "{}", b.describe());
        }
    }
}
