//! The summary line is never cut off: booted for real with hundreds of
//! `phases` (an alloc_test phase per CPU and node, a deferred one per
//! worker), past the 16 KiB the line used to be cut at, and on the largest
//! machine run-qemu.sh accepts; and a summary cut part-way by a fault must
//! fail the boot with status `summary` on a second, whole line.
//!
//! Expectations come from the machine asked for (CPUs × nodes), not from
//! the kernel's own counts. Wall-clock bounds only kill a hung guest.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use memboot_tests::{boot, boot_raw, exit_code, Boot};
use memboot_tools::plot::{parse_log as plot_log, TimelineLayout};
use memboot_tools::serial_log::SUMMARY_PREFIX as PREFIX;

/// The fixed buffer the line was written into before it was streamed.
const OLD_BUFFER_BYTES: usize = 16 * 1024;

/// The serial log's lines that hold the summary prefix anywhere (one that
/// is not at the start of its line is a bug these tests look for), `\r`
/// stripped.
fn summary_lines(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .filter(|l| l.contains(PREFIX.trim_end()))
        .collect()
}

/// The one summary line: whole, at the start of its line, and the last
/// line of the log. Returns its length.
fn assert_one_whole_summary(b: &Boot) -> usize {
    let lines = summary_lines(&b.run.stdout);
    assert_eq!(lines.len(), 1, "one summary line\n{}", b.describe());
    assert!(lines[0].starts_with(PREFIX), "{}", b.describe());
    let last = b
        .run
        .stdout
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .rfind(|l| !l.is_empty());
    assert_eq!(last, Some(lines[0]), "the summary is the last line");
    // `boot` has parsed it already (and would have panicked on bad JSON).
    assert!(b.summary.is_some());
    lines[0].len()
}

/// `cpus` CPUs over `nodes` nodes, every node with memory and CPUs: the
/// summary must hold an alloc_test phase for every (CPU, node) pair, and
/// the timeline must draw a lane per CPU with that CPU's phases.
fn assert_alloc_test_phase_per_cpu_and_node(b: &Boot, cpus: u64, nodes: u64) {
    let phases = b.summary_json()["phases"]
        .as_array()
        .unwrap_or_else(|| panic!("no phases\n{}", b.describe()));
    let pairs: BTreeSet<(u64, u64)> = phases
        .iter()
        .filter(|p| p["phase"] == "alloc_test")
        .map(|p| (p["cpu"].as_u64().unwrap(), p["node"].as_u64().unwrap()))
        .collect();
    let want: BTreeSet<(u64, u64)> = (0..cpus)
        .flat_map(|c| (0..nodes).map(move |n| (c, n)))
        .collect();
    assert_eq!(pairs, want, "an alloc_test phase per (CPU, node)");

    let log = plot_log(&b.run.stdout, "serial").unwrap_or_else(|e| panic!("{e}"));
    let layout = TimelineLayout::new(&log);
    assert_eq!(layout.lanes.len() as u64, cpus, "a lane per CPU");
    for cpu in 0..cpus as u32 {
        let bars = layout.bars.iter().filter(|bar| bar.cpu == cpu).count();
        let spans = phases.iter().filter(|p| p["cpu"] == cpu).count();
        assert_eq!(bars, spans, "CPU {cpu}: a bar per phase");
    }
}

fn assert_ok_16_by_16(b: &Boot, strategy: &str) {
    assert_eq!(b.run.exit_code, exit_code::OK, "{}", b.describe());
    assert_eq!(b.summary().status, "ok", "{}", b.describe());
    assert_eq!(b.summary().strategy, strategy);
    assert_eq!(b.summary().nodes, 16);
    assert_eq!(b.summary().cpus, 16);
    assert_eq!(b.summary().verify, "ok", "{}", b.describe());
    let len = assert_one_whole_summary(b);
    assert!(
        len > OLD_BUFFER_BYTES,
        "{len} bytes: a 16x16 summary is larger than the old buffer, or this test proves nothing"
    );
    assert_alloc_test_phase_per_cpu_and_node(b, 16, 16);
}

