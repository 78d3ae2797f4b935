//! The bench's report: the serial logs of one `tests/bench.sh` run read
//! back into rows (one per boot), a markdown table with every round, the
//! means and the ratios to Linux and to `memmap=touch`, and the rows as
//! JSON for the scaling chart (`memboot-plot scaling`) and for CI history.
//!
//! The figures, per boot (one definition each, for memboot and Linux):
//! - `boot_cpu_memmap_ns`: struct-page work on the boot CPU before SMP work
//!   starts (memboot's eager memmap phase; Linux's `free_area_init()` block).
//! - `memmap_ns`: struct-page work before memory is ready: memboot's
//!   boot-CPU phase, its hand-off to the buddy and deferred init; Linux's
//!   early block and its slowest node's deferred init. The drain that
//!   `ondemand_drain=on` runs after memory is ready is `drain_ns`, not here.
//! - `allocatable_ns`: kernel entry until memory is ready: memory init
//!   stops blocking the boot and every present, non-reserved page can be
//!   had from the allocator, initialised or claimable by growth (memboot's
//!   summary key, `MmFacts::allocatable_ns`; Linux: `page_alloc_init_late()`
//!   returning, read from its log, `linux_log`).
//! - `pages_initialised_at_allocatable` / `pages_initialised`: struct pages
//!   written by then / by the end of the boot (Linux: all, before ready).
//! - `drain_ns`: `ondemand_drain=on`'s drain, first claim to pool empty.
//! - `grow_step_p50_ns` / `grow_step_p99_ns`: one growth step (a block
//!   window of struct pages) during memboot's allocation test.
//! - `host_rss_mib`: QEMU's peak resident memory (run-qemu.sh's line).
//!
//! Logs are named `SIZE-ENTRY-ROUND.log` (ENTRY: a memmap mode, or a Linux
//! entry, [`is_linux`]); an entry that was not booted at a size (its struct
//! pages do not fit the host) has `SIZE-ENTRY.skip` holding the reason
//! instead.
//!
//! Linux entries name the kernel by series: `linux-6.1`, `linux-6.12`, each
//! a peer kernel through its PVH entry, and variants such as
//! `linux-6.12-bzimage` or `linux-6.1+nokaslr` (tests/bench.sh's
//! `boot_args`). Runs committed before there were two peers name Debian
//! 12's 6.1 without a series: `linux`, `linux-pvh`, `linux-bzimage`, …; they
//! replay unchanged. The ratio columns divide by each peer entry in the run
//! (`linux-SERIES`, or the old `linux`; [`is_peer`]), in entry order, one
//! pair of columns each: "memmap × Linux 6.12 memmap", "ready × Linux 6.12
//! ready" (the old `linux`'s are "× Linux"). A run with no peer entry keeps
//! one empty pair.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::{json, Value};

use crate::linux_log;
use memboot_contract::summary::Summary;

/// One boot's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub size: String,
    pub mem_mib: u64,
    /// "memboot" or "linux".
    pub kernel: &'static str,
    /// The entry: a memmap mode (with options), or a Linux entry
    /// (`linux-6.12`, `linux-6.1-bzimage`, the old `linux`; [`is_linux`]).
    pub mode: String,
    pub round: u32,
    pub boot_cpu_memmap_ns: u64,
    pub memmap_ns: u64,
    /// `None` for a mode that hands no page to the allocator (`touch`).
    pub allocatable_ns: Option<u64>,
    pub host_rss_mib: Option<u64>,
    /// memboot: the summary's `total_ns`; Linux: when /init started.
    pub boot_ns: u64,
    /// memboot's allocation test: order-0 p50 and p99 latency (none for
    /// Linux, or with `alloc_test=0`).
    pub order0_p50_ns: Option<u64>,
    pub order0_p99_ns: Option<u64>,
    /// Present pages (memboot's summary; Linux's `Memory:` line).
    pub present_pages: Option<u64>,
    pub pages_initialised_at_allocatable: Option<u64>,
    pub pages_initialised: Option<u64>,
    /// `ondemand_drain=on` only.
    pub drain_ns: Option<u64>,
    /// Only where the allocation test grew memory (`ondemand`).
    pub grow_step_p50_ns: Option<u64>,
    pub grow_step_p99_ns: Option<u64>,
    /// The host-memory state the boot started in (`log::host_memory_state`).
    pub host_memory: Option<String>,
    /// Host-timed (run-qemu.sh's tap): QEMU's start to the kernel's first
    /// serial byte, and to memory ready.
    pub entry_latency_us: Option<u64>,
    pub qemu_start_to_ready_us: Option<u64>,
    pub minor_faults: Option<u64>,
    /// memboot: the pages its boot CPU initialised (`eager_pages`).
    pub boot_cpu_pages: Option<u64>,
    /// Linux: its slowest node's deferred init as its line says (jiffies),
    /// and at printk resolution (`LinuxBoot::deferred_printk_ns`).
    pub deferred_jiffies_ms: Option<u64>,
    pub deferred_printk_ns: Option<u64>,
}

