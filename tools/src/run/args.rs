//! run-qemu.sh's flags: read from one table ([`FLAGS`]), each at most once,
//! then checked into [`Args`]. Every refusal is a [`Usage`] error whose
//! message says what to give instead.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;

/// What `--help` prints (and run-qemu.sh's header points to).
pub const USAGE: &str = r#"  ./run-qemu.sh -m SIZE [--smp N] [--nodes N] [--accel tcg|kvm] [--bios|--uefi]
                [--timeout S] [--log FILE] [--print-cmd] [--dry-run]
                [--build-only|--no-build] [--svg FILE] [--default-devices]
                [--calibrate-tsc] [--host-memory prefault|cold]
                [--profile FILE [--baseline FILE [--baseline-margin PCT]]]
                [--trace FILE] [--qemu PATH] [-- KERNEL_OPTIONS...]
  ./run-qemu.sh --linux KERNEL --initrd INITRD -m SIZE [same machine options]
                [--trace FILE] [-- EXTRA_LINUX_CMDLINE...]  (KERNEL: a
                bzImage, or a vmlinux with a PVH note, booted through its
                PVH entry)
memboot boots through its PVH entry (QEMU's -kernel) unless --bios or
--uefi boots its disk image through rust-osdev/bootloader instead.
--profile FILE: count guest instructions with the memboot-profile TCG
plugin (README "Instruction profile"); FILE gets the profile as JSON, the
log's tail its phase figures. Slower: never a timing.
--trace FILE: after the boot, its phases per CPU (--linux: its initcalls
per PID and its memmap phases) as a Chrome trace-event file for Perfetto
UI or chrome://tracing, written by memboot-plot trace (README "Trace").
--baseline FILE: with --profile, compare each memmap phase's instructions,
stores and bytes per struct page with FILE (an earlier --profile's JSON):
exit 5 when one exceeds it by more than --baseline-margin PCT (default 1).
--qemu PATH: the QEMU to boot with (default: MEMBOOT_QEMU, else
qemu-system-x86_64 on PATH, installed when missing); 7.2 or newer.
tests/qemu-peer.sh prints the path of a QEMU 10.0 it unpacks.

Exit codes: 0 kernel reported success; 1 kernel reported failure;
2 QEMU failed (could not start, or stopped without the kernel's exit code,
e.g. a triple fault); 3 timeout; 4 build or setup failure; 5 a profiled
phase exceeds its --baseline; 64 usage error,
or a guest whose host-memory need would not fit this host ("Large guests").
--linux boots a stock Linux kernel on the same virtual machine (tests/bench.sh
--linux); exit 0 when it powered the machine off, 1 when it panicked,
2 otherwise.
"#;

/// A usage error: the message after `run-qemu.sh: `, exit 64.
#[derive(Debug, PartialEq, Eq)]
pub struct Usage(pub String);

impl fmt::Display for Usage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

macro_rules! usage {
    ($($arg:tt)*) => { Usage(format!($($arg)*)) };
}

/// One flag: its spellings (the first names it in messages) and, for a
/// flag with a value, what the value is ("`FLAG needs` a size").
pub struct Flag {
    pub names: &'static [&'static str],
    pub needs: Option<&'static str>,
}

/// Every flag run-qemu.sh takes (besides `-h`/`--help` and `--`). A new
/// flag is one entry here and its reading in [`Args::parse`].
pub const FLAGS: &[Flag] = &[
    value(&["-m", "--mem"], "a size"),
    value(&["--smp"], "a count"),
    value(&["--nodes"], "a count"),
    value(&["--accel"], "tcg or kvm"),
    switch(&["--bios"]),
    switch(&["--uefi"]),
    value(&["--timeout"], "seconds"),
    value(&["--log"], "a file"),
    switch(&["--print-cmd"]),
    switch(&["--dry-run"]),
    switch(&["--build-only"]),
    value(&["--linux"], "a kernel image"),
    value(&["--initrd"], "an initramfs"),
    value(&["--svg"], "a file"),
    value(&["--trace"], "a file"),
    switch(&["--no-build"]),
    switch(&["--default-devices"]),
    switch(&["--calibrate-tsc"]),
    value(&["--host-memory"], "prefault or cold"),
    value(&["--profile"], "a file"),
    value(&["--qemu"], "a QEMU binary"),
    value(&["--baseline"], "a profile JSON"),
    value(&["--baseline-margin"], "a percentage"),
];

const fn value(names: &'static [&'static str], needs: &'static str) -> Flag {
    Flag {
        names,
        needs: Some(needs),
    }
}

