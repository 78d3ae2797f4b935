//! Linux's huge-page boot parameters on x86: `hugepagesz=`, `hugepages=`,
//! `default_hugepagesz=` and `hugetlb_free_vmemmap=`, read with the
//! meaning and order rules of mm/hugetlb.c (`hugepages_setup`,
//! `hugepagesz_setup`, `default_hugepagesz_setup`, the end of
//! `hugetlb_init`) and mm/hugetlb_vmemmap.c, as
//! Documentation/admin-guide/mm/hugetlbpage.rst describes them.
//!
//! Unlike every other kernel option, these keys repeat and their order
//! matters: a `hugepages=` binds to the `hugepagesz=` (or
//! `default_hugepagesz=`) before it, and one before any size is the
//! default size's. Linux does not refuse a boot over them either: a
//! parameter it cannot use is ignored with a `HugeTLB:` line, and so is it
//! here ([`HugeWarning`], printed by the kernel). So the option parser
//! only collects them, in order ([`HugeParam`]); [`plan`] reads them once
//! the machine is known (CPUID's 1 GiB pages, the NUMA nodes), as Linux
//! reads them after `setup_arch()`, into a [`HugePlan`].
//!
//! | parameter | Linux | here |
//! |---|---|---|
//! | `hugepagesz=2M`, `=1G` | register the size; later `hugepages=` count for it | [`SizePlan`] |
//! | `hugepages=N` | N pages of the size before it (the default size if first) | [`Pages::Total`] |
//! | `hugepages=0:N,1:M` | N pages on node 0, M on node 1 | [`Pages::PerNode`] |
//! | `default_hugepagesz=` | the default size, once | [`HugePlan::default_size`] |
//! | `hugetlb_free_vmemmap=on\|off` | HVO (`kstrtobool`), default off | [`HugePlan::hvo`] |
//!
//! Where memboot differs: a count or node number beyond 64 bits is an
//! invalid parameter (Linux's `simple_strtoull` wraps), and a node given
//! twice in one `hugepages=` keeps its last count, as Linux's per-node
//! array does, with the total their sum (Linux adds both to its total,
//! which its per-node allocation then does not use).

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

/// A huge page size x86 has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum HugePageSize {
    /// 2 MiB (a PMD): every x86_64 CPU, Linux's `HPAGE_SIZE` and default.
    Mib2,
    /// 1 GiB (a PUD): CPUs with `pdpe1gb` (CPUID 0x80000001 EDX bit 26).
    Gib1,
}

impl HugePageSize {
    pub const ALL: [HugePageSize; 2] = [HugePageSize::Mib2, HugePageSize::Gib1];

    pub const fn bytes(self) -> u64 {
        match self {
            HugePageSize::Mib2 => 2 << 20,
            HugePageSize::Gib1 => 1 << 30,
        }
    }

    /// Linux's `arch_hugetlb_valid_size()` on x86: 2 MiB, or 1 GiB where
    /// the CPU has 1 GiB pages.
    pub fn of_bytes(bytes: u64, has_1g_pages: bool) -> Option<Self> {
        HugePageSize::ALL
            .into_iter()
            .find(|s| s.bytes() == bytes && (*s == HugePageSize::Mib2 || has_1g_pages))
    }

    /// The size as Linux's messages print it (`string_get_size(size, 1,
    /// STRING_UNITS_2)`).
    pub const fn label(self) -> &'static str {
        match self {
            HugePageSize::Mib2 => "2.00 MiB",
            HugePageSize::Gib1 => "1.00 GiB",
        }
    }
}

/// The huge-page keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HugeKey {
    HugePageSz,
    HugePages,
    DefaultHugePageSz,
    FreeVmemmap,
}

impl HugeKey {
    pub const ALL: [HugeKey; 4] = [
        HugeKey::HugePageSz,
        HugeKey::HugePages,
        HugeKey::DefaultHugePageSz,
        HugeKey::FreeVmemmap,
    ];

    /// The key on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            HugeKey::HugePageSz => "hugepagesz",
            HugeKey::HugePages => "hugepages",
            HugeKey::DefaultHugePageSz => "default_hugepagesz",
            HugeKey::FreeVmemmap => "hugetlb_free_vmemmap",
        }
    }

    /// The huge-page key named `key`, if it is one.
    pub fn of(key: &str) -> Option<Self> {
        HugeKey::ALL.into_iter().find(|k| k.name() == key)
    }
}