impl Row {
    /// What run-qemu.sh wrote about the boot, beside the kernel's log.
    fn with_host_lines(mut self, text: &str) -> Self {
        self.host_memory = crate::serial_log::host_memory_state(text);
        (self.entry_latency_us, self.qemu_start_to_ready_us) = crate::tap::host_timing_us(text);
        self.minor_faults = crate::serial_log::host_minor_faults(text);
        self
    }
}

/// What a bench run compared.
pub struct Plan<'a> {
    pub sizes: &'a [String],
    pub entries: &'a [String],
    pub rounds: u32,
}

/// `64G` → MiB (the sizes run-qemu.sh accepts; no suffix = MiB).
pub fn size_mib(size: &str) -> Result<u64, String> {
    let digits = size.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("size '{size}': expected e.g. 64G or 1T"))?;
    match &size[digits.len()..] {
        "" | "M" => Ok(n),
        "G" => Ok(n << 10),
        "T" => Ok(n << 20),
        other => Err(format!("size '{size}': unknown suffix '{other}'")),
    }
}

/// A figure only some boots have: 0 (not measured in this mode, or a key
/// older summaries lack) is `None`.
fn measured(value: u64) -> Option<u64> {
    Some(value).filter(|&v| v > 0)
}

/// A memboot boot's row from its log.
fn memboot_row(text: &str, size: &str, mode: &str, round: u32) -> Result<Row, String> {
    // The last summary line: a boot whose first was cut writes a whole one
    // after it (`log::summary_json`).
    let s = crate::serial_log::read_summary(text).map_err(|e| e.to_string())?;
    if s.status != "ok" {
        return Err(format!("the boot failed: status \"{}\"", s.status));
    }
    Ok(Row {
        size: size.to_string(),
        mem_mib: size_mib(size)?,
        kernel: "memboot",
        mode: mode.to_string(),
        round,
        boot_cpu_memmap_ns: s.memmap_boot_ns,
        memmap_ns: s.memmap_boot_ns + s.free_bitmaps_ns + s.buddy_eager_ns + s.deferred_ns,
        allocatable_ns: measured(s.allocatable_ns),
        host_rss_mib: crate::serial_log::host_peak_rss_mib(text),
        boot_ns: s.total_ns,
        order0_p50_ns: order0(&s, &s.alloc_p50_ns),
        order0_p99_ns: order0(&s, &s.alloc_p99_ns),
        present_pages: measured(s.present_pages),
        pages_initialised_at_allocatable: measured(s.pages_initialised_at_allocatable),
        pages_initialised: measured(s.pages_initialised),
        drain_ns: measured(s.drain_ns),
        grow_step_p50_ns: measured(s.grow_step_p50_ns),
        grow_step_p99_ns: measured(s.grow_step_p99_ns),
        host_memory: None,
        entry_latency_us: None,
        qemu_start_to_ready_us: None,
        minor_faults: None,
        boot_cpu_pages: measured(s.eager_pages),
        deferred_jiffies_ms: None,
        deferred_printk_ns: None,
    }
    .with_host_lines(text))
}

/// The order-0 entry of a per-order summary array (`alloc_p99_ns`, …),
/// found by `alloc_orders`.
fn order0(summary: &Summary<'_>, array: &[u64]) -> Option<u64> {
    let i = summary.alloc_orders.iter().position(|&o| o == 0)?;
    if summary.alloc_test_pages == 0 {
        return None; // alloc_test=0: the arrays hold no measurement
    }
    array.get(i).copied()
}

