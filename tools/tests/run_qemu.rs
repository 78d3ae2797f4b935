//! run-qemu.sh's own decisions, without booting: which QEMU machine it
//! builds for a size (what `--dry-run` prints), and which guests it refuses
//! before QEMU starts because their struct pages would not fit the host.
//! Through memboot-run's library, the flags given as a user types them;
//! expectations are computed here from the rules QEMU and the struct-page
//! size impose, not read back from the tool.

use std::path::{Path, PathBuf};

use memboot_tools::run::args::{Args, Request};
use memboot_tools::run::host_state::Available;
use memboot_tools::run::need::StructPages;
use memboot_tools::run::{boot, check, dry_run_lines, qemu, qemu_command, Checked, Paths, Stop};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The TSC rate the dry runs here get as the host's.
const HOST_TSC_KHZ: u64 = 2_600_000;

/// `run-qemu.sh ARGS` checked on a host with `available_mib` of memory.
fn checked(args: &[&str], available_mib: u64) -> Result<Checked, Stop> {
    let argv: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let Request::Run(args) = Args::parse(&argv)? else {
        panic!("{argv:?}: not a run")
    };
    let available = Available {
        mib: available_mib,
        source: "MEMBOOT_HOST_AVAILABLE_MIB",
    };
    check(*args, &available)
}

/// The usage error `args` gets on a host with `available_mib`.
fn refused(args: &[&str], available_mib: u64) -> String {
    match checked(args, available_mib) {
        Err(Stop::Usage(message)) => message,
        Err(other) => panic!("{args:?}: {other:?}, not a usage error"),
        Ok(_) => panic!("{args:?}: accepted"),
    }
}

fn accepted(args: &[&str], available_mib: u64) -> Checked {
    checked(args, available_mib).unwrap_or_else(|e| panic!("{args:?}: {e:?}"))
}

/// QEMU's command line for `args` (as `--dry-run` prints it, unquoted).
fn dry_run(args: &[&str]) -> Vec<String> {
    let c = accepted(args, 1 << 30);
    let tmpdir = Path::new("/tmp/memboot-run.test");
    let paths = Paths::of_this_build();
    let profile = c
        .args
        .profile
        .as_ref()
        .map(|_| boot::Profile::new(&c, &paths, tmpdir).unwrap());
    qemu_command(
        &c,
        &paths,
        tmpdir,
        Some(HOST_TSC_KHZ),
        profile.as_ref().map(|p| p.plugin_args.as_str()),
    )
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

/// The host-memory rule as the README states it ("Large guests"), in MiB:
/// a boot needs QEMU's own memory plus the struct pages it writes (64
/// bytes per 4 KiB page: RAM/64) plus, for Linux, Linux's own.
const QEMU_BASE_MIB: u64 = 192;
const QEMU_PER_TIB_MIB: u64 = 112;
const LINUX_BASE_MIB: u64 = 512;
const LINUX_PER_TIB_MIB: u64 = 384;

/// `mib_per_tib` MiB per TiB of `mem_mib`, rounded up.
fn per_tib(mib_per_tib: u64, mem_mib: u64) -> u64 {
    (mib_per_tib * mem_mib).div_ceil(1 << 20)
}

fn qemu_own_mib(mem_mib: u64) -> u64 {
    QEMU_BASE_MIB + per_tib(QEMU_PER_TIB_MIB, mem_mib)
}

fn linux_own_mib(mem_mib: u64) -> u64 {
    LINUX_BASE_MIB + per_tib(LINUX_PER_TIB_MIB, mem_mib)
}

/// Every struct page: 64 bytes per 4 KiB page, i.e. RAM/64, rounded up.
fn all_struct_pages_mib(mem_mib: u64) -> u64 {
    ((mem_mib << 20) / 4096 * 64).div_ceil(1 << 20)
}

/// A faithful mode's (or drain's) need: every struct page and QEMU.
fn faithful_need_mib(mem_mib: u64) -> u64 {
    all_struct_pages_mib(mem_mib) + qemu_own_mib(mem_mib)
}

/// Plain `memmap=ondemand`'s struct pages: the eager part (at most the
/// low zones below 4 GiB and one 128 MiB section per node) and what the
/// allocation test initialises (`alloc_mib` per node, at most half of each
/// node, plus a 4 MiB window per CPU per node), each 1/64 rounded up; at
/// most every struct page.
fn ondemand_struct_mib(node_mib: &[u64], smp: u64, alloc_mib: u64) -> u64 {
    let mem_mib: u64 = node_mib.iter().sum();
    let eager = mem_mib.min(4096) + node_mib.iter().map(|&n| n.min(128)).sum::<u64>();
    let alloc = if alloc_mib == 0 {
        0
    } else {
        node_mib.iter().map(|&n| alloc_mib.min(n / 2)).sum::<u64>()
            + smp * node_mib.len() as u64 * 4
    };
    (eager.div_ceil(64) + alloc.div_ceil(64)).min(all_struct_pages_mib(mem_mib))
}

#[test]
fn faithful_modes_are_refused_when_struct_pages_exceed_the_host() {
    // 128G of guest RAM: 2048 MiB of struct pages, and QEMU's own.
    let mem_mib = 128 << 10;
    let need = faithful_need_mib(mem_mib);
    assert_eq!(all_struct_pages_mib(mem_mib), 2048);
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
        let message = refused(&args, need - 1);
        for want in [
            format!("needs {need} MiB of host memory"),
            "2048 MiB of struct pages".to_string(),
            format!("{} MiB for QEMU itself", qemu_own_mib(mem_mib)),
            format!("{} MiB available", need - 1),
            "memmap=ondemand".to_string(),
            "a smaller -m".to_string(),
        ] {
            assert!(message.contains(&want), "no {want:?} in {message}");
        }
        // Exactly the need is enough.
        accepted(&args, need);
    }
    // Plain ondemand needs far less.
    accepted(&["--dry-run", "-m", "128G", "--", "memmap=ondemand"], 1024);
}

