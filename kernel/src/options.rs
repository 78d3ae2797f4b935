//! Kernel options: the command line that run-qemu.sh hands over through
//! QEMU's fw_cfg file `opt/memboot/cmdline`.
//!
//! Syntax: whitespace-separated `key=value` tokens. Every key is known and
//! every value checked: an unknown key, a bad value or a repeated key is an
//! [`OptionError`] and the boot fails with that message, because a silently
//! ignored option would make a measurement lie about what it measured.

use core::fmt;

/// A fault the kernel raises on purpose, so tests can check that the
/// exception path reports and exits instead of hanging or rebooting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TestFault {
    #[default]
    None,
    /// `panic!` from kernel code.
    Panic,
    /// `panic!` from inside a `kprintln!` (a value whose `Display` panics),
    /// with the serial lock held and part of the line sent: the panic
    /// handler's emergency log must break the lock to report it.
    PanicInLog,
    /// `panic!` while the summary line is being sent, part of it already on
    /// the wire: the boot must fail with status `summary` on a second,
    /// whole summary line, never pass the cut one off.
    PanicInSummary,
    /// Read from an unmapped address (#PF, vector 14).
    PageFault,
    /// `ud2` (#UD, vector 6).
    InvalidOpcode,
    /// After deferred init, flip the node bits of one free page's struct
    /// page, so verification must catch it and fail the boot.
    CorruptPage,
}

/// How struct pages are initialised (`memmap=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MemmapMode {
    /// Low zones and the first section of each node eagerly, the rest by
    /// per-node workers (Linux with `CONFIG_DEFERRED_STRUCT_PAGE_INIT`).
    #[default]
    Deferred,
    /// Every page eagerly on the boot CPU by memblock region (Linux 5.8's
    /// 73a6e474cb37: the 1 TB VMware regression).
    Regions,
    /// Every PFN of every zone span checked and initialised (pre-5.8 loop).
    PerPfn,
    /// The floor: one 64-byte store per present page on the same CPUs as
    /// `deferred`, nothing else (no zones, no buddy, no verification).
    Touch,
    /// The eager part of `deferred`, then every other present section
    /// handed to the allocator untouched: allocations initialise what they
    /// take, a block window at a time; `ondemand_drain=on` also drains the
    /// rest in the background.
    OnDemand,
}

impl MemmapMode {
    pub const ALL: [MemmapMode; 5] = [
        MemmapMode::Deferred,
        MemmapMode::Regions,
        MemmapMode::PerPfn,
        MemmapMode::Touch,
        MemmapMode::OnDemand,
    ];
    /// The option value, and the summary's `strategy`.
    pub const fn name(self) -> &'static str {
        match self {
            MemmapMode::Deferred => "deferred",
            MemmapMode::Regions => "regions",
            MemmapMode::PerPfn => "perpfn",
            MemmapMode::Touch => "touch",
            MemmapMode::OnDemand => "ondemand",
        }
    }
}

/// Whether `memmap=ondemand` drains the pool with workers after boot
/// (`ondemand_drain=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Drain {
    /// Untouched memory stays untouched until an allocation wants it.
    #[default]
    Off,
    /// Per-node workers drain the pool while the allocation test runs.
    On,
}

/// Bytes per node the boot-time allocation test allocates by default.
pub const ALLOC_TEST_DEFAULT_BYTES: u64 = 1 << 30;
/// The test's unit: 4 MiB of each of its four orders.
pub const ALLOC_TEST_ROUND_BYTES: u64 = 16 << 20;

/// Memory-block device size (`memory_block_size=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum BlockSizeOption {
    /// Linux x86 `probe_memory_block_size()`.
    #[default]
    Auto,
    /// A fixed size in bytes (128 MiB … 2 GiB, power of two).
    Bytes(u64),
}

/// Post-init verification (`verify=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Verify {
    /// Check every present PFN's struct page, the counts and the buddy lists.
    #[default]
    Full,
    Off,
}

/// Parsed kernel options; `Default` is what an empty command line gives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    pub test_fault: TestFault,
    pub memmap: MemmapMode,
    /// Cap on deferred-init workers per node (`None`: the node's CPU count).
    pub threads_per_node: Option<u32>,
    pub memory_block_size: BlockSizeOption,
    pub verify: Verify,
    pub ondemand_drain: Drain,
    /// Bytes per node for the allocation test (`alloc_test=`; 0: skip).
    pub alloc_test_bytes: u64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            test_fault: TestFault::default(),
            memmap: MemmapMode::default(),
            threads_per_node: None,
            memory_block_size: BlockSizeOption::default(),
            verify: Verify::default(),
            ondemand_drain: Drain::default(),
            alloc_test_bytes: ALLOC_TEST_DEFAULT_BYTES,
        }
    }
}

