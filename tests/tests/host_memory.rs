//! The host-memory states end to end: a one-boot bench run in each state
//! (`tests/bench.sh --host-memory STATE`), whose tables name the state and
//! whose boot log records it, with the host's free page reporting, its idle
//! since the last guest and QEMU's minor faults; in one state also the
//! counted boots and their tables (`--counted`). Nothing here is timed.

use std::process::Command;
use std::time::Duration;

use memboot_tests::{ensure_built, exit_code, repo_root, run_bounded};

/// A bench run of one 1G `deferred` boot in `state`, then `counted`
/// counted boots; returns bench.md and the timed boot's log.
fn bench_in(state: &str, counted: u32) -> (String, String) {
    let (run, dir) = bench_run(state, counted, &[]);
    assert_eq!(run.exit_code, exit_code::OK, "{run:?}");
    let read = |name: &str| {
        std::fs::read_to_string(dir.join(name))
            .unwrap_or_else(|e| panic!("{}: {e}", dir.join(name).display()))
    };
    let out = (read("bench.md"), read("1G-deferred-1.log"));
    for k in 1..=counted {
        let profile = read(&format!("1G-deferred-counted-{k}.profile.json"));
        assert!(profile.contains("\"deferred_nodes\""), "{profile}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// tests/bench.sh with one 1G `deferred` round in `state`, `counted`
/// counted boots and `more` arguments; the run and its kept directory.
fn bench_run(state: &str, counted: u32, more: &[&str]) -> (memboot_tests::Run, std::path::PathBuf) {
    ensure_built();
    let dir = std::env::temp_dir().join(format!(
        "memboot-host-memory-{state}-{counted}-{}",
        std::process::id()
    ));
    let mut cmd = Command::new(repo_root().join("tests/bench.sh"));
    cmd.args([
        "--host-memory",
        state,
        "--sizes",
        "1G",
        "--modes",
        "deferred",
    ])
    .args(["--rounds", "1", "--counted", &counted.to_string(), "--keep"])
    .arg(&dir)
    .args(more)
    // cold's idle is the bench's business, not the test's: the boot
    // still waits for the host's page reporting to be quiet.
    .env("MEMBOOT_COLD_IDLE_S", "0");
    (run_bounded(cmd, Duration::from_secs(600)), dir)
}

/// What every state's run must show.
fn assert_named(state: &str, bench: &str, log: &str) {
    assert!(bench.contains(&format!("host memory {state},")), "{bench}");
    assert!(
        bench.contains(&format!("comparison, host memory {state}:")),
        "{bench}"
    );
    assert_eq!(
        memboot_tools::serial_log::host_memory_state(log).as_deref(),
        Some(state),
        "{log}"
    );
    for line in [
        "run-qemu.sh: host memory: idle ",
        "run-qemu.sh: host memory: free page reporting o",
        "run-qemu.sh: host timing: entry latency ",
        "run-qemu.sh: host timing: memory ready ",
    ] {
        assert!(log.contains(line), "no '{line}' in\n{log}");
    }
    assert!(
        memboot_tools::serial_log::host_minor_faults(log).is_some_and(|n| n > 0),
        "{log}"
    );
}

#[test]
fn prefault_backs_guest_ram_before_the_boot() {
    let (bench, log) = bench_in("prefault", 2);
    assert_named("prefault", &bench, &log);
    // Both counted boots, side by side, in the counted table.
    let row = bench
        .lines()
        .find(|l| l.starts_with("| 1G | deferred | deferred init | "))
        .unwrap_or_else(|| panic!("no counted row in\n{bench}"));
    assert_eq!(
        row.split('|').nth(5).unwrap().split(" / ").count(),
        2,
        "{row}"
    );
    assert!(bench.contains("| 1G | deferred | 2 | 1 | "), "{bench}");
    let qemu = log
        .lines()
        .find(|l| l.starts_with("run-qemu.sh: qemu: "))
        .expect("the QEMU line");
    assert!(
        qemu.contains("prealloc=on") && !qemu.contains("reserve=off"),
        "{qemu}"
    );
}

#[test]
fn cold_waits_and_says_how_long() {
    let (bench, log) = bench_in("cold", 0);
    assert_named("cold", &bench, &log);
    assert!(
        log.contains("run-qemu.sh: host memory: cold: waited "),
        "{log}"
    );
}

/// The bench's counted boots against a baseline: the committed one passes;
/// one that counted half the committed deferred-init instructions per page
/// makes the bench finish its report and exit 5, naming the boot and the
/// phase.
#[test]
fn counted_boots_are_checked_against_a_baseline() {
    let committed = repo_root().join("tests/baselines/1G-deferred.profile.json");
    let mut strict: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&committed).unwrap()).unwrap();
    for p in strict["phases"].as_array_mut().unwrap() {
        if p["name"] == "deferred" {
            p["insns"] = (p["insns"].as_u64().unwrap() / 2).into();
        }
    }
    let strict_path =
        std::env::temp_dir().join(format!("memboot-strict-{}.json", std::process::id()));
    std::fs::write(&strict_path, strict.to_string()).unwrap();
    let (run, dir) = bench_run(
        "prefault",
        1,
        &["--baseline", strict_path.to_str().unwrap()],
    );
    assert_eq!(run.exit_code, 5, "{run:?}");
    assert!(
        run.stderr.contains(
            "bench: baseline exceeded: -m 1G deferred (1G-deferred-counted-1.log): phase deferred"
        ),
        "{}",
        run.stderr
    );
    assert!(dir.join("bench.md").exists(), "the report is still written");
    let _ = std::fs::remove_dir_all(&dir);
    let (run, dir) = bench_run("prefault", 1, &["--baseline", committed.to_str().unwrap()]);
    assert_eq!(run.exit_code, exit_code::OK, "{run:?}");
    let log = std::fs::read_to_string(dir.join("1G-deferred-counted-1.log")).unwrap();
    assert!(
        log.contains("memboot-profile: baseline: phase deferred"),
        "{log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&strict_path);
}