/// A Linux boot's row from its log; `entry` is a Linux entry ([`is_linux`]).
/// An entry that names a series must have booted a kernel of that series.
fn linux_row(text: &str, size: &str, entry: &str, round: u32) -> Result<Row, String> {
    let boot = linux_log::parse(text).map_err(|e| e.to_string())?;
    if let Some(want) = linux_series(entry) {
        match boot.series() {
            Some(got) if got == want => {}
            Some(_) => {
                return Err(format!(
                    "entry {entry} names Linux {want}, but the log is of Linux {}: \
                     tests/bench.sh booted the wrong vmlinux (tests/linux-peer.sh's vmlinux-{want})",
                    boot.release.as_deref().unwrap_or("?")
                ))
            }
            None => {
                return Err(format!(
                    "entry {entry} names Linux {want}, but the log has no 'Linux version' line \
                     to check it by: pass the whole serial log"
                ))
            }
        }
    }
    Ok(Row {
        size: size.to_string(),
        mem_mib: size_mib(size)?,
        kernel: "linux",
        mode: entry.to_string(),
        round,
        boot_cpu_memmap_ns: boot.early_memmap_ns,
        memmap_ns: boot.early_memmap_ns + boot.deferred_ms() * 1_000_000,
        allocatable_ns: Some(boot.allocatable_ns),
        host_rss_mib: boot.host_peak_rss_mib,
        boot_ns: boot.init_started_ns,
        order0_p50_ns: None,
        order0_p99_ns: None,
        present_pages: boot.present_pages,
        // Linux waits for every deferred page before memory is ready.
        pages_initialised_at_allocatable: boot.pages_initialised,
        pages_initialised: boot.pages_initialised,
        drain_ns: None,
        grow_step_p50_ns: None,
        grow_step_p99_ns: None,
        host_memory: None,
        entry_latency_us: None,
        qemu_start_to_ready_us: None,
        minor_faults: None,
        boot_cpu_pages: None,
        deferred_jiffies_ms: Some(boot.deferred_ms()),
        deferred_printk_ns: boot.deferred_printk_ns,
    }
    .with_host_lines(text))
}

/// What an entry boots, without how tests/bench.sh runs it: the entry
/// less its `@…` words (`@qemu-10.0`: another QEMU; `@profile`: under the
/// instruction profile).
pub fn kernel_of(entry: &str) -> &str {
    entry.split('@').next().unwrap_or(entry)
}

/// Is `entry` a Linux boot (`linux-6.12`, `linux-6.1-bzimage+nokaslr`, the
/// old `linux`, `linux-pvh`, `linux-6.12@qemu-10.0`, …)?
pub fn is_linux(entry: &str) -> bool {
    let kernel = kernel_of(entry);
    kernel == "linux" || kernel.starts_with("linux-") || kernel.starts_with("linux+")
}

/// The kernel series a Linux entry names: `6.12` of `linux-6.12`,
/// `linux-6.12-bzimage` or `linux-6.12+nokaslr`; `None` for the old names
/// (`linux`, `linux-pvh`, … Debian 12's 6.1) and for memboot entries.
pub fn linux_series(entry: &str) -> Option<&str> {
    let rest = kernel_of(entry).strip_prefix("linux-")?;
    let end = rest.find(['-', '+']).unwrap_or(rest.len());
    linux_log::series_of_release(&rest[..end]).filter(|s| s.len() == end)
}

/// Is `entry` a peer as the ratios divide by it: a kernel through its PVH
/// entry with nothing added, on the run's own QEMU, unprofiled
/// (`linux-6.12`, or the old `linux`)?
pub fn is_peer(entry: &str) -> bool {
    entry == "linux" || linux_series(entry).is_some_and(|s| entry == format!("linux-{s}"))
}

/// The `touch` entry an entry's memmap is measured against: the store
/// floor with the same kernel options ("deferred+struct_page=8" →
/// "touch+struct_page=8"), so a layout is divided by a pass over struct
/// pages of its own size; plain `touch` (64 bytes, Linux's size) for a
/// Linux peer.
pub fn touch_entry(entry: &str) -> String {
    match entry.find('+') {
        Some(at) if !is_peer(entry) => format!("touch{}", &entry[at..]),
        _ => "touch".to_string(),
    }
}

/// How the ratio columns name a peer: "Linux 6.12"; the old `linux`, "Linux".
pub fn peer_label(entry: &str) -> String {
    match linux_series(entry) {
        Some(series) => format!("Linux {series}"),
        None => "Linux".to_string(),
    }
}

/// The peers the ratio columns divide by, in entry order; `None` stands
/// for none in the run (one pair of empty columns, as every run had).
fn ratio_peers(entries: &[String]) -> Vec<Option<&str>> {
    let peers: Vec<Option<&str>> = entries
        .iter()
        .filter(|e| is_peer(e))
        .map(|e| Some(e.as_str()))
        .collect();
    if peers.is_empty() {
        vec![None]
    } else {
        peers
    }
}

/// One log → one row; a Linux entry ([`is_linux`]) reads a Linux log.
pub fn row_from_log(text: &str, size: &str, entry: &str, round: u32) -> Result<Row, String> {
    if is_linux(entry) {
        linux_row(text, size, entry, round)
    } else {
        memboot_row(text, size, entry, round)
    }
}

/// The log of counted boot `k` (from 1) of `entry` at `size`: one of the
/// boots tests/bench.sh runs under the instruction profile after the
/// timed rounds (`crate::counted`), its profile beside it.
pub fn counted_log_name(size: &str, entry: &str, k: u32) -> String {
    format!("{size}-{entry}-counted-{k}.log")
}

