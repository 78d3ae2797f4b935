//! The boots of the other QEMU memboot is tested on: QEMU 10.0, as
//! tests/qemu-peer.sh unpacks it from Debian 12's backports (the machine's
//! own QEMU, Debian 12's 7.2, boots every other test). One boot per way in
//! and per shape that QEMU's versions could build differently: the PVH
//! entry, both disk images, 16 NUMA nodes, a 32T `ondemand` guest, and a
//! fault. Each asserts the boot's outcome and that the QEMU named in its
//! log is the one asked for, never a duration.

use std::sync::OnceLock;
use std::time::Duration;

use memboot_tests::{boot, exit_code, repo_root, Boot};

/// The QEMU 10.0 binary tests/qemu-peer.sh prints (`qemu-10.0 PATH`),
/// fetched once per test run (the script caches under target/qemu-peer).
fn qemu_10() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| {
        let out = std::process::Command::new(repo_root().join("tests/qemu-peer.sh"))
            .output()
            .expect("run tests/qemu-peer.sh");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "tests/qemu-peer.sh failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
            .lines()
            .find_map(|l| l.strip_prefix("qemu-10.0 "))
            .unwrap_or_else(|| panic!("tests/qemu-peer.sh printed no qemu-10.0 line: {stdout}"))
            .to_string()
    })
}

/// `args` booted with QEMU 10.0; the log names that QEMU and no other.
fn boot_10(args: &[&str], kernel_opts: &[&str], wall_s: u64) -> Boot {
    let mut all = vec!["--qemu", qemu_10()];
    all.extend_from_slice(args);
    let b = boot(&all, kernel_opts, Duration::from_secs(wall_s));
    let named: Vec<&str> = b
        .run
        .stderr
        .lines()
        .filter_map(|l| l.strip_prefix("run-qemu.sh: qemu version: "))
        .collect();
    assert_eq!(named.len(), 1, "one QEMU version line\n{}", b.describe());
    assert!(
        named[0].starts_with("QEMU emulator version 10.0.") && named[0].ends_with(qemu_10()),
        "{}\n{}",
        named[0],
        b.describe()
    );
    b
}

/// A boot that succeeded, entered the way `entry` names, with every CPU
/// and node it was given, and verified.
fn assert_ok(b: &Boot, entry: &str, nodes: u64, cpus: u64) {
    assert_eq!(b.run.exit_code, exit_code::OK, "{}", b.describe());
    let s = b.summary();
    assert_eq!(s.status, "ok", "{}", b.describe());
    assert_eq!(s.entry, entry, "{}", b.describe());
    assert_eq!((s.nodes, s.cpus), (nodes, cpus), "{}", b.describe());
    assert_eq!(s.ap_online, cpus - 1, "{}", b.describe());
    assert_eq!(s.verify, "ok", "{}", b.describe());
}

#[test]
fn qemu_10_boots_through_pvh() {
    let b = boot_10(&["-m", "2G", "--smp", "2"], &[], 180);
    assert_ok(&b, "pvh", 1, 2);
}

#[test]
fn qemu_10_boots_the_bios_image() {
    let b = boot_10(&["-m", "1G", "--smp", "2", "--bios"], &[], 300);
    assert_ok(&b, "bios", 1, 2);
}

#[test]
fn qemu_10_boots_the_uefi_image() {
    let b = boot_10(&["-m", "1G", "--smp", "2", "--uefi"], &[], 300);
    assert_ok(&b, "uefi", 1, 2);
}

#[test]
fn qemu_10_boots_sixteen_nodes() {
    let b = boot_10(&["-m", "8G", "--smp", "2", "--nodes", "16"], &[], 300);
    assert_ok(&b, "pvh", 16, 2);
}

#[test]
fn qemu_10_boots_32t_ondemand() {
    let b = boot_10(
        &["-m", "32T", "--smp", "2", "--nodes", "16"],
        &["memmap=ondemand"],
        1200,
    );
    assert_eq!(b.run.exit_code, exit_code::OK, "{}", b.describe());
    let s = b.summary();
    assert_eq!(
        (&*s.status, &*s.strategy, s.nodes),
        ("ok", "ondemand", 16),
        "{}",
        b.describe()
    );
    assert_eq!(s.mem_bytes >> 40, 31, "just under 32 TiB usable");
}

#[test]
fn qemu_10_reports_a_fault() {
    let b = boot_10(
        &["-m", "512M", "--smp", "1"],
        &["test_fault=page_fault"],
        180,
    );
    assert_eq!(
        b.run.exit_code,
        exit_code::KERNEL_FAILURE,
        "{}",
        b.describe()
    );
    assert_eq!(b.summary().status, "exception", "{}", b.describe());
    assert!(
        b.has_message("EXCEPTION: vector 14 (page fault)"),
        "{}",
        b.describe()
    );
}
