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

/// The QEMU arguments a `--dry-run` prints (one shell-quoted line: QEMU's
/// option values have `\,` for commas, and `-append "a b c"` has `\ ` for
/// spaces, which stays one word here).
fn dry_run(args: &[&str]) -> Vec<String> {
    let mut all = vec!["--dry-run"];
    all.extend_from_slice(args);
    let out = script(&all, 1 << 30);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let line = out
        .stderr
        .lines()
        .find(|l| l.starts_with("qemu-system-x86_64 "))
        .unwrap();
    line.replace("\\ ", "\u{0}")
        .split_whitespace()
        .map(|a| a.replace("\\,", ",").replace('\u{0}', " "))
        .collect()
}

/// Split a QEMU command into (machine arguments, boot arguments): the boot
/// arguments are what a guest boots and reports through, each a flag and
/// its value.
fn split_boot_args(cmd: &[String]) -> (Vec<String>, Vec<(String, String)>) {
    const BOOT_FLAGS: [&str; 7] = [
        "-serial", "-device", "-drive", "-fw_cfg", "-kernel", "-initrd", "-append",
    ];
    let (mut machine, mut boot) = (Vec::new(), Vec::new());
    let mut it = cmd.iter();
    while let Some(arg) = it.next() {
        if BOOT_FLAGS.contains(&arg.as_str()) {
            boot.push((arg.clone(), it.next().expect("a value").clone()));
        } else {
            machine.push(arg.clone());
        }
    }
    (machine, boot)
}

#[test]
fn linux_and_memboot_get_the_same_machine() {
    // Any files do for a dry run: it checks they exist, it boots nothing.
    let kernel = repo_root().join("Cargo.toml");
    let initrd = repo_root().join("README.md");
    let (kernel, initrd) = (kernel.to_str().unwrap(), initrd.to_str().unwrap());
    for shape in [
        &["-m", "1G", "--smp", "1"][..],
        &["-m", "64G", "--smp", "4", "--nodes", "2"],
        &["-m", "32T", "--smp", "2", "--nodes", "16"],
    ] {
        let memboot = dry_run(&[shape, &["--", "verify=off"]].concat());
        let linux = dry_run(&[shape, &["--linux", kernel, "--initrd", initrd]].concat());
        let (memboot_machine, memboot_boot) = split_boot_args(&memboot);
        let (linux_machine, linux_boot) = split_boot_args(&linux);
        assert_eq!(
            memboot_machine, linux_machine,
            "{shape:?}: the machines differ"
        );
        assert!(memboot_machine.iter().any(|a| a == "-numa") == shape.contains(&"--nodes"));
        let flags = |b: &[(String, String)]| b.iter().map(|(f, _)| f.clone()).collect::<Vec<_>>();
        assert_eq!(
            flags(&memboot_boot),
            ["-serial", "-device", "-drive", "-fw_cfg"],
            "{shape:?}"
        );
        assert_eq!(
            flags(&linux_boot),
            ["-serial", "-kernel", "-initrd", "-append"],
            "{shape:?}"
        );
        let append = &linux_boot[3].1;
        for want in [
            "console=ttyS0",
            "printk.time=1",
            "ignore_loglevel",
            "initcall_debug",
            "tsc_early_khz=",
        ] {
            assert!(
                append.contains(want),
                "{shape:?}: Linux command line {append:?} lacks {want}"
            );
        }
    }
}

#[test]
fn linux_is_refused_where_its_struct_pages_do_not_fit() {
    let kernel = repo_root().join("Cargo.toml");
    let kernel = kernel.to_str().unwrap();
    // 4T: 64 GiB of struct pages against 24 GiB available.
    let out = script(
        &[
            "--dry-run",
            "-m",
            "4T",
            "--linux",
            kernel,
            "--initrd",
            kernel,
        ],
        24 << 10,
    );
    assert_eq!(out.code, 64, "{}", out.stderr);
    assert!(
        out.stderr.contains("Linux") && out.stderr.contains("64 GiB"),
        "{}",
        out.stderr
    );
}