/// Parse `128M`, `2G`, `1024K` … into bytes.
fn parse_size(value: &str) -> Option<u64> {
    let split = value
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(value.len());
    let (digits, suffix) = value.split_at(split);
    let n: u64 = digits.parse().ok()?;
    let shift = match suffix {
        "K" | "k" => 10,
        "M" | "m" => 20,
        "G" | "g" => 30,
        "T" | "t" => 40,
        "" => 0,
        _ => return None,
    };
    n.checked_mul(1 << shift)
}

/// Why a command line was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OptionError<'a> {
    /// A token without `=`.
    Malformed { token: &'a str },
    /// A key memboot does not know.
    UnknownKey { key: &'a str },
    /// A known key with a value it does not accept.
    BadValue {
        key: &'a str,
        value: &'a str,
        expected: &'static str,
    },
    /// The same key twice: which one was meant is ambiguous.
    Repeated { key: &'a str },
}

impl fmt::Display for OptionError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OptionError::Malformed { token } => {
                write!(
                    f,
                    "option '{token}' is not of the form key=value (known keys: {KNOWN_KEYS})"
                )
            }
            OptionError::UnknownKey { key } => {
                write!(f, "unknown option '{key}' (known keys: {KNOWN_KEYS})")
            }
            OptionError::BadValue {
                key,
                value,
                expected,
            } => {
                write!(f, "option {key}={value}: expected {expected}")
            }
            OptionError::Repeated { key } => write!(f, "option '{key}' given more than once"),
        }
    }
}

/// Keys accepted on the command line, for error messages and the README.
pub const KNOWN_KEYS: &str =
    "memmap, threads_per_node, memory_block_size, verify, test_fault, ondemand_drain, alloc_test";

/// Parse a kernel command line.
pub fn parse(cmdline: &str) -> Result<Options, OptionError<'_>> {
    let mut options = Options::default();
    let mut seen: [&str; 8] = [""; 8];
    for (nr_seen, token) in cmdline.split_ascii_whitespace().enumerate() {
        let (key, value) = token
            .split_once('=')
            .ok_or(OptionError::Malformed { token })?;
        set_option(&mut options, key, value)?;
        // set_option accepted the key, so it is one of the known ones and
        // `seen` (one slot per known key) cannot overflow.
        if seen[..nr_seen].contains(&key) {
            return Err(OptionError::Repeated { key });
        }
        seen[nr_seen] = key;
    }
    Ok(options)
}