/// The struct pages the boot CPU initialised in `entry`'s first counted
/// boot at `size`, as its own profile counted them (Linux's are its calls
/// of `__init_single_page`), or `None` without one.
pub fn counted_boot_cpu_pages(dir: &Path, size: &str, entry: &str) -> Option<u64> {
    let name = counted_log_name(size, entry, 1).replace(".log", ".profile.json");
    let profile: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(name)).ok()?).ok()?;
    profile["phases"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == "boot_cpu_memmap")?["pages"]
        .as_u64()
}

/// Every boot of a bench run, and the entries skipped per size with why.
pub struct Results {
    pub rows: Vec<Row>,
    pub skipped: Vec<(String, String, String)>,
    /// The warm-up boots, in the order they ran: shown, not counted.
    pub warmups: Vec<Warmup>,
}

/// A boot run only so that the next counted boot finds the host's memory
/// backed: what the order effect costs a large guest that follows idle time
/// or a small guest.
pub struct Warmup {
    pub row: Row,
    /// The counted boot it ran before, as `SIZE/ENTRY/ROUND`.
    pub before: String,
}

/// `warmup-N.log` with `warmup-N.entry` (`SIZE ENTRY BEFORE`), N = 1, 2, …
fn read_warmups(dir: &Path) -> Result<Vec<Warmup>, String> {
    let mut warmups = Vec::new();
    for n in 1.. {
        let entry_path = dir.join(format!("warmup-{n}.entry"));
        let Ok(what) = std::fs::read_to_string(&entry_path) else {
            break;
        };
        let fields: Vec<&str> = what.split_whitespace().collect();
        let [size, entry, before] = fields[..] else {
            return Err(format!(
                "{}: expected 'SIZE ENTRY BEFORE'",
                entry_path.display()
            ));
        };
        let path = dir.join(format!("warmup-{n}.log"));
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let row =
            row_from_log(&text, size, entry, 0).map_err(|e| format!("{}: {e}", path.display()))?;
        warmups.push(Warmup {
            row,
            before: before.to_string(),
        });
    }
    Ok(warmups)
}

/// Read a bench run's directory.
pub fn read_dir(dir: &Path, plan: &Plan) -> Result<Results, String> {
    let mut results = Results {
        rows: Vec::new(),
        skipped: Vec::new(),
        warmups: read_warmups(dir)?,
    };
    for size in plan.sizes {
        for entry in plan.entries {
            let skip = dir.join(format!("{size}-{entry}.skip"));
            if let Ok(why) = std::fs::read_to_string(&skip) {
                results
                    .skipped
                    .push((size.clone(), entry.clone(), why.trim().to_string()));
                continue;
            }
            for round in 1..=plan.rounds {
                let path = dir.join(format!("{size}-{entry}-{round}.log"));
                let text = std::fs::read_to_string(&path)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                let mut row = row_from_log(&text, size, entry, round)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                if row.kernel == "linux" {
                    // Linux's log does not say which pages its boot CPU
                    // initialised; its counted boot's profile does.
                    row.boot_cpu_pages = counted_boot_cpu_pages(dir, size, entry);
                }
                results.rows.push(row);
            }
        }
    }
    Ok(results)
}

fn mean(values: impl Iterator<Item = u64>) -> Option<f64> {
    let (sum, n) = values.fold((0u128, 0u64), |(s, n), v| (s + v as u128, n + 1));
    (n > 0).then(|| sum as f64 / n as f64)
}

fn ms(ns: f64) -> String {
    format!("{:.1}", ns / 1e6)
}

/// The rows of one (size, entry), in round order.
fn series<'a>(rows: &'a [Row], size: &str, entry: &str) -> Vec<&'a Row> {
    rows.iter()
        .filter(|r| r.size == size && r.mode == entry)
        .collect()
}

fn ratio(value: Option<f64>, base: Option<f64>) -> String {
    match (value, base) {
        (Some(v), Some(b)) if b > 0.0 => format!("{:.2}", v / b),
        _ => "–".to_string(),
    }
}

/// Pages as a compact count with their share of the present pages:
/// `0.82 M (0.3 %)`.
fn pages_cell(pages: Option<f64>, present: Option<f64>) -> String {
    let Some(p) = pages else {
        return "–".to_string();
    };
    let count = if p >= 1e6 {
        format!("{:.2} M", p / 1e6)
    } else {
        format!("{p:.0}")
    };
    match present {
        Some(total) if total > 0.0 => format!("{count} ({:.1} %)", 100.0 * p / total),
        _ => count,
    }
}