/// The line tests/bench.sh reads to place its warm-ups: every mode but plain
/// `memmap=ondemand` writes all RAM/64 bytes of struct pages, Linux too.
#[test]
fn dry_run_says_whether_every_struct_page_is_written() {
    let kernel = repo_root().join("Cargo.toml");
    let kernel = kernel.to_str().unwrap();
    let linux = ["--linux", kernel, "--initrd", kernel];
    let cases: [(&[&str], bool); 5] = [
        (&["--", "memmap=ondemand"], false),
        (&["--", "memmap=ondemand", "ondemand_drain=on"], true),
        (&["--", "memmap=deferred"], true),
        (&["--", "memmap=touch"], true),
        (&linux, true),
    ];
    let mib_64g = 64u64 << 10;
    for (tail, writes_all) in cases {
        let mut args = vec!["--dry-run", "-m", "64G"];
        args.extend_from_slice(tail);
        let out = script(&args, 1 << 30);
        assert_eq!(out.code, 0, "{args:?}: {}", out.stderr);
        let expected = if writes_all {
            format!(
                "run-qemu.sh: struct pages: every one written ({} MiB of host memory)",
                mib_64g / 64
            )
        } else {
            "run-qemu.sh: struct pages: initialised when first allocated".to_string()
        };
        assert!(
            out.stderr.lines().any(|l| l == expected),
            "{args:?}: no line {expected:?} in\n{}",
            out.stderr
        );
    }
}

/// The backend sizes (MiB) of a dry run's `-object memory-backend-ram,…`
/// arguments, in command-line order.
fn backend_sizes_mib(cmd: &[String]) -> Vec<u64> {
    value_of(cmd, "-object")
        .iter()
        .map(|o| {
            let size = o
                .split(',')
                .find_map(|kv| kv.strip_prefix("size="))
                .unwrap_or_else(|| panic!("no size in {o}"));
            size.strip_suffix('M')
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("size {size} is not whole MiB"))
        })
        .collect()
}

/// Sizes are decimal whatever their leading zeros, as QEMU reads them
/// (bash arithmetic would read 010 as octal 8 and fail on 08).
#[test]
fn sizes_and_counts_are_decimal() {
    for (size, mib) in [("010G", 10u64 << 10), ("08G", 8 << 10), ("0128M", 128)] {
        let cmd = dry_run(&["-m", size, "--", "memmap=ondemand"]);
        assert_eq!(value_of(&cmd, "-m"), [format!("{mib}M")], "-m {size}");
        assert_eq!(backend_sizes_mib(&cmd), [mib], "-m {size}");
    }
    // 0127 is 127 MiB (no suffix: MiB), below memboot's minimum, not octal 87.
    let out = script(&["--dry-run", "-m", "0127"], 1 << 30);
    assert_eq!(out.code, 64, "{}", out.stderr);
    assert!(out.stderr.contains("at least 128M"), "{}", out.stderr);
    let cmd = dry_run(&["--smp", "08", "--nodes", "02", "--timeout", "0900"]);
    assert_eq!(value_of(&cmd, "-smp"), ["8"]);
    assert_eq!(value_of(&cmd, "-numa").len(), 2);
}

/// A number too large for bash's 64-bit arithmetic is a usage error naming
/// its flag, never a wrapped value.
#[test]
fn overflow_is_a_usage_error_naming_the_flag() {
    // 2^44 + 1 TiB in MiB is 2^64 + 2^20: in 64 bits it wraps to 1T.
    let wraps = 17_592_186_044_417u128 << 20;
    assert_eq!(wraps as u64, 1 << 20, "the premise: it would wrap to 1T");
    let huge = "99999999999999999999999";
    for (flag, value) in [
        ("-m", "17592186044417T".to_string()),
        ("-m", format!("{huge}M")),
        ("-m", huge.to_string()),
        ("--smp", huge.to_string()),
        ("--nodes", huge.to_string()),
        ("--timeout", huge.to_string()),
    ] {
        let out = script(&["--dry-run", flag, &value], 1 << 30);
        assert_eq!(out.code, 64, "{flag} {value}: {}", out.stderr);
        assert!(
            out.stderr.contains(&format!("{flag} {value}: too large")),
            "{flag} {value}: {}",
            out.stderr
        );
        assert!(
            !out.stderr.contains("qemu-system-x86_64 "),
            "{}",
            out.stderr
        );
    }
}