const fn switch(names: &'static [&'static str]) -> Flag {
    Flag { names, needs: None }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accel {
    Tcg,
    Kvm,
}

impl Accel {
    pub fn name(self) -> &'static str {
        match self {
            Accel::Tcg => "tcg",
            Accel::Kvm => "kvm",
        }
    }
}

/// What boots memboot: its PVH entry (QEMU's `-kernel`), or a disk image
/// through rust-osdev/bootloader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootPath {
    Pvh,
    Bios,
    Uefi,
}

impl BootPath {
    pub fn name(self) -> &'static str {
        match self {
            BootPath::Pvh => "pvh",
            BootPath::Bios => "bios",
            BootPath::Uefi => "uefi",
        }
    }
}

/// The host-memory state a boot starts in (`--host-memory`; README "Host
/// memory").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostMemory {
    /// All guest RAM backed before the guest starts.
    Prefault,
    /// Wait until the host is idle and its free page reporting quiet.
    Cold,
}

/// A stock Linux kernel to boot instead of memboot (`--linux`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Linux {
    pub kernel: PathBuf,
    pub initrd: PathBuf,
}

/// run-qemu.sh's arguments, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Args {
    /// `-m` as given, for messages.
    pub mem: String,
    pub mem_mib: u64,
    pub smp: u64,
    pub nodes: u64,
    pub accel: Accel,
    pub boot_path: BootPath,
    pub timeout_s: u64,
    pub log: Option<PathBuf>,
    pub print_cmd: bool,
    pub dry_run: bool,
    pub build_only: bool,
    pub no_build: bool,
    pub linux: Option<Linux>,
    pub svg: Option<PathBuf>,
    /// The trace-event file to write after the boot (`--trace`).
    pub trace: Option<PathBuf>,
    pub default_devices: bool,
    pub calibrate_tsc: bool,
    pub host_memory: Option<HostMemory>,
    pub profile: Option<PathBuf>,
    /// `--baseline`: the profile to compare `profile` with, and the margin
    /// in parts per million (1 % = 10000).
    pub baseline: Option<(PathBuf, u64)>,
    /// The QEMU binary chosen (`--qemu`, else MEMBOOT_QEMU); `None`: the
    /// machine's `qemu-system-x86_64`.
    pub qemu: Option<PathBuf>,
    /// The words after `--`: memboot's options, or Linux's for `--linux`.
    pub kernel_opts: Vec<String>,
}

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    Help,
    Run(Box<Args>),
}

/// The flags as given: name (its first spelling) → value ("" for a switch),
/// in order.
#[derive(Default)]
struct Given {
    values: HashMap<&'static str, String>,
    /// `--bios` or `--uefi`, whichever came first.
    boot_path: Option<&'static str>,
}

impl Given {
    fn text(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }
    fn switch(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }
    /// A file flag's value; an empty one is no file.
    fn path(&self, name: &str) -> Option<PathBuf> {
        self.text(name).filter(|v| !v.is_empty()).map(PathBuf::from)
    }
}

/// The largest number of decimal digits read as a number: every 18-digit
/// number fits 63 bits.
const MAX_DIGITS: usize = 18;

/// `value`'s digits without leading zeros (at least one), if it is all
/// decimal digits: numbers are decimal whatever their leading zeros.
fn decimal_digits(value: &str) -> Option<&str> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let trimmed = value.trim_start_matches('0');
    Some(if trimmed.is_empty() { "0" } else { trimmed })
}

/// A flag's count, 1..=max.
fn parse_count(flag: &str, value: &str, max: u64, what: &str) -> Result<u64, Usage> {
    let digits = decimal_digits(value)
        .ok_or_else(|| usage!("{flag} '{value}' is not a positive integer"))?;
    let too_large = || usage!("{flag} {value}: too large (at most {max} {what})");
    if digits.len() > MAX_DIGITS {
        return Err(too_large());
    }
    let n: u64 = digits.parse().map_err(|_| too_large())?;
    if n > max {
        return Err(too_large());
    }
    if n < 1 {
        return Err(usage!("{flag} {value}: must be at least 1"));
    }
    Ok(n)
}

/// The largest size read, in bytes.
const MAX_SIZE_BYTES: u64 = 1 << 62;

/// Why `-m`'s value is not a size.
enum SizeError {
    NotASize,
    TooLarge,
}

