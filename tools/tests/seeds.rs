//! The committed seeds table (`tests/bench.sh --seeds --svg
//! tests/bench-results/seeds`) against the logs it was made from, and each
//! of its bench runs' tables against theirs.

use memboot_tools::seeds::{self, Run, SEEDS};

fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn the_committed_seeds_table_is_rebuilt_from_its_logs() {
    let dir = repo_root().join("tests/bench-results/seeds");
    let rebuilt = seeds::table(&dir).unwrap_or_else(|e| panic!("{e}"));
    let committed = std::fs::read_to_string(dir.join("seeds.md")).unwrap();
    assert_eq!(
        committed, rebuilt,
        "seeds.md is not the table its logs make"
    );
    // A row per seed, each naming its report.
    for (i, seed) in SEEDS.iter().enumerate() {
        let row = format!("| {} | {} | {} |", i + 1, seed.problem, seed.reported);
        assert!(committed.contains(&row), "{row}");
        assert!(seed.reported.contains("report)"), "{}", seed.reported);
    }
}

/// Row 2 compares its deferred phase over the parallelism the run had, and
/// says what that was: the vCPUs and host CPUs bench.sh wrote into the
/// run's heading (from its own `--smp` and `nproc`) are the row's, which
/// reads them from each boot's summary and run-qemu.sh's `host:` line.
#[test]
fn the_power_row_says_what_it_ran_with() {
    let dir = repo_root().join("tests/bench-results/seeds");
    let run = Run::read(&dir.join("power-16-nodes")).unwrap_or_else(|e| panic!("{e}"));
    let field = |suffix: &str| -> String {
        run.heading
            .split([',', '('])
            .find_map(|f| f.trim().strip_suffix(suffix))
            .unwrap_or_else(|| panic!("no '{suffix}' in the heading: {}", run.heading))
            .to_string()
    };
    let (vcpus, host_cpus) = (field(" vCPUs"), field(" CPUs)"));
    let table = seeds::table(&dir).unwrap_or_else(|e| panic!("{e}"));
    let row = table
        .lines()
        .find(|l| l.starts_with("| 2 |"))
        .expect("row 2");
    assert!(
        row.contains(&format!(" {vcpus} vCPUs"))
            && row.contains(&format!("run by {host_cpus} host CPUs")),
        "row 2 does not say it ran {vcpus} vCPUs on {host_cpus} host CPUs: {row}"
    );
    assert!(row.contains("deferred phase end to end"), "{row}");
}

#[test]
fn every_seed_bench_run_is_rebuilt_from_its_logs() {
    let dir = repo_root().join("tests/bench-results/seeds");
    let mut checked = 0;
    for seed in SEEDS {
        assert_rebuilt(&dir.join(seed.dir));
        checked += 1;
    }
    assert_eq!(checked, 4, "every seed is boots");
}

/// The committed `sub/bench.md` is the whole report its logs make (every
/// table, cell by cell); a run without its logs fails.
fn assert_rebuilt(sub: &std::path::Path) {
    let rebuilt = Run::read(sub)
        .and_then(|r| r.bench_md())
        .unwrap_or_else(|e| panic!("{}: {e}", sub.display()));
    let committed = std::fs::read_to_string(sub.join("bench.md")).unwrap();
    assert!(
        committed == rebuilt,
        "{}/bench.md is not the report its logs make",
        sub.display()
    );
}

/// The runs beside seed 3 (tests/seeds.sh --only arm64-sparse-linux and
/// --only arm64-sparse-profile): each committed table is its logs'.
#[test]
fn the_runs_beside_seed_3_are_rebuilt_from_their_logs() {
    let dir = repo_root().join("tests/bench-results/seeds");
    let mut checked = 0;
    for sub in [
        "arm64-sparse-linux",
        "arm64-sparse-profile/short",
        "arm64-sparse-profile/map-8192",
    ] {
        assert_rebuilt(&dir.join(sub));
        checked += 1;
    }
    assert!(checked > 0, "no run beside seed 3 under {}", dir.display());
}