/// `struct_page=32` halves every struct page: RAM/128 (2T: 16 GiB), so a
/// faithful 2T boot fits 17 GiB of host memory at 32 bytes and is refused
/// at 64 (32 GiB of struct pages); Linux's stay 64 bytes whatever the
/// memboot option says.
#[test]
fn struct_page_32_halves_the_struct_pages_charged() {
    let mem_mib = 2 << 20;
    let half = all_struct_pages_mib(mem_mib) / 2;
    assert_eq!(half, 16384);
    let need = half + qemu_own_mib(mem_mib);
    let args = [
        "--dry-run",
        "-m",
        "2T",
        "--",
        "memmap=deferred",
        "struct_page=32",
    ];
    accepted(&args, need);
    let message = refused(&args, need - 1);
    assert!(
        message.contains(&format!("needs {need} MiB"))
            && message.contains("16384 MiB of struct pages, RAM/128"),
        "{message}"
    );
    let wide = refused(&["--dry-run", "-m", "2T", "--", "memmap=deferred"], need);
    assert!(wide.contains("RAM/64"), "{wide}");
}

/// The bypass of issue 17: the kernel joins its options into one line and
/// splits it on ASCII whitespace, so `"verify=off ondemand_drain=on"` as one
/// word is ondemand_drain=on, which writes every struct page.
#[test]
fn options_in_one_word_are_read_as_the_kernel_reads_them() {
    let mem_mib = 2 << 20;
    let need = faithful_need_mib(mem_mib);
    // Rust's split_ascii_whitespace: space, \t, \n, \x0c, \r.
    for sep in [" ", "\t", "\n", "\x0c", "\r", " \t\r\n "] {
        let word = format!("verify=off{sep}ondemand_drain=on");
        let args = ["--dry-run", "-m", "2T", "--", "memmap=ondemand", &word];
        let message = refused(&args, need - 1);
        assert!(
            message.contains("memmap=ondemand ondemand_drain=on writes every struct page")
                && message.contains(&format!("needs {need} MiB")),
            "{word:?}: {message}"
        );
        accepted(&args, need);
    }
    // \x0b is not ASCII whitespace to Rust: one token,
    // "verify=off\x0bondemand_drain=on", a bad verify value the kernel
    // refuses before it writes a struct page; no drain here.
    let c = accepted(
        &[
            "--dry-run",
            "-m",
            "2T",
            "--",
            "memmap=ondemand",
            "verify=off\x0bondemand_drain=on",
        ],
        1 << 20,
    );
    assert_eq!(
        dry_run_lines(&c)[0],
        "struct pages: none written (the kernel refuses its options first)"
    );
}