/// `value`, a decimal number with an optional K/M/G/T suffix (no suffix:
/// MiB, as QEMU reads `-m`), in bytes; at most [`MAX_SIZE_BYTES`], checked
/// on the digits before multiplying.
fn parse_mem_bytes(value: &str) -> Result<u64, SizeError> {
    let split = value
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(value.len());
    let (number, suffix) = value.split_at(split);
    let unit = match suffix.to_ascii_uppercase().as_str() {
        "" => 20,
        "B" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(SizeError::NotASize),
    };
    let digits = decimal_digits(number).ok_or(SizeError::NotASize)?;
    if digits.len() > MAX_DIGITS {
        return Err(SizeError::TooLarge);
    }
    let n: u64 = digits.parse().map_err(|_| SizeError::TooLarge)?;
    if n > MAX_SIZE_BYTES >> unit {
        return Err(SizeError::TooLarge);
    }
    Ok(n << unit)
}

/// The largest guest QEMU 7.2 and 10.0 start: they build their SMBIOS
/// tables and then assert in smbios_get_tables() from 60T on, whatever the
/// entry point (checked on both: 59T starts, 60T aborts); README "Large
/// guests".
pub const MAX_MEM_MIB: u64 = 59 << 20;
/// The smallest guest memboot boots in.
pub const MIN_MEM_MIB: u64 = 128;

/// `-m` in QEMU's syntax, in MiB: no suffix = MiB; a B after the suffix
/// (1GB) is allowed.
fn parse_mem_mib(mem: &str) -> Result<u64, Usage> {
    let size = match mem.as_bytes() {
        [.., s, b'B' | b'b'] if b"KkMmGgTt".contains(s) => &mem[..mem.len() - 1],
        _ => mem,
    };
    let bytes = parse_mem_bytes(size).map_err(|e| match e {
        SizeError::NotASize => usage!("-m '{mem}': expected a size like 512M, 64G or 1T (decimal)"),
        SizeError::TooLarge => usage!("-m {mem}: too large (at most 59T)"),
    })?;
    if !bytes.is_multiple_of(1 << 20) {
        return Err(usage!("-m {mem}: not a whole number of MiB"));
    }
    let mib = bytes >> 20;
    if mib < MIN_MEM_MIB {
        return Err(usage!("-m {mem}: memboot needs at least {MIN_MEM_MIB}M"));
    }
    if mib > MAX_MEM_MIB {
        return Err(usage!("-m {mem}: at most 59T: QEMU (7.2 and 10.0) fails an assertion in smbios_get_tables() from 60T (its SMBIOS memory-device tables outgrow their fixed area)"));
    }
    Ok(mib)
}

impl Args {
    /// Read run-qemu.sh's arguments (without the program name).
    pub fn parse(argv: &[String]) -> Result<Request, Usage> {
        let mut given = Given::default();
        let mut kernel_opts = Vec::new();
        let mut it = argv.iter();
        while let Some(arg) = it.next() {
            match arg.as_str() {
                "-h" | "--help" => return Ok(Request::Help),
                "--" => {
                    kernel_opts = it.by_ref().cloned().collect();
                    break;
                }
                _ => {}
            }
            let flag = FLAGS
                .iter()
                .find(|f| f.names.contains(&arg.as_str()))
                .ok_or_else(|| usage!("unknown argument '{arg}' (see --help)"))?;
            let name = flag.names[0];
            let value = match flag.needs {
                Some(what) => it
                    .next()
                    .ok_or_else(|| usage!("{arg} needs {what}"))?
                    .clone(),
                None => String::new(),
            };
            // A flag given twice is a usage error, not "the last one
            // wins": which of the two values was meant is ambiguous.
            if let Some(first) = given.values.get(name) {
                return Err(if first.is_empty() && value.is_empty() {
                    usage!("{name} given twice: give it once")
                } else {
                    usage!("{name} given twice ({name} {first}, then {name} {value}): give it once")
                });
            }
            if name == "--bios" || name == "--uefi" {
                if let Some(other) = given.boot_path {
                    return Err(usage!(
                        "{other} and {name}: give one (the PVH entry is the default)"
                    ));
                }
                given.boot_path = Some(name);
            }
            given.values.insert(name, value);
        }
        Args::check(&given, kernel_opts).map(|a| Request::Run(Box::new(a)))
    }