/// One huge-page parameter as given: its value is read by [`plan`], which
/// needs the machine, and is quoted by its messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HugeParam {
    pub key: HugeKey,
    pub value: String,
}

/// How many pages of a size the command line asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pages {
    /// Spread over the nodes as the allocator finds room.
    Total(u64),
    /// `(node, pages)`, by node, each node once, every count above 0.
    PerNode(Vec<(u32, u64)>),
}

impl Pages {
    pub fn total(&self) -> u64 {
        match self {
            Pages::Total(n) => *n,
            Pages::PerNode(nodes) => nodes.iter().map(|&(_, n)| n).sum(),
        }
    }
}

/// What the command line asks of one huge page size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizePlan {
    pub size: HugePageSize,
    pub pages: Pages,
    /// Is it the default huge page size (`default_hugepagesz=`, else 2M)?
    pub is_default: bool,
    /// Free its pages' tail struct pages (HVO, `hugetlb_free_vmemmap=on`).
    pub hvo: bool,
}

impl fmt::Display for SizePlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "HugeTLB: command line asks for {} pages of {}",
            self.pages.total(),
            self.size.label()
        )?;
        if let Pages::PerNode(nodes) = &self.pages {
            f.write_str(" (")?;
            for (i, (node, n)) in nodes.iter().enumerate() {
                let sep = if i == 0 { "" } else { ", " };
                write!(f, "{sep}node {node}: {n}")?;
            }
            f.write_str(")")?;
        }
        if self.is_default {
            f.write_str(", the default size")?;
        }
        let hvo = if self.hvo { "on" } else { "off" };
        write!(f, ", vmemmap optimisation (HVO) {hvo}")
    }
}

/// The command line's huge-page parameters, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HugePlan {
    /// Each size the command line named or counted pages for, in the order
    /// it first did (Linux's hstates).
    pub sizes: Vec<SizePlan>,
    pub default_size: HugePageSize,
    /// `hugetlb_free_vmemmap=`: off unless given on.
    pub hvo: bool,
    /// What was ignored, in Linux's order and words.
    pub warnings: Vec<HugeWarning>,
}

/// What [`plan`] needs to know of the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Machine {
    /// CPUID's `pdpe1gb`: without it `hugepagesz=1G` is unsupported.
    pub has_1g_pages: bool,
    /// NUMA nodes (0 to `nodes - 1` online): a `hugepages=` naming another
    /// node is invalid.
    pub nodes: u32,
}

/// A parameter Linux ignores, with its message (the [`fmt::Display`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HugeWarning {
    /// A `hugepages=` right after a `hugepagesz=` or `default_hugepagesz=`
    /// that was ignored.
    NotAfterValidSize {
        value: String,
    },
    /// Two `hugepages=` for one size with no size between them.
    CountTwice {
        value: String,
    },
    /// A `hugepages=` Linux cannot read, or naming a node that is not
    /// online: `rest` is the value from where reading failed. The size's
    /// count is cleared.
    InvalidCount {
        rest: String,
    },
    /// A size x86 (or this CPU) does not have.
    UnsupportedSize {
        value: String,
    },
    /// A `hugepagesz=` for a size already registered.
    SizeTwice {
        value: String,
    },
    /// A second `default_hugepagesz=`.
    DefaultTwice {
        value: String,
    },
    UnsupportedDefault {
        value: String,
    },
    /// A leading `hugepages=` counts for the default size over a
    /// `hugepagesz=` pair for it: Linux's two lines.
    IgnoringCount {
        pages: u64,
        size: HugePageSize,
    },
    UsingDefaultCount {
        pages: u64,
    },
    /// A `hugetlb_free_vmemmap=` value `kstrtobool` does not read.
    MalformedVmemmap,
}

impl fmt::Display for HugeWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use HugeWarning as W;
        match self {
            W::NotAfterValidSize { value } => write!(
                f,
                "HugeTLB: hugepages={value} does not follow a valid hugepagesz, ignoring"
            ),
            W::CountTwice { value } => write!(
                f,
                "HugeTLB: hugepages= specified twice without interleaving hugepagesz=, ignoring hugepages={value}"
            ),
            W::InvalidCount { rest } => write!(f, "HugeTLB: Invalid hugepages parameter {rest}"),
            W::UnsupportedSize { value } => write!(f, "HugeTLB: unsupported hugepagesz={value}"),
            W::SizeTwice { value } => {
                write!(f, "HugeTLB: hugepagesz={value} specified twice, ignoring")
            }
            W::DefaultTwice { value } => write!(
                f,
                "HugeTLB: default_hugepagesz previously specified, ignoring {value}"
            ),
            W::UnsupportedDefault { value } => {
                write!(f, "HugeTLB: unsupported default_hugepagesz={value}")
            }
            W::IgnoringCount { pages, size } => write!(
                f,
                "HugeTLB: Ignoring hugepages={pages} associated with {} page size",
                size.label()
            ),
            W::UsingDefaultCount { pages } => write!(
                f,
                "HugeTLB: Using hugepages={pages} for number of default huge pages"
            ),
            W::MalformedVmemmap => f.write_str("Malformed early option 'hugetlb_free_vmemmap'"),
        }
    }
}

