//! The bench's report on committed logs: a memboot 4G deferred boot, a
//! memboot 4G touch boot (kernel/tests/fixtures) and the captured Linux 6.1
//! boot (tests/fixtures), laid out as a bench run directory.

use std::path::PathBuf;

use memboot_tools::bench::{self, Plan};

fn fixture(path: &str) -> String {
    let full = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

fn summary_u64(log: &str, key: &str) -> u64 {
    let summary =
        memboot_tools::serial_log::summary(log).unwrap_or_else(|e| panic!("fixture: {e}"));
    summary[key]
        .as_u64()
        .unwrap_or_else(|| panic!("summary key {key}"))
}

/// A run directory of two rounds of 4G deferred, touch and Linux, a
/// skipped regions and two warm-ups; `name` keeps tests' directories apart.
fn run_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "memboot-bench-report-{name}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    for round in 1..=2 {
        std::fs::write(
            dir.join(format!("4G-deferred-{round}.log")),
            fixture("kernel/tests/fixtures/4g-deferred.log"),
        )
        .unwrap();
        std::fs::write(
            dir.join(format!("4G-touch-{round}.log")),
            fixture("kernel/tests/fixtures/4g-touch.log"),
        )
        .unwrap();
        std::fs::write(
            dir.join(format!("4G-linux-{round}.log")),
            fixture("tests/fixtures/linux-6.1-64g-2nodes.log"),
        )
        .unwrap();
    }
    std::fs::write(dir.join("4G-regions.skip"), "needs 64 GiB of host memory\n").unwrap();
    for (n, before) in [(1, "4G/deferred/1"), (2, "4G/touch/2")] {
        std::fs::write(
            dir.join(format!("warmup-{n}.log")),
            fixture("kernel/tests/fixtures/4g-touch.log"),
        )
        .unwrap();
        std::fs::write(
            dir.join(format!("warmup-{n}.entry")),
            format!("4G touch {before}\n"),
        )
        .unwrap();
    }
    dir
}

/// The Linux fixture's memmap time, read off the log by hand: early block
/// 0.072481 → 0.241430 s, slowest node 1460 ms.
const LINUX_MEMMAP_NS: u64 = 241_430_000 - 72_481_000 + 1_460_000_000;

/// The entries a run directory's plan names (regions skipped).
const ENTRIES: [&str; 4] = ["deferred", "regions", "touch", "linux"];

/// `run_dir(name)` read back as bench results and its table, the
/// directory removed.
fn results_and_table(name: &str) -> (bench::Results, String) {
    let dir = run_dir(name);
    let sizes = vec!["4G".to_string()];
    let entries: Vec<String> = ENTRIES.map(String::from).to_vec();
    let plan = Plan {
        sizes: &sizes,
        entries: &entries,
        rounds: 2,
    };
    let results = bench::read_dir(&dir, &plan).expect("every log reads");
    let table = bench::table(&results, &plan, "heading");
    std::fs::remove_dir_all(dir).unwrap();
    (results, table)
}

/// A memboot boot's memmap time: its summary's three phases.
fn memboot_memmap_ns(log: &str) -> f64 {
    (summary_u64(log, "memmap_boot_ns")
        + summary_u64(log, "buddy_eager_ns")
        + summary_u64(log, "deferred_ns")) as f64
}

/// A cell of the 4G `entry`'s line, by its column heading.
fn cell_4g(table: &str, entry: &str, column: &str) -> String {
    table_cell(table, "4G", entry, column)
}

#[test]
fn rows_from_a_run_directory() {
    let (results, _) = results_and_table("rows");
    assert_eq!(results.rows.len(), 6, "2 rounds of 3 booted entries");
    assert_eq!(results.skipped.len(), 1);

    let deferred_log = fixture("kernel/tests/fixtures/4g-deferred.log");
    let d = &results.rows[0];
    assert_eq!(
        (d.kernel, d.mode.as_str(), d.round, d.mem_mib),
        ("memboot", "deferred", 1, 4096)
    );
    assert_eq!(
        d.boot_cpu_memmap_ns,
        summary_u64(&deferred_log, "memmap_boot_ns")
    );
    assert_eq!(
        d.allocatable_ns,
        Some(summary_u64(&deferred_log, "allocatable_ns"))
    );
    let linux = results.rows.iter().find(|r| r.kernel == "linux").unwrap();
    assert_eq!(linux.memmap_ns, LINUX_MEMMAP_NS);
    assert_eq!(linux.host_rss_mib, Some(1446));
}

