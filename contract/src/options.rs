//! Kernel options: the command line that run-qemu.sh hands over through
//! QEMU's fw_cfg file `opt/memboot/cmdline`, parsed by the kernel and read
//! by the host tools with the same rules.
//!
//! Syntax: whitespace-separated `key=value` tokens. Every key is known and
//! every value checked: an unknown key, a bad value or a repeated key is an
//! [`OptionError`] and the boot fails with that message, because a silently
//! ignored option would make a measurement lie about what it measured.
//!
//! Two families of Linux's own parameters are read as Linux reads them
//! instead. Linux's `memmap=` forms may be given many times beside one
//! mode ([`crate::memmap_forms`]). The huge-page keys (`hugepagesz=`,
//! `hugepages=`, `default_hugepagesz=`, `hugetlb_free_vmemmap=`) are the
//! one exception to the rule on repeated keys: they repeat, their order is
//! their meaning (a `hugepages=` counts for the `hugepagesz=` before it),
//! and what Linux ignores with a `HugeTLB:` line is ignored with that line,
//! not refused; they are collected here in order ([`Options::hugetlb`])
//! and read by [`crate::hugepage_forms::plan`] once the CPU and the NUMA
//! nodes are known.

use alloc::vec::Vec;
use core::fmt;

/// How memory-block devices find each section's block
/// (`memory_block_lookup=`): `indexed` (the default, Linux since
/// 4fb6eabf1037) or `linear` (Linux before it: O(sections × blocks)).
use crate::hugepage_forms::{HugeKey, HugeParam};
use crate::memmap_forms::{self, Form, FormError, MAX_FORMS};
use crate::option_values::{BlockLookup, BuddyStore, StructPageSize};

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
    /// Before verification, flip a node bit of one free page's struct page
    /// (with `memmap=ondemand` a page initialised by growth), so the page
    /// scan must catch it and fail the boot.
    CorruptPage,
    /// Initialise the first block window processed after boot twice,
    /// bypassing the claim: identical bytes, so only the per-chunk init
    /// counter can catch it.
    DoubleInit,
    /// Before verification, point a free-list link at a page that is not
    /// the head of a free block (a tail of the same block).
    ListCorrupt,
    /// Before verification, put a free block inside the untouched pool
    /// (`memmap=ondemand` only).
    PoolOverlap,
    /// Give up on the first AP before it can claim its trampoline round,
    /// so it runs the trampoline late, while the next AP is being started:
    /// it must halt there, not take the next AP's stack (needs ≥ 3 CPUs).
    LateAp,
    /// After the huge-page phase, write the first tail struct page beyond
    /// the kept vmemmap page of the first 1 GiB page HVO maps, or without
    /// one of the first 2 MiB page HVO remapped: the page is read-only,
    /// and the page-fault handler must name it (needs `hugepagesz=1G` or
    /// `2M`, `hugepages=` and `hugetlb_free_vmemmap=on`).
    HvoTail,
}

impl TestFault {
    /// The faults that damage Linux state for verification to find.
    pub const fn damages_state(self) -> bool {
        matches!(
            self,
            TestFault::CorruptPage
                | TestFault::DoubleInit
                | TestFault::ListCorrupt
                | TestFault::PoolOverlap
        )
    }

    /// The option value.
    pub const fn name(self) -> &'static str {
        match self {
            TestFault::None => "none",
            TestFault::Panic => "panic",
            TestFault::PanicInLog => "panic_in_log",
            TestFault::PanicInSummary => "panic_in_summary",
            TestFault::PageFault => "page_fault",
            TestFault::InvalidOpcode => "invalid_opcode",
            TestFault::CorruptPage => "corrupt_page",
            TestFault::DoubleInit => "double_init",
            TestFault::ListCorrupt => "list_corrupt",
            TestFault::PoolOverlap => "pool_overlap",
            TestFault::LateAp => "late_ap",
            TestFault::HvoTail => "hvo_tail",
        }
    }

    pub const ALL: [TestFault; 12] = [
        TestFault::None,
        TestFault::Panic,
        TestFault::PanicInLog,
        TestFault::PanicInSummary,
        TestFault::PageFault,
        TestFault::InvalidOpcode,
        TestFault::CorruptPage,
        TestFault::DoubleInit,
        TestFault::ListCorrupt,
        TestFault::PoolOverlap,
        TestFault::LateAp,
        TestFault::HvoTail,
    ];
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

