//! Reading a stock Linux kernel's serial log (the bench's Linux peer, booted
//! by `run-qemu.sh --linux` with `printk.time=1 ignore_loglevel`) into the
//! figures the bench sets beside memboot's.
//!
//! What is measured, all from printk timestamps (time since boot):
//! - **early memmap**: from the `Zone ranges:` line to the line after the
//!   last `On node N, zone Z: … pages in unavailable ranges` line. That
//!   block is `free_area_init()`, which initialises the struct pages of the
//!   low zones and the first section of each node on the boot CPU (the
//!   rest is deferred), and ends with `init_unavailable_range()`'s lines.
//! - **deferred init**: `node N deferred pages initialised in Xms`, one per
//!   node, printed by the `pgdatinit` threads that run on the node's CPUs
//!   (`pr_info("node %d deferred pages initialised in %ums\n", ...)`, in
//!   `mm/page_alloc.c` in 6.1, `mm/mm_init.c` in 6.12).
//! - **memory ready** (`allocatable_ns`, the definition memboot's summary
//!   uses: memory init stops blocking the boot and every present page can
//!   be had from the allocator): `page_alloc_init_late()` returning from its
//!   wait for the `pgdatinit` threads. Its log shows that as the next line
//!   the boot thread prints, `devtmpfs: initialized`: in 6.1's
//!   `kernel_init_freeable()` the calls after it (`page_ext_init()`,
//!   `do_basic_setup()` → `driver_init()` → `devtmpfs_init()`) print nothing
//!   before it. So the figure includes the wake-up after the last thread
//!   and `page_alloc_init_late()`'s own tail (`set_zone_contiguous()` per
//!   zone), as memboot's includes its join.
//!   6.12 (and the 7.3 backport) print the `Memory:` line from
//!   `page_alloc_init_late()` after the wait, so that its free count
//!   includes the deferred pages: there it comes between the deferred-init
//!   lines and `devtmpfs: initialized` (6.1 prints it before deferred init
//!   starts). The figure's marker is the same for both.
//! - **struct pages initialised**: every present page (the `Memory:` line's
//!   physical size) plus the holes `init_unavailable_range()` initialises
//!   (`On node N, zone Z: K pages in unavailable ranges`), less the 1 GiB
//!   huge pages' tails that 6.9 and later leave to hugetlb
//!   ([`crate::hugetlb_log`]); Linux has written all of them by the time
//!   memory is ready.
//! - **huge-page preparation** (only for a boot that reserved huge pages,
//!   so boots without keep their figures): the struct-page work on them
//!   outside the early block and deferred init, counted in the bench's
//!   memmap as memboot's `hugetlb` phase is in its own:
//!   - `mem_init()`'s gap: from the line before the first `Memory: ` or
//!     `SLUB: ` line after `mem auto-init:` to that line. `mem_init()`
//!     prints nothing from its `software IO TLB` line until
//!     `memblock_free_all()` returns, and `memmap_init_reserved_pages()`
//!     there writes every reserved page's struct page: all 1 GiB pages'
//!     tails in 6.1 (1.88 s for 13 at 16G), only their heads since 6.9.
//!     6.1 prints `Memory:` next, 6.12 and 7.3 `SLUB:` (their `Memory:`
//!     comes after deferred init). The gap also holds the free pages'
//!     hand-off to the buddy allocator, which memboot's memmap counts too.
//!   - `page_alloc_init_late()`'s gap, in 6.12 and 7.3: from the last
//!     node's deferred-init line to their `Memory:` line, which
//!     `page_alloc_init_late()` prints after
//!     `hugetlb_bootmem_struct_page_init()` (`gather_bootmem_prealloc_parallel`
//!     on padata threads) has written the 1 GiB pages' struct pages: every
//!     tail without HVO (38 s at 1T cold with 1000 pages), the kept ones
//!     and HVO's remapping with it. The gap also holds the boot thread's
//!     wake-up after the last node's thread (1 ms in a 16G 6.12 boot
//!     without huge pages, 14 ms over two nodes). 6.1 prints `Memory:`
//!     before deferred init: no gap.
//!   - `hugetlb_init`, the initcall that prepares the pages (6.12 and 7.3
//!     on padata threads it waits for, `gather_bootmem_prealloc_parallel`):
//!     from `calling  hugetlb_init+…` to `initcall hugetlb_init+… returned
//!     0 after N usecs`, both printed by `initcall_debug`, which
//!     run-qemu.sh --linux always passes (it only adds lines). Without the
//!     `calling` line, the N usecs it reports. A lower bound: until
//!     `sched_clock_init_late` marks the clock stable, printk's clock runs
//!     at most a tick ahead of jiffies, and under TCG jiffies can stall
//!     (a 16G 6.12 boot stamped all of hugetlb_init 1.258954, 7.3 1.3 ms,
//!     both writing 11 pages' tails there); the profile's `hugetlb` phase
//!     counts the work itself.
//!
//!   7.3 also reserves the pages and maps their vmemmap in
//!   `mm_core_init_early()` before `Zone ranges:`, in a gap that reads the
//!   same without huge pages (13.1 ms at 16G with 13 × 1 GiB, 13.1 ms at
//!   4G without): not counted here; the profile's `boot_cpu_memmap` phase
//!   holds it.
//! - **huge pages**: `HugeTLB: registered SIZE page size, pre-allocated N
//!   pages` per size, HVO from the `Command line:`, and where the 1 GiB
//!   pages lie from the peer's /init ([`crate::hugetlb_log`]).
//! - **release**: `Linux version 6.12.117+deb13-amd64 (…)`, the first line:
//!   which kernel booted (the bench checks it against its entry's name).
//! - **/init started**: `Run /init as init process` (init/main.c).
//! - QEMU's **host peak RSS**, from run-qemu.sh's own line.
//!
//! The peer's /init prints the kernel log again between `linux-peer: dmesg
//! begin`/`end` markers; only the console part before it is read, so no line
//! counts twice.