/// A key given twice is a usage error naming it (the kernel would refuse
/// it as bad_option); any other line the kernel refuses is left to the
/// kernel, which writes no struct page then, and gets no tsc_khz= added.
#[test]
fn repeated_kernel_options_are_usage_errors_naming_the_key() {
    for (opts, key) in [
        (&["memmap=ondemand", "memmap=deferred"][..], "memmap"),
        (&["memmap=ondemand verify=off", "verify=full"], "verify"),
        (&["alloc_test=0\talloc_test=0"], "alloc_test"),
        (
            &["ondemand_drain=on", "ondemand_drain=on"],
            "ondemand_drain",
        ),
    ] {
        let message = refused(&[&["--dry-run", "--"], opts].concat(), 1 << 30);
        assert!(
            message.contains(&format!("kernel option '{key}' given twice")),
            "{opts:?}: {message}"
        );
    }
    // The kernel's first error wins: an unknown key before the repeat.
    for opts in [
        &["verify", "verify"][..],
        &["ondemand_drain=on", "x=1", "ondemand_drain=on"],
    ] {
        let args = [&["--dry-run", "--"], opts].concat();
        let c = accepted(&args, 1 << 30);
        assert_eq!(c.need.writes, StructPages::None, "{opts:?}");
        let fw_cfg = value_of(&dry_run(&args), "-fw_cfg").join(" ");
        assert!(!fw_cfg.contains("tsc_khz="), "{fw_cfg}");
    }
}

/// Plain ondemand writes its eager part and what the allocation test
/// initialises: `alloc_test=SIZE` per node, at most half of each node.
#[test]
fn ondemand_is_refused_when_its_allocation_test_does_not_fit() {
    let nodes = vec![256u64 << 10; 16]; // -m 4T --nodes 16
    let mem_mib: u64 = nodes.iter().sum();
    let need = |alloc_mib| ondemand_struct_mib(&nodes, 2, alloc_mib) + qemu_own_mib(mem_mib);
    let big = need(1 << 20); // alloc_test=1T: capped at 128G per node
    let small = need(16 << 10);
    assert!(small < big && big < faithful_need_mib(mem_mib));
    let args = |alloc: &'static str| {
        vec![
            "--dry-run",
            "-m",
            "4T",
            "--nodes",
            "16",
            "--smp",
            "2",
            "--",
            "memmap=ondemand",
            alloc,
        ]
    };
    let message = refused(&args("alloc_test=1T"), big - 1);
    for want in [
        format!("needs {big} MiB of host memory"),
        format!("{} MiB for QEMU itself", qemu_own_mib(mem_mib)),
        "alloc_test=1T".to_string(),
        "a smaller alloc_test=".to_string(),
    ] {
        assert!(message.contains(&want), "no {want:?} in {message}");
    }
    accepted(&args("alloc_test=1T"), big);
    // The same size in bytes and with leading zeros (decimal) is the same need.
    for same in ["alloc_test=1099511627776", "alloc_test=01T"] {
        refused(&args(same), big - 1);
        accepted(&args(same), big);
    }
    accepted(&args("alloc_test=16G"), big - 1);
    refused(&args("alloc_test=16G"), small - 1);
    accepted(&args("alloc_test=16G"), small);
    // The default is 1G per node; 0 skips the test.
    let default = need(1 << 10);
    let c = accepted(
        &[
            "--dry-run",
            "-m",
            "4T",
            "--nodes",
            "16",
            "--",
            "memmap=ondemand",
        ],
        default,
    );
    assert!(
        dry_run_lines(&c)[1].contains(&format!("needs {default} MiB")),
        "{:?}",
        dry_run_lines(&c)
    );
    accepted(&args("alloc_test=0"), need(0));
    refused(&args("alloc_test=0"), need(0) - 1);
}

#[test]
fn sizes_beyond_what_qemu_starts_are_refused() {
    let message = refused(
        &["--dry-run", "-m", "60T", "--", "memmap=ondemand"],
        1 << 30,
    );
    assert!(message.contains("smbios_get_tables"), "{message}");
    accepted(
        &["--dry-run", "-m", "59T", "--", "memmap=ondemand"],
        1 << 30,
    );
    refused(&["--dry-run", "-m", "64M"], 1 << 30);
}

