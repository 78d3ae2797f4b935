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
//! Logs are named `SIZE-ENTRY-ROUND.log` (ENTRY: a memmap mode, or `linux`);
//! an entry that was not booted at a size (its struct pages do not fit the
//! host) has `SIZE-ENTRY.skip` holding the reason instead.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::{json, Value};

use crate::linux_log;

/// One boot's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub size: String,
    pub mem_mib: u64,
    /// "memboot" or "linux".
    pub kernel: &'static str,
    /// The memmap mode, or "linux".
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

fn key(summary: &Value, name: &str) -> Result<u64, String> {
    summary[name]
        .as_u64()
        .ok_or(format!("summary has no number '{name}'"))
}

/// A key that only some boots have a value for: absent (an older summary)
/// or 0 (not measured in this mode) is `None`.
fn measured(summary: &Value, name: &str) -> Option<u64> {
    summary[name].as_u64().filter(|&v| v > 0)
}

/// A memboot boot's row from its log.
fn memboot_row(text: &str, size: &str, mode: &str, round: u32) -> Result<Row, String> {
    // The last summary line: a boot whose first was cut writes a whole one
    // after it (`log::summary_json`).
    let s = crate::log::summary(text).map_err(|e| e.to_string())?;
    if s["status"] != "ok" {
        return Err(format!("the boot failed: status {}", s["status"]));
    }
    let boot_cpu = key(&s, "memmap_boot_ns")?;
    Ok(Row {
        size: size.to_string(),
        mem_mib: size_mib(size)?,
        kernel: "memboot",
        mode: mode.to_string(),
        round,
        boot_cpu_memmap_ns: boot_cpu,
        memmap_ns: boot_cpu + key(&s, "buddy_eager_ns")? + key(&s, "deferred_ns")?,
        allocatable_ns: measured(&s, "allocatable_ns"),
        host_rss_mib: crate::host_peak_rss_mib(text),
        boot_ns: key(&s, "total_ns")?,
        order0_p50_ns: order0(&s, "alloc_p50_ns"),
        order0_p99_ns: order0(&s, "alloc_p99_ns"),
        present_pages: measured(&s, "present_pages"),
        pages_initialised_at_allocatable: measured(&s, "pages_initialised_at_allocatable"),
        pages_initialised: measured(&s, "pages_initialised"),
        drain_ns: measured(&s, "drain_ns"),
        grow_step_p50_ns: measured(&s, "grow_step_p50_ns"),
        grow_step_p99_ns: measured(&s, "grow_step_p99_ns"),
    })
}

/// The order-0 entry of a per-order summary array (`alloc_p99_ns`, …),
/// found by `alloc_orders`.
fn order0(summary: &Value, array: &str) -> Option<u64> {
    let orders = summary["alloc_orders"].as_array()?;
    let i = orders.iter().position(|o| o.as_u64() == Some(0))?;
    if key(summary, "alloc_test_pages").ok()? == 0 {
        return None; // alloc_test=0: the arrays hold no measurement
    }
    summary[array][i].as_u64()
}

/// A Linux boot's row from its log; `entry` is `linux` or a variant
/// (`linux-pvh`, `linux-bzimage+nokaslr`, … tests/bench.sh's boot_args).
fn linux_row(text: &str, size: &str, entry: &str, round: u32) -> Result<Row, String> {
    let boot = linux_log::parse(text).map_err(|e| e.to_string())?;
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
    })
}

/// Is `entry` a Linux boot (`linux`, `linux-pvh`, `linux-bzimage+…`)?
pub fn is_linux(entry: &str) -> bool {
    entry == "linux" || entry.starts_with("linux-") || entry.starts_with("linux+")
}

/// One log → one row; a Linux entry ([`is_linux`]) reads a Linux log.
pub fn row_from_log(text: &str, size: &str, entry: &str, round: u32) -> Result<Row, String> {
    if is_linux(entry) {
        linux_row(text, size, entry, round)
    } else {
        memboot_row(text, size, entry, round)
    }
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
                let row = row_from_log(&text, size, entry, round)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
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

/// The table's columns after `size | kernel | mode`, in order.
pub const COLUMNS: [&str; 12] = [
    "memmap ms: each round → mean",
    "memory ready (allocatable) ms: each round → mean",
    "struct pages written by ready",
    "struct pages written by the end",
    "drain ms",
    "boot-CPU memmap ms",
    "growth step p50 / p99 ns",
    "host RSS MiB",
    "order-0 p50 / p99 ns",
    "memmap × Linux memmap",
    "ready × Linux ready",
    "memmap × touch memmap",
];

/// One table line for (size, entry).
fn table_line(rows: &[Row], size: &str, entry: &str) -> String {
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
    format!(
        "| {size} | {} | {entry} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
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
        ratio(mean_of(entry, memmap), mean_of("linux", memmap)),
        ratio(
            mean_of(entry, |r| r.allocatable_ns),
            mean_of("linux", |r| r.allocatable_ns)
        ),
        ratio(mean_of(entry, memmap), mean_of("touch", memmap)),
    )
}

/// The markdown table (with a heading line saying how it was run).
pub fn table(results: &Results, plan: &Plan, heading: &str) -> String {
    let mut out = format!("{heading}\n\n");
    out += "| size | kernel | mode |";
    for c in COLUMNS {
        out += &format!(" {c} |");
    }
    out += "\n|---|---|---|";
    out += &"---|".repeat(COLUMNS.len());
    out.push('\n');
    for size in plan.sizes {
        for entry in plan.entries {
            if !series(&results.rows, size, entry).is_empty() {
                out += &table_line(&results.rows, size, entry);
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