use std::fmt;

use crate::hugetlb_log::{self, HugeSize, PfnRange};
use memboot_contract::hugepage_forms::HugePageSize;

/// The peer's /init prints the kernel log again after this line.
pub const DMESG_BEGIN: &str = "linux-peer: dmesg begin";
/// The first line the boot thread prints after `page_alloc_init_late()`
/// returns: memory ready (module doc).
pub const READY_LINE: &str = "devtmpfs: initialized";

/// What one Linux boot's log says.
#[derive(Debug, Clone, PartialEq)]
pub struct LinuxBoot {
    /// The kernel release (`uname -r`) from `Linux version RELEASE (…)`,
    /// if the line is there.
    pub release: Option<String>,
    /// Stamp of `Zone ranges:`.
    pub zone_ranges_ns: u64,
    /// `free_area_init()`'s block, `Zone ranges:` to the next line after it.
    pub early_memmap_ns: u64,
    /// `(node, ms)` from each `node N deferred pages initialised in Xms`.
    pub node_deferred_ms: Vec<(u32, u64)>,
    /// The stamp of each of those lines, in their order: when that node's
    /// deferred init ended.
    pub node_deferred_line_ns: Vec<u64>,
    /// Stamp of the last deferred-init line, or the end of the early
    /// block when no node deferred anything.
    pub last_deferred_ns: u64,
    /// Deferred init at printk resolution, an upper bound for each node:
    /// from `smpboot: Total of N processors activated`, the boot thread's
    /// last line before `page_alloc_init_late()` starts the `pgdatinit`
    /// threads (it is called from `kernel_init_freeable()`, not as an
    /// initcall), to each node's line, slowest first. `None` unless the
    /// node lines are the only lines between (then nothing else ran there
    /// that printed).
    pub deferred_printk_ns: Option<u64>,
    /// Memory ready: stamp of `devtmpfs: initialized`, the first line after
    /// `page_alloc_init_late()` returns (module doc).
    pub allocatable_ns: u64,
    /// Present pages (`Memory: …K/NK available`), if the line is there.
    pub present_pages: Option<u64>,
    /// Struct pages initialised, all of them before memory is ready: the
    /// present pages plus unavailable ranges, less the 1 GiB pages' tails
    /// left to hugetlb; `None` when those cannot be told (6.9 or later
    /// with 1 GiB pages and no /init line for each).
    pub pages_initialised: Option<u64>,
    /// The huge pages reserved at boot, per size (`hugetlb_log::sizes`).
    pub huge_pages: Vec<HugeSize>,
    /// Huge-page preparation: `mem_init()`'s gap, `page_alloc_init_late()`'s
    /// and `hugetlb_init`'s (module doc); 0 for a boot without huge pages.
    pub hugetlb_ns: u64,
    /// `page_alloc_init_late()`'s gap (module doc), part of `hugetlb_ns`:
    /// the huge pages' work after the last deferred-init line and before
    /// memory is ready; 0 for a boot without huge pages, and in 6.1.
    pub init_late_huge_ns: u64,
    /// Stamp of `Run /init as init process`.
    pub init_started_ns: u64,
    /// `tsc: Detected X MHz processor`, if printed.
    pub tsc_mhz: Option<f64>,
    /// `run-qemu.sh: host peak RSS N MiB`, if the log has it.
    pub host_peak_rss_mib: Option<u64>,
}