/// How log lines reach the serial console (`console=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Console {
    /// Appended to a ring in memory and written to the UART off the
    /// logging CPU's path, by an idle AP (or by the boot CPU once no AP
    /// will): until the first AP starts, nothing reaches the host.
    #[default]
    Buffered,
    /// Written to the UART by the CPU that logs it, as it is logged, from
    /// the moment the command line is read, so a boot that hangs during
    /// memory init shows how far it got. The lines and their order are
    /// the same as buffered (the boot CPU's held-back report still prints
    /// where it does). Slower: under TCG every byte costs the logging CPU
    /// about 1.2 µs, so boot-CPU phases take longer; not for measurements.
    Direct,
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
    pub memory_block_lookup: BlockLookup,
    pub verify: Verify,
    pub ondemand_drain: Drain,
    /// Bytes per node for the allocation test (`alloc_test=`; 0: skip).
    pub alloc_test_bytes: u64,
    /// The TSC frequency in kHz, given (`tsc_khz=`, as Linux's
    /// `tsc_early_khz=`): no calibration. `None`: CPUID, else the PIT.
    pub tsc_khz: Option<u64>,
    /// The struct page layout (`struct_page=64|32|8`).
    pub struct_page: StructPageSize,
    /// Where the buddy allocator keeps free blocks (`buddy=`), if given;
    /// [`Options::buddy_store`] is what applies.
    pub buddy: Option<BuddyStore>,
    pub console: Console,
    /// Linux's `memmap=` forms (`exactmap`, `nn@ss`, `nn#ss`, `nn$ss`,
    /// `nn`), in command-line order: the firmware map is edited with them
    /// before memblock (`memmap::user_map`). Empty: the firmware's map.
    pub user_map: Vec<Form>,
    /// Linux's huge-page parameters, in command-line order: their order is
    /// their meaning ([`crate::hugepage_forms::plan`] reads them).
    pub hugetlb: Vec<HugeParam>,
}

impl Options {
    /// The buddy allocator's store: as given, else free lists where the
    /// struct page can hold them and bitmaps where it cannot.
    pub const fn buddy_store(&self) -> BuddyStore {
        match self.buddy {
            Some(store) => store,
            None => BuddyStore::default_for(self.struct_page.has_list_link()),
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Self {
            test_fault: TestFault::default(),
            memmap: MemmapMode::default(),
            threads_per_node: None,
            memory_block_size: BlockSizeOption::default(),
            memory_block_lookup: BlockLookup::default(),
            verify: Verify::default(),
            ondemand_drain: Drain::default(),
            alloc_test_bytes: ALLOC_TEST_DEFAULT_BYTES,
            tsc_khz: None,
            struct_page: StructPageSize::default(),
            buddy: None,
            console: Console::default(),
            user_map: Vec::new(),
            hugetlb: Vec::new(),
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
    /// A `memmap=` value read as Linux's forms that is not one.
    MemmapForm { token: &'a str, error: FormError },
    /// More `memmap=` forms than memboot takes.
    TooManyForms { forms: usize },
    /// Two settings that cannot both be meant: `option` would be silently
    /// ignored (or could not act) under `other`.
    Conflict {
        option: &'a str,
        other: Setting<'a>,
        why: &'static str,
    },
}

/// An option as the user gave it, or the default that applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setting<'a> {
    /// The `key=value` token from the command line.
    Given(&'a str),
    /// The default, spelled `key=value`.
    Default(&'static str),
}

impl fmt::Display for Setting<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Setting::Given(token) => f.write_str(token),
            Setting::Default(token) => write!(f, "{token} (the default)"),
        }
    }
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
            OptionError::MemmapForm { token, error } => write!(f, "option {token}: {error}"),
            OptionError::TooManyForms { forms } => write!(
                f,
                "{forms} memmap= forms: memboot takes up to {MAX_FORMS}; merge neighbouring ranges"
            ),
            OptionError::Conflict { option, other, why } => {
                write!(f, "option {option} does nothing with {other}: {why}")
            }
        }
    }
}