/// A flag given twice is ambiguous: a usage error naming it, not "the last
/// one wins".
#[test]
fn repeated_flags_are_usage_errors_naming_the_flag() {
    for (args, flag) in [
        (&["-m", "1G", "-m", "2G"][..], "-m"),
        (&["-m", "1G", "--mem", "2G"], "-m"),
        (&["--smp", "2", "--smp", "4"], "--smp"),
        (&["--nodes", "2", "--nodes", "2"], "--nodes"),
        (&["--timeout", "9", "--timeout", "10"], "--timeout"),
        (&["--accel", "tcg", "--accel", "kvm"], "--accel"),
        (&["--log", "/dev/null", "--log", "/dev/null"], "--log"),
        (&["--uefi", "--uefi"], "--uefi"),
        (&["--print-cmd", "--print-cmd"], "--print-cmd"),
    ] {
        let out = script(&[&["--dry-run"], args].concat(), 1 << 30);
        assert_eq!(out.code, 64, "{args:?}: {}", out.stderr);
        assert!(
            out.stderr.contains(&format!("{flag} given twice")),
            "{args:?}: {}",
            out.stderr
        );
        assert!(
            !out.stderr.contains("qemu-system-x86_64 "),
            "{}",
            out.stderr
        );
    }
}

/// QEMU's own split of RAM over nodes when none was given a size (QEMU ≤
/// 5.1, `numa_default_auto_assign_ram()`): every node but the last gets
/// RAM / nodes rounded down to 8 MiB (`numa_mem_align_shift` 23), the last
/// the rest. In bytes, as QEMU computes it.
fn qemu_node_split_mib(ram_mib: u64, nodes: u64) -> Vec<u64> {
    let ram = ram_mib << 20;
    let part = (ram / nodes) & !((1u64 << 23) - 1);
    let mut sizes = vec![part; nodes as usize - 1];
    sizes.push(ram - part * (nodes - 1));
    sizes.into_iter().map(|b| b >> 20).collect()
}

#[test]
fn uneven_node_splits_follow_qemu() {
    assert_eq!(
        qemu_node_split_mib(1000, 3),
        [328, 328, 344],
        "the example in the README"
    );
    for (size, ram_mib, nodes) in [
        ("1000M", 1000u64, 3u64),
        ("1G", 1024, 3),
        ("64G", 64 << 10, 5),
        ("136M", 136, 17),
        ("513M", 513, 64),
        ("59T", 59 << 20, 7),
    ] {
        let n = nodes.to_string();
        let cmd = dry_run(&["-m", size, "--nodes", &n, "--", "memmap=ondemand"]);
        let want = qemu_node_split_mib(ram_mib, nodes);
        assert_eq!(backend_sizes_mib(&cmd), want, "-m {size} --nodes {nodes}");
        assert_eq!(want.iter().sum::<u64>(), ram_mib);
        assert_eq!(value_of(&cmd, "-m"), [format!("{ram_mib}M")]);
        assert_eq!(value_of(&cmd, "-numa").len() as u64, nodes);
    }
}

/// Below 8 MiB per node QEMU's split leaves every node but the last empty,
/// and QEMU 7.2 refuses a memory backend of size 0: a usage error giving
/// the smallest -m for that many nodes.
#[test]
fn nodes_that_would_be_empty_are_refused() {
    for (size, nodes) in [("128M", 17u64), ("511M", 64)] {
        let n = nodes.to_string();
        let out = script(&["--dry-run", "-m", size, "--nodes", &n], 1 << 30);
        assert_eq!(out.code, 64, "-m {size} --nodes {nodes}: {}", out.stderr);
        assert!(
            out.stderr
                .contains(&format!("at least {}M for {nodes} nodes", nodes * 8)),
            "{}",
            out.stderr
        );
        assert!(
            !out.stderr.contains("qemu-system-x86_64 "),
            "{}",
            out.stderr
        );
    }
}