/// The huge-page parameters of a whole kernel command line, in order
/// (every other word skipped): what [`plan`] reads of a Linux boot's
/// `Command line:`.
pub fn params_in(cmdline: &str) -> Vec<HugeParam> {
    cmdline
        .split_ascii_whitespace()
        .filter_map(|word| {
            let (key, value) = word.split_once('=')?;
            Some(HugeParam {
                key: HugeKey::of(key)?,
                value: value.into(),
            })
        })
        .collect()
}

/// The huge page sizes Linux has set up by the time `hugetlb_init` reports
/// them, in its order (`for_each_hstate`): those the command line named,
/// as it named them; then 1 GiB where the CPU has the pages (x86's
/// `gigantic_pages_init`, an arch initcall); then 2 MiB, which
/// `hugetlb_init` always adds.
pub fn linux_hstates(plan: &HugePlan, machine: Machine) -> Vec<HugePageSize> {
    let mut sizes: Vec<HugePageSize> = plan.sizes.iter().map(|s| s.size).collect();
    for (size, present) in [
        (HugePageSize::Gib1, machine.has_1g_pages),
        (HugePageSize::Mib2, true),
    ] {
        if present && !sizes.contains(&size) {
            sizes.push(size);
        }
    }
    sizes
}

/// Read `params` (in command-line order) for `machine`, as Linux does:
/// `hugetlb_free_vmemmap=` first (an early parameter), then the others in
/// order, then what `hugetlb_init` settles at the end.
pub fn plan(params: &[HugeParam], machine: Machine) -> HugePlan {
    let mut state = State::new(machine);
    for p in params.iter().filter(|p| p.key == HugeKey::FreeVmemmap) {
        match kstrtobool(&p.value) {
            Some(on) => state.hvo = on,
            None => state.warnings.push(HugeWarning::MalformedVmemmap),
        }
    }
    for p in params {
        match p.key {
            HugeKey::HugePages => state.hugepages(&p.value),
            HugeKey::HugePageSz => state.hugepagesz(&p.value),
            HugeKey::DefaultHugePageSz => state.default_hugepagesz(&p.value),
            HugeKey::FreeVmemmap => {}
        }
    }
    state.finish()
}

/// One size's counts as Linux keeps them (`struct hstate`'s
/// `max_huge_pages` and `max_huge_pages_node`).
#[derive(Clone, Debug)]
struct Hstate {
    size: HugePageSize,
    max: u64,
    /// `(node, pages)`, each node once.
    nodes: Vec<(u32, u64)>,
}

/// Which count a `hugepages=` writes (Linux's `mhp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// No size registered yet: the default size's, settled at the end
    /// (`default_hstate_max_huge_pages`).
    Implicit,
    Hstate(usize),
}

/// mm/hugetlb.c's parsing state, field for field.
struct State {
    machine: Machine,
    hstates: Vec<Hstate>,
    /// `parsed_hstate`: the size the next `hugepages=` counts for.
    parsed: usize,
    /// `default_hstate_max_huge_pages`, `default_hugepages_in_node`.
    implicit: Hstate,
    /// `parsed_valid_hugepagesz`.
    valid: bool,
    parsed_default: bool,
    /// `default_hstate_idx`.
    default_idx: usize,
    /// The count the last `hugepages=` wrote (`last_mhp`).
    last: Option<Target>,
    hvo: bool,
    warnings: Vec<HugeWarning>,
}

impl State {
    fn new(machine: Machine) -> Self {
        Self {
            machine,
            hstates: Vec::new(),
            parsed: 0,
            implicit: Hstate {
                size: HugePageSize::Mib2,
                max: 0,
                nodes: Vec::new(),
            },
            valid: true,
            parsed_default: false,
            default_idx: 0,
            last: None,
            hvo: false,
            warnings: Vec::new(),
        }
    }