/// `test_fault=` values, for the error message.
const TEST_FAULTS: &str =
    "none|panic|panic_in_log|panic_in_summary|page_fault|invalid_opcode|corrupt_page|double_init|list_corrupt|pool_overlap|late_ap|hvo_tail";

/// Keys accepted on the command line, for error messages and the README.
pub const KNOWN_KEYS: &str =
    "memmap, threads_per_node, memory_block_size, memory_block_lookup, verify, test_fault, ondemand_drain, alloc_test, tsc_khz, struct_page, buddy, console, hugepagesz, hugepages, default_hugepagesz, hugetlb_free_vmemmap";

/// `tsc_khz=` bounds: 1 MHz to 100 GHz, what any x86 TSC could tick at.
pub const TSC_KHZ_RANGE: core::ops::RangeInclusive<u64> = 1_000..=100_000_000;

/// Parse a kernel command line.
pub fn parse(cmdline: &str) -> Result<Options, OptionError<'_>> {
    let mut options = Options::default();
    let mut given = Given::default();
    for token in cmdline.split_ascii_whitespace() {
        let (key, value) = token
            .split_once('=')
            .ok_or(OptionError::Malformed { token })?;
        // Linux's huge-page keys repeat, in an order that means something,
        // and Linux ignores a bad value with a message: read in plan().
        if let Some(key) = HugeKey::of(key) {
            let value = value.into();
            options.hugetlb.push(HugeParam { key, value });
            continue;
        }
        // Linux's memmap= forms may be given many times, beside one mode.
        if key == "memmap" && memmap_forms::is_linux_form(value) {
            add_user_map_forms(&mut options, token, value)?;
            continue;
        }
        set_option(&mut options, key, value)?;
        // set_option accepted the key, so it is one of the known ones.
        if given.tokens.iter().any(|(k, _)| *k == key) {
            return Err(OptionError::Repeated { key });
        }
        given.tokens.push((key, token));
    }
    check_combination(&options, &given)?;
    Ok(options)
}

/// Append the forms of one `memmap=` token (commas separate forms, as in
/// Linux) to `options.user_map`.
fn add_user_map_forms<'a>(
    options: &mut Options,
    token: &'a str,
    value: &'a str,
) -> Result<(), OptionError<'a>> {
    for form in memmap_forms::parse_value(value) {
        let form = form.map_err(|error| OptionError::MemmapForm { token, error })?;
        options.user_map.push(form);
    }
    if options.user_map.len() > MAX_FORMS {
        return Err(OptionError::TooManyForms {
            forms: options.user_map.len(),
        });
    }
    Ok(())
}

/// The tokens of the options the command line set, by key.
#[derive(Default)]
struct Given<'a> {
    tokens: Vec<(&'a str, &'a str)>,
}

impl<'a> Given<'a> {
    /// `key`'s token if given, else `default` (spelled `key=value`).
    fn setting(&self, key: &str, default: &'static str) -> Setting<'a> {
        self.token(key)
            .map_or(Setting::Default(default), Setting::Given)
    }
    fn token(&self, key: &str) -> Option<&'a str> {
        self.tokens.iter().find(|(k, _)| *k == key).map(|(_, t)| *t)
    }
}

/// Refuse settings that would be silently ignored, or that could not act,
/// given the others: every option the user gives must change what the boot
/// does (README "Kernel options"). Defaults never conflict.
fn check_combination<'a>(o: &Options, given: &Given<'a>) -> Result<(), OptionError<'a>> {
    let memmap = given.setting("memmap", "memmap=deferred");
    let conflict = |key: &str, other: Setting<'a>, why: &'static str| {
        given.token(key).map_or(Ok(()), |option| {
            Err(OptionError::Conflict { option, other, why })
        })
    };
    let pool = o.memmap == MemmapMode::OnDemand;
    if o.ondemand_drain == Drain::On && !pool {
        conflict(
            "ondemand_drain",
            memmap,
            "the drain initialises memmap=ondemand's untouched pool, which this mode does not have",
        )?;
    }
    // Which modes run deferred-init workers at all.
    match o.memmap {
        MemmapMode::Regions | MemmapMode::PerPfn => conflict(
            "threads_per_node",
            memmap,
            "this mode initialises every page on the boot CPU; no deferred-init workers run",
        )?,
        MemmapMode::OnDemand if o.ondemand_drain == Drain::Off => conflict(
            "threads_per_node",
            given.setting("ondemand_drain", "ondemand_drain=off"),
            "memmap=ondemand runs workers only to drain the pool (ondemand_drain=on)",
        )?,
        _ => {}
    }
    if o.buddy_store() == BuddyStore::Lists && !o.struct_page.has_list_link() {
        conflict(
            "buddy",
            given.setting("struct_page", "struct_page=64"),
            "this struct page has no list link to keep free lists in (use buddy=bitmaps)",
        )?;
    }
    if o.memmap == MemmapMode::Touch {
        conflict(
            "buddy",
            memmap,
            "memmap=touch builds no allocator (leave buddy= out)",
        )?;
        if o.alloc_test_bytes > 0 {
            conflict(
                "alloc_test",
                memmap,
                "memmap=touch builds no allocator to test (use alloc_test=0)",
            )?;
        }
        if o.verify == Verify::Full {
            conflict(
                "verify",
                memmap,
                "memmap=touch writes no Linux state to verify (use verify=off)",
            )?;
        }
    }
    check_test_fault(o, given, memmap)
}