impl LinuxBoot {
    /// The release's series, `6.12` of `6.12.117+deb13-amd64`.
    pub fn series(&self) -> Option<&str> {
        self.release.as_deref().and_then(series_of_release)
    }

    /// Deferred init as a phase: the slowest node (the threads run in parallel).
    pub fn deferred_ms(&self) -> u64 {
        self.node_deferred_ms
            .iter()
            .map(|&(_, ms)| ms)
            .max()
            .unwrap_or(0)
    }
}

/// `MAJOR.MINOR` at the start of a kernel release (`6.1.0-57-amd64`,
/// `6.12.117+deb13-amd64`, `7.3.4+deb13-amd64`), if it starts with one.
pub fn series_of_release(release: &str) -> Option<&str> {
    let major = release.find('.')?;
    let minor_len = release[major + 1..]
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(release.len() - major - 1);
    let series = &release[..major + 1 + minor_len];
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(&release[..major]) && digits(&release[major + 1..series.len()])).then_some(series)
}

/// Why a log could not be read; each says what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinuxLogError {
    /// No `Zone ranges:` line: not a Linux log, or printk.time/ignore_loglevel missing.
    NoZoneRanges,
    /// The early block has no `On node N, zone …` line, or nothing after it.
    NoEarlyMemmapEnd,
    /// No `Run /init as init process`: the boot did not reach userspace.
    NoInit,
    /// No `devtmpfs: initialized` after the deferred-init lines: the point
    /// where `page_alloc_init_late()` returned cannot be read.
    NoAllocInitLateReturn,
}

impl fmt::Display for LinuxLogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoZoneRanges => write!(
                f,
                "no stamped 'Zone ranges:' line: boot Linux with run-qemu.sh --linux \
                 (printk.time=1 ignore_loglevel) and pass its whole serial log"
            ),
            Self::NoEarlyMemmapEnd => write!(
                f,
                "the 'Zone ranges:' block has no 'On node N, zone ...' line followed by another \
                 line: the log is cut inside free_area_init(); capture the whole boot"
            ),
            Self::NoInit => write!(
                f,
                "no 'Run /init as init process' line: the log ends before Linux started \
                 userspace (timeout or crash?); boot again with a longer --timeout"
            ),
            Self::NoAllocInitLateReturn => write!(
                f,
                "no 'devtmpfs: initialized' line after the deferred-init lines: it marks \
                 page_alloc_init_late() returning (memory ready); use a kernel with \
                 CONFIG_DEVTMPFS, as Debian's is"
            ),
        }
    }
}