    fn target(&mut self, target: Target) -> &mut Hstate {
        match target {
            Target::Implicit => &mut self.implicit,
            Target::Hstate(i) => &mut self.hstates[i],
        }
    }

    /// `hugepages_setup`.
    fn hugepages(&mut self, value: &str) {
        if !self.valid {
            self.warn_value(value, |value| HugeWarning::NotAfterValidSize { value });
            self.valid = true;
            return;
        }
        let target = if self.hstates.is_empty() {
            Target::Implicit
        } else {
            Target::Hstate(self.parsed)
        };
        if self.last == Some(target) {
            self.warn_value(value, |value| HugeWarning::CountTwice { value });
            return;
        }
        match read_count(value, self.machine.nodes) {
            Ok(count) => {
                let h = self.target(target);
                match count {
                    Count::Plain(n) => h.max = n,
                    Count::Nodes(nodes) => {
                        for (node, n) in nodes {
                            h.nodes.retain(|&(k, _)| k != node);
                            h.nodes.push((node, n));
                            h.max = h.max.saturating_add(n);
                        }
                    }
                }
                self.last = Some(target);
            }
            Err(rest) => {
                self.warn_value(rest, |rest| HugeWarning::InvalidCount { rest });
                // `hugepages_clear_pages_in_node`.
                let h = self.target(target);
                h.max = 0;
                h.nodes.clear();
            }
        }
    }

    /// `hugepagesz_setup`.
    fn hugepagesz(&mut self, value: &str) {
        self.valid = false;
        let Some(size) = self.size_of(value) else {
            self.warn_value(value, |value| HugeWarning::UnsupportedSize { value });
            return;
        };
        if let Some(i) = self.index(size) {
            // Only the default size, named by default_hugepagesz= and
            // given no count yet, may be named again.
            if !self.parsed_default || i != self.default_idx || self.hstates[i].max != 0 {
                self.warn_value(value, |value| HugeWarning::SizeTwice { value });
                return;
            }
            self.parsed = i;
        } else {
            self.add_hstate(size);
        }
        self.valid = true;
    }

    /// `default_hugepagesz_setup`.
    fn default_hugepagesz(&mut self, value: &str) {
        self.valid = false;
        if self.parsed_default {
            self.warn_value(value, |value| HugeWarning::DefaultTwice { value });
            return;
        }
        let Some(size) = self.size_of(value) else {
            self.warn_value(value, |value| HugeWarning::UnsupportedDefault { value });
            return;
        };
        self.default_idx = self.add_hstate(size);
        self.valid = true;
        self.parsed_default = true;
        // A leading hugepages= counted for this size.
        if self.implicit.max != 0 {
            let h = &mut self.hstates[self.default_idx];
            h.max = self.implicit.max;
            h.nodes = self.implicit.nodes.clone();
            self.implicit.max = 0;
        }
    }

    /// The end of `hugetlb_init`: without `default_hugepagesz=` the
    /// default is 2M, and a leading `hugepages=` wins over a pair for it.
    fn finish(mut self) -> HugePlan {
        if !self.parsed_default {
            let counted = self.implicit.max != 0;
            let two_mib = match self.index(HugePageSize::Mib2) {
                Some(i) => Some(i),
                None if counted => Some(self.add_hstate(HugePageSize::Mib2)),
                None => None,
            };
            if let (Some(i), true) = (two_mib, counted) {
                let (pages, size) = (self.hstates[i].max, self.hstates[i].size);
                if pages != 0 {
                    self.warnings
                        .push(HugeWarning::IgnoringCount { pages, size });
                    let pages = self.implicit.max;
                    self.warnings.push(HugeWarning::UsingDefaultCount { pages });
                }
                self.hstates[i].max = self.implicit.max;
                self.hstates[i].nodes = core::mem::take(&mut self.implicit.nodes);
            }
        }
        let default_size = match self.parsed_default {
            true => self.hstates[self.default_idx].size,
            false => HugePageSize::Mib2,
        };
        let hvo = self.hvo;
        let sizes = self
            .hstates
            .into_iter()
            .map(|h| SizePlan {
                size: h.size,
                pages: pages_of(h.max, h.nodes),
                is_default: h.size == default_size,
                hvo,
            })
            .collect();
        HugePlan {
            sizes,
            default_size,
            hvo,
            warnings: self.warnings,
        }
    }