#[test]
fn table_from_a_run_directory() {
    let (_, table) = results_and_table("table");
    let deferred_log = fixture("kernel/tests/fixtures/4g-deferred.log");
    // Expectations from the fixtures themselves, not from the rows: the
    // deferred boot's memmap is its three summary phases; Linux's is its
    // early block plus the slowest node (`LINUX_MEMMAP_NS`),
    // and it is ready at `devtmpfs: initialized`, 3.307402 s.
    let deferred_memmap_ns = memboot_memmap_ns(&deferred_log);
    let touch_memmap_ns = memboot_memmap_ns(&fixture("kernel/tests/fixtures/4g-touch.log"));
    let linux_memmap_ns = LINUX_MEMMAP_NS as f64;
    assert_eq!(
        cell_4g(&table, "deferred", "memmap × Linux memmap"),
        format!("{:.2}", deferred_memmap_ns / linux_memmap_ns),
        "{table}"
    );
    assert_eq!(
        cell_4g(&table, "deferred", "memmap × touch memmap"),
        format!("{:.2}", deferred_memmap_ns / touch_memmap_ns),
        "{table}"
    );
    // The fixtures carry no tap lines: no host-timed ready, no ratio
    // (`a_ready_ratio_is_host_timed_from_qemu_start` has them).
    assert_eq!(
        cell_4g(&table, "deferred", "QEMU start → ready × Linux"),
        "–",
        "{table}"
    );
    // memmap=touch hands nothing to the allocator: never ready, no ratio.
    assert_eq!(
        cell_4g(
            &table,
            "touch",
            "memory ready (allocatable) ms: each round → mean"
        ),
        "– / – → –"
    );
    assert_eq!(cell_4g(&table, "touch", "QEMU start → ready × Linux"), "–");
    let expected_ms = format!("{:.1}", deferred_memmap_ns / 1e6);
    assert_eq!(
        cell_4g(&table, "deferred", "memmap ms: each round → mean"),
        format!("{expected_ms} / {expected_ms} → {expected_ms}")
    );
    // Linux writes every struct page of its 64 GiB before it is ready;
    // the share is of its present pages (the Memory: line: 67108344K).
    let linux_pages = format!(
        "{:.2} M ({:.1} %)",
        (64u64 << 18) as f64 / 1e6,
        100.0 * (64u64 << 18) as f64 / (67_108_344 / 4) as f64
    );
    assert_eq!(
        cell_4g(&table, "linux", "struct pages written by ready"),
        linux_pages
    );
    assert_eq!(
        cell_4g(&table, "linux", "struct pages written by the end"),
        linux_pages
    );
    assert_eq!(
        cell_4g(&table, "deferred", "drain ms"),
        "–",
        "no drain in deferred"
    );
    assert!(
        table.contains("4G regions: not booted: needs 64 GiB"),
        "{table}"
    );
}

#[test]
fn warmups_and_json_from_a_run_directory() {
    let (results, table) = results_and_table("warmups");
    let touch_memmap_ns = memboot_memmap_ns(&fixture("kernel/tests/fixtures/4g-touch.log"));
    // Both warm-ups, in order, each naming the counted boot it preceded,
    // with the touch fixture's memmap time (its summary's phases).
    let touch_memmap_ms = format!("{:.1}", touch_memmap_ns / 1e6);
    let warm: Vec<&str> = table
        .lines()
        .filter(|l| l.starts_with("warm-up boot (not counted)"))
        .collect();
    assert_eq!(warm.len(), 2, "{table}");
    for (line, before) in warm.iter().zip(["4G/deferred/1", "4G/touch/2"]) {
        assert!(
            line.starts_with(&format!(
                "warm-up boot (not counted) before {before}: 4G touch: memmap {touch_memmap_ms} ms"
            )),
            "{line}"
        );
    }

    let json = bench::to_json(&results, serde_json::json!({}));
    assert_eq!(json["rows"].as_array().unwrap().len(), 6);
    assert_eq!(json["warmups"].as_array().unwrap().len(), 2);
    assert_eq!(json["warmups"][1]["before"], "4G/touch/2");
    assert_eq!(json["warmup"]["mode"], json["warmups"][0]["mode"]);
    assert_eq!(
        json["rows"][0]["allocatable_ns"],
        results.rows[0].allocatable_ns.unwrap()
    );
}