/// The table's columns after `size | kernel | mode`, in order: these,
/// then the ratios to each peer ([`columns`]).
pub const FIGURE_COLUMNS: [&str; 9] = [
    "memmap ms: each round → mean",
    "memory ready (allocatable) ms: each round → mean",
    "struct pages written by ready",
    "struct pages written by the end",
    "drain ms",
    "boot-CPU memmap ms",
    "growth step p50 / p99 ns",
    "host RSS MiB",
    "order-0 p50 / p99 ns",
];

/// Every column after `size | kernel | mode` for a run of `entries`: the
/// figures, memmap and ready × each peer, memmap × touch (the same
/// options' [`touch_entry`]).
pub fn columns(entries: &[String]) -> Vec<String> {
    let mut out: Vec<String> = FIGURE_COLUMNS.iter().map(|c| c.to_string()).collect();
    for peer in ratio_peers(entries) {
        let label = peer.map_or("Linux".to_string(), peer_label);
        out.push(format!("memmap × {label} memmap"));
        out.push(format!("ready × {label} ready"));
    }
    out.push("memmap × touch memmap".to_string());
    out
}

/// One table line for (size, entry), with ratios to `peers`.
fn table_line(rows: &[Row], size: &str, entry: &str, peers: &[Option<&str>]) -> String {
    let rs = series(rows, size, entry);
    let mean_of = |e: &str, f: fn(&Row) -> Option<u64>| {
        mean(series(rows, size, e).iter().filter_map(|r| f(r)))
    };
    // Every round, then the mean: "r1 / r2 → mean".
    let rounds_and_mean = |f: fn(&Row) -> Option<u64>| {
        let each: Vec<String> = rs
            .iter()
            .map(|r| f(r).map_or("–".into(), |ns| ms(ns as f64)))
            .collect();
        let m = mean(rs.iter().filter_map(|r| f(r))).map_or("–".into(), ms);
        format!("{} → {m}", each.join(" / "))
    };
    let whole =
        |f: fn(&Row) -> Option<u64>| mean_of(entry, f).map_or("–".into(), |m| format!("{m:.0}"));
    let pair = |a: fn(&Row) -> Option<u64>, b: fn(&Row) -> Option<u64>| match (
        mean_of(entry, a),
        mean_of(entry, b),
    ) {
        (None, None) => "–".to_string(),
        _ => format!("{} / {}", whole(a), whole(b)),
    };
    let present = mean_of(entry, |r| r.present_pages);
    let memmap = |r: &Row| Some(r.memmap_ns);
    let mut peer_ratios = String::new();
    for peer in peers {
        let of_peer = |f: fn(&Row) -> Option<u64>| peer.and_then(|p| mean_of(p, f));
        let _ = write!(
            peer_ratios,
            " {} | {} |",
            ratio(mean_of(entry, memmap), of_peer(memmap)),
            ratio(
                mean_of(entry, |r| r.allocatable_ns),
                of_peer(|r| r.allocatable_ns)
            ),
        );
    }
    format!(
        "| {size} | {} | {entry} | {} | {} | {} | {} | {} | {} | {} | {} | {} |{peer_ratios} {} |",
        rs.first().map_or("", |r| r.kernel),
        rounds_and_mean(memmap),
        rounds_and_mean(|r| r.allocatable_ns),
        pages_cell(
            mean_of(entry, |r| r.pages_initialised_at_allocatable),
            present
        ),
        pages_cell(mean_of(entry, |r| r.pages_initialised), present),
        mean_of(entry, |r| r.drain_ns).map_or("–".into(), ms),
        mean_of(entry, |r| Some(r.boot_cpu_memmap_ns)).map_or("–".into(), ms),
        pair(|r| r.grow_step_p50_ns, |r| r.grow_step_p99_ns),
        whole(|r| r.host_rss_mib),
        pair(|r| r.order0_p50_ns, |r| r.order0_p99_ns),
        ratio(mean_of(entry, memmap), mean_of(&touch_entry(entry), memmap)),
    )
}

/// The markdown table (with a heading line saying how it was run).
pub fn table(results: &Results, plan: &Plan, heading: &str) -> String {
    let mut out = format!("{heading}\n\n");
    out += "| size | kernel | mode |";
    let columns = columns(plan.entries);
    for c in &columns {
        out += &format!(" {c} |");
    }
    out += "\n|---|---|---|";
    out += &"---|".repeat(columns.len());
    out.push('\n');
    let peers = ratio_peers(plan.entries);
    for size in plan.sizes {
        for entry in plan.entries {
            if !series(&results.rows, size, entry).is_empty() {
                out += &table_line(&results.rows, size, entry, &peers);
                out.push('\n');
            }
        }
    }
    for Warmup { row: w, before } in &results.warmups {
        let _ = writeln!(
            out,
            "\nwarm-up boot (not counted) before {before}: {} {}: memmap {} ms, memory ready {} ms, host RSS {} MiB",
            w.size,
            w.mode,
            ms(w.memmap_ns as f64),
            w.allocatable_ns.map_or("–".into(), |ns| ms(ns as f64)),
            w.host_rss_mib.map_or("–".into(), |m| m.to_string())
        );
    }
    for (size, entry, why) in &results.skipped {
        let _ = writeln!(out, "\n{size} {entry}: not booted: {why}");
    }
    out
}