/// Apply one `key=value` to `options`.
fn set_option<'a>(
    options: &mut Options,
    key: &'a str,
    value: &'a str,
) -> Result<(), OptionError<'a>> {
    let bad = |expected| OptionError::BadValue {
        key,
        value,
        expected,
    };
    match key {
        "test_fault" => {
            options.test_fault = match value {
                "none" => TestFault::None,
                "panic" => TestFault::Panic,
                "panic_in_log" => TestFault::PanicInLog,
                "panic_in_summary" => TestFault::PanicInSummary,
                "page_fault" => TestFault::PageFault,
                "invalid_opcode" => TestFault::InvalidOpcode,
                "corrupt_page" => TestFault::CorruptPage,
                _ => {
                    return Err(bad(
                        "none|panic|panic_in_log|panic_in_summary|page_fault|invalid_opcode|corrupt_page",
                    ))
                }
            };
        }
        "memmap" => {
            options.memmap = MemmapMode::ALL
                .into_iter()
                .find(|m| m.name() == value)
                .ok_or(bad("deferred|regions|perpfn|touch|ondemand"))?;
        }
        "threads_per_node" => {
            let n: u32 = value
                .parse()
                .map_err(|_| bad("a number of threads from 1 to 255"))?;
            if !(1..=255).contains(&n) {
                return Err(bad("a number of threads from 1 to 255"));
            }
            options.threads_per_node = Some(n);
        }
        "memory_block_size" => {
            const EXPECTED: &str = "auto, or a power of two from 128M to 2G";
            options.memory_block_size = match value {
                "auto" => BlockSizeOption::Auto,
                _ => {
                    let bytes = parse_size(value).ok_or(bad(EXPECTED))?;
                    if !bytes.is_power_of_two() || !((128 << 20)..=(2 << 30)).contains(&bytes) {
                        return Err(bad(EXPECTED));
                    }
                    BlockSizeOption::Bytes(bytes)
                }
            };
        }
        "ondemand_drain" => {
            options.ondemand_drain = match value {
                "off" => Drain::Off,
                "on" => Drain::On,
                _ => return Err(bad("on|off")),
            };
        }
        "alloc_test" => {
            const EXPECTED: &str = "0, or a size per node that is a multiple of 16M (e.g. 1G)";
            let bytes = parse_size(value).ok_or(bad(EXPECTED))?;
            if !bytes.is_multiple_of(ALLOC_TEST_ROUND_BYTES) {
                return Err(bad(EXPECTED));
            }
            options.alloc_test_bytes = bytes;
        }
        "verify" => {
            options.verify = match value {
                "full" => Verify::Full,
                "off" => Verify::Off,
                _ => return Err(bad("full|off")),
            };
        }
        _ => return Err(OptionError::UnknownKey { key }),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_is_default() {
        assert_eq!(parse("").unwrap(), Options::default());
        assert_eq!(parse("  \n ").unwrap(), Options::default());
    }

    #[test]
    fn parses_test_fault() {
        assert_eq!(
            parse("test_fault=page_fault").unwrap().test_fault,
            TestFault::PageFault
        );
        assert_eq!(
            parse(" test_fault=panic ").unwrap().test_fault,
            TestFault::Panic
        );
    }

    #[test]
    fn parses_test_fault_panic_in_log() {
        assert_eq!(
            parse("test_fault=panic_in_log").unwrap().test_fault,
            TestFault::PanicInLog
        );
        assert_eq!(
            parse("verify=off test_fault=panic_in_log memmap=ondemand")
                .unwrap()
                .test_fault,
            TestFault::PanicInLog
        );
        // Exact value only, and the error lists it among the choices.
        let err = parse("test_fault=panic_in").unwrap_err();
        let msg = alloc::format!("{err}");
        assert!(msg.contains("|panic_in_log|"), "{msg}");
    }

    #[test]
    fn parses_test_fault_panic_in_summary() {
        assert_eq!(
            parse("test_fault=panic_in_summary").unwrap().test_fault,
            TestFault::PanicInSummary
        );
        let err = parse("test_fault=panic_in_sum").unwrap_err();
        let msg = alloc::format!("{err}");
        assert!(msg.contains("|panic_in_summary|"), "{msg}");
    }

    #[test]
    fn refuses_bad_input() {
        assert_eq!(
            parse("bogus=1"),
            Err(OptionError::UnknownKey { key: "bogus" })
        );
        assert_eq!(
            parse("test_fault"),
            Err(OptionError::Malformed {
                token: "test_fault"
            })
        );
        assert!(matches!(
            parse("test_fault=sometimes"),
            Err(OptionError::BadValue { .. })
        ));
        assert_eq!(
            parse("test_fault=none test_fault=panic"),
            Err(OptionError::Repeated { key: "test_fault" })
        );
        let msg = alloc::format!("{}", parse("x=1").unwrap_err());
        assert!(
            msg.contains("unknown option 'x'") && msg.contains("test_fault"),
            "{msg}"
        );
    }

    #[test]
    fn parses_memmap_options() {
        let o = parse("memmap=regions threads_per_node=1 memory_block_size=2G verify=off").unwrap();
        assert_eq!(o.memmap, MemmapMode::Regions);
        assert_eq!(o.threads_per_node, Some(1));
        assert_eq!(o.memory_block_size, BlockSizeOption::Bytes(2 << 30));
        assert_eq!(o.verify, Verify::Off);
        assert_eq!(parse("memmap=touch").unwrap().memmap, MemmapMode::Touch);
        assert_eq!(parse("memmap=perpfn").unwrap().memmap, MemmapMode::PerPfn);
        assert_eq!(
            parse("memory_block_size=128M").unwrap().memory_block_size,
            BlockSizeOption::Bytes(128 << 20)
        );
        assert_eq!(parse("").unwrap().memmap, MemmapMode::Deferred);
    }

    #[test]
    fn parses_ondemand_options() {
        let o = parse("memmap=ondemand ondemand_drain=on alloc_test=64M").unwrap();
        assert_eq!(o.memmap, MemmapMode::OnDemand);
        assert_eq!(o.ondemand_drain, Drain::On);
        assert_eq!(o.alloc_test_bytes, 64 << 20);
        let d = parse("").unwrap();
        assert_eq!(
            (d.ondemand_drain, d.alloc_test_bytes),
            (Drain::Off, 1 << 30)
        );
        assert_eq!(parse("alloc_test=0").unwrap().alloc_test_bytes, 0);
        assert_eq!(parse("alloc_test=1T").unwrap().alloc_test_bytes, 1 << 40);
        for bad in [
            "alloc_test=1000K",
            "alloc_test=8M",
            "alloc_test=x",
            "ondemand_drain=yes",
        ] {
            assert!(
                matches!(parse(bad), Err(OptionError::BadValue { .. })),
                "{bad}"
            );
        }
        // Every mode's name parses back to it.
        for m in MemmapMode::ALL {
            assert_eq!(
                parse(&alloc::format!("memmap={}", m.name()))
                    .unwrap()
                    .memmap,
                m
            );
        }
    }

    #[test]
    fn refuses_bad_memmap_options() {
        for bad in [
            "memmap=fast",
            "threads_per_node=0",
            "threads_per_node=x",
            "threads_per_node=256",
            "memory_block_size=64M",
            "memory_block_size=3G",
            "memory_block_size=192M",
            "memory_block_size=2T",
            "verify=maybe",
        ] {
            assert!(
                matches!(parse(bad), Err(OptionError::BadValue { .. })),
                "{bad}"
            );
        }
        assert_eq!(
            parse("verify=off verify=full"),
            Err(OptionError::Repeated { key: "verify" })
        );
    }
}