/// The faults that damage state need verification on, a mode with Linux
/// state, and something of the kind they damage.
fn check_test_fault<'a>(
    o: &Options,
    given: &Given<'a>,
    memmap: Setting<'a>,
) -> Result<(), OptionError<'a>> {
    let fault = o.test_fault;
    let Some(option) = given.token("test_fault").filter(|_| fault.damages_state()) else {
        return Ok(());
    };
    let refuse = |other, why| Err(OptionError::Conflict { option, other, why });
    if o.memmap == MemmapMode::Touch {
        return refuse(
            memmap,
            "memmap=touch has no Linux state or allocator to damage",
        );
    }
    if o.verify == Verify::Off {
        return refuse(
            given.setting("verify", "verify=full"),
            "nothing would check the damage",
        );
    }
    let pool = o.memmap == MemmapMode::OnDemand;
    let drain = o.ondemand_drain == Drain::On;
    match fault {
        TestFault::PoolOverlap if !pool => {
            refuse(memmap, "only memmap=ondemand has an untouched pool to put a block in")
        }
        TestFault::PoolOverlap if drain => refuse(
            given.setting("ondemand_drain", "ondemand_drain=off"),
            "the drain leaves no untouched pool by the time verification runs",
        ),
        TestFault::DoubleInit if matches!(o.memmap, MemmapMode::Regions | MemmapMode::PerPfn) => {
            refuse(
                memmap,
                "this mode initialises everything on the boot CPU: no block window is claimed to initialise twice",
            )
        }
        TestFault::CorruptPage | TestFault::DoubleInit
            if pool && !drain && o.alloc_test_bytes == 0 =>
        {
            refuse(
                given.setting("alloc_test", "alloc_test=1G"),
                "with memmap=ondemand it damages a block window initialised by growth, and alloc_test=0 grows none",
            )
        }
        _ => Ok(()),
    }
}

/// Apply one `key=value` to `options`.
fn set_option<'a>(
    options: &mut Options,
    key: &'a str,
    value: &'a str,
) -> Result<(), OptionError<'a>> {
    let (_, set) = SETTERS
        .iter()
        .find(|(k, _)| *k == key)
        .ok_or(OptionError::UnknownKey { key })?;
    set(options, value).map_err(|expected| OptionError::BadValue {
        key,
        value,
        expected,
    })
}

/// One key's parser: sets its field of [`Options`] from the value, or
/// returns what it expected instead (the error message's `expected`).
type SetField = fn(&mut Options, &str) -> Result<(), &'static str>;

/// Every key with its parser, one row each.
const SETTERS: &[(&str, SetField)] = &[
    ("test_fault", set_test_fault),
    ("memmap", set_memmap),
    ("threads_per_node", set_threads_per_node),
    ("memory_block_size", set_memory_block_size),
    ("memory_block_lookup", set_memory_block_lookup),
    ("ondemand_drain", set_ondemand_drain),
    ("alloc_test", set_alloc_test),
    ("tsc_khz", set_tsc_khz),
    ("struct_page", set_struct_page),
    ("buddy", set_buddy),
    ("console", set_console),
    ("verify", set_verify),
];