/// The middle of `values` and their range: `median (min–max)`, each by
/// `show`; `–` for none.
fn median_range(mut values: Vec<f64>, show: impl Fn(f64) -> String) -> String {
    if values.is_empty() {
        return "–".to_string();
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    let median = if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    };
    format!(
        "{} ({}–{})",
        show(median),
        show(values[0]),
        show(values[n - 1])
    )
}

/// The columns of [`comparison`] after `size | kernel | mode`; `touch`:
/// the run boots the store floor, and a column divides by it.
fn comparison_columns(peers: &[&str], touch: bool) -> Vec<String> {
    let mut out: Vec<String> = [
        "memmap ms",
        "memory ready ms",
        "QEMU start → ready ms",
        "entry latency ms",
        "boot-CPU memmap ms",
        "boot-CPU pages",
        "pages by ready",
    ]
    .map(String::from)
    .to_vec();
    for p in peers {
        let label = peer_label(p);
        out.push(format!("memmap × {label}"));
        out.push(format!("ready × {label}"));
    }
    if touch {
        out.push("memmap × touch".to_string());
    }
    out
}

/// The comparison of a run made in a named host-memory state: per entry,
/// every figure as median (min–max) over the rounds, and its ratios to
/// each Linux peer, and to `touch` with the entry's options
/// ([`touch_entry`]) when the run boots it, taken round by round (round i
/// of the entry over round i of the other: ABBA puts them side by side),
/// median (min–max). memmap is
/// the whole struct-page work before memory is ready (boot CPU + hand-off +
/// deferred init), so which phase a page falls in cannot change a verdict;
/// the pages columns say how each kernel split it. `None` for runs from
/// before the states (their logs name none).
pub fn comparison(results: &Results, plan: &Plan) -> Option<String> {
    let state = results.rows.iter().find_map(|r| r.host_memory.clone())?;
    let peers: Vec<&str> = plan
        .entries
        .iter()
        .filter(|e| is_peer(e))
        .map(String::as_str)
        .collect();
    let touch = plan
        .entries
        .iter()
        .any(|e| e.split('+').next() == Some("touch"));
    let columns = comparison_columns(&peers, touch);
    let mut out = format!(
        "\ncomparison, host memory {state}: median (min–max) over the rounds; ratios round by round\n\n| size | kernel | mode |"
    );
    for c in &columns {
        out += &format!(" {c} |");
    }
    out += "\n|---|---|---|";
    out += &"---|".repeat(columns.len());
    out.push('\n');
    let ms = |v: f64| format!("{:.1}", v / 1e6);
    let pages = |v: f64| pages_cell(Some(v), None);
    for size in plan.sizes {
        for entry in plan.entries {
            let rs = series(&results.rows, size, entry);
            if rs.is_empty() {
                continue;
            }
            let of = |f: &dyn Fn(&Row) -> Option<u64>| -> Vec<f64> {
                rs.iter().filter_map(|r| f(r)).map(|v| v as f64).collect()
            };
            let mut line = format!(
                "| {size} | {} | {entry} | {} | {} | {} | {} | {} | {} | {} |",
                rs[0].kernel,
                median_range(of(&|r| Some(r.memmap_ns)), ms),
                median_range(of(&|r| r.allocatable_ns), ms),
                median_range(of(&|r| r.qemu_start_to_ready_us.map(|us| us * 1000)), ms),
                median_range(of(&|r| r.entry_latency_us.map(|us| us * 1000)), ms),
                median_range(of(&|r| Some(r.boot_cpu_memmap_ns)), ms),
                // Each kernel's own: Linux's from its counted boot, else "–".
                median_range(of(&|r| r.boot_cpu_pages), pages),
                median_range(of(&|r| r.pages_initialised_at_allocatable), pages),
            );
            // Round i of the entry over round i of `other`, median (min–max).
            let over = |other: &str, f: fn(&Row) -> Option<u64>| -> String {
                let base = series(&results.rows, size, other);
                let ratios: Vec<f64> = rs
                    .iter()
                    .filter_map(|r| {
                        let b = base.iter().find(|b| b.round == r.round)?;
                        let (v, b) = (f(r)? as f64, f(b)? as f64);
                        (b > 0.0).then(|| v / b)
                    })
                    .collect();
                median_range(ratios, |v| format!("{v:.2}"))
            };
            for peer in &peers {
                let _ = write!(
                    line,
                    " {} | {} |",
                    over(peer, |r| Some(r.memmap_ns)),
                    over(peer, |r| r.allocatable_ns),
                );
            }
            if touch {
                let _ = write!(
                    line,
                    " {} |",
                    over(&touch_entry(entry), |r| Some(r.memmap_ns))
                );
            }
            out += &line;
            out.push('\n');
        }
    }
    Some(out)
}