    /// `hugetlb_add_hstate`: registers `size` and makes it the size the
    /// next `hugepages=` counts for, unless it is registered already.
    fn add_hstate(&mut self, size: HugePageSize) -> usize {
        if let Some(i) = self.index(size) {
            return i;
        }
        self.hstates.push(Hstate {
            size,
            max: 0,
            nodes: Vec::new(),
        });
        self.parsed = self.hstates.len() - 1;
        self.parsed
    }

    fn index(&self, size: HugePageSize) -> Option<usize> {
        self.hstates.iter().position(|h| h.size == size)
    }

    /// `memparse` then `arch_hugetlb_valid_size`.
    fn size_of(&self, value: &str) -> Option<HugePageSize> {
        HugePageSize::of_bytes(memparse(value)?, self.machine.has_1g_pages)
    }

    fn warn_value(&mut self, value: &str, warning: impl FnOnce(String) -> HugeWarning) {
        self.warnings.push(warning(value.into()));
    }
}

/// A size's count as the plan gives it: per node where any node was
/// given pages (Linux then allocates only those), else the total.
fn pages_of(max: u64, mut nodes: Vec<(u32, u64)>) -> Pages {
    nodes.retain(|&(_, n)| n > 0);
    if nodes.is_empty() {
        return Pages::Total(max);
    }
    nodes.sort_unstable();
    Pages::PerNode(nodes)
}

/// A `hugepages=` value.
#[derive(Debug, PartialEq, Eq)]
enum Count {
    Plain(u64),
    /// `node:pages` pairs in order (empty for an empty value).
    Nodes(Vec<(u32, u64)>),
}

/// Read a `hugepages=` value as `hugepages_setup` does: a number, or
/// `node:pages` pairs separated by commas, each node below `nodes`; text
/// after a plain number or after a pair not followed by a comma is not
/// read. On failure, the value from where reading failed.
fn read_count(value: &str, nodes: u32) -> Result<Count, &str> {
    let mut p = value;
    let mut pairs = Vec::new();
    while !p.is_empty() {
        let (n, after) = leading_decimal(p).ok_or(p)?;
        let Some(q) = after.strip_prefix(':') else {
            // A plain number only as the whole value's start.
            return if p.len() == value.len() {
                Ok(Count::Plain(n))
            } else {
                Err(p)
            };
        };
        let node = u32::try_from(n)
            .ok()
            .filter(|&node| node < nodes)
            .ok_or(p)?;
        let (pages, after) = leading_decimal(q).ok_or(q)?;
        pairs.push((node, pages));
        match after.strip_prefix(',') {
            Some(rest) => p = rest,
            None => break,
        }
    }
    Ok(Count::Nodes(pairs))
}

/// `sscanf("%lu")`: the decimal number `text` starts with, and the rest.
fn leading_decimal(text: &str) -> Option<(u64, &str)> {
    let len = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let n = text[..len].parse().ok()?;
    Some((n, &text[len..]))
}

/// Linux's `memparse`: `simple_strtoull(text, base 0)` (`0x` hex, a
/// leading `0` octal, else decimal) then an optional `K M G T P E` in
/// either case; text after it is not read. `None` when the number does
/// not fit in 64 bits.
fn memparse(text: &str) -> Option<u64> {
    let (radix, body) = match text.get(..2) {
        Some("0x" | "0X") => (16, &text[2..]),
        _ if text.starts_with('0') => (8, text),
        _ => (10, text),
    };
    let len = body
        .find(|c: char| !c.is_digit(radix))
        .unwrap_or(body.len());
    let n = if len == 0 {
        0
    } else {
        u64::from_str_radix(&body[..len], radix).ok()?
    };
    let shift = crate::memmap_forms::suffix_shift(&body[len..]).unwrap_or(0);
    n.checked_mul(1 << shift)
}

/// Linux's `kstrtobool`: `y t e 1` and `on` (any case) are true, `n f d
/// 0` and `off` false, by their first one or two characters.
fn kstrtobool(value: &str) -> Option<bool> {
    let b = value.as_bytes();
    match b.first().map(u8::to_ascii_lowercase)? {
        b'y' | b't' | b'e' | b'1' => Some(true),
        b'n' | b'f' | b'd' | b'0' => Some(false),
        b'o' => match b.get(1).map(u8::to_ascii_lowercase)? {
            b'n' => Some(true),
            b'f' => Some(false),
            _ => None,
        },
        _ => None,
    }
}

pub mod report;

#[cfg(test)]
mod tests;