    fn check(given: &Given, kernel_opts: Vec<String>) -> Result<Args, Usage> {
        let smp = parse_count("--smp", given.text("--smp").unwrap_or("2"), 255, "vCPUs")?;
        let nodes = parse_count(
            "--nodes",
            given.text("--nodes").unwrap_or("1"),
            64,
            "nodes (memboot's limit)",
        )?;
        let timeout_s = parse_count(
            "--timeout",
            given.text("--timeout").unwrap_or("900"),
            999_999_999_999_999_999,
            "seconds",
        )?;
        let accel = match given.text("--accel").unwrap_or("tcg") {
            "tcg" => Accel::Tcg,
            "kvm" => Accel::Kvm,
            other => return Err(usage!("--accel '{other}': expected tcg or kvm")),
        };
        let host_memory = match given.text("--host-memory") {
            None | Some("") => None,
            Some("prefault") => Some(HostMemory::Prefault),
            Some("cold") => Some(HostMemory::Cold),
            Some(other) => {
                return Err(usage!(
                    "--host-memory '{other}': expected prefault or cold (README \"Host memory\")"
                ))
            }
        };
        let boot_path = match given.boot_path {
            Some("--bios") => BootPath::Bios,
            Some(_) => BootPath::Uefi,
            None => BootPath::Pvh,
        };
        let svg = given.path("--svg");
        let linux = check_linux(given, boot_path, svg.is_some())?;
        let profile = given.path("--profile");
        let baseline = check_baseline(given, profile.is_some())?;
        if profile.is_some() && accel != Accel::Tcg {
            return Err(usage!(
                "--profile counts instructions with a TCG plugin: drop --accel {}",
                accel.name()
            ));
        }
        let mem = given.text("-m").unwrap_or("1G").to_string();
        let mem_mib = parse_mem_mib(&mem)?;
        let dry_run = given.switch("--dry-run");
        Ok(Args {
            mem,
            mem_mib,
            smp,
            nodes,
            accel,
            boot_path,
            timeout_s,
            log: given.path("--log"),
            print_cmd: dry_run || given.switch("--print-cmd"),
            dry_run,
            build_only: given.switch("--build-only"),
            no_build: given.switch("--no-build"),
            linux,
            svg,
            trace: given.path("--trace"),
            default_devices: given.switch("--default-devices"),
            calibrate_tsc: given.switch("--calibrate-tsc"),
            host_memory,
            profile,
            baseline,
            qemu: given.path("--qemu"),
            kernel_opts,
        })
    }
}

/// `--baseline FILE [--baseline-margin PCT]`: with `--profile` only, FILE
/// exists, PCT a percentage (default 1).
fn check_baseline(given: &Given, profiled: bool) -> Result<Option<(PathBuf, u64)>, Usage> {
    let margin = given.text("--baseline-margin");
    let Some(file) = given.path("--baseline") else {
        return match margin {
            Some(_) => Err(usage!("--baseline-margin is for --baseline")),
            None => Ok(None),
        };
    };
    if !profiled {
        return Err(usage!(
            "--baseline compares a profile: give --profile FILE too"
        ));
    }
    if !file.is_file() {
        return Err(usage!("--baseline {}: no such file", file.display()));
    }
    let pct = match margin {
        None => 1.0,
        Some(m) => m
            .parse::<f64>()
            .ok()
            .filter(|p| p.is_finite() && (0.0..=1000.0).contains(p))
            .ok_or_else(|| usage!("--baseline-margin '{m}': a percentage, e.g. 1 or 0.5"))?,
    };
    Ok(Some((file, (pct * 10_000.0).round() as u64)))
}

/// `--linux KERNEL --initrd INITRD`: both files exist, and nothing that
/// needs memboot is asked for.
fn check_linux(given: &Given, boot_path: BootPath, svg: bool) -> Result<Option<Linux>, Usage> {
    let initrd = given.text("--initrd").filter(|i| !i.is_empty());
    let Some(kernel) = given.text("--linux").filter(|k| !k.is_empty()) else {
        return match initrd {
            Some(_) => Err(usage!("--initrd is for --linux")),
            None => Ok(None),
        };
    };
    if !std::path::Path::new(kernel).is_file() {
        return Err(usage!("--linux {kernel}: no such file"));
    }
    let initrd = initrd
        .filter(|i| std::path::Path::new(i).is_file())
        .ok_or_else(|| {
            usage!("--linux needs --initrd FILE (an initramfs whose /init powers off)")
        })?;
    if boot_path != BootPath::Pvh {
        return Err(usage!(
            "--linux boots through QEMU's -kernel; drop --{}",
            boot_path.name()
        ));
    }
    if svg {
        return Err(usage!(
            "--svg draws memboot's boot timeline; it cannot read a Linux log"
        ));
    }
    Ok(Some(Linux {
        kernel: kernel.into(),
        initrd: initrd.into(),
    }))
}