/// Linux's deferred init by its two clocks, a row per boot: its slowest
/// node's line (jiffies: Debian's HZ=250 makes every figure a multiple of
/// 4 ms) and, at printk resolution, SMP's last line to the last node line
/// (an upper bound: the threads' start and wake-up are in it). `None`
/// for a run without Linux boots.
pub fn linux_deferred(results: &Results, plan: &Plan) -> Option<String> {
    let mut out = String::from(
        "\nLinux's deferred init by its own clocks: the slowest node's `deferred pages initialised in` \
         figure (jiffies) and, at printk resolution, `smpboot: Total of N processors activated` to the \
         last node's line (an upper bound)\n\n| size | entry | round | jiffies ms | printk ms |\n|---|---|---|---|---|\n",
    );
    let mut any = false;
    for size in plan.sizes {
        for entry in plan.entries.iter().filter(|e| is_linux(e)) {
            for r in series(&results.rows, size, entry) {
                any = true;
                let _ = writeln!(
                    out,
                    "| {size} | {entry} | {} | {} | {} |",
                    r.round,
                    r.deferred_jiffies_ms
                        .map_or("–".into(), |ms| ms.to_string()),
                    r.deferred_printk_ns
                        .map_or("–".into(), |ns| format!("{:.1}", ns as f64 / 1e6)),
                );
            }
        }
    }
    any.then_some(out)
}

fn row_json(r: &Row) -> Value {
    json!({
        "size": r.size, "mem_mib": r.mem_mib, "kernel": r.kernel, "mode": r.mode,
        "round": r.round, "boot_cpu_memmap_ns": r.boot_cpu_memmap_ns,
        "memmap_ns": r.memmap_ns, "allocatable_ns": r.allocatable_ns,
        "host_rss_mib": r.host_rss_mib, "boot_ns": r.boot_ns,
        "order0_p50_ns": r.order0_p50_ns, "order0_p99_ns": r.order0_p99_ns,
        "present_pages": r.present_pages,
        "pages_initialised_at_allocatable": r.pages_initialised_at_allocatable,
        "pages_initialised": r.pages_initialised, "drain_ns": r.drain_ns,
        "grow_step_p50_ns": r.grow_step_p50_ns, "grow_step_p99_ns": r.grow_step_p99_ns,
        "host_memory": r.host_memory, "entry_latency_us": r.entry_latency_us,
        "qemu_start_to_ready_us": r.qemu_start_to_ready_us, "minor_faults": r.minor_faults,
        "boot_cpu_pages": r.boot_cpu_pages,
        "deferred_jiffies_ms": r.deferred_jiffies_ms, "deferred_printk_ns": r.deferred_printk_ns,
    })
}