/// Split a QEMU command into (machine arguments, boot arguments): the boot
/// arguments are what a guest boots and reports through, each a flag and
/// its value.
fn split_boot_args(cmd: &[String]) -> (Vec<String>, Vec<(String, String)>) {
    const BOOT_FLAGS: [&str; 10] = [
        "-serial", "-device", "-chardev", "-bios", "-vga", "-drive", "-fw_cfg", "-kernel",
        "-initrd", "-append",
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

/// Any files do for a dry run: it checks they exist, it boots nothing.
fn linux_files() -> (String, String) {
    let file = |name: &str| repo_root().join(name).to_str().unwrap().to_string();
    (file("Cargo.toml"), file("README.md"))
}

#[test]
fn linux_and_memboot_get_the_same_machine() {
    let (kernel, initrd) = linux_files();
    for shape in [
        &["-m", "1G", "--smp", "1"][..],
        &["-m", "64G", "--smp", "4", "--nodes", "2"],
        &["-m", "32T", "--smp", "2", "--nodes", "16"],
    ] {
        let memboot = dry_run(&[shape, &["--", "verify=off"]].concat());
        let linux = dry_run(&[shape, &["--linux", &kernel, "--initrd", &initrd]].concat());
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
            ["-serial", "-device", "-chardev", "-device", "-bios", "-kernel", "-fw_cfg"],
            "{shape:?}"
        );
        // The disk images: the same machine, and the VGA device their
        // bootloader needs.
        let bios = dry_run(&[shape, &["--bios", "--", "verify=off"]].concat());
        let (bios_machine, bios_boot) = split_boot_args(&bios);
        assert_eq!(bios_machine, linux_machine, "{shape:?}: --bios machine");
        assert_eq!(
            flags(&bios_boot),
            ["-serial", "-device", "-chardev", "-device", "-vga", "-drive", "-fw_cfg"],
            "{shape:?}"
        );
        assert_eq!(
            flags(&linux_boot),
            ["-serial", "-bios", "-kernel", "-initrd", "-append"],
            "{shape:?}"
        );
        let value = |b: &[(String, String)], flag: &str| {
            b.iter().find(|(f, _)| f == flag).map(|(_, v)| v.clone())
        };
        // A -kernel boot gets the same firmware, whichever kernel it is.
        assert_eq!(
            value(&memboot_boot, "-bios"),
            value(&linux_boot, "-bios"),
            "{shape:?}"
        );
        assert_eq!(
            value(&bios_boot, "-bios"),
            None,
            "{shape:?}: the BIOS image needs SeaBIOS"
        );
        let append = &value(&linux_boot, "-append").unwrap();
        // memboot gets the TSC rate Linux gets, so neither calibrates.
        let memboot_cmdline = &value(&memboot_boot, "-fw_cfg").unwrap();
        assert!(
            memboot_cmdline.ends_with(&format!(",string=verify=off tsc_khz={HOST_TSC_KHZ}")),
            "{memboot_cmdline}"
        );
        for want in [
            "console=ttyS0",
            "printk.time=1",
            "ignore_loglevel",
            "initcall_debug",
            &format!("tsc_early_khz={HOST_TSC_KHZ}"),
            // A panic ends the boot at once (-no-reboot), not at the timeout.
            "panic=-1",
        ] {
            assert!(
                append.contains(want),
                "{shape:?}: Linux command line {append:?} lacks {want}"
            );
        }
    }
}

/// memboot tells the host its instants on QEMU's debug console at port
/// 0xe9, whose bytes go to a unix socket in the boot's scratch directory
/// (QEMU connecting as the client); a scratch directory whose socket path
/// would not fit a socket address boots without it.
#[test]
fn memboot_gets_a_debug_console_for_its_markers() {
    let cmd = dry_run(&["-m", "1G"]);
    assert_eq!(
        value_of(&cmd, "-chardev"),
        ["socket,id=marks,path=/tmp/memboot-run.test/marks.sock"]
    );
    assert!(
        value_of(&cmd, "-device").contains(&"isa-debugcon,iobase=0xe9,chardev=marks"),
        "{cmd:?}"
    );
    let long = PathBuf::from(format!("/tmp/{}", "x".repeat(100)));
    assert_eq!(qemu::marker_socket(&long), None);
    let short = Path::new("/tmp/memboot-run.test");
    assert_eq!(qemu::marker_socket(short), Some(short.join("marks.sock")));
}

/// The TSC rate run-qemu.sh adds is the host's, once: not when the options
/// give one, nor with --calibrate-tsc, nor for KVM (whose guest TSC need
/// not tick at the host's rate).
#[test]
fn memboot_gets_the_host_tsc_rate_once() {
    let cmdline = |args: &[&str]| value_of(&dry_run(args), "-fw_cfg").join(" ");
    let count = |s: &str| s.matches("tsc_khz=").count();
    let plain = cmdline(&["-m", "1G"]);
    assert!(
        plain.contains(&format!("tsc_khz={HOST_TSC_KHZ}")),
        "{plain}"
    );
    let given = cmdline(&["-m", "1G", "--", "tsc_khz=1234567"]);
    assert_eq!(count(&given), 1, "{given}");
    assert!(given.contains("tsc_khz=1234567"), "{given}");
    assert_eq!(count(&cmdline(&["-m", "1G", "--calibrate-tsc"])), 0);
    assert_eq!(count(&cmdline(&["-m", "1G", "--accel", "kvm"])), 0);
}

#[test]
fn linux_is_refused_where_its_struct_pages_do_not_fit() {
    let (kernel, _) = linux_files();
    // 4T: 64 GiB of struct pages, QEMU's own and Linux's own.
    let mem_mib = 4 << 20;
    let need = faithful_need_mib(mem_mib) + linux_own_mib(mem_mib);
    let args = [
        "--dry-run",
        "-m",
        "4T",
        "--linux",
        &kernel,
        "--initrd",
        &kernel,
    ];
    let message = refused(&args, need - 1);
    for want in [
        "with Linux writes every struct page".to_string(),
        format!("needs {need} MiB of host memory"),
        "65536 MiB of struct pages".to_string(),
        format!("{} MiB for Linux's own", linux_own_mib(mem_mib)),
    ] {
        assert!(message.contains(&want), "no {want:?} in {message}");
    }
    accepted(&args, need);
}

/// The line tests/bench.sh reads to place its warm-ups: every mode but plain
/// `memmap=ondemand` writes all RAM/64 bytes of struct pages, Linux too.
#[test]
fn dry_run_says_whether_every_struct_page_is_written() {
    let (kernel, _) = linux_files();
    let linux = ["--linux", &kernel, "--initrd", &kernel];
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
        let lines = dry_run_lines(&accepted(&args, 1 << 30));
        let expected = if writes_all {
            format!(
                "struct pages: every one written ({} MiB of host memory)",
                mib_64g / 64
            )
        } else {
            "struct pages: initialised when first allocated".to_string()
        };
        assert_eq!(lines[0], expected, "{args:?}");
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

/// Sizes are decimal whatever their leading zeros, as QEMU reads them.
#[test]
fn sizes_and_counts_are_decimal() {
    for (size, mib) in [("010G", 10u64 << 10), ("08G", 8 << 10), ("0128M", 128)] {
        let cmd = dry_run(&["-m", size, "--", "memmap=ondemand"]);
        assert_eq!(value_of(&cmd, "-m"), [format!("{mib}M")], "-m {size}");
        assert_eq!(backend_sizes_mib(&cmd), [mib], "-m {size}");
    }
    // 0127 is 127 MiB (no suffix: MiB), below memboot's minimum, not octal 87.
    let message = refused(&["--dry-run", "-m", "0127"], 1 << 30);
    assert!(message.contains("at least 128M"), "{message}");
    let cmd = dry_run(&["--smp", "08", "--nodes", "02", "--timeout", "0900"]);
    assert_eq!(value_of(&cmd, "-smp"), ["8"]);
    assert_eq!(value_of(&cmd, "-numa").len(), 2);
}

/// A number too large for 64 bits is a usage error naming its flag, never
/// a wrapped value.
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
        let message = refused(&["--dry-run", flag, &value], 1 << 30);
        assert!(
            message.contains(&format!("{flag} {value}: too large")),
            "{flag} {value}: {message}"
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
        (&["--bios", "--bios"], "--bios"),
        (&["--print-cmd", "--print-cmd"], "--print-cmd"),
        (&["--trace", "a.json", "--trace", "b.json"], "--trace"),
    ] {
        let message = refused(&[&["--dry-run"], args].concat(), 1 << 30);
        assert!(
            message.contains(&format!("{flag} given twice")),
            "{args:?}: {message}"
        );
    }
}

/// `--trace` without its file is a usage error saying so.
#[test]
fn trace_needs_a_file() {
    let message = refused(&["--dry-run", "--trace"], 1 << 30);
    assert!(message.contains("--trace needs a file"), "{message}");
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
        let message = refused(&["--dry-run", "-m", size, "--nodes", &n], 1 << 30);
        assert!(
            message.contains(&format!("at least {}M for {nodes} nodes", nodes * 8)),
            "{message}"
        );
    }
}