impl std::error::Error for LinuxLogError {}

/// The console part of the log: stamped lines before the peer's dmesg dump
/// (Linux stamps as memboot does: `[    5.123456] message`), as
/// (stamp ns, message).
pub fn console_lines(text: &str) -> Vec<(u64, String)> {
    text.lines()
        .map(|l| l.trim_end_matches('\r'))
        .take_while(|l| !l.starts_with(DMESG_BEGIN))
        .filter_map(crate::serial_log::parse_stamped)
        .collect()
}

/// What each node's deferred-init line holds (`deferred_line`).
pub const DEFERRED_LINE: &str = " deferred pages initialised in ";

/// `node N deferred pages initialised in Xms` → (N, X).
fn deferred_line(msg: &str) -> Option<(u32, u64)> {
    let rest = msg.strip_prefix("node ")?;
    let (node, rest) = rest.split_once(DEFERRED_LINE)?;
    Some((node.parse().ok()?, rest.strip_suffix("ms")?.parse().ok()?))
}

/// The early memmap block: (start ns, end ns).
fn early_block(lines: &[(u64, String)]) -> Result<(u64, u64), LinuxLogError> {
    let start = lines
        .iter()
        .position(|(_, m)| *m == "Zone ranges:")
        .ok_or(LinuxLogError::NoZoneRanges)?;
    let last_zone_line = lines[start..]
        .iter()
        .rposition(|(_, m)| crate::serial_log::unavailable_ranges(m).is_some())
        .map(|i| start + i)
        .ok_or(LinuxLogError::NoEarlyMemmapEnd)?;
    let end = lines
        .get(last_zone_line + 1)
        .ok_or(LinuxLogError::NoEarlyMemmapEnd)?;
    Ok((lines[start].0, end.0))
}

/// [`LinuxBoot::deferred_printk_ns`]: the last node line's stamp less
/// that of SMP's last line, when only node lines come between.
fn deferred_since_smp(lines: &[(u64, String)]) -> Option<u64> {
    let smp = lines.iter().position(|(_, m)| {
        m.starts_with("smpboot: Total of ") && m.contains(" processors activated")
    })?;
    let nodes = lines[smp + 1..]
        .iter()
        .take_while(|(_, m)| deferred_line(m).is_some())
        .count();
    let last = lines[smp + 1..smp + 1 + nodes].last()?;
    let between_others = lines[smp + 1 + nodes..]
        .iter()
        .any(|(_, m)| deferred_line(m).is_some());
    (!between_others).then(|| last.0 - lines[smp].0)
}

/// `Memory: AK/PK available (…)` → P KiB of present memory, in pages.
fn present_pages(lines: &[(u64, String)]) -> Option<u64> {
    let present_kib: u64 = lines.iter().find_map(|(_, m)| {
        let (_, rest) = m.strip_prefix("Memory: ")?.split_once('/')?;
        rest.split_once("K available")?.0.parse().ok()
    })?;
    Some(present_kib / 4)
}

/// Every `On node N, zone Z: K pages in unavailable ranges`, summed.
fn unavailable_pages(lines: &[(u64, String)]) -> u64 {
    lines
        .iter()
        .filter_map(|(_, m)| crate::serial_log::unavailable_ranges(m))
        .map(|u| u.pages)
        .sum()
}

/// The `[mem START-END]` ranges (as PFN ranges) of the lines right
/// after the line `heading`, while they have one.
fn ranges_after(lines: &[(u64, String)], heading: &str) -> Vec<(String, PfnRange)> {
    let Some(at) = lines.iter().position(|(_, m)| m == heading) else {
        return Vec::new();
    };
    lines[at + 1..]
        .iter()
        .map_while(|(_, m)| {
            let (start, end, _) = crate::serial_log::mem_range(m)?;
            let name = m[..m.find('[')?].trim().trim_end_matches(':');
            Some((name.to_string(), (start >> 12, end >> 12)))
        })
        .collect()
}