/// The rows as JSON: `{"meta": {...}, "rows": [...], "skipped": [...],
/// "warmup": the first warm-up's row or null, "warmups": every warm-up's row
/// with "before"}`.
pub fn to_json(results: &Results, meta: Value) -> Value {
    let rows: Vec<Value> = results.rows.iter().map(row_json).collect();
    let skipped: Vec<Value> = results
        .skipped
        .iter()
        .map(|(size, entry, why)| json!({"size": size, "mode": entry, "why": why}))
        .collect();
    let warmup = results.warmups.first().map(|w| row_json(&w.row));
    let warmups: Vec<Value> = results
        .warmups
        .iter()
        .map(|w| {
            let mut row = row_json(&w.row);
            row["before"] = json!(w.before);
            row
        })
        .collect();
    json!({"meta": meta, "rows": rows, "skipped": skipped, "warmup": warmup, "warmups": warmups})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(mode: &str, round: u32, memmap_ms: u64, ready_ms: u64) -> Row {
        Row {
            size: "16G".into(),
            mem_mib: 16 << 10,
            kernel: if is_linux(mode) { "linux" } else { "memboot" },
            mode: mode.into(),
            round,
            boot_cpu_memmap_ns: 1_000_000,
            memmap_ns: memmap_ms * 1_000_000,
            allocatable_ns: Some(ready_ms * 1_000_000),
            host_rss_mib: None,
            boot_ns: 0,
            order0_p50_ns: None,
            order0_p99_ns: None,
            present_pages: None,
            pages_initialised_at_allocatable: Some(4 << 20),
            pages_initialised: Some(4 << 20),
            drain_ns: None,
            grow_step_p50_ns: None,
            grow_step_p99_ns: None,
            host_memory: Some("cold".into()),
            entry_latency_us: Some(90_000 + u64::from(round)),
            qemu_start_to_ready_us: Some(500_000),
            minor_faults: None,
            boot_cpu_pages: (!is_linux(mode)).then_some(851_839),
            deferred_jiffies_ms: None,
            deferred_printk_ns: None,
        }
    }

    #[test]
    fn each_entry_is_measured_against_touch_with_its_options() {
        assert_eq!(touch_entry("deferred+struct_page=8"), "touch+struct_page=8");
        assert_eq!(
            touch_entry("deferred+struct_page=32+buddy=bitmaps"),
            "touch+struct_page=32+buddy=bitmaps"
        );
        assert_eq!(touch_entry("deferred"), "touch");
        assert_eq!(touch_entry("touch+struct_page=8"), "touch+struct_page=8");
        assert_eq!(touch_entry("linux-6.12"), "touch");
    }

    #[test]
    fn median_and_range() {
        let show = |v: f64| format!("{v}");
        assert_eq!(median_range(vec![3.0, 1.0, 2.0], show), "2 (1–3)");
        assert_eq!(median_range(vec![4.0, 1.0, 2.0, 3.0], show), "2.5 (1–4)");
        assert_eq!(median_range(vec![], show), "–");
    }

    /// With the store floor in the run, each entry over the `touch` of its
    /// own options, round by round.
    #[test]
    fn comparison_over_touch_of_the_same_options() {
        let rows = vec![
            row("deferred+struct_page=8", 1, 11, 30),
            row("deferred+struct_page=8", 2, 12, 30),
            row("touch+struct_page=8", 1, 10, 0),
            row("touch+struct_page=8", 2, 8, 0),
            row("touch", 1, 100, 0),
            row("touch", 2, 100, 0),
        ];
        let results = Results {
            rows,
            skipped: vec![],
            warmups: vec![],
        };
        let sizes = vec!["16G".to_string()];
        let entries: Vec<String> = ["deferred+struct_page=8", "touch+struct_page=8", "touch"]
            .map(String::from)
            .to_vec();
        let plan = Plan {
            sizes: &sizes,
            entries: &entries,
            rounds: 2,
        };
        let text = comparison(&results, &plan).unwrap();
        assert!(text.contains("| memmap × touch |"), "{text}");
        let line = text
            .lines()
            .find(|l| l.contains("| deferred+struct_page=8 |"))
            .unwrap();
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // 11/10 and 12/8, never over 64-byte touch's 100.
        assert_eq!(cells[cells.len() - 2], "1.30 (1.10–1.50)", "{line}");
    }

    /// Ratios pair the rounds (round i over round i), not the medians.
    #[test]
    fn comparison_ratios_round_by_round() {
        let rows = vec![
            row("deferred", 1, 100, 200),
            row("deferred", 2, 300, 200),
            row("deferred", 3, 50, 200),
            row("linux-6.1", 1, 400, 800),
            row("linux-6.1", 2, 300, 400),
            row("linux-6.1", 3, 100, 400),
        ];
        let results = Results {
            rows,
            skipped: vec![],
            warmups: vec![],
        };
        let (sizes, entries) = (
            vec!["16G".to_string()],
            vec!["deferred".to_string(), "linux-6.1".to_string()],
        );
        let plan = Plan {
            sizes: &sizes,
            entries: &entries,
            rounds: 3,
        };
        let text = comparison(&results, &plan).unwrap();
        assert!(text.contains("host memory cold"), "{text}");
        let line = text.lines().find(|l| l.contains("| deferred |")).unwrap();
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // memmap 100/400, 300/300, 50/100: median 0.50, range 0.25–1.00
        // (the ratio of the medians would be 100/300).
        assert_eq!(cells[cells.len() - 3], "0.50 (0.25–1.00)", "{line}");
        // ready 200/800, 200/400, 200/400.
        assert_eq!(cells[cells.len() - 2], "0.50 (0.25–0.50)", "{line}");
        assert_eq!(cells[4], "100.0 (50.0–300.0)", "{line}");
        // Linux's boot-CPU pages are its own (none here: no counted boot),
        // never memboot's.
        let linux = text.lines().find(|l| l.contains("| linux-6.1 |")).unwrap();
        let linux_cells: Vec<&str> = linux.split('|').map(str::trim).collect();
        assert_eq!(linux_cells[9], "–", "{linux}");
        assert!(!linux.contains("851839"), "{linux}");
        // Runs from before the states have no comparison.
        let mut old = results;
        old.rows.iter_mut().for_each(|r| r.host_memory = None);
        assert_eq!(comparison(&old, &plan), None);
    }
}