/// The model's constants are upper bounds of what this host measured: for
/// every boot in the committed bench results, the need computed for that
/// machine and mode is at least the boot's host peak RSS, and not wildly
/// more (a model that refuses everything is no model).
#[test]
fn the_model_covers_every_measured_boot() {
    let (kernel, _) = linux_files();
    let mut checked = 0;
    for dir in ["1-node", "16-nodes", "linux-peer-1t", "memdesc-1t-cold"] {
        let path = repo_root().join(format!("tests/bench-results/{dir}/bench.json"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        // "bench: TCG, 2 vCPUs, 16 node(s), …"
        let heading = json["meta"]["heading"].as_str().unwrap();
        let number_before = |what: &str| -> String {
            let end = heading.find(what).unwrap_or_else(|| panic!("{heading}"));
            heading[..end]
                .rsplit(' ')
                .next()
                .unwrap_or_else(|| panic!("{heading}"))
                .to_string()
        };
        let (smp, nodes) = (number_before(" vCPUs"), number_before(" node(s)"));
        for row in json["rows"].as_array().unwrap() {
            let mem = format!("{}M", row["mem_mib"].as_u64().unwrap());
            let rss = row["host_rss_mib"].as_u64().unwrap();
            let mode = row["mode"].as_str().unwrap();
            let mut args = vec!["--dry-run", "-m", &mem, "--smp", &smp, "--nodes", &nodes];
            // As tests/bench.sh boots them: MODE[+OPTION...], verify=off.
            let opts: Vec<String>;
            if row["kernel"] == "linux" {
                args.extend(["--linux", &kernel, "--initrd", &kernel]);
            } else {
                let mut parts = mode.split('+');
                opts = std::iter::once(format!("memmap={}", parts.next().unwrap()))
                    .chain(parts.map(str::to_string))
                    .chain(["verify=off".to_string()])
                    .collect();
                args.push("--");
                args.extend(opts.iter().map(String::as_str));
            }
            let c = accepted(&args, 1 << 30);
            assert_ne!(c.need.writes, StructPages::None, "{args:?}");
            let need = c.need.total_mib;
            assert!(
                need >= rss,
                "{dir} {mem} {mode}: the model needs {need} MiB, the boot used {rss} MiB"
            );
            assert!(
                need <= rss + rss / 4 + 512,
                "{dir} {mem} {mode}: the model needs {need} MiB for a boot that used {rss} MiB"
            );
            checked += 1;
        }
    }
    assert!(checked >= 40, "{checked} boots");
}

/// `--host-memory prefault` backs all guest RAM before the guest starts
/// (prealloc=on, which QEMU refuses beside reserve=off), so the refusal
/// charges all of it, not only the struct pages a boot writes: the
/// expectation is -m plus QEMU's own, computed here from the sizes.
#[test]
fn prefault_backs_and_charges_all_guest_ram() {
    for shape in [&["-m", "4G"][..], &["-m", "8G", "--nodes", "2"]] {
        let cmd = dry_run(&[shape, &["--host-memory", "prefault"]].concat());
        let backends = value_of(&cmd, "-object");
        assert!(!backends.is_empty());
        for b in backends {
            assert!(
                b.ends_with(",prealloc=on") && !b.contains("reserve=off"),
                "{b}"
            );
        }
        let plain = dry_run(shape);
        assert!(value_of(&plain, "-object")
            .iter()
            .all(|b| b.ends_with(",reserve=off")));
    }
    // 16 GiB of guest RAM cannot be prefaulted in 16 GiB of host memory,
    // though its 256 MiB of struct pages fit easily.
    let prefault = refused(
        &["--dry-run", "-m", "16G", "--host-memory", "prefault"],
        16 << 10,
    );
    assert!(
        prefault.contains(&format!(
            "needs {} MiB",
            (16 << 10) + qemu_own_mib(16 << 10)
        )) && prefault.contains("16384 MiB of guest RAM, all backed before the boot"),
        "{prefault}"
    );
    accepted(
        &["--dry-run", "-m", "16G", "--host-memory", "cold"],
        16 << 10,
    );
}

#[test]
fn host_memory_states_are_named() {
    // No warm state: it could not be made repeatable (README "Host memory").
    for state in ["hot", "warm"] {
        let message = refused(&["--dry-run", "--host-memory", state], 1 << 30);
        assert!(message.contains("expected prefault or cold"), "{message}");
    }
}

/// --profile puts the memboot-profile plugin on QEMU's command line, and
/// only under TCG: KVM runs no TCG plugin.
#[test]
fn profile_loads_the_plugin_under_tcg_only() {
    let cmd = dry_run(&["--dry-run", "--profile", "/tmp/p.json"]);
    let plugin = value_of(&cmd, "-plugin");
    assert_eq!(plugin.len(), 1, "{cmd:?}");
    let (so, args) = plugin[0].split_once(',').unwrap();
    assert!(so.ends_with("/libmemboot_profile.so"), "{so}");
    assert!(args.starts_with("out="), "{args}");
    assert!(
        value_of(&dry_run(&["--dry-run"]), "-plugin").is_empty(),
        "no plugin without --profile"
    );
    let message = refused(
        &["--dry-run", "--profile", "/tmp/p.json", "--accel", "kvm"],
        1 << 30,
    );
    assert!(
        message.contains("--profile counts instructions with a TCG plugin"),
        "{message}"
    );
}

/// `--baseline` compares a profile: it needs `--profile` and an existing
/// file, and its margin is a percentage.
#[test]
fn a_baseline_needs_a_profile_and_a_file() {
    let file = repo_root().join("README.md");
    let file = file.to_str().unwrap();
    for (args, why) in [
        (&["--baseline", file][..], "give --profile FILE too"),
        (
            &[
                "--profile",
                "/tmp/p.json",
                "--baseline",
                "/nonexistent/b.json",
            ],
            "no such file",
        ),
        (
            &["--baseline-margin", "2"],
            "--baseline-margin is for --baseline",
        ),
        (
            &[
                "--profile",
                "/tmp/p.json",
                "--baseline",
                file,
                "--baseline-margin",
                "much",
            ],
            "a percentage",
        ),
    ] {
        let message = refused(args, 1 << 30);
        assert!(message.contains(why), "{args:?}: {message}");
    }
    let c = accepted(
        &[
            "--profile",
            "/tmp/p.json",
            "--baseline",
            file,
            "--baseline-margin",
            "0.5",
        ],
        1 << 30,
    );
    assert_eq!(c.args.baseline, Some((file.into(), 5_000)));
    let c = accepted(&["--profile", "/tmp/p.json", "--baseline", file], 1 << 30);
    assert_eq!(c.args.baseline.map(|b| b.1), Some(10_000), "1 % by default");
}

/// What each request builds first: a dry run nothing, --linux and a PVH
/// boot no disk image.
#[test]
fn build_steps_follow_the_request() {
    let (kernel, initrd) = linux_files();
    let steps = |args: &[&str]| memboot_tools::run::build_steps(&accepted(args, 1 << 30).args);
    assert!(steps(&["--dry-run", "--bios"]).is_empty());
    assert_eq!(steps(&["-m", "1G"]), ["time", "qemu", "kernel", "tap"]);
    assert_eq!(
        steps(&["--uefi", "--svg", "x.svg"]),
        ["time", "qemu", "ovmf", "kernel", "images", "tap", "plot"]
    );
    assert_eq!(
        steps(&["--linux", &kernel, "--initrd", &initrd]),
        ["time", "qemu", "tap"]
    );
    // The trace is memboot-plot's, for memboot and Linux alike.
    assert_eq!(
        steps(&["--linux", &kernel, "--initrd", &initrd, "--trace", "t.json"]),
        ["time", "qemu", "tap", "plot"]
    );
    assert_eq!(
        steps(&["--trace", "t.json"]),
        ["time", "qemu", "kernel", "tap", "plot"]
    );
    assert_eq!(
        steps(&["--no-build", "--profile", "p.json"]),
        ["time", "qemu"]
    );
    // A QEMU chosen by --qemu is not installed.
    assert_eq!(
        steps(&["--qemu", "/opt/qemu/bin/qemu-system-x86_64"]),
        ["time", "kernel", "tap"]
    );
    assert_eq!(
        steps(&["--build-only"]),
        ["time", "qemu", "kernel", "images", "tap", "plot", "profiler"]
    );
}

/// Every QEMU builds the same machine: the machine type QEMU 7.2 calls
/// `pc`, by its versioned name; `--qemu` picks the binary, nothing else.
#[test]
fn the_machine_type_is_pinned_and_the_binary_chosen() {
    for args in [
        &["-m", "1G"][..],
        &["-m", "32T", "--nodes", "4", "--", "memmap=ondemand"],
    ] {
        let cmd = dry_run(args);
        assert_eq!(cmd[0], "qemu-system-x86_64", "{args:?}");
        let machine = value_of(&cmd, "-machine");
        assert_eq!(machine.len(), 1, "{args:?}");
        assert!(
            machine[0] == "pc-i440fx-7.2" || machine[0].starts_with("pc-i440fx-7.2,"),
            "{args:?}: {machine:?}"
        );
        let mut with_qemu = vec!["--qemu", "/opt/q/qemu-system-x86_64"];
        with_qemu.extend_from_slice(args);
        let other = dry_run(&with_qemu);
        assert_eq!(other[0], "/opt/q/qemu-system-x86_64");
        assert_eq!(other[1..], cmd[1..], "{args:?}: only the binary differs");
    }
}

/// The need `args` is charged (from the dry run's check).
fn need_mib(args: &[&str]) -> u64 {
    accepted(args, 1 << 30).need.total_mib
}

/// HVO leaves a 1 GiB page's struct pages unbacked but for its kept page
/// and two page tables (12 KiB of 16 MiB at 64 bytes): the charge leaves
/// them out for the pages that surely fit, and never drops below what the
/// boot writes (the small pages' struct pages, RAM/64 of what the 1 GiB
/// pages leave, and QEMU's own). Without HVO, or with `touch`, every
/// struct page is charged; plain `ondemand` adds the 1 GiB pages' struct
/// pages, which it writes in the huge-page phase.
#[test]
fn hvo_leaves_the_huge_pages_struct_pages_out_of_the_charge() {
    let tib_mib = 1u64 << 20;
    let boot = |opts: &[&str]| {
        let mut args = vec!["--dry-run", "-m", "1T", "--"];
        args.extend_from_slice(opts);
        need_mib(&args)
    };
    let (pages, per_page_mib) = (1000u64, 16u64);
    let huge = ["hugepagesz=1G", "hugepages=1000"];
    let hvo = ["hugepagesz=1G", "hugepages=1000", "hugetlb_free_vmemmap=on"];
    assert_eq!(boot(&huge), faithful_need_mib(tib_mib));
    let with_hvo = boot(&hvo);
    let small_pages_mib = all_struct_pages_mib(tib_mib) - pages * per_page_mib;
    // HVO's 12 KiB per page, in MiB.
    let hvo_mib = (pages * 12 * 1024) >> 20;
    let floor = small_pages_mib + qemu_own_mib(tib_mib) + hvo_mib;
    assert!(with_hvo >= floor, "{with_hvo} < {floor}");
    // At most a few pages' struct pages over it (the frames that might not
    // be free on the one node) and a 2 MiB host page.
    assert!(with_hvo <= floor + 4 * per_page_mib + 2, "{with_hvo}");
    let touch = [
        "memmap=touch",
        "hugepagesz=1G",
        "hugepages=1000",
        "hugetlb_free_vmemmap=on",
    ];
    assert_eq!(boot(&touch), faithful_need_mib(tib_mib));

    let plain = boot(&["memmap=ondemand"]);
    let ondemand = boot(&["memmap=ondemand", "hugepagesz=1G", "hugepages=1000"]);
    assert_eq!(ondemand, plain + pages * per_page_mib);
    let ondemand_hvo = boot(&[
        "memmap=ondemand",
        "hugepagesz=1G",
        "hugepages=1000",
        "hugetlb_free_vmemmap=on",
    ]);
    assert!(plain < ondemand_hvo && ondemand_hvo <= plain + hvo_mib + 3);

    // 8T with 8000 pages and HVO fits a 24 GiB host; without HVO its
    // 128 GiB of struct pages do not.
    let eight = |opts: &[&str]| {
        let mut args = vec!["--dry-run", "-m", "8T", "--"];
        args.extend_from_slice(opts);
        checked(&args, 24 << 10).map(|c| c.need.total_mib)
    };
    assert!(eight(&["hugepagesz=1G", "hugepages=8000", "hugetlb_free_vmemmap=on"]).is_ok());
    assert!(eight(&["hugepagesz=1G", "hugepages=8000"]).is_err());
}