/// Each node's memory ranges (`Early memory node ranges`: `node   N: [mem
/// …]`), by node id.
fn node_ranges(lines: &[(u64, String)]) -> Vec<Vec<PfnRange>> {
    let mut nodes: Vec<Vec<PfnRange>> = Vec::new();
    for (name, range) in ranges_after(lines, "Early memory node ranges") {
        let Some(Ok(nid)) = name.strip_prefix("node").map(|n| n.trim().parse::<usize>()) else {
            continue;
        };
        if nodes.len() <= nid {
            nodes.resize(nid + 1, Vec::new());
        }
        nodes[nid].push(range);
    }
    nodes
}

/// The struct pages of 1 GiB pages' tails this boot's memory init left
/// to hugetlb (`hugetlb_log` module doc): 0 before 6.9 or without 1 GiB
/// pages; `None` when the peer's /init did not name every page.
fn tails_left_to_hugetlb(
    text: &str,
    lines: &[(u64, String)],
    release: Option<&str>,
    huge: &[HugeSize],
) -> Option<u64> {
    let gigantic = huge
        .iter()
        .find(|h| h.size == HugePageSize::Gib1)
        .map_or(0, |h| h.pages);
    if gigantic == 0 {
        return Some(0);
    }
    let series = release.and_then(series_of_release)?;
    let (major, minor) = series.split_once('.')?;
    let version: (u32, u32) = (major.parse().ok()?, minor.parse().ok()?);
    if version < hugetlb_log::NOINIT_TAILS_SINCE {
        return Some(0);
    }
    let pfns = hugetlb_log::gigantic_pfns(text);
    if pfns.len() as u64 != gigantic {
        return None;
    }
    let zones: Vec<PfnRange> = ranges_after(lines, "Zone ranges:")
        .into_iter()
        .map(|(_, r)| r)
        .collect();
    let nodes = node_ranges(lines);
    let deferred = hugetlb_log::first_deferred_pfns(&zones, &nodes);
    Some(hugetlb_log::tails_left_to_hugetlb(&pfns, &nodes, &deferred))
}

/// `mem_init()`'s gap (module doc): the stamp of the first `Memory: ` or
/// `SLUB: ` line after `mem auto-init:` less that of the line before it.
fn mem_init_gap_ns(lines: &[(u64, String)]) -> Option<u64> {
    let auto_init = lines
        .iter()
        .position(|(_, m)| m.starts_with("mem auto-init:"))?;
    let next = lines[auto_init + 1..]
        .iter()
        .position(|(_, m)| m.starts_with("Memory: ") || m.starts_with("SLUB: "))?;
    let at = auto_init + 1 + next;
    Some(lines[at].0 - lines[at - 1].0)
}

/// `page_alloc_init_late()`'s gap (module doc): the `Memory: ` line's
/// stamp less that of the last node's deferred-init line, when it comes
/// after that line (6.12 and 7.3).
fn init_late_gap_ns(lines: &[(u64, String)]) -> Option<u64> {
    let last_node = lines
        .iter()
        .rposition(|(_, m)| deferred_line(m).is_some())?;
    let memory = lines[last_node + 1..]
        .iter()
        .find(|(_, m)| m.starts_with("Memory: "))?;
    Some(memory.0 - lines[last_node].0)
}

