//! run-qemu.sh's own decisions, without booting: which QEMU machine it
//! builds for a size (`--dry-run` prints the command and stops), and which
//! guests it refuses before QEMU starts because their struct pages would not
//! fit the host. Expectations are computed here from the rules QEMU and the
//! struct-page size impose, not read back from the script.
use std::process::Command;

use memboot_tests::repo_root;

struct Out {
    code: i32,
    stderr: String,
}

/// `run-qemu.sh ARGS` with the host's available memory pinned to
/// `available_mib`, so refusals do not depend on the machine running the test.
fn script(args: &[&str], available_mib: u64) -> Out {
    let out = Command::new(repo_root().join("run-qemu.sh"))
        .args(args)
        .env("MEMBOOT_HOST_AVAILABLE_MIB", available_mib.to_string())
        .output()
        .expect("run run-qemu.sh");
    Out {
        code: out.status.code().unwrap_or(-1),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The QEMU arguments a `--dry-run` prints (one shell-quoted line; QEMU's
/// option values here contain no spaces, so `\,` is the only quoting).
fn dry_run(args: &[&str]) -> Vec<String> {
    let mut all = vec!["--dry-run"];
    all.extend_from_slice(args);
    let out = script(&all, 1 << 30);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let line = out
        .stderr
        .lines()
        .find(|l| l.starts_with("qemu-system-x86_64 "))
        .unwrap_or_else(|| panic!("no QEMU command in:\n{}", out.stderr));
    line.split_whitespace()
        .map(|a| a.replace("\\,", ","))
        .collect()
}

fn value_of<'a>(cmd: &'a [String], flag: &str) -> Vec<&'a str> {
    cmd.windows(2)
        .filter(|w| w[0] == flag)
        .map(|w| w[1].as_str())
        .collect()
}

/// QEMU's pc machine puts RAM above 4 GiB at 1 TiB once it would cross the
/// HyperTransport hole, and needs room for the 64-bit PCI hole after it.
fn phys_bits_needed(ram_bytes: u64) -> u32 {
    let end = (1u64 << 40) + ram_bytes + (64 << 30);
    let bits = 64 - (end - 1).leading_zeros();
    bits.max(44)
}

#[test]
fn phys_bits_and_smbios_follow_the_size() {
    for (size, ram_bytes) in [
        ("1G", 1u64 << 30),
        ("1T", 1 << 40),
        ("4T", 4 << 40),
        ("32T", 32 << 40),
    ] {
        let cmd = dry_run(&["-m", size, "--", "memmap=ondemand"]);
        let cpu = value_of(&cmd, "-cpu");
        assert_eq!(
            cpu,
            [format!("max,phys-bits={}", phys_bits_needed(ram_bytes))],
            "{size}"
        );
        let machine = value_of(&cmd, "-machine").join(" ");
        // The SMBIOS 2.1 entry point overflows from 24T (QEMU aborts); up
        // to 4T the machine stays the one earlier measurements used.
        let smbios3 = machine.contains("smbios-entry-point-type=64");
        if ram_bytes >= 24 << 40 {
            assert!(smbios3, "{size}: {machine}");
        } else if ram_bytes <= 4 << 40 {
            assert!(!smbios3, "{size}: {machine}");
        }
        assert_eq!(value_of(&cmd, "-m"), [format!("{}M", ram_bytes >> 20)]);
    }
    assert_eq!(
        phys_bits_needed(32 << 40),
        46,
        "the measured 32T configuration"
    );
}

#[test]
fn sixteen_nodes_get_a_backend_each_and_share_the_cpus() {
    let cmd = dry_run(&[
        "-m",
        "32T",
        "--nodes",
        "16",
        "--smp",
        "4",
        "--",
        "memmap=ondemand",
    ]);
    let numa = value_of(&cmd, "-numa");
    assert_eq!(numa.len(), 16);
    let backends = value_of(&cmd, "-object");
    assert_eq!(backends.len(), 16);
    for b in &backends {
        assert!(b.contains(&format!("size={}M", (32u64 << 20) / 16)), "{b}");
        assert!(b.contains("reserve=off"), "{b}");
    }
    let with_cpus = numa.iter().filter(|n| n.contains("cpus=")).count();
    assert_eq!(with_cpus, 4, "4 vCPUs on 4 of the 16 nodes: {numa:?}");
}

#[test]
fn faithful_modes_are_refused_when_struct_pages_exceed_the_host() {
    // 128G of guest RAM: 2 GiB of struct pages (64 bytes per 4 KiB page).
    let struct_pages_gib = ((128u64 << 30) / 4096 * 64) >> 30;
    for opts in [
        vec![],
        vec!["memmap=deferred"],
        vec!["memmap=touch"],
        vec!["memmap=perpfn"],
        vec!["memmap=regions"],
        vec!["memmap=ondemand", "ondemand_drain=on"],
    ] {
        let mut args = vec!["--dry-run", "-m", "128G", "--"];
        args.extend(opts.iter().copied());
        let out = script(&args, 1024);
        assert_eq!(out.code, 64, "{opts:?} must be refused: {}", out.stderr);
        assert!(
            out.stderr
                .contains(&format!("needs {struct_pages_gib} GiB of host memory")),
            "{}",
            out.stderr
        );
        assert!(out.stderr.contains("memmap=ondemand"), "{}", out.stderr);
        assert!(
            !out.stderr.contains("qemu-system-x86_64 "),
            "refused before QEMU"
        );
    }
    // The same guest fits once the host has the memory, and ondemand never
    // needs it.
    assert_eq!(script(&["--dry-run", "-m", "128G"], 4096).code, 0);
    assert_eq!(
        script(&["--dry-run", "-m", "128G", "--", "memmap=ondemand"], 1024).code,
        0
    );
}

#[test]
fn sizes_beyond_what_qemu_starts_are_refused() {
    let out = script(
        &["--dry-run", "-m", "60T", "--", "memmap=ondemand"],
        1 << 30,
    );
    assert_eq!(out.code, 64);
    assert!(out.stderr.contains("smbios_get_tables"), "{}", out.stderr);
    assert_eq!(
        script(
            &["--dry-run", "-m", "59T", "--", "memmap=ondemand"],
            1 << 30
        )
        .code,
        0
    );
    assert_eq!(script(&["--dry-run", "-m", "64M"], 1 << 30).code, 64);
}