fn set_test_fault(options: &mut Options, value: &str) -> Result<(), &'static str> {
    options.test_fault = TestFault::ALL
        .into_iter()
        .find(|f| f.name() == value)
        .ok_or(TEST_FAULTS)?;
    Ok(())
}

fn set_memmap(options: &mut Options, value: &str) -> Result<(), &'static str> {
    options.memmap = MemmapMode::ALL
        .into_iter()
        .find(|m| m.name() == value)
        .ok_or("deferred|regions|perpfn|touch|ondemand, or Linux's forms: exactmap, nn[KMG]@ss[KMG], nn[KMG]#ss[KMG], nn[KMG]$ss[KMG], nn[KMG]")?;
    Ok(())
}

fn set_threads_per_node(options: &mut Options, value: &str) -> Result<(), &'static str> {
    const EXPECTED: &str = "a number of threads from 1 to 255";
    let n: u32 = value.parse().map_err(|_| EXPECTED)?;
    if !(1..=255).contains(&n) {
        return Err(EXPECTED);
    }
    options.threads_per_node = Some(n);
    Ok(())
}

fn set_memory_block_size(options: &mut Options, value: &str) -> Result<(), &'static str> {
    const EXPECTED: &str = "auto, or a power of two from 128M to 2G";
    options.memory_block_size = match value {
        "auto" => BlockSizeOption::Auto,
        _ => {
            let bytes = parse_size(value).ok_or(EXPECTED)?;
            if !bytes.is_power_of_two() || !((128 << 20)..=(2 << 30)).contains(&bytes) {
                return Err(EXPECTED);
            }
            BlockSizeOption::Bytes(bytes)
        }
    };
    Ok(())
}

fn set_memory_block_lookup(options: &mut Options, value: &str) -> Result<(), &'static str> {
    options.memory_block_lookup = BlockLookup::ALL
        .into_iter()
        .find(|l| l.name() == value)
        .ok_or("indexed|linear")?;
    Ok(())
}

fn set_ondemand_drain(options: &mut Options, value: &str) -> Result<(), &'static str> {
    options.ondemand_drain = match value {
        "off" => Drain::Off,
        "on" => Drain::On,
        _ => return Err("on|off"),
    };
    Ok(())
}

fn set_alloc_test(options: &mut Options, value: &str) -> Result<(), &'static str> {
    const EXPECTED: &str = "0, or a size per node that is a multiple of 16M (e.g. 1G)";
    let bytes = parse_size(value).ok_or(EXPECTED)?;
    if !bytes.is_multiple_of(ALLOC_TEST_ROUND_BYTES) {
        return Err(EXPECTED);
    }
    options.alloc_test_bytes = bytes;
    Ok(())
}

fn set_tsc_khz(options: &mut Options, value: &str) -> Result<(), &'static str> {
    const EXPECTED: &str =
        "the TSC frequency in kHz, a whole number from 1000 to 100000000 (e.g. 2600000)";
    let khz: u64 = value.parse().map_err(|_| EXPECTED)?;
    if !TSC_KHZ_RANGE.contains(&khz) {
        return Err(EXPECTED);
    }
    options.tsc_khz = Some(khz);
    Ok(())
}

fn set_struct_page(options: &mut Options, value: &str) -> Result<(), &'static str> {
    options.struct_page = value
        .parse()
        .ok()
        .and_then(StructPageSize::of_bytes)
        .ok_or("64|32|8 (bytes per struct page)")?;
    Ok(())
}

fn set_buddy(options: &mut Options, value: &str) -> Result<(), &'static str> {
    options.buddy = Some(
        BuddyStore::ALL
            .into_iter()
            .find(|b| b.name() == value)
            .ok_or("lists|bitmaps (where the buddy allocator keeps free blocks)")?,
    );
    Ok(())
}

fn set_console(options: &mut Options, value: &str) -> Result<(), &'static str> {
    options.console = match value {
        "buffered" => Console::Buffered,
        "direct" => Console::Direct,
        _ => return Err("buffered|direct (direct: each line written out as logged; slower)"),
    };
    Ok(())
}

fn set_verify(options: &mut Options, value: &str) -> Result<(), &'static str> {
    options.verify = match value {
        "full" => Verify::Full,
        "off" => Verify::Off,
        _ => return Err("full|off"),
    };
    Ok(())
}

#[cfg(test)]
mod tests;
