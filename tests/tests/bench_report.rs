//! The bench's report on committed logs: a memboot 4G deferred boot, a
//! memboot 4G touch boot (kernel/tests/fixtures) and the captured Linux 6.1
//! boot (tests/fixtures), laid out as a bench run directory.

use std::path::PathBuf;

use memboot_tests::bench::{self, Plan};

fn fixture(path: &str) -> String {
    let full = memboot_tests::repo_root().join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

fn summary_u64(log: &str, key: &str) -> u64 {
    let json = log
        .lines()
        .find_map(|l| l.strip_prefix("memboot-summary: "))
        .unwrap();
    serde_json::from_str::<serde_json::Value>(json).unwrap()[key]
        .as_u64()
        .unwrap()
}

fn run_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("memboot-bench-report-{}", std::process::id()));
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

#[test]
fn rows_table_and_json_from_a_run_directory() {
    let dir = run_dir();
    let sizes = vec!["4G".to_string()];
    let entries: Vec<String> = ["deferred", "regions", "touch", "linux"]
        .map(String::from)
        .to_vec();
    let plan = Plan {
        sizes: &sizes,
        entries: &entries,
        rounds: 2,
    };
    let results = bench::read_dir(&dir, &plan).expect("every log reads");
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
    // The fixture: early block 0.072481 → 0.241430, slowest node 1460 ms.
    assert_eq!(linux.memmap_ns, 241_430_000 - 72_481_000 + 1_460_000_000);
    assert_eq!(linux.host_rss_mib, Some(1446));

    let table = bench::table(&results, &plan, "heading");
    let line = |entry: &str| {
        table
            .lines()
            .find(|l| l.starts_with("| 4G | ") && l.contains(&format!(" | {entry} | ")))
            .unwrap_or_else(|| panic!("no {entry} line in\n{table}"))
    };
    // The last two columns: × Linux, × touch; each entry's ratio to itself is 1.
    let ratios = |entry: &str| {
        let cells: Vec<String> = line(entry)
            .split('|')
            .map(|c| c.trim().to_string())
            .collect();
        (
            cells[cells.len() - 3].clone(),
            cells[cells.len() - 2].clone(),
        )
    };
    assert_eq!(ratios("linux").0, "1.00", "{table}");
    assert_eq!(ratios("touch").1, "1.00", "{table}");
    let touch = results.rows.iter().find(|r| r.mode == "touch").unwrap();
    assert_eq!(
        ratios("deferred").1,
        format!("{:.2}", d.memmap_ns as f64 / touch.memmap_ns as f64)
    );
    assert_eq!(
        ratios("deferred").0,
        format!("{:.2}", d.memmap_ns as f64 / linux.memmap_ns as f64)
    );
    // memmap=touch hands nothing to the allocator: no "until allocatable".
    assert!(line("touch").contains("| – / – → – |"), "{table}");
    let expected_ms = format!("{:.1}", d.memmap_ns as f64 / 1e6);
    assert!(
        line("deferred").contains(&format!(
            "| {expected_ms} / {expected_ms} → {expected_ms} |"
        )),
        "{table}"
    );
    assert!(
        table.contains("4G regions: not booted: needs 64 GiB"),
        "{table}"
    );

    // Both warm-ups, in order, each naming the counted boot it preceded,
    // with the touch fixture's memmap time (its summary's phases).
    let touch_log = fixture("kernel/tests/fixtures/4g-touch.log");
    let touch_memmap_ms = format!(
        "{:.1}",
        (summary_u64(&touch_log, "memmap_boot_ns")
            + summary_u64(&touch_log, "buddy_eager_ns")
            + summary_u64(&touch_log, "deferred_ns")) as f64
            / 1e6
    );
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
    assert_eq!(json["rows"][0]["allocatable_ns"], d.allocatable_ns.unwrap());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_failed_boot_is_an_error_naming_the_log() {
    let dir = std::env::temp_dir().join(format!("memboot-bench-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = fixture("kernel/tests/fixtures/4g-deferred.log");
    let cut = &log[..log.find("memboot-summary:").unwrap()];
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