/// 16 CPUs × 16 nodes, `ondemand`: 256 alloc_test phases, ~23 KB of JSON
/// (the old 16 KiB buffer cut it and the boot still exited 0). ~1 min here.
#[test]
fn ondemand_16_cpus_16_nodes_summary_is_whole() {
    let b = boot(
        &["-m", "16G", "--smp", "16", "--nodes", "16"],
        &["memmap=ondemand"],
        Duration::from_secs(600),
    );
    assert_ok_16_by_16(&b, "ondemand");
}

/// The same machine with `deferred` (the default): a deferred_init phase
/// per worker as well. ~40 s here.
#[test]
fn deferred_16_cpus_16_nodes_summary_is_whole() {
    let b = boot(
        &["-m", "16G", "--smp", "16", "--nodes", "16"],
        &[],
        Duration::from_secs(600),
    );
    assert_ok_16_by_16(&b, "deferred");
    let workers = b.summary_json()["phases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["phase"] == "deferred_init")
        .count();
    assert!(workers >= 16, "a deferred_init phase per node at least");
}

/// `test_fault=panic_in_summary` panics after 300 bytes of the summary
/// have been streamed, part of them on the wire. The cut line must be
/// ended (not continued by the next line), followed by the panic report,
/// and the boot must end with a second, whole summary with status
/// `summary` and exit 1: never a cut line and exit 0.
#[test]
fn summary_cut_by_a_panic_fails_with_status_summary() {
    let run = boot_raw(
        &["-m", "512M", "--smp", "1"],
        &["test_fault=panic_in_summary", "alloc_test=0"],
        Duration::from_secs(180),
    );
    let all = format!("{run:?}");
    assert_eq!(run.exit_code, exit_code::KERNEL_FAILURE, "{all}");
    let lines = summary_lines(&run.stdout);
    assert_eq!(lines.len(), 2, "the cut line, then the whole one\n{all}");
    for l in &lines {
        assert!(l.starts_with(PREFIX), "nothing runs into a summary: {l}");
    }
    let cut = &lines[0][PREFIX.len()..];
    assert!(
        serde_json::from_str::<serde_json::Value>(cut).is_err(),
        "the first line is cut: {cut}"
    );
    assert!(cut.len() < 300, "cut where the fault hit: {cut}");
    let last: serde_json::Value = serde_json::from_str(&lines[1][PREFIX.len()..])
        .unwrap_or_else(|e| panic!("the second summary is whole JSON ({e})\n{all}"));
    assert_eq!(last["status"], "summary", "{all}");
    assert_eq!(last["strategy"], "none", "boot facts only");
    assert_eq!(last["cpus"], 1);
    // Between them: the panic and why the boot failed, on stamped lines.
    let text: Vec<&str> = run
        .stdout
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .collect();
    let first = text.iter().position(|l| *l == lines[0]).unwrap();
    let second = text.iter().position(|l| *l == lines[1]).unwrap();
    let between = &text[first + 1..second];
    assert!(
        between.iter().any(|l| l.contains("] PANIC: panicked at ")),
        "{all}"
    );
    assert!(
        between.iter().any(|l| l.contains(
            "] memboot: the boot faulted (status `panic`) while its summary line was being written"
        )),
        "{all}"
    );
    assert_eq!(second, text.len() - 1, "the whole summary is last\n{all}");
}

/// The largest machine that is practical to boot here: 64 CPUs over 64
/// nodes (run-qemu.sh's node maximum) at 512M, 8 MiB a node, which
/// run-qemu.sh accepts whether it splits RAM evenly in MiB or in QEMU's
/// 8 MiB granules. 64 × 64 is past `MAX_NODE_SPANS`, so the alloc test
/// folds: one phase per CPU with `nodes` 64 (unfolded it was 4,103 phases,
/// 352 KB, about 3 minutes of serial output at 64 vCPUs).
///
/// Why not run-qemu.sh's maximum, 255 CPUs: measured on the 2-core build
/// machine, QEMU 7.2's pc machine and memboot do start 255 vCPUs over 64
/// nodes, but slowly: in one of three boots all came up (bring-up 114 s),
/// the alloc test took 183 s and the boot 6 min 49 s of wall time (status
/// `verify`, as below; summary 24,487 bytes, sent in ~30 s). In the other
/// two, on a busier host, an AP arrived after the 1 s arrival timeout, was
/// reported as `did not come up`, and the next AP's start then failed the
/// boot with status `smp` (`started APIC 0xf1 but it reads APIC id 0xf0`)
/// after 2.5–4 minutes: the late AP had taken the next AP's trampoline
/// round. Fixed since (the round is claimed with the AP's own APIC id; see
/// `a_late_ap_halts_instead_of_taking_the_next_aps_round` in boot.rs).
/// 128 CPUs × 64 nodes took 4 min 20 s (alloc test 135 s). 64 × 64 took
/// 65 s, which `cargo test` (already ~17 min from a fresh clone, limit 25)
/// can afford.
///
/// At 8 MiB a node these boots first ended with status `verify`: the
/// verifier's self-test asked an 8 MiB node for a 4 MiB block it cannot
/// have, and asked a node memblock reserves whole for any block at all.
/// Fixed since (such orders and nodes are skipped, and said so), and the
/// boot ends `ok`. Any status is still accepted here, since the point is
/// the summary: it must be whole JSON, the last line, agree with the exit
/// code, and describe the machine asked for.
///
/// The bound, 15 minutes: 14 times the 65 s measured, room for a host
/// busy with other guests (TCG with 64 vCPU threads on 2 cores slows
/// roughly with the host's load), but finite so a hang fails the test.
#[test]
fn largest_practical_machine_64_cpus_64_nodes_ends_with_a_whole_summary() {
    let (cpus, nodes) = (64u64, 64u64);
    let started = Instant::now();
    let b = boot(
        &["-m", "512M", "--smp", "64", "--nodes", "64"],
        &[],
        Duration::from_secs(15 * 60),
    );
    eprintln!("64 CPUs x 64 nodes: {:?} wall", started.elapsed());
    let len = assert_one_whole_summary(&b);
    let status = &*b.summary().status;
    eprintln!("status {status}, summary {len} bytes");
    let want_exit = if status == "ok" {
        exit_code::OK
    } else {
        exit_code::KERNEL_FAILURE
    };
    assert_eq!(
        b.run.exit_code,
        want_exit,
        "status {status}\n{}",
        b.describe()
    );
    assert_eq!(b.summary().nodes, nodes);
    assert_eq!(b.summary().cpus, cpus);
    let phases = b.summary_json()["phases"].as_array().unwrap();
    let alloc: Vec<&serde_json::Value> = phases
        .iter()
        .filter(|p| p["phase"] == "alloc_test")
        .collect();
    if !alloc.is_empty() {
        // Folded: one per CPU, each over every node, none per node.
        let lanes: BTreeSet<u64> = alloc.iter().map(|p| p["cpu"].as_u64().unwrap()).collect();
        assert_eq!(lanes, (0..cpus).collect(), "one alloc_test phase per CPU");
        assert_eq!(alloc.len() as u64, cpus);
        for p in &alloc {
            assert_eq!(p["nodes"], nodes, "{p}");
            assert!(p.get("node").is_none(), "{p}");
        }
        let log = plot_log(&b.run.stdout, "serial").unwrap_or_else(|e| panic!("{e}"));
        let layout = TimelineLayout::new(&log);
        assert_eq!(layout.lanes.len() as u64, cpus, "a lane per CPU");
        let label = |cpu: u32| {
            layout
                .bars
                .iter()
                .filter(|bar| bar.cpu == cpu)
                .any(|bar| bar.label.starts_with("alloc_test 64 nodes "))
        };
        assert!((0..cpus as u32).all(label), "a folded bar in every lane");
    }
}