#[test]
fn a_failed_boot_is_an_error_naming_the_log() {
    let dir = std::env::temp_dir().join(format!("memboot-bench-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = fixture("kernel/tests/fixtures/4g-deferred.log");
    let cut = &log[..log.find(memboot_tools::serial_log::SUMMARY_PREFIX).unwrap()];
    std::fs::write(dir.join("4G-deferred-1.log"), cut).unwrap();
    let sizes = vec!["4G".to_string()];
    let entries = vec!["deferred".to_string()];
    let err = bench::read_dir(
        &dir,
        &Plan {
            sizes: &sizes,
            entries: &entries,
            rounds: 1,
        },
    )
    .err()
    .unwrap();
    assert!(
        err.contains("4G-deferred-1.log") && err.contains("did not finish"),
        "{err}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// A cell of `entry`'s line at `size`, by its column heading.
fn table_cell(table: &str, size: &str, entry: &str, column: &str) -> String {
    let header: Vec<&str> = table
        .lines()
        .find(|l| l.starts_with("| size |"))
        .expect("a header line")
        .split('|')
        .map(str::trim)
        .collect();
    let at = header
        .iter()
        .position(|h| *h == column)
        .unwrap_or_else(|| panic!("no column '{column}' in\n{table}"));
    let line = table
        .lines()
        .find(|l| l.starts_with(&format!("| {size} | ")) && l.contains(&format!(" | {entry} | ")))
        .unwrap_or_else(|| panic!("no {entry} line in\n{table}"));
    line.split('|').map(str::trim).nth(at).unwrap().to_string()
}

/// A run directory of one round per entry, each log a fixture.
fn one_round_dir(name: &str, logs: &[(&str, &str)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("memboot-bench-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (entry, path) in logs {
        std::fs::write(dir.join(format!("4G-{entry}-1.log")), fixture(path)).unwrap();
    }
    dir
}

const LINUX_6_1: &str = "tests/fixtures/linux-6.1-64g-2nodes.log";
const LINUX_6_12: &str = "tests/fixtures/linux-6.12-16g-2nodes.log";

#[test]
fn ratios_to_each_linux_peer() {
    let logs = [
        ("deferred", "kernel/tests/fixtures/4g-deferred.log"),
        ("linux-6.1", LINUX_6_1),
        ("linux-6.12", LINUX_6_12),
        ("linux-6.12-bzimage+nokaslr", LINUX_6_12),
    ];
    let dir = one_round_dir("peers", &logs);
    let sizes = vec!["4G".to_string()];
    let entries: Vec<String> = logs.iter().map(|(e, _)| e.to_string()).collect();
    let plan = Plan {
        sizes: &sizes,
        entries: &entries,
        rounds: 1,
    };
    let results = bench::read_dir(&dir, &plan).expect("every log reads");
    let table = bench::table(&results, &plan, "heading");

    // One pair of ratio columns per peer (a variant is not one), by series.
    let columns = bench::columns(&entries);
    let ratio_columns: Vec<&str> = columns
        .iter()
        .map(String::as_str)
        .filter(|c| c.contains('×'))
        .collect();
    assert_eq!(
        ratio_columns,
        [
            "memmap × Linux 6.1 memmap",
            "QEMU start → ready × Linux 6.1",
            "memmap × Linux 6.12 memmap",
            "QEMU start → ready × Linux 6.12",
            "memmap × touch memmap",
        ]
    );

    // Expectations from the logs through the parser (its own tests check
    // it against the fixtures by hand).
    let linux = |path: &str| memboot_tools::linux_log::parse(&fixture(path)).unwrap();
    let memmap_ns = |b: &memboot_tools::linux_log::LinuxBoot| {
        (b.early_memmap_ns + b.deferred_ms() * 1_000_000) as f64
    };
    let (old, new) = (linux(LINUX_6_1), linux(LINUX_6_12));
    let deferred_log = fixture("kernel/tests/fixtures/4g-deferred.log");
    let deferred_memmap_ns = memboot_memmap_ns(&deferred_log);
    let cell = |entry: &str, column: &str| table_cell(&table, "4G", entry, column);
    assert_eq!(
        cell("deferred", "memmap × Linux 6.12 memmap"),
        format!("{:.2}", deferred_memmap_ns / memmap_ns(&new))
    );
    assert_eq!(
        cell("deferred", "memmap × Linux 6.1 memmap"),
        format!("{:.2}", deferred_memmap_ns / memmap_ns(&old))
    );
    assert_eq!(
        cell("linux-6.12", "QEMU start → ready × Linux 6.12"),
        "–",
        "no tap lines in the fixtures"
    );
    assert_eq!(
        cell("linux-6.12-bzimage+nokaslr", "memmap × Linux 6.12 memmap"),
        "1.00",
        "the same log under a variant's name"
    );
    assert_eq!(cell("deferred", "memmap × touch memmap"), "–", "no touch");
    // The kernel column says which kernel, the mode column which entry.
    assert_eq!(cell("linux-6.12", "kernel"), "linux");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn an_entry_naming_a_series_must_have_booted_it() {
    let dir = one_round_dir("wrong-kernel", &[("linux-6.12", LINUX_6_1)]);
    let (sizes, entries) = (vec!["4G".to_string()], vec!["linux-6.12".to_string()]);
    let err = bench::read_dir(
        &dir,
        &Plan {
            sizes: &sizes,
            entries: &entries,
            rounds: 1,
        },
    )
    .err()
    .expect("a 6.1 log is not linux-6.12's");
    assert!(
        err.contains("4G-linux-6.12-1.log")
            && err.contains("names Linux 6.12")
            && err.contains("Linux 6.1.0-"),
        "{err}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn linux_entry_names() {
    use bench::{is_linux, is_peer, linux_series};
    for (entry, linux, series, peer) in [
        ("linux-6.12", true, Some("6.12"), true),
        ("linux-6.1", true, Some("6.1"), true),
        ("linux-7.3", true, Some("7.3"), true),
        ("linux-6.12-bzimage", true, Some("6.12"), false),
        ("linux-6.1+nokaslr", true, Some("6.1"), false),
        ("linux-6.12-pvh-qemu-defaults", true, Some("6.12"), false),
        // The committed runs' names: Linux 6.1, no series in the name.
        ("linux", true, None, true),
        ("linux-pvh", true, None, false),
        ("linux-bzimage+nokaslr", true, None, false),
        ("deferred", false, None, false),
        ("ondemand+ondemand_drain=on", false, None, false),
        // tests/bench.sh's `@` words: how it runs an entry, not what boots.
        ("linux-6.12@qemu-10.0", true, Some("6.12"), false),
        ("linux-6.1@profile", true, Some("6.1"), false),
        (
            "linux-6.1-bzimage@qemu-10.0@profile",
            true,
            Some("6.1"),
            false,
        ),
        ("deferred@qemu-10.0", false, None, false),
        ("touch+struct_page=8@profile", false, None, false),
    ] {
        assert_eq!(
            (is_linux(entry), linux_series(entry), is_peer(entry)),
            (linux, series, peer),
            "{entry}"
        );
    }
    // The committed runs' tables keep their one pair of "× Linux" columns,
    // a run without a peer too (empty).
    for entries in [
        &["deferred", "linux"][..],
        &["linux-bzimage", "linux-pvh"][..],
    ] {
        let entries: Vec<String> = entries.iter().map(|e| e.to_string()).collect();
        let columns = bench::columns(&entries);
        assert!(columns.contains(&"memmap × Linux memmap".to_string()));
        assert!(columns.contains(&"QEMU start → ready × Linux".to_string()));
    }
}

/// The tap's lines as run-qemu.sh writes them after a boot's log.
fn with_tap_lines(log: &str, ready_ms: &str, how: &str) -> String {
    format!(
        "{log}run-qemu.sh: host timing: entry latency 50.000 ms (QEMU's start to the kernel's first serial byte)\n\
         run-qemu.sh: host timing: memory ready {ready_ms} ms after QEMU started ({how})\n"
    )
}

/// "QEMU start → ready × Linux" sets the two kernels' host-timed QEMU
/// start → ready over each other, Linux ready at its last deferred-init
/// line: a log timed at its ready line (`devtmpfs: initialized`, as the
/// tap did before) is moved back by the printk time between the two.
#[test]
fn a_ready_ratio_is_host_timed_from_qemu_start() {
    let dir = std::env::temp_dir().join(format!("memboot-bench-tap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let logs = [
        (
            "deferred",
            "kernel/tests/fixtures/4g-deferred.log",
            "400.000",
            "entry + the kernel's allocatable_ns",
        ),
        (
            "linux-6.12",
            LINUX_6_12,
            "2000.000",
            "Linux's last deferred-init line arrived",
        ),
        (
            "linux-6.1",
            LINUX_6_1,
            "3000.000",
            "Linux's ready line arrived",
        ),
    ];
    for (entry, path, ready_ms, how) in logs {
        let log = with_tap_lines(&fixture(path), ready_ms, how);
        std::fs::write(dir.join(format!("4G-{entry}-1.log")), log).unwrap();
    }
    let sizes = vec!["4G".to_string()];
    let entries: Vec<String> = logs.iter().map(|l| l.0.to_string()).collect();
    let plan = Plan {
        sizes: &sizes,
        entries: &entries,
        rounds: 1,
    };
    let results = bench::read_dir(&dir, &plan).expect("every log reads");
    let table = bench::table(&results, &plan, "heading");
    std::fs::remove_dir_all(dir).unwrap();
    let cell = |entry: &str, column: &str| table_cell(&table, "4G", entry, column);
    // 6.1's fixture: node 1's line at 3.279735 s, devtmpfs at 3.307402 s.
    let linux_6_1_ms = 3000.0 - (3_307_402.0 - 3_279_735.0) / 1000.0;
    assert_eq!(
        cell("deferred", "QEMU start → ready × Linux 6.12"),
        format!("{:.2}", 400.0 / 2000.0),
        "{table}"
    );
    assert_eq!(
        cell("deferred", "QEMU start → ready × Linux 6.1"),
        format!("{:.2}", 400.0 / linux_6_1_ms),
        "{table}"
    );
    assert_eq!(
        cell("linux-6.1", "QEMU start → ready × Linux 6.12"),
        format!("{:.2}", linux_6_1_ms / 2000.0),
        "{table}"
    );
    let rows = &results.rows;
    let linux_6_1 = rows.iter().find(|r| r.mode == "linux-6.1").unwrap();
    assert_eq!(linux_6_1.qemu_start_to_ready_us, Some(3_000_000 - 27_667));
}

/// A boot whose summary line was cut writes a second, whole one after it
/// (README "Output"): the row is the last line's, as `log::summary` reads
/// it, never the first's.
#[test]
fn a_row_is_read_from_the_last_summary_line() {
    let log = fixture("kernel/tests/fixtures/4g-deferred.log");
    let at = log.find(memboot_tools::serial_log::SUMMARY_PREFIX).unwrap();
    let (before, summary_line) = (&log[..at], log[at..].lines().next().unwrap());
    let json = summary_line
        .strip_prefix(memboot_tools::serial_log::SUMMARY_PREFIX)
        .unwrap();

    // A cut line, then the whole one: the row is the whole line's.
    let cut = &summary_line[..summary_line.len() / 2];
    let text = format!(
        "{before}{cut}\r\n[    9.000000] memboot: the summary line was cut\r\n{summary_line}\r\n"
    );
    let row = bench::row_from_log(&text, "4G", "deferred", 1)
        .unwrap_or_else(|e| panic!("a cut first line must not hide the last: {e}"));
    assert_eq!(row.boot_ns, summary_u64(&log, "total_ns"));
    assert_eq!(row.boot_cpu_memmap_ns, summary_u64(&log, "memmap_boot_ns"));

    // A whole line, then one whose status says the boot failed: the boot
    // failed, whatever the first line said.
    let mut failed: serde_json::Value = serde_json::from_str(json).unwrap();
    failed["status"] = "summary".into();
    let text = format!(
        "{before}{summary_line}\r\n{}{failed}\r\n",
        memboot_tools::serial_log::SUMMARY_PREFIX
    );
    let err = bench::row_from_log(&text, "4G", "deferred", 1).unwrap_err();
    assert!(err.contains("status \"summary\""), "{err}");
}

#[test]
fn huge_page_entries_get_a_huge_pages_column_and_their_own_peer() {
    // memboot's and Linux 6.12's 16G boots with 13 pages of 1 GiB (the
    // Linux one with hugetlb_free_vmemmap=on).
    let deferred = "deferred+hugepagesz=1G+hugepages=13";
    let peer = "linux-6.12+hugepagesz=1G+hugepages=13+hugetlb_free_vmemmap=on";
    let dir = std::env::temp_dir().join(format!("memboot-bench-huge-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (entry, path) in [
        (deferred, "tests/fixtures/memboot-16g-hugetlb.log"),
        (peer, "tests/fixtures/linux-6.12-16g-hugetlb-hvo.log"),
    ] {
        std::fs::write(dir.join(format!("16G-{entry}-1.log")), fixture(path)).unwrap();
    }
    let sizes = vec!["16G".to_string()];
    let entries = vec![deferred.to_string(), peer.to_string()];
    let plan = Plan {
        sizes: &sizes,
        entries: &entries,
        rounds: 1,
    };
    let results = bench::read_dir(&dir, &plan).expect("every log reads");
    let table = bench::table(&results, &plan, "heading");
    let cell = |entry: &str, column: &str| table_cell(&table, "16G", entry, column);
    // memboot line 77 and Linux's `registered` line; HVO only where the
    // command line asked and the kernel frees vmemmap.
    assert_eq!(cell(deferred, bench::HUGE_COLUMN), "13 × 1.00 GiB");
    assert_eq!(cell(peer, bench::HUGE_COLUMN), "13 × 1.00 GiB, HVO");
    // The memmap figures take in the huge pages' preparation. memboot:
    // its summary's phases, hugetlb_ns 38541882 included. Linux 6.12:
    // Zone ranges (0.027078) to the line after the early block (0.058553),
    // node 0's 16 ms of deferred init, mem_init's gap (0.108977 to SLUB
    // at 0.166914), page_alloc_init_late's (node 0's line at 1.030151 to
    // Memory: at 1.249347) and hugetlb_init (1.771816 to 1.773101).
    let memboot_memmap = 8368702 + 1119147 + 1034742 + 38541882;
    assert_eq!(results.rows[0].memmap_ns, memboot_memmap);
    let linux_memmap = (58_553 - 27_078)
        + 16_000
        + (166_914 - 108_977)
        + (1_249_347 - 1_030_151)
        + (1_773_101 - 1_771_816);
    assert_eq!(results.rows[1].memmap_ns, linux_memmap * 1000);
    // Its QEMU start → ready: the tap's 4365.228 ms at the deferred line,
    // plus page_alloc_init_late's huge-page gap before memory is ready.
    assert_eq!(
        results.rows[1].qemu_start_to_ready_us,
        Some(4_365_228 + (1_249_347 - 1_030_151))
    );
    // The peer with huge pages divides the entries' ratios, under its name.
    let label = "Linux 6.12+hugepagesz=1G+hugepages=13+hugetlb_free_vmemmap=on";
    assert_eq!(cell(peer, &format!("memmap × {label} memmap")), "1.00");
    // Struct pages written by ready: memboot's summary (its huge pages are
    // its `hugetlb` phase's), Linux's present pages less the tails it
    // leaves to hugetlb (tools/tests/linux_log.rs): 1,081,355 of 4,194,206.
    assert_eq!(
        cell(peer, "struct pages written by ready"),
        "1.08 M (25.8 %)"
    );
    let json = bench::to_json(&results, serde_json::json!({}));
    assert_eq!(
        json["rows"][1]["huge_pages"],
        serde_json::json!([{"size": "1.00 GiB", "pages": 13, "hvo": true}])
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn runs_without_huge_pages_have_no_huge_pages_column() {
    let (results, table) = results_and_table("no-huge");
    assert!(results.rows.iter().all(|r| r.huge_pages.is_empty()));
    assert!(!table.contains("huge pages"), "{table}");
    let json = bench::to_json(&results, serde_json::json!({}));
    assert!(json["rows"][0].get("huge_pages").is_none());
}