/// `hugetlb_init`'s time (module doc): its `calling` line to its
/// `initcall … returned` line, or the usecs that line reports.
fn hugetlb_init_ns(lines: &[(u64, String)]) -> Option<u64> {
    let returned = lines.iter().position(|(_, m)| {
        m.strip_prefix("initcall hugetlb_init+")
            .is_some_and(|r| r.contains(" returned "))
    })?;
    let calling = lines[..returned]
        .iter()
        .rposition(|(_, m)| m.starts_with("calling  hugetlb_init+"));
    match calling {
        Some(c) => Some(lines[returned].0 - lines[c].0),
        None => {
            let (_, usecs) = lines[returned].1.rsplit_once(" after ")?;
            Some(usecs.strip_suffix(" usecs")?.parse::<u64>().ok()? * 1000)
        }
    }
}

/// [`LinuxBoot::hugetlb_ns`]: 0 without huge pages; a part whose lines
/// are missing counts 0.
fn huge_page_preparation_ns(lines: &[(u64, String)], huge: &[HugeSize]) -> u64 {
    if huge.is_empty() {
        return 0;
    }
    mem_init_gap_ns(lines).unwrap_or(0)
        + init_late_gap_ns(lines).unwrap_or(0)
        + hugetlb_init_ns(lines).unwrap_or(0)
}

/// Read one Linux boot's serial log.
pub fn parse(text: &str) -> Result<LinuxBoot, LinuxLogError> {
    let lines = console_lines(text);
    let (zone_ranges_ns, early_end_ns) = early_block(&lines)?;
    let init_started_ns = lines
        .iter()
        .find(|(_, m)| *m == "Run /init as init process")
        .map(|&(ns, _)| ns)
        .ok_or(LinuxLogError::NoInit)?;
    let deferred: Vec<(u64, (u32, u64))> = lines
        .iter()
        .filter_map(|(ns, m)| deferred_line(m).map(|d| (*ns, d)))
        .collect();
    let tsc_mhz = lines.iter().find_map(|(_, m)| {
        m.strip_prefix("tsc: Detected ")?
            .strip_suffix(" MHz processor")?
            .parse()
            .ok()
    });
    let host_peak_rss_mib = crate::serial_log::host_peak_rss_mib(text);
    let last_deferred_ns = deferred
        .iter()
        .map(|&(ns, _)| ns)
        .max()
        .unwrap_or(early_end_ns);
    let deferred_printk_ns = deferred_since_smp(&lines);
    let allocatable_ns = lines
        .iter()
        .find(|(ns, m)| *ns >= last_deferred_ns && m == READY_LINE)
        .map(|&(ns, _)| ns)
        .ok_or(LinuxLogError::NoAllocInitLateReturn)?;
    let release = lines.iter().find_map(|(_, m)| {
        let rest = m.strip_prefix("Linux version ")?;
        Some(rest.split(' ').next()?.to_string())
    });
    let hvo = lines
        .iter()
        .find_map(|(_, m)| m.strip_prefix("Command line: "))
        .is_some_and(hugetlb_log::hvo_on_command_line);
    let huge_pages = hugetlb_log::sizes(lines.iter().map(|(_, m)| m.as_str()), hvo);
    let left = tails_left_to_hugetlb(text, &lines, release.as_deref(), &huge_pages);
    let pages_initialised = present_pages(&lines)
        .zip(left)
        .map(|(p, left)| (p + unavailable_pages(&lines)).saturating_sub(left));
    Ok(LinuxBoot {
        release,
        zone_ranges_ns,
        early_memmap_ns: early_end_ns - zone_ranges_ns,
        last_deferred_ns,
        deferred_printk_ns,
        allocatable_ns,
        present_pages: present_pages(&lines),
        pages_initialised,
        hugetlb_ns: huge_page_preparation_ns(&lines, &huge_pages),
        init_late_huge_ns: if huge_pages.is_empty() {
            0
        } else {
            init_late_gap_ns(&lines).unwrap_or(0)
        },
        huge_pages,
        node_deferred_line_ns: deferred.iter().map(|&(ns, _)| ns).collect(),
        node_deferred_ms: deferred.into_iter().map(|(_, d)| d).collect(),
        init_started_ns,
        tsc_mhz,
        host_peak_rss_mib,
    })
}
